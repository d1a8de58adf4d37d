//! Messages per second through a worker on the in-memory backend with a no-op handler, against
//! the minimal async consumer measured in the same run
//! (`cargo bench -p leasehold-benches --bench e2e-memory`).
//!
//! - **baseline**: `n` messages pre-sent into a tokio unbounded mpsc channel; one task receives
//!   them and spawns a task per message that runs the no-op handler. No lease, no ack, and no
//!   concurrency limit: every message gets its task at once.
//! - **leasehold**: `n` messages pre-published to a [`MemoryStream`]; one worker (tokio, the
//!   same multi-thread runtime) fetches, leases, runs the no-op handler under the concurrency
//!   limit, and acks. The clock stops when the backend has acked the `n`-th message.
//!
//! Rounds alternate (baseline, leasehold, baseline, …) so that drift of the machine hits both
//! alike; the table shows the medians of the rounds and their ratio.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use leasehold_memory::{Bytes, MemoryStream, StreamConfig};
use leasehold_tokio::{Config, Delivery, Raw, TokioRuntime, WorkerBuilder};
use serde_json::{json, Value};
use tokio::sync::Notify;

use super::counting::{AckCounter, CallCounts, Counting};
use super::stats::{cpu_time, grouped, median};
use super::{BenchError, Metered};

/// What to measure.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Messages per round.
    pub messages: usize,
    /// Measured rounds per side and concurrency (one more, unmeasured, warms up).
    pub rounds: usize,
    /// The worker's concurrency settings to measure.
    pub concurrency: Vec<usize>,
    /// Worker threads of the tokio runtime (`None`: one per core).
    pub threads: Option<usize>,
    /// Show a progress bar (on stderr, only when it is a terminal).
    pub progress: bool,
    /// Also measure a worker recording its metrics (a Prometheus recorder), each round.
    pub metrics: bool,
}

impl Default for BenchOptions {
    fn default() -> Self {
        Self {
            messages: 100_000,
            rounds: 5,
            concurrency: vec![1, 100, 1000],
            threads: None,
            progress: false,
            metrics: false,
        }
    }
}

/// The backend calls of one leasehold round (until the last ack): how well the driver batches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Calls {
    /// `fetch` calls.
    pub fetches: usize,
    /// Messages those fetches returned.
    pub fetched: usize,
    /// `ack` calls.
    pub acks: usize,
    /// `renew` calls.
    pub renews: usize,
}

/// One concurrency setting's result: messages per second of every round, and the medians.
#[derive(Debug, Clone)]
pub struct BenchRow {
    /// The worker's concurrency (the baseline has no limit).
    pub concurrency: usize,
    /// Baseline rounds, messages per second.
    pub baseline: Vec<f64>,
    /// leasehold rounds, messages per second.
    pub leasehold: Vec<f64>,
    /// leasehold rounds with a metrics recorder, messages per second (with `metrics`).
    pub metered: Vec<f64>,
    /// Backend calls of each leasehold round.
    pub calls: Vec<Calls>,
    /// CPU time per message of each baseline round, in µs (empty where unmeasurable).
    pub baseline_cpu: Vec<f64>,
    /// CPU time per message of each leasehold round, in µs (empty where unmeasurable).
    pub leasehold_cpu: Vec<f64>,
}

impl BenchRow {
    /// Median of the baseline rounds.
    pub fn baseline_median(&self) -> f64 {
        median(&self.baseline)
    }

    /// Median of the leasehold rounds.
    pub fn leasehold_median(&self) -> f64 {
        median(&self.leasehold)
    }

    /// leasehold / baseline, of the medians.
    pub fn ratio(&self) -> f64 {
        self.leasehold_median() / self.baseline_median().max(f64::MIN_POSITIVE)
    }

    /// With a metrics recorder / without, of the medians (when measured).
    pub fn metered_ratio(&self) -> Option<f64> {
        (!self.metered.is_empty())
            .then(|| median(&self.metered) / self.leasehold_median().max(f64::MIN_POSITIVE))
    }

