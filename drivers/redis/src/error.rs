//! Which Redis errors are worth retrying: the one place that decides, for the backend, the
//! command store, and anything else built on this crate.
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
//! created again, and its leases are lost), `UNBLOCKED` ending a blocking `XREADGROUP` (its
//! stream was deleted meanwhile: the same) and `NOSCRIPT` (a restarted server forgot a script:
//! it is loaded again). A worker retries transient errors with backoff; a fatal one halts the
//! stream it happened on (see `leasehold_core::ErrorKind`).

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
pub fn classify(e: &RedisError) -> ErrorKind {
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
pub fn error(what: &str, e: RedisError) -> BackendError {
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

/// A blocking `XREADGROUP` was ended by the server: its stream key was deleted while it waited
/// (`UNBLOCKED the stream key no longer exists`), or a client ended it with `CLIENT UNBLOCK …
/// ERROR`. Either way nothing was read, and the next look finds out what is there.
pub(crate) fn is_unblocked(e: &RedisError) -> bool {
    e.code() == Some("UNBLOCKED")
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

    #[test]
    fn an_ended_wait_is_recognised() {
        assert!(is_unblocked(&server("UNBLOCKED")));
        assert!(!is_unblocked(&server("NOGROUP")));
        assert!(!is_unblocked(&server("WRONGTYPE")));
    }
}
