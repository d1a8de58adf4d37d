//! Where the stream lives and how the backend talks to it.

use std::time::Duration;

use leasehold_core::MAX_DURATION;

use crate::conn::Servers;
use crate::error::RedisConfigError;
use crate::keys::{default_dead_letter_key, in_stream_slot, tenure_key, DelayedKeys};
use crate::replicas::WaitReplicas;
use crate::retention::Retention;
#[cfg(test)]
use crate::slot::key_slot;

/// How a fenced operation (renew, ack, release) makes sure this consumer still holds each
/// lease with its fence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FenceCheck {
    /// Read each lease's owner and delivery count back (one ranged `XPENDING` per batch) and
    /// compare. Holds whatever else consumes the group, consumers that are not leasehold
    /// workers too: a raw `XCLAIM` or `XAUTOCLAIM` is noticed. The default.
    #[default]
    PerLease,
    /// Trust the consumer's tenure: leasehold workers change a consumer's tenure whenever they
    /// take an entry from it, so while it is the one a batch was delivered under, every lease
    /// of the batch is held and nothing is read back (otherwise the batch is checked per
    /// lease). About half the Redis time of a drain, and a renew costs a plain
    /// `XCLAIM … JUSTID`. **Only for a group whose every consumer is a leasehold worker**: an
    /// entry taken by anything else (a consumer of another library, `XCLAIM` by hand) leaves
    /// the tenure as it was, and the late ack of the worker it was taken from would remove
    /// the new owner's delivery. After such a takeover by hand, delete the group's tenure hash
    /// (`{stream}:tenure:<group>`): every worker then checks per lease until its next fetch.
    Tenure,
}

/// Configuration of a [`RedisBackend`](crate::RedisBackend): one stream, one consumer group,
/// one consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisConfig {
    /// What a publisher to the stream needs too: URL, stream, field, trim length, timeout.
    pub(crate) target: PublisherConfig,
    pub(crate) group: String,
    pub(crate) consumer: Option<String>,
    pub(crate) claim_timeout: Duration,
    pub(crate) dead_letter_stream: Option<String>,
    pub(crate) reap_idle_consumers: Option<Duration>,
    pub(crate) fence_check: FenceCheck,
    pub(crate) retention: Retention,
}

impl RedisConfig {
    /// A stream on `servers`, consumed by consumer group `group`. `servers` is a URL
    /// (`redis://[user:password@]host:port/db`, or `rediss://` with the `tls` feature) for one
    /// server, [`Servers::cluster`] for a Redis Cluster, or [`Servers::sentinel`] for a master
    /// behind Redis Sentinel. Defaults: claim timeout 60 s, payload field `data`, a unique
    /// consumer name, dead letters in `{stream}:dead`.
    pub fn new(
        servers: impl Into<Servers>,
        stream: impl Into<String>,
        group: impl Into<String>,
    ) -> Self {
        Self {
            target: PublisherConfig::new(servers, stream),
            group: group.into(),
            consumer: None,
            claim_timeout: Duration::from_secs(60),
            dead_letter_stream: None,
            reap_idle_consumers: Some(Duration::from_secs(24 * 3600)),
            fence_check: FenceCheck::PerLease,
            retention: Retention::Consumed,
        }
    }

    /// This worker's consumer name. It must be unique among live workers: two workers with one
    /// name share a pending list. Default: `{hostname}-{pid}-{random}`.
    #[must_use]
    pub fn consumer(mut self, name: impl Into<String>) -> Self {
        self.consumer = Some(name.into());
        self
    }

    /// Idle time after which another consumer may take a lease (XAUTOCLAIM min-idle). Must
    /// equal the worker's `claim_timeout`.
    #[must_use]
    pub fn claim_timeout(mut self, timeout: Duration) -> Self {
        self.claim_timeout = timeout;
        self
    }

    /// The entry field holding the payload (default `data`, as lib-data-stream-redis writes).
    #[must_use]
    pub fn field(mut self, field: impl Into<String>) -> Self {
        self.target = self.target.field(field);
        self
    }

    /// The dead-letter stream. Default: `{stream}:dead` (`{app}:orders:dead` for a stream with
    /// a hash tag), in the stream's cluster slot. One given here must be in that slot too
    /// (dead-lettering is one script over both keys): `connect` refuses it otherwise.
    #[must_use]
    pub fn dead_letter_stream(mut self, key: impl Into<String>) -> Self {
        self.dead_letter_stream = Some(key.into());
        self
    }

    /// Trim the stream to about this many entries on publish (`XADD MAXLEN ~`) and when a fetch
    /// moves due delayed messages into it: a hard cap for a stream that may lose its oldest
    /// entries, consumed or not. For a cap that never removes an entry some group still needs,
    /// see [`Retention::keep`].
    #[must_use]
    pub fn max_len(mut self, len: usize) -> Self {
        self.target = self.target.max_len(len);
        self
    }

