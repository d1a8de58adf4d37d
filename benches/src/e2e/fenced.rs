//! What the fenced operations of the Redis backend cost the server, per id, against the plain
//! command each one guards, on a throwaway `redis-server` the benchmark starts itself
//! (`cargo bench -p leasehold-benches --bench fenced-cost`).
//!
//! The measure is Redis's own: `INFO commandstats` `usec` (time spent executing commands, not
//! reading or writing sockets), after minus before, divided by the ids of the round. A script's
//! `EVALSHA` includes the commands it runs; those are listed apart as a breakdown. Rows:
//!
//! - **drain**: a backend fetching 100 at a time and acking each batch while fetching the next,
//!   against the raw consumer: `XACK` of the previous batch pipelined with
//!   `XREADGROUP … COUNT 100`. Per message, every command either side sent. Once per retention
//!   (the default, deleting on ack, and a history of 10 000 consumed entries), in a turn that
//!   rotates each round, all against the same raw drain.
//! - **ack**: `RedisBackend::ack` of held leases in batches (default 100), against `XACK` of the
//!   same batches (pipelined).
//! - **renew**: `RedisBackend::renew` of 10 000 held leases (one call; the backend splits it
//!   into script calls of 1000), against `XCLAIM s g c 0 <1000 ids> JUSTID` over the same ids.
//! - **release**: `RedisBackend::release` (delay 0) of 1000 held leases, one call each, against
//!   `XCLAIM s g c 0 <id> IDLE <ms> JUSTID` for each, also one at a time.
//!
//! Each round sets up fresh streams off the clock, then measures every row's raw side and its
//! fenced side back to back; one warm-up round goes first. The table gives the medians over the
//! measured rounds with their range, and their ratio; `INFO cpu` (user + sys) per id is given
//! too, noisier (it counts networking, and anything the server does meanwhile).

use std::fmt;
use std::time::Duration;

use leasehold_redis::{FenceCheck, RedisBackend, RedisConfig, Retention};
use leasehold_redis_harness::RedisServer;
use leasehold_tokio::core::{Backend, Fetched, LeaseRef, RenewResult, SettleResult};
use redis::aio::MultiplexedConnection;
use redis::Value;
use serde_json::{json, Value as Json};

use super::redis::{connection, info_field, redis_error, server_cpu_secs};
use super::stats::median;
use super::BenchError;

const GROUP: &str = "g";
const FIELD: &str = "data";
const PAYLOAD: &[u8] = b"job-0001";
const CONSUMER: &str = "holder";
const CLAIM_TIMEOUT: Duration = Duration::from_secs(30);
/// The raw consumer's read size, and the drain's fetch size.
const READ_COUNT: usize = 100;
/// Consumed entries the drain with a history keeps.
const HISTORY: u64 = 10_000;
/// Ids per raw `XCLAIM` in the renew row: the backend's script batch.
const CLAIM_BATCH: usize = 1000;

/// What to measure.
#[derive(Debug, Clone)]
pub struct FencedOptions {
    /// Measured rounds (one more, unmeasured, warms up).
    pub rounds: usize,
    /// Messages drained per round (drain row).
    pub drain: usize,
    /// Leases acked per round (ack row).
    pub acks: usize,
    /// Leases per ack call (ack row).
    pub ack_batch: usize,
    /// Leases held and renewed at once (renew row).
    pub renews: usize,
    /// Leases released per round (release row).
    pub releases: usize,
    /// How the backend's fenced operations check their leases.
    pub fence_check: FenceCheck,
}

impl Default for FencedOptions {
    fn default() -> Self {
        Self {
            rounds: 7,
            drain: 20_000,
            acks: 10_000,
            ack_batch: 100,
            renews: 10_000,
            releases: 1000,
            fence_check: FenceCheck::PerLease,
        }
    }
}

/// One side of a row: per-id figures, one per measured round.
#[derive(Debug, Clone, Default)]
pub struct Side {
    /// Redis µs per id (`INFO commandstats` usec of the commands this side sent).
    pub us: Vec<f64>,
    /// Server CPU µs per id (`INFO cpu`), where readable.
    pub cpu_us: Vec<f64>,
    /// µs per id of each command run, nested ones included, per round (for the breakdown).
    pub by_command: Vec<Vec<(String, f64)>>,
}

impl Side {
    /// Median Redis µs per id.
    pub fn median(&self) -> f64 {
        median(&self.us)
    }

