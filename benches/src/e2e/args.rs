//! The flags of `--bench e2e-memory` and `--bench e2e-redis`, parsed with clap.
//!
//! Out-of-range or malformed flags are reported by clap with a usage hint (exit code 2), never
//! a panic. `cargo bench` adds `--bench` to the flags of a `harness = false` target: both accept
//! it, hidden, and ignore it.

use clap::{value_parser, Parser};

use super::memory::{self, BenchOptions, BenchReport};
use super::redis::{self, RedisBenchOptions, RedisBenchReport};
use super::{Bench, BenchError};

/// Throughput of the memory backend with a no-op handler against a tokio mpsc +
/// task-per-message baseline, measured in the same run.
#[derive(Debug, Parser)]
#[command(
    name = "e2e-memory",
    bin_name = "cargo bench -p leasehold-benches --bench e2e-memory --"
)]
pub struct MemoryArgs {
    /// Messages per round (pre-published / pre-sent before the clock starts).
    #[arg(long, default_value_t = 100_000, value_parser = value_parser!(u32).range(1..=10_000_000))]
    pub messages: u32,
    /// Measured rounds per side and concurrency, interleaved (plus one warm-up round).
    #[arg(long, default_value_t = 5, value_parser = value_parser!(u16).range(1..=1000))]
    pub rounds: u16,
    /// The worker's concurrency settings, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,100,1000",
        value_parser = value_parser!(u32).range(1..=1_000_000)
    )]
    pub concurrency: Vec<u32>,
    /// Worker threads of the tokio runtime (default: one per core).
    #[arg(long, value_parser = value_parser!(u16).range(1..=1024))]
    pub threads: Option<u16>,
    /// Also measure, each round, a worker recording its metrics into a Prometheus recorder.
    #[arg(long)]
    pub metrics: bool,
    /// No progress bar.
    #[arg(long)]
    pub no_progress: bool,
    /// Print the results as JSON instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Added by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    pub bench: bool,
}

impl MemoryArgs {
    /// The benchmark's options.
    pub fn options(&self) -> BenchOptions {
        BenchOptions {
            messages: self.messages as usize,
            rounds: self.rounds.into(),
            concurrency: self.concurrency.iter().map(|&c| c as usize).collect(),
            threads: self.threads.map(usize::from),
            progress: !self.no_progress,
            metrics: self.metrics,
        }
    }
}

impl Bench for MemoryArgs {
    type Report = BenchReport;

    const SMOKE: &'static [&'static str] = &[
        "e2e-memory",
        "--messages",
        "2000",
        "--rounds",
        "1",
        "--concurrency",
        "1,64",
        "--no-progress",
    ];

    fn run(&self) -> Result<BenchReport, BenchError> {
        memory::run(&self.options())
    }

    fn wants_json(&self) -> bool {
        self.json
    }

    fn json(report: &BenchReport) -> serde_json::Value {
        report.to_json()
    }
}

/// The Redis backend against a hand-written XREADGROUP/XACK loop, on a throwaway redis-server
/// started by the benchmark; also heartbeat cost and RSS at 1000 in flight.
#[derive(Debug, Parser)]
#[command(
    name = "e2e-redis",
    bin_name = "cargo bench -p leasehold-benches --bench e2e-redis --"
)]
pub struct RedisArgs {
    /// Messages per round (published to a fresh stream before the clock starts).
    #[arg(long, default_value_t = 20_000, value_parser = value_parser!(u32).range(1..=10_000_000))]
    pub messages: u32,
    /// Measured rounds per variant, interleaved (plus one warm-up round).
    #[arg(long, default_value_t = 5, value_parser = value_parser!(u16).range(1..=1000))]
    pub rounds: u16,
    /// The no-op worker's concurrency settings, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,100,1000",
        value_parser = value_parser!(u32).range(1..=1_000_000)
    )]
    pub concurrency: Vec<u32>,
    /// Prefetch settings (messages fetched ahead of free handler slots), comma-separated:
    /// every leasehold variant runs once per value.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "0,3000",
        value_parser = value_parser!(u32).range(0..=1_000_000)
    )]
    pub prefetch: Vec<u32>,
    /// Worker threads of the tokio runtime (default: one per core).
    #[arg(long, value_parser = value_parser!(u16).range(1..=1024))]
    pub threads: Option<u16>,
    /// Also measure, each round, every no-op variant with its worker recording its metrics
    /// into a Prometheus recorder.
    #[arg(long)]
    pub metrics: bool,
    /// No progress spinner.
    #[arg(long)]
    pub no_progress: bool,
    /// Print the results as JSON instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Added by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    pub bench: bool,
}

