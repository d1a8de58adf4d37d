//! Sharded queues on the memory backend, on tokio's paused clock: several workers share a
//! queue of 8 shards through its membership. Every shard has a fetcher; a worker leaving
//! (shut down, or crashed: its membership not renewed) moves only its shards, and its lapsed
//! leases are reclaimed by another; nothing is lost; keyed messages keep their order.
//!
//! Time is virtual: the waits below pass instantly, and nothing asserts how long anything took.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use leasehold_memory::{Bytes, Clock, MemoryBackend, MemoryQueue, StreamConfig};
use leasehold_tokio::core::{
    Backend, BackendResult, DeadLetterReason, Fetched, LeaseRef, Members, MembershipConfig,
    MessageId, RenewResult, SettleResult, Shards,
};
use leasehold_tokio::{Config, Delivery, Outcome, ShardedProducer, Worker, WorkerError};

/// The queue reads tokio's (virtual) clock, like the workers do.
#[derive(Clone)]
struct TokioClock;

impl Clock for TokioClock {
    fn now(&self) -> Instant {
        tokio::time::Instant::now().into_std()
    }
}

const CLAIM: Duration = Duration::from_secs(3);
/// With the default membership: member ttl 3 s (the claim timeout), a heartbeat every second.
const SETTLE: Duration = Duration::from_secs(3);

fn queue() -> MemoryQueue {
    let shards = Shards::new("jobs", 8).unwrap();
    MemoryQueue::with_clock(shards, StreamConfig::new(CLAIM), TokioClock).unwrap()
}

fn config(concurrency: usize) -> Config {
    Config::default()
        .concurrency(concurrency)
        .claim_timeout(CLAIM)
        .poll_interval(Duration::from_millis(100))
}

/// Handler runs: (worker, message, delivery count) in the order they finished.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<(usize, u64, u32)>>>);

impl Log {
    fn done(&self) -> Vec<(usize, u64)> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .map(|&(w, m, _)| (w, m))
            .collect()
    }

    /// Runs of a delivery that was not the message's first: taken over from another worker.
    fn redeliveries(&self, by: &[usize]) -> usize {
        let log = self.0.lock().unwrap();
        log.iter()
            .filter(|(w, _, count)| by.contains(w) && *count > 1)
            .count()
    }
}

/// A memory consumer that can be frozen: every call then hangs, as if its process had stopped
/// (no renew, no ack, no membership heartbeat, no fetch).
struct Freezable {
    inner: MemoryBackend,
    frozen: Arc<AtomicBool>,
    /// Only the membership calls fail (transiently).
    members_fail: Arc<AtomicBool>,
}

impl Freezable {
    async fn check(&self) {
        if self.frozen.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
    }
}

impl Backend for Freezable {
    type Payload = Bytes;

    fn claim_timeout(&self) -> Option<Duration> {
        self.inner.claim_timeout()
    }
    async fn publish(&self, payload: Bytes) -> BackendResult<MessageId> {
        self.inner.publish(payload).await
    }
    async fn fetch(&self, max: usize, wait: Duration) -> BackendResult<Vec<Fetched<Bytes>>> {
        self.check().await;
        self.inner.fetch(max, wait).await
    }
    async fn renew(&self, lease_refs: &[LeaseRef]) -> BackendResult<Vec<RenewResult>> {
        self.check().await;
        self.inner.renew(lease_refs).await
    }
    async fn ack(&self, lease_refs: &[LeaseRef]) -> BackendResult<Vec<SettleResult>> {
        self.check().await;
        self.inner.ack(lease_refs).await
    }
    async fn release(&self, lease_ref: &LeaseRef, delay: Duration) -> BackendResult<SettleResult> {
        self.check().await;
        self.inner.release(lease_ref, delay).await
    }
    async fn dead_letter(
        &self,
        lease_ref: &LeaseRef,
        reason: &DeadLetterReason,
    ) -> BackendResult<SettleResult> {
        self.check().await;
        self.inner.dead_letter(lease_ref, reason).await
    }
    async fn stream_len(&self) -> BackendResult<u64> {
        self.inner.stream_len().await
    }
    async fn pending(&self) -> BackendResult<u64> {
        self.inner.pending().await
    }
}

