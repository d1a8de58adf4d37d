//! The command line: `leasehold demo` and `leasehold bench`, parsed with clap.
//!
//! Out-of-range or malformed flags are reported by clap with a usage hint (exit code 2), never
//! a panic.

use std::time::Duration;

use clap::{value_parser, Args, Parser, Subcommand};

use crate::bench::BenchOptions;
use crate::bench_redis::RedisBenchOptions;
use crate::commands_demo::CommandsOptions;
use crate::demo::DemoOptions;
use crate::exec::RuntimeKind;

/// At-least-once message consumers with per-message heartbeat leases: demo and benchmark on
/// the in-memory backend.
#[derive(Debug, Parser)]
#[command(name = "leasehold", version, propagate_version = true)]
pub struct Cli {
    /// What to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Several workers on one in-memory stream over a synthetic workload (quick, slow,
    /// not-yet-finished and failing messages); prints a summary and exits non-zero if a message
    /// ran twice at once or was lost.
    Demo(DemoArgs),
    /// The command queue: simulated VM provisioning on several replicas sharing an in-memory
    /// queue, with random durations and failures, cancels mid-flight and a replica replaced
    /// midway; prints a status summary and exits non-zero if a command did not end or a VM
    /// was requested twice.
    Commands(CommandsArgs),
    /// Throughput of the memory backend with a no-op handler against a tokio mpsc +
    /// task-per-message baseline, measured in the same run.
    Bench(BenchArgs),
    /// The Redis backend against a hand-written XREADGROUP/XACK loop, on a throwaway
    /// redis-server started by the command; also heartbeat cost and RSS at 1000 in flight.
    BenchRedis(BenchRedisArgs),
}

/// Flags of `leasehold demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Workers sharing the stream (each a consumer with its own lease engine).
    #[arg(long, default_value_t = 3, value_parser = value_parser!(u16).range(1..=1000))]
    pub workers: u16,
    /// Handler invocations running at once, per worker.
    #[arg(long, default_value_t = 8, value_parser = value_parser!(u32).range(1..=100_000))]
    pub concurrency: u32,
    /// Messages to publish.
    #[arg(long, default_value_t = 2000, value_parser = value_parser!(u32).range(1..=10_000_000))]
    pub messages: u32,
    /// The async runtime the workers run on.
    #[arg(long, value_enum, default_value_t = RuntimeKind::Tokio)]
    pub runtime: RuntimeKind,
    /// Messages published per second (0: all at once, to see the backlog drain).
    #[arg(long, default_value_t = 400)]
    pub rate: u32,
    /// Seed of the workload mix.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// How long an empty fetch waits before the next (e.g. 50ms, 1s).
    #[arg(long, default_value = "50ms", value_parser = parse_duration)]
    pub poll_interval: Duration,
    /// Delay before a not-yet-finished (Pending) message is invoked again.
    #[arg(long, default_value = "200ms", value_parser = parse_duration)]
    pub repoll_interval: Duration,
    /// Claim timeout of the stream and the workers (heartbeat: a third of it).
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    pub claim_timeout: Duration,
    /// Fail if the workload has not settled after this long.
    #[arg(long, default_value = "120s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// No live progress bar (it is hidden anyway when stderr is not a terminal).
    #[arg(long)]
    pub no_progress: bool,
}

impl DemoArgs {
    /// The demo's options.
    pub fn options(&self) -> DemoOptions {
        DemoOptions {
            workers: self.workers.into(),
            concurrency: self.concurrency as usize,
            messages: self.messages as usize,
            runtime: self.runtime,
            rate: self.rate,
            seed: self.seed,
            poll_interval: self.poll_interval,
            repoll_interval: self.repoll_interval,
            claim_timeout: self.claim_timeout,
            timeout: self.timeout,
            progress: !self.no_progress,
        }
    }
}

/// Flags of `leasehold commands`.
#[derive(Debug, Args)]
pub struct CommandsArgs {
    /// VMs to provision (one command each).
    #[arg(long, default_value_t = 300, value_parser = value_parser!(u32).range(1..=1_000_000))]
    pub commands: u32,
    /// Replicas serving the queue.
    #[arg(long, default_value_t = 3, value_parser = value_parser!(u16).range(1..=100))]
    pub replicas: u16,
    /// How often a RUNNING command is checked (e.g. 200ms, 1s).
    #[arg(long, default_value = "200ms", value_parser = parse_duration)]
    pub status_interval: Duration,
    /// Fraction (0..=1) of the commands cancelled mid-flight.
    #[arg(long, default_value_t = 0.1)]
    pub cancel_fraction: f64,
    /// Seed of provisioning times, failures and cancels.
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Fail if the commands have not all ended after this long.
    #[arg(long, default_value = "120s", value_parser = parse_duration)]
    pub timeout: Duration,
}

