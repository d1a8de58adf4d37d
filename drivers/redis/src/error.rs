//! Which Redis errors are worth retrying: the one place that decides, for the backend, the
//! publisher, the inspector and the command store.
//!
//! | class | errors | why |
//! |---|---|---|
//! | transient | I/O errors, timeouts, dropped or refused connections | the network or the server comes back |
//! | transient | `LOADING`, `BUSY`, `TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`, `READONLY`, `UNBLOCKED`, `MOVED`, `ASK` | the server is starting, busy, failing over or moving slots: the same call succeeds later |
//! | transient | no master found through Sentinel | the master is down and the sentinels have not promoted a replica yet (a wrong master name says so too, at connect) |
//! | transient | `NOREPLICAS` | fewer replicas than asked for acknowledged a write (the server's `min-replicas-to-write`, or `wait_replicas`): they catch up or come back |
//! | fatal | `NOAUTH`, `WRONGPASS`, failed authentication, `NOPERM` | credentials or permissions: retrying cannot fix them |
//! | fatal | `WRONGTYPE` | a key of another type stands where the stream (or a state) should be |
//! | fatal | script errors, other `ERR` replies, unknown commands, replies that do not parse, bad client configuration | a defect or an incompatible server |
//!
//! On a Redis Cluster connection the client follows `MOVED` and `ASK` and retries `TRYAGAIN`
//! itself; they reach this table only when its retries ran out (a slot still moving). On a
//! single-server connection `MOVED` / `ASK` are fatal instead, with a message saying to connect
//! as a cluster: that connection can never follow them.
//!
//! Three are handled where they happen instead: `NOGROUP` (the consumer group vanished: it is
//! created again, and its leases are lost), `UNBLOCKED` ending a blocking `XREADGROUP` (told
//! apart by its message, see [`Unblocked`]: the stream's key left the node — deleted, or moved
//! with its slot to another cluster node —, the server was demoted to a replica, or a client
//! ended the read) and `NOSCRIPT` (a restarted server forgot a script: it is loaded again). A worker retries transient errors with backoff; a fatal one halts the
//! stream it happened on (see `leasehold_core::ErrorKind`).

use std::time::Duration;

use leasehold_core::{BackendError, ErrorKind};
use redis::RedisError;

/// Server error codes after which the same call succeeds later.
const TRANSIENT_CODES: &[&str] = &[
    "LOADING",
    "BUSY",
    "TRYAGAIN",
    "CLUSTERDOWN",
    "MASTERDOWN",
    "READONLY",
    "UNBLOCKED",
    "NOREPLICAS",
    "MOVED",
    "ASK",
];

/// Whether retrying `e` can help.
pub(crate) fn classify(e: &RedisError) -> ErrorKind {
    let connection =
        e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.is_connection_refusal();
    // The sentinels name no master that is up (it is down, the failover is under way).
    let failing_over = matches!(
        e.kind(),
        redis::ErrorKind::MasterNameNotFoundBySentinel
            | redis::ErrorKind::NoValidReplicasFoundBySentinel
    );
    if connection || failing_over || e.code().is_some_and(|code| TRANSIENT_CODES.contains(&code)) {
        ErrorKind::Transient
    } else {
        ErrorKind::Fatal
    }
}

/// A Redis error as a [`BackendError`] of its class, with `what` failed as context.
pub(crate) fn error(what: &str, e: RedisError) -> BackendError {
    let message = format!("{what}: {e}");
    match classify(&e) {
        ErrorKind::Transient => BackendError::transient(message).with_source(e),
        ErrorKind::Fatal => BackendError::fatal(message).with_source(e),
    }
}

/// The consumer group (or the stream) is gone.
pub(crate) fn is_nogroup(e: &RedisError) -> bool {
    e.code() == Some("NOGROUP") || e.to_string().contains("NOGROUP")
}

/// Why the server ended a blocking read with `UNBLOCKED`, as its message says (Redis 7 wording;
/// nothing was read either way, and the next look finds out what is there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unblocked {
    /// `the stream key no longer exists`: the key left this node. It was deleted (or replaced
    /// by a key of another type), or, on a Redis Cluster, moved to another node with its slot
    /// (`MIGRATE` deletes it on the node it leaves).
    KeyGone,
    /// `force unblock from blocking operation, instance state changed (master -> replica?)`
    /// (`master -> slave?` before Redis 6): the server became a replica, as a failover does to
    /// the old master. The read must go to the new master.
    Demoted,
    /// `client unblocked via CLIENT UNBLOCK`: a client ended it (`CLIENT UNBLOCK <id> ERROR`).
    ByClient,
    /// A message this version does not know.
    Other,
}

