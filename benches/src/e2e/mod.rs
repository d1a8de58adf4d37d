//! End-to-end benchmarks: a whole worker against the minimal consumer of its backend, measured
//! in the same process, rounds interleaved so that drift of the machine hits both sides alike.
//!
//! - [`memory`](mod@memory): the throughput of a worker with a no-op handler on the in-memory
//!   backend against a minimal async consumer (a tokio mpsc channel and a task per message).
//!   Run with `cargo bench -p leasehold-benches --bench e2e-memory`.
//! - [`redis`](mod@redis): the Redis backend against a hand-written `XREADGROUP`/`XACK` loop on
//!   a throwaway `redis-server` the benchmark starts itself, plus heartbeat cost and RSS. Run
//!   with `cargo bench -p leasehold-benches --bench e2e-redis`.
//! - [`producer`](mod@producer): the producer on Redis (`publish_batch`, `publish`, consuming
//!   delayed messages, due-time accuracy) against the same work done by hand with the `redis`
//!   crate, or against plain messages. Run with `cargo bench -p leasehold-benches --bench
//!   producer`.
//! - [`fenced`](mod@fenced): what the Redis backend's fenced ack, renew and release cost the
//!   server per id (`INFO commandstats`), against the plain commands they guard. Run with
//!   `cargo bench -p leasehold-benches --bench fenced-cost`.
//! - [`pickup`](mod@pickup): pickup latency on an idle worker on Redis, messages published one
//!   at a time at 1 000 msg/s, against a raw blocking `XREADGROUP` consumer. Run with `cargo
//!   bench -p leasehold-benches --bench pickup`.
//!
//! Each bench target is a thin layer over [`main`]: the flags ([`args`]) are parsed with clap
//! (a bad flag is a usage error, exit code 2), the benchmark runs, and its table, or with
//! `--json` the same results as JSON, goes to stdout. Tests call [`memory::run`],
//! [`redis::run`], [`producer::run`] and [`fenced::run`] in-process.

use std::fmt;
use std::process::ExitCode;

pub mod args;
mod counting;
pub mod fenced;
pub mod memory;
pub mod pickup;
pub mod producer;
pub mod redis;
pub mod scale;
mod stats;

/// Why a benchmark could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    /// The tokio runtime could not be started.
    #[error("cannot start the tokio runtime: {0}")]
    Runtime(#[source] std::io::Error),
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
    /// The options do not fit together, or a round did not process every message.
    #[error("{0}")]
    Invalid(String),
}

/// An end-to-end benchmark as a bench target runs it: its flags, and how they run it.
pub trait Bench: clap::Parser {
    /// What a run measured; its `Display` is the table.
    type Report: fmt::Display;

    /// The flags of one small round, run when the target is started without `--bench`.
    const SMOKE: &'static [&'static str];

    /// Runs the benchmark these flags describe.
    fn run(&self) -> Result<Self::Report, BenchError>;

    /// Whether to print [`json`](Self::json) instead of the table.
    fn wants_json(&self) -> bool;

    /// The report, machine-readable.
    fn json(report: &Self::Report) -> serde_json::Value;
}

/// A bench target's `main`: parses the flags, runs, prints the table (or JSON) on stdout and
/// returns exit code 0; on an error, prints it on stderr and returns 2. Bad flags exit with
/// clap's usage error (also 2).
///
/// `cargo bench` passes `--bench` to a `harness = false` target (accepted and ignored by the
/// flags). `cargo test --benches` and `--all-targets` run the same binary without it, perhaps
/// with the test harness's own flags: then it runs [`Bench::SMOKE`] instead, one small round
/// that shows it works, as the engine benchmarks do under `cargo test`.
pub fn main<B: Bench>() -> ExitCode {
    let args = if std::env::args_os().any(|arg| arg == "--bench") {
        B::parse()
    } else {
        eprintln!("no --bench flag (cargo test): one small smoke round; measure with cargo bench");
        B::parse_from(B::SMOKE)
    };
    match args.run() {
        Ok(report) => {
            if args.wants_json() {
                println!("{:#}", B::json(&report));
            } else {
                println!("{report}");
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::from(2)
        }
    }
}

/// The recorder of the `--metrics` side: what a service exporting to Prometheus records into
/// (the exporter's own recorder, without its HTTP listener). A worker started inside
/// [`Metered::start`] records into it for its whole life (its metric handles are made then);
/// one started outside records nothing, as without any recorder.
pub(crate) struct Metered(metrics_exporter_prometheus::PrometheusRecorder);

impl Metered {
    pub(crate) fn new() -> Self {
        Self(metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder())
    }

    /// Runs `start` (a worker's start) with this recorder installed.
    pub(crate) fn start<T>(&self, start: impl FnOnce() -> T) -> T {
        metrics::with_local_recorder(&self.0, start)
    }

    /// Drains the histograms' samples into their summaries, as an installed exporter does every
    /// few seconds: call it between rounds, off the clock. Without it every sample of every
    /// round would pile up in memory, which no real service does.
    pub(crate) fn upkeep(&self) {
        self.0.handle().run_upkeep();
    }
}

/// A tokio multi-thread runtime with timers, on `threads` worker threads (default: one per core).
fn tokio_runtime(threads: Option<usize>) -> Result<tokio::runtime::Runtime, BenchError> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = threads {
        builder.worker_threads(threads);
    }
    builder.enable_all().build().map_err(BenchError::Runtime)
}
