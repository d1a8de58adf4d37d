//! The producer on Redis against the same work done by hand with the `redis` crate, on a
//! throwaway `redis-server` started by the benchmark itself, never the machine's 6379
//! (`cargo bench -p leasehold-benches --bench producer`).
//!
//! Four rows, each against a baseline measured in the same run:
//!
//! 1. **`publish_batch`**: messages per second through `Producer::publish_batch` (over a
//!    [`RedisPublisher`], raw bytes) against a hand-written loop sending one pipeline of
//!    `XADD stream * data <payload>` per batch of the same size, one batch in flight at a time.
//! 2. **single `publish`**: `Producer::publish`, awaited one at a time, against one `XADD` per
//!    await on a multiplexed connection.
//! 3. **delayed messages all due at once**: N messages published delayed (published before the
//!    clock starts, then waited for until every one is due), consumed by a tokio worker over a
//!    [`RedisBackend`] with a no-op handler; against N plain messages consumed the same way.
//!    The clock runs from the worker's start to its last ack, so the delayed side includes the
//!    fetches' promotions of due messages into the stream.
//! 4. **due-time accuracy on an idle worker**: a worker runs, idle, then N messages are
//!    published delayed, due at times spread evenly over a window (all published before the
//!    first is due); the handler records when it starts, and each message's lateness is that
//!    instant minus its due time (publish instant + delay, on this process's clock; Redis
//!    counts the delay on its own clock, the same machine's). Baseline: the same schedule of
//!    plain messages, each published at its due time; its lateness is publish to handler
//!    start, the floor a delayed message can reach.
//!
//! Rows 1 to 3 run one unmeasured warm-up round, then interleave their rounds (baseline,
//! leasehold, baseline, …); row 4 interleaves its own rounds (plain, delayed, at each
//! `poll_interval`). The tables give medians over rounds. Every round uses a **new stream
//! key**, deleted after the round (off the clock).

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use leasehold_core::{Due, Outgoing, Publisher};
use leasehold_memory::Bytes;
use leasehold_redis::{PublisherConfig, RedisBackend, RedisConfig, RedisPublisher};
use leasehold_redis_harness::{RedisServer, Reply};
use leasehold_tokio::{Config, Delivery, Producer, PublishOptions, Raw};
use serde_json::{json, Value as Json};
use tokio::sync::Notify;

use super::counting::{AckCounter, CallCounts, Counting};
use super::redis::{connection, info_field, redis_error, server_cpu_secs, Calls};
use super::stats::{cpu_time, grouped, median};
use super::BenchError;

/// The consumer group of rows 3 and 4.
const GROUP: &str = "g";
/// The payload field, as the backend reads it by default.
const FIELD: &str = "data";
/// The payload of every message of rows 1 to 3: small, like an id.
const PAYLOAD: &[u8] = b"job-0001";
/// Claim timeout of the workers (heartbeat: a third of it).
const CLAIM_TIMEOUT: Duration = Duration::from_secs(30);
/// Messages per publish call when filling a stream off the clock (row 3).
const SETUP_CHUNK: usize = 1000;
/// Row 4: the first message is due this long after publishing starts.
const DUE_LEAD: Duration = Duration::from_secs(1);
/// Row 4: how long the worker runs, idle, before the first publish.
const IDLE_FIRST: Duration = Duration::from_millis(300);
/// Most time a round may take beyond what it should: then it is an error, not a hang.
const ROUND_TIMEOUT: Duration = Duration::from_secs(120);

/// The goals the table checks the results against.
const GOAL_BATCH: f64 = 0.8;
const GOAL_SINGLE: f64 = 0.9;
const GOAL_DELAYED: f64 = 0.7;
const GOAL_P99_MS: f64 = 10.0;

/// What to measure.
#[derive(Debug, Clone)]
pub struct ProducerBenchOptions {
    /// Which rows to run (1 to 4).
    pub rows: Vec<u8>,
    /// Messages per round of rows 1 (each batch size) and 3.
    pub messages: usize,
    /// Row 1's batch sizes.
    pub batch: Vec<usize>,
    /// Messages per round of row 2 (one await each).
    pub single: usize,
    /// Row 3's delay: every message is published delayed by this much.
    pub delay: Duration,
    /// The worker's concurrency (rows 3 and 4).
    pub concurrency: usize,
    /// The worker's prefetch (rows 3 and 4).
    pub prefetch: usize,
    /// Measured rounds of rows 1 to 3 (one more, unmeasured, warms up).
    pub rounds: usize,
    /// Row 4: messages per run.
    pub due_messages: usize,
    /// Row 4: the window their due times are spread over.
    pub due_spread: Duration,
    /// Row 4: the worker's `poll_interval` settings; each is measured.
    pub due_poll: Vec<Duration>,
    /// Row 4: rounds (each: plain then delayed, at every `poll_interval`).
    pub due_rounds: usize,
    /// Row 4's diagnostic: `XREAD BLOCK` calls timed on an empty stream, blocking 1, 2, … ms
    /// (0: none).
    pub block_probes: usize,
    /// Worker threads of the tokio runtime (`None`: one per core).
    pub threads: Option<usize>,
    /// Show a progress spinner (on stderr, only when it is a terminal).
    pub progress: bool,
    /// Start the redis-server with `--hz` this (`None`: Redis's default, 10). Redis serves
    /// the timeouts of blocked commands in its cron, `hz` times a second.
    pub redis_hz: Option<u32>,
}

impl Default for ProducerBenchOptions {
    fn default() -> Self {
        Self {
            rows: vec![1, 2, 3, 4],
            messages: 100_000,
            batch: vec![100, 1000],
            single: 10_000,
            delay: Duration::from_millis(100),
            concurrency: 100,
            prefetch: 3000,
            rounds: 5,
            due_messages: 1000,
            due_spread: Duration::from_secs(10),
            due_poll: vec![default_poll_interval(), Duration::from_secs(5)],
            due_rounds: 3,
            block_probes: 50,
            threads: None,
            progress: false,
            redis_hz: None,
        }
    }
}

/// `Config::default()`'s `poll_interval`.
pub fn default_poll_interval() -> Duration {
    Config::default()
        .validate()
        .map_or(Duration::from_secs(1), |settings| settings.poll_interval)
}

/// Redis commands a round ran (`INFO commandstats`, after minus before), per message.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Commands {
    /// `XADD`, also those run inside scripts (row 3: the promotions of due messages).
    pub xadd: f64,
    /// `EVALSHA` + `EVAL`.
    pub scripts: f64,
    /// Every command, those run inside scripts included.
    pub total: f64,
}

