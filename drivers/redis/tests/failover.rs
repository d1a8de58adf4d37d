//! Workers through a failover, on real topologies the harness starts and stops:
//!
//! - behind Redis Sentinel (a master, a replica, three sentinels): `SENTINEL FAILOVER` while
//!   a worker consumes (without `wait_replicas`, and with it on a master with two replicas);
//!   the worker follows the new master, every message is handled and acknowledged there,
//!   none stays pending. The messages are published, on every replica, before:
//!   after `SENTINEL FAILOVER` the old master takes writes (lost later) until a sentinel
//!   demotes it, and a publish in that window is no part of what is tested here;
//! - on a Redis Cluster of 3 masters with a replica each: `CLUSTER FAILOVER` of the stream's
//!   master while two workers consume with `wait_replicas(1, …)`; nothing is lost and no
//!   message ever runs on two workers at once.
//!
//! Each prints what it measured (invocations, re-invocations, the longest pause in
//! completions). A test fails, never skips, without `redis-server` (`apt-get install
//! redis-server`).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use leasehold_core::{Outgoing, Publisher};
use leasehold_redis::{
    PublisherConfig, RedisBackend, RedisConfig, RedisInspector, RedisPublisher, Servers,
};
use leasehold_redis_harness::{Join, RedisCluster, RedisSentinel, Reply};
use leasehold_tokio::TokioRuntime;
use leasehold_worker::{Config, Delivery, Worker, WorkerBuilder};

const CLAIM: Duration = Duration::from_secs(1);
/// How long a test waits for something that must happen: reaching it means it did not.
const PATIENCE: Duration = Duration::from_secs(30);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

fn need_redis<T>(started: Result<T, leasehold_redis_harness::Error>) -> T {
    started.unwrap_or_else(|e| {
        panic!("these tests need redis-server (apt-get install redis-server): {e}")
    })
}

fn worker_config() -> Config {
    Config::default()
        .concurrency(4)
        .claim_timeout(CLAIM)
        .heartbeat_interval(Duration::from_millis(300))
        .poll_interval(Duration::from_millis(100))
        .fetch_backoff_max(Duration::from_millis(200))
        .shutdown_grace(Duration::from_secs(2))
}

/// What the handlers of every worker saw: invocations per message, the messages running now,
/// the invocations that began while another invocation of the same message was still going, and
/// when each invocation ended (for the longest pause between completions).
#[derive(Default)]
struct Ledger {
    invocations: HashMap<u64, u32>,
    running: HashSet<u64>,
    overlapping: Vec<u64>,
    ended: Vec<Instant>,
}

#[derive(Clone, Default)]
struct Record(Arc<Mutex<Ledger>>);