impl Members for Freezable {
    fn member(&self) -> &str {
        self.inner.member()
    }
    fn shard(&self) -> Option<(&str, u16)> {
        self.inner.shard()
    }
    async fn heartbeat(&self, queue: &str, ttl: Duration) -> BackendResult<Vec<String>> {
        self.check().await;
        if self.members_fail.load(Ordering::SeqCst) {
            return Err(leasehold_tokio::core::BackendError::transient(
                "membership down",
            ));
        }
        self.inner.heartbeat(queue, ttl).await
    }
    async fn leave(&self, queue: &str) -> BackendResult<()> {
        self.check().await;
        self.inner.leave(queue).await
    }
}

/// Starts worker `n` (consumer `w{n}`) on `queue`: each message takes 50 ms, then is done.
fn start(
    queue: &MemoryQueue,
    n: usize,
    membership: MembershipConfig,
    log: &Log,
) -> (Worker<Bytes>, Arc<AtomicBool>) {
    start_with(queue, n, membership, log, Arc::default())
}

/// [`start`], its membership calls failing while `members_fail` is set.
fn start_with(
    queue: &MemoryQueue,
    n: usize,
    membership: MembershipConfig,
    log: &Log,
    members_fail: Arc<AtomicBool>,
) -> (Worker<Bytes>, Arc<AtomicBool>) {
    let frozen = Arc::new(AtomicBool::new(false));
    let backends = queue
        .consumers(&format!("w{n}"))
        .unwrap()
        .into_iter()
        .map(|inner| Freezable {
            inner,
            frozen: frozen.clone(),
            members_fail: members_fail.clone(),
        });
    let log = log.clone();
    let worker = leasehold_tokio::worker()
        .config(config(4))
        .call_timeout(Duration::from_millis(500))
        .membership(membership)
        .sharded(queue.shards().clone(), backends, move |d: Delivery<u64>| {
            let log = log.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                let run = (n, *d.message(), d.delivery_count());
                log.0.lock().unwrap().push(run);
                Outcome::Done
            }
        })
        .start()
        .unwrap();
    (worker, frozen)
}

/// The shards `worker` fetches from.
async fn fetching(worker: &Worker<Bytes>) -> BTreeSet<u16> {
    let snapshot = worker.snapshot().await.expect("running");
    snapshot
        .streams
        .iter()
        .filter(|s| s.fetching)
        .map(|s| Shards::parse(&s.stream).expect("a shard").1)
        .collect()
}

/// How many of `workers` fetch from each shard.
async fn fetchers(workers: &[&Worker<Bytes>]) -> [usize; 8] {
    let mut per = [0; 8];
    for w in workers {
        for shard in fetching(w).await {
            per[usize::from(shard)] += 1;
        }
    }
    per
}

async fn publish(queue: &MemoryQueue, range: std::ops::Range<u64>) {
    let producer: ShardedProducer<u64, _> =
        ShardedProducer::new(queue.shards().clone(), queue.streams().iter().cloned()).unwrap();
    let batch: Vec<u64> = range.collect();
    producer.publish_batch(&batch).await.unwrap();
}

