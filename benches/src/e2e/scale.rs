//! Scaling out: one logical queue over the masters of a Redis Cluster.
//!
//! For each cluster size (default 1, 3 and 6 masters, each a Redis Cluster the test harness
//! starts on loopback ports; the 1-master case is a 1-master cluster, so that every size runs
//! the same cluster client), the queue has `shards-per-master × masters` shard streams
//! (`{queue:i}`, each its own hash tag). A round publishes `messages` raw messages spread round
//! robin over the shards (pipelined, before the clock starts), then one leasehold worker with a
//! no-op handler serves every shard (`.stream(..)` per shard, the backends from
//! `RedisBackend::connect_shards` on a `Servers::cluster` config, sharing one command connection;
//! with `--connection-per-shard`, `RedisBackend::connect` per shard)
//! until every message is acked. Each round uses a fresh queue name, chosen so that its shards'
//! slots land evenly on the masters (CRC16 of `{queue:i}` is random: a random name would put,
//! say, 2 and 6 shards on two masters); the shards per master are printed.
//!
//! Measured per round: messages per second (the worker's start to the last ack); on every
//! master, Redis CPU (`INFO cpu` user + sys) and command time (`INFO commandstats` usec) per
//! message **that master served**, whose spread over the masters is shown; the process's CPU
//! (every thread, `/proc/self/task/*/schedstat`) per message; and, around the publishing before
//! the clock starts, each master's Redis CPU per message published to it. Medians of the
//! measured rounds
//! (sizes interleaved within each round, after one warm-up round) with their ranges.
//!
//! What it projects: a master takes in and serves at most `1 s / (Redis CPU per message
//! published + per message consumed)` messages per second (Redis runs commands on one
//! thread), so `1 M msg/s` needs `1 M / that` masters, at full load; the client side is sized
//! separately from its CPU per message.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{value_parser, Parser};
use indicatif::ProgressBar;
use leasehold_core::{Config, Outgoing, Publisher, Shards};
use leasehold_redis::{PublisherConfig, RedisBackend, RedisConfig, RedisPublisher, Servers};
use leasehold_redis_harness::{RedisCluster, RedisServer};
use leasehold_tokio::{Delivery, Raw, TokioRuntime, WorkerBuilder};
use serde_json::{json, Value as Json};
use tokio::sync::Notify;

use super::stats::{cpu_time, grouped, median};
use super::{Bench, BenchError};

const GROUP: &str = "bench";
const CLAIM_TIMEOUT: Duration = Duration::from_secs(30);
/// Messages per pipelined publish.
const PUBLISH_BATCH: usize = 1000;
/// The payload: the size of a small JSON job.
const PAYLOAD: &[u8] = br#"{"job":"resize","image":"img-000000.png","width":640}"#;

/// `cargo bench -p leasehold-benches --bench scale`: one logical queue over 1, 3 and 6
/// masters of a Redis Cluster.
#[derive(Debug, Clone, Parser)]
#[command(name = "scale", about = "One sharded queue over Redis Cluster masters")]
pub struct ScaleArgs {
    /// Cluster sizes (masters), comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,3,6",
        value_parser = value_parser!(u16).range(1..=16)
    )]
    pub masters: Vec<u16>,
    /// Shards per master: the queue has this many times the masters.
    #[arg(long, default_value_t = 4, value_parser = value_parser!(u16).range(1..=64))]
    pub shards_per_master: u16,
    /// Messages per round and cluster size.
    #[arg(long, default_value_t = 60_000, value_parser = value_parser!(u32).range(1..=10_000_000))]
    pub messages: u32,
    /// The worker's concurrency.
    #[arg(long, default_value_t = 64, value_parser = value_parser!(u32).range(1..=100_000))]
    pub concurrency: u32,
    /// A backend per shard with connections of its own (`RedisBackend::connect` each), instead
    /// of the shards sharing one command connection (`RedisBackend::connect_shards`).
    #[arg(long)]
    pub connection_per_shard: bool,
    /// Measured rounds, cluster sizes interleaved within each (plus one warm-up round).
    #[arg(long, default_value_t = 3, value_parser = value_parser!(u16).range(1..=1000))]
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

