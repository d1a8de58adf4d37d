//! The Redis backend on a 3-master Redis Cluster started by the harness: the conformance
//! properties (each test's streams on the master next in turn, so every master serves some),
//! a worker consuming a stream that lives on another master than the one it is given, a live stream
//! migrating to another master mid-run, the connections a backend holds, the inspector's walk
//! of every master, and scripts loaded again where a stream lives after its master forgot them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use leasehold_conformance::{backend_suite, BackendFactory, DeadLetterInfo, GroupsFactory};
use leasehold_core::Stats;
use leasehold_core::{Backend, ErrorKind, Outgoing, Publisher};
use leasehold_redis::{
    PublisherConfig, RedisBackend, RedisConfig, RedisInspector, RedisPublisher, Servers,
};
use leasehold_redis_harness::{RedisCluster, RedisServer, Reply};
use leasehold_tokio::{Config, Delivery, RetryPolicy, Worker, WorkerBuilder};

mod support;
use support::dead_letter;

const GROUP: &str = "workers";
/// How long a test waits for what must happen.
const PATIENCE: Duration = Duration::from_secs(15);

fn start_cluster() -> RedisCluster {
    RedisCluster::start(3).unwrap_or_else(|e| panic!("these tests need a Redis Cluster: {e}"))
}

/// A stream name starting with `prefix` whose slot master `master` (0, 1 or 2) serves.
fn stream_on(cluster: &RedisCluster, master: usize, prefix: &str) -> String {
    let port = cluster.masters()[master].port();
    (0..)
        .map(|i| format!("{prefix}-{i}"))
        .find(|name| owner(cluster, name).port() == port)
        .expect("some name hashes to every master")
}

/// The master serving `key`'s slot.
fn owner<'a>(cluster: &'a RedisCluster, key: &str) -> &'a RedisServer {
    cluster
        .owner(cluster.key_slot(key).expect("CLUSTER KEYSLOT"))
        .expect("the slot is served")
}

/// The nodes clients are given: the first master only (they discover the rest).
fn entry_nodes(cluster: &RedisCluster) -> Vec<String> {
    vec![cluster.masters()[0].url()]
}

/// Which master the next stream goes to, across every test of this binary.
static NEXT_MASTER: AtomicUsize = AtomicUsize::new(0);

struct ClusterFactory {
    cluster: RedisCluster,
    streams: AtomicUsize,
    /// The stream opened last and its dead-letter key, for [`BackendFactory::dead_letters`].
    last: Mutex<Option<(String, String)>>,
}

impl ClusterFactory {
    fn new() -> Self {
        Self {
            cluster: start_cluster(),
            streams: AtomicUsize::new(0),
            last: Mutex::default(),
        }
    }
}

impl BackendFactory for ClusterFactory {
    type Backend = RedisBackend;

    fn claim_timeout(&self) -> Duration {
        Duration::from_secs(2)
    }