/// One side of a throughput row: every measured round's rate and costs.
#[derive(Debug, Clone, Default)]
pub struct Side {
    /// What it is.
    pub name: String,
    /// Messages per second, one per measured round.
    pub rates: Vec<f64>,
    /// Commands per message, one per measured round.
    pub commands: Vec<Commands>,
    /// The redis-server's CPU µs per message, per round where `INFO cpu` could be read.
    pub server_cpu_us: Vec<f64>,
    /// This process's CPU µs per message (all threads), per round where it could be read.
    pub client_cpu_us: Vec<f64>,
    /// The worker's backend calls, one per measured round (row 3 only).
    pub calls: Vec<Calls>,
    /// The server's time in each command (`INFO commandstats` usec), µs per message, one list
    /// per measured round. `evalsha` includes the commands its scripts ran.
    pub server_usec: Vec<Vec<(String, f64)>>,
}

impl Side {
    fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            ..Self::default()
        }
    }

    /// Median messages per second.
    pub fn median(&self) -> f64 {
        median(&self.rates)
    }

    fn commands_median(&self, pick: fn(&Commands) -> f64) -> f64 {
        median(&self.commands.iter().map(pick).collect::<Vec<_>>())
    }

    /// Median redis-server CPU µs per message (`None`: never readable).
    pub fn server_cpu_median(&self) -> Option<f64> {
        (!self.server_cpu_us.is_empty()).then(|| median(&self.server_cpu_us))
    }

    /// Median client (this process) CPU µs per message (`None`: never readable).
    pub fn client_cpu_median(&self) -> Option<f64> {
        (!self.client_cpu_us.is_empty()).then(|| median(&self.client_cpu_us))
    }

    fn record(&mut self, measured: Measured) {
        self.rates.push(measured.rate);
        self.commands.push(measured.commands);
        self.server_cpu_us.extend(measured.server_cpu_us);
        self.client_cpu_us.extend(measured.client_cpu_us);
        self.calls.extend(measured.calls);
        self.server_usec.push(measured.server_usec);
    }

    /// The median over rounds of the server's µs per message in each command, largest first.
    pub fn server_usec_median(&self) -> Vec<(String, f64)> {
        let mut names: Vec<&str> = self
            .server_usec
            .iter()
            .flatten()
            .map(|(name, _)| name.as_str())
            .collect();
        names.sort_unstable();
        names.dedup();
        let mut out: Vec<(String, f64)> = names
            .into_iter()
            .map(|name| {
                let per_round: Vec<f64> = self
                    .server_usec
                    .iter()
                    .map(|round| {
                        round
                            .iter()
                            .find(|(n, _)| n == name)
                            .map_or(0.0, |(_, us)| *us)
                    })
                    .collect();
                (name.to_owned(), median(&per_round))
            })
            .collect();
        out.sort_by(|a, b| b.1.total_cmp(&a.1));
        out
    }

    /// The side as JSON: its medians, then every round.
    pub fn to_json(&self) -> Json {
        let commands = |pick: fn(&Commands) -> f64| self.commands_median(pick);
        json!({
            "name": self.name,
            "msg_per_s": self.median(),
            "commands_per_msg": {
                "xadd": commands(|c| c.xadd),
                "evalsha": commands(|c| c.scripts),
                "total": commands(|c| c.total),
            },
            "server_cpu_us_per_msg": self.server_cpu_median(),
            "client_cpu_us_per_msg": self.client_cpu_median(),
            "server_us_per_msg_by_command": self
                .server_usec_median()
                .into_iter()
                .map(|(name, us)| (name, json!(us)))
                .collect::<serde_json::Map<String, Json>>(),
            "rounds": {
                "msg_per_s": self.rates,
                "server_cpu_us_per_msg": self.server_cpu_us,
                "client_cpu_us_per_msg": self.client_cpu_us,
                "calls": self.calls.iter().map(|c| json!({
                    "fetches": c.fetches,
                    "fetched": c.fetched,
                    "acks": c.acks,
                    "renews": c.renews,
                })).collect::<Vec<_>>(),
            },
        })
    }
}

/// What a throughput row measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Row 1: `publish_batch` of this many messages per call.
    Batch(usize),
    /// Row 2: one message per call.
    Single,
    /// Row 3: consuming delayed messages, all due, against plain ones.
    Delayed,
}

/// A throughput row: leasehold against its baseline, same run.
#[derive(Debug, Clone)]
pub struct Throughput {
    /// What it measures.
    pub kind: Kind,
    /// Messages per round.
    pub messages: usize,
    /// The baseline.
    pub baseline: Side,
    /// leasehold.
    pub subject: Side,
}

impl Throughput {
    fn new(kind: Kind, options: &ProducerBenchOptions) -> Self {
        let (messages, baseline, subject) = match kind {
            Kind::Batch(size) => (
                options.messages,
                format!("raw pipelined XADD, {size} per pipeline"),
                format!("Producer::publish_batch of {size}"),
            ),
            Kind::Single => (
                options.single,
                "raw XADD, one await each".to_owned(),
                "Producer::publish, one await each".to_owned(),
            ),
            Kind::Delayed => (
                options.messages,
                "plain messages, consumed".to_owned(),
                "delayed messages, all due, consumed".to_owned(),
            ),
        };
        Self {
            kind,
            messages,
            baseline: Side::new(baseline),
            subject: Side::new(subject),
        }
    }

    /// The table's row number.
    pub fn row(&self) -> u8 {
        match self.kind {
            Kind::Batch(_) => 1,
            Kind::Single => 2,
            Kind::Delayed => 3,
        }
    }

    /// What the row measures, in words.
    pub fn what(&self) -> String {
        match self.kind {
            Kind::Batch(size) => format!("publish_batch, batch {size}"),
            Kind::Single => "single publish".to_owned(),
            Kind::Delayed => format!(
                "{} due delayed messages consumed",
                grouped(self.messages as f64)
            ),
        }
    }

    /// leasehold / baseline, of the medians.
    pub fn ratio(&self) -> f64 {
        self.subject.median() / self.baseline.median().max(f64::MIN_POSITIVE)
    }

    /// leasehold / baseline of each round (the pairs measured back to back).
    pub fn round_ratios(&self) -> Vec<f64> {
        self.subject
            .rates
            .iter()
            .zip(&self.baseline.rates)
            .map(|(subject, baseline)| subject / baseline.max(f64::MIN_POSITIVE))
            .collect()
    }

    /// The goal: the lowest acceptable ratio.
    pub fn goal(&self) -> f64 {
        match self.kind {
            Kind::Batch(_) => GOAL_BATCH,
            Kind::Single => GOAL_SINGLE,
            Kind::Delayed => GOAL_DELAYED,
        }
    }

    /// Whether the median ratio reaches the goal.
    pub fn met(&self) -> bool {
        self.ratio() >= self.goal()
    }

    /// The row as JSON.
    pub fn to_json(&self) -> Json {
        json!({
            "row": self.row(),
            "what": self.what(),
            "batch": match self.kind { Kind::Batch(size) => Some(size), _ => None },
            "messages": self.messages,
            "baseline": self.baseline.to_json(),
            "leasehold": self.subject.to_json(),
            "ratio": self.ratio(),
            "round_ratios": self.round_ratios(),
            "goal_ratio": self.goal(),
            "met": self.met(),
        })
    }
}

