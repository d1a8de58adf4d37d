//! A sharded queue on a real, throwaway `redis-server`: two workers share 8 shards through the
//! membership sorted set, each message is done once, keyed and deduplicated publishing route
//! by key, a worker holds a blocking connection only for the shards it fetches from, a worker
//! that shuts down leaves the membership, and one killed mid-work hands its shards and its
//! lapsed leases over.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use leasehold_core::{MembershipConfig, Shards};
use leasehold_redis::{members_key, PublisherConfig, RedisBackend, RedisConfig, RedisPublisher};
use leasehold_redis_harness::RedisServer;
use leasehold_tokio::{Config, Delivery, Outcome, PublishOptions, ShardedProducer, Worker};

const PATIENCE: Duration = Duration::from_secs(20);

async fn until(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let start = Instant::now();
    while !check().await {
        assert!(start.elapsed() < PATIENCE, "never happened: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn config() -> Config {
    Config::default()
        // Room for a fetch on every shard at once, so each idle shard's fetch waits (blocks).
        .concurrency(16)
        .claim_timeout(Duration::from_secs(2))
        .poll_interval(Duration::from_millis(200))
}

/// Worker `name` over every shard of `shards`; records (message, run count) by message.
async fn worker(
    server: &RedisServer,
    shards: &Shards,
    name: &str,
    runs: &Arc<Mutex<HashMap<u64, u32>>>,
) -> Worker<Bytes> {
    let config = RedisConfig::new(server.url(), "unused", "workers")
        .consumer(name)
        .claim_timeout(Duration::from_secs(2));
    let backends = RedisBackend::connect_shards(config, shards)
        .await
        .expect("connect");
    let runs = runs.clone();
    leasehold_tokio::worker()
        .config(self::config())
        .membership(MembershipConfig::default().owners(1))
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

fn clients(server: &RedisServer) -> i64 {
    let reply = server.command(["INFO", "clients"]).expect("INFO");
    let info = reply.as_str().expect("a bulk string").to_owned();
    info.lines()
        .find_map(|l| l.strip_prefix("connected_clients:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("connected_clients")
}

fn members(server: &RedisServer, queue: &str) -> Vec<String> {
    let reply = server
        .command(["ZRANGE", members_key(queue).as_str(), "0", "-1"])
        .expect("ZRANGE");
    let mut names: Vec<String> = reply
        .as_array()
        .expect("an array")
        .iter()
        .map(|m| m.as_str().expect("a name").to_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_share_a_sharded_queue() {
    let server = RedisServer::start().expect("these tests need redis-server");
    let shards = Shards::new("orders", 8).unwrap();
    let baseline = clients(&server);
    let runs = Arc::new(Mutex::new(HashMap::new()));
    let a = worker(&server, &shards, "a", &runs).await;
    // Alone, a fetches from every shard: a blocking connection for each, once it waits.
    until("a waits on every shard", async || {
        fetching(&a).await.len() == 8 && clients(&server) - baseline >= 9 // 1 command + 8 blocking
    })
    .await;
    let b = worker(&server, &shards, "b", &runs).await;
    // Each shard gets exactly one fetcher (one owner per shard).
    until("the shards split between a and b", async || {
        let (fa, fb) = (fetching(&a).await, fetching(&b).await);
        fa.len() + fb.len() == 8 && fa.is_disjoint(&fb) && !fa.is_empty() && !fb.is_empty()
    })
    .await;
    assert_eq!(members(&server, "orders"), ["a", "b"]);
    // One command connection each, and a blocking connection per shard fetched from: 2 + 8.
    // (a closed those of the shards that went to b; two per shard and worker would be 32.)
    until("blocking connections only for fetched shards", async || {
        clients(&server) - baseline <= 2 + 8
    })
    .await;

    let publishers =
        RedisPublisher::connect_shards(PublisherConfig::new(server.url(), "unused"), &shards)
            .await
            .expect("connect");
    let producer: ShardedProducer<u64, _> =
        ShardedProducer::new(shards.clone(), publishers).unwrap();
    let spread: Vec<u64> = (0..200).collect();
    let placed = producer.publish_batch(&spread).await.unwrap();
    let per_shard = placed.iter().fold([0; 8], |mut n, p| {
        n[usize::from(p.shard)] += 1;
        n
    });
    assert_eq!(per_shard, [25; 8], "round-robin");
    for i in 200..240u64 {
        let placed = producer
            .publish_keyed(format!("customer-{}", i % 4), &i)
            .await
            .unwrap();
        assert_eq!(
            placed.shard,
            shards.for_key(format!("customer-{}", i % 4).as_bytes())
        );
    }
    let once = PublishOptions::new().dedupe("order-240", Duration::from_secs(60));
    let first = producer.publish_with(&240, once.clone()).await.unwrap();
    let again = producer.publish_with(&240, once).await.unwrap();
    assert!(again.duplicate && again.id == first.id && again.shard == first.shard);
    assert_eq!(first.shard, shards.for_key(b"order-240"));

    until("every message done", async || {
        runs.lock().unwrap().len() == 241
    })
    .await;
    let report = b.shutdown(Duration::from_secs(5)).await;
    assert_eq!(report.lost, 0);
    // Its leave is sent at shutdown, not waited for.
    until("b left the membership", async || {
        members(&server, "orders") == ["a"]
    })
    .await;
    until("a fetches every shard", async || {
        fetching(&a).await.len() == 8
    })
    .await;
    let more: Vec<u64> = (241..300).collect();
    producer.publish_batch(&more).await.unwrap();
    until("the rest done", async || runs.lock().unwrap().len() == 300).await;
    a.shutdown(Duration::from_secs(5)).await;
    let runs = runs.lock().unwrap();
    assert!(runs.values().all(|&n| n == 1), "each once: {runs:?}");
}

/// A worker on a runtime of its own, killed mid-work (no shutdown, no leave): its member
/// entry lapses after the ttl and its shards (one owner each) move to the others, which
/// reclaim its lapsed leases; every message is done, none lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_workers_shards_move_and_its_leases_are_reclaimed() {
    let server = RedisServer::start().expect("these tests need redis-server");
    let shards = Shards::new("jobs", 8).unwrap();
    // (worker, message, delivery count) of each finished run.
    let runs: Arc<Mutex<Vec<(usize, u64, u32)>>> = Arc::default();
    let start = |n: usize, rt: leasehold_tokio::TokioRuntime| {
        let (url, shards, runs) = (server.url(), shards.clone(), runs.clone());
        async move {
            let config = RedisConfig::new(url, "unused", "workers")
                .consumer(format!("w{n}"))
                .claim_timeout(Duration::from_secs(2));
            let backends = RedisBackend::connect_shards(config, &shards)
                .await
                .expect("connect");
            leasehold_tokio::WorkerBuilder::new(rt)
                .config(self::config())
                .membership(MembershipConfig::default().owners(1))
                .sharded(shards.clone(), backends, move |d: Delivery<u64>| {
                    let runs = runs.clone();
                    async move {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        let run = (n, *d.message(), d.delivery_count());
                        runs.lock().unwrap().push(run);
                        Outcome::Done
                    }
                })
                .start()
                .expect("start")
        }
    };
    let isolated = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let handle = leasehold_tokio::TokioRuntime::from_handle(isolated.handle().clone());
    let victim = isolated
        .spawn(start(2, handle))
        .await
        .expect("the victim started");
    let current = leasehold_tokio::TokioRuntime::current;
    let a = start(0, current()).await;
    let b = start(1, current()).await;
    until("the shards split three ways", async || {
        let (fa, fb) = (fetching(&a).await, fetching(&b).await);
        fa.len() + fb.len() < 8 && !fa.is_empty() && !fb.is_empty()
    })
    .await;
    let publishers =
        RedisPublisher::connect_shards(PublisherConfig::new(server.url(), "unused"), &shards)
            .await
            .expect("connect");
    let producer: ShardedProducer<u64, _> =
        ShardedProducer::new(shards.clone(), publishers).unwrap();
    producer
        .publish_batch(&(0..200).collect::<Vec<u64>>())
        .await
        .unwrap();
    until("the victim holds leases", async || {
        victim.snapshot().await.is_some_and(|s| s.held() > 0)
    })
    .await;
    isolated.shutdown_background();
    until("every message done", async || {
        let runs = runs.lock().unwrap();
        runs.iter().map(|r| r.1).collect::<BTreeSet<_>>().len() == 200
    })
    .await;
    until("a and b fetch every shard", async || {
        fetching(&a).await.len() + fetching(&b).await.len() == 8
    })
    .await;
    assert_eq!(members(&server, "jobs"), ["w0", "w1"]);
    let reclaimed = runs
        .lock()
        .unwrap()
        .iter()
        .filter(|(w, _, count)| *w != 2 && *count > 1)
        .count();
    assert!(
        reclaimed > 0,
        "a and b reclaimed the victim's lapsed leases"
    );
    for w in [a, b] {
        assert_eq!(w.shutdown(Duration::from_secs(5)).await.lost, 0);
    }
    for stream in shards.streams() {
        let pending = server
            .command(["XPENDING", stream.as_str(), "workers"])
            .expect("XPENDING");
        let count = pending.as_array().and_then(|p| p[0].as_int());
        assert_eq!(count, Some(0), "{stream}: nothing left pending");
    }
    drop(victim);
}