    fn range(&self) -> (f64, f64) {
        let min = self.us.iter().copied().fold(f64::INFINITY, f64::min);
        let max = self.us.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (min, max)
    }

    /// Median µs per id of each command (nested in scripts included), by name.
    pub fn breakdown(&self) -> Vec<(String, f64)> {
        let mut names: Vec<&str> = self
            .by_command
            .iter()
            .flatten()
            .map(|(n, _)| n.as_str())
            .collect();
        names.sort_unstable();
        names.dedup();
        names
            .into_iter()
            .map(|name| {
                let values: Vec<f64> = self
                    .by_command
                    .iter()
                    .map(|round| {
                        round
                            .iter()
                            .find(|(n, _)| n == name)
                            .map_or(0.0, |(_, us)| *us)
                    })
                    .collect();
                (name.to_owned(), median(&values))
            })
            .collect()
    }

    fn to_json(&self) -> Json {
        let (min, max) = self.range();
        json!({
            "redis_us_per_id": self.median(),
            "min": min,
            "max": max,
            "server_cpu_us_per_id": (!self.cpu_us.is_empty()).then(|| median(&self.cpu_us)),
            "by_command_us_per_id": self
                .breakdown()
                .into_iter()
                .map(|(name, us)| (name, json!(us)))
                .collect::<serde_json::Map<_, _>>(),
            "rounds": self.us,
        })
    }
}

/// One operation, fenced and raw.
#[derive(Debug, Clone)]
pub struct Row {
    /// What it is.
    pub name: String,
    /// The raw equivalent.
    pub raw_name: String,
    /// Ids per round.
    pub ids: usize,
    /// The backend's fenced operation.
    pub fenced: Side,
    /// The plain command(s).
    pub raw: Side,
}

impl Row {
    fn new(name: &str, raw_name: &str, ids: usize) -> Self {
        Self {
            name: name.into(),
            raw_name: raw_name.into(),
            ids,
            fenced: Side::default(),
            raw: Side::default(),
        }
    }

    /// Fenced / raw, of the medians.
    pub fn ratio(&self) -> f64 {
        self.fenced.median() / self.raw.median().max(1e-9)
    }
}

/// The whole measurement.
#[derive(Debug, Clone)]
pub struct FencedReport {
    /// What was measured.
    pub options: FencedOptions,
    /// `redis x.y.z`.
    pub redis_version: String,
    /// drain (once per retention), ack, renew, release.
    pub rows: Vec<Row>,
}

impl FencedReport {
    /// Everything as JSON.
    pub fn to_json(&self) -> Json {
        json!({
            "bench": "fenced-cost",
            "redis_version": self.redis_version,
            "rounds": self.options.rounds,
            "ack_batch": self.options.ack_batch,
            "fence_check": format!("{:?}", self.options.fence_check),
            "rows": self.rows.iter().map(|row| json!({
                "name": row.name,
                "raw_name": row.raw_name,
                "ids_per_round": row.ids,
                "fenced": row.fenced.to_json(),
                "raw": row.raw.to_json(),
                "ratio": row.ratio(),
            })).collect::<Vec<_>>(),
        })
    }
}

impl fmt::Display for FencedReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "fenced operations vs plain commands ({}), Redis µs per id (INFO commandstats usec), \
             median of {} interleaved rounds [min–max]\n",
            self.redis_version, self.options.rounds
        )?;
        writeln!(
            f,
            "| operation | ids/round | fenced µs/id | raw µs/id | fenced / raw | raw equivalent | server CPU µs/id fenced / raw |"
        )?;
        writeln!(f, "|---|---:|---:|---:|---:|---|---:|")?;
        for row in &self.rows {
            let side = |s: &Side| {
                let (min, max) = s.range();
                format!("{:.2} [{min:.2}–{max:.2}]", s.median())
            };
            let cpu = |s: &Side| {
                if s.cpu_us.is_empty() {
                    "–".to_owned()
                } else {
                    format!("{:.2}", median(&s.cpu_us))
                }
            };
            writeln!(
                f,
                "| {} | {} | {} | {} | **{:.2}×** | {} | {} / {} |",
                row.name,
                row.ids,
                side(&row.fenced),
                side(&row.raw),
                row.ratio(),
                row.raw_name,
                cpu(&row.fenced),
                cpu(&row.raw),
            )?;
        }
        writeln!(
            f,
            "\nwhere the fenced side's time goes (µs per id, medians; EVALSHA includes the commands its scripts run):"
        )?;
        for row in &self.rows {
            let parts: Vec<String> = row
                .fenced
                .breakdown()
                .into_iter()
                .map(|(name, us)| format!("{name} {us:.2}"))
                .collect();
            writeln!(f, "  {:<8} {}", row.name, parts.join(", "))?;
        }
        Ok(())
    }
}