    /// The row as JSON: the medians and their ratio, then every round.
    pub fn to_json(&self) -> Value {
        let cpu = |samples: &[f64]| (!samples.is_empty()).then(|| median(samples));
        json!({
            "concurrency": self.concurrency,
            "baseline_msg_per_s": self.baseline_median(),
            "leasehold_msg_per_s": self.leasehold_median(),
            "ratio": self.ratio(),
            "metered_msg_per_s": (!self.metered.is_empty()).then(|| median(&self.metered)),
            "metered_ratio": self.metered_ratio(),
            "baseline_cpu_us_per_msg": cpu(&self.baseline_cpu),
            "leasehold_cpu_us_per_msg": cpu(&self.leasehold_cpu),
            "rounds": {
                "baseline_msg_per_s": self.baseline,
                "leasehold_msg_per_s": self.leasehold,
                "metered_msg_per_s": self.metered,
                "baseline_cpu_us_per_msg": self.baseline_cpu,
                "leasehold_cpu_us_per_msg": self.leasehold_cpu,
                "calls": self.calls.iter().map(|c| c.to_json()).collect::<Vec<_>>(),
            },
        })
    }
}

impl Calls {
    fn to_json(self) -> Value {
        json!({
            "fetches": self.fetches,
            "fetched": self.fetched,
            "acks": self.acks,
            "renews": self.renews,
        })
    }
}

/// The whole measurement.
#[derive(Debug, Clone)]
pub struct BenchReport {
    /// What was measured.
    pub options: BenchOptions,
    /// Worker threads of the tokio runtime.
    pub threads: usize,
    /// One row per concurrency setting.
    pub rows: Vec<BenchRow>,
}

impl BenchReport {
    /// The results as JSON (what `--json` prints): the options, and per concurrency the medians,
    /// the ratio and every round.
    pub fn to_json(&self) -> Value {
        let o = &self.options;
        json!({
            "bench": "e2e-memory",
            "messages": o.messages,
            "rounds": o.rounds,
            "threads": self.threads,
            "rows": self.rows.iter().map(BenchRow::to_json).collect::<Vec<_>>(),
        })
    }
}

impl fmt::Display for BenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = &self.options;
        writeln!(
            f,
            "memory backend, no-op handler, {} messages per round, median of {} interleaved \
             rounds, tokio multi-thread ({} threads)",
            grouped(o.messages as f64),
            o.rounds,
            self.threads
        )?;
        writeln!(f)?;
        writeln!(
            f,
            "| concurrency | baseline (msg/s) | leasehold (msg/s) | leasehold / baseline \
             | CPU µs/msg baseline | CPU µs/msg leasehold |"
        )?;
        writeln!(f, "|---:|---:|---:|---:|---:|---:|")?;
        let cpu = |samples: &[f64]| match samples {
            [] => "n/a".to_owned(),
            _ => format!("{:.2}", median(samples)),
        };
        for row in &self.rows {
            writeln!(
                f,
                "| {} | {} | {} | {:.2} | {} | {} |",
                row.concurrency,
                grouped(row.baseline_median()),
                grouped(row.leasehold_median()),
                row.ratio(),
                cpu(&row.baseline_cpu),
                cpu(&row.leasehold_cpu),
            )?;
        }
        if self.rows.iter().any(|r| r.metered_ratio().is_some()) {
            writeln!(f)?;
            writeln!(
                f,
                "| concurrency | leasehold (msg/s) | with a metrics recorder (msg/s) | with / \
                 without |"
            )?;
            writeln!(f, "|---:|---:|---:|---:|")?;
            for row in &self.rows {
                if let Some(ratio) = row.metered_ratio() {
                    writeln!(
                        f,
                        "| {} | {} | {} | {ratio:.3} |",
                        row.concurrency,
                        grouped(row.leasehold_median()),
                        grouped(median(&row.metered)),
                    )?;
                }
            }
        }
        writeln!(f)?;
        writeln!(f, "backend calls per leasehold round (mean of the rounds):")?;
        for row in &self.rows {
            let n = row.calls.len().max(1) as f64;
            let sum = |pick: fn(&Calls) -> usize| row.calls.iter().map(pick).sum::<usize>() as f64;
            let (fetches, fetched) = (sum(|c| c.fetches), sum(|c| c.fetched));
            writeln!(
                f,
                "  concurrency {:>5}: {:>7.0} fetches ({:.1} messages each), {:>7.0} acks \
                 ({:.1} messages each), {:.0} renews",
                row.concurrency,
                fetches / n,
                fetched / fetches.max(1.0),
                sum(|c| c.acks) / n,
                o.messages as f64 * n / sum(|c| c.acks).max(1.0),
                sum(|c| c.renews) / n,
            )?;
        }
        writeln!(f)?;
        write!(
            f,
            "baseline: tokio unbounded mpsc, one spawned task per message, no concurrency limit, \
             no lease, no ack (the same in every row).\nleasehold: one worker, fetch + lease + \
             run + batched ack on the in-memory stream, concurrency as in the row."
        )
    }
}

