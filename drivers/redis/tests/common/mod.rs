//! Worker-level scenarios against a real, throwaway `redis-server`, written once and run on
//! every runtime driver: each scenario is an `async fn` generic over a [`TestRt`], and
//! `worker_tokio.rs` / `worker_smol.rs` instantiate them all with [`scenarios!`].
//!
//! Timings are short (claim timeout 1 s, heartbeat 300 ms, poll 50 ms) so that takeovers happen
//! within a test. The tests assert counts, orders and states (what Redis recorded: `XPENDING`,
//! `XLEN`, the dead-letter stream), never wall-clock durations; waiting for a condition polls
//! with a bounded deadline ([`PATIENCE`]) and fails saying what it waited for.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use leasehold_core::{
    Backend, BackendResult, DeadLetterReason, Fetched, LeaseRef, MessageId, RenewResult,
    SettleResult, Stats,
};
use leasehold_redis::{RedisBackend, RedisConfig};
use leasehold_redis_harness::{Builder, RedisServer, Reply};
use leasehold_worker::{
    consume, CancelReason, Config, Delivery, Json, Outcome, RetryPolicy, Runtime, Worker,
    WorkerBuilder,
};

// ----- timing ------------------------------------------------------------------------------------

/// Claim timeout of every worker and backend here: short, so takeovers happen within a test.
pub const CLAIM: Duration = Duration::from_secs(1);
/// Heartbeat cadence: well inside the claim timeout (a renew may be late by 600 ms before a
/// lease is in danger).
pub const HEARTBEAT: Duration = Duration::from_millis(300);
/// How long an empty fetch waits (blocking on Redis) before the next.
pub const POLL: Duration = Duration::from_millis(50);
/// How long a cancelled handler may run on before the driver drops it.
pub const CANCEL_GRACE: Duration = Duration::from_millis(100);
/// Bound on one backend call.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a test waits for something that must happen. Generous: reaching it means the
/// behaviour is missing, not that the machine is slow.
pub const PATIENCE: Duration = Duration::from_secs(15);
/// Step of the waiting loops.
pub const STEP: Duration = Duration::from_millis(20);

/// The stream and group every scenario uses (each test has its own server).
pub const STREAM: &str = "jobs";
pub const GROUP: &str = "workers";
/// Where the backend dead-letters by default: hash-tagged with the stream.
pub const DEAD: &str = "{jobs}:dead";

// ----- the runtime under test ----------------------------------------------------------------------

/// What a scenario needs from the runtime under test.
pub trait TestRt: Clone + Send + Sync + 'static {
    /// The runtime workers are built on.
    type Runtime: Runtime;
    /// A separate runtime that can be killed with everything on it.
    type Isolated: Isolated;

    /// A handle to build workers with (they spawn their tasks on it).
    fn runtime(&self) -> Self::Runtime;

    /// Runs blocking code (the harness's calls) off the async threads.
    fn unblock<T, F>(&self, f: F) -> impl Future<Output = T> + Send + 'static
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static;

    /// A fresh runtime of the same kind, for a worker that will crash.
    fn isolated(&self) -> Self::Isolated;
}

/// A runtime of its own for one worker, so the test can make that worker stop dead — no
/// graceful shutdown, no release, no further heartbeat — as a crashed or frozen process does.
pub trait Isolated: Send + Sync + 'static {
    /// The runtime a worker on it is built with.
    type Runtime: Runtime;

    /// A handle to build the worker with.
    fn runtime(&self) -> Self::Runtime;

    /// Runs `future` on this runtime (so connections made in it live there) and awaits it.
    fn run<T, F>(&self, future: F) -> impl Future<Output = T> + Send + 'static
    where
        T: Send + 'static,
        F: Future<Output = T> + Send + 'static;

    /// Stops every task on it at once: no task of the worker is ever polled again.
    fn kill(self);
}

/// Expands to one `#[test]` per scenario, each on a runtime made by `$make` (evaluated inside
/// the test's future) and driven by `$block_on`.
macro_rules! scenarios {
    ($make:expr, $block_on:path; $($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                $block_on(async {
                    let rt = $make;
                    $crate::common::$name(rt).await;
                })
            }
        )*
    };
}
pub(crate) use scenarios;

/// Every scenario, for [`scenarios!`].
macro_rules! all_scenarios {
    ($make:expr, $block_on:path) => {
        $crate::common::scenarios!($make, $block_on;
            live_work_is_not_reclaimed_with_one_worker,
            live_work_is_not_reclaimed_with_two_workers,
            crashed_worker_fails_over_to_a_peer,
            takeover_is_not_stolen_back_and_cancels_the_handler,
            late_ack_after_takeover_leaves_the_new_owner_entry,
            retry_with_delay_is_retaken_by_another_consumer,
            poison_message_is_dead_lettered_while_others_flow,
            stale_entries_are_all_reclaimed_while_new_ones_flow,
            max_processing_time_cancels_and_retries,
            destroyed_group_is_recreated,
            killed_connections_reconnect,
            redis_restart_with_aof_loses_nothing,
            shutdown_hands_waiting_messages_back_at_once,
            consume_on_empty_stream_returns_false,
            consume_true_acks,
            consume_false_keeps_the_message_for_the_next_consume,
            consume_error_or_panic_releases_the_message,
        );
    };
}
pub(crate) use all_scenarios;

/// Completes after `duration` of the runtime's time.
/// The worker's counters once `ready` holds (bounded wait): Redis deletes an entry before it
/// answers the ack, so a test that saw the stream drained may read the counters a moment before
/// the worker has read the answer.
pub async fn settled_stats<R: Runtime>(
    rt: &R,
    worker: &Worker<Bytes>,
    ready: impl Fn(&Stats) -> bool,
) -> Stats {
    for _ in 0..500 {
        let stats = worker.stats().await.expect("running");
        if ready(&stats) {
            return stats;
        }
        sleep(rt, Duration::from_millis(10)).await;
    }
    worker.stats().await.expect("running")
}

pub fn sleep<R: Runtime>(rt: &R, duration: Duration) -> impl Future<Output = ()> + Send + 'static {
    let (rt, deadline) = (rt.clone(), rt.now() + duration);
    async move { rt.sleep_until(deadline).await }
}

/// Runs `future` in the background on `rt`; the receiver yields its output.
pub fn spawn<R: Runtime, T: Send + 'static>(
    rt: &R,
    future: impl Future<Output = T> + Send + 'static,
) -> futures::channel::oneshot::Receiver<T> {
    let (tx, rx) = futures::channel::oneshot::channel();
    rt.spawn(Box::pin(async move {
        let _ = tx.send(future.await);
    }));
    rx
}

// ----- the server and what Redis recorded ------------------------------------------------------

/// One scenario's world: the runtime under test and a `redis-server` of its own.
pub struct Env<T: TestRt> {
    pub rt: T,
    pub server: Arc<RedisServer>,
}

/// One row of `XPENDING stream group - + n`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingEntry {
    pub id: String,
    pub owner: String,
    pub idle_ms: i64,
    pub count: i64,
}

/// Sends one command to `server` (blocking); panics if the harness cannot reach it.
pub fn command(server: &RedisServer, args: &[String]) -> Reply {
    server
        .command(args)
        .unwrap_or_else(|e| panic!("{args:?} failed: {e}\n{}", server.log_tail()))
}