impl CommandsArgs {
    /// The demo's options.
    pub fn options(&self) -> CommandsOptions {
        CommandsOptions {
            commands: self.commands as usize,
            replicas: self.replicas.into(),
            status_interval: self.status_interval,
            cancel_fraction: self.cancel_fraction,
            seed: self.seed,
            timeout: self.timeout,
        }
    }
}

/// Flags of `leasehold bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
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
    /// No progress bar.
    #[arg(long)]
    pub no_progress: bool,
}

impl BenchArgs {
    /// The benchmark's options.
    pub fn options(&self) -> BenchOptions {
        BenchOptions {
            messages: self.messages as usize,
            rounds: self.rounds.into(),
            concurrency: self.concurrency.iter().map(|&c| c as usize).collect(),
            threads: self.threads.map(usize::from),
            progress: !self.no_progress,
        }
    }
}

/// Flags of `leasehold bench-redis`.
#[derive(Debug, Args)]
pub struct BenchRedisArgs {
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
    /// No progress spinner.
    #[arg(long)]
    pub no_progress: bool,
}

impl BenchRedisArgs {
    /// The benchmark's options.
    pub fn options(&self) -> RedisBenchOptions {
        RedisBenchOptions {
            messages: self.messages as usize,
            rounds: self.rounds.into(),
            concurrency: self.concurrency.iter().map(|&c| c as usize).collect(),
            prefetch: self.prefetch.iter().map(|&p| p as usize).collect(),
            threads: self.threads.map(usize::from),
            progress: !self.no_progress,
        }
    }
}

/// A duration such as `250ms`, `3s`, `2m` or `1.5s`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration: expected e.g. 250ms, 3s or 2m"))?;
    let scale = match unit.trim() {
        "ms" => 1e-3,
        "s" => 1.0,
        "m" | "min" => 60.0,
        "" => return Err(format!("{text:?} needs a unit: ms, s or m")),
        other => {
            return Err(format!(
                "unknown unit {other:?} in {text:?}: use ms, s or m"
            ))
        }
    };
    Duration::try_from_secs_f64(value * scale).map_err(|_| format!("{text:?} is out of range"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("5").is_err());
        assert!(parse_duration("ms").is_err());
        assert!(parse_duration("3h").is_err());
        assert!(parse_duration("1e400s").is_err());
    }

    #[test]
    fn clap_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn bad_flags_are_errors() {
        for argv in [
            &["leasehold", "demo", "--workers", "0"][..],
            &["leasehold", "demo", "--concurrency", "-1"],
            &["leasehold", "demo", "--messages", "lots"],
            &["leasehold", "demo", "--runtime", "async-std"],
            &["leasehold", "demo", "--poll-interval", "fast"],
            &["leasehold", "bench", "--concurrency", "1,0"],
            &["leasehold", "bench", "--rounds", "0"],
            &["leasehold", "bench-redis", "--concurrency", "0"],
            &["leasehold", "bench-redis", "--messages", "0"],
            &["leasehold", "bench-redis", "--prefetch", "-1"],
            &["leasehold", "bench-redis", "--prefetch", "0,lots"],
            &["leasehold", "bench-redis", "--prefetch", "2000000"],
            &["leasehold", "bench-redis", "--prefetch", ""],
            &["leasehold", "frobnicate"],
        ] {
            assert!(Cli::try_parse_from(argv).is_err(), "{argv:?} parsed");
        }
        let cli = Cli::try_parse_from(["leasehold", "bench", "--concurrency", "1,64"]).unwrap();
        let Command::Bench(args) = cli.command else {
            panic!("bench expected")
        };
        assert_eq!(args.options().concurrency, [1, 64]);
    }

    #[test]
    fn bench_redis_prefetch() {
        let options = |argv: &[&str]| {
            let cli = Cli::try_parse_from(argv).unwrap();
            let Command::BenchRedis(args) = cli.command else {
                panic!("bench-redis expected")
            };
            args.options()
        };
        assert_eq!(options(&["leasehold", "bench-redis"]).prefetch, [0, 3000]);
        let parsed = options(&["leasehold", "bench-redis", "--prefetch", "0,50"]);
        assert_eq!(parsed.prefetch, [0, 50]);
        assert_eq!(parsed.concurrency, [1, 100, 1000]);
        assert_eq!(
            options(&["leasehold", "bench-redis", "--prefetch=7"]).prefetch,
            [7]
        );
    }
}