/// `cmdstat_<name>` → (calls, usec), from `INFO commandstats`.
type Stats = Vec<(String, u64, u64)>;

fn commandstats(server: &RedisServer) -> Result<Stats, BenchError> {
    let reply = server
        .command(["INFO", "commandstats"])
        .map_err(|e| BenchError::Redis(format!("INFO commandstats: {e}")))?;
    let text = reply.as_str().unwrap_or_default();
    Ok(text
        .lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let mut calls = None;
            let mut usec = None;
            for part in rest.split(',') {
                if let Some(v) = part.strip_prefix("calls=") {
                    calls = v.parse().ok();
                } else if let Some(v) = part.strip_prefix("usec=") {
                    usec = v.parse().ok();
                }
            }
            Some((name.to_owned(), calls?, usec?))
        })
        .collect())
}

/// Snapshots around one measured side.
struct Probe {
    stats: Stats,
    cpu: Option<f64>,
}

impl Probe {
    fn start(server: &RedisServer) -> Result<Self, BenchError> {
        let cpu = server_cpu_secs(server);
        let stats = commandstats(server)?;
        Ok(Self { stats, cpu })
    }

    /// Records the side's per-id figures. Commands a script runs are counted by Redis twice:
    /// under their own name and inside the script's `EVALSHA`; those in [`NESTED`] are left
    /// out of the total (on the fenced sides they only ever run inside a script).
    fn stop(
        self,
        server: &RedisServer,
        ids: usize,
        nested: &[&str],
        side: &mut Side,
    ) -> Result<(), BenchError> {
        let stats = commandstats(server)?;
        let cpu = server_cpu_secs(server);
        let per = ids.max(1) as f64;
        let mut by_command = Vec::new();
        let mut total = 0u64;
        for (name, calls, usec) in &stats {
            let (calls0, usec0) = self
                .stats
                .iter()
                .find(|(n, _, _)| n == name)
                .map_or((0, 0), |(_, c, u)| (*c, *u));
            if name == "info" || *calls == calls0 {
                continue;
            }
            let usec = usec.saturating_sub(usec0);
            by_command.push((name.clone(), usec as f64 / per));
            if !nested.contains(&name.as_str()) {
                total += usec;
            }
        }
        side.us.push(total as f64 / per);
        if let (Some(before), Some(after)) = (self.cpu, cpu) {
            if after >= before {
                side.cpu_us.push((after - before) * 1e6 / per);
            }
        }
        side.by_command.push(by_command);
        Ok(())
    }
}

/// The commands the backend's ack, renew, release (and fetch) scripts run: on the fenced sides
/// only inside a script, whose `EVALSHA` time includes them. (The drain's fetch also sends a
/// one-entry `XPENDING … IDLE` of its own per read, left out with them: a few µs per 100
/// messages.)
const NESTED: &[&str] = &[
    "xack",
    "xpending",
    "xclaim",
    "xtrim",
    "xdel",
    "xinfo|groups",
    "xautoclaim",
];