/// Lateness of every message of each round, in ms (negative: handled before its due time by
/// this process's clock).
#[derive(Debug, Clone, Default)]
pub struct Latencies {
    /// What it is.
    pub name: String,
    /// One list per round, in message order.
    pub rounds: Vec<Vec<f64>>,
    /// The worker's backend calls, one per round.
    pub calls: Vec<Calls>,
}

impl Latencies {
    fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            ..Self::default()
        }
    }

    /// The `q` quantile (0..=1) of each round.
    pub fn per_round(&self, q: f64) -> Vec<f64> {
        self.rounds.iter().map(|r| quantile(r, q)).collect()
    }

    /// The median over rounds of each round's `q` quantile (1.0: maximum, 0.0: minimum).
    pub fn median_of(&self, q: f64) -> f64 {
        median(&self.per_round(q))
    }

    /// The `q` quantile of every round's samples together.
    pub fn pooled(&self, q: f64) -> f64 {
        let all: Vec<f64> = self.rounds.iter().flatten().copied().collect();
        quantile(&all, q)
    }

    /// The summary as JSON.
    pub fn to_json(&self) -> Json {
        json!({
            "name": self.name,
            "p50_ms": self.median_of(0.5),
            "p99_ms": self.median_of(0.99),
            "max_ms": self.median_of(1.0),
            "min_ms": self.median_of(0.0),
            "pooled": {
                "p50_ms": self.pooled(0.5),
                "p99_ms": self.pooled(0.99),
                "max_ms": self.pooled(1.0),
                "min_ms": self.pooled(0.0),
            },
            "rounds": {
                "p50_ms": self.per_round(0.5),
                "p99_ms": self.per_round(0.99),
                "max_ms": self.per_round(1.0),
                "min_ms": self.per_round(0.0),
                "fetches": self.calls.iter().map(|c| c.fetches).collect::<Vec<_>>(),
            },
        })
    }
}

/// Row 4 at one `poll_interval`: delayed messages' lateness against plain ones'.
#[derive(Debug, Clone)]
pub struct Accuracy {
    /// The worker's `poll_interval`.
    pub poll_interval: Duration,
    /// Plain messages published at their due times: publish to handler start.
    pub plain: Latencies,
    /// Delayed messages published up front: due time to handler start.
    pub delayed: Latencies,
    /// Delayed messages whose publish call returned after their due time (should be none:
    /// they are all meant to be published before the first is due).
    pub published_late: usize,
}

impl Accuracy {
    /// Delayed p99 / plain p99, of the medians over rounds.
    pub fn ratio(&self) -> f64 {
        self.delayed.median_of(0.99) / self.plain.median_of(0.99).max(f64::MIN_POSITIVE)
    }

    /// Whether the delayed messages' p99 (median over rounds) is within the goal.
    pub fn met(&self) -> bool {
        self.delayed.median_of(0.99) <= GOAL_P99_MS
    }

    /// The row as JSON.
    pub fn to_json(&self) -> Json {
        json!({
            "row": 4,
            "poll_interval_ms": self.poll_interval.as_secs_f64() * 1e3,
            "baseline": self.plain.to_json(),
            "leasehold": self.delayed.to_json(),
            "ratio_p99": self.ratio(),
            "published_late": self.published_late,
            "goal_p99_ms": GOAL_P99_MS,
            "met": self.met(),
        })
    }
}

/// The whole measurement.
#[derive(Debug, Clone)]
pub struct ProducerBenchReport {
    /// What was measured.
    pub options: ProducerBenchOptions,
    /// Worker threads of the tokio runtime.
    pub threads: usize,
    /// `redis_version` of the benchmark's server.
    pub redis_version: String,
    /// Rows 1 to 3.
    pub throughput: Vec<Throughput>,
    /// Row 4, one per `poll_interval`.
    pub accuracy: Vec<Accuracy>,
    /// Row 4's diagnostic: how late (ms) Redis answered each `XREAD BLOCK b` (b = 1, 2, …
    /// ms) on an empty stream, past its `b` (empty without row 4).
    pub block_overshoot_ms: Vec<f64>,
    /// The server's `hz` (`CONFIG GET hz`).
    pub hz: Option<u32>,
}

impl ProducerBenchReport {
    /// The results as JSON (what `--json` prints).
    pub fn to_json(&self) -> Json {
        let o = &self.options;
        json!({
            "bench": "producer",
            "redis_version": self.redis_version,
            "redis_hz": self.hz,
            "threads": self.threads,
            "rounds": o.rounds,
            "due_rounds": o.due_rounds,
            "payload_bytes": PAYLOAD.len(),
            "worker": {
                "concurrency": o.concurrency,
                "prefetch": o.prefetch,
                "claim_timeout_s": CLAIM_TIMEOUT.as_secs(),
            },
            "delay_ms": o.delay.as_secs_f64() * 1e3,
            "due_messages": o.due_messages,
            "due_spread_ms": o.due_spread.as_secs_f64() * 1e3,
            "due_lead_ms": DUE_LEAD.as_secs_f64() * 1e3,
            "throughput": self.throughput.iter().map(Throughput::to_json).collect::<Vec<_>>(),
            "accuracy": self.accuracy.iter().map(Accuracy::to_json).collect::<Vec<_>>(),
            "xread_block_overshoot_ms": (!self.block_overshoot_ms.is_empty()).then(|| json!({
                "p50": quantile(&self.block_overshoot_ms, 0.5),
                "p99": quantile(&self.block_overshoot_ms, 0.99),
                "max": quantile(&self.block_overshoot_ms, 1.0),
                "min": quantile(&self.block_overshoot_ms, 0.0),
                "samples": self.block_overshoot_ms,
            })),
        })
    }
}

fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "MISSED"
    }
}

fn ms(value: f64) -> String {
    format!("{value:.2} ms")
}

fn poll_label(poll: Duration) -> String {
    let default = if poll == default_poll_interval() {
        " (default)"
    } else {
        ""
    };
    format!("{} s{default}", poll.as_secs_f64())
}

