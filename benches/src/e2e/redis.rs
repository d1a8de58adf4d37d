//! The Redis Streams backend against a hand-written raw consumer loop, on a throwaway
//! `redis-server` started by the benchmark itself, never the machine's 6379
//! (`cargo bench -p leasehold-benches --bench e2e-redis`).
//!
//! Each round publishes its messages to a **new stream key** (pipelined `XADD … data <payload>`,
//! before the clock starts), so every consumer group starts fresh. Rounds are interleaved (raw,
//! leasehold at each concurrency and prefetch, leasehold with a 10 ms handler at each prefetch,
//! heartbeat tick, raw, …); one unmeasured warm-up pass goes first, and the table gives the
//! medians.
//!
//! - **raw**: one multiplexed connection of the same `redis` crate, on the same tokio runtime:
//!   `XREADGROUP GROUP g c COUNT 100 STREAMS s >`, an inline no-op handler, then the `XACK` of
//!   that batch pipelined with the next read (one round trip per 100 messages).
//! - **leasehold**: one tokio worker over a [`RedisBackend`] (fenced fetch, ack and renew
//!   scripts; claim timeout 30 s, heartbeats on; the default retention), no-op handler, at each
//!   concurrency and each prefetch (`Config::prefetch`: messages fetched ahead of free invocation slots; `max_leases`
//!   is concurrency + prefetch, at least 1000). The clock stops when the backend has acked the
//!   last message.
//! - **delete on ack**: the no-op worker at concurrency 100 and the adaptive prefetch again,
//!   deleting each entry on its ack (`Retention::DeleteOnAck`), for the default retention to be
//!   held to.
//! - **10 ms**: the same with `tokio::time::sleep(10 ms)` as the handler at concurrency 1000,
//!   at each prefetch (ideal: 1000 / 10 ms = 100 000 msg/s).
//! - **sleep loop**: what the runtime itself makes of that handler, no queue at all: 1000 tasks
//!   on the same runtime, each looping `tokio::time::sleep(10 ms)` until as many sleeps as a
//!   round has messages are done. A sleep ends at the timer's next millisecond tick after its
//!   deadline, often later on a busy runtime, so this is the ceiling the 10 ms rows are held
//!   to besides the ideal.
//! - **heartbeat**: one [`RedisBackend::renew`](leasehold_tokio::core::Backend::renew) call over
//!   10 000 held leases (10 script calls of 1000 ids).
//! - **RSS**: resident set size of this process before a worker starts, and while it holds 1000
//!   handlers in flight (they wait until the reading is taken; prefetch 0).
//! - **CPU per message**: the redis-server's `used_cpu_user + used_cpu_sys` (`INFO cpu`) and
//!   this process's CPU time (every thread's `/proc/self/task/*/schedstat`), after minus before
//!   each round, divided by its messages: which side is the limit.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use leasehold_redis::{FenceCheck, RedisBackend, RedisConfig, Retention};
use leasehold_redis_harness::RedisServer;
use leasehold_tokio::core::{Backend, LeaseRef, RenewResult};
use leasehold_tokio::{Config, Delivery, Raw, TokioRuntime, WorkerBuilder};
use redis::Value;
use serde_json::{json, Value as Json};
use tokio::sync::Notify;

use super::counting::{AckCounter, CallCounts, Counting};
use super::stats::{cpu_time, grouped, median};
use super::{BenchError, Metered};

/// The consumer group of every round.
const GROUP: &str = "g";
/// The payload field, as the backend reads it by default.
const FIELD: &str = "data";
/// The payload of every message: small, like an id.
const PAYLOAD: &[u8] = b"job-0001";
/// Claim timeout of the leasehold rounds (heartbeat: a third of it).
const CLAIM_TIMEOUT: Duration = Duration::from_secs(30);
/// The raw loop's batch.
const RAW_COUNT: usize = 100;
/// The slow handler's sleep, and its concurrency.
const SLOW_HANDLER: Duration = Duration::from_millis(10);
const SLOW_CONCURRENCY: usize = 1000;
/// Leases held for the heartbeat measurement, and renew calls timed per round.
const HELD_LEASES: usize = 10_000;
const RENEWS_PER_ROUND: usize = 3;
/// Handlers in flight during the RSS reading.
const RSS_IN_FLIGHT: usize = 1000;

/// The targets the table checks the results against.
const TARGET_NO_OP: f64 = 0.7;
const TARGET_SLOW: f64 = 0.8;
const TARGET_RSS_MB: f64 = 16.0;

/// A `prefetch` setting that stands for the default configuration: the prefetch and
/// `max_leases` left unset, so the prefetch adapts.
pub const AUTO: usize = usize::MAX;

/// A prefetch setting in the JSON report: the count, or `"auto"`.
fn prefetch_json(prefetch: usize) -> serde_json::Value {
    if prefetch == AUTO {
        "auto".into()
    } else {
        prefetch.into()
    }
}

/// How a prefetch setting is shown.
pub fn prefetch_label(prefetch: usize) -> String {
    if prefetch == AUTO {
        "default (adaptive)".into()
    } else {
        format!("prefetch {prefetch}")
    }
}

/// What to measure.
#[derive(Debug, Clone)]
pub struct RedisBenchOptions {
    /// Messages per round.
    pub messages: usize,
    /// Measured rounds per variant (one more, unmeasured, warms up).
    pub rounds: usize,
    /// The no-op worker's concurrency settings.
    pub concurrency: Vec<usize>,
    /// `Config::prefetch` settings: every leasehold variant (no-op at each concurrency, and the
    /// 10 ms handler) runs once per value.
    pub prefetch: Vec<usize>,
    /// Worker threads of the tokio runtime (`None`: one per core).
    pub threads: Option<usize>,
    /// Show a progress spinner (on stderr, only when it is a terminal).
    pub progress: bool,
    /// Also measure, each round, every no-op variant with its worker recording its metrics
    /// (a Prometheus recorder).
    pub metrics: bool,
    /// Measure the hoarding row too: two workers, `LONG_JOBS` jobs of 1 s after a quick burst,
    /// at each prefetch setting (about 1.2 s a round and setting, or twice that when one
    /// worker hoards).
    pub long: bool,
    /// Measure the 10 ms handler rows too (at concurrency 1000, one per prefetch setting).
    pub slow: bool,
    /// How the leasehold workers' fenced operations check their leases.
    pub fence_check: FenceCheck,
}

impl Default for RedisBenchOptions {
    fn default() -> Self {
        Self {
            messages: 20_000,
            rounds: 5,
            concurrency: vec![1, 100, 1000],
            prefetch: vec![AUTO, 0, 3000],
            long: true,
            slow: true,
            threads: None,
            progress: false,
            metrics: false,
            fence_check: FenceCheck::PerLease,
        }
    }
}

/// Redis commands a round sent (from `INFO commandstats`, after minus before), per message.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CommandsPerMessage {
    /// `EVALSHA` + `EVAL` (the backend's scripts: fetch, ack, renew).
    pub scripts: f64,
    /// `XREADGROUP`.
    pub xreadgroup: f64,
    /// `XACK`.
    pub xack: f64,
    /// `XREAD` (the backend's blocking wait).
    pub xread: f64,
    /// Every command.
    pub total: f64,
}