/// Runs the benchmark.
pub fn run(options: &FencedOptions) -> Result<FencedReport, BenchError> {
    let sizes = [
        options.rounds,
        options.drain,
        options.acks,
        options.ack_batch,
        options.renews,
        options.releases,
    ];
    if sizes.contains(&0) {
        return Err(BenchError::Invalid("every count must be at least 1".into()));
    }
    let server = RedisServer::start().map_err(|e| BenchError::Redis(e.to_string()))?;
    let url = server.url();
    let redis_version = info_field(&server, "server", "redis_version")
        .map_or_else(|| "redis".to_owned(), |v| format!("redis {v}"));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(BenchError::Runtime)?;
    // The drain once per retention; each round measures them in a turn that rotates.
    let raw_drain_name = "[XACK prev, XREADGROUP COUNT 100] pipelined";
    let mut drains = [
        (Retention::Consumed, "drain"),
        (Retention::DeleteOnAck, "drain, delete on ack"),
        (
            Retention::keep(Some(HISTORY), None),
            "drain, keep 10 000 consumed",
        ),
    ]
    .map(|(retention, name)| (retention, Row::new(name, raw_drain_name, options.drain)));
    let mut raw_drain_side = Side::default();
    let mut ack = Row::new(
        "ack",
        &format!("XACK of {} ids", options.ack_batch),
        options.acks,
    );
    let mut renew = Row::new(
        "renew",
        &format!("XCLAIM … 0 <{CLAIM_BATCH} ids> JUSTID"),
        options.renews,
    );
    let mut release = Row::new(
        "release",
        "XCLAIM … 0 <id> IDLE <ms> JUSTID",
        options.releases,
    );
    let mut key = 0usize;
    let mut next_key = |what: &str| {
        key += 1;
        format!("fenced:{what}:{key}")
    };
    runtime.block_on(async {
        let mut con = connection(&url).await?;
        for round in 0..=options.rounds {
            let measured = round > 0;
            // drain
            let stream = next_key("drain-raw");
            publish(&mut con, &stream, options.drain).await?;
            create_group(&mut con, &stream).await?;
            let probe = Probe::start(&server)?;
            let n = raw_drain(&mut con, &stream).await?;
            stop(
                probe,
                &server,
                (n, options.drain),
                &[],
                measured,
                &mut raw_drain_side,
            )?;
            delete(&mut con, &stream).await?;
            let turn = round % drains.len();
            let (before, after) = drains.split_at_mut(turn);
            for (retention, row) in after.iter_mut().chain(before) {
                let stream = next_key("drain");
                publish(&mut con, &stream, options.drain).await?;
                let backend = connect(&url, &stream, options.fence_check, *retention).await?;
                let probe = Probe::start(&server)?;
                let n = fenced_drain(&backend).await?;
                stop(
                    probe,
                    &server,
                    (n, options.drain),
                    NESTED,
                    measured,
                    &mut row.fenced,
                )?;
                drop(backend);
                delete(&mut con, &stream).await?;
            }

            // ack
            let stream = next_key("ack-raw");
            let (backend, leases) =
                held(&url, &mut con, &stream, options.acks, options.fence_check).await?;
            let probe = Probe::start(&server)?;
            let mut pipe = redis::pipe();
            for batch in leases.chunks(options.ack_batch) {
                let cmd = pipe.cmd("XACK").arg(&stream).arg(GROUP);
                for lease in batch {
                    cmd.arg(lease.id.as_str());
                }
            }
            let acked: Vec<usize> = pipe
                .query_async(&mut con)
                .await
                .map_err(|e| redis_error("XACK", e))?;
            check(acked.iter().sum::<usize>(), leases.len(), "raw ack")?;
            stop(
                probe,
                &server,
                (leases.len(), leases.len()),
                &[],
                measured,
                &mut ack.raw,
            )?;
            drop(backend);
            delete(&mut con, &stream).await?;
            let stream = next_key("ack");
            let (backend, leases) =
                held(&url, &mut con, &stream, options.acks, options.fence_check).await?;
            let probe = Probe::start(&server)?;
            let mut ok = 0;
            for batch in leases.chunks(options.ack_batch) {
                let results = backend
                    .ack(batch)
                    .await
                    .map_err(|e| BenchError::Redis(format!("ack: {e}")))?;
                ok += results.iter().filter(|r| **r == SettleResult::Ok).count();
            }
            check(ok, leases.len(), "fenced ack")?;
            stop(
                probe,
                &server,
                (leases.len(), leases.len()),
                NESTED,
                measured,
                &mut ack.fenced,
            )?;
            drop(backend);
            delete(&mut con, &stream).await?;

            // renew and release: the same held leases, raw and fenced alternately (neither
            // changes owner or count).
            let stream = next_key("renew");
            let (backend, leases) =
                held(&url, &mut con, &stream, options.renews, options.fence_check).await?;
            let probe = Probe::start(&server)?;
            let mut pipe = redis::pipe();
            for batch in leases.chunks(CLAIM_BATCH) {
                let cmd = pipe
                    .cmd("XCLAIM")
                    .arg(&stream)
                    .arg(GROUP)
                    .arg(CONSUMER)
                    .arg(0);
                for lease in batch {
                    cmd.arg(lease.id.as_str());
                }
                cmd.arg("JUSTID");
            }
            let claimed: Vec<Vec<String>> = pipe
                .query_async(&mut con)
                .await
                .map_err(|e| redis_error("XCLAIM", e))?;
            check(
                claimed.iter().map(Vec::len).sum(),
                leases.len(),
                "raw renew",
            )?;
            stop(
                probe,
                &server,
                (leases.len(), leases.len()),
                &[],
                measured,
                &mut renew.raw,
            )?;
            let probe = Probe::start(&server)?;
            let results = backend
                .renew(&leases)
                .await
                .map_err(|e| BenchError::Redis(format!("renew: {e}")))?;
            let kept = results.iter().filter(|r| **r == RenewResult::Kept).count();
            check(kept, leases.len(), "fenced renew")?;
            stop(
                probe,
                &server,
                (leases.len(), leases.len()),
                NESTED,
                measured,
                &mut renew.fenced,
            )?;

            let some = &leases[..options.releases.min(leases.len())];
            let idle = CLAIM_TIMEOUT.as_millis().to_string();
            // One command at a time, as the backend's release is one call per lease.
            let probe = Probe::start(&server)?;
            let mut claimed = Vec::with_capacity(some.len());
            for lease in some {
                let ids: Vec<String> = redis::cmd("XCLAIM")
                    .arg(&stream)
                    .arg(GROUP)
                    .arg(CONSUMER)
                    .arg(0)
                    .arg(lease.id.as_str())
                    .arg("IDLE")
                    .arg(&idle)
                    .arg("JUSTID")
                    .query_async(&mut con)
                    .await
                    .map_err(|e| redis_error("XCLAIM", e))?;
                claimed.push(ids);
            }
            check(
                claimed.iter().map(Vec::len).sum(),
                some.len(),
                "raw release",
            )?;
            stop(
                probe,
                &server,
                (some.len(), some.len()),
                &[],
                measured,
                &mut release.raw,
            )?;
            let probe = Probe::start(&server)?;
            let mut ok = 0;
            for lease in some {
                let result = backend
                    .release(lease, Duration::ZERO)
                    .await
                    .map_err(|e| BenchError::Redis(format!("release: {e}")))?;
                ok += usize::from(result == SettleResult::Ok);
            }
            check(ok, some.len(), "fenced release")?;
            stop(
                probe,
                &server,
                (some.len(), some.len()),
                NESTED,
                measured,
                &mut release.fenced,
            )?;
            drop(backend);
            delete(&mut con, &stream).await?;
        }
        Ok::<_, BenchError>(())
    })?;
    release.ids = options.releases.min(options.renews);
    let mut rows: Vec<Row> = drains
        .into_iter()
        .map(|(_, mut row)| {
            row.raw = raw_drain_side.clone();
            row
        })
        .collect();
    rows.extend([ack, renew, release]);
    Ok(FencedReport {
        options: options.clone(),
        redis_version,
        rows,
    })
}