async fn wait_empty(queue: &MemoryQueue) {
    for _ in 0..600 {
        if queue.is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{} messages left", queue.len());
}

/// Each of `0..n` was done, by one of `by`.
fn each_done(log: &Log, n: u64, by: &[usize]) {
    let done = log.done();
    let messages: BTreeSet<u64> = done.iter().map(|(_, m)| *m).collect();
    assert_eq!(messages, (0..n).collect(), "every message done");
    assert!(done.iter().all(|(w, _)| by.contains(w)), "{done:?}");
}

/// Two and then three workers over 8 shards: alone a worker fetches every shard; with two
/// owners per shard, two workers both fetch all of them, three share them two per shard;
/// with one owner, three split them. Every message is done.
#[tokio::test(start_paused = true)]
async fn two_and_three_workers_give_every_shard_its_fetchers() {
    for (owners, expected) in [(2, [2; 8]), (1, [1; 8])] {
        let queue = queue();
        let log = Log::default();
        let membership = MembershipConfig::default().owners(owners);
        let (a, _) = start(&queue, 0, membership.clone(), &log);
        tokio::time::sleep(SETTLE).await;
        assert_eq!(
            fetchers(&[&a]).await,
            [1; 8],
            "alone, it fetches every shard"
        );
        let (b, _) = start(&queue, 1, membership.clone(), &log);
        tokio::time::sleep(SETTLE).await;
        let two = if owners == 2 { [2; 8] } else { [1; 8] };
        assert_eq!(
            fetchers(&[&a, &b]).await,
            two,
            "two workers, {owners} owners"
        );
        let (c, _) = start(&queue, 2, membership, &log);
        tokio::time::sleep(SETTLE).await;
        assert_eq!(
            fetchers(&[&a, &b, &c]).await,
            expected,
            "three, {owners} owners"
        );
        publish(&queue, 0..200).await;
        wait_empty(&queue).await;
        each_done(&log, 200, &[0, 1, 2]);
        for w in [a, b, c] {
            let report = w.shutdown(Duration::from_secs(5)).await;
            assert_eq!(report.lost, 0);
        }
        assert_eq!(log.done().len(), 200, "each once: nobody lost a lease");
    }
}

/// A worker that shuts down leaves the membership: the others take its shards at their next
/// heartbeat and keep their own; nothing is lost.
#[tokio::test(start_paused = true)]
async fn a_worker_leaving_moves_only_its_shards() {
    let queue = queue();
    let log = Log::default();
    let one = MembershipConfig::default().owners(1);
    let (a, _) = start(&queue, 0, one.clone(), &log);
    let (b, _) = start(&queue, 1, one.clone(), &log);
    let (c, _) = start(&queue, 2, one, &log);
    tokio::time::sleep(SETTLE).await;
    let before = [fetching(&a).await, fetching(&b).await, fetching(&c).await];
    assert_eq!(fetchers(&[&a, &b, &c]).await, [1; 8]);
    publish(&queue, 0..100).await;
    let report = c.shutdown(Duration::from_secs(5)).await;
    assert_eq!(report.lost, 0);
    // Within a heartbeat (1 s) the leave is seen.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    for (i, w) in [&a, &b].into_iter().enumerate() {
        let now = fetching(w).await;
        assert!(now.is_superset(&before[i]), "w{i} kept its shards");
        assert!(
            now.difference(&before[i]).all(|s| before[2].contains(s)),
            "w{i} gained only c's shards: {now:?} {before:?}"
        );
    }
    assert_eq!(fetchers(&[&a, &b]).await, [1; 8]);
    assert!(queue.members(CLAIM).iter().all(|m| m != "w2"));
    publish(&queue, 100..200).await;
    wait_empty(&queue).await;
    each_done(&log, 200, &[0, 1, 2]);
    assert_eq!(log.done().len(), 200, "each once");
    for w in [a, b] {
        assert_eq!(w.shutdown(Duration::from_secs(5)).await.lost, 0);
    }
}