/// Backend calls of one leasehold round, counted by a wrapper around the backend.
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

/// One measured variant: messages per second of each round, and what each round sent.
#[derive(Debug, Clone, Default)]
pub struct Variant {
    /// What it is.
    pub name: String,
    /// Messages per second, one per measured round.
    pub rates: Vec<f64>,
    /// Commands per message, one per measured round.
    pub commands: Vec<CommandsPerMessage>,
    /// Backend calls, one per measured round (empty for the raw loop).
    pub calls: Vec<Calls>,
    /// The redis-server's CPU time per message in µs (`INFO cpu`), one per measured round where
    /// it could be read.
    pub server_cpu_us: Vec<f64>,
    /// This process's CPU time per message in µs (all threads), one per measured round where it
    /// could be read (Linux only).
    pub client_cpu_us: Vec<f64>,
}

impl Variant {
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

    fn commands_median(&self, pick: fn(&CommandsPerMessage) -> f64) -> f64 {
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

    /// The variant as JSON: its medians, then every round.
    pub fn to_json(&self) -> Json {
        let commands = |pick: fn(&CommandsPerMessage) -> f64| self.commands_median(pick);
        json!({
            "name": self.name,
            "msg_per_s": self.median(),
            "commands_per_msg": {
                "evalsha": commands(|c| c.scripts),
                "xreadgroup": commands(|c| c.xreadgroup),
                "xack": commands(|c| c.xack),
                "xread": commands(|c| c.xread),
                "total": commands(|c| c.total),
            },
            "server_cpu_us_per_msg": self.server_cpu_median(),
            "client_cpu_us_per_msg": self.client_cpu_median(),
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

    /// Records one measured round.
    fn record(&mut self, messages: usize, took: Duration, cost: RoundCost, calls: Option<Calls>) {
        self.rates.push(rate(messages, took));
        self.commands.push(cost.commands);
        self.server_cpu_us.extend(cost.server_cpu_us);
        self.client_cpu_us.extend(cost.client_cpu_us);
        self.calls.extend(calls);
    }
}

/// The RSS reading (kB from `/proc/self/status`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RssReading {
    /// `VmRSS` just before the worker started (runtime, connections and server handle up).
    pub before_kb: u64,
    /// `VmRSS` while the worker held `RSS_IN_FLIGHT` (1000) handlers in flight.
    pub during_kb: u64,
    /// `VmHWM` (the process's peak RSS so far) at that moment.
    pub peak_kb: u64,
}

impl RssReading {
    /// The worker's share, in MB: RSS during the in-flight phase minus RSS before the worker.
    pub fn worker_mb(&self) -> f64 {
        self.during_kb.saturating_sub(self.before_kb) as f64 / 1024.0
    }
}

/// The whole measurement.
#[derive(Debug, Clone)]
pub struct RedisBenchReport {
    /// What was measured.
    pub options: RedisBenchOptions,
    /// Worker threads of the tokio runtime.
    pub threads: usize,
    /// The raw loop.
    pub raw: Variant,
    /// leasehold, no-op handler, keyed by `(concurrency, prefetch)`: one per combination (the
    /// options' concurrency order, each with the prefetch settings in their order).
    pub no_op: Vec<((usize, usize), Variant)>,
    /// The no-op variant at concurrency 100 and the first prefetch setting again, deleting each
    /// entry on its ack (`Retention::DeleteOnAck`), same key.
    pub deleting: Vec<((usize, usize), Variant)>,
    /// The no-op variants again, their workers recording metrics (with `metrics`), same keys.
    pub metered: Vec<((usize, usize), Variant)>,
    /// leasehold, 10 ms handler at concurrency 1000, keyed by prefetch (in the options' order).
    pub slow: Vec<(usize, Variant)>,
    /// The sleep loop: the runtime's own rate for the 10 ms handler at concurrency 1000 (with
    /// the 10 ms rows).
    pub sleep_loop: Option<Variant>,
    /// Milliseconds of one renew over `HELD_LEASES` (10 000) leases, one per timed call.
    pub renew_ms: Vec<f64>,
    /// Script calls (EVALSHA) per renew tick, one per measured round.
    pub renew_scripts: Vec<f64>,
    /// The hoarding row, keyed by prefetch (in the options' order): every measured round.
    pub long: Vec<(usize, Vec<LongRound>)>,
    /// The RSS reading (taken once, before any other round, so earlier rounds' freed memory
    /// does not hide the worker's).
    pub rss: RssReading,
    /// `redis-server --version`'s first words, for the record.
    pub redis_version: String,
}

impl RedisBenchReport {
    /// A no-op variant recording metrics / the same without, of the medians.
    pub fn metered_ratio(&self, concurrency: usize, prefetch: usize) -> Option<f64> {
        let find = |list: &[((usize, usize), Variant)]| {
            list.iter()
                .find(|(key, _)| *key == (concurrency, prefetch))
                .map(|(_, v)| v.median())
        };
        Some(find(&self.metered)? / find(&self.no_op)?.max(f64::MIN_POSITIVE))
    }

    /// leasehold no-op at `concurrency` and `prefetch` / raw, of the medians.
    pub fn ratio(&self, concurrency: usize, prefetch: usize) -> Option<f64> {
        let (_, variant) = self
            .no_op
            .iter()
            .find(|(key, _)| *key == (concurrency, prefetch))?;
        Some(variant.median() / self.raw.median().max(f64::MIN_POSITIVE))
    }

    /// The default retention's drain / deleting on ack's, at the deleting variant's key: the
    /// median of the per-round ratios (both measured in the same round).
    pub fn retention_ratio(&self) -> Option<f64> {
        let (key, deleting) = self.deleting.first()?;
        let (_, consumed) = self.no_op.iter().find(|(k, _)| k == key)?;
        let ratios: Vec<f64> = consumed
            .rates
            .iter()
            .zip(&deleting.rates)
            .map(|(rate, base)| rate / base.max(f64::MIN_POSITIVE))
            .collect();
        (!ratios.is_empty()).then(|| median(&ratios))
    }

    /// The 10 ms handler's throughput at `prefetch` / 100 000 msg/s.
    pub fn slow_ratio(&self, prefetch: usize) -> Option<f64> {
        let (_, variant) = self.slow.iter().find(|(p, _)| *p == prefetch)?;
        Some(variant.median() / ideal_slow_rate())
    }

    /// The 10 ms handler's throughput at `prefetch` / the sleep loop's, the median of the
    /// per-round ratios (both measured in the same round, under the same load).
    pub fn slow_to_sleep_loop(&self, prefetch: usize) -> Option<f64> {
        let (_, variant) = self.slow.iter().find(|(p, _)| *p == prefetch)?;
        let base = self.sleep_loop.as_ref()?;
        let ratios: Vec<f64> = variant
            .rates
            .iter()
            .zip(&base.rates)
            .map(|(rate, base)| rate / base.max(f64::MIN_POSITIVE))
            .collect();
        (!ratios.is_empty()).then(|| median(&ratios))
    }
}

impl RedisBenchReport {
    /// The results as JSON (what `--json` prints): every variant with its ratio (to the raw
    /// loop, or for the 10 ms handler to the ideal rate) and target verdict, the heartbeat and
    /// the RSS reading.
    pub fn to_json(&self) -> Json {
        let o = &self.options;
        let with = |variant: &Variant, fields: Json| {
            let mut out = variant.to_json();
            if let (Json::Object(out), Json::Object(fields)) = (&mut out, fields) {
                out.extend(fields);
            }
            out
        };
        let no_op: Vec<Json> = self
            .no_op
            .iter()
            .map(|((concurrency, prefetch), variant)| {
                let ratio = self.ratio(*concurrency, *prefetch);
                let target = (*concurrency == 100).then_some(TARGET_NO_OP);
                let met = target.zip(ratio).map(|(target, ratio)| ratio >= target);
                with(
                    variant,
                    json!({
                        "concurrency": concurrency,
                        "prefetch": prefetch_json(*prefetch),
                        "ratio_to_raw": ratio,
                        "target_ratio": target,
                        "met": met,
                    }),
                )
            })
            .collect();
        let slow: Vec<Json> = self
            .slow
            .iter()
            .map(|(prefetch, variant)| {
                let ratio = self.slow_ratio(*prefetch);
                with(
                    variant,
                    json!({
                        "concurrency": SLOW_CONCURRENCY,
                        "prefetch": prefetch_json(*prefetch),
                        "handler_ms": SLOW_HANDLER.as_secs_f64() * 1e3,
                        "ideal_msg_per_s": ideal_slow_rate(),
                        "ratio_to_ideal": ratio,
                        "ratio_to_sleep_loop": self.slow_to_sleep_loop(*prefetch),
                        "target_ratio": TARGET_SLOW,
                        "met": ratio.map(|ratio| ratio >= TARGET_SLOW),
                    }),
                )
            })
            .collect();
        let rss = &self.rss;
        json!({
            "bench": "e2e-redis",
            "redis_version": self.redis_version,
            "fence_check": format!("{:?}", o.fence_check),
            "messages": o.messages,
            "rounds": o.rounds,
            "threads": self.threads,
            "claim_timeout_s": CLAIM_TIMEOUT.as_secs(),
            "raw": with(&self.raw, json!({ "batch": RAW_COUNT })),
            "no_op": no_op,
            "delete_on_ack": self.deleting.iter().map(|((concurrency, prefetch), variant)| with(
                variant,
                json!({
                    "concurrency": concurrency,
                    "prefetch": prefetch_json(*prefetch),
                    "default_retention_ratio": self.retention_ratio(),
                }),
            )).collect::<Vec<_>>(),
            "metered": self.metered.iter().map(|((concurrency, prefetch), variant)| with(
                variant,
                json!({
                    "concurrency": concurrency,
                    "prefetch": prefetch_json(*prefetch),
                    "ratio_to_unmetered": self.metered_ratio(*concurrency, *prefetch),
                }),
            )).collect::<Vec<_>>(),
            "slow": slow,
            "sleep_loop": self.sleep_loop.as_ref().map(|v| with(v, json!({
                "tasks": SLOW_CONCURRENCY,
                "handler_ms": SLOW_HANDLER.as_secs_f64() * 1e3,
                "ratio_to_ideal": v.median() / ideal_slow_rate(),
            }))),
            "heartbeat": {
                "held_leases": HELD_LEASES,
                "renew_ms": median(&self.renew_ms),
                "script_calls_per_tick": median(&self.renew_scripts),
                "rounds": {
                    "renew_ms": self.renew_ms,
                    "script_calls_per_tick": self.renew_scripts,
                },
            },
            "long": self.long.iter().map(|(prefetch, rounds)| {
                let ms = |f: &dyn Fn(&LongRound) -> Duration| -> Vec<f64> {
                    rounds.iter().map(|r| f(r).as_secs_f64() * 1e3).collect()
                };
                let makespan = ms(&|r| r.makespan);
                let wait = ms(&|r| r.max_wait);
                json!({
                    "name": format!("1 s jobs, two workers, {}", prefetch_label(*prefetch)),
                    "prefetch": prefetch_json(*prefetch),
                    "workers": 2,
                    "concurrency": LONG_CONCURRENCY,
                    "jobs": LONG_JOBS,
                    "warmup_messages": LONG_WARMUP,
                    "handler_ms": LONG_HANDLER.as_millis() as u64,
                    "makespan_ms": median(&makespan),
                    "makespan_ms_min": makespan.iter().copied().fold(f64::INFINITY, f64::min),
                    "makespan_ms_max": makespan.iter().copied().fold(0.0, f64::max),
                    "max_wait_ms": median(&wait),
                    "rounds": rounds.iter().map(|r| json!({
                        "makespan_ms": r.makespan.as_secs_f64() * 1e3,
                        "max_wait_ms": r.max_wait.as_secs_f64() * 1e3,
                        "split": r.split,
                    })).collect::<Vec<_>>(),
                })
            }).collect::<Vec<_>>(),
            "rss": {
                "in_flight": RSS_IN_FLIGHT,
                "before_kb": rss.before_kb,
                "during_kb": rss.during_kb,
                "peak_kb": rss.peak_kb,
                "worker_mb": rss.worker_mb(),
                "target_mb": TARGET_RSS_MB,
                "met": rss.worker_mb() <= TARGET_RSS_MB,
            },
        })
    }
}

/// The sleep loop: `SLOW_CONCURRENCY` tasks each taking the next of `messages` tickets and
/// sleeping `SLOW_HANDLER` for it, until none is left; how long until the last sleep ended.
async fn sleep_loop_round(messages: usize) -> Duration {
    let taken = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let tasks: Vec<_> = (0..SLOW_CONCURRENCY)
        .map(|_| {
            let taken = taken.clone();
            tokio::spawn(async move {
                while taken.fetch_add(1, Ordering::Relaxed) < messages {
                    tokio::time::sleep(SLOW_HANDLER).await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a sleep-loop task never panics");
    }
    start.elapsed()
}

fn ideal_slow_rate() -> f64 {
    SLOW_CONCURRENCY as f64 / SLOW_HANDLER.as_secs_f64()
}

fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "MISSED"
    }
}

impl fmt::Display for RedisBenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = &self.options;
        writeln!(
            f,
            "redis backend ({}), {} messages per round, median of {} interleaved rounds, \
             tokio multi-thread ({} threads)",
            self.redis_version,
            grouped(o.messages as f64),
            o.rounds,
            self.threads
        )?;
        writeln!(f)?;
        writeln!(
            f,
            "| variant | msg/s (median) | ratio | target | EVALSHA/msg | XREADGROUP/msg¹ | \
             XACK/msg¹ | XREAD/msg | commands/msg¹ | server CPU µs/msg² | client CPU µs/msg² |"
        )?;
        writeln!(f, "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|")?;
        let cpu =
            |value: Option<f64>| value.map_or_else(|| "n/a".to_owned(), |v| format!("{v:.2}"));
        let row = |f: &mut fmt::Formatter<'_>, v: &Variant, ratio: &str, target: &str| {
            writeln!(
                f,
                "| {} | {} | {} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {} | {} |",
                v.name,
                grouped(v.median()),
                ratio,
                target,
                v.commands_median(|c| c.scripts),
                v.commands_median(|c| c.xreadgroup),
                v.commands_median(|c| c.xack),
                v.commands_median(|c| c.xread),
                v.commands_median(|c| c.total),
                cpu(v.server_cpu_median()),
                cpu(v.client_cpu_median()),
            )
        };
        row(f, &self.raw, "1.00", "")?;
        for ((concurrency, prefetch), variant) in &self.no_op {
            let ratio = self.ratio(*concurrency, *prefetch).unwrap_or(0.0);
            let target = if *concurrency == 100 {
                format!("≥ {TARGET_NO_OP} × raw: {}", verdict(ratio >= TARGET_NO_OP))
            } else {
                String::new()
            };
            row(f, variant, &format!("{ratio:.2} × raw"), &target)?;
        }
        for (_, variant) in &self.deleting {
            let ratio = self.retention_ratio().unwrap_or(0.0);
            let target = format!("default ≥ 1.00 ×: {}", verdict(ratio >= 1.0));
            row(f, variant, &format!("default {ratio:.2} ×"), &target)?;
        }
        if let Some(base) = &self.sleep_loop {
            let ratio = base.median() / ideal_slow_rate();
            row(f, base, &format!("{ratio:.2} × ideal"), "")?;
        }
        for (prefetch, variant) in &self.slow {
            let slow = self.slow_ratio(*prefetch).unwrap_or(0.0);
            let to_loop = self
                .slow_to_sleep_loop(*prefetch)
                .map_or(String::new(), |r| format!(" ({r:.2} × sleep loop)"));
            row(
                f,
                variant,
                &format!("{slow:.2} × ideal{to_loop}"),
                &format!(
                    "≥ {TARGET_SLOW} × {} msg/s: {}",
                    grouped(ideal_slow_rate()),
                    verdict(slow >= TARGET_SLOW)
                ),
            )?;
        }
        for ((concurrency, prefetch), variant) in &self.metered {
            let ratio = self.metered_ratio(*concurrency, *prefetch).unwrap_or(0.0);
            row(f, variant, &format!("{ratio:.3} × unmetered"), "")?;
        }
        writeln!(f)?;
        writeln!(
            f,
            "heartbeat: one renew over {} held leases: {:.1} ms per tick (median of {} calls, \
             min {:.1}, max {:.1}), {:.0} script calls (round trips) per tick",
            grouped(HELD_LEASES as f64),
            median(&self.renew_ms),
            self.renew_ms.len(),
            self.renew_ms.iter().copied().fold(f64::INFINITY, f64::min),
            self.renew_ms.iter().copied().fold(0.0, f64::max),
            median(&self.renew_scripts),
        )?;
        if self.long.iter().any(|(_, rounds)| !rounds.is_empty()) {
            writeln!(f)?;
            writeln!(
                f,
                "hoarding: two workers (concurrency {LONG_CONCURRENCY} each) drain                  {LONG_WARMUP} no-op messages, then {LONG_JOBS} jobs of {LONG_HANDLER:?} are                  published at once (ideal: all start at once, makespan {LONG_HANDLER:?})"
            )?;
            writeln!(f)?;
            writeln!(
                f,
                "| variant | makespan (median) | range | longest wait publish → start (median)                  | long jobs per worker, each round |"
            )?;
            writeln!(f, "|---|---:|---|---:|---|")?;
            for (prefetch, rounds) in &self.long {
                let secs = |f: &dyn Fn(&LongRound) -> Duration| -> Vec<f64> {
                    rounds.iter().map(|r| f(r).as_secs_f64()).collect()
                };
                let makespan = secs(&|r| r.makespan);
                let wait = secs(&|r| r.max_wait);
                let splits: Vec<String> = rounds
                    .iter()
                    .map(|r| format!("{}+{}", r.split[0], r.split[1]))
                    .collect();
                writeln!(
                    f,
                    "| 1 s jobs, two workers, {} | {:.3} s | {:.3}–{:.3} s | {:.3} s | {} |",
                    prefetch_label(*prefetch),
                    median(&makespan),
                    makespan.iter().copied().fold(f64::INFINITY, f64::min),
                    makespan.iter().copied().fold(0.0, f64::max),
                    median(&wait),
                    splits.join(" "),
                )?;
            }
        }
        let rss = &self.rss;
        writeln!(
            f,
            "RSS: {:.1} MB before the worker, {:.1} MB with {RSS_IN_FLIGHT} handlers in flight \
             (VmRSS): worker share {:.1} MB, target ≤ {TARGET_RSS_MB} MB: {}; process peak \
             VmHWM {:.1} MB",
            rss.before_kb as f64 / 1024.0,
            rss.during_kb as f64 / 1024.0,
            rss.worker_mb(),
            verdict(rss.worker_mb() <= TARGET_RSS_MB),
            rss.peak_kb as f64 / 1024.0,
        )?;
        writeln!(f)?;
        writeln!(f, "backend calls per leasehold round (mean of the rounds):")?;
        let leasehold = || {
            self.no_op
                .iter()
                .map(|(_, v)| v)
                .chain(self.slow.iter().map(|(_, v)| v))
        };
        let width = leasehold()
            .map(|v| v.name.chars().count())
            .max()
            .unwrap_or(0);
        for variant in leasehold() {
            let n = variant.calls.len().max(1) as f64;
            let sum =
                |pick: fn(&Calls) -> usize| variant.calls.iter().map(pick).sum::<usize>() as f64;
            let (fetches, fetched, acks) =
                (sum(|c| c.fetches), sum(|c| c.fetched), sum(|c| c.acks));
            writeln!(
                f,
                "  {:<width$} {:>7.0} fetches ({:.1} messages each), {:>7.0} acks ({:.1} \
                 messages each), {:.0} renews",
                variant.name,
                fetches / n,
                fetched / fetches.max(1.0),
                acks / n,
                fetched / acks.max(1.0),
                sum(|c| c.renews) / n,
            )?;
        }
        writeln!(f)?;
        write!(
            f,
            "raw: XREADGROUP COUNT {RAW_COUNT} + inline no-op + XACK pipelined with the next \
             read, one multiplexed connection.\nleasehold: one tokio worker, RedisBackend, claim \
             timeout {}s (heartbeats on), fenced acks.\nper-message columns: INFO commandstats \
             calls, after minus before the round (worker start and shutdown included); ¹ Redis \
             also counts the commands a script runs, so for leasehold these include the \
             XREADGROUP/XACK inside the fetch and ack scripts. Round trips: EVALSHA + XREAD \
             (leasehold), XREADGROUP (raw: the XACK rides in the same pipeline).\n² CPU time \
             per message over the same span: server = the bench's redis-server, INFO cpu \
             used_cpu_user + used_cpu_sys; client = this process, every thread's \
             /proc/self/task/*/schedstat (n/a where unreadable). CPU µs/msg × msg/s / 1e6 = \
             cores kept busy: near 1 for the server (it executes commands on one thread) means \
             the server is the limit; the client has {} runtime threads.",
            CLAIM_TIMEOUT.as_secs(),
            self.threads
        )
    }
}

/// The variants' handlers.
#[derive(Clone)]
enum Handler {
    NoOp,
    Sleep(Duration),
    /// Counts itself in, then waits until released.
    Hold(Arc<Hold>),
}

struct Hold {
    in_flight: AtomicUsize,
    all_in: Notify,
    release: tokio::sync::Semaphore,
}

/// Runs the benchmark: starts a redis-server, then a fresh tokio multi-thread runtime.
pub fn run(options: &RedisBenchOptions) -> Result<RedisBenchReport, BenchError> {
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
    if options.prefetch.is_empty() {
        return Err(BenchError::Invalid(
            "--prefetch takes one or more values (0: no prefetch)".into(),
        ));
    }
    for &concurrency in options.concurrency.iter().chain([&SLOW_CONCURRENCY]) {
        for &prefetch in &options.prefetch {
            worker_config(concurrency, prefetch).validate()?;
        }
    }
    let server = RedisServer::start().map_err(|e| BenchError::Redis(e.to_string()))?;
    let url = server.url();
    let redis_version = info_field(&server, "server", "redis_version")
        .map_or_else(|| "redis".to_owned(), |v| format!("redis {v}"));
    let runtime = super::tokio_runtime(options.threads)?;
    let threads = runtime.metrics().num_workers();
    let rt = TokioRuntime::from_handle(runtime.handle().clone());
    let bar = if options.progress {
        let bar = ProgressBar::new_spinner();
        bar.enable_steady_tick(Duration::from_millis(100));
        bar
    } else {
        ProgressBar::hidden()
    };

    // RSS first: later rounds leave freed memory in the allocator that would hide the worker's.
    bar.set_message("RSS with 1000 in flight");
    let rss = runtime.block_on(rss_round(rt.clone(), &url))?;

    let mut raw = Variant::new("raw XREADGROUP loop");
    let mut no_op: Vec<((usize, usize), Variant)> = options
        .concurrency
        .iter()
        .flat_map(|&c| {
            options.prefetch.iter().map(move |&p| {
                let name = format!("leasehold no-op, c={c}, {}", prefetch_label(p));
                ((c, p), Variant::new(name))
            })
        })
        .collect();
    let mut metered: Vec<((usize, usize), Variant)> = if options.metrics {
        no_op
            .iter()
            .map(|(key, v)| (*key, Variant::new(format!("{} + metrics", v.name))))
            .collect()
    } else {
        Vec::new()
    };
    // The drain deleting on ack beside it, at concurrency 100 with the first prefetch setting:
    // the default retention must cost the drain nothing against it.
    let first_prefetch = options.prefetch.first().copied();
    let mut deleting: Vec<((usize, usize), Variant)> = no_op
        .iter()
        .filter(|((c, p), _)| *c == 100 && Some(*p) == first_prefetch)
        .map(|(key, v)| (*key, Variant::new(format!("{}, delete on ack", v.name))))
        .collect();
    let recorder = Metered::new();
    let mut slow: Vec<(usize, Variant)> = options
        .prefetch
        .iter()
        .filter(|_| options.slow)
        .map(|&p| {
            let name = format!(
                "leasehold 10 ms, c={SLOW_CONCURRENCY}, {}",
                prefetch_label(p)
            );
            (p, Variant::new(name))
        })
        .collect();
    let mut sleep_loop = options
        .slow
        .then(|| Variant::new(format!("tokio sleep loop, {SLOW_CONCURRENCY} tasks")));
    let mut long: Vec<(usize, Vec<LongRound>)> =
        options.prefetch.iter().map(|&p| (p, Vec::new())).collect();
    let mut renew_ms = Vec::new();
    let mut renew_scripts = Vec::new();
    let mut key = 0usize;
    let mut next_key = |what: &str| {
        key += 1;
        format!("bench:{what}:{key}")
    };
    for round in 0..=options.rounds {
        let measured = round > 0;
        bar.set_message(format!("round {round} of {}: raw", options.rounds));
        let stream = next_key("raw");
        runtime.block_on(publish(&url, &stream, options.messages))?;
        let probe = Probe::start(&server)?;
        let took = runtime.block_on(raw_round(&url, &stream, options.messages))?;
        let cost = probe.stop(&server, options.messages)?;
        if measured {
            raw.record(options.messages, took, cost, None);
        }
        if let Some(variant) = &mut sleep_loop {
            bar.set_message(format!("round {round} of {}: sleep loop", options.rounds));
            let probe = Probe::start(&server)?;
            let took = runtime.block_on(sleep_loop_round(options.messages));
            let cost = probe.stop(&server, options.messages)?;
            if measured {
                variant.record(options.messages, took, cost, None);
            }
        }
        let consumed = Retention::Consumed;
        let leasehold_variants = no_op
            .iter_mut()
            .map(|((c, p), v)| (v, worker_config(*c, *p), Handler::NoOp, None, consumed))
            .chain(deleting.iter_mut().map(|((c, p), v)| {
                let config = worker_config(*c, *p);
                (v, config, Handler::NoOp, None, Retention::DeleteOnAck)
            }))
            .chain(metered.iter_mut().map(|((c, p), v)| {
                let config = worker_config(*c, *p);
                (v, config, Handler::NoOp, Some(&recorder), consumed)
            }))
            .chain(slow.iter_mut().map(|(p, v)| {
                let config = worker_config(SLOW_CONCURRENCY, *p);
                (v, config, Handler::Sleep(SLOW_HANDLER), None, consumed)
            }));
        for (variant, config, handler, recorder, retention) in leasehold_variants {
            bar.set_message(format!(
                "round {round} of {}: {}",
                options.rounds, variant.name
            ));
            let stream = next_key("leasehold");
            let side = Side {
                config,
                handler,
                recorder,
                fence_check: options.fence_check,
                retention,
            };
            let (took, calls, cost) =
                leasehold_measured(&runtime, &server, &rt, &stream, options.messages, side)?;
            recorder.inspect(|r| r.upkeep());
            if measured {
                variant.record(options.messages, took, cost, Some(calls));
            }
        }
        if options.long {
            for (prefetch, rounds) in &mut long {
                bar.set_message(format!(
                    "round {round} of {}: 1 s jobs, two workers, {}",
                    options.rounds,
                    prefetch_label(*prefetch)
                ));
                let stream = next_key("long");
                let result = runtime.block_on(long_round(
                    rt.clone(),
                    &url,
                    &stream,
                    *prefetch,
                    options.fence_check,
                ))?;
                if measured {
                    rounds.push(result);
                }
            }
        }
        bar.set_message(format!("round {round} of {}: heartbeat", options.rounds));
        let stream = next_key("renew");
        let backend = runtime.block_on(async {
            publish(&url, &stream, HELD_LEASES).await?;
            hold_leases(&url, &stream, HELD_LEASES, options.fence_check).await
        })?;
        for _ in 0..RENEWS_PER_ROUND {
            let before = commandstats(&server)?;
            let took = runtime.block_on(renew_all(&backend))?;
            let after = commandstats(&server)?;
            if measured {
                renew_ms.push(took.as_secs_f64() * 1e3);
                renew_scripts.push(commands_delta(&before, &after, 1).scripts);
            }
        }
        drop(backend);
    }
    bar.finish_and_clear();
    Ok(RedisBenchReport {
        options: options.clone(),
        threads,
        raw,
        no_op,
        deleting,
        metered,
        slow,
        sleep_loop,
        renew_ms,
        renew_scripts,
        long,
        rss,
        redis_version,
    })
}

fn rate(messages: usize, took: Duration) -> f64 {
    messages as f64 / took.as_secs_f64().max(1e-9)
}

/// The defaults, except the concurrency and prefetch under test, `max_leases` (room for both,
/// at least the default 1000), the claim timeout, and a short poll interval (the last fetch of a
/// round waits that long).
fn worker_config(concurrency: usize, prefetch: usize) -> Config {
    if prefetch == AUTO {
        return Config::default()
            .concurrency(concurrency)
            .claim_timeout(CLAIM_TIMEOUT)
            .poll_interval(Duration::from_millis(50));
    }
    Config::default()
        .concurrency(concurrency)
        .prefetch(prefetch)
        .max_leases(concurrency.saturating_add(prefetch).max(1000))
        .claim_timeout(CLAIM_TIMEOUT)
        .poll_interval(Duration::from_millis(50))
}

pub(super) fn redis_error(what: &str, e: redis::RedisError) -> BenchError {
    BenchError::Redis(format!("{what}: {e}"))
}

pub(super) async fn connection(url: &str) -> Result<redis::aio::MultiplexedConnection, BenchError> {
    let client = redis::Client::open(url).map_err(|e| redis_error("bad url", e))?;
    client
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| redis_error("connect", e))
}

/// Pipelined `XADD stream * data PAYLOAD`, 1000 per pipeline.
async fn publish(url: &str, stream: &str, messages: usize) -> Result<(), BenchError> {
    let mut con = connection(url).await?;
    let mut left = messages;
    while left > 0 {
        let n = left.min(1000);
        let mut pipe = redis::pipe();
        for _ in 0..n {
            pipe.cmd("XADD")
                .arg(stream)
                .arg("*")
                .arg(FIELD)
                .arg(PAYLOAD)
                .ignore();
        }
        pipe.query_async::<()>(&mut con)
            .await
            .map_err(|e| redis_error("publish", e))?;
        left -= n;
    }
    Ok(())
}

/// The hand-written consumer: read 100, no-op each, ack them pipelined with the next read.
async fn raw_round(url: &str, stream: &str, messages: usize) -> Result<Duration, BenchError> {
    let mut con = connection(url).await?;
    redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(stream)
        .arg(GROUP)
        .arg("0")
        .query_async::<()>(&mut con)
        .await
        .map_err(|e| redis_error("create group", e))?;
    let start = Instant::now();
    let mut done = 0usize;
    let mut to_ack: Vec<Vec<u8>> = Vec::new();
    while done < messages {
        let mut pipe = redis::pipe();
        if !to_ack.is_empty() {
            pipe.cmd("XACK")
                .arg(stream)
                .arg(GROUP)
                .arg(&to_ack)
                .ignore();
        }
        pipe.cmd("XREADGROUP")
            .arg("GROUP")
            .arg(GROUP)
            .arg("c")
            .arg("COUNT")
            .arg(RAW_COUNT)
            .arg("STREAMS")
            .arg(stream)
            .arg(">");
        let (reply,): (Value,) = pipe
            .query_async(&mut con)
            .await
            .map_err(|e| redis_error("raw read", e))?;
        to_ack.clear();
        for (id, payload) in entries(reply) {
            std::hint::black_box(&payload); // the inline no-op handler
            to_ack.push(id);
        }
        if to_ack.is_empty() {
            return Err(BenchError::Invalid(format!(
                "raw loop: the stream ran dry after {done} of {messages} messages"
            )));
        }
        done += to_ack.len();
    }
    redis::cmd("XACK")
        .arg(stream)
        .arg(GROUP)
        .arg(&to_ack)
        .query_async::<()>(&mut con)
        .await
        .map_err(|e| redis_error("raw ack", e))?;
    Ok(start.elapsed())
}

/// `(id, payload)` of every entry in an `XREADGROUP` reply (RESP2 arrays or RESP3 maps).
fn entries(reply: Value) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    let streams: Vec<Value> = match reply {
        Value::Array(streams) => streams
            .into_iter()
            .filter_map(|s| match s {
                Value::Array(mut pair) if pair.len() == 2 => pair.pop(),
                _ => None,
            })
            .collect(),
        Value::Map(pairs) => pairs.into_iter().map(|(_, v)| v).collect(),
        _ => Vec::new(),
    };
    let mut out = Vec::new();
    for list in streams {
        let Value::Array(list) = list else { continue };
        for entry in list {
            let Value::Array(mut parts) = entry else {
                continue;
            };
            if parts.len() != 2 {
                continue;
            }
            let fields = parts.pop();
            let Some(Value::BulkString(id)) = parts.pop() else {
                continue;
            };
            let payload = match fields {
                Some(Value::Array(mut fv)) if fv.len() >= 2 => match fv.swap_remove(1) {
                    Value::BulkString(b) => Some(b),
                    _ => None,
                },
                _ => None,
            };
            out.push((id, payload));
        }
    }
    out
}

