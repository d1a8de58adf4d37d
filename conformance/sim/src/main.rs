//! `leasehold-sim`: runs the deterministic simulator over many seeds, or replays one.
//!
//! ```text
//! leasehold-sim [--seeds N] [--first S] [--seed S] [--replicas R] [--messages M]
//!               [--backend memory|model|steal-back|unfenced-ack|ignores-delay|ignores-dedupe]
//!               [--profile broad|lease-edge|store-outage]
//!               [--threads T] [--print] [--trace N] [--faults-until S] [--bound-scale X]
//!               [--broken NAME] [--keep-going]
//! ```

use std::process::ExitCode;
use std::time::{Duration, Instant};

use leasehold_sim::{
    run_seed, run_seed_printing, run_seeds, BrokenDriver, Profile, SimConfig, StoreKind,
};

const USAGE: &str = "\
usage: leasehold-sim [options]
  --seeds N          run seeds FIRST..FIRST+N (default 1000)
  --first S          first seed of a batch (default 0)
  --seed S           replay one seed and print its report (and trace, if it fails)
  --replicas R       replicas per seed (default 3)
  --messages M       messages per seed (default 12)
  --backend NAME     memory (default), model, steal-back, unfenced-ack, ignores-delay,
                     ignores-dedupe
  --profile NAME     fault profile: broad (default), lease-edge, store-outage
  --threads T        worker threads for a batch (default: available cores)
  --print            with --seed: print every event as it happens
  --faults-until S   inject faults during the first S virtual seconds (default 90)
  --trace N          events kept for a failure's trace (default 50)
  --bound-scale X    multiply the liveness bound (default 1; <1 shows the check failing)
  --keep-going       report every failing seed of a batch instead of stopping at 5
  --broken NAME      break the driver at the store: acks-after-loss, drops-renew-result,
                     keeps-lost-leases, forgets-lease-at-shutdown, queues-while-down (with
                     --profile store-outage) (to see the checks catch it)";

