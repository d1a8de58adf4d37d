use std::io;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::Duration;

/// Why a [`RedisServer`](crate::RedisServer) operation failed.
///
/// Every variant that concerns a server that did not come up carries the tail of its log, so a
/// failing test says why without anyone having to find the temporary directory.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The `redis-server` binary could not be found or executed.
    #[error(
        "`{}` could not be run ({source}). The Redis tests need redis-server: install it with \
         `apt-get install -y redis-server redis-tools` (Debian/Ubuntu; `brew install redis` on \
         macOS), or run \
         `.ci/run`, which installs it where missing. To use a binary outside PATH, set {env}.",
        binary.display(),
        env = crate::BINARY_ENV
    )]
    NotInstalled {
        /// The binary that was tried.
        binary: PathBuf,
        /// The error from spawning it.
        #[source]
        source: io::Error,
    },
    /// The `redis-cli` binary a [`RedisCluster`](crate::RedisCluster) joins its nodes with
    /// could not be run.
    #[error(
        "`{}` could not be run ({source}). Joining a Redis Cluster with it needs redis-cli: \
         install it with `apt-get install -y redis-server redis-tools` (Debian/Ubuntu; `brew \
         install redis` on macOS), or run `.ci/run`, which installs it where missing; or join \
         with `Join::Commands`, which needs only redis-server.",
        binary.display()
    )]
    CliNotInstalled {
        /// The binary that was tried.
        binary: PathBuf,
        /// The error from spawning it.
        #[source]
        source: io::Error,
    },
    /// A cluster could not be set up: a bad option, or a node or `redis-cli` refused a step.
    #[error("setting up the Redis Cluster failed: {reason}")]
    ClusterSetup {
        /// What failed, with the replies or output that say why.
        reason: String,
    },
    /// The joined cluster was not ready within the ready timeout.
    #[error("the Redis Cluster was not ready within {timeout:?}; {state}")]
    ClusterTimeout {
        /// The ready timeout.
        timeout: Duration,
        /// What the first node that was not ready reported.
        state: String,
    },
    /// A Sentinel topology could not be set up, or a sentinel refused a command.
    #[error("Redis Sentinel: {reason}")]
    Sentinel {
        /// What failed, with the replies that say why.
        reason: String,
    },
    /// A topology (Sentinel, or a cluster after a failover) did not reach the state waited
    /// for within the timeout.
    #[error("{what} did not happen within {timeout:?}; last seen: {state}")]
    TopologyTimeout {
        /// What was waited for.
        what: String,
        /// The timeout.
        timeout: Duration,
        /// What the topology reported last.
        state: String,
    },
    /// Creating the temporary data directory or a log file in it failed.
    #[error("preparing the redis-server data directory failed: {0}")]
    Setup(#[source] io::Error),
    /// Spawning the process failed for a reason other than a missing binary.
    #[error("starting `{}` failed: {source}", binary.display())]
    Spawn {
        /// The binary that was tried.
        binary: PathBuf,
        /// The error from spawning it.
        #[source]
        source: io::Error,
    },
    /// The server exited before it answered `PING` (a bad argument, a broken AOF, …).
    #[error("redis-server on port {port} exited before answering PING ({status}); log tail:\n{log_tail}")]
    Exited {
        /// The port it was started on.
        port: u16,
        /// How it exited.
        status: ExitStatus,
        /// The last lines of its log and its stdout/stderr.
        log_tail: String,
    },
    /// The server did not answer `PING` within the startup timeout (it has been killed).
    #[error(
        "redis-server on port {port} did not answer PING within {timeout:?}; log tail:\n{log_tail}"
    )]
    Timeout {
        /// The port it was started on.
        port: u16,
        /// The startup timeout.
        timeout: Duration,
        /// The last lines of its log and its stdout/stderr.
        log_tail: String,
    },
    /// The port stayed in use by another process (on `restart`, which must reuse the port; or on
    /// `start` after several fresh ports all collided).
    #[error("port {port} is in use by another process; log tail:\n{log_tail}")]
    PortInUse {
        /// The port that could not be bound.
        port: u16,
        /// The last lines of its log and its stdout/stderr.
        log_tail: String,
    },
    /// The operation needs a running server and this one is not running.
    #[error("redis-server on port {port} is not running")]
    NotRunning {
        /// Its port.
        port: u16,
    },
    /// A clean shutdown did not happen (the server refused `SHUTDOWN` or did not exit in time);
    /// the process has been killed instead.
    #[error("redis-server on port {port} did not shut down cleanly ({reason}); it was killed")]
    Unclean {
        /// Its port.
        port: u16,
        /// What went wrong.
        reason: String,
    },
    /// Talking to the server or managing its process failed.
    #[error("redis-server on port {port}: {source}")]
    Io {
        /// Its port.
        port: u16,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}