/// The worker of one leasehold round: its configuration, its handler, and the recorder its
/// metrics go to (none: not recorded).
struct Side<'a> {
    config: Config,
    handler: Handler,
    recorder: Option<&'a Metered>,
    fence_check: FenceCheck,
    retention: Retention,
}

/// Publishes, snapshots `INFO commandstats` and CPU times, runs one leasehold round, snapshots
/// again.
fn leasehold_measured(
    runtime: &tokio::runtime::Runtime,
    server: &RedisServer,
    rt: &TokioRuntime,
    stream: &str,
    messages: usize,
    side: Side<'_>,
) -> Result<(Duration, Calls, RoundCost), BenchError> {
    let url = server.url();
    runtime.block_on(publish(&url, stream, messages))?;
    let probe = Probe::start(server)?;
    let (took, calls) = runtime.block_on(leasehold_round(
        rt.clone(),
        &url,
        stream,
        messages,
        side,
        |_| async {},
    ))?;
    let cost = probe.stop(server, messages)?;
    Ok((took, calls, cost))
}

/// One worker over a pre-published stream; the clock runs from the worker's start to the last
/// ack. `during` runs once the worker has started (the RSS reading uses it).
async fn leasehold_round<F, Fut>(
    rt: TokioRuntime,
    url: &str,
    stream: &str,
    messages: usize,
    side: Side<'_>,
    during: F,
) -> Result<(Duration, Calls), BenchError>
where
    F: FnOnce(Handler) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let Side {
        config,
        handler,
        recorder,
        fence_check,
        retention,
    } = side;
    let backend = RedisBackend::connect(
        RedisConfig::new(url, stream, GROUP)
            .consumer("bench")
            .claim_timeout(CLAIM_TIMEOUT)
            .fence_check(fence_check)
            .retention(retention),
    )
    .await
    .map_err(|e| BenchError::Redis(format!("connect: {e}")))?;
    let counter = Arc::new(AckCounter {
        target: messages,
        acked: AtomicUsize::new(0),
        all_acked: Notify::new(),
        calls: CallCounts::default(),
    });
    let backend = Counting::new(backend, counter.clone());
    let run = handler.clone();
    let start = Instant::now();
    let builder = WorkerBuilder::new(rt).config(config).stream_with_codec(
        stream,
        backend,
        Raw,
        move |delivery: Delivery<Vec<u8>>| {
            let run = run.clone();
            async move {
                match run {
                    Handler::NoOp => {
                        std::hint::black_box(delivery.message());
                    }
                    Handler::Sleep(d) => tokio::time::sleep(d).await,
                    Handler::Hold(hold) => {
                        if hold.in_flight.fetch_add(1, Ordering::AcqRel) + 1 == RSS_IN_FLIGHT {
                            hold.all_in.notify_one();
                        }
                        if let Ok(permit) = hold.release.acquire().await {
                            permit.forget();
                        }
                    }
                }
            }
        },
    );
    let worker = match recorder {
        Some(recorder) => recorder.start(|| builder.start())?,
        None => builder.start()?,
    };
    during(handler).await;
    counter.all_acked.notified().await;
    let took = start.elapsed();
    let calls = &counter.calls;
    let calls = Calls {
        fetches: calls.fetches.load(Ordering::Relaxed),
        fetched: calls.fetched.load(Ordering::Relaxed),
        acks: calls.acks.load(Ordering::Relaxed),
        renews: calls.renews.load(Ordering::Relaxed),
    };
    let report = worker.shutdown(Duration::from_secs(5)).await;
    if report.acked != messages as u64 {
        return Err(BenchError::Invalid(format!(
            "benchmark round lost messages: {} acked of {messages}",
            report.acked
        )));
    }
    Ok((took, calls))
}

