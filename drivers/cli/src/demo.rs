//! `leasehold demo`: several workers on one in-memory stream, over a synthetic workload.
//!
//! The workload mixes what a job queue meets in practice: quick messages, slow ones, messages
//! whose work is not finished yet (a VM still provisioning: the handler answers
//! [`Outcome::Pending`] a few times, and is re-invoked every `repoll_interval` while the worker
//! keeps the lease), flaky ones (fail once or twice, then succeed on a later delivery) and poison
//! ones (fail every time, dead-lettered after `max_deliveries`).
//!
//! The handler itself watches for the one thing leasehold promises never to do: run a message
//! twice at the same time. Every invocation registers in a table shared by all workers, keyed by
//! the message; an invocation that finds another one of its message still running counts as a
//! duplicate. At the end every published message must be acked or dead-lettered, none lost.

use std::fmt;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use leasehold::memory::{Bytes, MemoryStream, StreamConfig};
use leasehold::{
    Config, Delivery, Outcome, RetryPolicy, Runtime, ShutdownReport, Stats, Worker, WorkerBuilder,
};
use serde::{Deserialize, Serialize};

use crate::exec::{self, RuntimeKind};
use crate::stats::{grouped, Human, Percentiles};
use crate::CliError;

/// Deliveries before a failing message is dead-lettered: flaky messages fail at most twice, so
/// they always make it; poison ones are dead-lettered on their fourth failure.
pub const MAX_DELIVERIES: u32 = 4;

/// How the demo runs. [`Default`] is what `leasehold demo` runs without flags.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Workers (consumers of the one stream), each with its own engine.
    pub workers: usize,
    /// Handler invocations running at once, per worker.
    pub concurrency: usize,
    /// Messages to publish.
    pub messages: usize,
    /// The runtime the workers run on.
    pub runtime: RuntimeKind,
    /// Messages published per second; 0 publishes all of them at once.
    pub rate: u32,
    /// Seed of the workload's mix (same seed, same messages).
    pub seed: u64,
    /// How long an empty fetch waits before the next.
    pub poll_interval: Duration,
    /// Delay before a `Pending` message is invoked again.
    pub repoll_interval: Duration,
    /// Claim timeout of the stream and the workers.
    pub claim_timeout: Duration,
    /// Give up (and fail) if the workload is not settled after this long.
    pub timeout: Duration,
    /// Show a live progress bar (on stderr, only when it is a terminal).
    pub progress: bool,
    /// Serve the web dashboard over the stream here while the demo runs.
    pub dashboard: Option<std::net::SocketAddr>,
}

impl Default for DemoOptions {
    fn default() -> Self {
        Self {
            workers: 3,
            concurrency: 8,
            messages: 2000,
            runtime: RuntimeKind::Tokio,
            rate: 400,
            seed: 42,
            poll_interval: Duration::from_millis(50),
            repoll_interval: Duration::from_millis(200),
            claim_timeout: Duration::from_secs(3),
            timeout: Duration::from_secs(120),
            progress: false,
            dashboard: None,
        }
    }
}

impl DemoOptions {
    /// The engine configuration every worker gets.
    pub fn engine_config(&self) -> Config {
        Config::default()
            .concurrency(self.concurrency)
            .max_leases(self.concurrency.max(1000))
            .claim_timeout(self.claim_timeout)
            .poll_interval(self.poll_interval)
            .repoll_interval(self.repoll_interval)
            .max_processing_time(Duration::from_secs(10))
            .retry(RetryPolicy {
                initial: Duration::from_millis(100),
                multiplier: 2.0,
                max: Duration::from_secs(2),
                jitter: 0.2,
            })
            .max_deliveries(MAX_DELIVERIES)
            .shutdown_grace(Duration::from_secs(5))
    }

