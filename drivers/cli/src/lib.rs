//! # leasehold-cli: the `leasehold` command line
//!
//! Two commands, both on the in-memory backend, so they need no setup:
//!
//! - [`demo`]: several workers share one stream and work through a synthetic workload (quick,
//!   slow, not-yet-finished and failing messages) with live progress, then print a summary
//!   (throughput, pickup and processing latency, re-invocations, retries, dead letters, and the
//!   number of duplicate invocations observed, which must be 0).
//! - [`commands_demo`]: the command queue provisioning simulated VMs on several replicas, with
//!   cancels mid-flight and a replica replaced midway; ends with a status summary.
//! - [`bench`](mod@bench): the throughput of a worker with a no-op handler against a minimal async consumer
//!   (a tokio mpsc channel and a task per message), measured in the same run, interleaved.
//! - [`bench_redis`]: the Redis backend against a hand-written `XREADGROUP`/`XACK` loop on a
//!   throwaway `redis-server` the command starts itself, plus heartbeat cost and RSS.
//!
//! The binary is a thin layer over [`demo::run`] and [`bench::run`], so tests call them
//! in-process.
#![forbid(unsafe_code)]

pub mod args;
pub mod bench;
pub mod bench_redis;
pub mod commands_demo;
mod counting;
pub mod demo;
mod exec;
mod stats;

pub use exec::RuntimeKind;
pub use stats::Percentiles;

/// Why a command could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CliError {
    /// The async runtime could not be started.
    #[error("cannot start the {runtime} runtime: {source}")]
    Runtime {
        /// Which runtime.
        runtime: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The in-memory stream rejected its configuration or a consumer name.
    #[error(transparent)]
    Memory(#[from] leasehold_memory::MemoryError),
    /// The engine configuration derived from the options is invalid.
    #[error(transparent)]
    Config(#[from] leasehold_tokio::core::ConfigError),
    /// A worker rejected its configuration.
    #[error(transparent)]
    Worker(#[from] leasehold_tokio::WorkerError),
    /// The benchmark's redis-server could not be started or answered with an error.
    #[error("redis: {0}")]
    Redis(String),
    /// The options do not fit together.
    #[error("{0}")]
    Invalid(String),
}