fn text(reply: &Reply) -> String {
    reply
        .as_str()
        .unwrap_or_else(|| panic!("expected a string, got {reply:?}"))
        .to_string()
}

fn int(reply: &Reply) -> i64 {
    reply
        .as_int()
        .unwrap_or_else(|| panic!("expected an integer, got {reply:?}"))
}

fn array(reply: &Reply) -> &[Reply] {
    reply
        .as_array()
        .unwrap_or_else(|| panic!("expected an array, got {reply:?}"))
}

/// `[[id, [field, value, ...]], ...]` as (id, fields).
fn entries(reply: &Reply) -> Vec<(String, HashMap<String, String>)> {
    array(reply)
        .iter()
        .map(|entry| {
            let entry = array(entry);
            let fields = array(&entry[1])
                .chunks(2)
                .map(|kv| (text(&kv[0]), text(&kv[1])))
                .collect();
            (text(&entry[0]), fields)
        })
        .collect()
}

impl<T: TestRt> Env<T> {
    /// A fresh server with the harness's defaults (no persistence).
    pub async fn start(rt: T) -> Self {
        Self::start_with(rt, RedisServer::builder()).await
    }

    /// A fresh server built by `builder`; fails (never skips) when redis-server cannot run.
    pub async fn start_with(rt: T, builder: Builder) -> Self {
        let server = rt
            .unblock(move || builder.start())
            .await
            .unwrap_or_else(|e| panic!("these tests need redis-server: {e}"));
        Self {
            rt,
            server: Arc::new(server),
        }
    }

    pub fn runtime(&self) -> T::Runtime {
        self.rt.runtime()
    }

    pub async fn sleep(&self, duration: Duration) {
        sleep(&self.runtime(), duration).await;
    }

    /// One raw command, off the async threads.
    pub async fn cmd(&self, args: &[&str]) -> Reply {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let server = self.server.clone();
        self.rt.unblock(move || command(&server, &args)).await
    }

    /// The backend's configuration for consumer `name`.
    pub fn config(&self, name: &str) -> RedisConfig {
        RedisConfig::new(self.server.url(), STREAM, GROUP)
            .consumer(name)
            .claim_timeout(CLAIM)
    }

    /// A backend (one consumer of the group) connected on the runtime under test.
    pub async fn backend(&self, name: &str) -> RedisBackend {
        RedisBackend::connect(self.config(name))
            .await
            .unwrap_or_else(|e| panic!("connecting consumer {name}: {e}"))
    }

    /// Appends a message with payload `payload` (a JSON number for the scenarios); returns its id.
    pub async fn publish(&self, payload: u64) -> String {
        text(
            &self
                .cmd(&["XADD", STREAM, "*", "data", &payload.to_string()])
                .await,
        )
    }

    /// The group's pending entries, oldest first.
    pub async fn pending(&self) -> Vec<PendingEntry> {
        let reply = self
            .cmd(&["XPENDING", STREAM, GROUP, "-", "+", "10000"])
            .await;
        array(&reply)
            .iter()
            .map(|row| {
                let row = array(row);
                PendingEntry {
                    id: text(&row[0]),
                    owner: text(&row[1]),
                    idle_ms: int(&row[2]),
                    count: int(&row[3]),
                }
            })
            .collect()
    }

    pub async fn xlen(&self, key: &str) -> i64 {
        int(&self.cmd(&["XLEN", key]).await)
    }

    /// Every entry of stream `key`: (id, fields).
    pub async fn range(&self, key: &str) -> Vec<(String, HashMap<String, String>)> {
        entries(&self.cmd(&["XRANGE", key, "-", "+"]).await)
    }

    /// A raw `XCLAIM` by `consumer`: what a peer taking a message over does (delivery count + 1).
    pub async fn xclaim(&self, consumer: &str, id: &str) {
        let reply = self
            .cmd(&["XCLAIM", STREAM, GROUP, consumer, "0", id])
            .await;
        assert_eq!(
            array(&reply).len(),
            1,
            "XCLAIM of {id} took nothing: {reply:?}"
        );
    }

    /// Polls `done` until it holds; panics with `what` after [`PATIENCE`].
    pub async fn wait_until(&self, what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + PATIENCE;
        while !done() {
            assert!(
                Instant::now() < deadline,
                "gave up after {PATIENCE:?} waiting for: {what}"
            );
            self.sleep(STEP).await;
        }
    }

    /// Polls until the stream is empty and nothing is pending: every message was acked (or
    /// dead-lettered).
    pub async fn wait_drained(&self, what: &str) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let (len, pending) = (self.xlen(STREAM).await, self.pending().await);
            if len == 0 && pending.is_empty() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "gave up after {PATIENCE:?} waiting for: {what} (XLEN {len}, XPENDING {pending:?})"
            );
            self.sleep(STEP).await;
        }
    }

    /// Polls the worker's counters until `done` holds; returns them.
    pub async fn wait_stats<P>(
        &self,
        worker: &Worker<P>,
        what: &str,
        mut done: impl FnMut(&Stats) -> bool,
    ) -> Stats {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let stats = worker.stats().await.expect("the worker runs");
            if done(&stats) {
                return stats;
            }
            assert!(
                Instant::now() < deadline,
                "gave up after {PATIENCE:?} waiting for: {what} (stats {stats:?})"
            );
            self.sleep(STEP).await;
        }
    }
}

// ----- workers and what handlers saw ------------------------------------------------------------

/// The engine configuration of every worker here; scenarios adjust single knobs.
pub fn config() -> Config {
    Config::default()
        .claim_timeout(CLAIM)
        .heartbeat_interval(HEARTBEAT)
        .poll_interval(POLL)
        .retry(RetryPolicy {
            initial: Duration::from_millis(50),
            multiplier: 2.0,
            max: Duration::from_millis(500),
            jitter: 0.0,
        })
        .fetch_backoff_max(Duration::from_millis(500))
        .shutdown_grace(Duration::from_secs(2))
}

/// A worker builder on `runtime` with `config` and the tests' driver options.
pub fn builder<R: Runtime, B: Backend<Payload = Bytes>>(
    runtime: R,
    config: Config,
) -> WorkerBuilder<R, B> {
    WorkerBuilder::new(runtime)
        .config(config)
        .cancel_grace(CANCEL_GRACE)
        .call_timeout(CALL_TIMEOUT)
}

/// One handler invocation, as the handler saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub worker: &'static str,
    pub id: String,
    pub message: u64,
    pub delivery_count: u32,
}

/// Invocations in the order they started, shared by handlers and the test.
#[derive(Debug, Clone, Default)]
pub struct Runs(Arc<Mutex<Vec<Run>>>);

impl Runs {
    pub fn record<M: Copy + Into<u64>>(&self, worker: &'static str, d: &Delivery<M>) {
        self.0.lock().unwrap().push(Run {
            worker,
            id: d.message_id().as_str().to_string(),
            message: (*d.message()).into(),
            delivery_count: d.delivery_count(),
        });
    }

    pub fn all(&self) -> Vec<Run> {
        self.0.lock().unwrap().clone()
    }