    fn validate(&self) -> Result<(), CliError> {
        let invalid = |what: &str| Err(CliError::Invalid(what.to_owned()));
        if self.workers == 0 {
            return invalid("--workers must be at least 1");
        }
        if self.messages == 0 {
            return invalid("--messages must be at least 1");
        }
        if u32::try_from(self.messages).is_err() {
            return invalid("--messages must be at most 4294967295");
        }
        if self.timeout.is_zero() {
            return invalid("--timeout must be greater than zero");
        }
        // Every other knob is checked by the engine and the stream, with their own messages.
        self.engine_config().validate()?;
        Ok(())
    }
}

/// What a message asks of its handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Work {
    /// Done at once.
    Quick,
    /// Takes `ms` milliseconds.
    Slow {
        /// How long.
        ms: u32,
    },
    /// Not finished on the first `polls` invocations (each a short status check of `check_ms`):
    /// answers `Pending`, then `Done`.
    Provisioning {
        /// Invocations that answer `Pending`.
        polls: u32,
        /// Duration of each status check.
        check_ms: u32,
    },
    /// Fails on its first `failures` deliveries, then succeeds.
    Flaky {
        /// Failed deliveries before the success.
        failures: u32,
    },
    /// Fails on every delivery: dead-lettered after [`MAX_DELIVERIES`].
    Poison,
}

/// One demo message: its index in the workload and what it asks for.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Job {
    /// Index in the workload.
    pub n: u32,
    /// The work.
    pub work: Work,
}

/// The demo's workload: `messages` jobs, mixed deterministically from `seed` (about 70 % quick,
/// 12 % slow, 10 % provisioning, 6 % flaky, 2 % poison).
pub fn workload(messages: usize, seed: u64) -> Vec<Work> {
    let mut rng = SplitMix(seed);
    (0..messages)
        .map(|_| match rng.below(100) {
            0..=69 => Work::Quick,
            70..=81 => Work::Slow {
                ms: 20 + rng.below(381) as u32,
            },
            82..=91 => Work::Provisioning {
                polls: 2 + rng.below(3) as u32,
                check_ms: 1 + rng.below(5) as u32,
            },
            92..=97 => Work::Flaky {
                failures: 1 + rng.below(2) as u32,
            },
            _ => Work::Poison,
        })
        .collect()
}

/// A tiny deterministic generator (SplitMix64): the workload needs no more.
struct SplitMix(u64);

impl SplitMix {
    fn below(&mut self, bound: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % bound
    }
}

/// What the handlers observe, shared by every worker.
struct Tracker {
    start: Instant,
    jobs: Vec<JobTrack>,
    published: AtomicUsize,
    invocations: AtomicU64,
    reinvocations: AtomicU64,
    retries: AtomicU64,
    failures: AtomicU64,
    duplicates: AtomicU64,
    running: AtomicUsize,
    done: AtomicUsize,
    given_up: AtomicUsize,
}

/// One message's timeline. Stamps are nanoseconds since `Tracker::start`, plus one (0 = unset).
#[derive(Default)]
struct JobTrack {
    published: AtomicU64,
    first_run: AtomicU64,
    finished: AtomicU64,
    /// Invocations of this message running right now, across all workers: more than one is a
    /// duplicate execution.
    running: AtomicU32,
}

impl Tracker {
    fn new(jobs: usize) -> Self {
        Self {
            start: Instant::now(),
            jobs: (0..jobs).map(|_| JobTrack::default()).collect(),
            published: AtomicUsize::new(0),
            invocations: AtomicU64::new(0),
            reinvocations: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            duplicates: AtomicU64::new(0),
            running: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            given_up: AtomicUsize::new(0),
        }
    }

    fn stamp(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX - 1) + 1
    }

    fn settled(&self) -> usize {
        self.done.load(Relaxed) + self.given_up.load(Relaxed)
    }
}

/// Registration of one running invocation; dropping it (the handler returned, or its future
/// was dropped after a cancel) unregisters it.
struct Running<'a> {
    tracker: &'a Tracker,
    job: &'a JobTrack,
}