/// Why `e` ended a blocking read, or `None` when it is no `UNBLOCKED` error.
pub(crate) fn unblocked(e: &RedisError) -> Option<Unblocked> {
    if e.code() != Some("UNBLOCKED") {
        return None;
    }
    let detail = e.detail().unwrap_or("");
    Some(if detail.contains("no longer exists") {
        Unblocked::KeyGone
    } else if detail.contains("instance state changed")
        || detail.contains("master -> replica")
        || detail.contains("master -> slave")
    {
        Unblocked::Demoted
    } else if detail.contains("CLIENT UNBLOCK") {
        Unblocked::ByClient
    } else {
        Unblocked::Other
    })
}

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
    /// A retention age outside 1 ms ..= one year.
    #[error("retention max_age must be between 1 ms and one year, got {0:?}")]
    MaxAge(Duration),
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
    /// A [`RedisConfig::wait_replicas`] that cannot work.
    #[error("wait_replicas({replicas}, {timeout:?}): {reason}")]
    WaitReplicas {
        /// The replicas asked for.
        replicas: u32,
        /// The timeout given.
        timeout: Duration,
        /// Which bound it breaks.
        reason: &'static str,
    },
    /// A time to live outside 1 ms ..= one year.
    #[error("ttl must be between 1 ms and one year, got {0:?}")]
    Ttl(Duration),
    /// The stream's name holds a `}` but no hash tag: Redis Cluster hashes the whole name, and
    /// no key derived from it (dead letters, delayed messages) can be placed in its slot.
    #[error(
        "stream {stream:?} holds `}}` but no hash tag, so Redis Cluster hashes the whole name \
         (slot {stream_slot}) and no key derived from it shares that slot ({legacy_key:?} \
         would be in slot {legacy_slot}); its dead-letter, delayed and deduplication keys \
         could never be used with it in one script. Name the stream with a hash tag \
         (`{{app}}:orders`) or without `}}`"
    )]
    UntaggableStream {
        /// The stream's name.
        stream: String,
        /// The stream's hash slot.
        stream_slot: u16,
        /// The dead-letter key earlier versions derived: `{stream}:dead`.
        legacy_key: String,
        /// That key's hash slot.
        legacy_slot: u16,
    },
    /// A key that scripts touch together with the stream hashes to another Redis Cluster slot
    /// (Redis would refuse every such script with `CROSSSLOT`).
    #[error(
        "{what} {key:?} is in Redis Cluster slot {key_slot} but stream {stream:?} is in slot \
         {stream_slot}: scripts touch both at once, so they must share a slot (give both the \
         same hash tag, e.g. `{{orders}}` and `{{orders}}:dead`)"
    )]
    CrossSlot {
        /// Which key.
        what: &'static str,
        /// The key.
        key: String,
        /// Its hash slot.
        key_slot: u16,
        /// The stream's name.
        stream: String,
        /// The stream's hash slot.
        stream_slot: u16,
    },
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
    /// [`Retention::DeleteOnAck`] on a stream other groups read too: their entries would be
    /// deleted before they read them.
    #[error(
        "retention DeleteOnAck deletes what group {group:?} acks, but stream {stream:?} is read \
         by other groups too ({others:?}), which would lose those entries: use \
         Retention::Consumed (the default), or remove the other groups"
    )]
    SharedStream {
        /// The stream.
        stream: String,
        /// This backend's group.
        group: String,
        /// The stream's other groups.
        others: Vec<String>,
    },
}