/// RSS before a worker starts, and while it holds 1000 handlers in flight.
async fn rss_round(rt: TokioRuntime, url: &str) -> Result<RssReading, BenchError> {
    let stream = "bench:rss";
    publish(url, stream, RSS_IN_FLIGHT).await?;
    let hold = Arc::new(Hold {
        in_flight: AtomicUsize::new(0),
        all_in: Notify::new(),
        release: tokio::sync::Semaphore::new(0),
    });
    let before_kb = proc_status_kb("VmRSS").unwrap_or(0);
    let mut reading = RssReading {
        before_kb,
        ..RssReading::default()
    };
    let slot = Arc::new(std::sync::Mutex::new(reading));
    let out = slot.clone();
    leasehold_round(
        rt,
        url,
        stream,
        RSS_IN_FLIGHT,
        Side {
            config: worker_config(RSS_IN_FLIGHT, 0),
            handler: Handler::Hold(hold.clone()),
            recorder: None,
            fence_check: FenceCheck::default(),
            retention: Retention::default(),
        },
        move |_| async move {
            hold.all_in.notified().await;
            // Let the heartbeat-free steady state settle a moment before reading.
            tokio::time::sleep(Duration::from_millis(200)).await;
            if let Ok(mut r) = out.lock() {
                r.during_kb = proc_status_kb("VmRSS").unwrap_or(0);
                r.peak_kb = proc_status_kb("VmHWM").unwrap_or(0);
            }
            hold.release.add_permits(RSS_IN_FLIGHT);
        },
    )
    .await?;
    if let Ok(r) = slot.lock() {
        reading = *r;
    }
    Ok(reading)
}

