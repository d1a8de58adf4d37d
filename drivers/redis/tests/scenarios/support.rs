//! What every scenario stands on: the runtime under test ([`TestRt`], [`Isolated`]), the
//! timings, a `redis-server` of the scenario's own and what it recorded ([`Env`]), workers all
//! built alike ([`config`], [`builder`]), records of what handlers and the backend saw ([`Runs`],
//! [`Reasons`], [`Spy`]), and the waiting loops, each bounded by [`PATIENCE`].

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use leasehold_core::{
    Backend, BackendResult, Hooked, Hooks, LeaseRef, RenewResult, SettleResult, Stats,
};
use leasehold_redis::{RedisBackend, RedisConfig};
use leasehold_redis_harness::{Builder, RedisServer, Reply};
use leasehold_worker::{
    CancelReason, Config, Delivery, RetryPolicy, Runtime, Worker, WorkerBuilder,
};

// ----- timing ------------------------------------------------------------------------------------

/// Claim timeout of every worker and backend here: short, so takeovers happen within a test.
pub const CLAIM: Duration = Duration::from_secs(1);
/// Heartbeat cadence: well inside the claim timeout (a renew may be late by 600 ms before a
/// lease is in danger).
pub const HEARTBEAT: Duration = Duration::from_millis(300);
/// How long an empty fetch waits (blocking on Redis) before the next.
pub const POLL: Duration = Duration::from_millis(50);
/// How long a cancelled handler may run on before the driver drops it: within the expiry
/// margin (a tenth of the claim timeout), as the config requires.
pub const CANCEL_GRACE: Duration = Duration::from_millis(50);
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

// ----- the runtime under test --------------------------------------------------------------------

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

// ----- time and tasks ----------------------------------------------------------------------------

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

/// Completes after `duration` of the runtime's time.
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

// ----- the server and what Redis recorded --------------------------------------------------------

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

/// The elements of an array reply.
pub fn array(reply: &Reply) -> &[Reply] {
    reply
        .as_array()
        .unwrap_or_else(|| panic!("expected an array, got {reply:?}"))
}

/// `[[id, [field, value, ...]], ...]` as (id, fields).
pub fn entries(reply: &Reply) -> Vec<(String, HashMap<String, String>)> {
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

    /// The configuration of consumer `name` of group `group` (for streams several groups read).
    pub fn member_config(&self, group: &str, name: &str) -> RedisConfig {
        RedisConfig::new(self.server.url(), STREAM, group)
            .consumer(name)
            .claim_timeout(CLAIM)
    }

    /// Declares the stream's consumer groups as a producer does
    /// ([`PublisherConfig::groups`](leasehold_redis::PublisherConfig::groups)): each exists from
    /// now on, and keeps every entry published until it has read it.
    pub async fn declare_groups(&self, groups: &[&str]) {
        let config = leasehold_redis::PublisherConfig::new(self.server.url(), STREAM)
            .groups(groups.iter().copied());
        leasehold_redis::RedisPublisher::connect(config)
            .await
            .unwrap_or_else(|e| panic!("declaring the groups {groups:?}: {e}"));
    }

    /// Consumer `name` of group `group`, connected on the runtime under test.
    pub async fn member(&self, group: &str, name: &str) -> RedisBackend {
        RedisBackend::connect(self.member_config(group, name))
            .await
            .unwrap_or_else(|e| panic!("connecting consumer {name} of {group}: {e}"))
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

    /// Polls until some client of the server waits blocked in a read: an idle worker's wait.
    pub async fn wait_blocked(&self, what: &str) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let clients = self.cmd(&["CLIENT", "LIST"]).await;
            let blocked = clients
                .as_str()
                .is_some_and(|list| list.lines().any(|line| line.contains(" flags=b ")));
            if blocked {
                return;
            }
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

// ----- workers and what handlers saw -------------------------------------------------------------

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
        .config(config.cancel_grace(CANCEL_GRACE))
        .call_timeout(CALL_TIMEOUT)
}

/// One handler invocation, as the handler saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvocationRecord {
    pub worker: &'static str,
    pub id: String,
    pub message: u64,
    pub delivery_count: u32,
}

/// Invocations in the order they started, shared by handlers and the test.
#[derive(Debug, Clone, Default)]
pub struct Invocations(Arc<Mutex<Vec<InvocationRecord>>>);

impl Invocations {
    pub fn record<M: Copy + Into<u64>>(&self, worker: &'static str, d: &Delivery<M>) {
        self.0.lock().unwrap().push(InvocationRecord {
            worker,
            id: d.message_id().as_str().to_string(),
            message: (*d.message()).into(),
            delivery_count: d.delivery_count(),
        });
    }

    pub fn all(&self) -> Vec<InvocationRecord> {
        self.0.lock().unwrap().clone()
    }

    pub fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    /// Invocations of message `message`.
    pub fn of(&self, message: u64) -> Vec<InvocationRecord> {
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
pub type Spy = Hooked<RedisBackend, SpyLog>;

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

/// The Redis backend `inner`, spied on, and what the spy sees.
pub fn spy(inner: RedisBackend) -> (Spy, SpyLog) {
    let log = SpyLog::default();
    (Hooked::new(inner, log.clone()), log)
}

impl Hooks<Bytes> for SpyLog {
    fn renewed(&self, leases: &[LeaseRef], answer: &BackendResult<Vec<RenewResult>>) {
        let Ok(results) = answer else { return };
        self.0.renews.lock().unwrap().extend(
            leases
                .iter()
                .zip(results)
                .map(|(lease, result)| (lease.id.as_str().to_string(), *result)),
        );
        self.0.renew_calls.fetch_add(1, Ordering::SeqCst);
    }

    fn acked(&self, leases: &[LeaseRef], answer: &BackendResult<Vec<SettleResult>>) {
        let Ok(results) = answer else { return };
        self.0.acks.lock().unwrap().extend(
            leases
                .iter()
                .zip(results)
                .map(|(lease, result)| (lease.id.as_str().to_string(), *result)),
        );
    }
}

/// Asserts that the worker never lost, let expire or cancelled a lease of its own.
pub fn assert_no_loss(stats: &Stats, who: &str) {
    assert_eq!(
        (stats.lost, stats.expired, stats.cancelled),
        (0, 0, 0),
        "{who} lost, expired or cancelled a lease: {stats:?}"
    );
}