/// A worker that crashes (frozen: no heartbeat of any kind) while holding leases: its member
/// entry lapses after the ttl and the others take only its shards; its leases lapse after the
/// claim timeout and the second owner of each of its shards reclaims them. Every message is
/// done by a live worker, and the queue ends empty: none lost.
#[tokio::test(start_paused = true)]
async fn a_crashed_workers_shards_move_and_its_leases_are_reclaimed() {
    let queue = queue();
    let log = Log::default();
    let membership = MembershipConfig::default();
    let (a, _) = start(&queue, 0, membership.clone(), &log);
    let (b, _) = start(&queue, 1, membership.clone(), &log);
    let (c, freeze_c) = start(&queue, 2, membership, &log);
    tokio::time::sleep(SETTLE).await;
    let before = [fetching(&a).await, fetching(&b).await];
    assert_eq!(fetchers(&[&a, &b, &c]).await, [2; 8]);
    publish(&queue, 0..300).await;
    // Let c take some, then freeze it mid-work.
    tokio::time::sleep(Duration::from_millis(120)).await;
    let held_by_c = c.snapshot().await.unwrap().held();
    assert!(held_by_c > 0, "c holds leases when it crashes");
    freeze_c.store(true, Ordering::SeqCst);
    wait_empty(&queue).await;
    // After its ttl, a and b fetch from every shard (two workers, two owners), gaining only
    // what c fetched.
    tokio::time::sleep(SETTLE).await;
    assert!(queue.members(CLAIM).iter().all(|m| m != "w2"));
    for (i, w) in [&a, &b].into_iter().enumerate() {
        let now = fetching(w).await;
        assert!(now.is_superset(&before[i]));
        assert_eq!(now.len(), 8);
    }
    let done = log.done();
    let live: BTreeSet<u64> = done
        .iter()
        .filter(|(w, _)| *w != 2)
        .map(|(_, m)| *m)
        .collect();
    let by_c: BTreeSet<u64> = done
        .iter()
        .filter(|(w, _)| *w == 2)
        .map(|(_, m)| *m)
        .collect();
    // What c finished before it froze it may not have acked: those run again elsewhere.
    let all: BTreeSet<u64> = live.union(&by_c).copied().collect();
    assert_eq!(all, (0..300).collect(), "every message done");
    assert!(
        log.redeliveries(&[0, 1]) > 0,
        "a and b reclaimed c's lapsed leases (delivery count above 1)"
    );
    for w in [a, b] {
        assert_eq!(w.shutdown(Duration::from_secs(5)).await.lost, 0);
    }
    assert_eq!(queue.pending_len(), 0);
    drop(c);
}

/// Membership I/O failing stops no work: the worker keeps its last assignment and its held
/// work goes on; once the membership has been unknown for its ttl it fetches from every shard
/// (so none is left without a fetcher), and back to its share when the membership answers.
#[tokio::test(start_paused = true)]
async fn failing_membership_keeps_the_assignment_then_fetches_everything() {
    let queue = queue();
    let log = Log::default();
    let one = MembershipConfig::default().owners(1);
    let fail = Arc::new(AtomicBool::new(false));
    let (a, _) = start_with(&queue, 0, one.clone(), &log, fail.clone());
    let (b, _) = start(&queue, 1, one, &log);
    tokio::time::sleep(SETTLE).await;
    let mine = fetching(&a).await;
    assert!(!mine.is_empty() && mine.len() < 8, "{mine:?}");
    fail.store(true, Ordering::SeqCst);
    publish(&queue, 0..100).await;
    // Two failed heartbeats (1 s apart): the assignment stays.
    tokio::time::sleep(Duration::from_millis(2100)).await;
    assert_eq!(fetching(&a).await, mine);
    // A ttl (3 s) after its last answered heartbeat was sent: every shard.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(fetching(&a).await.len(), 8);
    wait_empty(&queue).await;
    each_done(&log, 100, &[0, 1]);
    fail.store(false, Ordering::SeqCst);
    tokio::time::sleep(SETTLE).await;
    assert_eq!(fetching(&a).await, mine, "back to its share");
    assert_eq!(fetchers(&[&a, &b]).await, [1; 8]);
    for w in [a, b] {
        assert_eq!(w.shutdown(Duration::from_secs(5)).await.lost, 0);
    }
    assert_eq!(log.done().len(), 100, "each once");
}