/// Runs the benchmark on a fresh tokio multi-thread runtime.
pub fn run(options: &BenchOptions) -> Result<BenchReport, BenchError> {
    if options.messages == 0 {
        return Err(BenchError::Invalid("--messages must be at least 1".into()));
    }
    if options.rounds == 0 {
        return Err(BenchError::Invalid("--rounds must be at least 1".into()));
    }
    if options.threads == Some(0) {
        return Err(BenchError::Invalid("--threads must be at least 1".into()));
    }
    if options.concurrency.is_empty() || options.concurrency.contains(&0) {
        return Err(BenchError::Invalid(
            "--concurrency takes one or more values, each at least 1".into(),
        ));
    }
    for &concurrency in &options.concurrency {
        worker_config(concurrency).validate()?;
    }
    let runtime = super::tokio_runtime(options.threads)?;
    let threads = runtime.metrics().num_workers();
    let rt = TokioRuntime::from_handle(runtime.handle().clone());
    let bar = progress_bar(options);
    let metered = options.metrics.then(Metered::new);
    let mut rows = Vec::new();
    for &concurrency in &options.concurrency {
        let mut row = BenchRow {
            concurrency,
            baseline: Vec::new(),
            leasehold: Vec::new(),
            metered: Vec::new(),
            calls: Vec::new(),
            baseline_cpu: Vec::new(),
            leasehold_cpu: Vec::new(),
        };
        // Round 0 warms up (allocator, thread pool) and is not counted.
        for round in 0..=options.rounds {
            bar.set_message(format!("concurrency {concurrency}, round {round}"));
            let base = runtime.block_on(baseline_round(options.messages));
            let worker = |recorder: Option<&Metered>| {
                let round = runtime.block_on(leasehold_round(
                    rt.clone(),
                    options.messages,
                    concurrency,
                    recorder,
                ));
                recorder.inspect(|r| r.upkeep());
                round
            };
            // With a recorder too, the two workers take turns going first, so that neither
            // side gets the position's luck every round.
            let (lease, metered) = match &metered {
                Some(recorder) if round % 2 == 1 => {
                    let metered = worker(Some(recorder))?;
                    (worker(None)?, Some(metered))
                }
                Some(recorder) => {
                    let lease = worker(None)?;
                    (lease, Some(worker(Some(recorder))?))
                }
                None => (worker(None)?, None),
            };
            if round > 0 {
                let per_message = |cpu: Option<Duration>| {
                    cpu.map(|cpu| cpu.as_secs_f64() * 1e6 / options.messages as f64)
                };
                row.baseline.push(rate(options.messages, base.wall));
                row.leasehold.push(rate(options.messages, lease.wall));
                row.metered
                    .extend(metered.map(|m| rate(options.messages, m.wall)));
                row.baseline_cpu.extend(per_message(base.cpu));
                row.leasehold_cpu.extend(per_message(lease.cpu));
                row.calls.push(lease.calls);
            }
            bar.inc(1);
        }
        rows.push(row);
    }
    bar.finish_and_clear();
    Ok(BenchReport {
        options: options.clone(),
        threads,
        rows,
    })
}

fn rate(messages: usize, took: Duration) -> f64 {
    messages as f64 / took.as_secs_f64().max(1e-9)
}

/// The defaults, except the concurrency under test (and `max_leases`, which must not be below
/// it) and a short poll interval: the last fetch of a round waits that long for new messages,
/// and shutdown waits for that fetch (outside the measured time, but it slows the benchmark).
fn worker_config(concurrency: usize) -> Config {
    Config::default()
        .concurrency(concurrency)
        .max_leases(concurrency.max(1000))
        .poll_interval(Duration::from_millis(50))
}