    pub fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    /// Runs of message `message`.
    pub fn of(&self, message: u64) -> Vec<Run> {
        self.all()
            .into_iter()
            .filter(|r| r.message == message)
            .collect()
    }

    /// Distinct messages that ran.
    pub fn messages(&self) -> HashSet<u64> {
        self.all().iter().map(|r| r.message).collect()
    }
}

/// Cancellation reasons handlers observed, in order.
#[derive(Debug, Clone, Default)]
pub struct Reasons(Arc<Mutex<Vec<CancelReason>>>);

impl Reasons {
    pub fn push(&self, reason: CancelReason) {
        self.0.lock().unwrap().push(reason);
    }

    pub fn all(&self) -> Vec<CancelReason> {
        self.0.lock().unwrap().clone()
    }
}

/// The Redis backend, with a record of what its renews and acks answered per message. Only
/// observes: every call goes to the real backend unchanged.
pub struct Spy {
    inner: RedisBackend,
    log: SpyLog,
}

/// What a [`Spy`] saw.
#[derive(Debug, Clone, Default)]
pub struct SpyLog(Arc<SpyInner>);

#[derive(Debug, Default)]
pub struct SpyInner {
    renews: Mutex<Vec<(String, RenewResult)>>,
    acks: Mutex<Vec<(String, SettleResult)>>,
    renew_calls: AtomicU64,
}

impl SpyLog {
    /// Per-message answers of every renew so far, in order.
    pub fn renews(&self) -> Vec<(String, RenewResult)> {
        self.0.renews.lock().unwrap().clone()
    }

    /// Per-message answers of every ack so far, in order.
    pub fn acks(&self) -> Vec<(String, SettleResult)> {
        self.0.acks.lock().unwrap().clone()
    }

    /// Renew calls that returned an answer.
    pub fn renew_calls(&self) -> u64 {
        self.0.renew_calls.load(Ordering::SeqCst)
    }
}

impl Spy {
    pub fn new(inner: RedisBackend) -> (Self, SpyLog) {
        let log = SpyLog::default();
        (
            Self {
                inner,
                log: log.clone(),
            },
            log,
        )
    }
}

impl Backend for Spy {
    type Payload = Bytes;

    fn claim_timeout(&self) -> Option<Duration> {
        self.inner.claim_timeout()
    }

    async fn publish(&self, payload: Bytes) -> BackendResult<MessageId> {
        self.inner.publish(payload).await
    }

    async fn fetch(&self, max: usize, wait: Duration) -> BackendResult<Vec<Fetched<Bytes>>> {
        self.inner.fetch(max, wait).await
    }

    async fn renew(&self, leases: &[LeaseRef]) -> BackendResult<Vec<RenewResult>> {
        let results = self.inner.renew(leases).await?;
        self.log.0.renews.lock().unwrap().extend(
            leases
                .iter()
                .zip(&results)
                .map(|(lease, result)| (lease.id.as_str().to_string(), *result)),
        );
        self.log.0.renew_calls.fetch_add(1, Ordering::SeqCst);
        Ok(results)
    }

    async fn ack(&self, leases: &[LeaseRef]) -> BackendResult<Vec<SettleResult>> {
        let results = self.inner.ack(leases).await?;
        self.log.0.acks.lock().unwrap().extend(
            leases
                .iter()
                .zip(&results)
                .map(|(lease, result)| (lease.id.as_str().to_string(), *result)),
        );
        Ok(results)
    }

    async fn release(&self, lease: &LeaseRef, delay: Duration) -> BackendResult<SettleResult> {
        self.inner.release(lease, delay).await
    }

    async fn dead_letter(
        &self,
        lease: &LeaseRef,
        reason: &DeadLetterReason,
    ) -> BackendResult<SettleResult> {
        self.inner.dead_letter(lease, reason).await
    }

    async fn stream_len(&self) -> BackendResult<u64> {
        self.inner.stream_len().await
    }

    async fn pending(&self) -> BackendResult<u64> {
        self.inner.pending().await
    }
}

fn assert_no_loss(stats: &Stats, who: &str) {
    assert_eq!(
        (stats.lost, stats.expired, stats.cancelled),
        (0, 0, 0),
        "{who} lost, expired or cancelled a lease: {stats:?}"
    );
}

// ----- live work is not reclaimed ----------------------------------------------------------------

/// A handler running 3× the claim timeout runs exactly once: its heartbeats keep Redis's idle
/// time of the entry below the claim timeout the whole time, and the worker's own fetches
/// (which reclaim anything idle that long) never take it back.
pub async fn live_work_is_not_reclaimed_with_one_worker<T: TestRt>(rt: T) {
    let env = Env::start(rt).await;
    let id = env.publish(1).await;
    let runs = Runs::default();
    let (recorder, runtime) = (runs.clone(), env.runtime());
    let worker = builder(env.runtime(), config().concurrency(4))
        .stream(STREAM, env.backend("a").await, move |d: Delivery<u64>| {
            recorder.record("a", &d);
            sleep(&runtime, CLAIM * 3)
        })
        .start()
        .expect("valid worker");
    env.wait_until("the handler started", || runs.len() == 1)
        .await;
    // While it runs, Redis sees a lease that is renewed: owned by a, delivered once, never
    // idle for a claim timeout.
    let mut samples = 0;
    while runs.len() == 1 && env.xlen(STREAM).await == 1 {
        let pending = env.pending().await;
        if let [entry] = pending.as_slice() {
            assert_eq!((entry.owner.as_str(), entry.count), ("a", 1), "{entry:?}");
            assert!(
                entry.idle_ms < CLAIM.as_millis() as i64,
                "a live lease lapsed on Redis: {entry:?}"
            );
            samples += 1;
        }
        env.sleep(Duration::from_millis(150)).await;
    }
    assert!(samples >= 5, "the handler ran for only {samples} samples");
    env.wait_drained("the message is acked").await;
    assert_eq!(
        runs.all(),
        [Run {
            worker: "a",
            id,
            message: 1,
            delivery_count: 1
        }]
    );
    let stats = settled_stats(&env.runtime(), &worker, |s| s.acked >= 1).await;
    assert_no_loss(&stats, "a");
    assert_eq!(
        (stats.invocations, stats.acked, stats.redelivered),
        (1, 1, 0)
    );
    worker.shutdown(Duration::from_secs(2)).await;
}