/// A field of `/proc/self/status` in kB (`None` off Linux).
fn proc_status_kb(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status.lines().find_map(|line| {
        let rest = line.strip_prefix(field)?.strip_prefix(':')?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// A backend holding `n` leases of a fresh stream (fetched, never acked).
async fn hold_leases(
    url: &str,
    stream: &str,
    n: usize,
    fence_check: FenceCheck,
) -> Result<HeldLeases, BenchError> {
    let backend = RedisBackend::connect(
        RedisConfig::new(url, stream, GROUP)
            .consumer("holder")
            .claim_timeout(CLAIM_TIMEOUT)
            .fence_check(fence_check),
    )
    .await
    .map_err(|e| BenchError::Redis(format!("connect: {e}")))?;
    let mut leases = Vec::with_capacity(n);
    while leases.len() < n {
        let batch = backend
            .fetch(n - leases.len(), Duration::ZERO)
            .await
            .map_err(|e| BenchError::Redis(format!("fetch: {e}")))?;
        if batch.is_empty() {
            return Err(BenchError::Invalid(format!(
                "heartbeat setup: only {} of {n} leases fetched",
                leases.len()
            )));
        }
        leases.extend(batch.into_iter().map(|f| LeaseRef::new(f.id, f.fence)));
    }
    Ok(HeldLeases { backend, leases })
}

struct HeldLeases {
    backend: RedisBackend,
    leases: Vec<LeaseRef>,
}

/// One heartbeat tick: a renew of every held lease; all must be kept.
async fn renew_all(held: &HeldLeases) -> Result<Duration, BenchError> {
    let start = Instant::now();
    let results = held
        .backend
        .renew(&held.leases)
        .await
        .map_err(|e| BenchError::Redis(format!("renew: {e}")))?;
    let took = start.elapsed();
    let kept = results.iter().filter(|r| **r == RenewResult::Kept).count();
    if kept != held.leases.len() {
        return Err(BenchError::Invalid(format!(
            "heartbeat: {kept} of {} leases kept",
            held.leases.len()
        )));
    }
    Ok(took)
}

/// What one round cost, per message.
#[derive(Debug, Clone, Copy, Default)]
struct RoundCost {
    commands: CommandsPerMessage,
    /// The redis-server's CPU µs per message (`None`: `INFO cpu` unreadable).
    server_cpu_us: Option<f64>,
    /// This process's CPU µs per message (`None`: not Linux, or a thread ended mid-round).
    client_cpu_us: Option<f64>,
}

/// The snapshots taken before a round: commandstats, server CPU, this process's CPU.
struct Probe {
    commands: CommandStats,
    server_cpu: Option<f64>,
    client_cpu: Option<Duration>,
}

impl Probe {
    /// Snapshots, innermost last: the INFO calls' own cost stays (almost) out of the CPU deltas,
    /// and `INFO cpu` out of the commandstats delta.
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

    /// Snapshots again (in reverse order) and takes the deltas over `messages`.
    fn stop(self, server: &RedisServer, messages: usize) -> Result<RoundCost, BenchError> {
        let client_cpu = cpu_time();
        let commands = commandstats(server)?;
        let server_cpu = server_cpu_secs(server);
        let per = messages.max(1) as f64;
        let server_cpu_us = match (self.server_cpu, server_cpu) {
            (Some(before), Some(after)) if after >= before => Some((after - before) * 1e6 / per),
            _ => None,
        };
        let client_cpu_us = match (self.client_cpu, client_cpu) {
            (Some(before), Some(after)) => after
                .checked_sub(before)
                .map(|d| d.as_secs_f64() * 1e6 / per),
            _ => None,
        };
        Ok(RoundCost {
            commands: commands_delta(&self.commands, &commands, messages),
            server_cpu_us,
            client_cpu_us,
        })
    }
}

/// The redis-server's `used_cpu_user + used_cpu_sys` in seconds (`INFO cpu`).
pub(super) fn server_cpu_secs(server: &RedisServer) -> Option<f64> {
    let reply = server.command(["INFO", "cpu"]).ok()?;
    let text = reply.as_str()?;
    let field = |name: &str| -> Option<f64> {
        let value: f64 = field_of(text, name)?.parse().ok()?;
        value.is_finite().then_some(value)
    };
    Some(field("used_cpu_user")? + field("used_cpu_sys")?)
}

/// `cmdstat_<name>` → calls, from `INFO commandstats`.
type CommandStats = Vec<(String, u64)>;

fn commandstats(server: &RedisServer) -> Result<CommandStats, BenchError> {
    let reply = server
        .command(["INFO", "commandstats"])
        .map_err(|e| BenchError::Redis(format!("INFO commandstats: {e}")))?;
    let text = reply.as_str().unwrap_or_default();
    Ok(text
        .lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            Some((name.to_owned(), calls))
        })
        .collect())
}

fn commands_delta(
    before: &CommandStats,
    after: &CommandStats,
    messages: usize,
) -> CommandsPerMessage {
    let calls = |stats: &CommandStats, name: &str| {
        stats.iter().find(|(n, _)| n == name).map_or(0, |(_, c)| *c)
    };
    let delta = |name: &str| calls(after, name).saturating_sub(calls(before, name)) as f64;
    let sum = |stats: &CommandStats| stats.iter().map(|(_, c)| c).sum::<u64>();
    // The `before` snapshot's own INFO call is counted in `after`: leave it out.
    let total = sum(after).saturating_sub(sum(before));
    let per = messages.max(1) as f64;
    CommandsPerMessage {
        scripts: (delta("evalsha") + delta("eval")) / per,
        xreadgroup: delta("xreadgroup") / per,
        xack: delta("xack") / per,
        xread: delta("xread") / per,
        total: (total.saturating_sub(1)) as f64 / per,
    }
}

pub(super) fn info_field(server: &RedisServer, section: &str, field: &str) -> Option<String> {
    let reply = server.command(["INFO", section]).ok()?;
    field_of(reply.as_str()?, field).map(str::to_owned)
}

/// `field`'s value in an `INFO` reply (`field:value` lines).
fn field_of<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines().find_map(|line| {
        let value = line.strip_prefix(field)?.strip_prefix(':')?;
        Some(value.trim())
    })
}

