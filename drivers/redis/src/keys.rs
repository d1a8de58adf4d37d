//! The key schema: every key a stream's scripts touch, derived from the stream's name so that
//! all of them share its Redis Cluster hash slot (see the crate docs' key table).

use crate::error::RedisConfigError;
use crate::slot::{hash_tag, key_slot};

/// The prefix of every key that belongs to `stream`, in the stream's Redis Cluster hash slot:
///
/// - the stream itself when it has a hash tag (`{app}:orders`): a suffix changes neither the
///   first `{` nor the first `}` after it, so every `{app}:orders…` key hashes by `app`;
/// - else `{stream}` when the name holds no `}` (`orders` → `{orders}`): the tag is then the
///   whole name, and Redis hashes a name without a tag whole, so both hash the same bytes;
/// - else nothing will do: a tag cannot hold a `}`, so no key derived from the name hashes the
///   name's bytes (`a}b` and `odd{}name` are hashed whole; `{a}b}…` would hash by `a`).
///
/// The first two are the keys every earlier version derived, so existing data stays put.
pub(crate) fn slot_prefix(stream: &str) -> Result<String, RedisConfigError> {
    if hash_tag(stream.as_bytes()).is_some() {
        Ok(stream.to_string())
    } else if !stream.contains('}') {
        Ok(format!("{{{stream}}}"))
    } else {
        let legacy_key = format!("{{{stream}}}:dead");
        Err(RedisConfigError::UntaggableStream {
            stream: stream.to_string(),
            stream_slot: key_slot(stream.as_bytes()),
            legacy_slot: key_slot(legacy_key.as_bytes()),
            legacy_key,
        })
    }
}

/// The prefix under which a stream's keys are found, for reading only: [`slot_prefix`], or
/// for a stream no slot-safe key derives from, `{stream}`, where earlier versions put them.
pub(crate) fn stored_prefix(stream: &str) -> String {
    slot_prefix(stream).unwrap_or_else(|_| format!("{{{stream}}}"))
}

/// `key`, checked to be in `stream`'s cluster slot.
pub(crate) fn in_stream_slot(
    stream: &str,
    what: &'static str,
    key: String,
) -> Result<String, RedisConfigError> {
    let stream_slot = key_slot(stream.as_bytes());
    let slot = key_slot(key.as_bytes());
    if slot == stream_slot {
        Ok(key)
    } else {
        Err(RedisConfigError::CrossSlot {
            what,
            key,
            key_slot: slot,
            stream: stream.to_string(),
            stream_slot,
        })
    }
}

/// The dead-letter stream of `stream` unless configured otherwise: in the stream's hash slot.
pub(crate) fn default_dead_letter_key(stream: &str) -> Result<String, RedisConfigError> {
    let key = format!("{}:dead", slot_prefix(stream)?);
    in_stream_slot(stream, "dead-letter stream", key)
}

/// The keys of a stream's delayed and deduplicated messages, all in the stream's hash slot
/// (`orders` → `{orders}:delayed`, ...), so one script can touch them with the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DelayedKeys {
    /// Sorted set: score = due time (Unix ms, the server's clock), member = `<seq>:<payload>`.
    pub(crate) delayed: String,
    /// Counter giving each delayed message its unique `<seq>`.
    pub(crate) seq: String,
    /// Stream of one entry, appended to when a newly delayed message becomes the earliest: an
    /// idle consumer blocks on it too, so it learns the new due time.
    pub(crate) wake: String,
    /// Prefix of the deduplication keys (`<prefix><key>` holds the first message's id).
    pub(crate) dedupe: String,
}

impl DelayedKeys {
    /// The keys of `stream`; an error when they cannot share its slot.
    pub(crate) fn of(stream: &str) -> Result<Self, RedisConfigError> {
        let keys = Self::under(&slot_prefix(stream)?);
        in_stream_slot(stream, "delayed set", keys.delayed.clone())?;
        in_stream_slot(stream, "delayed counter", keys.seq.clone())?;
        in_stream_slot(stream, "wake stream", keys.wake.clone())?;
        // The prefix carries the tag, so every `<prefix><key>` is in the prefix's slot.
        in_stream_slot(stream, "deduplication keys", keys.dedupe.clone())?;
        Ok(keys)
    }

    /// Where `stream`'s keys are found, for reading only (see [`stored_prefix`]).
    pub(crate) fn stored(stream: &str) -> Self {
        Self::under(&stored_prefix(stream))
    }

    fn under(prefix: &str) -> Self {
        Self {
            delayed: format!("{prefix}:delayed"),
            seq: format!("{prefix}:delayed:seq"),
            wake: format!("{prefix}:delayed:wake"),
            dedupe: format!("{prefix}:dedupe:"),
        }
    }
}

/// The tenure hash of `group` on `stream` (see the crate docs' key table).
pub(crate) fn tenure_key(stream: &str, group: &str) -> Result<String, RedisConfigError> {
    let key = format!("{}:tenure:{}", slot_prefix(stream)?, group);
    in_stream_slot(stream, "tenure hash", key)
}