    /// Remove consumers with no pending entries idle this long (dead workers), or never
    /// (`None`). Default: one day.
    #[must_use]
    pub fn reap_idle_consumers(mut self, idle: Option<Duration>) -> Self {
        self.reap_idle_consumers = idle;
        self
    }

    /// Bound on one command's response (the blocking read has its own, from the fetch's wait).
    #[must_use]
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.target = self.target.command_timeout(timeout);
        self
    }

    /// How fenced operations check the leases they act on (see [`FenceCheck`]). Default:
    /// [`FenceCheck::PerLease`], which holds whatever else consumes the group.
    #[must_use]
    pub fn fence_check(mut self, check: FenceCheck) -> Self {
        self.fence_check = check;
        self
    }

    /// What the stream keeps of consumed entries (see [`Retention`]). Default:
    /// [`Retention::Consumed`], which removes an entry once every consumer group of the stream
    /// has delivered and acked it, and so is safe for any number of groups.
    #[must_use]
    pub fn retention(mut self, retention: Retention) -> Self {
        self.retention = retention;
        self
    }

    /// Every write waits until at least `replicas` replicas acknowledged it, up to `timeout`
    /// (`WAIT`, pipelined right after the write on the same connection), and fails as a
    /// transient error when fewer did: the fetch (whose entries are then left pending, to be
    /// reclaimed after the claim timeout), renew, ack, release and dead-letter, and
    /// publishing. Off by default: Redis replicates asynchronously, so a failover can lose a
    /// write the old master acknowledged (a fetch, an ack, a renew); with this on, a write
    /// that succeeded is on `replicas` replicas. It costs a wait on every write until `replicas`
    /// replicas have it. `replicas` at least 1; `timeout` at least 1 ms and below the command
    /// timeout.
    #[must_use]
    pub fn wait_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.target = self.target.wait_replicas(replicas, timeout);
        self
    }

    /// Where the stream's Redis runs.
    pub fn servers(&self) -> &Servers {
        &self.target.servers
    }

    /// A publisher's configuration for this stream, with the same servers, payload field, trim
    /// length and command timeout.
    pub fn publisher(&self) -> PublisherConfig {
        self.target.clone()
    }

    /// Checks the configuration without connecting, as [`RedisBackend::connect`] does first:
    /// names, durations, and that every key a script touches with the stream (dead letters,
    /// delayed messages) is in the stream's cluster slot.
    ///
    /// [`RedisBackend::connect`]: crate::RedisBackend::connect
    ///
    /// # Errors
    ///
    /// The first thing that cannot work.
    pub fn validate(&self) -> Result<(), RedisConfigError> {
        self.target.validate()?;
        if self.group.is_empty() {
            return Err(RedisConfigError::Empty("group"));
        }
        if self.consumer.as_deref() == Some("") {
            return Err(RedisConfigError::Empty("consumer"));
        }
        if self.claim_timeout < Duration::from_millis(1) || self.claim_timeout > MAX_DURATION {
            return Err(RedisConfigError::ClaimTimeout(self.claim_timeout));
        }
        self.retention.validate()?;
        self.dead_letter_key().map(drop)
    }

    /// The dead-letter stream's key; an error unless it is in the stream's cluster slot.
    pub(crate) fn dead_letter_key(&self) -> Result<String, RedisConfigError> {
        match &self.dead_letter_stream {
            Some(key) if key.is_empty() => Err(RedisConfigError::Empty("dead_letter_stream")),
            Some(key) => in_stream_slot(&self.target.stream, "dead_letter_stream", key.clone()),
            None => default_dead_letter_key(&self.target.stream),
        }
    }

    /// The group's tenure hash (`orders`, group `g` → `{orders}:tenure:g`): each consumer's
    /// tenure, which the fenced scripts vouch for deliveries with (see the backend's docs).
    pub(crate) fn tenure_key(&self) -> Result<String, RedisConfigError> {
        tenure_key(&self.target.stream, &self.group)
    }
}

/// Configuration of a [`RedisPublisher`](crate::RedisPublisher): one stream, no consumer group.
#[derive(Clone, PartialEq, Eq)]
pub struct PublisherConfig {
    pub(crate) servers: Servers,
    pub(crate) stream: String,
    pub(crate) field: String,
    pub(crate) max_len: Option<usize>,
    pub(crate) command_timeout: Duration,
    pub(crate) wait: Option<WaitReplicas>,
    pub(crate) groups: Vec<String>,
}