/// Two workers on one stream, each holding one message 3× the claim timeout while the other
/// keeps fetching (and so keeps trying to reclaim): each message runs exactly once.
pub async fn live_work_is_not_reclaimed_with_two_workers<T: TestRt>(rt: T) {
    let env = Env::start(rt).await;
    let ids = [env.publish(1).await, env.publish(2).await];
    let runs = Runs::default();
    let mut workers = Vec::new();
    for name in ["a", "b"] {
        let (recorder, runtime) = (runs.clone(), env.runtime());
        workers.push(
            builder(env.runtime(), config())
                .stream(STREAM, env.backend(name).await, move |d: Delivery<u64>| {
                    recorder.record(name, &d);
                    sleep(&runtime, CLAIM * 3)
                })
                .start()
                .expect("valid worker"),
        );
    }
    env.wait_until("both messages started", || runs.len() == 2)
        .await;
    env.wait_drained("both messages are acked").await;
    let mut seen: Vec<_> = runs
        .all()
        .into_iter()
        .map(|r| (r.id, r.delivery_count))
        .collect();
    seen.sort();
    let mut expected: Vec<_> = ids.iter().map(|id| (id.clone(), 1)).collect();
    expected.sort();
    assert_eq!(
        seen, expected,
        "each message ran once, on its first delivery"
    );
    let mut acked = 0;
    for (worker, name) in workers.into_iter().zip(["a", "b"]) {
        let stats = worker.stats().await.expect("running");
        assert_no_loss(&stats, name);
        assert_eq!(stats.redelivered, 0, "{name}: {stats:?}");
        // The shutdown report includes ack answers still on their way when the stream drained.
        acked += worker.shutdown(Duration::from_secs(2)).await.acked;
    }
    assert_eq!(acked, 2);
}

// ----- crash failover ------------------------------------------------------------------------------

/// A worker whose runtime dies mid-handler (no graceful shutdown: its heartbeats just stop) —
/// a peer takes the message over once the claim timeout has passed and completes it.
pub async fn crashed_worker_fails_over_to_a_peer<T: TestRt>(rt: T) {
    let env = Env::start(rt).await;
    let id = env.publish(7).await;
    let isolated = env.rt.isolated();
    let runs = Runs::default();
    let config_a = env.config("a");
    let backend_a = isolated
        .run(async move { RedisBackend::connect(config_a).await })
        .await
        .expect("connect a");
    let recorder = runs.clone();
    let victim = builder(isolated.runtime(), config())
        .stream(STREAM, backend_a, move |d: Delivery<u64>| {
            recorder.record("a", &d);
            // Works until the process dies.
            futures::future::pending::<()>()
        })
        .start()
        .expect("valid worker");
    env.wait_until("a started the message", || runs.len() == 1)
        .await;
    // Let a few heartbeats pass, so the crash hits a lease that is being renewed.
    env.sleep(HEARTBEAT * 2).await;
    let before = env.pending().await;
    assert_eq!(before.len(), 1, "{before:?}");
    assert_eq!((before[0].owner.as_str(), before[0].count), ("a", 1));
    isolated.kill();
    // A crash, not a hand-back: the entry is still a's, not released (a release would have set
    // its idle time to the claim timeout at once).
    let after = env.pending().await;
    assert_eq!(after.len(), 1, "{after:?}");
    assert_eq!((after[0].owner.as_str(), after[0].count), ("a", 1));
    assert!(
        after[0].idle_ms < CLAIM.as_millis() as i64,
        "the dying worker released the message: {after:?}"
    );

    let recorder = runs.clone();
    let peer = builder(env.runtime(), config())
        .stream(STREAM, env.backend("b").await, move |d: Delivery<u64>| {
            recorder.record("b", &d);
            async {}
        })
        .start()
        .expect("valid worker");
    env.wait_drained("the peer completes the message").await;
    assert_eq!(
        runs.all(),
        [
            Run {
                worker: "a",
                id: id.clone(),
                message: 7,
                delivery_count: 1
            },
            Run {
                worker: "b",
                id,
                message: 7,
                delivery_count: 2
            },
        ]
    );
    let stats = settled_stats(&env.runtime(), &peer, |s| s.acked >= 1).await;
    assert_eq!((stats.invocations, stats.acked), (1, 1), "{stats:?}");
    assert_eq!(env.xlen(DEAD).await, 0);
    peer.shutdown(Duration::from_secs(2)).await;
    // Only now: the dead worker's handle must not have asked for a graceful shutdown earlier.
    drop(victim);
}

// ----- no steal-back, fenced ack -------------------------------------------------------------------

/// A raw `XCLAIM` by a peer takes a message over while the worker's handler runs. The worker's
/// next renew is answered `Lost` (it does not steal the entry back), the handler's cancellation
/// signal fires with `LeaseLost`, its result is discarded, and the entry stays the peer's.
pub async fn takeover_is_not_stolen_back_and_cancels_the_handler<T: TestRt>(rt: T) {
    let env = Env::start(rt).await;
    let id = env.publish(1).await;
    let (backend, spy) = Spy::new(env.backend("a").await);
    let (runs, reasons) = (Runs::default(), Reasons::default());
    let (recorder, observed) = (runs.clone(), reasons.clone());
    let worker = builder(env.runtime(), config())
        .stream(STREAM, backend, move |d: Delivery<u64>| {
            recorder.record("a", &d);
            let observed = observed.clone();
            async move {
                observed.push(d.cancelled().await);
                // Whatever it returns now must be discarded, never acked.
                Outcome::Done
            }
        })
        .start()
        .expect("valid worker");
    env.wait_until("a started the message", || runs.len() == 1)
        .await;
    env.xclaim("peer", &id).await;

    // The peer is alive: it renews the entry (XCLAIM … JUSTID keeps the count), so nobody may
    // reclaim it. Over a claim timeout and more of a's heartbeats, the entry stays the peer's.
    let until = Instant::now() + CLAIM + HEARTBEAT * 2;
    while Instant::now() < until {
        env.sleep(Duration::from_millis(150)).await;
        let pending = env.pending().await;
        assert_eq!(pending.len(), 1, "{pending:?}");
        assert_eq!(
            (
                pending[0].id.as_str(),
                pending[0].owner.as_str(),
                pending[0].count
            ),
            (id.as_str(), "peer", 2),
            "the entry stays the peer's"
        );
        env.cmd(&["XCLAIM", STREAM, GROUP, "peer", "0", &id, "JUSTID"])
            .await;
    }
    let stats = env
        .wait_stats(&worker, "a learns of the loss", |s| {
            s.lost == 1 && s.cancelled == 1
        })
        .await;
    env.wait_until("a's handler sees the loss", || !reasons.all().is_empty())
        .await;
    assert_eq!(
        reasons.all(),
        [CancelReason::LeaseLost],
        "a's handler saw the loss"
    );
    let renews = spy.renews();
    let lost_at = renews
        .iter()
        .position(|(rid, result)| *rid == id && *result == RenewResult::Lost)
        .unwrap_or_else(|| panic!("no renew of {id} was answered Lost: {renews:?}"));
    assert!(
        renews[lost_at + 1..].iter().all(|(rid, _)| *rid != id),
        "a renewed {id} after it was lost: {renews:?}"
    );
    assert!(spy.acks().is_empty(), "a acked: {:?}", spy.acks());
    assert_eq!(env.xlen(STREAM).await, 1);
    assert_eq!(
        (
            stats.invocations,
            stats.lost,
            stats.cancelled,
            stats.acked,
            stats.released
        ),
        (1, 1, 1, 0, 0),
        "{stats:?}"
    );
    let report = worker.shutdown(Duration::from_secs(2)).await;
    assert_eq!((report.acked, report.released), (0, 0), "{report:?}");
    let pending = env.pending().await;
    assert_eq!((pending[0].owner.as_str(), pending[0].count), ("peer", 2));
}

