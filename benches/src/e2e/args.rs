//! The flags of `--bench e2e-memory`, `--bench e2e-redis`, `--bench producer`, `--bench
//! fenced-cost` and `--bench pickup`, parsed with clap.
//!
//! Out-of-range or malformed flags are reported by clap with a usage hint (exit code 2), never
//! a panic. `cargo bench` adds `--bench` to the flags of a `harness = false` target: both accept
//! it, hidden, and ignore it.

use clap::{value_parser, Parser};
use leasehold_redis::FenceCheck;

use std::time::Duration;

use super::fenced::{self, FencedOptions, FencedReport};
use super::memory::{self, BenchOptions, BenchReport};
use super::pickup::{self, PickupOptions, PickupReport};
use super::producer::{self, ProducerBenchOptions, ProducerBenchReport};
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
    /// every leasehold variant runs once per value. `auto`: the default configuration (the
    /// prefetch and `max_leases` unset: the prefetch adapts).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "auto,0,3000",
        value_parser = parse_prefetch
    )]
    pub prefetch: Vec<u32>,
    /// Worker threads of the tokio runtime (default: one per core).
    #[arg(long, value_parser = value_parser!(u16).range(1..=1024))]
    pub threads: Option<u16>,
    /// Also measure, each round, every no-op variant with its worker recording its metrics
    /// into a Prometheus recorder.
    #[arg(long)]
    pub metrics: bool,
    /// Leave out the hoarding row (two workers, eight 1 s jobs after a quick burst).
    #[arg(long)]
    pub no_long: bool,
    /// Leave out the 10 ms handler rows (so that only the no-op drains run besides the raw
    /// loop, the heartbeat and the RSS reading: a profile of the drain).
    #[arg(long)]
    pub no_slow: bool,
    /// How the workers' fenced operations check their leases: `per-lease` (the default) or
    /// `tenure`.
    #[arg(long, default_value = "per-lease", value_parser = parse_fence_check)]
    pub fence_check: FenceCheck,
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

/// A `--fence-check` value.
fn parse_fence_check(value: &str) -> Result<FenceCheck, String> {
    match value {
        "per-lease" => Ok(FenceCheck::PerLease),
        "tenure" => Ok(FenceCheck::Tenure),
        _ => Err(format!("{value:?}: `per-lease` or `tenure`")),
    }
}

/// A `--prefetch` value: `auto` (kept as `u32::MAX`), or a count up to 1 000 000.
fn parse_prefetch(value: &str) -> Result<u32, String> {
    if value == "auto" {
        return Ok(u32::MAX);
    }
    match value.parse::<u32>() {
        Ok(n) if n <= 1_000_000 => Ok(n),
        _ => Err(format!(
            "{value:?}: a prefetch is `auto` or a count from 0 to 1000000"
        )),
    }
}