impl Bench for ScaleArgs {
    type Report = ScaleReport;

    const SMOKE: &'static [&'static str] = &[
        "scale",
        "--masters",
        "1,3",
        "--shards-per-master",
        "2",
        "--messages",
        "300",
        "--rounds",
        "1",
        "--no-progress",
    ];

    fn run(&self) -> Result<ScaleReport, BenchError> {
        run(self)
    }

    fn wants_json(&self) -> bool {
        self.json
    }

    fn json(report: &ScaleReport) -> Json {
        report.to_json()
    }
}

/// One cluster size's measurements over the rounds.
#[derive(Debug, Clone)]
pub struct ScaleRow {
    /// Masters.
    pub masters: usize,
    /// Shards of the queue.
    pub shards: usize,
    /// Messages per round.
    pub messages: usize,
    /// Messages per second, per measured round.
    pub rates: Vec<f64>,
    /// Per measured round, per master (in the cluster's order): Redis CPU µs per message that
    /// master served.
    pub node_cpu_us: Vec<Vec<f64>>,
    /// The same, `INFO commandstats` usec (time inside commands).
    pub node_cmd_us: Vec<Vec<f64>>,
    /// Per measured round: Redis commands (`INFO commandstats` calls, all masters) per message:
    /// how well fetches and acks are batched.
    pub calls_per_msg: Vec<f64>,
    /// Per measured round: Redis CPU µs of all masters together per message.
    pub total_cpu_us: Vec<f64>,
    /// Per measured round, per master: Redis CPU µs per message published to it (pipelined
    /// `XADD`s, 1000 a round trip, before the clock starts).
    pub node_publish_us: Vec<Vec<f64>>,
    /// Per measured round: the process's CPU µs per message.
    pub client_cpu_us: Vec<f64>,
    /// Shards per master, in the last round (the same in every round: the names are chosen so).
    pub shards_per_node: Vec<usize>,
}

fn range(values: &[f64]) -> (f64, f64) {
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (lo, hi)
}

impl ScaleRow {
    /// Per master: the median over rounds of its Redis CPU µs per message it served.
    pub fn node_cpu_medians(&self) -> Vec<f64> {
        per_node_medians(&self.node_cpu_us)
    }

    /// Per master: the median over rounds of its command µs per message it served.
    pub fn node_cmd_medians(&self) -> Vec<f64> {
        per_node_medians(&self.node_cmd_us)
    }

    /// Per master: the median over rounds of its Redis CPU µs per message published to it.
    pub fn node_publish_medians(&self) -> Vec<f64> {
        per_node_medians(&self.node_publish_us)
    }

    /// Messages per second one master takes in and serves at 100 % of its CPU: from the
    /// costliest master's median CPU per message consumed plus per message published (the
    /// master that saturates first).
    pub fn per_master_capacity(&self) -> f64 {
        let consume = self.node_cpu_medians();
        let publish = self.node_publish_medians();
        let worst = consume
            .iter()
            .enumerate()
            .map(|(i, c)| c + publish.get(i).copied().unwrap_or(0.0))
            .fold(0.0_f64, f64::max);
        if worst > 0.0 {
            1e6 / worst
        } else {
            0.0
        }
    }