/// The payload of every message: small, like an id.
const PAYLOAD: &[u8] = b"job-0001";

/// A handler that does nothing.
async fn no_op(delivery: Delivery<Vec<u8>>) {
    std::hint::black_box(delivery.message());
}

/// The minimal async consumer: an mpsc channel and a spawned task per message.
async fn baseline_round(messages: usize) -> Round {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Bytes>();
    for _ in 0..messages {
        // The receiver is alive until below: sending cannot fail.
        let _ = tx.send(Bytes::from_static(PAYLOAD));
    }
    drop(tx);
    let done = Arc::new((AtomicUsize::new(0), Notify::new()));
    let clock = Stopwatch::start();
    let counter = done.clone();
    tokio::spawn(async move {
        while let Some(message) = rx.recv().await {
            let counter = counter.clone();
            tokio::spawn(async move {
                std::hint::black_box(message);
                if counter.0.fetch_add(1, Ordering::AcqRel) + 1 == messages {
                    counter.1.notify_one();
                }
            });
        }
    });
    done.1.notified().await;
    clock.stop(Calls::default())
}

/// One worker over a pre-published stream (recording its metrics into `metered`, if given);
/// the clock stops at the last ack.
async fn leasehold_round(
    rt: TokioRuntime,
    messages: usize,
    concurrency: usize,
    metered: Option<&Metered>,
) -> Result<Round, BenchError> {
    let stream = MemoryStream::new(StreamConfig::default())?;
    for _ in 0..messages {
        stream.publish(Bytes::from_static(PAYLOAD));
    }
    let acked = Arc::new(AckCounter {
        target: messages,
        acked: AtomicUsize::new(0),
        all_acked: Notify::new(),
        calls: CallCounts::default(),
    });
    let backend = Counting::new(stream.consumer("bench")?, acked.clone());
    let clock = Stopwatch::start();
    let builder = WorkerBuilder::new(rt)
        .config(worker_config(concurrency))
        .stream_with_codec("bench", backend, Raw, no_op);
    let worker = match metered {
        Some(recorder) => recorder.start(|| builder.start())?,
        None => builder.start()?,
    };
    acked.all_acked.notified().await;
    let calls = &acked.calls;
    let calls = Calls {
        fetches: calls.fetches.load(Ordering::Relaxed),
        fetched: calls.fetched.load(Ordering::Relaxed),
        acks: calls.acks.load(Ordering::Relaxed),
        renews: calls.renews.load(Ordering::Relaxed),
    };
    let round = clock.stop(calls);
    let report = worker.shutdown(Duration::from_secs(5)).await;
    if report.acked != messages as u64 || !stream.is_empty() {
        return Err(BenchError::Invalid(format!(
            "benchmark round lost messages: {} acked of {messages}, {} left in the stream",
            report.acked,
            stream.len()
        )));
    }
    Ok(round)
}

/// What one round measured.
struct Round {
    wall: Duration,
    /// CPU time of the whole process during the round, where the platform tells.
    cpu: Option<Duration>,
    calls: Calls,
}

struct Stopwatch {
    wall: Instant,
    cpu: Option<Duration>,
}

impl Stopwatch {
    fn start() -> Self {
        Self {
            cpu: cpu_time(),
            wall: Instant::now(),
        }
    }

    fn stop(self, calls: Calls) -> Round {
        let wall = self.wall.elapsed();
        let cpu = match (self.cpu, cpu_time()) {
            (Some(start), Some(end)) => end.checked_sub(start),
            _ => None,
        };
        Round { wall, cpu, calls }
    }
}

fn progress_bar(options: &BenchOptions) -> ProgressBar {
    if !options.progress {
        return ProgressBar::hidden();
    }
    let rounds = (options.rounds + 1) * options.concurrency.len();
    let bar = ProgressBar::new(rounds as u64);
    let style = ProgressStyle::with_template("{spinner} {elapsed:>4} [{bar:32}] {pos}/{len} {msg}")
        .map(|style| style.progress_chars("=> "))
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar.enable_steady_tick(Duration::from_millis(100));
    bar
}