impl RedisArgs {
    /// The benchmark's options.
    pub fn options(&self) -> RedisBenchOptions {
        RedisBenchOptions {
            messages: self.messages as usize,
            rounds: self.rounds.into(),
            concurrency: self.concurrency.iter().map(|&c| c as usize).collect(),
            prefetch: self
                .prefetch
                .iter()
                .map(|&p| {
                    if p == u32::MAX {
                        redis::AUTO
                    } else {
                        p as usize
                    }
                })
                .collect(),
            threads: self.threads.map(usize::from),
            progress: !self.no_progress,
            metrics: self.metrics,
            long: !self.no_long,
            slow: !self.no_slow,
            fence_check: self.fence_check,
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
        "auto,0,50",
        "--no-long",
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

/// The producer on Redis, each row against a baseline measured in the same run: publish_batch
/// and publish against raw XADD, consuming due delayed messages against plain ones, and the
/// due-time accuracy of an idle worker; on a throwaway redis-server started by the benchmark.
#[derive(Debug, Parser)]
#[command(
    name = "producer",
    bin_name = "cargo bench -p leasehold-benches --bench producer --"
)]
pub struct ProducerArgs {
    /// Rows to run, comma-separated: 1 publish_batch, 2 single publish, 3 due delayed messages
    /// consumed, 4 due-time accuracy.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,2,3,4",
        value_parser = value_parser!(u8).range(1..=4)
    )]
    pub rows: Vec<u8>,
    /// Messages per round of rows 1 (each batch size) and 3.
    #[arg(long, default_value_t = 100_000, value_parser = value_parser!(u32).range(1..=10_000_000))]
    pub messages: u32,
    /// Row 1's batch sizes, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "100,1000",
        value_parser = value_parser!(u32).range(1..=100_000)
    )]
    pub batch: Vec<u32>,
    /// Messages per round of row 2 (one await each).
    #[arg(long, default_value_t = 10_000, value_parser = value_parser!(u32).range(1..=10_000_000))]
    pub single: u32,
    /// Row 3: the delay every message is published with (ms); the worker starts once all are
    /// due.
    #[arg(long, default_value_t = 100, value_parser = value_parser!(u32).range(1..=60_000))]
    pub delay_ms: u32,
    /// The worker's concurrency (rows 3 and 4).
    #[arg(long, default_value_t = 100, value_parser = value_parser!(u32).range(1..=1_000_000))]
    pub concurrency: u32,
    /// The worker's prefetch (rows 3 and 4).
    #[arg(long, default_value_t = 3000, value_parser = value_parser!(u32).range(0..=1_000_000))]
    pub prefetch: u32,
    /// Measured rounds of rows 1 to 3, interleaved (plus one warm-up round).
    #[arg(long, default_value_t = 5, value_parser = value_parser!(u16).range(1..=1000))]
    pub rounds: u16,
    /// Row 4: messages per run.
    #[arg(long, default_value_t = 1000, value_parser = value_parser!(u32).range(1..=1_000_000))]
    pub due_messages: u32,
    /// Row 4: the window (ms) their due times are spread over, evenly.
    #[arg(long, default_value_t = 10_000, value_parser = value_parser!(u32).range(1..=3_600_000))]
    pub due_spread_ms: u32,
    /// Row 4: the worker's poll_interval settings (ms), comma-separated (1000 is the default).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1000,5000",
        value_parser = value_parser!(u32).range(1..=3_600_000)
    )]
    pub due_poll_ms: Vec<u32>,
    /// Row 4: rounds (each runs plain, then delayed, at every poll_interval).
    #[arg(long, default_value_t = 3, value_parser = value_parser!(u16).range(1..=1000))]
    pub due_rounds: u16,
    /// Row 4's diagnostic: how many XREAD BLOCK calls (1, 2, … ms, on an empty stream) to time
    /// against Redis's own wake-up (0: none).
    #[arg(long, default_value_t = 50, value_parser = value_parser!(u16).range(0..=1000))]
    pub block_probes: u16,
    /// Start the redis-server with this `hz` (default: Redis's own, 10). Redis times out
    /// blocked commands in its cron, `hz` times a second.
    #[arg(long, value_parser = value_parser!(u32).range(1..=500))]
    pub redis_hz: Option<u32>,
    /// Worker threads of the tokio runtime (default: one per core).
    #[arg(long, value_parser = value_parser!(u16).range(1..=1024))]
    pub threads: Option<u16>,
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

impl ProducerArgs {
    /// The benchmark's options.
    pub fn options(&self) -> ProducerBenchOptions {
        let ms = |ms: u32| Duration::from_millis(ms.into());
        let mut rows = self.rows.clone();
        rows.sort_unstable();
        rows.dedup();
        ProducerBenchOptions {
            rows,
            messages: self.messages as usize,
            batch: self.batch.iter().map(|&b| b as usize).collect(),
            single: self.single as usize,
            delay: ms(self.delay_ms),
            concurrency: self.concurrency as usize,
            prefetch: self.prefetch as usize,
            rounds: self.rounds.into(),
            due_messages: self.due_messages as usize,
            due_spread: ms(self.due_spread_ms),
            due_poll: self.due_poll_ms.iter().map(|&p| ms(p)).collect(),
            due_rounds: self.due_rounds.into(),
            block_probes: self.block_probes.into(),
            threads: self.threads.map(usize::from),
            progress: !self.no_progress,
            redis_hz: self.redis_hz,
        }
    }
}

impl Bench for ProducerArgs {
    type Report = ProducerBenchReport;

    const SMOKE: &'static [&'static str] = &[
        "producer",
        "--messages",
        "500",
        "--batch",
        "10,100",
        "--single",
        "100",
        "--rounds",
        "1",
        "--due-messages",
        "20",
        "--due-spread-ms",
        "200",
        "--due-poll-ms",
        "1000",
        "--due-rounds",
        "1",
        "--block-probes",
        "5",
        "--no-progress",
    ];

    fn run(&self) -> Result<ProducerBenchReport, BenchError> {
        producer::run(&self.options())
    }

    fn wants_json(&self) -> bool {
        self.json
    }

    fn json(report: &ProducerBenchReport) -> serde_json::Value {
        report.to_json()
    }
}