impl fmt::Display for ProducerBenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = &self.options;
        writeln!(
            f,
            "producer on redis ({}, hz {}), tokio multi-thread ({} threads); rows 1-3: median \
             of {} interleaved rounds (+1 warm-up), row 4: median of {} rounds",
            self.redis_version,
            self.hz.map_or_else(|| "?".to_owned(), |hz| hz.to_string()),
            self.threads,
            o.rounds,
            o.due_rounds
        )?;
        writeln!(f)?;
        writeln!(
            f,
            "| row | what | baseline | baseline (median) | leasehold | leasehold (median) | \
             ratio | goal |"
        )?;
        writeln!(f, "|---|---|---|---:|---|---:|---:|---|")?;
        for t in &self.throughput {
            writeln!(
                f,
                "| {} | {} | {} | {} msg/s | {} | {} msg/s | **{:.2}×** | ≥ {}×: {} |",
                t.row(),
                t.what(),
                t.baseline.name,
                grouped(t.baseline.median()),
                t.subject.name,
                grouped(t.subject.median()),
                t.ratio(),
                t.goal(),
                verdict(t.met()),
            )?;
        }
        for a in &self.accuracy {
            writeln!(
                f,
                "| 4 | due-time accuracy, idle worker, poll_interval {} | plain publish → \
                 handler start, p99 | {} | delayed: handler start − due, p99 | {} | {:.1}× | \
                 p99 ≤ {GOAL_P99_MS} ms: {} |",
                poll_label(a.poll_interval),
                ms(a.plain.median_of(0.99)),
                ms(a.delayed.median_of(0.99)),
                a.ratio(),
                verdict(a.met()),
            )?;
        }
        if !self.throughput.is_empty() {
            writeln!(f)?;
            writeln!(
                f,
                "| row | side | msg/s (median) | per-round ratios | XADD/msg¹ | EVALSHA/msg | \
                 commands/msg¹ | server CPU µs/msg² | client CPU µs/msg² |"
            )?;
            writeln!(f, "|---|---|---:|---|---:|---:|---:|---:|---:|")?;
            let cpu =
                |value: Option<f64>| value.map_or_else(|| "n/a".to_owned(), |v| format!("{v:.2}"));
            for t in &self.throughput {
                let ratios = t
                    .round_ratios()
                    .iter()
                    .map(|r| format!("{r:.2}"))
                    .collect::<Vec<_>>()
                    .join(" ");
                for (side, ratios) in [(&t.baseline, ""), (&t.subject, ratios.as_str())] {
                    writeln!(
                        f,
                        "| {} | {} | {} | {} | {:.3} | {:.3} | {:.3} | {} | {} |",
                        t.row(),
                        side.name,
                        grouped(side.median()),
                        ratios,
                        side.commands_median(|c| c.xadd),
                        side.commands_median(|c| c.scripts),
                        side.commands_median(|c| c.total),
                        cpu(side.server_cpu_median()),
                        cpu(side.client_cpu_median()),
                    )?;
                }
            }
            for t in self.throughput.iter().filter(|t| t.kind == Kind::Delayed) {
                writeln!(f)?;
                writeln!(
                    f,
                    "row 3, where the server's time goes: µs per message in each command \
                     (INFO commandstats usec, median of the rounds; evalsha includes the \
                     commands its scripts run, listed too):"
                )?;
                for side in [&t.baseline, &t.subject] {
                    let by_command = side
                        .server_usec_median()
                        .into_iter()
                        .filter(|(_, us)| *us >= 0.01)
                        .map(|(name, us)| format!("{name} {us:.2}"))
                        .collect::<Vec<_>>()
                        .join(", ");
                    writeln!(f, "  {:<36} {by_command}", side.name)?;
                }
                writeln!(f)?;
                writeln!(f, "row 3 worker calls (mean of the rounds):")?;
                for side in [&t.baseline, &t.subject] {
                    let n = side.calls.len().max(1) as f64;
                    let sum = |pick: fn(&Calls) -> usize| {
                        side.calls.iter().map(pick).sum::<usize>() as f64
                    };
                    let (fetches, fetched, acks) =
                        (sum(|c| c.fetches), sum(|c| c.fetched), sum(|c| c.acks));
                    writeln!(
                        f,
                        "  {:<36} {:>6.0} fetches ({:.1} messages each), {:>6.0} acks ({:.1} \
                         messages each)",
                        side.name,
                        fetches / n,
                        fetched / fetches.max(1.0),
                        acks / n,
                        fetched / acks.max(1.0),
                    )?;
                }
            }
        }
        if !self.accuracy.is_empty() {
            writeln!(f)?;
            writeln!(
                f,
                "row 4: {} messages per run, due {} ms apart over {} s (the first {} s after \
                 publishing starts); lateness in ms, median over rounds of each round's figure \
                 [all rounds pooled]:",
                o.due_messages,
                (o.due_spread.as_secs_f64() * 1e3 / o.due_messages.max(1) as f64),
                o.due_spread.as_secs_f64(),
                DUE_LEAD.as_secs_f64(),
            )?;
            writeln!(f)?;
            writeln!(
                f,
                "| poll_interval | side | min | p50 | p99 | max | worst round's p99 | fetches \
                 per run |"
            )?;
            writeln!(f, "|---|---|---:|---:|---:|---:|---:|---:|")?;
            for a in &self.accuracy {
                for side in [&a.plain, &a.delayed] {
                    let fetches = median(
                        &side
                            .calls
                            .iter()
                            .map(|c| c.fetches as f64)
                            .collect::<Vec<_>>(),
                    );
                    writeln!(
                        f,
                        "| {} | {} | {:.2} [{:.2}] | {:.2} [{:.2}] | {:.2} [{:.2}] | {:.2} \
                         [{:.2}] | {:.2} | {:.0} |",
                        poll_label(a.poll_interval),
                        side.name,
                        side.median_of(0.0),
                        side.pooled(0.0),
                        side.median_of(0.5),
                        side.pooled(0.5),
                        side.median_of(0.99),
                        side.pooled(0.99),
                        side.median_of(1.0),
                        side.pooled(1.0),
                        side.per_round(0.99).into_iter().fold(f64::MIN, f64::max),
                        fetches,
                    )?;
                }
                if a.published_late > 0 {
                    writeln!(
                        f,
                        "  note: {} delayed messages were published after their due time",
                        a.published_late
                    )?;
                }
            }
            let over = &self.block_overshoot_ms;
            writeln!(f)?;
            if !over.is_empty() {
                writeln!(
                f,
                "diagnostic: Redis's own wake-up: XREAD BLOCK b ms (b = 1..{}) on an empty stream \
                 answered late by min {:.2} / p50 {:.2} / p99 {:.2} / max {:.2} ms ({} calls, \
                 server hz {}). An idle worker waits for its next due message in such a BLOCK.",
                over.len(),
                quantile(over, 0.0),
                quantile(over, 0.5),
                quantile(over, 0.99),
                quantile(over, 1.0),
                over.len(),
                self.hz.map_or_else(|| "?".to_owned(), |hz| hz.to_string()),
            )?;
            }
        }
        writeln!(f)?;
        write!(
            f,
            "payload: {} bytes in field \"{FIELD}\". Raw sides: the redis crate, one multiplexed \
             connection, replies read and discarded. leasehold: Producer<Vec<u8>, \
             RedisPublisher, Raw>; workers: leasehold_tokio::worker() over a RedisBackend, no-op \
             handler, concurrency {}, prefetch {}, claim timeout {} s, other settings default.\n\
             ¹ INFO commandstats, after minus before the round; Redis counts the commands a \
             script runs too (row 3: the promotions' XADDs and the fetch and ack scripts' \
             commands).\n² CPU time per message over the round: server = INFO cpu used_cpu_user \
             + used_cpu_sys; client = this process, every thread's /proc/self/task/*/schedstat.",
            PAYLOAD.len(),
            o.concurrency,
            o.prefetch,
            CLAIM_TIMEOUT.as_secs(),
        )
    }
}