impl ConnectError {
    /// Whether trying again may help: never for a bad configuration, nor for a fatal Redis
    /// error (wrong password, missing permissions).
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::Config(_) => ErrorKind::Fatal,
            Self::Redis(error) => error.kind(),
            Self::SharedStream { .. } => ErrorKind::Fatal,
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
            error @ ConnectError::SharedStream { .. } => BackendError::fatal(error.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io;

    use redis::{ErrorKind as RedisKind, ServerErrorKind};

    use super::*;

    fn server(code: &str) -> RedisError {
        redis::make_extension_error(code.into(), Some("detail".into()))
    }

    fn known(kind: ServerErrorKind) -> RedisError {
        RedisError::from((RedisKind::Server(kind), "server error"))
    }

    #[test]
    fn connection_trouble_is_transient() {
        for kind in [
            io::ErrorKind::ConnectionRefused,
            io::ErrorKind::ConnectionReset,
            io::ErrorKind::BrokenPipe,
            io::ErrorKind::TimedOut,
            io::ErrorKind::UnexpectedEof,
        ] {
            let e = RedisError::from(io::Error::new(kind, "the network"));
            assert_eq!(classify(&e), ErrorKind::Transient, "{kind:?}");
        }
    }

    #[test]
    fn a_server_that_is_busy_loading_or_failing_over_is_transient() {
        for e in [
            known(ServerErrorKind::BusyLoading),
            known(ServerErrorKind::TryAgain),
            known(ServerErrorKind::ClusterDown),
            known(ServerErrorKind::MasterDown),
            known(ServerErrorKind::ReadOnly),
            known(ServerErrorKind::Moved),
            known(ServerErrorKind::Ask),
            server("BUSY"),
            server("UNBLOCKED"),
            server("NOREPLICAS"),
        ] {
            assert_eq!(classify(&e), ErrorKind::Transient, "{e}");
        }
    }

    #[test]
    fn no_master_behind_sentinel_is_transient() {
        let e = RedisError::from((RedisKind::MasterNameNotFoundBySentinel, "no master"));
        assert_eq!(classify(&e), ErrorKind::Transient);
    }

    #[test]
    fn credentials_permissions_types_and_scripts_are_fatal() {
        for e in [
            server("NOAUTH"),
            server("WRONGPASS"),
            known(ServerErrorKind::NoPerm),
            server("WRONGTYPE"),
            known(ServerErrorKind::ResponseError),
            known(ServerErrorKind::CrossSlot),
            known(ServerErrorKind::ExecAbort),
            RedisError::from((RedisKind::AuthenticationFailed, "bad password")),
            RedisError::from((RedisKind::Parse, "garbled reply")),
            RedisError::from((RedisKind::InvalidClientConfig, "bad URL")),
        ] {
            assert_eq!(classify(&e), ErrorKind::Fatal, "{e}");
        }
    }

    #[test]
    fn errors_keep_their_class_and_say_what_failed() {
        let e = error("fetch", known(ServerErrorKind::BusyLoading));
        assert!(e.is_transient());
        assert!(e.to_string().contains("fetch"), "{e}");
        let e = error("ack", server("WRONGTYPE"));
        assert_eq!(e.kind(), ErrorKind::Fatal);
    }

    #[test]
    fn nogroup_is_recognised() {
        assert!(is_nogroup(&server("NOGROUP")));
        assert!(!is_nogroup(&server("WRONGTYPE")));
    }

    /// The messages are Redis's own (7.x; `master -> slave?` from 5.x), as the server parses
    /// into code and detail.
    #[test]
    fn an_ended_wait_says_why() {
        let ended = |detail: &str| {
            unblocked(&redis::make_extension_error(
                "UNBLOCKED".into(),
                Some(detail.into()),
            ))
        };
        assert_eq!(
            ended("the stream key no longer exists"),
            Some(Unblocked::KeyGone)
        );
        assert_eq!(
            ended(
                "force unblock from blocking operation, instance state changed (master -> \
                 replica?)"
            ),
            Some(Unblocked::Demoted)
        );
        assert_eq!(
            ended(
                "force unblock from blocking operation, instance state changed (master -> slave?)"
            ),
            Some(Unblocked::Demoted)
        );
        assert_eq!(
            ended("client unblocked via CLIENT UNBLOCK"),
            Some(Unblocked::ByClient)
        );
        assert_eq!(ended("something new"), Some(Unblocked::Other));
        assert_eq!(
            unblocked(&redis::make_extension_error("UNBLOCKED".into(), None)),
            Some(Unblocked::Other)
        );
        assert_eq!(unblocked(&server("NOGROUP")), None);
        assert_eq!(unblocked(&server("WRONGTYPE")), None);
    }
}