/// The Redis backend's fenced ack, renew and release against the plain commands they guard:
/// Redis µs per id (INFO commandstats usec), on a throwaway redis-server.
#[derive(Debug, Parser)]
#[command(
    name = "fenced-cost",
    bin_name = "cargo bench -p leasehold-benches --bench fenced-cost --"
)]
pub struct FencedArgs {
    /// Measured rounds, interleaved (plus one warm-up round).
    #[arg(long, default_value_t = 7, value_parser = value_parser!(u16).range(1..=1000))]
    pub rounds: u16,
    /// Messages drained per round (drain row).
    #[arg(long, default_value_t = 20_000, value_parser = value_parser!(u32).range(1..=10_000_000))]
    pub drain: u32,
    /// Leases acked per round (ack row).
    #[arg(long, default_value_t = 10_000, value_parser = value_parser!(u32).range(1..=10_000_000))]
    pub acks: u32,
    /// Leases per ack call, and ids per raw XACK (ack row).
    #[arg(long, default_value_t = 100, value_parser = value_parser!(u32).range(1..=100_000))]
    pub ack_batch: u32,
    /// Leases held and renewed in one call (renew row).
    #[arg(long, default_value_t = 10_000, value_parser = value_parser!(u32).range(1..=10_000_000))]
    pub renews: u32,
    /// Leases released per round, one call each (release row; at most --renews).
    #[arg(long, default_value_t = 1000, value_parser = value_parser!(u32).range(1..=10_000_000))]
    pub releases: u32,
    /// How the backend's fenced operations check their leases: `per-lease` (the default) or
    /// `tenure`.
    #[arg(long, default_value = "per-lease", value_parser = parse_fence_check)]
    pub fence_check: FenceCheck,
    /// Print the results as JSON instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Added by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    pub bench: bool,
}

impl FencedArgs {
    /// The benchmark's options.
    pub fn options(&self) -> FencedOptions {
        FencedOptions {
            rounds: self.rounds.into(),
            drain: self.drain as usize,
            acks: self.acks as usize,
            ack_batch: self.ack_batch as usize,
            renews: self.renews as usize,
            releases: self.releases.min(self.renews) as usize,
            fence_check: self.fence_check,
        }
    }
}

impl Bench for FencedArgs {
    type Report = FencedReport;

    const SMOKE: &'static [&'static str] = &[
        "fenced-cost",
        "--rounds",
        "1",
        "--drain",
        "300",
        "--acks",
        "300",
        "--renews",
        "300",
        "--releases",
        "50",
    ];

    fn run(&self) -> Result<FencedReport, BenchError> {
        fenced::run(&self.options())
    }

    fn wants_json(&self) -> bool {
        self.json
    }

    fn json(report: &FencedReport) -> serde_json::Value {
        report.to_json()
    }
}

/// Pickup latency on an idle consumer on Redis: a leasehold worker against a raw blocking
/// `XREADGROUP` consumer, messages published one at a time at a steady rate.
#[derive(Debug, Parser)]
#[command(
    name = "pickup",
    bin_name = "cargo bench -p leasehold-benches --bench pickup --"
)]
pub struct PickupArgs {
    /// Messages per side and round.
    #[arg(long, default_value_t = 3000, value_parser = value_parser!(u32).range(1..=10_000_000))]
    pub messages: u32,
    /// Publish rate, messages per second.
    #[arg(long, default_value_t = 1000, value_parser = value_parser!(u32).range(1..=100_000))]
    pub rate: u32,
    /// The worker's concurrency. At 1 (with `prefetch` 0) every fetch asks for one message and
    /// a full answer is followed by a fetch that does not wait; an empty answer to that one is
    /// followed at once by a blocking fetch.
    #[arg(long, default_value_t = 10, value_parser = value_parser!(u32).range(1..=1_000_000))]
    pub concurrency: u32,
    /// Measured rounds per side, interleaved (plus one warm-up round).
    #[arg(long, default_value_t = 5, value_parser = value_parser!(u16).range(1..=1000))]
    pub rounds: u16,
    /// Worker threads of the tokio runtime (default: one per core).
    #[arg(long, value_parser = value_parser!(u16).range(1..=1024))]
    pub threads: Option<u16>,
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

impl PickupArgs {
    /// The benchmark's options.
    pub fn options(&self) -> PickupOptions {
        PickupOptions {
            messages: self.messages as usize,
            rate: self.rate,
            concurrency: self.concurrency as usize,
            rounds: self.rounds.into(),
            threads: self.threads.map(usize::from),
            progress: !self.no_progress,
        }
    }
}

impl Bench for PickupArgs {
    type Report = PickupReport;