/// The `q` quantile (nearest rank) of `values`; 0 when empty.
fn quantile(values: &[f64], q: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = (q.clamp(0.0, 1.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Runs the benchmark: starts a redis-server, then a fresh tokio multi-thread runtime.
pub fn run(options: &ProducerBenchOptions) -> Result<ProducerBenchReport, BenchError> {
    validate(options)?;
    let mut builder = RedisServer::builder();
    if let Some(hz) = options.redis_hz {
        builder = builder.arg("--hz").arg(hz.to_string());
    }
    let server = builder
        .start()
        .map_err(|e| BenchError::Redis(e.to_string()))?;
    let hz = server
        .command(["CONFIG", "GET", "hz"])
        .ok()
        .and_then(|reply| reply.as_array()?.get(1)?.as_str()?.parse().ok());
    let redis_version = info_field(&server, "server", "redis_version")
        .map_or_else(|| "redis".to_owned(), |v| format!("redis {v}"));
    let runtime = super::tokio_runtime(options.threads)?;
    let threads = runtime.metrics().num_workers();
    let bar = if options.progress {
        let bar = ProgressBar::new_spinner();
        bar.enable_steady_tick(Duration::from_millis(100));
        bar
    } else {
        ProgressBar::hidden()
    };
    let mut bench = Bench {
        server: &server,
        url: server.url(),
        runtime: &runtime,
        options,
        keys: 0,
    };

    let has = |row: u8| options.rows.contains(&row);
    let mut throughput = Vec::new();
    if has(1) {
        for &size in &options.batch {
            throughput.push(Throughput::new(Kind::Batch(size), options));
        }
    }
    if has(2) {
        throughput.push(Throughput::new(Kind::Single, options));
    }
    if has(3) {
        throughput.push(Throughput::new(Kind::Delayed, options));
    }
    if !throughput.is_empty() {
        for round in 0..=options.rounds {
            for t in &mut throughput {
                let sides = [(false, &mut t.baseline), (true, &mut t.subject)];
                for (leasehold, side) in sides {
                    let what = if round == 0 {
                        "warm-up".to_owned()
                    } else {
                        format!("round {round} of {}", options.rounds)
                    };
                    bar.set_message(format!("{what}: {}", side.name));
                    let measured = bench.throughput(t.kind, t.messages, leasehold)?;
                    if round > 0 {
                        side.record(measured);
                    }
                }
            }
        }
    }

    let mut accuracy = Vec::new();
    let mut block_overshoot_ms = Vec::new();
    if has(4) {
        bar.set_message("due-time accuracy: Redis's XREAD BLOCK timeouts");
        block_overshoot_ms = runtime.block_on(block_overshoot(&bench.url, options.block_probes))?;
        for &poll in &options.due_poll {
            accuracy.push(Accuracy {
                poll_interval: poll,
                plain: Latencies::new("plain, published when due"),
                delayed: Latencies::new("delayed, published up front"),
                published_late: 0,
            });
        }
        for round in 1..=options.due_rounds {
            for a in &mut accuracy {
                for delayed in [false, true] {
                    bar.set_message(format!(
                        "due-time accuracy, round {round} of {}: poll_interval {:?}, {}",
                        options.due_rounds,
                        a.poll_interval,
                        if delayed { "delayed" } else { "plain" }
                    ));
                    let run = bench.accuracy(a.poll_interval, delayed)?;
                    let side = if delayed {
                        &mut a.delayed
                    } else {
                        &mut a.plain
                    };
                    side.rounds.push(run.lateness_ms);
                    side.calls.push(run.calls);
                    a.published_late += run.published_late;
                }
            }
        }
    }
    bar.finish_and_clear();
    Ok(ProducerBenchReport {
        options: options.clone(),
        threads,
        redis_version,
        throughput,
        accuracy,
        block_overshoot_ms,
        hz,
    })
}

/// How late Redis answers `XREAD BLOCK b` on an empty stream, past `b` ms, for b = 1, 2, …
async fn block_overshoot(url: &str, probes: usize) -> Result<Vec<f64>, BenchError> {
    let client = redis::Client::open(url).map_err(|e| redis_error("bad url", e))?;
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    let mut con = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(|e| redis_error("connect", e))?;
    let mut overshoot = Vec::new();
    for block in 1..=probes as u64 {
        let start = Instant::now();
        redis::cmd("XREAD")
            .arg("COUNT")
            .arg(1)
            .arg("BLOCK")
            .arg(block)
            .arg("STREAMS")
            .arg("bench:never-written")
            .arg("$")
            .query_async::<()>(&mut con)
            .await
            .map_err(|e| redis_error("XREAD BLOCK", e))?;
        let took = start.elapsed().as_secs_f64() * 1e3;
        overshoot.push(took - block as f64);
    }
    Ok(overshoot)
}

fn validate(options: &ProducerBenchOptions) -> Result<(), BenchError> {
    let invalid = |what: &str| Err(BenchError::Invalid(what.to_owned()));
    if options.rows.is_empty() || options.rows.iter().any(|r| !(1..=4).contains(r)) {
        return invalid("--rows takes one or more of 1, 2, 3, 4");
    }
    if options.messages == 0 || options.single == 0 || options.due_messages == 0 {
        return invalid("--messages, --single and --due-messages must be at least 1");
    }
    if options.rounds == 0 || options.due_rounds == 0 {
        return invalid("--rounds and --due-rounds must be at least 1");
    }
    if options.batch.is_empty() || options.batch.contains(&0) {
        return invalid("--batch takes one or more sizes, each at least 1");
    }
    if options.delay.is_zero() {
        return invalid("--delay-ms must be at least 1");
    }
    if options.due_poll.is_empty() || options.due_poll.iter().any(Duration::is_zero) {
        return invalid("--due-poll-ms takes one or more intervals, each at least 1 ms");
    }
    if options.due_spread.is_zero() {
        return invalid("--due-spread-ms must be at least 1");
    }
    if options.threads == Some(0) {
        return invalid("--threads must be at least 1");
    }
    for &poll in &options.due_poll {
        worker_config(options, poll).validate()?;
    }
    Ok(())
}

/// The worker's configuration: the defaults, except concurrency, prefetch, the claim timeout
/// (the backend's) and `poll_interval`.
fn worker_config(options: &ProducerBenchOptions, poll_interval: Duration) -> Config {
    Config::default()
        .concurrency(options.concurrency)
        .prefetch(options.prefetch)
        .claim_timeout(CLAIM_TIMEOUT)
        .poll_interval(poll_interval)
}

/// One measured round of a throughput side.
struct Measured {
    rate: f64,
    commands: Commands,
    server_cpu_us: Option<f64>,
    client_cpu_us: Option<f64>,
    calls: Option<Calls>,
    server_usec: Vec<(String, f64)>,
}

/// One run of row 4.
struct AccuracyRun {
    lateness_ms: Vec<f64>,
    calls: Calls,
    published_late: usize,
}

/// The server, the runtime, and the next fresh key.
struct Bench<'a> {
    server: &'a RedisServer,
    url: String,
    runtime: &'a tokio::runtime::Runtime,
    options: &'a ProducerBenchOptions,
    keys: usize,
}

impl Bench<'_> {
    fn next_key(&mut self, what: &str) -> String {
        self.keys += 1;
        format!("bench:{what}:{}", self.keys)
    }

    /// One round of one side of a throughput row, on a fresh stream deleted afterwards.
    fn throughput(
        &mut self,
        kind: Kind,
        messages: usize,
        leasehold: bool,
    ) -> Result<Measured, BenchError> {
        let stream = self.next_key(if leasehold { "leasehold" } else { "raw" });
        let measured = match kind {
            Kind::Batch(size) => self.publishing(&stream, messages, Some(size), leasehold),
            Kind::Single => self.publishing(&stream, messages, None, leasehold),
            Kind::Delayed => self.consuming(&stream, messages, leasehold),
        };
        self.delete(&stream)?;
        measured
    }

    /// Rows 1 (`batch: Some(size)`) and 2: publishes `messages` to `stream`, raw or through
    /// the producer, one call in flight at a time; checks the stream's length afterwards.
    fn publishing(
        &self,
        stream: &str,
        messages: usize,
        batch: Option<usize>,
        leasehold: bool,
    ) -> Result<Measured, BenchError> {
        let size = batch.unwrap_or(1);
        let payloads = vec![PAYLOAD.to_vec(); size];
        let url = &self.url;
        let took = if leasehold {
            let producer = self.runtime.block_on(producer(url, stream))?;
            let probe = Probe::start(self.server)?;
            let took = self.runtime.block_on(async {
                let start = Instant::now();
                let mut left = messages;
                while left > 0 {
                    let n = left.min(size);
                    if batch.is_some() {
                        producer.publish_batch(&payloads[..n]).await
                    } else {
                        producer.publish(&payloads[0]).await.map(|_| Vec::new())
                    }
                    .map_err(|e| BenchError::Redis(format!("publish: {e}")))?;
                    left -= n;
                }
                Ok::<_, BenchError>(start.elapsed())
            })?;
            (took, probe)
        } else {
            let mut con = self.runtime.block_on(connection(url))?;
            let probe = Probe::start(self.server)?;
            let took = self.runtime.block_on(async {
                let start = Instant::now();
                let mut left = messages;
                while left > 0 {
                    let n = left.min(size);
                    if batch.is_some() {
                        let mut pipe = redis::pipe();
                        for payload in &payloads[..n] {
                            pipe.cmd("XADD")
                                .arg(stream)
                                .arg("*")
                                .arg(FIELD)
                                .arg(payload)
                                .ignore();
                        }
                        pipe.query_async::<()>(&mut con).await
                    } else {
                        redis::cmd("XADD")
                            .arg(stream)
                            .arg("*")
                            .arg(FIELD)
                            .arg(&payloads[0])
                            .query_async::<()>(&mut con)
                            .await
                    }
                    .map_err(|e| redis_error("raw publish", e))?;
                    left -= n;
                }
                Ok::<_, BenchError>(start.elapsed())
            })?;
            (took, probe)
        };
        let (took, probe) = took;
        let measured = probe.stop(self.server, messages, took, None)?;
        let len = self.int(["XLEN", stream])?;
        if len != messages as i64 {
            return Err(BenchError::Invalid(format!(
                "{stream}: {len} entries after publishing {messages}"
            )));
        }
        Ok(measured)
    }

    /// Row 3: fills `stream` with `messages` plain ones, or delayed ones and waits until all
    /// are due (off the clock), then times a worker from its start to its last ack.
    fn consuming(
        &self,
        stream: &str,
        messages: usize,
        delayed: bool,
    ) -> Result<Measured, BenchError> {
        let url = &self.url;
        let delay = self.options.delay;
        let producer = self.runtime.block_on(producer(url, stream))?;
        self.runtime.block_on(async {
            let plain = vec![PAYLOAD.to_vec(); SETUP_CHUNK.min(messages)];
            let mut left = messages;
            while left > 0 {
                let n = left.min(SETUP_CHUNK);
                let published = if delayed {
                    let batch = (0..n)
                        .map(|_| {
                            Outgoing::new(Bytes::from_static(PAYLOAD)).with_due(Due::After(delay))
                        })
                        .collect();
                    let published = producer.publisher().publish_batch(batch).await;
                    published.map(drop).map_err(|e| e.to_string())
                } else {
                    let published = producer.publish_batch(&plain[..n]).await;
                    published.map(drop).map_err(|e| e.to_string())
                };
                published.map_err(|e| BenchError::Redis(format!("publish: {e}")))?;
                left -= n;
            }
            Ok::<_, BenchError>(())
        })?;
        let delayed_key = producer.publisher().delayed_key().to_owned();
        if delayed_key != format!("{}:delayed", slot_prefix(stream)) {
            return Err(BenchError::Invalid(format!(
                "the bench names the delayed set of {stream} other than the publisher: \
                 {delayed_key}"
            )));
        }
        if delayed {
            self.wait_until_due(&delayed_key, messages)?;
        } else if self.int(["XLEN", stream])? != messages as i64 {
            return Err(BenchError::Invalid(format!(
                "{stream}: not {messages} entries"
            )));
        }
        let config = worker_config(self.options, default_poll_interval());
        let probe = Probe::start(self.server)?;
        let (took, calls) = self.runtime.block_on(async {
            let (worker, counter, start) =
                start_worker(url, stream, messages, config, |_| ()).await?;
            tokio::time::timeout(ROUND_TIMEOUT, counter.all_acked.notified())
                .await
                .map_err(|_| {
                    BenchError::Invalid(format!(
                        "{stream}: {} of {messages} acked after {ROUND_TIMEOUT:?}",
                        counter.acked.load(Ordering::Relaxed)
                    ))
                })?;
            let took = start.elapsed();
            let calls = calls_of(&counter.calls);
            finish(worker, messages).await?;
            Ok::<_, BenchError>((took, calls))
        })?;
        let measured = probe.stop(self.server, messages, took, Some(calls))?;
        let left = self.int(["ZCARD", &delayed_key])?;
        if left != 0 {
            return Err(BenchError::Invalid(format!(
                "{stream}: {left} delayed messages left after the round"
            )));
        }
        Ok(measured)
    }

    /// Waits until `messages` delayed messages wait in `key` and the last is due on the
    /// server's clock.
    fn wait_until_due(&self, key: &str, messages: usize) -> Result<(), BenchError> {
        let card = self.int(["ZCARD", key])?;
        if card != messages as i64 {
            return Err(BenchError::Invalid(format!(
                "{key}: {card} delayed messages, not {messages}"
            )));
        }
        let deadline = Instant::now() + self.options.delay + ROUND_TIMEOUT;
        loop {
            let last = self.command(["ZRANGE", key, "-1", "-1", "WITHSCORES"])?;
            let due = last
                .as_array()
                .and_then(|pair| pair.get(1)?.as_str()?.parse::<f64>().ok())
                .ok_or_else(|| BenchError::Redis(format!("ZRANGE {key}: {last:?}")))?;
            let now = self.server_ms()?;
            if due <= now {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(BenchError::Invalid(format!("{key}: never due")));
            }
            std::thread::sleep(Duration::from_millis((due - now) as u64 + 1));
        }
    }

    /// Row 4, one run: an idle worker, then the schedule of messages, plain (each published at
    /// its due time) or delayed (all published up front); each one's lateness.
    fn accuracy(&mut self, poll: Duration, delayed: bool) -> Result<AccuracyRun, BenchError> {
        let stream = self.next_key(if delayed { "due" } else { "due-plain" });
        let n = self.options.due_messages;
        let spread = self.options.due_spread;
        let config = worker_config(self.options, poll);
        let url = self.url.clone();
        let run = self.runtime.block_on(async {
            let producer = producer(&url, &stream).await?;
            let started: Arc<Mutex<Vec<Option<Instant>>>> = Arc::new(Mutex::new(vec![None; n]));
            let seen = Arc::clone(&started);
            let (worker, counter, _) = start_worker(&url, &stream, n, config, move |payload| {
                let now = Instant::now();
                let index = std::str::from_utf8(payload)
                    .ok()
                    .and_then(|s| s.parse::<usize>().ok());
                if let (Some(i), Ok(mut seen)) = (index, seen.lock()) {
                    if let Some(slot) = seen.get_mut(i) {
                        slot.get_or_insert(now);
                    }
                }
            })
            .await?;
            tokio::time::sleep(IDLE_FIRST).await;
            let start = Instant::now();
            let scheduled = |i: usize| start + DUE_LEAD + spread.mul_f64(i as f64 / n as f64);
            let mut due = Vec::with_capacity(n);
            let mut published_late = 0;
            for i in 0..n {
                let payload = format!("{i:08}").into_bytes();
                if delayed {
                    let sent = Instant::now();
                    let delay_ms = scheduled(i)
                        .saturating_duration_since(sent)
                        .as_micros()
                        .div_ceil(1000)
                        .max(1);
                    let delay = Duration::from_millis(delay_ms as u64);
                    producer
                        .publish_with(&payload, PublishOptions::new().delay(delay))
                        .await
                        .map_err(|e| BenchError::Redis(format!("publish: {e}")))?;
                    due.push(sent + delay);
                    if Instant::now() > sent + delay {
                        published_late += 1;
                    }
                } else {
                    tokio::time::sleep_until(scheduled(i).into()).await;
                    let sent = Instant::now();
                    producer
                        .publish(&payload)
                        .await
                        .map_err(|e| BenchError::Redis(format!("publish: {e}")))?;
                    due.push(sent);
                }
            }
            tokio::time::timeout(ROUND_TIMEOUT, counter.all_acked.notified())
                .await
                .map_err(|_| {
                    BenchError::Invalid(format!(
                        "{stream}: {} of {n} acked {ROUND_TIMEOUT:?} after the last publish",
                        counter.acked.load(Ordering::Relaxed)
                    ))
                })?;
            let calls = calls_of(&counter.calls);
            finish(worker, n).await?;
            let started = started.lock().map_err(|_| {
                BenchError::Invalid("a handler panicked while recording".to_owned())
            })?;
            let lateness_ms = started
                .iter()
                .zip(&due)
                .enumerate()
                .map(|(i, (started, due))| {
                    let started = started.ok_or_else(|| {
                        BenchError::Invalid(format!("{stream}: message {i} acked, never handled"))
                    })?;
                    Ok(match started.checked_duration_since(*due) {
                        Some(late) => late.as_secs_f64() * 1e3,
                        None => -(due.duration_since(started).as_secs_f64() * 1e3),
                    })
                })
                .collect::<Result<Vec<f64>, BenchError>>()?;
            Ok::<_, BenchError>(AccuracyRun {
                lateness_ms,
                calls,
                published_late,
            })
        })?;
        self.delete(&stream)?;
        Ok(run)
    }

    fn command<const N: usize>(&self, args: [&str; N]) -> Result<Reply, BenchError> {
        let reply = self
            .server
            .command(args)
            .map_err(|e| BenchError::Redis(format!("{}: {e}", args[0])))?;
        if reply.is_error() {
            return Err(BenchError::Redis(format!("{}: {reply:?}", args[0])));
        }
        Ok(reply)
    }

    fn int<const N: usize>(&self, args: [&str; N]) -> Result<i64, BenchError> {
        let reply = self.command(args)?;
        reply
            .as_int()
            .ok_or_else(|| BenchError::Redis(format!("{}: {reply:?}", args[0])))
    }

    /// The server's clock in ms since the Unix epoch (`TIME`), as the delayed scripts read it.
    fn server_ms(&self) -> Result<f64, BenchError> {
        let reply = self.command(["TIME"])?;
        let part = |i: usize| -> Option<f64> { reply.as_array()?.get(i)?.as_str()?.parse().ok() };
        match (part(0), part(1)) {
            (Some(secs), Some(micros)) => Ok(secs * 1e3 + (micros / 1e3).floor()),
            _ => Err(BenchError::Redis(format!("TIME: {reply:?}"))),
        }
    }

    /// Deletes a round's stream and the keys beside it (delayed set, its counter and wake
    /// stream, dead letters).
    fn delete(&self, stream: &str) -> Result<(), BenchError> {
        let prefix = slot_prefix(stream);
        let keys =
            ["delayed", "delayed:seq", "delayed:wake", "dead"].map(|k| format!("{prefix}:{k}"));
        let [delayed, seq, wake, dead] = keys.each_ref().map(String::as_str);
        self.command(["DEL", stream, delayed, seq, wake, dead])
            .map(drop)
    }
}

/// The prefix of `stream`'s delayed-message and dead-letter keys, as the backend names them
/// (`RedisPublisher::delayed_key` is this + `:delayed`): the stream itself when it has a hash
/// tag, else the stream wrapped in one. `consuming` checks it against the publisher's.
fn slot_prefix(stream: &str) -> String {
    let has_tag = stream
        .find('{')
        .and_then(|open| stream[open + 1..].find('}'))
        .is_some_and(|len| len > 0);
    if has_tag {
        stream.to_owned()
    } else {
        format!("{{{stream}}}")
    }
}

/// A producer of raw bytes on `stream`.
async fn producer(
    url: &str,
    stream: &str,
) -> Result<Producer<Vec<u8>, RedisPublisher, Raw>, BenchError> {
    let publisher = RedisPublisher::connect(PublisherConfig::new(url, stream))
        .await
        .map_err(|e| BenchError::Redis(format!("connect: {e}")))?;
    Ok(Producer::with_codec(publisher, Raw))
}

/// A worker on `stream` with the benchmark's configuration, its backend counting calls and
/// acks (`all_acked` fires at the `target`th); `handler` sees each payload. Also returns the
/// instant just before the worker started (its backend connected before).
async fn start_worker<H>(
    url: &str,
    stream: &str,
    target: usize,
    config: Config,
    handler: H,
) -> Result<(leasehold_tokio::Worker<Bytes>, Arc<AckCounter>, Instant), BenchError>
where
    H: Fn(&[u8]) + Send + Sync + 'static,
{
    let backend = RedisBackend::connect(
        RedisConfig::new(url, stream, GROUP)
            .consumer("bench")
            .claim_timeout(CLAIM_TIMEOUT),
    )
    .await
    .map_err(|e| BenchError::Redis(format!("connect: {e}")))?;
    let counter = Arc::new(AckCounter {
        target,
        acked: AtomicUsize::new(0),
        all_acked: Notify::new(),
        calls: CallCounts::default(),
    });
    let backend = Counting::new(backend, Arc::clone(&counter));
    let handler = Arc::new(handler);
    let start = Instant::now();
    let worker = leasehold_tokio::worker()
        .config(config)
        .stream_with_codec(stream, backend, Raw, move |delivery: Delivery<Vec<u8>>| {
            handler(delivery.message());
            std::future::ready(())
        })
        .start()?;
    Ok((worker, counter, start))
}

/// Shuts the worker down and checks it acked every message.
async fn finish(worker: leasehold_tokio::Worker<Bytes>, messages: usize) -> Result<(), BenchError> {
    let report = worker.shutdown(Duration::from_secs(5)).await;
    if report.acked != messages as u64 {
        return Err(BenchError::Invalid(format!(
            "benchmark round lost messages: {} acked of {messages}",
            report.acked
        )));
    }
    Ok(())
}

fn calls_of(calls: &CallCounts) -> Calls {
    Calls {
        fetches: calls.fetches.load(Ordering::Relaxed),
        fetched: calls.fetched.load(Ordering::Relaxed),
        acks: calls.acks.load(Ordering::Relaxed),
        renews: calls.renews.load(Ordering::Relaxed),
    }
}

/// `INFO commandstats`: each command's calls and the server's µs in it.
type CommandStats = Vec<(String, u64, u64)>;

fn commandstats(server: &RedisServer) -> Result<CommandStats, BenchError> {
    let reply = server
        .command(["INFO", "commandstats"])
        .map_err(|e| BenchError::Redis(format!("INFO commandstats: {e}")))?;
    Ok(parse_commandstats(reply.as_str().unwrap_or_default()))
}

/// `cmdstat_<name>:calls=<n>,usec=<µs>,…` lines.
fn parse_commandstats(text: &str) -> CommandStats {
    text.lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let field = |key: &str| -> Option<u64> {
                rest.split(',')
                    .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))?
                    .parse()
                    .ok()
            };
            Some((name.to_owned(), field("calls")?, field("usec")?))
        })
        .collect()
}