/// A command queue's keys (feature `commands`), per shard: `tag` is the shard's hash tag, `{q}`
/// for an unsharded queue `q` and `{q:i}` for shard `i` of several. Every key of a shard
/// carries its tag, so the store's scripts touch one slot (see `commands`' module docs).
#[cfg(feature = "commands")]
pub(crate) fn command_stream_key(tag: &str) -> String {
    format!("leasehold:{tag}:stream")
}

/// The hash holding command `id`'s state (with `id` empty: the prefix of them all).
#[cfg(feature = "commands")]
pub(crate) fn command_state_key(tag: &str, id: &str) -> String {
    format!("leasehold:{tag}:state:{id}")
}

/// The index of the commands in `status` (a sorted set of ids).
#[cfg(feature = "commands")]
pub(crate) fn command_status_key(tag: &str, status: leasehold_commands::Status) -> String {
    format!("leasehold:{tag}:status:{status}")
}

/// The pub/sub channel a queue's cancels are announced on: one for all shards, as a `PUBLISH`
/// reaches every node of a cluster.
#[cfg(feature = "commands")]
pub(crate) fn command_cancels_channel(queue: &str) -> String {
    format!("leasehold:{{{queue}}}:cancels")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{PublisherConfig, RedisConfig};

    fn slot(key: &str) -> u16 {
        key_slot(key.as_bytes())
    }

    #[test]
    fn dead_letter_key_shares_the_stream_slot() {
        let config = |stream: &str| RedisConfig::new("redis://x", stream, "g");
        let dead = |stream: &str| config(stream).dead_letter_key();
        // Names that worked before keep their keys.
        assert_eq!(dead("orders").unwrap(), "{orders}:dead");
        assert_eq!(dead("{app}:orders").unwrap(), "{app}:orders:dead");
        assert_eq!(dead("a{b").unwrap(), "{a{b}:dead");
        assert_eq!(dead("x}{a}").unwrap(), "x}{a}:dead");
        for stream in ["orders", "{app}:orders", "a{b", "x}{a}", "{", "é{"] {
            assert_eq!(slot(&dead(stream).unwrap()), slot(stream), "{stream}");
        }
        // A `}` without a tag: no derived key shares the slot.
        for stream in ["a}b", "odd{}name", "}", "{}"] {
            let err = dead(stream).unwrap_err();
            assert!(
                matches!(&err, RedisConfigError::UntaggableStream { stream: s, .. } if s == stream),
                "{err:?}"
            );
            assert!(
                err.to_string().contains(&format!("{{{stream}}}:dead")),
                "{err}"
            );
            assert_eq!(config(stream).validate(), Err(err.clone()));
            assert_eq!(
                PublisherConfig::new("redis://x", stream).validate(),
                Err(err)
            );
        }
    }

    #[test]
    fn delayed_keys_share_the_stream_slot() {
        let keys = DelayedKeys::of("orders").unwrap();
        assert_eq!(keys.delayed, "{orders}:delayed");
        assert_eq!(keys.seq, "{orders}:delayed:seq");
        assert_eq!(keys.wake, "{orders}:delayed:wake");
        assert_eq!(keys.dedupe, "{orders}:dedupe:");
        assert_eq!(
            DelayedKeys::of("{app}:orders").unwrap().delayed,
            "{app}:orders:delayed"
        );
        assert!(matches!(
            DelayedKeys::of("a}b"),
            Err(RedisConfigError::UntaggableStream { .. })
        ));
        // Reading finds what earlier versions wrote.
        assert_eq!(DelayedKeys::stored("a}b").wake, "{a}b}:delayed:wake");
        assert_eq!(DelayedKeys::stored("orders"), keys);
    }

    /// Every name from an alphabet rich in braces: its keys are in its slot, or it is refused
    /// exactly when it holds a `}` without a tag.
    #[test]
    fn derived_keys_share_the_slot_of_every_name() {
        let alphabet = ["{", "}", "a", ":", "é", "\u{1F600}"];
        let mut names = vec![String::new()];
        for _ in 0..5 {
            let longer: Vec<String> = names
                .iter()
                .flat_map(|name| alphabet.iter().map(move |c| format!("{name}{c}")))
                .collect();
            names.extend(longer);
        }
        names.retain(|name| !name.is_empty());
        names.sort();
        names.dedup();
        for stream in &names {
            let untaggable = hash_tag(stream.as_bytes()).is_none() && stream.contains('}');
            match (DelayedKeys::of(stream), default_dead_letter_key(stream)) {
                (Ok(keys), Ok(dead)) => {
                    assert!(!untaggable, "{stream:?}");
                    for key in [&dead, &keys.delayed, &keys.seq, &keys.wake] {
                        assert_eq!(slot(key), slot(stream), "{stream:?}: {key:?}");
                    }
                    let dedupe = format!("{}some{{key}}", keys.dedupe);
                    assert_eq!(slot(&dedupe), slot(stream), "{stream:?}");
                }
                (Err(a), Err(b)) => {
                    assert!(untaggable, "{stream:?}: {a}");
                    assert_eq!(a, b);
                    assert!(matches!(a, RedisConfigError::UntaggableStream { .. }));
                }
                other => panic!("{stream:?}: {other:?}"),
            }
        }
    }
}