impl<'a> Running<'a> {
    fn enter(tracker: &'a Tracker, job: &'a JobTrack) -> Self {
        if job.running.fetch_add(1, Relaxed) > 0 {
            tracker.duplicates.fetch_add(1, Relaxed);
        }
        tracker.running.fetch_add(1, Relaxed);
        tracker.invocations.fetch_add(1, Relaxed);
        let _ = job
            .first_run
            .compare_exchange(0, tracker.stamp(), Relaxed, Relaxed);
        Self { tracker, job }
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.job.running.fetch_sub(1, Relaxed);
        self.tracker.running.fetch_sub(1, Relaxed);
    }
}

/// The demo's handler.
async fn handle<R: Runtime>(rt: R, tracker: Arc<Tracker>, delivery: Delivery<Job>) -> Outcome {
    let Job { n, work } = *delivery.message();
    let Some(job) = tracker.jobs.get(n as usize) else {
        return Outcome::Reject {
            reason: format!("job {n} is not part of this workload"),
        };
    };
    let _running = Running::enter(&tracker, job);
    if delivery.attempt() > 1 {
        tracker.reinvocations.fetch_add(1, Relaxed);
    } else if delivery.delivery_count() > 1 {
        tracker.retries.fetch_add(1, Relaxed);
    }
    let pause = |ms: u32| {
        let rt = rt.clone();
        async move {
            rt.sleep_until(rt.now() + Duration::from_millis(ms.into()))
                .await
        }
    };
    let outcome = match work {
        Work::Quick => Outcome::Done,
        Work::Slow { ms } => {
            // Long work listens for cancellation (lease lost, max processing time, shutdown).
            let work = async {
                pause(ms).await;
                Outcome::Done
            };
            let cancelled = async {
                let reason = delivery.cancelled().await;
                Outcome::Failed {
                    error: format!("cancelled: {reason:?}"),
                }
            };
            smol::future::or(work, cancelled).await
        }
        Work::Provisioning { polls, check_ms } => {
            pause(check_ms).await;
            if delivery.attempt() <= polls {
                Outcome::Pending
            } else {
                Outcome::Done
            }
        }
        Work::Flaky { failures } if delivery.delivery_count() <= failures => Outcome::Failed {
            error: format!("flaky: failure {} of {failures}", delivery.delivery_count()),
        },
        Work::Flaky { .. } => Outcome::Done,
        Work::Poison => Outcome::Failed {
            error: "poison: fails every time".into(),
        },
    };
    match &outcome {
        Outcome::Done => {
            job.finished.store(tracker.stamp(), Relaxed);
            tracker.done.fetch_add(1, Relaxed);
        }
        Outcome::Failed { .. } => {
            tracker.failures.fetch_add(1, Relaxed);
            if delivery.delivery_count() >= MAX_DELIVERIES {
                // The last allowed delivery failed: the worker dead-letters the message.
                job.finished.store(tracker.stamp(), Relaxed);
                tracker.given_up.fetch_add(1, Relaxed);
            }
        }
        _ => {}
    }
    outcome
}

/// What a demo run observed.
#[derive(Debug, Clone)]
pub struct DemoReport {
    /// The options it ran with.
    pub options: DemoOptions,
    /// The workload, by kind: quick, slow, provisioning, flaky, poison.
    pub mix: [usize; 5],
    /// Messages published.
    pub published: usize,
    /// From the first publish until every message was acked or dead-lettered.
    pub wall: Duration,
    /// Publish → first invocation, per message.
    pub pickup: Percentiles,
    /// Publish → final outcome (`Done`, or the failure that dead-lettered it), per message.
    pub processing: Percentiles,
    /// Handler invocations.
    pub invocations: u64,
    /// Invocations that re-ran a message after it answered `Pending`.
    pub reinvocations: u64,
    /// Deliveries after a failed one (the message came back after its backoff).
    pub retries: u64,
    /// Failed invocations.
    pub failures: u64,
    /// Invocations that started while another invocation of the same message was running.
    pub duplicates: u64,
    /// Messages acked (gone from the stream, not dead-lettered).
    pub acked: usize,
    /// Messages in the dead-letter stream.
    pub dead_lettered: usize,
    /// Dead letters that are not poison messages.
    pub unexpected_dead_letters: usize,
    /// Messages still in the stream after shutdown: neither acked nor dead-lettered.
    pub unsettled: usize,
    /// The workload did not settle within the timeout.
    pub timed_out: bool,
    /// The engines' counters, summed over the workers, just before shutdown.
    pub engine: Stats,
    /// The shutdown reports, summed over the workers.
    pub shutdown: ShutdownReport,
}