    fn to_json(&self) -> Json {
        json!({
            "masters": self.masters,
            "shards": self.shards,
            "messages": self.messages,
            "shards_per_master": self.shards_per_node,
            "msgs_per_sec": { "median": median(&self.rates), "rounds": self.rates },
            "redis_cpu_us_per_msg_per_master": {
                "median": self.node_cpu_medians(),
                "rounds": self.node_cpu_us,
            },
            "redis_cmd_us_per_msg_per_master": {
                "median": self.node_cmd_medians(),
                "rounds": self.node_cmd_us,
            },
            "redis_calls_per_msg": {
                "median": median(&self.calls_per_msg),
                "rounds": self.calls_per_msg,
            },
            "redis_cpu_us_per_msg_all_masters": {
                "median": median(&self.total_cpu_us),
                "rounds": self.total_cpu_us,
            },
            "publish_redis_cpu_us_per_msg_per_master": {
                "median": self.node_publish_medians(),
                "rounds": self.node_publish_us,
            },
            "client_cpu_us_per_msg": {
                "median": median(&self.client_cpu_us),
                "rounds": self.client_cpu_us,
            },
            "per_master_capacity_msgs_per_sec": self.per_master_capacity(),
        })
    }
}

fn per_node_medians(rounds: &[Vec<f64>]) -> Vec<f64> {
    let nodes = rounds.first().map_or(0, Vec::len);
    (0..nodes)
        .map(|n| median(&rounds.iter().map(|r| r[n]).collect::<Vec<_>>()))
        .collect()
}

/// What a run measured; its `Display` is the table.
#[derive(Debug, Clone)]
pub struct ScaleReport {
    /// The Redis version.
    pub redis: String,
    /// Tokio worker threads.
    pub threads: usize,
    /// Cores of the machine.
    pub cores: usize,
    /// Measured rounds.
    pub rounds: usize,
    /// The worker's concurrency.
    pub concurrency: usize,
    /// Whether each shard's backend had connections of its own (else one shared).
    pub connection_per_shard: bool,
    /// One row per cluster size.
    pub rows: Vec<ScaleRow>,
}

impl ScaleReport {
    /// Masters needed for `rate` messages per second, from the largest cluster's per-master
    /// capacity (at 100 % CPU on every master).
    pub fn masters_for(&self, rate: f64) -> Option<f64> {
        let capacity = self.rows.last()?.per_master_capacity();
        (capacity > 0.0).then(|| rate / capacity)
    }

    /// The report, machine-readable.
    pub fn to_json(&self) -> Json {
        json!({
            "bench": "scale",
            "redis": self.redis,
            "threads": self.threads,
            "cores": self.cores,
            "rounds": self.rounds,
            "concurrency": self.concurrency,
            "connection_per_shard": self.connection_per_shard,
            "rows": self.rows.iter().map(ScaleRow::to_json).collect::<Vec<_>>(),
            "masters_for_1m_msgs_per_sec": self.masters_for(1e6),
        })
    }
}

fn spread(values: &[f64]) -> String {
    let (lo, hi) = range(values);
    if values.len() <= 1 {
        format!("{lo:.1}")
    } else {
        format!("{lo:.1}–{hi:.1}")
    }
}