    async fn open(&self, claim_timeout: Duration, replicas: usize) -> Vec<RedisBackend> {
        self.open_groups(claim_timeout, &vec![GROUP; replicas])
            .await
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
    backend_suite!(ClusterFactory::new());

    impl GroupsFactory for ClusterFactory {
        async fn open_groups(&self, claim_timeout: Duration, groups: &[&str]) -> Vec<RedisBackend> {
            let master = NEXT_MASTER.fetch_add(1, Ordering::Relaxed) % 3;
            let n = self.streams.fetch_add(1, Ordering::Relaxed);
            let stream = stream_on(&self.cluster, master, &format!("jobs{n}"));
            let mut handles = Vec::with_capacity(groups.len());
            for (i, group) in groups.iter().enumerate() {
                let config = RedisConfig::new(
                    Servers::cluster(entry_nodes(&self.cluster)),
                    stream.as_str(),
                    *group,
                )
                .consumer(format!("replica-{i}"))
                .claim_timeout(claim_timeout);
                handles.push(RedisBackend::connect(config).await.expect("connect"));
            }
            if let Some(first) = handles.first() {
                let dead = first.dead_letter_key().to_owned();
                *self.last.lock().expect("not poisoned") = Some((stream, dead));
            }
            handles
        }

        async fn join(&self, claim_timeout: Duration, group: &str) -> RedisBackend {
            let last = self.last.lock().expect("not poisoned").clone();
            let (stream, _) = last.expect("a stream was opened");
            let config =
                RedisConfig::new(Servers::cluster(entry_nodes(&self.cluster)), stream, group)
                    .consumer("late")
                    .claim_timeout(claim_timeout);
            RedisBackend::connect(config).await.expect("connect")
        }
    }

    /// The fan-out properties, on one cluster (streams spread over its masters): no consumer group
    /// loses an entry to another group's ack.
    #[tokio::test]
    async fn groups_each_keep_every_entry() {
        let factory = ClusterFactory::new();
        leasehold_conformance::groups_each_get_every_entry(&factory).await;
        leasehold_conformance::ack_in_one_group_leaves_the_others_entries(&factory).await;
        leasehold_conformance::crashed_groups_entries_wait_for_it(&factory).await;
        leasehold_conformance::late_group_gets_what_follows(&factory).await;
    }
}

// ----- a worker on the cluster ---------------------------------------------------------------

/// Runs of each message (by payload), as the handler saw them.
type Runs = Arc<Mutex<HashMap<u64, u32>>>;

fn worker_config() -> Config {
    Config::default()
        .claim_timeout(Duration::from_secs(2))
        .heartbeat_interval(Duration::from_millis(300))
        .poll_interval(Duration::from_millis(50))
        .concurrency(4)
        .retry(RetryPolicy {
            initial: Duration::from_millis(20),
            multiplier: 2.0,
            max: Duration::from_millis(200),
            jitter: 0.0,
        })
        .fetch_backoff_max(Duration::from_millis(200))
}

/// A worker on `stream` whose handler records each run and takes a few milliseconds.
async fn recording_worker(cluster: &RedisCluster, stream: &str, runs: &Runs) -> Worker<Bytes> {
    let config = RedisConfig::new(Servers::cluster(entry_nodes(cluster)), stream, GROUP)
        .consumer("w")
        .claim_timeout(Duration::from_secs(2));
    let backend = RedisBackend::connect(config).await.expect("connect");
    let runs = runs.clone();
    WorkerBuilder::new(leasehold_tokio::TokioRuntime::current())
        .config(worker_config())
        .call_timeout(Duration::from_secs(2))
        .stream(stream, backend, move |d: Delivery<u64>| {
            *runs.lock().unwrap().entry(*d.message()).or_default() += 1;
            tokio::time::sleep(Duration::from_millis(3))
        })
        .start()
        .expect("a valid worker")
}

async fn publish_range(publisher: &RedisPublisher, range: std::ops::Range<u64>) {
    let batch = range
        .map(|i| Outgoing::new(Bytes::from(i.to_string())))
        .collect();
    publisher.publish_batch(batch).await.expect("publish");
}

/// `XLEN` and the pending count of `stream`, asked of the master serving it now.
fn backlog(cluster: &RedisCluster, stream: &str) -> (i64, i64) {
    let node = owner(cluster, stream);
    let len = node.command(["XLEN", stream]).expect("XLEN");
    let pending = node.command(["XPENDING", stream, GROUP]).expect("XPENDING");
    let pending = pending
        .as_array()
        .and_then(|summary| summary.first()?.as_int());
    (
        len.as_int().unwrap_or_else(|| panic!("XLEN: {len:?}")),
        pending.unwrap_or_else(|| panic!("XPENDING: {pending:?}")),
    )
}

/// Waits until every one of `n` messages ran, the worker acked them all, and nothing is left
/// in the stream or pending; the worker's counters then.
async fn wait_all_done(
    cluster: &RedisCluster,
    stream: &str,
    worker: &Worker<Bytes>,
    runs: &Runs,
    n: u64,
) -> Stats {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let stats = worker.stats().await.expect("the worker runs");
        let ran = runs.lock().unwrap().len() as u64;
        if ran == n && stats.acked >= n && backlog(cluster, stream) == (0, 0) {
            return stats;
        }
        assert!(
            Instant::now() < deadline,
            "gave up: {ran} of {n} messages ran; backlog {:?}; {stats:?}",
            backlog(cluster, stream)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// (messages that never ran, messages that ran more than once).
fn lost_and_duplicated(runs: &Runs, n: u64) -> (Vec<u64>, Vec<(u64, u32)>) {
    let runs = runs.lock().unwrap();
    let lost = (0..n).filter(|i| !runs.contains_key(i)).collect();
    let mut twice: Vec<(u64, u32)> = runs
        .iter()
        .filter(|(_, &count)| count > 1)
        .map(|(&m, &count)| (m, count))
        .collect();
    twice.sort_unstable();
    (lost, twice)
}

/// A worker and a publisher given only the first master consume a stream served by the
/// second: every message runs exactly once, and nothing is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_consumes_a_stream_on_another_master() {
    const N: u64 = 300;
    let cluster = start_cluster();
    let stream = stream_on(&cluster, 1, "orders");
    let publisher = RedisPublisher::connect(PublisherConfig::new(
        Servers::cluster(entry_nodes(&cluster)),
        &stream,
    ))
    .await
    .expect("connect the publisher");
    let runs = Runs::default();
    let worker = recording_worker(&cluster, &stream, &runs).await;
    for start in (0..N).step_by(50) {
        publish_range(&publisher, start..start + 50).await;
    }
    let stats = wait_all_done(&cluster, &stream, &worker, &runs, N).await;
    let (lost, twice) = lost_and_duplicated(&runs, N);
    assert!(
        lost.is_empty() && twice.is_empty(),
        "lost {lost:?}, twice {twice:?}"
    );
    assert_eq!(
        (stats.lost, stats.expired, stats.acked),
        (0, 0, N),
        "{stats:?}"
    );
    worker.shutdown(Duration::from_secs(2)).await;
}

/// The slot of a live stream — its entries, consumer group, pending entries and dead-letter
/// key — moves to another master while a worker consumes it and a publisher appends to it:
/// the worker and the publisher follow, every message runs, none is lost, no lease is left
/// behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_stream_follows_its_slot_to_another_master() {
    const N: u64 = 600;
    let cluster = start_cluster();
    let stream = stream_on(&cluster, 1, "moving");
    let slot = cluster.key_slot(&stream).expect("CLUSTER KEYSLOT");
    let publisher = RedisPublisher::connect(PublisherConfig::new(
        Servers::cluster(entry_nodes(&cluster)),
        &stream,
    ))
    .await
    .expect("connect the publisher");
    let runs = Runs::default();
    let worker = recording_worker(&cluster, &stream, &runs).await;
    // A dead letter, so the slot holds more than the stream.
    publisher
        .publish(Outgoing::new(Bytes::from_static(b"not json")))
        .await
        .expect("publish");
    publish_range(&publisher, 0..100).await;
    let deadline = Instant::now() + PATIENCE;
    while runs.lock().unwrap().len() < 50 {
        assert!(Instant::now() < deadline, "the worker did not start");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let dead_key = format!("{{{stream}}}:dead");
    assert_eq!(
        owner(&cluster, &dead_key).port(),
        cluster.masters()[1].port()
    );
    // Publishing goes on during the move.
    let feeding = {
        let publisher = publisher.clone();
        tokio::spawn(async move {
            for start in (100..N).step_by(20) {
                publish_range(&publisher, start..start + 20).await;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    let target = &cluster.masters()[2];
    // On this thread, while the runtime's other thread runs the worker and the publisher.
    tokio::task::block_in_place(|| cluster.migrate(slot, target).expect("migrate the slot"));
    feeding.await.expect("the publisher ran");
    assert_eq!(
        owner(&cluster, &stream).port(),
        target.port(),
        "the slot moved"
    );
    assert_eq!(
        target
            .command(["EXISTS", stream.as_str(), dead_key.as_str()])
            .unwrap(),
        Reply::Integer(2),
        "the stream and its dead letters are on the new master"
    );
    let stats = wait_all_done(&cluster, &stream, &worker, &runs, N).await;
    let (lost, twice) = lost_and_duplicated(&runs, N);
    eprintln!("after the move: {stats:?}; ran twice: {twice:?}");
    assert!(lost.is_empty(), "never ran: {lost:?}");
    assert_eq!(stats.dead_lettered, 1, "{stats:?}");
    assert!(
        twice.is_empty() && stats.lost == 0 && stats.expired == 0,
        "a lease lapsed in the move: twice {twice:?}, {stats:?}"
    );
    worker.shutdown(Duration::from_secs(2)).await;
}

// ----- connections, the inspector, a single-server URL ---------------------------------------

/// Clients connected to `node`, besides the one asking.
fn clients(node: &RedisServer) -> usize {
    let list = node.command(["CLIENT", "LIST"]).expect("CLIENT LIST");
    let list = list
        .as_str()
        .unwrap_or_else(|| panic!("CLIENT LIST: {list:?}"));
    list.lines().filter(|line| !line.trim().is_empty()).count() - 1
}

/// Waits until every master has `want(master index)` clients; the counts then.
async fn wait_clients(cluster: &RedisCluster, want: impl Fn(usize) -> usize) -> Vec<usize> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let counts: Vec<usize> = cluster.masters().iter().map(clients).collect();
        if counts.iter().enumerate().all(|(i, &n)| n == want(i)) {
            return counts;
        }
        assert!(Instant::now() < deadline, "clients per master: {counts:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// On a cluster a backend holds two cluster connections, its commands' and its blocking
/// wait's, each with one link to every master: two connections per master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_holds_two_connections_per_master() {
    let cluster = start_cluster();
    let before: Vec<usize> = cluster.masters().iter().map(clients).collect();
    let stream = stream_on(&cluster, 2, "counted");
    let config = RedisConfig::new(
        Servers::cluster(entry_nodes(&cluster)),
        stream.as_str(),
        GROUP,
    );
    let backend = RedisBackend::connect(config).await.expect("connect");
    // A blocking wait on the stream's master, while the command connection is used.
    let waiting = backend.fetch(1, Duration::from_secs(3));
    let check = async {
        let counts = wait_clients(&cluster, |i| before[i] + 2).await;
        assert_eq!(backend.pending().await.expect("pending"), 0, "not blocked");
        counts
    };
    let (fetched, counts) = tokio::join!(waiting, check);
    assert!(fetched.expect("fetch").is_empty());
    eprintln!("clients per master before {before:?}, with one backend {counts:?}");
    drop(backend);
    wait_clients(&cluster, |i| before[i]).await;
}

/// The inspector connected to one master lists the streams of every master, and reads a
/// stream whose slot another master serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inspector_walks_every_master() {
    use leasehold_core::Inspector;
    let cluster = start_cluster();
    let mut streams: Vec<String> = (0..3)
        .map(|master| stream_on(&cluster, master, "listed"))
        .collect();
    for stream in &streams {
        let config = RedisConfig::new(
            Servers::cluster(entry_nodes(&cluster)),
            stream.as_str(),
            GROUP,
        );
        let backend = RedisBackend::connect(config).await.expect("connect");
        backend
            .publish(Bytes::from_static(b"1"))
            .await
            .expect("publish");
    }
    streams.sort();
    let inspector = RedisInspector::connect(Servers::cluster(entry_nodes(&cluster)))
        .await
        .expect("connect the inspector");
    assert_eq!(inspector.streams(100).await.expect("streams"), streams);
    for stream in &streams {
        let overview = inspector.overview(stream).await.expect("overview");
        assert_eq!(overview.length, 1, "{stream}: {overview:?}");
    }
}

/// A single-server URL of a cluster node whose stream another master serves: `connect` fails
/// at once, fatally, saying to connect as a cluster (a retry could never succeed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_server_url_of_a_cluster_node_is_refused_clearly() {
    let cluster = start_cluster();
    let stream = stream_on(&cluster, 1, "elsewhere");
    let config = RedisConfig::new(cluster.masters()[0].url(), stream.as_str(), GROUP);
    let e = RedisBackend::connect(config)
        .await
        .expect_err("the first master does not serve the stream");
    assert_eq!(e.kind(), ErrorKind::Fatal, "{e}");
    assert!(e.to_string().contains("Servers::cluster"), "{e}");
}

/// The master serving a stream forgets every script (`SCRIPT FLUSH`, as after a restart or on
/// a master new to the slot) before each call: each `NOSCRIPT` loads the script again where
/// the stream is, and the call succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_that_forgot_the_scripts_gets_them_again() {
    use leasehold_core::{LeaseRef, RenewResult, SettleResult};
    let cluster = start_cluster();
    let stream = stream_on(&cluster, 2, "forgetful");
    let master = owner(&cluster, &stream);
    let config = RedisConfig::new(
        Servers::cluster(entry_nodes(&cluster)),
        stream.as_str(),
        GROUP,
    );
    let backend = RedisBackend::connect(config).await.expect("connect");
    for payload in [b"1", b"2"] {
        backend
            .publish(Bytes::from_static(payload))
            .await
            .expect("publish");
    }
    let flush = || {
        let reply = master.command(["SCRIPT", "FLUSH"]).expect("SCRIPT FLUSH");
        assert_eq!(reply, Reply::Simple("OK".into()), "SCRIPT FLUSH");
    };
    flush();
    let fetched = backend.fetch(2, Duration::ZERO).await.expect("fetch");
    assert_eq!(fetched.len(), 2);
    let leases: Vec<LeaseRef> = fetched
        .iter()
        .map(|m| LeaseRef::new(m.id.clone(), m.fence))
        .collect();
    flush();
    assert_eq!(
        backend.renew(&leases).await.expect("renew"),
        [RenewResult::Kept; 2]
    );
    flush();
    assert_eq!(
        backend
            .release(&leases[1], Duration::ZERO)
            .await
            .expect("release"),
        SettleResult::Ok
    );
    flush();
    assert_eq!(
        backend.ack(&leases[..1]).await.expect("ack"),
        [SettleResult::Ok]
    );
    assert_eq!(
        master.command(["XLEN", stream.as_str()]).unwrap(),
        Reply::Integer(1)
    );
}