/// A peer takes a message over right after one of the worker's heartbeats, and the handler
/// finishes at once — before the next renew could tell the worker. The worker's late ack is
/// refused (`Lost`) and the peer's pending entry stays intact; a worker under the peer's name
/// later completes the message. Worker `a` has a long claim timeout, so its heartbeats are 2 s
/// apart: the takeover and the ack fit between two of them even on a stalling machine.
pub async fn late_ack_after_takeover_leaves_the_new_owner_entry<T: TestRt>(rt: T) {
    const A_CLAIM: Duration = Duration::from_secs(6);
    let env = Env::start(rt).await;
    let id = env.publish(1).await;
    let a = RedisBackend::connect(env.config("a").claim_timeout(A_CLAIM))
        .await
        .expect("connecting consumer a");
    let (backend, spy) = Spy::new(a);
    let runs = Runs::default();
    let cancelled_before_done = Arc::new(AtomicBool::new(false));
    let (recorder, runtime, server, rt, log, flag) = (
        runs.clone(),
        env.runtime(),
        env.server.clone(),
        env.rt.clone(),
        spy.clone(),
        cancelled_before_done.clone(),
    );
    let a_config = config()
        .claim_timeout(A_CLAIM)
        .heartbeat_interval(Duration::from_secs(2));
    let worker = builder(env.runtime(), a_config)
        .stream(STREAM, backend, move |d: Delivery<u64>| {
            recorder.record("a", &d);
            let (runtime, server, rt, log, flag) = (
                runtime.clone(),
                server.clone(),
                rt.clone(),
                log.clone(),
                flag.clone(),
            );
            async move {
                // Right after a heartbeat the next one is 2 s away: plenty of time for the
                // takeover and the ack to happen in between.
                let calls = log.renew_calls();
                while log.renew_calls() == calls {
                    sleep(&runtime, Duration::from_millis(2)).await;
                }
                let args: Vec<String> = [
                    "XCLAIM",
                    STREAM,
                    GROUP,
                    "peer",
                    "0",
                    d.message_id().as_str(),
                ]
                .iter()
                .map(|a| a.to_string())
                .collect();
                rt.unblock(move || command(&server, &args)).await;
                flag.store(d.cancellation().is_cancelled(), Ordering::SeqCst);
                Outcome::Done
            }
        })
        .start()
        .expect("valid worker");
    env.wait_until("a's ack is answered", || !spy.acks().is_empty())
        .await;
    assert!(!cancelled_before_done.load(Ordering::SeqCst));
    assert_eq!(spy.acks(), [(id.clone(), SettleResult::Lost)]);
    let pending = env.pending().await;
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(
        (
            pending[0].id.as_str(),
            pending[0].owner.as_str(),
            pending[0].count
        ),
        (id.as_str(), "peer", 2),
        "the late ack left the peer's entry alone"
    );
    assert_eq!(env.xlen(STREAM).await, 1, "the entry was not deleted");
    let report = worker.shutdown(Duration::from_secs(2)).await;
    assert_eq!((report.acked, report.lost), (0, 1), "{report:?}");

    // Not lost: a worker under the peer's name finishes it once the takeover's lease lapses.
    let recorder = runs.clone();
    let peer = builder(env.runtime(), config())
        .stream(
            STREAM,
            env.backend("peer").await,
            move |d: Delivery<u64>| {
                recorder.record("peer", &d);
                async {}
            },
        )
        .start()
        .expect("valid worker");
    env.wait_drained("the peer completes the message").await;
    let all = runs.all();
    assert_eq!(all.len(), 2, "{all:?}");
    assert_eq!((all[1].worker, all[1].delivery_count), ("peer", 3));
    peer.shutdown(Duration::from_secs(2)).await;
}

// ----- release with delay ---------------------------------------------------------------------------

/// A handler asks for a retry after `d`: the worker releases the entry with Redis's idle time set
/// to `claim − d` (so nobody may take it before `d` has passed), and another consumer eventually
/// retakes it, as its second delivery. The delay is most of the claim timeout, and the first
/// worker stops at once: it has 900 ms to do so before it could retake the entry itself.
pub async fn retry_with_delay_is_retaken_by_another_consumer<T: TestRt>(rt: T) {
    let delay = Duration::from_millis(900);
    let env = Env::start(rt).await;
    let id = env.publish(1).await;
    let runs = Runs::default();
    let recorder = runs.clone();
    let first = builder(env.runtime(), config())
        .stream(STREAM, env.backend("a").await, move |d: Delivery<u64>| {
            recorder.record("a", &d);
            async move { Outcome::Retry { delay: Some(delay) } }
        })
        .start()
        .expect("valid worker");
    env.wait_stats(&first, "a released the message", |s| s.released == 1)
        .await;
    let report = first.shutdown(Duration::from_secs(2)).await;
    assert_eq!((report.released, report.acked), (1, 0), "{report:?}");
    let pending = env.pending().await;
    assert_eq!(pending.len(), 1, "{pending:?}");
    let entry = &pending[0];
    assert_eq!(
        (entry.id.as_str(), entry.owner.as_str(), entry.count),
        (id.as_str(), "a", 1)
    );
    let floor = (CLAIM - delay).as_millis() as i64;
    assert!(
        (floor..CLAIM.as_millis() as i64).contains(&entry.idle_ms),
        "idle should be about claim − delay = {floor} ms (and not yet claimable): {entry:?}"
    );

    let recorder = runs.clone();
    let second = builder(env.runtime(), config())
        .stream(STREAM, env.backend("b").await, move |d: Delivery<u64>| {
            recorder.record("b", &d);
            async {}
        })
        .start()
        .expect("valid worker");
    env.wait_drained("b completes the message").await;
    let all = runs.all();
    assert_eq!(
        all.iter()
            .map(|r| (r.worker, r.id.as_str(), r.delivery_count))
            .collect::<Vec<_>>(),
        [("a", id.as_str(), 1), ("b", id.as_str(), 2)]
    );
    second.shutdown(Duration::from_secs(2)).await;
}

// ----- poison messages --------------------------------------------------------------------------------