fn check(got: usize, want: usize, what: &str) -> Result<(), BenchError> {
    if got == want {
        Ok(())
    } else {
        Err(BenchError::Invalid(format!("{what}: {got} of {want} ids")))
    }
}

/// Stops the probe of a side that handled `done` ids of `expected`; a warm-up round's figures
/// are dropped. Raw sides pass no `nested` commands.
fn stop(
    probe: Probe,
    server: &RedisServer,
    (done, expected): (usize, usize),
    nested: &[&str],
    measured: bool,
    side: &mut Side,
) -> Result<(), BenchError> {
    check(done, expected, "ids handled")?;
    let mut scratch = Side::default();
    probe.stop(
        server,
        done,
        nested,
        if measured { side } else { &mut scratch },
    )
}

async fn backend(
    url: &str,
    stream: &str,
    fence_check: FenceCheck,
) -> Result<RedisBackend, BenchError> {
    connect(url, stream, fence_check, Retention::default()).await
}

async fn connect(
    url: &str,
    stream: &str,
    fence_check: FenceCheck,
    retention: Retention,
) -> Result<RedisBackend, BenchError> {
    RedisBackend::connect(
        RedisConfig::new(url, stream, GROUP)
            .consumer(CONSUMER)
            .claim_timeout(CLAIM_TIMEOUT)
            .fence_check(fence_check)
            .retention(retention),
    )
    .await
    .map_err(|e| BenchError::Redis(format!("connect: {e}")))
}

