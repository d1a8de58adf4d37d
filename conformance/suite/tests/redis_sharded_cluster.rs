//! Sharded queues on a 3-master Redis Cluster started by the harness: the conformance
//! properties on shard streams (each test's shard on the master next in turn) reached through
//! `RedisBackend::connect_shards` (one command connection for all shards, blocking connections
//! opened at the first wait), and two workers sharing a queue of 8 shards spread over the
//! masters, fed by a `ShardedProducer`: each message done once, keys routed to their shard;
//! and a shard's slot migrated to another master under two workers and a producer.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use leasehold_conformance::{backend_suite, BackendFactory, DeadLetterInfo};
use leasehold_core::{MembershipConfig, Shards};
use leasehold_redis::{
    members_key, PublisherConfig, RedisBackend, RedisConfig, RedisPublisher, Servers,
};
use leasehold_redis_harness::{RedisCluster, RedisServer};
use leasehold_tokio::{Config, Delivery, Outcome, PublishOptions, ShardedProducer, Worker};

mod support;
use support::dead_letter;

const GROUP: &str = "workers";
const PATIENCE: Duration = Duration::from_secs(30);

fn start_cluster() -> RedisCluster {
    RedisCluster::start(3).unwrap_or_else(|e| panic!("these tests need a Redis Cluster: {e}"))
}

fn owner<'a>(cluster: &'a RedisCluster, key: &str) -> &'a RedisServer {
    cluster
        .owner(cluster.key_slot(key).expect("CLUSTER KEYSLOT"))
        .expect("the slot is served")
}

fn entry_nodes(cluster: &RedisCluster) -> Vec<String> {
    vec![cluster.masters()[0].url()]
}

/// Which master the next test's shard is on, across every test of this binary.
static NEXT_MASTER: AtomicUsize = AtomicUsize::new(0);

struct ShardFactory {
    cluster: RedisCluster,
    queues: AtomicUsize,
    last: Mutex<Option<(String, String)>>,
}

impl ShardFactory {
    fn new() -> Self {
        Self {
            cluster: start_cluster(),
            queues: AtomicUsize::new(0),
            last: Mutex::default(),
        }
    }
}

impl BackendFactory for ShardFactory {
    type Backend = RedisBackend;

    fn claim_timeout(&self) -> Duration {
        Duration::from_secs(2)
    }

    /// A fresh queue of 4 shards; the handles are of its shard on the next master (or its
    /// first shard, if none is there), each replica connecting every shard.
    async fn open(&self, claim_timeout: Duration, replicas: usize) -> Vec<RedisBackend> {
        let master = NEXT_MASTER.fetch_add(1, Ordering::Relaxed) % 3;
        let port = self.cluster.masters()[master].port();
        let n = self.queues.fetch_add(1, Ordering::Relaxed);
        let shards = Shards::new(format!("queue{n}"), 4).unwrap();
        let shard = (0..4)
            .find(|&i| owner(&self.cluster, &shards.stream(i)).port() == port)
            .unwrap_or(0);
        let mut handles = Vec::with_capacity(replicas);
        for i in 0..replicas {
            let config = RedisConfig::new(
                Servers::cluster(entry_nodes(&self.cluster)),
                "unused",
                GROUP,
            )
            .consumer(format!("replica-{i}"))
            .claim_timeout(claim_timeout);
            let mut all = RedisBackend::connect_shards(config, &shards)
                .await
                .expect("connect");
            handles.push(all.swap_remove(usize::from(shard)));
        }
        if let Some(first) = handles.first() {
            let stream = first.stream_key().to_owned();
            let dead = first.dead_letter_key().to_owned();
            *self.last.lock().expect("not poisoned") = Some((stream, dead));
        }
        handles
    }

    async fn advance(&self, d: Duration) {
        tokio::time::sleep(d).await;
    }

    async fn dead_letters(&self) -> Option<Vec<DeadLetterInfo>> {
        let (stream, dead) = self.last.lock().expect("not poisoned").clone()?;
        let reply = owner(&self.cluster, &stream)
            .command(["XRANGE", dead.as_str(), "-", "+"])
            .expect("XRANGE of the dead-letter stream");
        let entries = reply
            .as_array()
            .unwrap_or_else(|| panic!("XRANGE answered {reply:?}"));
        Some(entries.iter().map(dead_letter).collect())
    }
}

mod properties {
    use super::*;
    backend_suite!(ShardFactory::new());
}

// ----- workers sharing a sharded queue on the cluster -----------------------------------------