/// The snapshots taken before a round: commandstats, server CPU, this process's CPU.
struct Probe {
    commands: CommandStats,
    server_cpu: Option<f64>,
    client_cpu: Option<Duration>,
}

impl Probe {
    /// Snapshots, innermost last, so the INFO calls stay (almost) out of the deltas.
    fn start(server: &RedisServer) -> Result<Self, BenchError> {
        let server_cpu = server_cpu_secs(server);
        let commands = commandstats(server)?;
        let client_cpu = cpu_time();
        Ok(Self {
            commands,
            server_cpu,
            client_cpu,
        })
    }

    /// Snapshots again (in reverse order): the round's figures per message.
    fn stop(
        self,
        server: &RedisServer,
        messages: usize,
        took: Duration,
        calls: Option<Calls>,
    ) -> Result<Measured, BenchError> {
        let client_cpu = cpu_time();
        let commands = commandstats(server)?;
        let server_cpu = server_cpu_secs(server);
        let per = messages.max(1) as f64;
        let before = |name: &str| {
            self.commands
                .iter()
                .find(|(n, _, _)| n == name)
                .map_or((0, 0), |(_, calls, usec)| (*calls, *usec))
        };
        // The `before` snapshot's own INFO call is counted in `after`: leave it out.
        let mut total = 0u64;
        let mut xadd = 0u64;
        let mut scripts = 0u64;
        let mut server_usec = Vec::new();
        for (name, calls, usec) in &commands {
            let (calls_before, usec_before) = before(name);
            let calls = calls.saturating_sub(calls_before);
            let usec = usec.saturating_sub(usec_before);
            total += calls;
            match name.as_str() {
                "xadd" => xadd += calls,
                "evalsha" | "eval" => scripts += calls,
                _ => {}
            }
            if name != "info" && usec > 0 {
                server_usec.push((name.clone(), usec as f64 / per));
            }
        }
        Ok(Measured {
            rate: messages as f64 / took.as_secs_f64().max(1e-9),
            commands: Commands {
                xadd: xadd as f64 / per,
                scripts: scripts as f64 / per,
                total: total.saturating_sub(1) as f64 / per,
            },
            server_cpu_us: match (self.server_cpu, server_cpu) {
                (Some(before), Some(after)) if after >= before => {
                    Some((after - before) * 1e6 / per)
                }
                _ => None,
            },
            client_cpu_us: match (self.client_cpu, client_cpu) {
                (Some(before), Some(after)) => after
                    .checked_sub(before)
                    .map(|d| d.as_secs_f64() * 1e6 / per),
                _ => None,
            },
            calls,
            server_usec,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_nearest_rank() {
        let values: Vec<f64> = (1..=1000).map(f64::from).collect();
        assert_eq!(quantile(&values, 0.5), 500.0);
        assert_eq!(quantile(&values, 0.99), 990.0);
        assert_eq!(quantile(&values, 1.0), 1000.0);
        assert_eq!(quantile(&values, 0.0), 1.0);
        assert_eq!(quantile(&[], 0.5), 0.0);
        assert_eq!(quantile(&[3.0], 0.99), 3.0);
    }

    #[test]
    fn commandstats_lines_parse() {
        let text = "# Commandstats\r\ncmdstat_xadd:calls=3,usec=12,usec_per_call=4.00,\
                    rejected_calls=0,failed_calls=0\r\ncmdstat_evalsha:calls=1,usec=40,\
                    usec_per_call=40.00,rejected_calls=0,failed_calls=0\r\n";
        assert_eq!(
            parse_commandstats(text),
            [("xadd".to_owned(), 3, 12), ("evalsha".to_owned(), 1, 40)]
        );
    }

    #[test]
    fn delayed_keys_follow_the_publisher() {
        assert_eq!(slot_prefix("bench:raw:1"), "{bench:raw:1}");
        assert_eq!(slot_prefix("{orders}"), "{orders}");
    }
}