impl fmt::Display for ScaleReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "one queue over Redis Cluster masters ({}, {} tokio threads on {} cores, \
             concurrency {}, no-op handler, {}), medians of {} rounds [range]",
            self.redis,
            self.threads,
            self.cores,
            self.concurrency,
            if self.connection_per_shard {
                "connections per shard"
            } else {
                "one command connection for all shards"
            },
            self.rounds
        )?;
        writeln!(
            f,
            "| masters | shards (per master) | msg/s [range] | Redis CPU µs/msg per master \
             (spread over masters) | Redis cmd µs/msg per master | Redis commands/msg | Redis \
             CPU µs/msg all masters | client CPU µs/msg | publish: Redis CPU µs/msg per \
             master | msg/s per master at 100 % CPU (publish + consume) |"
        )?;
        writeln!(f, "|---|---|---|---|---|---|---|---|---|---|")?;
        for row in &self.rows {
            let (lo, hi) = range(&row.rates);
            let per_node: Vec<String> = row
                .shards_per_node
                .iter()
                .map(ToString::to_string)
                .collect();
            writeln!(
                f,
                "| {} | {} ({}) | {} [{}–{}] | {} | {} | {:.3} | {:.1} [{}] | {:.1} [{}] | {} | {} |",
                row.masters,
                row.shards,
                per_node.join("/"),
                grouped(median(&row.rates)),
                grouped(lo),
                grouped(hi),
                spread(&row.node_cpu_medians()),
                spread(&row.node_cmd_medians()),
                median(&row.calls_per_msg),
                median(&row.total_cpu_us),
                spread(&row.total_cpu_us),
                median(&row.client_cpu_us),
                spread(&row.client_cpu_us),
                spread(&row.node_publish_medians()),
                grouped(row.per_master_capacity()),
            )?;
        }
        if let Some(masters) = self.masters_for(1e6) {
            writeln!(
                f,
                "1 M msg/s (published and consumed) needs {masters:.1} masters at 100 % CPU on \
                 each ({:.0} at 70 %), from the costliest master of the largest cluster",
                (masters / 0.7).ceil()
            )?;
        }
        Ok(())
    }
}

/// A started cluster and its masters' ids in the order of [`RedisCluster::masters`].
struct Topology {
    cluster: RedisCluster,
    masters: usize,
}

impl Topology {
    /// The index (in `masters()`) of the master serving `key`.
    fn master_of(&self, key: &str) -> Result<usize, BenchError> {
        let owner = self
            .cluster
            .owner(self.key_slot(key)?)
            .map_err(|e| BenchError::Redis(format!("slot owner: {e}")))?;
        self.cluster
            .masters()
            .iter()
            .position(|m| m.port() == owner.port())
            .ok_or_else(|| BenchError::Redis("a slot served by no master".into()))
    }

    /// `key`'s hash slot, as the cluster computes it.
    fn key_slot(&self, key: &str) -> Result<u16, BenchError> {
        self.cluster
            .key_slot(key)
            .map_err(|e| BenchError::Redis(format!("CLUSTER KEYSLOT: {e}")))
    }

    /// A fresh queue name (prefix `base`) whose `shards` land evenly on the masters (as evenly
    /// as the count allows), with the master of each shard.
    fn balanced_queue(&self, base: &str, shards: u16) -> Result<(Shards, Vec<usize>), BenchError> {
        let most = usize::from(shards).div_ceil(self.masters);
        for n in 0..1_000_000u32 {
            let queue = Shards::new(format!("{base}-{n}"), u32::from(shards))
                .map_err(|e| BenchError::Invalid(e.to_string()))?;
            let owners = queue
                .streams()
                .map(|s| self.master_of(&s))
                .collect::<Result<Vec<_>, _>>()?;
            let mut per = vec![0; self.masters];
            for &o in &owners {
                per[o] += 1;
            }
            if per.iter().all(|&c| c <= most) {
                return Ok((queue, owners));
            }
        }
        Err(BenchError::Invalid(
            "no queue name spreads its shards evenly".into(),
        ))
    }
}

/// Redis CPU seconds (user + sys), commandstats usec and calls of one server.
fn server_counters(server: &RedisServer) -> Result<(f64, u64, u64), BenchError> {
    let cpu = super::redis::server_cpu_secs(server)
        .ok_or_else(|| BenchError::Redis("INFO cpu: no used_cpu_user/sys".into()))?;
    let reply = server
        .command(["INFO", "commandstats"])
        .map_err(|e| BenchError::Redis(format!("INFO commandstats: {e}")))?;
    let text = reply.as_str().unwrap_or_default();
    let sum = |field: &str| -> u64 {
        text.lines()
            .filter_map(|line| line.strip_prefix("cmdstat_")?.split_once(':'))
            // Not the bench's own INFO calls.
            .filter(|(name, _)| *name != "info")
            .filter_map(|(_, stats)| {
                stats
                    .split(',')
                    .find_map(|part| part.strip_prefix(field))?
                    .parse::<u64>()
                    .ok()
            })
            .sum()
    };
    Ok((cpu, sum("usec="), sum("calls=")))
}

