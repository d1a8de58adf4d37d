//! Where the stream lives and how the backend talks to it.

use std::time::Duration;

use leasehold_core::{BackendError, ErrorKind, MAX_DURATION};

/// A Redis configuration that cannot work: found before anything is sent to Redis.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RedisConfigError {
    /// A name is empty.
    #[error("{0} must not be empty")]
    Empty(&'static str),
    /// The URL does not parse. The reason never repeats the URL, which may hold a password.
    #[error("bad Redis URL: {0}")]
    Url(String),
    /// The claim timeout is zero, below a millisecond or above a year.
    #[error("claim_timeout must be between 1 ms and one year, got {0:?}")]
    ClaimTimeout(Duration),
    /// A trim length of zero would delete every entry.
    #[error("max_len must be at least 1 when set")]
    ZeroMaxLen,
    /// A command timeout of zero would fail every command.
    #[error("command_timeout must be greater than zero")]
    ZeroCommandTimeout,
    /// A name that becomes a key's hash tag holds a brace.
    #[error("{what} {name:?} must be free of braces: it is the hash tag of its keys")]
    BraceInTag {
        /// Which name.
        what: &'static str,
        /// The name given.
        name: String,
    },
    /// A time to live outside 1 ms ..= one year.
    #[error("ttl must be between 1 ms and one year, got {0:?}")]
    Ttl(Duration),
}

/// Why connecting to Redis failed: a configuration that cannot work, or Redis itself.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The configuration cannot work; nothing was sent.
    #[error(transparent)]
    Config(#[from] RedisConfigError),
    /// Redis could not be reached, refused the credentials, or failed a setup command.
    #[error(transparent)]
    Redis(#[from] BackendError),
}

impl ConnectError {
    /// Whether trying again may help: never for a bad configuration, nor for a fatal Redis
    /// error (wrong password, missing permissions).
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::Config(_) => ErrorKind::Fatal,
            Self::Redis(error) => error.kind(),
        }
    }
}

impl From<ConnectError> for BackendError {
    fn from(error: ConnectError) -> Self {
        match error {
            ConnectError::Redis(error) => error,
            ConnectError::Config(error) => {
                BackendError::fatal(error.to_string()).with_source(error)
            }
        }
    }
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
}

impl RedisConfig {
    /// A stream at `url` (`redis://[user:password@]host:port/db`, or `rediss://` with the `tls`
    /// feature) consumed by consumer group `group`. Defaults: claim timeout 60 s, payload
    /// field `data`, a unique consumer name, dead letters in `{stream}:dead`.
    pub fn new(
        url: impl Into<String>,
        stream: impl Into<String>,
        group: impl Into<String>,
    ) -> Self {
        Self {
            target: PublisherConfig::new(url, stream),
            group: group.into(),
            consumer: None,
            claim_timeout: Duration::from_secs(60),
            dead_letter_stream: None,
            reap_idle_consumers: Some(Duration::from_secs(24 * 3600)),
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

    /// The dead-letter stream. Default: `{stream}:dead`, hash-tagged so that it lives in the
    /// stream's cluster slot (required: dead-lettering is one script over both keys).
    #[must_use]
    pub fn dead_letter_stream(mut self, key: impl Into<String>) -> Self {
        self.dead_letter_stream = Some(key.into());
        self
    }

    /// Trim the stream to about this many entries on publish (`XADD MAXLEN ~`) and when a fetch
    /// moves due delayed messages into it.
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

    /// A publisher's configuration for this stream, with the same URL, payload field, trim
    /// length and command timeout.
    pub fn publisher(&self) -> PublisherConfig {
        self.target.clone()
    }

    pub(crate) fn validate(&self) -> Result<(), RedisConfigError> {
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
        Ok(())
    }

    /// The dead-letter stream's key: in the same cluster slot as the stream.
    pub(crate) fn dead_letter_key(&self) -> String {
        match &self.dead_letter_stream {
            Some(key) => key.clone(),
            None => default_dead_letter_key(&self.target.stream),
        }
    }
}

/// Configuration of a [`RedisPublisher`](crate::RedisPublisher): one stream, no consumer group.
#[derive(Clone, PartialEq, Eq)]
pub struct PublisherConfig {
    pub(crate) url: String,
    pub(crate) stream: String,
    pub(crate) field: String,
    pub(crate) max_len: Option<usize>,
    pub(crate) command_timeout: Duration,
}

/// Leaves the URL out: it may hold a password.
impl std::fmt::Debug for PublisherConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PublisherConfig")
            .field("stream", &self.stream)
            .field("field", &self.field)
            .field("max_len", &self.max_len)
            .field("command_timeout", &self.command_timeout)
            .finish_non_exhaustive()
    }
}