impl DemoReport {
    /// Whether the run kept leasehold's promises: no duplicate execution, nothing lost, every
    /// message settled in time, only poison messages dead-lettered.
    pub fn passed(&self) -> bool {
        self.duplicates == 0
            && self.unsettled == 0
            && !self.timed_out
            && self.published == self.options.messages
            && self.unexpected_dead_letters == 0
            && self.acked + self.dead_lettered == self.options.messages
    }

    /// Messages per second over the wall time.
    pub fn throughput(&self) -> f64 {
        (self.acked + self.dead_lettered) as f64 / self.wall.as_secs_f64().max(1e-9)
    }
}

impl fmt::Display for DemoReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = &self.options;
        let [quick, slow, provisioning, flaky, poison] = self.mix;
        let rate = match o.rate {
            0 => "all published up front".to_owned(),
            r => format!("published at {r} msg/s"),
        };
        let latency = |p: &Percentiles| {
            format!(
                "p50 {:>8}   p99 {:>8}   max {:>8}",
                Human(p.p50),
                Human(p.p99),
                Human(p.max)
            )
        };
        let s = &self.shutdown;
        writeln!(
            f,
            "leasehold demo: {} workers x concurrency {} on one in-memory stream ({})",
            o.workers,
            o.concurrency,
            o.runtime.name()
        )?;
        writeln!(
            f,
            "  poll {:?}, repoll {:?}, claim timeout {:?}, max deliveries {MAX_DELIVERIES}",
            o.poll_interval, o.repoll_interval, o.claim_timeout
        )?;
        writeln!(f)?;
        let rows: [(&str, String, String); 13] = [
            (
                "messages",
                self.published.to_string(),
                format!(
                    "{quick} quick, {slow} slow, {provisioning} provisioning, {flaky} flaky, \
                     {poison} poison; {rate}"
                ),
            ),
            (
                "wall time",
                Human(self.wall).to_string(),
                "first publish -> last message settled".into(),
            ),
            (
                "throughput",
                format!("{} msg/s", grouped(self.throughput())),
                "settled messages / wall time".into(),
            ),
            (
                "pickup latency",
                String::new(),
                format!("{}   publish -> first invocation", latency(&self.pickup)),
            ),
            (
                "processing latency",
                String::new(),
                format!("{}   publish -> final outcome", latency(&self.processing)),
            ),
            (
                "invocations",
                self.invocations.to_string(),
                format!("engines counted {} invocations", self.engine.invocations),
            ),
            (
                "re-invocations",
                self.reinvocations.to_string(),
                "invoked again after Outcome::Pending, lease kept".into(),
            ),
            (
                "retries",
                self.retries.to_string(),
                format!(
                    "redeliveries after a failure ({} failed invocations)",
                    self.failures
                ),
            ),
            ("acked", self.acked.to_string(), String::new()),
            (
                "dead-lettered",
                self.dead_lettered.to_string(),
                format!("after {MAX_DELIVERIES} failed deliveries; {poison} poison published"),
            ),
            (
                "duplicates observed",
                self.duplicates.to_string(),
                "two invocations of one message at once, across all workers".into(),
            ),
            (
                "lost",
                self.unsettled.to_string(),
                "published but neither acked nor dead-lettered".into(),
            ),
            (
                "shutdown reports",
                String::new(),
                format!(
                    "acked {} ({} after their lease expired), released {}, cancelled {}, \
                     dead-lettered {}, lost {}, abandoned {}",
                    s.acked,
                    s.acked_after_expiry,
                    s.released,
                    s.cancelled,
                    s.dead_lettered,
                    s.lost,
                    s.abandoned
                ),
            ),
        ];
        for (name, value, note) in rows {
            let line = format!("  {name:<20} {value:>12}   {note}");
            writeln!(f, "{}", line.trim_end())?;
        }
        writeln!(f)?;
        if self.passed() {
            write!(
                f,
                "OK: every message acked or dead-lettered, no duplicate execution"
            )
        } else {
            let mut problems = Vec::new();
            if self.duplicates > 0 {
                problems.push(format!("{} duplicate invocations", self.duplicates));
            }
            if self.timed_out {
                problems.push(format!("not settled within {:?}", o.timeout));
            }
            if self.published != o.messages {
                problems.push(format!("published {} of {}", self.published, o.messages));
            }
            if self.unsettled > 0 || self.acked + self.dead_lettered != o.messages {
                problems.push(format!(
                    "{} messages lost or unsettled",
                    o.messages.saturating_sub(self.acked + self.dead_lettered)
                ));
            }
            if self.unexpected_dead_letters > 0 {
                problems.push(format!(
                    "{} dead letters that are not poison",
                    self.unexpected_dead_letters
                ));
            }
            write!(f, "FAILED: {}", problems.join("; "))
        }
    }
}