fn redis_version(server: &RedisServer) -> String {
    server
        .command(["INFO", "server"])
        .ok()
        .and_then(|reply| {
            reply.as_str()?.lines().find_map(|line| {
                line.strip_prefix("redis_version:")
                    .map(|v| format!("redis {}", v.trim()))
            })
        })
        .unwrap_or_else(|| "redis".into())
}

/// Runs the benchmark.
pub fn run(args: &ScaleArgs) -> Result<ScaleReport, BenchError> {
    let messages = args.messages as usize;
    let runtime = super::tokio_runtime(args.threads.map(usize::from))?;
    let threads = runtime.metrics().num_workers();
    let bar = if args.no_progress {
        ProgressBar::hidden()
    } else {
        let bar = ProgressBar::new_spinner();
        bar.enable_steady_tick(Duration::from_millis(100));
        bar
    };
    let mut sizes: Vec<u16> = args.masters.clone();
    sizes.dedup();
    let mut topologies = Vec::new();
    for &masters in &sizes {
        bar.set_message(format!("starting a {masters}-master cluster"));
        let cluster = RedisCluster::start(usize::from(masters))
            .map_err(|e| BenchError::Redis(format!("cannot start a Redis Cluster: {e}")))?;
        topologies.push(Topology {
            cluster,
            masters: usize::from(masters),
        });
    }
    let redis = topologies.first().map_or_else(
        || "redis".into(),
        |t| redis_version(&t.cluster.masters()[0]),
    );
    let mut rows: Vec<ScaleRow> = topologies
        .iter()
        .map(|t| ScaleRow {
            masters: t.masters,
            shards: t.masters * usize::from(args.shards_per_master),
            messages,
            rates: Vec::new(),
            node_cpu_us: Vec::new(),
            node_cmd_us: Vec::new(),
            calls_per_msg: Vec::new(),
            total_cpu_us: Vec::new(),
            node_publish_us: Vec::new(),
            client_cpu_us: Vec::new(),
            shards_per_node: Vec::new(),
        })
        .collect();
    for round in 0..=args.rounds {
        for (topology, row) in topologies.iter().zip(rows.iter_mut()) {
            bar.set_message(format!(
                "round {round}/{}: {} masters",
                args.rounds, topology.masters
            ));
            let measured = runtime.block_on(one_round(
                topology,
                &format!("scale-r{round}"),
                row.shards as u16,
                messages,
                args.concurrency as usize,
                args.connection_per_shard,
            ))?;
            if round == 0 {
                continue; // warm-up
            }
            row.rates.push(measured.rate);
            row.node_cpu_us.push(measured.node_cpu_us);
            row.node_cmd_us.push(measured.node_cmd_us);
            row.calls_per_msg.push(measured.calls_per_msg);
            row.total_cpu_us.push(measured.total_cpu_us);
            row.node_publish_us.push(measured.node_publish_us);
            row.client_cpu_us.push(measured.client_cpu_us);
            row.shards_per_node = measured.shards_per_node;
        }
    }
    bar.finish_and_clear();
    Ok(ScaleReport {
        redis,
        threads,
        cores: std::thread::available_parallelism().map_or(1, usize::from),
        rounds: usize::from(args.rounds),
        concurrency: args.concurrency as usize,
        connection_per_shard: args.connection_per_shard,
        rows,
    })
}

struct Measured {
    rate: f64,
    node_cpu_us: Vec<f64>,
    node_cmd_us: Vec<f64>,
    calls_per_msg: f64,
    total_cpu_us: f64,
    node_publish_us: Vec<f64>,
    client_cpu_us: f64,
    shards_per_node: Vec<usize>,
}