impl PublisherConfig {
    /// Publishing to `stream` at `url` (as [`RedisConfig::new`] takes it). Defaults: payload
    /// field `data`, no trimming, command timeout 5 s.
    pub fn new(url: impl Into<String>, stream: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            stream: stream.into(),
            field: "data".into(),
            max_len: None,
            command_timeout: Duration::from_secs(5),
        }
    }

    /// The entry field holding the payload (default `data`): the consumers'
    /// [`RedisConfig::field`].
    #[must_use]
    pub fn field(mut self, field: impl Into<String>) -> Self {
        self.field = field.into();
        self
    }

    /// Trim the stream to about this many entries on publish (`XADD MAXLEN ~`), delayed
    /// messages included when they are due.
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

    pub(crate) fn validate(&self) -> Result<(), RedisConfigError> {
        if self.command_timeout.is_zero() {
            return Err(RedisConfigError::ZeroCommandTimeout);
        }
        for (what, value) in [
            ("url", &self.url),
            ("stream", &self.stream),
            ("field", &self.field),
        ] {
            if value.is_empty() {
                return Err(RedisConfigError::Empty(what));
            }
        }
        if self.max_len == Some(0) {
            return Err(RedisConfigError::ZeroMaxLen);
        }
        Ok(())
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

/// The prefix of every key that belongs to `stream`, in the stream's Redis Cluster hash slot:
/// the stream itself when it carries a `{tag}` (`{app}:orders`), else the whole name as the tag
/// (`orders` → `{orders}`).
pub(crate) fn slot_prefix(stream: &str) -> String {
    if has_hash_tag(stream) {
        stream.to_string()
    } else {
        format!("{{{stream}}}")
    }
}

/// The dead-letter stream of `stream` unless configured otherwise: in the stream's hash slot.
pub(crate) fn default_dead_letter_key(stream: &str) -> String {
    format!("{}:dead", slot_prefix(stream))
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
    pub(crate) fn of(stream: &str) -> Self {
        let prefix = slot_prefix(stream);
        Self {
            delayed: format!("{prefix}:delayed"),
            seq: format!("{prefix}:delayed:seq"),
            wake: format!("{prefix}:delayed:wake"),
            dedupe: format!("{prefix}:dedupe:"),
        }
    }
}

/// Whether Redis Cluster hashes `key` by a `{tag}` (a non-empty one) rather than whole.
fn has_hash_tag(key: &str) -> bool {
    key.find('{')
        .and_then(|open| key[open + 1..].find('}'))
        .is_some_and(|len| len > 0)
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

    #[test]
    fn dead_letter_key_shares_the_stream_slot() {
        let config = |stream: &str| RedisConfig::new("redis://x", stream, "g");
        assert_eq!(config("orders").dead_letter_key(), "{orders}:dead");
        assert_eq!(
            config("{app}:orders").dead_letter_key(),
            "{app}:orders:dead"
        );
        assert_eq!(config("odd{}name").dead_letter_key(), "{odd{}name}:dead");
        assert_eq!(
            config("orders")
                .dead_letter_stream("elsewhere")
                .dead_letter_key(),
            "elsewhere"
        );
    }

    #[test]
    fn delayed_keys_share_the_stream_slot() {
        let keys = DelayedKeys::of("orders");
        assert_eq!(keys.delayed, "{orders}:delayed");
        assert_eq!(keys.seq, "{orders}:delayed:seq");
        assert_eq!(keys.wake, "{orders}:delayed:wake");
        assert_eq!(keys.dedupe, "{orders}:dedupe:");
        assert_eq!(
            DelayedKeys::of("{app}:orders").delayed,
            "{app}:orders:delayed"
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
    fn consumer_names_are_unique() {
        assert_ne!(unique_consumer_name(), unique_consumer_name());
    }
}