struct Args {
    cfg: SimConfig,
    seeds: u64,
    first: u64,
    seed: Option<u64>,
    threads: usize,
    print: bool,
    keep_going: bool,
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        cfg: SimConfig::default(),
        seeds: 1000,
        first: 0,
        seed: None,
        threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
        print: false,
        keep_going: false,
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    // The profile sets several knobs: apply it first, so other options refine it.
    if let Some(i) = argv.iter().position(|a| a == "--profile") {
        let name = argv.get(i + 1).ok_or("--profile needs a value")?;
        let profile = Profile::parse(name).ok_or(format!("unknown profile {name:?}"))?;
        args.cfg = SimConfig::with_profile(profile);
    }
    let mut it = argv.into_iter();
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        fn num<T: std::str::FromStr>(flag: &str, v: String) -> Result<T, String> {
            v.parse().map_err(|_| format!("{flag}: not a number: {v}"))
        }
        match flag.as_str() {
            "--seeds" => args.seeds = num(&flag, value()?)?,
            "--first" => args.first = num(&flag, value()?)?,
            "--seed" => args.seed = Some(num(&flag, value()?)?),
            "--replicas" => args.cfg.replicas = num(&flag, value()?)?,
            "--messages" => args.cfg.messages = num(&flag, value()?)?,
            "--threads" => args.threads = num(&flag, value()?)?,
            "--trace" => args.cfg.trace_len = num(&flag, value()?)?,
            "--faults-until" => {
                let secs: f64 = num(&flag, value()?)?;
                if !(0.0..=1e6).contains(&secs) {
                    return Err("--faults-until: between 0 and 1e6 seconds".into());
                }
                args.cfg.faults_until = Duration::from_secs_f64(secs);
            }
            "--bound-scale" => args.cfg.bound_scale = num(&flag, value()?)?,
            "--backend" => {
                let name = value()?;
                args.cfg.store =
                    StoreKind::parse(&name).ok_or(format!("unknown backend {name:?}"))?;
            }
            "--profile" => {
                value()?;
            }
            "--print" => args.print = true,
            "--keep-going" => args.keep_going = true,
            "--broken" => {
                let name = value()?;
                args.cfg.broken =
                    Some(BrokenDriver::parse(&name).ok_or(format!("unknown --broken {name:?}"))?);
            }
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown option {other}")),
        }
    }
    if args.cfg.replicas == 0 || args.cfg.messages == 0 {
        return Err("--replicas and --messages must be at least 1".into());
    }
    Ok(args)
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(args) => args,
        Err(error) => {
            if !error.is_empty() {
                eprintln!("{error}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let started = Instant::now();
    if let Some(seed) = args.seed {
        let result = if args.print {
            run_seed_printing(&args.cfg, seed)
        } else {
            run_seed(&args.cfg, seed)
        };
        return match result {
            Ok(report) => {
                println!(
                    "seed {seed}: all checks passed ({:?} wall)",
                    started.elapsed()
                );
                println!("{report:#?}");
                ExitCode::SUCCESS
            }
            Err(failure) => {
                println!("{failure}");
                ExitCode::FAILURE
            }
        };
    }
    let stop_after = if args.keep_going { usize::MAX } else { 5 };
    let summary = run_seeds(&args.cfg, args.first, args.seeds, args.threads, stop_after);
    let wall = started.elapsed();
    for failure in &summary.failures {
        println!("{failure}");
    }
    let t = &summary.totals;
    let rows: Vec<(&str, String)> = vec![
        (
            "backend",
            format!(
                "{} (fault profile {})",
                args.cfg.store.name(),
                args.cfg.profile.name()
            ),
        ),
        (
            "seeds run",
            format!(
                "{} (from {}; {} replicas, {} messages each)",
                summary.seeds, args.first, args.cfg.replicas, args.cfg.messages
            ),
        ),
        ("violations", summary.failures.len().to_string()),
        (
            "messages",
            format!(
                "{} ({} acked, {} dead-lettered; {} invocations, {} re-invocations; {} delayed, \
                 {} duplicate publishes enqueued nothing)",
                t.messages,
                t.acked,
                t.dead_lettered,
                t.invocations,
                t.reinvocations,
                t.delayed,
                t.duplicates
            ),
        ),
        (
            "faults injected",
            format!(
                "{} ({} crashes, {} pauses, {} clock stalls, {} deploys, {} degraded links, \
                 {} store outages, {} calls failed, {} answers lost, {} slow calls, {} calls \
                 duplicated; {} workers stopped by a fatal error and restarted)",
                t.faults(),
                t.crashes,
                t.pauses,
                t.stalls,
                t.deploys,
                t.link_faults,
                t.outages,
                t.failed_calls,
                t.lost_answers,
                t.slow_calls,
                t.duplicated_calls,
                t.halts
            ),
        ),
        (
            "paused overlaps",
            format!(
                "{} (a takeover while the old runner was paused)",
                t.paused_overlaps
            ),
        ),
        ("virtual time", human(summary.virtual_time)),
        (
            "liveness bound use",
            format!(
                "{:.1}% at most (seed {})",
                summary.worst_bound_use * 100.0,
                summary.worst_bound_seed
            ),
        ),
        ("events", t.events.to_string()),
        (
            "expired in transit",
            format!(
                "{} deliveries (each forced by a slow call, a frozen replica or a long outage)",
                t.expired_in_transit
            ),
        ),
        (
            "stale answers",
            format!(
                "{} (raced with an expiry or a redelivery; ignored)",
                t.stale_inputs
            ),
        ),
        (
            "wall time",
            format!("{:.2?} on {} thread(s)", wall, args.threads),
        ),
    ];
    println!();
    for (name, value) in rows {
        println!("  {name:<20} {value}");
    }
    println!(
        "{} seeds, {} violations",
        summary.seeds,
        summary.failures.len()
    );
    if summary.failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn human(d: Duration) -> String {
    let s = d.as_secs();
    format!("{}h {:02}m {:02}s", s / 3600, s / 60 % 60, s % 60)
}