async fn one_round(
    topology: &Topology,
    base: &str,
    shards: u16,
    messages: usize,
    concurrency: usize,
    connection_per_shard: bool,
) -> Result<Measured, BenchError> {
    let (queue, owners) = topology.balanced_queue(base, shards)?;
    let urls = topology.cluster.urls();
    // Round robin over the shards, as a producer without keys spreads.
    let mut per_shard = vec![0usize; usize::from(shards)];
    for i in 0..messages {
        per_shard[i % usize::from(shards)] += 1;
    }
    let mut per_node = vec![0usize; topology.masters];
    let mut shards_per_node = vec![0usize; topology.masters];
    for (shard, &owner) in owners.iter().enumerate() {
        per_node[owner] += per_shard[shard];
        shards_per_node[owner] += 1;
    }
    let masters = topology.cluster.masters();
    let before_publish = masters
        .iter()
        .map(server_counters)
        .collect::<Result<Vec<_>, _>>()?;
    let mut publishes = tokio::task::JoinSet::new();
    for (stream, &count) in queue.streams().zip(&per_shard) {
        let urls = urls.clone();
        publishes.spawn(async move {
            let publisher =
                RedisPublisher::connect(PublisherConfig::new(Servers::cluster(urls), stream))
                    .await
                    .map_err(|e| BenchError::Redis(format!("publisher: {e}")))?;
            let mut left = count;
            while left > 0 {
                let n = left.min(PUBLISH_BATCH);
                let batch = (0..n)
                    .map(|_| Outgoing::new(bytes::Bytes::from_static(PAYLOAD)))
                    .collect();
                publisher
                    .publish_batch(batch)
                    .await
                    .map_err(|e| BenchError::Redis(format!("publish: {e}")))?;
                left -= n;
            }
            Ok::<_, BenchError>(())
        });
    }
    while let Some(published) = publishes.join_next().await {
        published.map_err(|e| BenchError::Invalid(format!("a publishing task failed: {e}")))??;
    }
    let after_publish = masters
        .iter()
        .map(server_counters)
        .collect::<Result<Vec<_>, _>>()?;
    let node_publish_us = before_publish
        .iter()
        .zip(&after_publish)
        .zip(&per_node)
        .map(|((b, a), &served)| (a.0 - b.0).max(0.0) * 1e6 / served.max(1) as f64)
        .collect();

    let mut backends = Vec::with_capacity(usize::from(shards));
    if connection_per_shard {
        for stream in queue.streams() {
            let backend = RedisBackend::connect(
                RedisConfig::new(Servers::cluster(urls.clone()), &stream, GROUP)
                    .consumer("bench")
                    .claim_timeout(CLAIM_TIMEOUT),
            )
            .await
            .map_err(|e| BenchError::Redis(format!("connect {stream}: {e}")))?;
            backends.push((stream, backend));
        }
    } else {
        let config = RedisConfig::new(Servers::cluster(urls.clone()), queue.queue(), GROUP)
            .consumer("bench")
            .claim_timeout(CLAIM_TIMEOUT);
        let shared = RedisBackend::connect_shards(config, &queue)
            .await
            .map_err(|e| BenchError::Redis(format!("connect the shards: {e}")))?;
        backends.extend(queue.streams().zip(shared));
    }
    let done = Arc::new((AtomicUsize::new(0), Notify::new()));
    let before = masters
        .iter()
        .map(server_counters)
        .collect::<Result<Vec<_>, _>>()?;
    let client_before = cpu_time();
    let start = Instant::now();
    let mut builder = WorkerBuilder::new(TokioRuntime::current())
        .config(Config::default().concurrency(concurrency));
    for (stream, backend) in backends {
        let done = done.clone();
        builder =
            builder.stream_with_codec(stream, backend, Raw, move |delivery: Delivery<Vec<u8>>| {
                std::hint::black_box(delivery.message());
                let done = done.clone();
                async move {
                    if done.0.fetch_add(1, Ordering::AcqRel) + 1 == messages {
                        done.1.notify_one();
                    }
                }
            });
    }
    let worker = builder.start()?;
    done.1.notified().await;
    let report = worker.shutdown(Duration::from_secs(10)).await;
    let took = start.elapsed();
    let client_after = cpu_time();
    let after = masters
        .iter()
        .map(server_counters)
        .collect::<Result<Vec<_>, _>>()?;
    if report.acked != messages as u64 {
        return Err(BenchError::Invalid(format!(
            "round lost messages: {} acked of {messages}",
            report.acked
        )));
    }
    let mut node_cpu_us = Vec::with_capacity(topology.masters);
    let mut node_cmd_us = Vec::with_capacity(topology.masters);
    let mut total_cpu = 0.0;
    let mut calls = 0;
    for ((b, a), &served) in before.iter().zip(&after).zip(&per_node) {
        let cpu_us = (a.0 - b.0).max(0.0) * 1e6;
        let cmd_us = a.1.saturating_sub(b.1) as f64;
        calls += a.2.saturating_sub(b.2);
        total_cpu += cpu_us;
        let served = served.max(1) as f64;
        node_cpu_us.push(cpu_us / served);
        node_cmd_us.push(cmd_us / served);
    }
    let client_cpu_us = match (client_before, client_after) {
        (Some(b), Some(a)) => a.saturating_sub(b).as_secs_f64() * 1e6 / messages as f64,
        _ => 0.0,
    };
    Ok(Measured {
        rate: messages as f64 / took.as_secs_f64(),
        node_cpu_us,
        node_cmd_us,
        calls_per_msg: calls as f64 / messages as f64,
        total_cpu_us: total_cpu / messages as f64,
        node_publish_us,
        client_cpu_us,
        shards_per_node,
    })
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn flags_are_consistent_and_checked() {
        ScaleArgs::command().debug_assert();
        let parsed = ScaleArgs::try_parse_from(["scale"]).unwrap();
        assert_eq!(parsed.masters, [1, 3, 6]);
        assert_eq!(parsed.shards_per_master, 4);
        for bad in [
            &["scale", "--masters", "0"][..],
            &["scale", "--shards-per-master", "0"],
            &["scale", "--messages", "0"],
            &["scale", "--rounds", "x"],
        ] {
            assert!(ScaleArgs::try_parse_from(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn capacity_comes_from_the_costliest_master() {
        let row = ScaleRow {
            masters: 2,
            shards: 8,
            messages: 100,
            rates: vec![10.0, 30.0, 20.0],
            node_cpu_us: vec![vec![10.0, 20.0], vec![12.0, 25.0], vec![11.0, 22.0]],
            node_cmd_us: vec![vec![5.0, 6.0]; 3],
            calls_per_msg: vec![0.1; 3],
            total_cpu_us: vec![15.0; 3],
            node_publish_us: vec![vec![3.0, 3.0]; 3],
            client_cpu_us: vec![30.0; 3],
            shards_per_node: vec![4, 4],
        };
        assert_eq!(row.node_cpu_medians(), [11.0, 22.0]);
        assert!((row.per_master_capacity() - 1e6 / 25.0).abs() < 1e-6);
        let report = ScaleReport {
            redis: "redis 7".into(),
            threads: 2,
            cores: 2,
            rounds: 3,
            concurrency: 64,
            connection_per_shard: false,
            rows: vec![row],
        };
        let masters = report.masters_for(1e6).unwrap();
        assert!((masters - 25.0).abs() < 1e-6, "{masters}");
        let table = report.to_string();
        assert!(
            table.contains("| 2 | 8 (4/4) | 20 [10–30] | 11.0–22.0 |"),
            "{table}"
        );
        assert_eq!(
            report.to_json()["rows"][0]["shards_per_master"],
            json!([4, 4])
        );
    }
}