/// A message whose handler always fails is retried with backoff and dead-lettered to
/// `{jobs}:dead` on its `max_deliveries`-th failure, with the reason and delivery count; other
/// messages published meanwhile are processed while it backs off (at concurrency 1).
pub async fn poison_message_is_dead_lettered_while_others_flow<T: TestRt>(rt: T) {
    let env = Env::start(rt).await;
    let poison = env.publish(0).await;
    let runs = Runs::default();
    let recorder = runs.clone();
    let config = config().max_deliveries(3).retry(RetryPolicy {
        initial: Duration::from_millis(300),
        multiplier: 2.0,
        max: Duration::from_millis(900),
        jitter: 0.0,
    });
    let worker = builder(env.runtime(), config)
        .stream(STREAM, env.backend("a").await, move |d: Delivery<u64>| {
            recorder.record("a", &d);
            let message = *d.message();
            async move {
                if message == 0 {
                    Err("poison pill")
                } else {
                    Ok(())
                }
            }
        })
        .start()
        .expect("valid worker");
    env.wait_until("the poison failed once", || runs.len() == 1)
        .await;
    for message in 1..=10 {
        env.publish(message).await;
    }
    env.wait_until("the poison is dead-lettered", || runs.of(0).len() == 3)
        .await;
    env.wait_drained("everything is acked or dead-lettered")
        .await;

    let all = runs.all();
    let poison_runs: Vec<_> = runs.of(0).iter().map(|r| r.delivery_count).collect();
    assert_eq!(poison_runs, [1, 2, 3], "backoff, then dead letter: {all:?}");
    let last_poison = all.iter().rposition(|r| r.message == 0).unwrap();
    for message in 1..=10 {
        let of = runs.of(message);
        assert_eq!(of.len(), 1, "message {message}: {of:?}");
        assert_eq!(of[0].delivery_count, 1);
    }
    assert!(
        all[..last_poison].iter().filter(|r| r.message != 0).count() == 10,
        "the other messages flowed while the poison backed off: {all:?}"
    );
    let dead = env.range(DEAD).await;
    assert_eq!(dead.len(), 1, "{dead:?}");
    let fields = &dead[0].1;
    assert_eq!(fields["id"], poison);
    assert_eq!(fields["deliveries"], "3");
    assert_eq!(fields["data"], "0");
    assert!(
        fields["reason"].contains("3 deliveries") && fields["reason"].contains("poison pill"),
        "reason: {:?}",
        fields["reason"]
    );
    let stats = settled_stats(&env.runtime(), &worker, |s| s.acked >= 10).await;
    assert_eq!(
        (stats.acked, stats.dead_lettered, stats.failures),
        (10, 1, 3),
        "{stats:?}"
    );
    worker.shutdown(Duration::from_secs(2)).await;
}

// ----- reclaim round-robin -----------------------------------------------------------------------------

/// 200 entries delivered to a consumer that then vanished are all reclaimed, while new entries
/// — some already there, some published during the reclaim — keep flowing, interleaved with
/// the reclaims. No starvation: 100 entries of a live consumer (renewed throughout) sit ahead
/// of the stale ones in the pending list: a reclaim that restarted its `XAUTOCLAIM` scan
/// (10 × COUNT entries at most) from the start each time would spend it on them.
pub async fn stale_entries_are_all_reclaimed_while_new_ones_flow<T: TestRt>(rt: T) {
    const LIVE: std::ops::Range<u64> = 0..100;
    const STALE: std::ops::Range<u64> = 100..300;
    const NEW_BEFORE: std::ops::Range<u64> = 300..400;
    const NEW_DURING: std::ops::Range<u64> = 400..450;
    let env = Env::start(rt).await;
    let publisher = Arc::new(env.backend("publisher").await);
    let mut live_ids = Vec::new();
    for (range, consumer) in [(LIVE, "live"), (STALE, "ghost")] {
        for message in range.clone() {
            let id = publisher
                .publish(Bytes::from(message.to_string()))
                .await
                .expect("publish");
            if consumer == "live" {
                live_ids.push(id.as_str().to_string());
            }
        }
        let count = range.end - range.start;
        let read = env
            .cmd(&[
                "XREADGROUP",
                "GROUP",
                GROUP,
                consumer,
                "COUNT",
                &count.to_string(),
                "STREAMS",
                STREAM,
                ">",
            ])
            .await;
        assert_eq!(
            entries(&array(&read)[0].as_array().unwrap()[1]).len(),
            count as usize
        );
    }
    // The live consumer renews its entries (XCLAIM … JUSTID keeps their count) until the end.
    let stop = Arc::new(AtomicBool::new(false));
    let keep_alive = {
        let (rt, runtime, server, stop) = (
            env.rt.clone(),
            env.runtime(),
            env.server.clone(),
            stop.clone(),
        );
        let mut args: Vec<String> = ["XCLAIM", STREAM, GROUP, "live", "0"]
            .iter()
            .map(|a| a.to_string())
            .collect();
        args.extend(live_ids.iter().cloned());
        args.push("JUSTID".into());
        spawn(&env.runtime(), async move {
            while !stop.load(Ordering::SeqCst) {
                let (server, sent) = (server.clone(), args.clone());
                let renewed = rt.unblock(move || command(&server, &sent)).await;
                assert_eq!(array(&renewed).len(), args.len() - 6, "{renewed:?}");
                sleep(&runtime, Duration::from_millis(250)).await;
            }
        })
    };
    // The ghost never renews: after a claim timeout its entries are up for grabs.
    env.sleep(CLAIM + Duration::from_millis(100)).await;
    for message in NEW_BEFORE {
        env.publish(message).await;
    }

    let runs = Runs::default();
    let (recorder, runtime) = (runs.clone(), env.runtime());
    let worker = builder(env.runtime(), config().concurrency(4))
        .stream(STREAM, env.backend("a").await, move |d: Delivery<u64>| {
            recorder.record("a", &d);
            sleep(&runtime, Duration::from_millis(5))
        })
        .start()
        .expect("valid worker");
    let runtime = env.runtime();
    let published = spawn(&env.runtime(), async move {
        for message in NEW_DURING {
            publisher
                .publish(Bytes::from(message.to_string()))
                .await
                .expect("publish");
            sleep(&runtime, Duration::from_millis(10)).await;
        }
    });
    published.await.expect("the publisher ran");
    let total = (STALE.start..NEW_DURING.end).count();
    env.wait_until("every stale and new message ran", || {
        runs.messages().len() == total
    })
    .await;
    // Settled: acked, and the live consumer's entries untouched.
    let deadline = Instant::now() + PATIENCE;
    loop {
        let pending = env.pending().await;
        let live_untouched = pending.len() == live_ids.len()
            && pending
                .iter()
                .zip(&live_ids)
                .all(|(e, id)| e.id == *id && e.owner == "live" && e.count == 1);
        if live_untouched && env.xlen(STREAM).await == live_ids.len() as i64 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "gave up waiting for only the live entries to remain: {pending:?}"
        );
        env.sleep(STEP).await;
    }
    stop.store(true, Ordering::SeqCst);
    keep_alive
        .await
        .expect("the live consumer kept its entries");

    let all = runs.all();
    assert_eq!(all.len(), total, "each message ran once");
    for run in &all {
        assert!(
            !LIVE.contains(&run.message),
            "a live entry was taken: {run:?}"
        );
        let expected = if STALE.contains(&run.message) { 2 } else { 1 };
        assert_eq!(run.delivery_count, expected, "{run:?}");
    }
    // Neither kind waited for the other: the first 100 runs hold plenty of both.
    let early_stale = all[..100]
        .iter()
        .filter(|r| STALE.contains(&r.message))
        .count();
    assert!(
        (20..=80).contains(&early_stale),
        "{early_stale} of the first 100 runs were reclaims: {:?}",
        all[..100].iter().map(|r| r.message).collect::<Vec<_>>()
    );
    let last_stale = all
        .iter()
        .rposition(|r| STALE.contains(&r.message))
        .unwrap();
    let first_new_during = all
        .iter()
        .position(|r| NEW_DURING.contains(&r.message))
        .unwrap();
    assert!(
        first_new_during < last_stale,
        "messages published during the reclaim waited for all of it: {:?}",
        all.iter().map(|r| r.message).collect::<Vec<_>>()
    );
    let stats = settled_stats(&env.runtime(), &worker, |s| s.acked >= total as u64).await;
    assert_eq!(stats.acked, total as u64, "{stats:?}");
    worker.shutdown(Duration::from_secs(2)).await;
}