    const SMOKE: &'static [&'static str] = &[
        "pickup",
        "--messages",
        "50",
        "--rounds",
        "1",
        "--no-progress",
    ];

    fn run(&self) -> Result<PickupReport, BenchError> {
        pickup::run(&self.options())
    }

    fn wants_json(&self) -> bool {
        self.json
    }

    fn json(report: &PickupReport) -> serde_json::Value {
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
        ProducerArgs::command().debug_assert();
        FencedArgs::command().debug_assert();
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
            &["e2e-redis", "--prefetch", "automatic"],
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
        assert_eq!(args.options().prefetch, [redis::AUTO, 0, 3000]);
    }

    #[test]
    fn smoke_flags_parse() {
        let memory = MemoryArgs::try_parse_from(MemoryArgs::SMOKE).unwrap();
        assert_eq!((memory.messages, memory.rounds), (2000, 1));
        let redis = RedisArgs::try_parse_from(RedisArgs::SMOKE).unwrap();
        assert_eq!((redis.messages, redis.rounds), (200, 1));
    }

    #[test]
    fn producer_flags() {
        let defaults = ProducerArgs::try_parse_from(["producer"])
            .unwrap()
            .options();
        let expected = ProducerBenchOptions {
            progress: true,
            ..ProducerBenchOptions::default()
        };
        assert_eq!(format!("{defaults:?}"), format!("{expected:?}"));
        assert_eq!(defaults.rows, [1, 2, 3, 4]);
        assert_eq!(defaults.batch, [100, 1000]);
        assert_eq!(
            defaults.due_poll,
            [Duration::from_secs(1), Duration::from_secs(5)]
        );
        assert_eq!(
            (
                defaults.messages,
                defaults.due_messages,
                defaults.due_spread
            ),
            (100_000, 1000, Duration::from_secs(10))
        );
        let quick = ProducerArgs::try_parse_from([
            "producer",
            "--rows",
            "4,3,3",
            "--messages",
            "1000",
            "--due-spread-ms",
            "2000",
            "--bench",
        ])
        .unwrap()
        .options();
        assert_eq!(quick.rows, [3, 4]);
        assert_eq!(quick.messages, 1000);
        assert_eq!(quick.due_spread, Duration::from_secs(2));
        let smoke = ProducerArgs::try_parse_from(ProducerArgs::SMOKE).unwrap();
        assert_eq!(
            (smoke.messages, smoke.rounds, smoke.due_rounds),
            (500, 1, 1)
        );
        for argv in [
            &["producer", "--rows", "5"][..],
            &["producer", "--rows", "0"],
            &["producer", "--batch", "0"],
            &["producer", "--messages", "0"],
            &["producer", "--due-poll-ms", "0"],
            &["producer", "--due-spread-ms", "lots"],
            &["producer", "--frobnicate"],
        ] {
            assert!(
                ProducerArgs::try_parse_from(argv).is_err(),
                "{argv:?} parsed"
            );
        }
    }

    #[test]
    fn bench_redis_prefetch() {
        let options = |argv: &[&str]| RedisArgs::try_parse_from(argv).unwrap().options();
        assert_eq!(options(&["e2e-redis"]).prefetch, [redis::AUTO, 0, 3000]);
        assert_eq!(
            options(&["e2e-redis", "--prefetch", "auto,5"]).prefetch,
            [redis::AUTO, 5]
        );
        assert!(options(&["e2e-redis"]).long);
        assert!(!options(&["e2e-redis", "--no-long"]).long);
        let parsed = options(&["e2e-redis", "--prefetch", "0,50"]);
        assert_eq!(parsed.prefetch, [0, 50]);
        assert_eq!(parsed.concurrency, [1, 100, 1000]);
        assert_eq!(options(&["e2e-redis", "--prefetch=7"]).prefetch, [7]);
    }
}