/// Leaves the URL out: it may hold a password.
impl std::fmt::Debug for PublisherConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PublisherConfig")
            .field("stream", &self.stream)
            .field("field", &self.field)
            .field("max_len", &self.max_len)
            .field("command_timeout", &self.command_timeout)
            .field("wait_replicas", &self.wait)
            .field("groups", &self.groups)
            .finish_non_exhaustive()
    }
}

impl PublisherConfig {
    /// Publishing to `stream` on `servers` (a URL, or [`Servers::cluster`] /
    /// [`Servers::sentinel`], as [`RedisConfig::new`] takes them). Defaults: payload field
    /// `data`, no trimming, command timeout 5 s.
    pub fn new(servers: impl Into<Servers>, stream: impl Into<String>) -> Self {
        Self {
            servers: servers.into(),
            stream: stream.into(),
            field: "data".into(),
            max_len: None,
            command_timeout: Duration::from_secs(5),
            wait: None,
            groups: Vec::new(),
        }
    }

    /// Consumer groups that must receive every message published from now on, whether or not
    /// their workers have started: [`RedisPublisher::connect`] creates each one missing (from
    /// the stream's start, as a worker would), so no other group's acks remove an entry before
    /// it is read. Declare here the groups of a fan-out stream whose services may start later.
    ///
    /// [`RedisPublisher::connect`]: crate::RedisPublisher::connect
    #[must_use]
    pub fn groups<I, S>(mut self, groups: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.groups = groups.into_iter().map(Into::into).collect();
        self
    }

    /// The entry field holding the payload (default `data`): the consumers'
    /// [`RedisConfig::field`].
    #[must_use]
    pub fn field(mut self, field: impl Into<String>) -> Self {
        self.field = field.into();
        self
    }

    /// Trim the stream to about this many entries on publish (`XADD MAXLEN ~`), delayed
    /// messages included when they are due: a hard cap, which removes the oldest entries
    /// whether or not every consumer group has read them (the consumers' [`Retention`] never
    /// does).
    #[must_use]
    pub fn max_len(mut self, len: usize) -> Self {
        self.max_len = Some(len);
        self
    }

    /// Bound on one command's response.
    #[must_use]
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout;
        self
    }

    /// Every publish waits until at least `replicas` replicas acknowledged it, as
    /// [`RedisConfig::wait_replicas`] says; a publish that fails so was appended on the master
    /// all the same, and publishing it again may append it twice (a deduplication key makes
    /// the retry safe).
    #[must_use]
    pub fn wait_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.wait = Some(WaitReplicas::new(replicas, timeout));
        self
    }

    /// The `wait_replicas` setting, if on.
    pub fn replicas_waited_for(&self) -> Option<WaitReplicas> {
        self.wait
    }

    /// Checks the configuration without connecting, as [`RedisPublisher::connect`] does
    /// first: names, durations, and that the delayed and deduplication keys can be placed in
    /// the stream's cluster slot.
    ///
    /// [`RedisPublisher::connect`]: crate::RedisPublisher::connect
    ///
    /// # Errors
    ///
    /// The first thing that cannot work.
    pub fn validate(&self) -> Result<(), RedisConfigError> {
        if self.command_timeout.is_zero() {
            return Err(RedisConfigError::ZeroCommandTimeout);
        }
        self.servers.validate()?;
        for (what, value) in [("stream", &self.stream), ("field", &self.field)] {
            if value.is_empty() {
                return Err(RedisConfigError::Empty(what));
            }
        }
        if self.max_len == Some(0) {
            return Err(RedisConfigError::ZeroMaxLen);
        }
        if let Some(wait) = &self.wait {
            wait.validate(self.command_timeout)?;
        }
        if self.groups.iter().any(String::is_empty) {
            return Err(RedisConfigError::Empty("group"));
        }
        for group in &self.groups {
            tenure_key(&self.stream, group)?;
        }
        DelayedKeys::of(&self.stream).map(drop)
    }

    /// The trim length as the scripts take it: `""` for none.
    pub(crate) fn max_len_arg(&self) -> String {
        self.max_len.map(|n| n.to_string()).unwrap_or_default()
    }

    /// The `XADD` that appends `payload` to the stream, trimmed to about `max_len` entries:
    /// what the publisher pipelines and what a consumer's own publish sends.
    pub(crate) fn xadd(&self, payload: &[u8]) -> redis::Cmd {
        let mut cmd = redis::cmd("XADD");
        cmd.arg(&self.stream);
        if let Some(len) = self.max_len {
            cmd.arg("MAXLEN").arg("~").arg(len);
        }
        cmd.arg("*").arg(&self.field).arg(payload);
        cmd
    }
}

