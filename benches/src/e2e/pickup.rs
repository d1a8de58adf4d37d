//! Pickup latency on an idle consumer, Redis: messages published one by one at a steady rate
//! (1 000 msg/s by default), each timed from just before its `XADD` is sent to the moment a
//! handler sees it, for a leasehold worker (concurrency 1, the default configuration) and for
//! a raw blocking consumer (`XACK` of the last entry pipelined with `XREADGROUP … BLOCK`), in
//! the same process, on the same throwaway `redis-server`, rounds interleaved.
//!
//! Per side and round: p50, p99 and max of the latencies, and the Redis commands per message
//! (`INFO commandstats` after minus before, the publisher's `XADD`s and the bench's own `INFO`
//! left out; commands run inside scripts count too). The report gives the medians over rounds
//! with their range, and the per-round p99 ratios.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use leasehold_memory::Bytes;
use leasehold_redis::{RedisBackend, RedisConfig};
use leasehold_redis_harness::RedisServer;
use leasehold_tokio::{Config, Delivery, Raw};
use serde_json::{json, Value as Json};
use tokio::sync::Notify;

use super::redis::{connection, info_field, redis_error};
use super::stats::median;
use super::BenchError;

const GROUP: &str = "g";
const FIELD: &str = "data";
/// How long each consumer idles, blocked, before the first message.
const IDLE_FIRST: Duration = Duration::from_millis(300);
/// Bound on one side's run after its last publish.
const ROUND_TIMEOUT: Duration = Duration::from_secs(60);
/// The goal: leasehold's p99 at most this many times the raw consumer's.
const GOAL_P99_RATIO: f64 = 1.2;

/// What to run.
#[derive(Debug, Clone)]
pub struct PickupOptions {
    /// Messages per side and round.
    pub messages: usize,
    /// Publish rate, messages per second.
    pub rate: u32,
    /// The worker's concurrency.
    pub concurrency: usize,
    /// Measured rounds (plus one warm-up).
    pub rounds: usize,
    /// Tokio worker threads (`None`: one per core).
    pub threads: Option<usize>,
    /// Show a progress spinner.
    pub progress: bool,
}

/// One side's figures in one round.
#[derive(Debug, Clone)]
pub struct SideRound {
    /// Median latency, µs.
    pub p50_us: f64,
    /// 99th percentile, µs.
    pub p99_us: f64,
    /// Slowest message, µs.
    pub max_us: f64,
    /// Redis commands per message, all of them (scripts' inner commands included).
    pub commands_per_msg: f64,
    /// Per message, by command: `(name, calls / messages)`, largest first.
    pub by_command: Vec<(String, f64)>,
}

/// One side over all rounds.
#[derive(Debug, Clone)]
pub struct Side {
    /// Which consumer.
    pub name: &'static str,
    /// Every measured round, in order.
    pub rounds: Vec<SideRound>,
}

impl Side {
    fn of(&self, pick: fn(&SideRound) -> f64) -> (f64, f64, f64) {
        let values: Vec<f64> = self.rounds.iter().map(pick).collect();
        let min = values.iter().copied().fold(f64::INFINITY, f64::min);
        let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (median(&values), min, max)
    }

    fn command_median(&self, name: &str) -> f64 {
        let values: Vec<f64> = self
            .rounds
            .iter()
            .map(|r| {
                r.by_command
                    .iter()
                    .find(|(n, _)| n == name)
                    .map_or(0.0, |&(_, v)| v)
            })
            .collect();
        median(&values)
    }