/// Long jobs of the hoarding row.
const LONG_JOBS: usize = 8;
/// Their handler.
const LONG_HANDLER: Duration = Duration::from_secs(1);
/// Each of the two workers' concurrency in the hoarding row: together they have one slot per
/// long job, so the ideal makespan is one handler time.
const LONG_CONCURRENCY: usize = 4;
/// Quick (no-op) messages both workers drain first, so an adaptive prefetch has grown.
const LONG_WARMUP: usize = 4000;

/// One round of the hoarding row: two workers on one stream drain `LONG_WARMUP` no-op
/// messages, then `LONG_JOBS` jobs of `LONG_HANDLER` are published at once.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LongRound {
    /// From publishing the long jobs to the last one's end.
    pub makespan: Duration,
    /// Long jobs each worker ran.
    pub split: [usize; 2],
    /// Longest any long job waited from its publish to its start.
    pub max_wait: Duration,
}

/// One hoarding round at `prefetch` (or `AUTO`).
async fn long_round(
    rt: TokioRuntime,
    url: &str,
    stream: &str,
    prefetch: usize,
    fence_check: FenceCheck,
) -> Result<LongRound, BenchError> {
    let quick = Arc::new(AtomicUsize::new(0));
    let long = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
    let started: Arc<std::sync::Mutex<Vec<Instant>>> = Arc::default();
    let all_done = Arc::new(Notify::new());
    publish(url, stream, LONG_WARMUP).await?;
    let mut workers = Vec::new();
    for w in 0..2 {
        let backend = RedisBackend::connect(
            RedisConfig::new(url, stream, GROUP)
                .consumer(format!("bench-{w}"))
                .claim_timeout(CLAIM_TIMEOUT)
                .fence_check(fence_check),
        )
        .await
        .map_err(|e| BenchError::Redis(format!("connect: {e}")))?;
        let (quick, long, started, all_done) = (
            quick.clone(),
            long.clone(),
            started.clone(),
            all_done.clone(),
        );
        // As the other rows (`AUTO`: the defaults), idle workers polling every 20 ms.
        let config =
            worker_config(LONG_CONCURRENCY, prefetch).poll_interval(Duration::from_millis(20));
        let worker = WorkerBuilder::new(rt.clone())
            .config(config)
            .stream_with_codec(stream, backend, Raw, move |delivery: Delivery<Vec<u8>>| {
                let (quick, long, started, all_done) = (
                    quick.clone(),
                    long.clone(),
                    started.clone(),
                    all_done.clone(),
                );
                async move {
                    if delivery.message().as_slice() == b"long" {
                        started.lock().expect("not poisoned").push(Instant::now());
                        tokio::time::sleep(LONG_HANDLER).await;
                        let before: usize = long.iter().map(|n| n.load(Ordering::Acquire)).sum();
                        long[w].fetch_add(1, Ordering::AcqRel);
                        if before + 1 == LONG_JOBS {
                            all_done.notify_one();
                        }
                    } else {
                        quick.fetch_add(1, Ordering::AcqRel);
                    }
                }
            })
            .start()?;
        workers.push(worker);
    }
    while quick.load(Ordering::Acquire) < LONG_WARMUP {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Both idle a moment, as replicas between bursts are.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut con = connection(url).await?;
    let mut pipe = redis::pipe();
    for _ in 0..LONG_JOBS {
        pipe.cmd("XADD")
            .arg(stream)
            .arg("*")
            .arg(FIELD)
            .arg(b"long")
            .ignore();
    }
    let published = Instant::now();
    pipe.query_async::<()>(&mut con)
        .await
        .map_err(|e| redis_error("publish", e))?;
    all_done.notified().await;
    let makespan = published.elapsed();
    for worker in workers {
        worker.shutdown(Duration::from_secs(5)).await;
    }
    let max_wait = started
        .lock()
        .expect("not poisoned")
        .iter()
        .map(|at| at.saturating_duration_since(published))
        .max()
        .unwrap_or_default();
    Ok(LongRound {
        makespan,
        split: [
            long[0].load(Ordering::Acquire),
            long[1].load(Ordering::Acquire),
        ],
        max_wait,
    })
}