/// A backend holding `n` leases of a fresh stream.
async fn held(
    url: &str,
    con: &mut MultiplexedConnection,
    stream: &str,
    n: usize,
    fence_check: FenceCheck,
) -> Result<(RedisBackend, Vec<LeaseRef>), BenchError> {
    publish(con, stream, n).await?;
    let backend = backend(url, stream, fence_check).await?;
    let mut leases = Vec::with_capacity(n);
    while leases.len() < n {
        let batch = backend
            .fetch(n - leases.len(), Duration::ZERO)
            .await
            .map_err(|e| BenchError::Redis(format!("fetch: {e}")))?;
        if batch.is_empty() {
            return Err(BenchError::Invalid(format!(
                "only {} of {n} leases fetched",
                leases.len()
            )));
        }
        leases.extend(batch.iter().map(lease_ref));
    }
    Ok((backend, leases))
}

fn lease_ref<P>(fetched: &Fetched<P>) -> LeaseRef {
    LeaseRef::from(fetched)
}

/// Pipelined `XADD stream * data PAYLOAD`, 1000 per pipeline.
async fn publish(
    con: &mut MultiplexedConnection,
    stream: &str,
    messages: usize,
) -> Result<(), BenchError> {
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
        pipe.query_async::<()>(con)
            .await
            .map_err(|e| redis_error("publish", e))?;
        left -= n;
    }
    Ok(())
}

async fn create_group(con: &mut MultiplexedConnection, stream: &str) -> Result<(), BenchError> {
    redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(stream)
        .arg(GROUP)
        .arg("0")
        .query_async::<()>(con)
        .await
        .map_err(|e| redis_error("XGROUP CREATE", e))
}

async fn delete(con: &mut MultiplexedConnection, stream: &str) -> Result<(), BenchError> {
    redis::cmd("DEL")
        .arg(stream)
        .query_async::<()>(con)
        .await
        .map_err(|e| redis_error("DEL", e))
}

/// The raw consumer: `XACK` of the previous batch pipelined with the next read; messages read.
async fn raw_drain(con: &mut MultiplexedConnection, stream: &str) -> Result<usize, BenchError> {
    let mut done = 0;
    let mut prev: Vec<String> = Vec::new();
    loop {
        let mut pipe = redis::pipe();
        if !prev.is_empty() {
            let cmd = pipe.cmd("XACK").arg(stream).arg(GROUP);
            for id in &prev {
                cmd.arg(id);
            }
            cmd.ignore();
        }
        pipe.cmd("XREADGROUP")
            .arg("GROUP")
            .arg(GROUP)
            .arg(CONSUMER)
            .arg("COUNT")
            .arg(READ_COUNT)
            .arg("STREAMS")
            .arg(stream)
            .arg(">");
        let (read,): (Value,) = pipe
            .query_async(con)
            .await
            .map_err(|e| redis_error("drain", e))?;
        let ids = read_ids(read);
        if ids.is_empty() && prev.is_empty() {
            return Ok(done);
        }
        done += ids.len();
        prev = ids;
    }
}

/// The ids of an `XREADGROUP` reply for one stream (RESP2).
fn read_ids(reply: Value) -> Vec<String> {
    let Value::Array(streams) = reply else {
        return Vec::new();
    };
    let Some(Value::Array(pair)) = streams.into_iter().next() else {
        return Vec::new();
    };
    let Some(Value::Array(entries)) = pair.into_iter().nth(1) else {
        return Vec::new();
    };
    entries
        .into_iter()
        .filter_map(|entry| match entry {
            Value::Array(parts) => match parts.into_iter().next() {
                Some(Value::BulkString(id)) => String::from_utf8(id).ok(),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// The backend's drain: ack the previous batch while fetching the next; messages acked.
async fn fenced_drain(backend: &RedisBackend) -> Result<usize, BenchError> {
    let mut done = 0;
    let mut prev: Vec<LeaseRef> = Vec::new();
    loop {
        let (acked, fetched) = tokio::join!(
            async {
                if prev.is_empty() {
                    Ok(Vec::new())
                } else {
                    backend.ack(&prev).await
                }
            },
            backend.fetch(READ_COUNT, Duration::ZERO)
        );
        let acked = acked.map_err(|e| BenchError::Redis(format!("ack: {e}")))?;
        let fetched = fetched.map_err(|e| BenchError::Redis(format!("fetch: {e}")))?;
        done += acked.iter().filter(|r| **r == SettleResult::Ok).count();
        if fetched.is_empty() && prev.is_empty() {
            return Ok(done);
        }
        prev = fetched.iter().map(lease_ref).collect();
    }
}