    fn to_json(&self) -> Json {
        let stat = |pick: fn(&SideRound) -> f64| {
            let (median, min, max) = self.of(pick);
            json!({ "median": median, "min": min, "max": max })
        };
        json!({
            "name": self.name,
            "p50_us": stat(|r| r.p50_us),
            "p99_us": stat(|r| r.p99_us),
            "max_us": stat(|r| r.max_us),
            "commands_per_msg": stat(|r| r.commands_per_msg),
            "rounds": self.rounds.iter().map(|r| json!({
                "p50_us": r.p50_us,
                "p99_us": r.p99_us,
                "max_us": r.max_us,
                "commands_per_msg": r.commands_per_msg,
                "by_command": r.by_command.iter().map(|(n, v)| json!([n, v])).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        })
    }
}

/// What a run measured.
#[derive(Debug, Clone)]
pub struct PickupReport {
    /// `redis x.y.z`.
    pub redis_version: String,
    /// Tokio worker threads.
    pub threads: usize,
    /// What ran.
    pub options: PickupOptions,
    /// The raw blocking consumer.
    pub raw: Side,
    /// The leasehold worker.
    pub leasehold: Side,
}

impl PickupReport {
    /// Each round's leasehold p99 / raw p99.
    pub fn round_ratios(&self) -> Vec<f64> {
        self.raw
            .rounds
            .iter()
            .zip(&self.leasehold.rounds)
            .map(|(raw, lh)| lh.p99_us / raw.p99_us)
            .collect()
    }

    /// Median leasehold p99 / median raw p99.
    pub fn ratio_p99(&self) -> f64 {
        self.leasehold.of(|r| r.p99_us).0 / self.raw.of(|r| r.p99_us).0
    }

    /// Whether the p99 goal is met.
    pub fn met(&self) -> bool {
        self.ratio_p99() <= GOAL_P99_RATIO
    }

    /// The report, machine-readable.
    pub fn to_json(&self) -> Json {
        json!({
            "bench": "pickup",
            "redis_version": self.redis_version,
            "threads": self.threads,
            "messages": self.options.messages,
            "rate_per_s": self.options.rate,
            "concurrency": self.options.concurrency,
            "rounds": self.options.rounds,
            "raw": self.raw.to_json(),
            "leasehold": self.leasehold.to_json(),
            "ratio_p99": self.ratio_p99(),
            "round_ratios_p99": self.round_ratios(),
            "goal_ratio_p99": GOAL_P99_RATIO,
            "met": self.met(),
        })
    }
}

impl fmt::Display for PickupReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "pickup latency on an idle consumer ({}), {} messages per round at {} msg/s, \
             median of {} interleaved rounds [min–max], tokio multi-thread ({} threads)\n",
            self.redis_version,
            self.options.messages,
            self.options.rate,
            self.options.rounds,
            self.threads
        )?;
        writeln!(
            f,
            "| consumer | p50 µs | p99 µs | max µs | commands/msg¹ | XREADGROUP/msg | EVALSHA/msg | XREAD/msg |"
        )?;
        writeln!(f, "|---|---:|---:|---:|---:|---:|---:|---:|")?;
        for side in [&self.raw, &self.leasehold] {
            let cell = |pick: fn(&SideRound) -> f64, digits: usize| {
                let (m, lo, hi) = side.of(pick);
                format!("{m:.digits$} [{lo:.digits$}–{hi:.digits$}]")
            };
            writeln!(
                f,
                "| {} | {} | {} | {} | {} | {:.2} | {:.2} | {:.2} |",
                side.name,
                cell(|r| r.p50_us, 0),
                cell(|r| r.p99_us, 0),
                cell(|r| r.max_us, 0),
                cell(|r| r.commands_per_msg, 2),
                side.command_median("xreadgroup"),
                side.command_median("evalsha"),
                side.command_median("xread"),
            )?;
        }
        let ratios: Vec<String> = self
            .round_ratios()
            .iter()
            .map(|r| format!("{r:.2}"))
            .collect();
        writeln!(
            f,
            "\np99 leasehold / raw: {:.2}× (per round: {}); goal ≤ {GOAL_P99_RATIO}×: {}",
            self.ratio_p99(),
            ratios.join(" "),
            if self.met() { "met" } else { "MISSED" }
        )?;
        let by = |side: &Side| {
            side.rounds
                .last()
                .map(|r| {
                    r.by_command
                        .iter()
                        .map(|(n, v)| format!("{n} {v:.2}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default()
        };
        writeln!(f, "commands per message, last round:")?;
        writeln!(f, "  {:<10} {}", self.raw.name, by(&self.raw))?;
        writeln!(f, "  {:<10} {}", self.leasehold.name, by(&self.leasehold))?;
        write!(
            f,
            "latency = handler start − the instant before the message's XADD was sent (a separate \
             connection). raw: XACK of the last entry pipelined with XREADGROUP COUNT 100 BLOCK 1000. \
             leasehold: leasehold_tokio worker, concurrency {}, otherwise the default config, no-op \
             handler.\n\
             ¹ INFO commandstats, after minus before the side's run, the publisher's XADD and the \
             bench's INFO left out; commands inside scripts count too.",
            self.options.concurrency
        )
    }
}

/// Runs the benchmark.
pub fn run(options: &PickupOptions) -> Result<PickupReport, BenchError> {
    if options.messages == 0 || options.rate == 0 || options.rounds == 0 || options.concurrency == 0
    {
        return Err(BenchError::Invalid(
            "--messages, --rate, --rounds and --concurrency must be at least 1".into(),
        ));
    }
    let server = RedisServer::start().map_err(|e| BenchError::Redis(e.to_string()))?;
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
    let mut raw = Side {
        name: "raw XREADGROUP BLOCK",
        rounds: Vec::new(),
    };
    let mut leasehold = Side {
        name: "leasehold",
        rounds: Vec::new(),
    };
    let url = server.url();
    // Round 0 warms up; then raw and leasehold alternate, each going first every other round.
    for round in 0..=options.rounds {
        let order = if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for worker in order {
            bar.set_message(format!(
                "round {round}/{}: {}",
                options.rounds,
                if worker { "leasehold" } else { "raw" }
            ));
            let stream = format!("pickup-{round}-{}", if worker { "lh" } else { "raw" });
            let measured = runtime.block_on(side(&server, &url, &stream, options, worker))?;
            server
                .command(["DEL", &stream])
                .map_err(|e| BenchError::Redis(e.to_string()))?;
            if round > 0 {
                if worker {
                    leasehold.rounds.push(measured);
                } else {
                    raw.rounds.push(measured);
                }
            }
        }
    }
    bar.finish_and_clear();
    Ok(PickupReport {
        redis_version,
        threads,
        options: options.clone(),
        raw,
        leasehold,
    })
}

/// Handler starts by message index, and a signal once all were seen.
struct Seen {
    at: Mutex<Vec<Option<Instant>>>,
    count: AtomicUsize,
    all: Notify,
}

impl Seen {
    fn new(n: usize) -> Arc<Self> {
        Arc::new(Self {
            at: Mutex::new(vec![None; n]),
            count: AtomicUsize::new(0),
            all: Notify::new(),
        })
    }

    fn record(&self, payload: &[u8]) {
        let now = Instant::now();
        let Some(i) = std::str::from_utf8(payload)
            .ok()
            .and_then(|s| s.parse::<usize>().ok())
        else {
            return;
        };
        let first = match self.at.lock() {
            Ok(mut at) => at
                .get_mut(i)
                .is_some_and(|slot| slot.replace(now).is_none()),
            Err(_) => false,
        };
        if first && self.count.fetch_add(1, Ordering::AcqRel) + 1 == self.len() {
            self.all.notify_one();
        }
    }

    fn len(&self) -> usize {
        self.at.lock().map_or(0, |at| at.len())
    }
}

/// One side's run on `stream`: consumer started and idle, messages published at the rate,
/// every one awaited.
async fn side(
    server: &RedisServer,
    url: &str,
    stream: &str,
    options: &PickupOptions,
    worker: bool,
) -> Result<SideRound, BenchError> {
    let n = options.messages;
    let seen = Seen::new(n);
    let consumer = if worker {
        let backend = RedisBackend::connect(RedisConfig::new(url, stream, GROUP).consumer("lh"))
            .await
            .map_err(|e| BenchError::Redis(format!("connect: {e}")))?;
        let seen = Arc::clone(&seen);
        let worker = leasehold_tokio::worker()
            .config(Config::default().concurrency(options.concurrency))
            .stream_with_codec(stream, backend, Raw, move |d: Delivery<Vec<u8>>| {
                seen.record(d.message());
                std::future::ready(())
            })
            .start()?;
        Consumer::Worker(Box::new(worker))
    } else {
        let mut con = connection(url).await?;
        let _: redis::Value = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(stream)
            .arg(GROUP)
            .arg("$")
            .arg("MKSTREAM")
            .query_async(&mut con)
            .await
            .map_err(|e| redis_error("XGROUP CREATE", e))?;
        Consumer::Raw(tokio::spawn(raw_consumer(
            con,
            stream.to_owned(),
            Arc::clone(&seen),
        )))
    };
    tokio::time::sleep(IDLE_FIRST).await;
    let mut publisher = connection(url).await?;
    let before = commandstats(server)?;
    let interval = Duration::from_secs(1) / options.rate;
    let start = tokio::time::Instant::now();
    let mut sent = Vec::with_capacity(n);
    for i in 0..n {
        tokio::time::sleep_until(start + interval * i as u32).await;
        let payload = format!("{i:08}");
        sent.push(Instant::now());
        let _: String = redis::cmd("XADD")
            .arg(stream)
            .arg("*")
            .arg(FIELD)
            .arg(payload)
            .query_async(&mut publisher)
            .await
            .map_err(|e| redis_error("XADD", e))?;
    }
    let notified = seen.all.notified();
    if seen.count.load(Ordering::Acquire) < n {
        tokio::time::timeout(ROUND_TIMEOUT, notified)
            .await
            .map_err(|_| {
                BenchError::Invalid(format!(
                    "{stream}: {} of {n} handled",
                    seen.count.load(Ordering::Acquire)
                ))
            })?;
    }
    let after = commandstats(server)?;
    match consumer {
        Consumer::Worker(worker) => {
            let report = worker.shutdown(Duration::from_secs(5)).await;
            if report.acked != n as u64 {
                return Err(BenchError::Invalid(format!(
                    "{stream}: {} acked of {n}",
                    report.acked
                )));
            }
        }
        Consumer::Raw(task) => task.abort(),
    }
    let at = seen
        .at
        .lock()
        .map_err(|_| BenchError::Invalid("a handler panicked".into()))?;
    let mut latencies: Vec<f64> = at
        .iter()
        .zip(&sent)
        .map(|(at, sent)| {
            at.map(|at| at.saturating_duration_since(*sent).as_secs_f64() * 1e6)
                .ok_or_else(|| BenchError::Invalid(format!("{stream}: a message never handled")))
        })
        .collect::<Result<_, _>>()?;
    latencies.sort_by(f64::total_cmp);
    let mut by_command: Vec<(String, f64)> = after
        .iter()
        .filter(|(name, _)| name != "xadd" && name != "info")
        .filter_map(|(name, calls)| {
            let was = before
                .iter()
                .find(|(n, _)| n == name)
                .map_or(0, |&(_, c)| c);
            let delta = calls.saturating_sub(was);
            (delta > 0).then(|| (name.clone(), delta as f64 / n as f64))
        })
        .collect();
    by_command.sort_by(|a, b| b.1.total_cmp(&a.1));
    Ok(SideRound {
        p50_us: quantile(&latencies, 0.50),
        p99_us: quantile(&latencies, 0.99),
        max_us: latencies.last().copied().unwrap_or(0.0),
        commands_per_msg: by_command.iter().map(|(_, v)| v).sum(),
        by_command,
    })
}

enum Consumer {
    Worker(Box<leasehold_tokio::Worker<Bytes>>),
    Raw(tokio::task::JoinHandle<Result<(), BenchError>>),
}

/// The raw blocking consumer: `XACK` of what it read last, pipelined with the next
/// `XREADGROUP … BLOCK`; each entry handed to `seen` as it arrives.
async fn raw_consumer(
    mut con: redis::aio::MultiplexedConnection,
    stream: String,
    seen: Arc<Seen>,
) -> Result<(), BenchError> {
    let mut last: Vec<String> = Vec::new();
    loop {
        let mut pipe = redis::pipe();
        if !last.is_empty() {
            pipe.cmd("XACK").arg(&stream).arg(GROUP).arg(&last).ignore();
        }
        pipe.cmd("XREADGROUP")
            .arg("GROUP")
            .arg(GROUP)
            .arg("raw")
            .arg("COUNT")
            .arg(100)
            .arg("BLOCK")
            .arg(1000)
            .arg("STREAMS")
            .arg(&stream)
            .arg(">");
        let (reply,): (redis::streams::StreamReadReply,) = match pipe.query_async(&mut con).await {
            Ok(reply) => reply,
            // A timed-out BLOCK answers nil.
            Err(e) if e.kind() == redis::ErrorKind::UnexpectedReturnType => {
                last.clear();
                continue;
            }
            Err(e) => return Err(redis_error("XREADGROUP", e)),
        };
        last.clear();
        for key in reply.keys {
            for entry in key.ids {
                if let Some(redis::Value::BulkString(payload)) = entry.map.get(FIELD) {
                    seen.record(payload);
                }
                last.push(entry.id);
            }
        }
    }
}

/// `cmdstat_<name>:calls=<n>,…` → (name, calls).
fn commandstats(server: &RedisServer) -> Result<Vec<(String, u64)>, BenchError> {
    let reply = server
        .command(["INFO", "commandstats"])
        .map_err(|e| BenchError::Redis(format!("INFO commandstats: {e}")))?;
    Ok(reply
        .as_str()
        .unwrap_or_default()
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

/// Nearest-rank quantile of sorted values.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::quantile;

    #[test]
    fn quantiles_are_nearest_rank() {
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&values, 0.5), 50.0);
        assert_eq!(quantile(&values, 0.99), 99.0);
        assert_eq!(quantile(&[7.0], 0.99), 7.0);
        assert_eq!(quantile(&[], 0.5), 0.0);
    }
}