// ----- max processing time ---------------------------------------------------------------------------------

/// An invocation that runs past `max_processing_time` is cancelled (its handler sees
/// `MaxProcessingTime`), its late result is discarded, and the message is retried as its
/// second delivery.
pub async fn max_processing_time_cancels_and_retries<T: TestRt>(rt: T) {
    let env = Env::start(rt).await;
    let id = env.publish(1).await;
    let (runs, reasons) = (Runs::default(), Reasons::default());
    let (recorder, observed) = (runs.clone(), reasons.clone());
    let config = config().max_processing_time(Duration::from_millis(400));
    let worker = builder(env.runtime(), config)
        .stream(STREAM, env.backend("a").await, move |d: Delivery<u64>| {
            recorder.record("a", &d);
            let observed = observed.clone();
            async move {
                if d.delivery_count() == 1 {
                    observed.push(d.cancelled().await);
                }
                Outcome::Done
            }
        })
        .start()
        .expect("valid worker");
    env.wait_drained("the retry completes the message").await;
    assert_eq!(reasons.all(), [CancelReason::MaxProcessingTime]);
    assert_eq!(
        runs.all()
            .iter()
            .map(|r| (r.id.as_str(), r.delivery_count))
            .collect::<Vec<_>>(),
        [(id.as_str(), 1), (id.as_str(), 2)]
    );
    let stats = worker.stats().await.expect("running");
    assert_eq!(
        (stats.invocations, stats.cancelled, stats.failures),
        (2, 1, 1),
        "{stats:?}"
    );
    // Redis deletes the entry before it answers the ack, so the worker may not have read the
    // answer yet: shutdown waits for it.
    let report = worker.shutdown(Duration::from_secs(2)).await;
    assert_eq!(report.acked, 1, "{report:?}");
}

// ----- faults: NOGROUP, CLIENT KILL, restart -----------------------------------------------------------------

/// A fast worker of messages that records them: the shape of the fault scenarios.
fn recording_worker<R: Runtime>(
    runtime: R,
    backend: RedisBackend,
    runs: &Runs,
    config: Config,
    slow: Option<(u64, Duration)>,
) -> Worker<Bytes> {
    let (recorder, rt) = (runs.clone(), runtime.clone());
    builder(runtime, config)
        .stream(STREAM, backend, move |d: Delivery<u64>| {
            recorder.record("a", &d);
            let pause = match slow {
                Some((message, pause)) if *d.message() == message => pause,
                _ => Duration::from_millis(10),
            };
            sleep(&rt, pause)
        })
        .start()
        .expect("valid worker")
}

/// The group is destroyed mid-run (`XGROUP DESTROY`): the worker's next fetch gets `NOGROUP`,
/// recreates the group, and processes the messages published afterwards.
pub async fn destroyed_group_is_recreated<T: TestRt>(rt: T) {
    let env = Env::start(rt).await;
    env.publish(1).await;
    let runs = Runs::default();
    let worker = recording_worker(env.runtime(), env.backend("a").await, &runs, config(), None);
    env.wait_drained("the first message is acked").await;
    let destroyed = env.cmd(&["XGROUP", "DESTROY", STREAM, GROUP]).await;
    assert_eq!(destroyed, Reply::Integer(1));
    for message in 2..=5 {
        env.publish(message).await;
    }
    env.wait_until("the later messages ran", || runs.messages().len() == 5)
        .await;
    env.wait_drained("the later messages are acked").await;
    let groups = env.cmd(&["XINFO", "GROUPS", STREAM]).await;
    assert_eq!(
        array(&groups).len(),
        1,
        "the group was recreated: {groups:?}"
    );
    let all = runs.all();
    assert_eq!(all.len(), 5, "each message ran once: {all:?}");
    assert!(all.iter().all(|r| r.delivery_count == 1), "{all:?}");
    worker.shutdown(Duration::from_secs(2)).await;
}

/// `CLIENT KILL TYPE normal` drops every connection of the worker (commands and the blocking
/// read), twice, while a long handler runs: the worker reconnects, keeps that lease (it runs
/// once) and processes everything published after each kill.
pub async fn killed_connections_reconnect<T: TestRt>(rt: T) {
    let env = Env::start(rt).await;
    env.publish(0).await;
    let runs = Runs::default();
    let worker = recording_worker(
        env.runtime(),
        env.backend("a").await,
        &runs,
        config().concurrency(2),
        Some((0, CLAIM * 2)),
    );
    env.wait_until("the long message started", || runs.len() == 1)
        .await;
    let mut next = 1;
    for round in 0..2 {
        let killed = env.cmd(&["CLIENT", "KILL", "TYPE", "normal"]).await;
        assert!(
            matches!(killed, Reply::Integer(n) if n >= 2),
            "round {round}: the worker's connections were not killed: {killed:?}"
        );
        for _ in 0..3 {
            env.publish(next).await;
            next += 1;
        }
        env.wait_until("the messages after the kill ran", || {
            runs.messages().len() == next as usize
        })
        .await;
    }
    env.wait_drained("everything is acked").await;
    let all = runs.all();
    assert_eq!(all.len(), next as usize, "each message ran once: {all:?}");
    assert!(all.iter().all(|r| r.delivery_count == 1), "{all:?}");
    let stats = worker.stats().await.expect("running");
    assert_no_loss(&stats, "a");
    worker.shutdown(Duration::from_secs(2)).await;
}

/// Redis is killed (SIGKILL) mid-run and restarted on the same port with its AOF: the worker
/// reconnects and every message — published before the crash or after the restart — is
/// processed; none is lost. Duplicates are allowed only for messages that started before the
/// restart (at-least-once).
pub async fn redis_restart_with_aof_loses_nothing<T: TestRt>(rt: T) {
    const BEFORE: u64 = 30;
    const AFTER: u64 = 10;
    let env = Env::start_with(rt, RedisServer::builder().aof(true)).await;
    for message in 0..BEFORE {
        env.publish(message).await;
    }
    let restarted = Arc::new(AtomicBool::new(false));
    let phases: Arc<Mutex<Vec<(u64, bool)>>> = Arc::default();
    let runs = Runs::default();
    let (recorder, rt, flag, phase_log) = (
        runs.clone(),
        env.runtime(),
        restarted.clone(),
        phases.clone(),
    );
    let worker = builder(env.runtime(), config().concurrency(2))
        .stream(STREAM, env.backend("a").await, move |d: Delivery<u64>| {
            recorder.record("a", &d);
            phase_log
                .lock()
                .unwrap()
                .push((*d.message(), flag.load(Ordering::SeqCst)));
            sleep(&rt, Duration::from_millis(30))
        })
        .start()
        .expect("valid worker");
    env.wait_until("a few messages ran", || runs.len() >= 8)
        .await;
    let server = env.server.clone();
    env.rt
        .unblock(move || server.kill())
        .await
        .expect("kill redis-server");
    env.sleep(Duration::from_millis(300)).await;
    let server = env.server.clone();
    env.rt
        .unblock(move || server.restart())
        .await
        .unwrap_or_else(|e| panic!("restart redis-server: {e}"));
    restarted.store(true, Ordering::SeqCst);
    for message in BEFORE..BEFORE + AFTER {
        env.publish(message).await;
    }
    let total = (BEFORE + AFTER) as usize;
    env.wait_until("every message ran", || runs.messages().len() == total)
        .await;
    env.wait_drained("every message is acked").await;

    let mut by_message: BTreeMap<u64, Vec<bool>> = BTreeMap::new();
    for (message, after_restart) in phases.lock().unwrap().iter() {
        by_message.entry(*message).or_default().push(*after_restart);
    }
    assert_eq!(
        by_message.keys().copied().collect::<Vec<_>>(),
        (0..BEFORE + AFTER).collect::<Vec<_>>(),
        "none lost"
    );
    for (message, phases) in &by_message {
        if phases.len() > 1 {
            assert!(
                !phases[0],
                "message {message} ran {} times, all after the restart",
                phases.len()
            );
        }
    }
    worker.shutdown(Duration::from_secs(2)).await;
}