/// Runs the demo to the end and reports what it observed. An error means it could not start
/// (bad options); a run that broke a promise is a report whose [`passed`](DemoReport::passed)
/// is false.
pub fn run(options: &DemoOptions) -> Result<DemoReport, CliError> {
    options.validate()?;
    match options.runtime {
        RuntimeKind::Tokio => exec::on_tokio(|rt| demo_on(rt, options))?,
        RuntimeKind::Smol => exec::on_smol(|rt| demo_on(rt, options))?,
    }
}

async fn demo_on<R: Runtime>(rt: R, options: &DemoOptions) -> Result<DemoReport, CliError> {
    let plan = workload(options.messages, options.seed);
    let payloads = plan
        .iter()
        .enumerate()
        .map(|(n, &work)| {
            let job = Job {
                n: n as u32, // validated: at most u32::MAX messages
                work,
            };
            serde_json::to_vec(&job)
                .map(Bytes::from)
                .map_err(|e| CliError::Invalid(format!("cannot encode job {n}: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let stream = MemoryStream::new(StreamConfig::new(options.claim_timeout))?;
    // Stops when the demo returns.
    let _dashboard = options
        .dashboard
        .map(|addr| crate::dashboard::DemoDashboard::start(addr, "jobs", &stream))
        .transpose()
        .map_err(CliError::Invalid)?;
    let tracker = Arc::new(Tracker::new(plan.len()));

    let config = options.engine_config();
    let mut workers: Vec<Worker<Bytes>> = Vec::with_capacity(options.workers);
    for i in 1..=options.workers {
        let backend = stream.consumer(&format!("worker-{i}"))?;
        let (handler_rt, handler_tracker) = (rt.clone(), tracker.clone());
        let worker = WorkerBuilder::new(rt.clone())
            .config(config.clone())
            .stream("jobs", backend, move |delivery: Delivery<Job>| {
                handle(handler_rt.clone(), handler_tracker.clone(), delivery)
            })
            .start()?;
        workers.push(worker);
    }

    let bar = progress_bar(options);
    let started = Instant::now();
    let producer = {
        let (rt, stream, tracker, rate) =
            (rt.clone(), stream.clone(), tracker.clone(), options.rate);
        async move {
            let start = rt.now();
            for (n, payload) in payloads.into_iter().enumerate() {
                if rate > 0 {
                    let due = start + Duration::from_secs_f64(n as f64 / f64::from(rate));
                    if rt.now() < due {
                        rt.sleep_until(due).await;
                    }
                }
                tracker.jobs[n].published.store(tracker.stamp(), Relaxed);
                stream.publish(payload);
                tracker.published.fetch_add(1, Relaxed);
            }
        }
    };
    rt.spawn(Box::pin(producer));

    let deadline = started + options.timeout;
    let mut timed_out = false;
    loop {
        rt.sleep_until(rt.now() + Duration::from_millis(10)).await;
        let published = tracker.published.load(Relaxed);
        let settled = tracker.settled();
        bar.set_position(settled.min(options.messages) as u64);
        bar.set_message(format!(
            "in flight {:>5} · running {:>4} · dead-lettered {:>4}",
            published.saturating_sub(settled),
            tracker.running.load(Relaxed),
            tracker.given_up.load(Relaxed),
        ));
        if published == options.messages && stream.is_empty() {
            break;
        }
        if Instant::now() >= deadline {
            timed_out = true;
            break;
        }
    }
    let wall = started.elapsed();
    bar.finish_and_clear();

    let mut engine = Stats::default();
    for worker in &workers {
        if let Some(stats) = worker.stats().await {
            add_stats(&mut engine, &stats);
        }
    }
    let mut shutdown = ShutdownReport::default();
    for worker in workers {
        let report = worker.shutdown(Duration::from_secs(5)).await;
        shutdown.acked += report.acked;
        shutdown.acked_after_expiry += report.acked_after_expiry;
        shutdown.released += report.released;
        shutdown.cancelled += report.cancelled;
        shutdown.dead_lettered += report.dead_lettered;
        shutdown.lost += report.lost;
        shutdown.abandoned += report.abandoned;
    }

    let published = tracker.published.load(Relaxed);
    let dead = stream.dead_letters();
    let unexpected_dead_letters = dead
        .iter()
        .filter(|letter| {
            !matches!(
                serde_json::from_slice::<Job>(&letter.payload),
                Ok(Job {
                    work: Work::Poison,
                    ..
                })
            )
        })
        .count();
    let unsettled = stream.len();
    let mut pickup = Vec::new();
    let mut processing = Vec::new();
    for job in &tracker.jobs {
        let published = job.published.load(Relaxed);
        let since = |stamp: u64| (stamp > 0).then(|| Duration::from_nanos(stamp - published));
        if published > 0 {
            pickup.extend(since(job.first_run.load(Relaxed)));
            processing.extend(since(job.finished.load(Relaxed)));
        }
    }
    let mut mix = [0; 5];
    for work in &plan {
        mix[match work {
            Work::Quick => 0,
            Work::Slow { .. } => 1,
            Work::Provisioning { .. } => 2,
            Work::Flaky { .. } => 3,
            Work::Poison => 4,
        }] += 1;
    }
    Ok(DemoReport {
        options: options.clone(),
        mix,
        published,
        wall,
        pickup: Percentiles::of(pickup),
        processing: Percentiles::of(processing),
        invocations: tracker.invocations.load(Relaxed),
        reinvocations: tracker.reinvocations.load(Relaxed),
        retries: tracker.retries.load(Relaxed),
        failures: tracker.failures.load(Relaxed),
        duplicates: tracker.duplicates.load(Relaxed),
        acked: published.saturating_sub(unsettled + dead.len()),
        dead_lettered: dead.len(),
        unexpected_dead_letters,
        unsettled,
        timed_out,
        engine,
        shutdown,
    })
}

fn progress_bar(options: &DemoOptions) -> ProgressBar {
    if !options.progress {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(options.messages as u64);
    let style = ProgressStyle::with_template(
        "{spinner} {elapsed:>4} [{bar:32}] {pos:>6}/{len} settled · {msg}",
    )
    .map(|style| style.progress_chars("=> "))
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar.enable_steady_tick(Duration::from_millis(100));
    bar
}

fn add_stats(total: &mut Stats, s: &Stats) {
    total.delivered += s.delivered;
    total.redelivered += s.redelivered;
    total.overflow += s.overflow;
    total.invocations += s.invocations;
    total.pending += s.pending;
    total.failures += s.failures;
    total.acked += s.acked;
    total.acked_late += s.acked_late;
    total.acked_after_expiry += s.acked_after_expiry;
    total.released += s.released;
    total.dead_lettered += s.dead_lettered;
    total.cancelled += s.cancelled;
    total.lost += s.lost;
    total.expired += s.expired;
    total.abandoned += s.abandoned;
}