impl Record {
    fn lock(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn begin(&self, message: u64) {
        let mut ledger = self.lock();
        *ledger.invocations.entry(message).or_default() += 1;
        if !ledger.running.insert(message) {
            ledger.overlapping.push(message);
        }
    }

    fn end(&self, message: u64) {
        let mut ledger = self.lock();
        ledger.running.remove(&message);
        ledger.ended.push(Instant::now());
    }

    fn handled(&self) -> usize {
        self.lock().invocations.len()
    }

    /// (messages run more than once, extra invocations in all, invocations that overlapped
    /// another invocation of their message, the longest pause between two completions)
    fn summary(&self) -> (usize, u32, usize, Duration) {
        let ledger = self.lock();
        let twice = ledger.invocations.values().filter(|&&n| n > 1).count();
        let extra = ledger.invocations.values().map(|n| n - 1).sum();
        let mut ended = ledger.ended.clone();
        ended.sort();
        let pause = ended
            .windows(2)
            .map(|w| w[1] - w[0])
            .max()
            .unwrap_or_default();
        (twice, extra, ledger.overlapping.len(), pause)
    }
}

/// A worker on `backend` whose handler records into `record` and takes `work`.
fn worker(
    rt: &tokio::runtime::Runtime,
    backend: RedisBackend,
    record: &Record,
    work: Duration,
) -> Worker<Bytes> {
    let record = record.clone();
    let _guard = rt.enter();
    WorkerBuilder::new(TokioRuntime::current())
        .config(worker_config())
        .call_timeout(Duration::from_secs(2))
        .stream("jobs", backend, move |d: Delivery<u64>| {
            let (record, message) = (record.clone(), *d.message());
            async move {
                record.begin(message);
                tokio::time::sleep(work).await;
                record.end(message);
            }
        })
        .start()
        .expect("a valid worker")
}

/// Publishes `payloads` in batches of ten, each batch again until it is acknowledged (a
/// failed one may have been appended too: then it is there twice, which is fine here).
/// Returns how many batches failed.
async fn publish_all(publisher: &RedisPublisher, payloads: std::ops::Range<u64>) -> u64 {
    let mut failed = 0;
    let payloads: Vec<u64> = payloads.collect();
    for chunk in payloads.chunks(10) {
        let batch = || {
            chunk
                .iter()
                .map(|n| Outgoing::new(Bytes::from(n.to_string())))
                .collect::<Vec<_>>()
        };
        let deadline = Instant::now() + PATIENCE;
        while let Err(e) = publisher.publish_batch(batch()).await {
            assert!(e.is_transient(), "a publish failed for good: {e}");
            assert!(Instant::now() < deadline, "publishing kept failing: {e}");
            failed += 1;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    failed
}

async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !done() {
        assert!(
            Instant::now() < deadline,
            "{what} did not happen within {PATIENCE:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn drained(master: &leasehold_redis_harness::RedisServer) -> bool {
    let len = master.command(["XLEN", "jobs"]).expect("XLEN");
    let pending = master
        .command(["XPENDING", "jobs", "workers"])
        .expect("XPENDING");
    let pending = pending
        .as_array()
        .and_then(|summary| summary.first())
        .and_then(Reply::as_int)
        .unwrap_or_else(|| panic!("XPENDING replied {pending:?}"));
    len == Reply::Integer(0) && pending == 0
}

#[test]
fn a_worker_behind_sentinel_follows_a_failover_without_losing_a_message() {
    sentinel_failover(How::Command, 1, None);
}

/// The master crashes (`SIGKILL`): the worker's calls fail with connection errors until the
/// sentinels have agreed it is down and promoted its replica, then go to the new master.
#[test]
fn a_worker_behind_sentinel_follows_its_crashed_master_replaced() {
    sentinel_failover(How::Crash, 1, None);
}

/// With `wait_replicas(1, …)` and two replicas (so the one not promoted, pointed at the new
/// master, meets it again soon after the failover): what it changes under `SENTINEL
/// FAILOVER`, printed. Not everything: until the sentinels point that replica at the new
/// master, it acknowledges what the worker still writes to the old one.
#[test]
fn a_worker_behind_sentinel_with_wait_replicas_follows_a_failover() {
    sentinel_failover(How::Command, 2, Some(Duration::from_millis(500)));
}

/// How the master is replaced.
#[derive(Debug, Clone, Copy)]
enum How {
    /// `SENTINEL FAILOVER`: the old master stays up.
    Command,
    /// The master is killed; the sentinels agree it is down and fail over.
    Crash,
}

/// A failover (`how`) of a topology with `replicas` replicas while a worker (with
/// `wait_replicas(1, wait)` when `wait` is set) consumes 400 messages published before.
fn sentinel_failover(how: How, replicas: usize, wait: Option<Duration>) {
    const MESSAGES: u64 = 400;
    let started = Instant::now();
    let topology = Arc::new(need_redis(
        RedisSentinel::builder().replicas(replicas).start(),
    ));
    let (sentinels, name) = (topology.sentinel_urls(), topology.master_name().to_owned());
    let rt = runtime();
    let record = Record::default();
    let mut config = RedisConfig::new(
        Servers::sentinel(sentinels.clone(), &name),
        "jobs",
        "workers",
    )
    .consumer("w1")
    .claim_timeout(CLAIM)
    .command_timeout(Duration::from_secs(2));
    if let Some(wait) = wait {
        config = config.wait_replicas(1, wait);
    }
    let publisher = rt
        .block_on(RedisPublisher::connect(
            PublisherConfig::new(Servers::sentinel(sentinels, &name), "jobs")
                .wait_replicas(1, Duration::from_millis(500)),
        ))
        .expect("a publisher through the sentinels");
    let failed = rt.block_on(publish_all(&publisher, 0..MESSAGES));
    // On every replica, whichever the sentinels promote.
    topology
        .wait_replicated(PATIENCE)
        .expect("the replicas catch up");
    let backend = rt
        .block_on(RedisBackend::connect(config))
        .expect("connect through the sentinels");
    let worker = worker(&rt, backend, &record, Duration::from_millis(50));
    let old = topology.master().expect("a master").port();
    let failover_at = rt.block_on(async {
        wait_for("a third of the messages handled", || {
            record.handled() as u64 >= MESSAGES / 3
        })
        .await;
        let topology = Arc::clone(&topology);
        let failover_at = Instant::now();
        let new = tokio::task::spawn_blocking(move || {
            match how {
                How::Command => topology.failover(PATIENCE),
                How::Crash => topology.crash_master(PATIENCE),
            }
            .map(|master| master.port())
        })
        .await
        .expect("the failover task")
        .expect("the failover");
        assert_ne!(new, old);
        wait_for("every message handled", || {
            record.handled() as u64 == MESSAGES
        })
        .await;
        failover_at
    });
    let handled_after = failover_at.elapsed();
    // Every entry acknowledged on the new master, none pending: entries whose ack the old
    // master took (and lost) are pending there, taken over after the claim timeout, run
    // again and acknowledged.
    let master = topology.master().expect("a master");
    rt.block_on(wait_for(
        "every entry acknowledged on the new master",
        || drained(master),
    ));
    rt.block_on(worker.shutdown(Duration::from_secs(2)));
    // The inspector finds the stream on the new master too.
    let streams = rt.block_on(async {
        let inspector = RedisInspector::connect(Servers::sentinel(topology.sentinel_urls(), &name))
            .await
            .expect("an inspector through the sentinels");
        inspector.streams(10).await.expect("the streams")
    });
    assert_eq!(streams, ["jobs"]);
    let (twice, extra, overlapping, pause) = record.summary();
    eprintln!(
        "sentinel failover ({how:?}), {replicas} replicas, wait_replicas {wait:?}: \
         {MESSAGES} messages, \
         all handled; {failed} publish batches \
         retried; {twice} messages ran more than once ({extra} extra invocations, \
         {overlapping} while another invocation of theirs was going); longest pause between \
         completions {pause:?}; every message done {handled_after:?} after the failover began; \
         test took {:?}",
        started.elapsed()
    );
    assert_eq!(record.handled() as u64, MESSAGES, "a message was lost");
}

#[test]
fn cluster_failover_with_wait_replicas_loses_nothing_and_runs_nothing_twice_at_once() {
    const MESSAGES: u64 = 400;
    let started = Instant::now();
    let cluster = Arc::new(need_redis(
        RedisCluster::builder()
            .masters(3)
            .replicas(1)
            .join(Join::RedisCli)
            .args(["--cluster-node-timeout", "2000"])
            .start(),
    ));
    let nodes = cluster.urls();
    let rt = runtime();
    let record = Record::default();
    let wait = Duration::from_millis(500);
    let config = |consumer: &str| {
        RedisConfig::new(Servers::cluster(nodes.clone()), "jobs", "workers")
            .consumer(consumer)
            .claim_timeout(CLAIM)
            .command_timeout(Duration::from_secs(2))
            .wait_replicas(1, wait)
    };
    let publisher = rt
        .block_on(RedisPublisher::connect(
            PublisherConfig::new(Servers::cluster(nodes.clone()), "jobs").wait_replicas(1, wait),
        ))
        .expect("a cluster publisher");
    let failed = rt.block_on(publish_all(&publisher, 0..MESSAGES));
    let workers: Vec<Worker<Bytes>> = ["w1", "w2"]
        .into_iter()
        .map(|name| {
            let backend = rt
                .block_on(RedisBackend::connect(config(name)))
                .expect("connect to the cluster");
            worker(&rt, backend, &record, Duration::from_millis(50))
        })
        .collect();
    let slot = cluster.key_slot("jobs").expect("CLUSTER KEYSLOT");
    let old = cluster.owner(slot).expect("the stream's master").port();
    let failover_at = rt.block_on(async {
        wait_for("a third of the messages handled", || {
            record.handled() as u64 >= MESSAGES / 3
        })
        .await;
        let cluster = Arc::clone(&cluster);
        let failover_at = Instant::now();
        let new = tokio::task::spawn_blocking(move || {
            cluster.failover(slot, PATIENCE).map(|master| master.port())
        })
        .await
        .expect("the failover task")
        .expect("CLUSTER FAILOVER");
        assert_ne!(new, old);
        wait_for("every message handled", || {
            record.handled() as u64 == MESSAGES
        })
        .await;
        failover_at
    });
    let handled_after = failover_at.elapsed();
    let master = cluster.owner(slot).expect("the stream's master");
    rt.block_on(wait_for(
        "every entry acknowledged on the new master",
        || drained(master),
    ));
    // Idle workers take new messages with their blocking read, which waits for the replica
    // after it, on its own connection.
    rt.block_on(async {
        for n in MESSAGES..MESSAGES + 20 {
            publish_all(&publisher, n..n + 1).await;
            wait_for("a message taken by a waiting worker", || {
                record.handled() as u64 > n
            })
            .await;
        }
    });
    rt.block_on(wait_for("every entry acknowledged", || drained(master)));
    for worker in workers {
        rt.block_on(worker.shutdown(Duration::from_secs(2)));
    }
    // Every WAIT went to the master that took the write (the old one, then the new one): a
    // keyless WAIT sent elsewhere would answer at once for a connection that wrote nothing.
    let waits = |node: &leasehold_redis_harness::RedisServer| {
        let stats = node.command(["INFO", "commandstats"]).expect("INFO");
        stats
            .as_str()
            .unwrap_or_default()
            .lines()
            .find_map(|line| line.strip_prefix("cmdstat_wait:calls="))
            .and_then(|rest| rest.split(',').next()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let new = master.port();
    for node in cluster.nodes() {
        let calls = waits(node);
        if node.port() == old || node.port() == new {
            assert!(
                calls > 0,
                "no WAIT reached the stream's master on port {}",
                node.port()
            );
        } else {
            assert_eq!(
                calls,
                0,
                "WAIT reached port {}, which serves another slot",
                node.port()
            );
        }
    }
    let (twice, extra, overlapping, pause) = record.summary();
    eprintln!(
        "cluster failover with wait_replicas(1, {wait:?}): {MESSAGES} messages, all handled; \
         {failed} publish batches retried; {twice} messages ran more than once ({extra} extra \
         invocations), {overlapping} invocations overlapped another of their message; longest \
         pause between completions {pause:?}; every message done {handled_after:?} after the \
         failover began; test took {:?}",
        started.elapsed()
    );
    assert_eq!(record.handled() as u64, MESSAGES + 20, "a message was lost");
    assert_eq!(overlapping, 0, "a message ran on two workers at once");
}

/// Writes with `wait_replicas(1, …)` on a master with one replica: they succeed, and fail
/// (transient `NOREPLICAS`, saying how many acknowledged) once the replica is gone, while the
/// write itself is on the master. Prints the median fetch + ack round trip with and without
/// it: the cost of waiting for the replica on every write.
#[test]
fn wait_replicas_waits_for_a_replica_and_fails_without_one() {
    use leasehold_core::Backend;
    const ROUNDS: usize = 1000;
    // A replica's first sync at once, not after waiting 5 s for more replicas.
    let master = need_redis(
        leasehold_redis_harness::RedisServer::builder()
            .args(["--repl-diskless-sync-delay", "0"])
            .start(),
    );
    let port = master.port().to_string();
    let replica = need_redis(
        leasehold_redis_harness::RedisServer::builder()
            .args(["--replicaof", "127.0.0.1", &port])
            .start(),
    );
    master
        .await_replicas_online(1, PATIENCE)
        .unwrap_or_else(|e| panic!("the replica never came online: {e}"));
    let rt = runtime();
    let config = |consumer: &str| {
        RedisConfig::new(master.url(), "jobs", "workers")
            .consumer(consumer)
            .claim_timeout(CLAIM)
    };
    // A bad setting is refused before anything is sent.
    let refused = rt
        .block_on(RedisBackend::connect(
            config("bad").wait_replicas(0, Duration::from_millis(100)),
        ))
        .unwrap_err();
    assert!(
        refused.to_string().contains("at least one replica"),
        "{refused}"
    );
    let plain = rt.block_on(RedisBackend::connect(config("plain"))).unwrap();
    let waiting = rt
        .block_on(RedisBackend::connect(
            // Above a second: the first WAIT right after the replica came online can take
            // until its next once-a-second acknowledgement (seen on Redis 7.0).
            config("waiting").wait_replicas(1, Duration::from_secs(2)),
        ))
        .unwrap();
    let round = |backend: &RedisBackend, i: usize| {
        rt.block_on(async {
            backend.publish(Bytes::from(i.to_string())).await.unwrap();
            let started = Instant::now();
            let fetched = backend.fetch(1, Duration::ZERO).await.unwrap();
            let lease = leasehold_core::LeaseRef::new(fetched[0].id.clone(), fetched[0].fence);
            let acked = backend.ack(&[lease]).await.unwrap();
            assert_eq!(acked, [leasehold_core::SettleResult::Ok]);
            started.elapsed()
        })
    };
    // Taking turns, so both see the same machine load.
    let (mut without, mut with) = (Vec::new(), Vec::new());
    for i in 0..ROUNDS {
        without.push(round(&plain, i));
        with.push(round(&waiting, i));
    }
    let median = |took: &mut Vec<Duration>| {
        took.sort();
        took[took.len() / 2]
    };
    eprintln!(
        "fetch + ack (two writes), median of {ROUNDS} rounds taking turns: without \
         wait_replicas {:?}, with wait_replicas(1, 2s) {:?} (master and replica on \
         loopback)",
        median(&mut without),
        median(&mut with)
    );
    // With the replica gone, a write fails, transient, and says why; it happened on the
    // master all the same.
    replica.kill().unwrap();
    let started = Instant::now();
    let failed = rt
        .block_on(waiting.publish(Bytes::from_static(b"lonely")))
        .unwrap_err();
    let waited = started.elapsed();
    assert!(failed.is_transient(), "{failed}");
    assert!(
        failed
            .to_string()
            .contains("acknowledged by 0 of the 1 replicas"),
        "{failed}"
    );
    assert_eq!(
        master.command(["XLEN", "jobs"]).unwrap(),
        Reply::Integer(1),
        "the write is on the master"
    );
    eprintln!("a publish with no replica left failed after {waited:?}: {failed}");
}

/// Sentinels that hang (stopped with `SIGSTOP`: they accept connections and never answer) do
/// not hold up a worker whose master works: its once-a-second look for a moved master is
/// given up soon, so heartbeats stay on time. Handlers run longer than the claim timeout, so
/// a renew held up for long would lose their leases.
#[test]
fn hanging_sentinels_do_not_hold_up_a_worker() {
    const MESSAGES: u64 = 12;
    let topology = need_redis(RedisSentinel::start());
    let (sentinels, name) = (topology.sentinel_urls(), topology.master_name().to_owned());
    let rt = runtime();
    let publisher = rt
        .block_on(RedisPublisher::connect(PublisherConfig::new(
            Servers::sentinel(sentinels.clone(), &name),
            "jobs",
        )))
        .expect("a publisher through the sentinels");
    rt.block_on(publish_all(&publisher, 0..MESSAGES));
    let config = RedisConfig::new(Servers::sentinel(sentinels, &name), "jobs", "workers")
        .consumer("w1")
        .claim_timeout(CLAIM);
    let backend = rt
        .block_on(RedisBackend::connect(config))
        .expect("connect through the sentinels");
    let signal = |signal: &str| {
        for sentinel in topology.sentinels() {
            let pid = sentinel.pid().expect("the sentinel runs").to_string();
            let status = std::process::Command::new("kill")
                .args([signal, &pid])
                .status()
                .expect("kill runs");
            assert!(status.success(), "kill {signal} {pid}");
        }
    };
    signal("-STOP");
    let record = Record::default();
    let worker = worker(&rt, backend, &record, CLAIM + CLAIM / 2);
    let master = topology.servers()[0].port();
    rt.block_on(wait_for("every message handled", || {
        record.handled() as u64 == MESSAGES
    }));
    let server = &topology.servers()[0];
    assert_eq!(server.port(), master);
    rt.block_on(wait_for("every entry acknowledged", || drained(server)));
    let stats = rt.block_on(worker.stats()).expect("the worker runs");
    signal("-CONT");
    rt.block_on(worker.shutdown(Duration::from_secs(2)));
    let (twice, _, _, _) = record.summary();
    assert_eq!(twice, 0, "a message ran twice");
    assert_eq!((stats.lost, stats.expired), (0, 0), "{stats:?}");
}