// ----- shutdown hand-back -------------------------------------------------------------------------------------

/// At shutdown, messages waiting for a re-poll (`Pending`) are released with no delay: a peer's
/// raw `XAUTOCLAIM` with min-idle = claim timeout gets them right away. A running handler
/// finishes within the grace and is acked.
pub async fn shutdown_hands_waiting_messages_back_at_once<T: TestRt>(rt: T) {
    let env = Env::start(rt).await;
    let mut waiting = Vec::new();
    for message in 1..=3 {
        waiting.push(env.publish(message).await);
    }
    env.publish(4).await;
    let runs = Runs::default();
    let (recorder, runtime) = (runs.clone(), env.runtime());
    let config = config()
        .concurrency(4)
        .repoll_interval(Duration::from_secs(30));
    let worker = builder(env.runtime(), config)
        .stream(STREAM, env.backend("a").await, move |d: Delivery<u64>| {
            recorder.record("a", &d);
            let running = *d.message() == 4;
            let pause = sleep(&runtime, Duration::from_millis(300));
            async move {
                if running {
                    pause.await;
                    Outcome::Done
                } else {
                    Outcome::Pending
                }
            }
        })
        .start()
        .expect("valid worker");
    env.wait_stats(&worker, "three messages wait for a re-poll", |s| {
        s.pending == 3 && s.invocations == 4
    })
    .await;
    let report = worker.shutdown(Duration::from_secs(2)).await;
    assert_eq!((report.released, report.acked), (3, 1), "{report:?}");

    let claim = CLAIM.as_millis().to_string();
    let reply = env
        .cmd(&[
            "XAUTOCLAIM",
            STREAM,
            GROUP,
            "peer",
            &claim,
            "0-0",
            "COUNT",
            "10",
        ])
        .await;
    let mut claimed: Vec<String> = entries(&array(&reply)[1])
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    claimed.sort();
    waiting.sort();
    assert_eq!(
        claimed, waiting,
        "the peer got every waiting message at once"
    );
    let pending = env.pending().await;
    assert!(
        pending.iter().all(|e| e.owner == "peer" && e.count == 2),
        "{pending:?}"
    );
    assert_eq!(env.xlen(STREAM).await, 3, "the finished one was acked");
    assert_eq!(runs.len(), 4);
}

// ----- the backward-compatible consume() ------------------------------------------------------------------

/// `consume` on an empty stream consumes nothing and says so.
pub async fn consume_on_empty_stream_returns_false<T: TestRt>(rt: T) {
    let env = Env::start(rt).await;
    let backend = env.backend("c1").await;
    let mut called = false;
    let consumed = consume(&backend, &Json::<u64>::default(), |_: u64| {
        called = true;
        true
    })
    .await
    .expect("consume");
    assert!(!consumed && !called);
}

/// `consume` whose closure returns `true` acks the message: it is gone from the stream and from
/// the pending list.
pub async fn consume_true_acks<T: TestRt>(rt: T) {
    let env = Env::start(rt).await;
    let backend = env.backend("c1").await;
    env.publish(1).await;
    let codec = Json::<u64>::default();
    let mut seen = Vec::new();
    let consumed = consume(&backend, &codec, |m: u64| {
        seen.push(m);
        true
    })
    .await
    .expect("consume");
    assert!(consumed);
    assert_eq!(seen, [1]);
    assert_eq!(env.xlen(STREAM).await, 0);
    assert!(env.pending().await.is_empty());
    let again = consume(&backend, &codec, |_: u64| true).await;
    assert!(!again.expect("consume"), "nothing left");
}

/// `consume` whose closure returns `false` keeps the message: the next `consume` gets the same
/// message again, at once.
pub async fn consume_false_keeps_the_message_for_the_next_consume<T: TestRt>(rt: T) {
    let env = Env::start(rt).await;
    let backend = env.backend("c1").await;
    let id = env.publish(1).await;
    let codec = Json::<u64>::default();
    let mut seen = Vec::new();
    let first = consume(&backend, &codec, |m: u64| {
        seen.push(m);
        false
    })
    .await;
    assert!(first.expect("consume"), "a message was consumed");
    let pending = env.pending().await;
    assert_eq!(pending.len(), 1, "kept: {pending:?}");
    assert_eq!(pending[0].id, id);
    let second = consume(&backend, &codec, |m: u64| {
        seen.push(m);
        true
    })
    .await;
    assert!(
        second.expect("consume"),
        "the next consume got nothing (XPENDING {:?})",
        env.pending().await
    );
    assert_eq!(seen, [1, 1], "the same message, twice");
    assert_eq!(env.xlen(STREAM).await, 0, "acked the second time");
    assert!(env.pending().await.is_empty());
}

/// An error or a panic in the `consume` closure releases the message: it is never lost, and the
/// next `consume` (on any consumer) gets it.
pub async fn consume_error_or_panic_releases_the_message<T: TestRt>(rt: T) {
    let env = Env::start(rt).await;
    let (first, second) = (env.backend("c1").await, env.backend("c2").await);
    let id = env.publish(1).await;
    let codec = Json::<u64>::default();
    let mut seen = Vec::new();

    let failed = consume(&first, &codec, |m: u64| {
        seen.push(m);
        Err::<bool, _>("cannot handle it now")
    })
    .await;
    assert!(failed.expect("consume"));
    assert_eq!(env.pending().await.len(), 1, "an error keeps the message");

    let panicked = consume(&second, &codec, |m: u64| -> bool {
        seen.push(m);
        panic!("a deliberate test panic in a consume closure")
    })
    .await;
    assert!(
        panicked.expect("consume"),
        "the other consumer got nothing (XPENDING {:?})",
        env.pending().await
    );
    let pending = env.pending().await;
    assert_eq!(pending.len(), 1, "a panic keeps the message: {pending:?}");
    assert_eq!((pending[0].id.as_str(), pending[0].count), (id.as_str(), 2));

    let done = consume(&first, &codec, |m: u64| {
        seen.push(m);
        true
    })
    .await;
    assert!(
        done.expect("consume"),
        "the first consumer got nothing back (XPENDING {:?})",
        env.pending().await
    );
    assert_eq!(seen, [1; 3], "the same message each time");
    assert_eq!(env.xlen(STREAM).await, 0, "acked at last");
    assert!(env.pending().await.is_empty());
}
