//! The command line: `leasehold demo` and `leasehold commands`, parsed with clap.
//!
//! Out-of-range or malformed flags are reported by clap with a usage hint (exit code 2), never
//! a panic.

use std::time::Duration;

use clap::{value_parser, Args, Parser, Subcommand};

use crate::commands_demo::CommandsOptions;
use crate::demo::DemoOptions;
use crate::exec::RuntimeKind;
use crate::exporter::MetricsArgs;

/// At-least-once message consumers with per-message heartbeat leases: demos on the in-memory
/// backend.
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
    /// A stream on Redis: length, consumer groups (lag, pending, oldest pending), consumers,
    /// dead letters.
    Inspect(crate::ops::InspectArgs),
    /// The pending entries of a stream's group: who holds what, idle for how long.
    Pending(crate::ops::PendingArgs),
    /// A stream's dead letters: list, show, requeue, purge.
    Dead(crate::ops::DeadArgs),
    /// Publishes JSON messages to a stream on Redis (one given, or JSON lines from standard
    /// input), at once, delayed (--delay) or deduplicated (--dedupe KEY --ttl); prints their ids.
    Publish(crate::ops::PublishArgs),
    /// The command queue: `list|show|cancel|retry` on a queue on Redis; without a subcommand,
    /// a demo: simulated VM provisioning on several replicas sharing an in-memory queue, with random durations and failures, cancels mid-flight and a replica replaced
    /// midway; prints a status summary and exits non-zero if a command did not end or a VM
    /// was requested twice.
    Commands(CommandsArgs),
    /// A web dashboard of the streams and command queues on a Redis: lease health, dead
    /// letters (requeue, purge), commands (cancel, retry), updated live. Serves until Ctrl-C.
    Dashboard(crate::dashboard::DashboardArgs),
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
    /// Serve the web dashboard over the demo's stream at http://ADDR while it runs (e.g.
    /// 127.0.0.1:8080; a slow --rate and many --messages keep it running longer).
    #[arg(long, value_name = "ADDR")]
    pub dashboard: Option<std::net::SocketAddr>,
    /// Serving the workers' metrics while it runs.
    #[command(flatten)]
    pub metrics: MetricsArgs,
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
            dashboard: self.dashboard,
        }
    }
}

/// Flags of `leasehold commands`: the demo, or an operator subcommand on a queue on Redis.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct CommandsArgs {
    /// On a command queue on Redis: list by status, show, cancel, retry (without one: the demo).
    #[command(subcommand)]
    pub op: Option<crate::ops::CommandsOp>,
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
    /// Serving the workers' metrics while it runs.
    #[command(flatten)]
    pub metrics: MetricsArgs,
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

/// A duration such as `250ms`, `3s`, `2m`, `1.5s`, `6h` or `7d`.
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
        "h" => 3600.0,
        "d" => 86_400.0,
        "" => return Err(format!("{text:?} needs a unit: ms, s, m, h or d")),
        other => {
            return Err(format!(
                "unknown unit {other:?} in {text:?}: use ms, s, m, h or d"
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
        assert_eq!(parse_duration("3h"), Ok(Duration::from_secs(3 * 3600)));
        assert_eq!(parse_duration("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert!(parse_duration("3w").is_err());
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
            &["leasehold", "commands", "--replicas", "0"],
            &["leasehold", "bench"],
            &["leasehold", "bench-redis"],
            &["leasehold", "demo", "--metrics-addr", "nowhere"],
            &["leasehold", "demo", "--metrics-linger", "5s"],
            &["leasehold", "frobnicate"],
            &["leasehold", "dashboard"],
            &[
                "leasehold",
                "dashboard",
                "--redis",
                "redis://x",
                "--bind",
                "nowhere",
            ],
            &[
                "leasehold",
                "dashboard",
                "--redis",
                "redis://x",
                "--refresh",
                "soon",
            ],
        ] {
            assert!(Cli::try_parse_from(argv).is_err(), "{argv:?} parsed");
        }
        for refresh in ["100ms", "2s", "1h"] {
            let cli = Cli::try_parse_from([
                "leasehold",
                "dashboard",
                "--redis",
                "redis://x",
                "--refresh",
                refresh,
            ])
            .unwrap();
            let Command::Dashboard(args) = cli.command else {
                panic!("dashboard expected")
            };
            assert_eq!(args.options().validate(), Ok(()), "--refresh {refresh}");
        }
        let cli = Cli::try_parse_from(["leasehold", "demo", "--concurrency", "64"]).unwrap();
        let Command::Demo(args) = cli.command else {
            panic!("demo expected")
        };
        assert_eq!(args.options().concurrency, 64);
    }
}
