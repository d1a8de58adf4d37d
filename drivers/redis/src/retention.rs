//! What happens to a stream's entries once they are consumed.
//!
//! A stream may have several consumer groups (fan-out: `billing` and `emails` both read
//! `orders`), and an entry one group acked may still be waiting for another. So an entry is
//! removed only when **every** group of the stream is done with it: each group has delivered
//! it and none holds it pending. The ack script finds that point from `XINFO GROUPS` (each
//! group's last-delivered id) and each group's oldest pending entry, and trims below it with
//! one `XTRIM MINID`, which drops whole stream nodes. It never deletes single entries above a
//! group's position (`XDEL`): those tombstones would make `XINFO GROUPS` report a group's lag as
//! unknown, and a group that had not read them yet would never see them.
//!
//! The trade-offs: a group nobody consumes any more holds every entry from its position on
//! (delete it with `XGROUP DESTROY`); a long-running job holds the entries behind it until it is
//! acked (they are consumed, but a trim cannot pass it); and a group created after entries were
//! trimmed starts at the oldest entry kept (declare a stream's groups on its producer with
//! [`PublisherConfig::groups`](crate::PublisherConfig::groups), or keep a history for late
//! groups with [`Retention::keep`]). [`Retention::DeleteOnAck`] deletes each entry when it is acked, as earlier versions
//! did, for a stream only one group reads.

use std::time::Duration;

use leasehold_core::MAX_DURATION;

use crate::error::RedisConfigError;

/// What a stream keeps of the entries its consumer groups consumed
/// ([`RedisConfig::retention`](crate::RedisConfig::retention)). Whatever the policy, an entry
/// some group of the stream has not delivered and acked is never removed by leasehold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Retention {
    /// Remove the entries every group of the stream has delivered and acked (the default).
    /// Safe for any number of groups; the stream holds what some group still needs.
    #[default]
    Consumed,
    /// Keep consumed entries as a history, for groups created later (a new group starts at the
    /// stream's oldest entry) and for inspection: remove a consumed entry only once it is
    /// beyond `max_len` (the stream's newest `max_len` entries are kept) or older than
    /// `max_age` (by its id's time, on the server's clock). Neither set: keep every entry.
    ///
    /// An age cap costs what [`Retention::Consumed`] does (one `XTRIM MINID`). A length cap
    /// costs Redis about 9 µs per entry it trims (measured: a drain 5.4× the raw loop's Redis
    /// time against 1.6×): the only way to find the entry `max_len` from the end is to read
    /// the entries before it.
    #[non_exhaustive]
    Keep {
        /// Entries beyond the newest this many may go, once consumed.
        max_len: Option<u64>,
        /// Entries older than this may go, once consumed.
        max_age: Option<Duration>,
    },
    /// Delete each entry as soon as this group acks it (`XDEL`, or one `XTRIM` below the
    /// group's oldest pending entry), so memory holds only pending entries even behind a
    /// long-running job; but an entry deleted behind a pending one leaves a tombstone, and
    /// `XINFO GROUPS` then reports the group's lag as unknown until the pending one is acked.
    /// **Only for a stream this one group reads**: `connect` refuses it
    /// when the stream has another group, and a backend that sees a second group appear
    /// warns once and goes on as [`Retention::Consumed`].
    DeleteOnAck,
}

impl Retention {
    /// [`Retention::Keep`]: a history of consumed entries, capped by length and/or age.
    pub fn keep(max_len: Option<u64>, max_age: Option<Duration>) -> Self {
        Self::Keep { max_len, max_age }
    }

    /// Checks the caps.
    pub(crate) fn validate(&self) -> Result<(), RedisConfigError> {
        if let Self::Keep { max_len, max_age } = *self {
            if max_len == Some(0) {
                return Err(RedisConfigError::ZeroMaxLen);
            }
            if let Some(age) = max_age {
                if age < Duration::from_millis(1) || age > MAX_DURATION {
                    return Err(RedisConfigError::MaxAge(age));
                }
            }
        }
        Ok(())
    }

    /// The scripts' arguments: mode (`c`onsumed, `k`eep, `d`elete on ack), `max_len` and
    /// `max_age` in ms (`""`: none).
    pub(crate) fn args(&self) -> [String; 3] {
        let none = String::new;
        match *self {
            Self::Consumed => ["c".into(), none(), none()],
            Self::Keep { max_len, max_age } => [
                "k".into(),
                max_len.map(|n| n.to_string()).unwrap_or_default(),
                max_age
                    .map(|age| age.as_millis().to_string())
                    .unwrap_or_default(),
            ],
            Self::DeleteOnAck => ["d".into(), none(), none()],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_are_checked() {
        assert_eq!(Retention::default(), Retention::Consumed);
        assert!(Retention::keep(None, None).validate().is_ok());
        assert_eq!(
            Retention::keep(Some(0), None).validate(),
            Err(RedisConfigError::ZeroMaxLen)
        );
        assert_eq!(
            Retention::keep(None, Some(Duration::ZERO)).validate(),
            Err(RedisConfigError::MaxAge(Duration::ZERO))
        );
        assert_eq!(
            Retention::keep(Some(5), Some(Duration::from_secs(2))).args(),
            ["k".to_string(), "5".into(), "2000".into()]
        );
        assert_eq!(Retention::DeleteOnAck.args()[0], "d");
    }
}
