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
//!
//! On a Redis, operator commands ([`ops`]: inspect, pending, dead letters, publish, command
//! queues) and a web dashboard ([`dashboard`]).
//!
//! The binary is a thin layer over [`demo::run`] and [`commands_demo::run`], so tests call them
//! in-process. The benchmarks live in the `leasehold-benches` crate (`benches/`), run with
//! `cargo bench`.
#![forbid(unsafe_code)]

pub mod args;
pub mod commands_demo;
pub mod dashboard;
pub mod demo;
mod exec;
pub mod exporter;
pub mod ops;
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
    Memory(#[from] leasehold::memory::MemoryError),
    /// The engine configuration derived from the options is invalid.
    #[error(transparent)]
    Config(#[from] leasehold::ConfigError),
    /// A worker rejected its configuration.
    #[error(transparent)]
    Worker(#[from] leasehold::WorkerError),
    /// The options do not fit together.
    #[error("{0}")]
    Invalid(String),
}