async fn until(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let start = Instant::now();
    while !check().await {
        assert!(start.elapsed() < PATIENCE, "never happened: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn worker(
    cluster: &RedisCluster,
    shards: &Shards,
    name: &str,
    runs: &Arc<Mutex<HashMap<u64, u32>>>,
) -> Worker<Bytes> {
    let config = RedisConfig::new(Servers::cluster(entry_nodes(cluster)), "unused", GROUP)
        .consumer(name)
        .claim_timeout(Duration::from_secs(2));
    let backends = RedisBackend::connect_shards(config, shards)
        .await
        .expect("connect");
    let runs = runs.clone();
    leasehold_tokio::worker()
        .config(
            Config::default()
                .concurrency(8)
                .claim_timeout(Duration::from_secs(2))
                .poll_interval(Duration::from_millis(100)),
        )
        .call_timeout(Duration::from_secs(2))
        .membership(MembershipConfig::default())
        .sharded(shards.clone(), backends, move |d: Delivery<u64>| {
            let runs = runs.clone();
            async move {
                *runs.lock().unwrap().entry(*d.message()).or_default() += 1;
                Outcome::Done
            }
        })
        .start()
        .expect("start")
}

async fn fetching(worker: &Worker<Bytes>) -> BTreeSet<u16> {
    let snapshot = worker.snapshot().await.expect("running");
    snapshot
        .streams
        .iter()
        .filter(|s| s.fetching)
        .filter_map(|s| Shards::parse(&s.stream).map(|(_, i)| i))
        .collect()
}

/// Two workers over 8 shards spread over the 3 masters: with two owners per shard both fetch
/// every shard; keyed, spread, delayed and deduplicated messages are each done once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_share_a_queue_spread_over_the_masters() {
    let cluster = start_cluster();
    let shards = Shards::new("orders", 8).unwrap();
    let masters: BTreeSet<u16> = shards
        .streams()
        .map(|s| owner(&cluster, &s).port())
        .collect();
    assert!(masters.len() >= 2, "8 shards on one master: {masters:?}");
    let runs = Arc::new(Mutex::new(HashMap::new()));
    let a = worker(&cluster, &shards, "a", &runs).await;
    let b = worker(&cluster, &shards, "b", &runs).await;
    until("both fetch every shard", async || {
        fetching(&a).await.len() == 8 && fetching(&b).await.len() == 8
    })
    .await;
    let key = members_key("orders");
    let live = owner(&cluster, &key)
        .command(["ZCARD", key.as_str()])
        .expect("ZCARD");
    assert_eq!(live.as_int(), Some(2));

    let publishers = RedisPublisher::connect_shards(
        PublisherConfig::new(Servers::cluster(entry_nodes(&cluster)), "unused"),
        &shards,
    )
    .await
    .expect("connect");
    let producer: ShardedProducer<u64, _> =
        ShardedProducer::new(shards.clone(), publishers).unwrap();
    let spread: Vec<u64> = (0..300).collect();
    producer.publish_batch(&spread).await.unwrap();
    for i in 300..380u64 {
        let key = format!("customer-{}", i % 5);
        let placed = producer.publish_keyed(&key, &i).await.unwrap();
        assert_eq!(placed.shard, shards.for_key(key.as_bytes()));
    }
    let later = PublishOptions::new().delay(Duration::from_millis(300));
    producer.publish_with(&380, later).await.unwrap();
    let once = PublishOptions::new().dedupe("order-381", Duration::from_secs(60));
    let first = producer.publish_with(&381, once.clone()).await.unwrap();
    let again = producer.publish_with(&381, once).await.unwrap();
    assert!(again.duplicate && again.id == first.id && again.shard == first.shard);

    until("every message done", async || {
        runs.lock().unwrap().len() == 382
    })
    .await;
    for w in [a, b] {
        assert_eq!(w.shutdown(Duration::from_secs(5)).await.lost, 0);
    }
    let runs = runs.lock().unwrap();
    assert!(runs.values().all(|&n| n == 1), "each once: {runs:?}");
}

/// A shard's slot — its stream, group, pending entries and dead-letter key — moves to another
/// master while two workers consume the queue and a producer spreads messages over it: the
/// workers and the producer follow, every message runs once, none is lost, no lease lapses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_shard_follows_its_slot_to_another_master() {
    const N: u64 = 600;
    let cluster = start_cluster();
    let shards = Shards::new("moving", 4).unwrap();
    let slot = cluster
        .key_slot(&shards.stream(0))
        .expect("CLUSTER KEYSLOT");
    let source = owner(&cluster, &shards.stream(0)).port();
    let target = cluster
        .masters()
        .iter()
        .find(|m| m.port() != source)
        .expect("another master");
    let runs = Arc::new(Mutex::new(HashMap::new()));
    let a = worker(&cluster, &shards, "a", &runs).await;
    let b = worker(&cluster, &shards, "b", &runs).await;
    let publishers = RedisPublisher::connect_shards(
        PublisherConfig::new(Servers::cluster(entry_nodes(&cluster)), "unused"),
        &shards,
    )
    .await
    .expect("connect");
    let producer: ShardedProducer<u64, _> =
        ShardedProducer::new(shards.clone(), publishers).unwrap();
    let first: Vec<u64> = (0..100).collect();
    producer.publish_batch(&first).await.unwrap();
    until("the workers started", async || {
        runs.lock().unwrap().len() >= 50
    })
    .await;
    // Publishing goes on during the move.
    let feeding = tokio::spawn(async move {
        for start in (100..N).step_by(20) {
            let batch: Vec<u64> = (start..start + 20).collect();
            producer.publish_batch(&batch).await.unwrap();
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    // On this thread, while the runtime's other thread runs the workers and the producer.
    tokio::task::block_in_place(|| cluster.migrate(slot, target).expect("migrate the slot"));
    feeding.await.expect("the producer ran");
    assert_eq!(owner(&cluster, &shards.stream(0)).port(), target.port());

    until("every message done", async || {
        runs.lock().unwrap().len() as u64 == N
    })
    .await;
    for w in [a, b] {
        let report = w.shutdown(Duration::from_secs(5)).await;
        assert!(report.lost == 0 && report.halted.is_empty(), "{report:?}");
    }
    let runs = runs.lock().unwrap();
    let twice: Vec<_> = runs.iter().filter(|(_, &n)| n > 1).collect();
    assert!(twice.is_empty(), "ran twice in the move: {twice:?}");
}