/// Keyed messages go to their key's shard in publish order, and with one fetcher per shard
/// and one invocation at a time per worker, each key's messages run in that order.
#[tokio::test(start_paused = true)]
async fn keyed_messages_keep_their_order() {
    let queue = queue();
    let shards = queue.shards().clone();
    let producer: ShardedProducer<(u32, u32), _> =
        ShardedProducer::new(shards.clone(), queue.streams().iter().cloned()).unwrap();
    let order = Arc::new(Mutex::new(HashMap::<u32, Vec<u32>>::new()));
    let mut workers = Vec::new();
    for n in 0..2 {
        let order = order.clone();
        let worker = leasehold_tokio::worker()
            .config(config(1).prefetch(0))
            .membership(MembershipConfig::default().owners(1))
            .sharded(
                shards.clone(),
                queue.consumers(&format!("w{n}")).unwrap(),
                move |d: Delivery<(u32, u32)>| {
                    let order = order.clone();
                    async move {
                        let (key, seq) = *d.message();
                        // Earlier messages take longer: two run at once would finish out of
                        // order.
                        tokio::time::sleep(Duration::from_millis(u64::from(25 - seq))).await;
                        order.lock().unwrap().entry(key).or_default().push(seq);
                        Outcome::Done
                    }
                },
            )
            .start()
            .unwrap();
        workers.push(worker);
    }
    tokio::time::sleep(SETTLE).await;
    for seq in 0..20 {
        for key in 0..6u32 {
            let placed = producer
                .publish_keyed(format!("customer-{key}"), &(key, seq))
                .await
                .unwrap();
            assert_eq!(
                placed.shard,
                shards.for_key(format!("customer-{key}").as_bytes())
            );
        }
    }
    wait_empty(&queue).await;
    let order = order.lock().unwrap().clone();
    for key in 0..6 {
        assert_eq!(order[&key], (0..20).collect::<Vec<_>>(), "key {key}");
    }
    for w in workers {
        w.shutdown(Duration::from_secs(5)).await;
    }
}

/// Bad input is an error at start, never a panic.
#[tokio::test(start_paused = true)]
async fn wrong_backends_are_errors() {
    let queue = queue();
    let shards = queue.shards().clone();
    let handler = |_: Delivery<u64>| async { Outcome::Done };
    let mut few = queue.consumers("w0").unwrap();
    few.pop();
    let err = leasehold_tokio::worker()
        .sharded(shards.clone(), few, handler)
        .start()
        .unwrap_err();
    assert!(
        matches!(&err, WorkerError::Sharded(why) if why.contains("8 shards but 7")),
        "{err}"
    );
    let mut swapped = queue.consumers("w1").unwrap();
    swapped.swap(0, 1);
    let err = leasehold_tokio::worker()
        .sharded(shards.clone(), swapped, handler)
        .start()
        .unwrap_err();
    assert!(err.to_string().contains("shard order"), "{err}");
    let other = MemoryQueue::with_clock(
        Shards::new("other", 8).unwrap(),
        StreamConfig::new(CLAIM),
        TokioClock,
    )
    .unwrap();
    let err = leasehold_tokio::worker()
        .sharded(shards.clone(), other.consumers("w2").unwrap(), handler)
        .start()
        .unwrap_err();
    assert!(err.to_string().contains("\"other\""), "{err}");
    let err = leasehold_tokio::worker()
        .membership(MembershipConfig::default().owners(0))
        .sharded(shards.clone(), queue.consumers("w3").unwrap(), handler)
        .start()
        .unwrap_err();
    assert!(matches!(err, WorkerError::Membership(_)), "{err}");
    let err = leasehold_tokio::worker()
        .sharded(shards.clone(), queue.consumers("w4").unwrap(), handler)
        .sharded(shards.clone(), queue.consumers("w5").unwrap(), handler)
        .start()
        .unwrap_err();
    assert!(err.to_string().contains("one sharded queue"), "{err}");
    let err =
        ShardedProducer::<u64, _>::new(shards, queue.streams()[..3].iter().cloned()).unwrap_err();
    assert_eq!((err.shards, err.publishers), (8, 3));
}