impl RedisArgs {
    /// The benchmark's options.
    pub fn options(&self) -> RedisBenchOptions {
        RedisBenchOptions {
            messages: self.messages as usize,
            rounds: self.rounds.into(),
            concurrency: self.concurrency.iter().map(|&c| c as usize).collect(),
            prefetch: self.prefetch.iter().map(|&p| p as usize).collect(),
            threads: self.threads.map(usize::from),
            progress: !self.no_progress,
            metrics: self.metrics,
        }
    }
}

impl Bench for RedisArgs {
    type Report = RedisBenchReport;

    const SMOKE: &'static [&'static str] = &[
        "e2e-redis",
        "--messages",
        "200",
        "--rounds",
        "1",
        "--concurrency",
        "1,100",
        "--prefetch",
        "0,50",
        "--no-progress",
    ];

    fn run(&self) -> Result<RedisBenchReport, BenchError> {
        redis::run(&self.options())
    }

    fn wants_json(&self) -> bool {
        self.json
    }

    fn json(report: &RedisBenchReport) -> serde_json::Value {
        report.to_json()
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn clap_definitions_are_consistent() {
        MemoryArgs::command().debug_assert();
        RedisArgs::command().debug_assert();
    }

    #[test]
    fn bad_flags_are_errors() {
        for argv in [
            &["e2e-memory", "--concurrency", "1,0"][..],
            &["e2e-memory", "--rounds", "0"],
            &["e2e-memory", "--messages", "lots"],
            &["e2e-memory", "--threads", "0"],
            &["e2e-memory", "--prefetch", "0"],
            &["e2e-memory", "--frobnicate"],
        ] {
            assert!(MemoryArgs::try_parse_from(argv).is_err(), "{argv:?} parsed");
        }
        for argv in [
            &["e2e-redis", "--concurrency", "0"][..],
            &["e2e-redis", "--messages", "0"],
            &["e2e-redis", "--prefetch", "-1"],
            &["e2e-redis", "--prefetch", "0,lots"],
            &["e2e-redis", "--prefetch", "2000000"],
            &["e2e-redis", "--prefetch", ""],
            &["e2e-redis", "--frobnicate"],
        ] {
            assert!(RedisArgs::try_parse_from(argv).is_err(), "{argv:?} parsed");
        }
        let args = MemoryArgs::try_parse_from(["e2e-memory", "--concurrency", "1,64"]).unwrap();
        assert_eq!(args.options().concurrency, [1, 64]);
    }

    #[test]
    fn defaults() {
        let memory = MemoryArgs::try_parse_from(["e2e-memory"])
            .unwrap()
            .options();
        assert_eq!(
            (
                memory.messages,
                memory.rounds,
                memory.threads,
                memory.progress
            ),
            (100_000, 5, None, true)
        );
        assert_eq!(memory.concurrency, [1, 100, 1000]);
        let redis = RedisArgs::try_parse_from(["e2e-redis"]).unwrap().options();
        assert_eq!(
            (redis.messages, redis.rounds, redis.threads, redis.progress),
            (20_000, 5, None, true)
        );
        assert_eq!(redis.concurrency, [1, 100, 1000]);
    }

    #[test]
    fn cargo_bench_flag_is_ignored() {
        let args = MemoryArgs::try_parse_from(["e2e-memory", "--rounds", "2", "--bench"]).unwrap();
        assert_eq!(args.options().rounds, 2);
        let args = RedisArgs::try_parse_from(["e2e-redis", "--bench", "--json"]).unwrap();
        assert!(args.json);
        assert_eq!(args.options().prefetch, [0, 3000]);
    }

    #[test]
    fn smoke_flags_parse() {
        let memory = MemoryArgs::try_parse_from(MemoryArgs::SMOKE).unwrap();
        assert_eq!((memory.messages, memory.rounds), (2000, 1));
        let redis = RedisArgs::try_parse_from(RedisArgs::SMOKE).unwrap();
        assert_eq!((redis.messages, redis.rounds), (200, 1));
    }

    #[test]
    fn bench_redis_prefetch() {
        let options = |argv: &[&str]| RedisArgs::try_parse_from(argv).unwrap().options();
        assert_eq!(options(&["e2e-redis"]).prefetch, [0, 3000]);
        let parsed = options(&["e2e-redis", "--prefetch", "0,50"]);
        assert_eq!(parsed.prefetch, [0, 50]);
        assert_eq!(parsed.concurrency, [1, 100, 1000]);
        assert_eq!(options(&["e2e-redis", "--prefetch=7"]).prefetch, [7]);
    }
}