/// A consumer name unique to this process and instance.
pub(crate) fn unique_consumer_name() -> String {
    use std::hash::{BuildHasher, RandomState};
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "worker".into());
    let random = RandomState::new().hash_one(std::time::SystemTime::now()) & 0xffff_ffff;
    format!("{host}-{}-{random:08x}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(key: &str) -> u16 {
        key_slot(key.as_bytes())
    }

    #[test]
    fn an_explicit_dead_letter_stream_must_share_the_stream_slot() {
        let config =
            |dead: &str| RedisConfig::new("redis://x", "orders", "g").dead_letter_stream(dead);
        assert_eq!(
            config("{orders}:failed").dead_letter_key().unwrap(),
            "{orders}:failed"
        );
        assert_eq!(config("{orders}:failed").validate(), Ok(()));
        let err = config("elsewhere").validate().unwrap_err();
        assert_eq!(
            err,
            RedisConfigError::CrossSlot {
                what: "dead_letter_stream",
                key: "elsewhere".into(),
                key_slot: slot("elsewhere"),
                stream: "orders".into(),
                stream_slot: slot("orders"),
            }
        );
        let message = err.to_string();
        for part in [
            "\"elsewhere\"",
            "\"orders\"",
            &slot("elsewhere").to_string(),
        ] {
            assert!(message.contains(part), "{message}");
        }
        assert_eq!(
            config("").validate(),
            Err(RedisConfigError::Empty("dead_letter_stream"))
        );
    }

    #[test]
    fn bad_publisher_configs_are_errors() {
        let ok = PublisherConfig::new("redis://x", "s");
        assert_eq!(ok.validate(), Ok(()));
        assert_eq!(ok.field, "data");
        assert_eq!(
            PublisherConfig::new("redis://x", "").validate(),
            Err(RedisConfigError::Empty("stream"))
        );
        assert_eq!(
            ok.clone().field("").validate(),
            Err(RedisConfigError::Empty("field"))
        );
        assert_eq!(
            ok.clone().max_len(0).validate(),
            Err(RedisConfigError::ZeroMaxLen)
        );
        assert_eq!(
            ok.clone().command_timeout(Duration::ZERO).validate(),
            Err(RedisConfigError::ZeroCommandTimeout)
        );
        let debug = format!("{:?}", PublisherConfig::new("redis://:secret@x", "s"));
        assert!(!debug.contains("secret"), "{debug}");
    }

    #[test]
    fn bad_configs_are_errors() {
        let ok = RedisConfig::new("redis://x", "s", "g");
        assert_eq!(ok.validate(), Ok(()));
        assert_eq!(
            RedisConfig::new("redis://x", "", "g").validate(),
            Err(RedisConfigError::Empty("stream"))
        );
        assert_eq!(
            ok.clone().claim_timeout(Duration::ZERO).validate(),
            Err(RedisConfigError::ClaimTimeout(Duration::ZERO))
        );
        assert_eq!(
            ok.clone().max_len(0).validate(),
            Err(RedisConfigError::ZeroMaxLen)
        );
        assert_eq!(
            ok.consumer("").validate(),
            Err(RedisConfigError::Empty("consumer"))
        );
    }

    #[test]
    fn bad_wait_replicas_are_errors() {
        let ok = RedisConfig::new("redis://x", "s", "g");
        let second = Duration::from_secs(1);
        assert_eq!(ok.clone().wait_replicas(1, second).validate(), Ok(()));
        let reason = |config: RedisConfig| match config.validate() {
            Err(RedisConfigError::WaitReplicas { reason, .. }) => reason,
            other => panic!("{other:?}"),
        };
        assert!(reason(ok.clone().wait_replicas(0, second)).contains("at least one replica"));
        assert!(reason(ok.clone().wait_replicas(1, Duration::ZERO)).contains("at least 1 ms"));
        assert!(reason(ok.clone().wait_replicas(1, Duration::from_secs(5)))
            .contains("below command_timeout"));
        // Below a longer command timeout it is fine; the publisher's is checked the same way.
        let longer = ok.command_timeout(Duration::from_secs(10));
        assert_eq!(
            longer
                .clone()
                .wait_replicas(2, Duration::from_secs(5))
                .validate(),
            Ok(())
        );
        let publisher = PublisherConfig::new("redis://x", "s").wait_replicas(0, second);
        assert!(matches!(
            publisher.validate(),
            Err(RedisConfigError::WaitReplicas { replicas: 0, .. })
        ));
        let message = longer
            .wait_replicas(1, Duration::from_secs(60))
            .validate()
            .unwrap_err()
            .to_string();
        assert!(message.contains("wait_replicas(1, 60s)"), "{message}");
    }

    #[test]
    fn consumer_names_are_unique() {
        assert_ne!(unique_consumer_name(), unique_consumer_name());
    }
}
