//! Test tools the behaviours share: a clock for the memory stream that can jump, a gate handlers
//! wait on, a recorder of invocations (with gauges), and a backend wrapper that records acks and
//! can be told to fail renews.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use event_listener::Event;
use leasehold_memory::{Bytes, Clock, MemoryBackend, MemoryStream, StreamConfig};
use leasehold_worker::core::{
    BackendError, BackendResult, Call, ErrorKind, FetchAnswer, Hooked, Hooks, LeaseRef, MessageId,
    Stats,
};
use leasehold_worker::{CancelReason, Config, Delivery, RetryPolicy, Worker, WorkerBuilder};

use crate::TestRuntime;

// ----- timing ----------------------------------------------------------------------------------

/// Cadence of empty fetches: short, so the real-time run stays fast.
pub const POLL: Duration = Duration::from_millis(20);
/// Delay before a `Pending` message is invoked again.
pub const REPOLL: Duration = Duration::from_millis(50);
/// Claim timeout of tests that do not make leases lapse: long, so a loaded machine never
/// expires a lease by accident (heartbeat every 3.3 s).
pub const LONG_CLAIM: Duration = Duration::from_secs(10);
/// Claim timeout of tests that make leases lapse or get lost (heartbeat every 333 ms).
pub const SHORT_CLAIM: Duration = Duration::from_secs(1);
/// First retry delay; doubles per failed delivery, no jitter.
pub const RETRY_INITIAL: Duration = Duration::from_millis(20);
/// How long a cancelled handler may run on before the driver drops it: within the expiry
/// margin of the short claim timeout (a tenth of it), as the config requires.
pub const CANCEL_GRACE: Duration = Duration::from_millis(50);
/// How long a test waits for something that must happen before it fails. Generous: reaching it
/// means the behaviour is missing, not that the machine is slow.
pub const PATIENCE: Duration = Duration::from_secs(8);
/// Step of the waiting loops.
pub const STEP: Duration = Duration::from_millis(5);

/// The engine configuration every behaviour starts from: short intervals, long claim timeout,
/// backoff without jitter (so its lower bound can be checked).
pub fn base_config() -> Config {
    Config::default()
        .poll_interval(POLL)
        .repoll_interval(REPOLL)
        .claim_timeout(LONG_CLAIM)
        .retry(RetryPolicy {
            initial: RETRY_INITIAL,
            multiplier: 2.0,
            max: Duration::from_secs(1),
            jitter: 0.0,
        })
        .shutdown_grace(Duration::from_secs(2))
        .cancel_grace(CANCEL_GRACE)
}

/// A worker builder on the runtime under test, with `config`.
pub fn builder<T: TestRuntime>(rt: &T, config: Config) -> WorkerBuilder<T::Runtime, Probe> {
    WorkerBuilder::new(rt.runtime()).config(config)
}

/// Polls `done` every few milliseconds of the runtime's time until it holds; panics with `what`
/// after [`PATIENCE`].
pub async fn wait_until<T: TestRuntime>(rt: &T, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = rt.now() + PATIENCE;
    while !done() {
        assert!(
            rt.now() < deadline,
            "gave up after {PATIENCE:?} waiting for: {what}"
        );
        rt.sleep(STEP).await;
    }
}

/// Polls the worker's counters until `done` holds for them, and returns them; panics with
/// `what` after [`PATIENCE`].
pub async fn wait_for_stats<T: TestRuntime, P>(
    rt: &T,
    worker: &Worker<P>,
    what: &str,
    mut done: impl FnMut(&Stats) -> bool,
) -> Stats {
    let deadline = rt.now() + PATIENCE;
    loop {
        let stats = worker.stats().await.expect("the worker runs");
        if done(&stats) {
            return stats;
        }
        assert!(
            rt.now() < deadline,
            "gave up after {PATIENCE:?} waiting for: {what} (stats: {stats:?})"
        );
        rt.sleep(STEP).await;
    }
}

/// Lets the runtime's time pass (a few poll intervals), so anything wrong that is about to
/// happen (a second invocation, a stray ack) has the chance to.
pub async fn settle<T: TestRuntime>(rt: &T) {
    rt.sleep(POLL * 5).await;
}

// ----- the memory stream's clock -----------------------------------------------------------------

/// The memory stream's time source: the runtime's clock (tokio's virtual one, or the system's),
/// plus an offset that a test can make jump forward.
///
/// A jump models the backend's clock running ahead of the worker's (a Redis server whose clock
/// jumped, a heartbeat connection stalled longer than the worker knows): every lease lapses on
/// the backend at once while the worker still counts it valid. While an offset is set the clock
/// reports itself as not real-time, so a fetch never blocks on a timer set on the offset clock.
#[derive(Clone)]
pub struct SuiteClock {
    now: Arc<dyn Fn() -> Instant + Send + Sync>,
    real_time: bool,
    offset_nanos: Arc<AtomicU64>,
}

impl SuiteClock {
    /// The runtime's clock, without offset.
    pub fn new<T: TestRuntime>(rt: &T) -> Self {
        let runtime = rt.runtime();
        Self {
            now: Arc::new(move || leasehold_worker::Runtime::now(&runtime)),
            real_time: !rt.is_virtual(),
            offset_nanos: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Moves the backend's time forward by `by`, for good.
    pub fn jump(&self, by: Duration) {
        let nanos = u64::try_from(by.as_nanos()).expect("a short jump");
        self.offset_nanos.fetch_add(nanos, Ordering::SeqCst);
    }

    fn offset(&self) -> Duration {
        Duration::from_nanos(self.offset_nanos.load(Ordering::SeqCst))
    }
}

impl Clock for SuiteClock {
    fn now(&self) -> Instant {
        (self.now)() + self.offset()
    }

    fn is_real_time(&self) -> bool {
        self.real_time && self.offset().is_zero()
    }
}

/// A memory stream on `clock` with the given claim timeout.
pub fn memory_stream(clock: &SuiteClock, claim_timeout: Duration) -> MemoryStream {
    MemoryStream::with_clock(StreamConfig::new(claim_timeout), clock.clone())
        .expect("valid stream config")
}

/// Publishes `message` JSON-encoded, as the workers' handlers decode it.
pub fn publish(stream: &MemoryStream, message: &str) -> MessageId {
    stream.publish(serde_json::to_vec(message).expect("a string encodes"))
}

// ----- gate --------------------------------------------------------------------------------------

/// A one-way gate: handlers wait on it until the test opens it.
#[derive(Clone, Default)]
pub struct Gate(Arc<GateInner>);

#[derive(Default)]
struct GateInner {
    open: AtomicBool,
    event: Event,
}

impl Gate {
    /// A closed gate.
    pub fn new() -> Self {
        Self::default()
    }

    /// Opens the gate for every waiter, now and later.
    pub fn open(&self) {
        self.0.open.store(true, Ordering::SeqCst);
        self.0.event.notify(usize::MAX);
    }

    /// Completes once the gate is open.
    pub async fn wait(&self) {
        loop {
            if self.0.open.load(Ordering::SeqCst) {
                return;
            }
            let listener = self.0.event.listen();
            if self.0.open.load(Ordering::SeqCst) {
                return;
            }
            listener.await;
        }
    }
}

// ----- recorder ----------------------------------------------------------------------------------

/// How an invocation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The handler returned.
    Returned,
    /// The driver dropped the handler's future (it ignored its cancellation).
    Dropped,
}

/// One handler invocation, as the handler saw it.
#[derive(Debug, Clone)]
pub struct InvocationRecord {
    /// The decoded message.
    pub message: String,
    /// Its id in the stream.
    pub id: MessageId,
    /// The backend's delivery count.
    pub delivery_count: u32,
    /// The invocation number of this delivery in this worker.
    pub attempt: u32,
    /// Runtime time at the start.
    pub started: Instant,
    /// Runtime time and manner of the end, once it ended.
    pub ended: Option<(Instant, Ended)>,
    /// The cancellation reason the handler observed, if any.
    pub cancelled: Option<(Instant, CancelReason)>,
}

/// Something that happened to an invocation, in the order it happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// Invocation `n` (an index into [`Recorder::invocations`]) started.
    Start(usize),
    /// Invocation `n` ended.
    End(usize),
}

#[derive(Default)]
struct Record {
    invocations: Vec<InvocationRecord>,
    marks: Vec<Mark>,
    /// Invocations running now, by message id.
    running: HashMap<MessageId, usize>,
    running_total: usize,
    max_total: usize,
    max_same_message: usize,
}

/// Records every invocation of the handlers that report to it, and how many ran at once.
#[derive(Clone)]
pub struct Recorder {
    record: Arc<Mutex<Record>>,
    now: Arc<dyn Fn() -> Instant + Send + Sync>,
}

impl Recorder {
    /// An empty recorder reading the runtime's clock.
    pub fn new<T: TestRuntime>(rt: &T) -> Self {
        let runtime = rt.runtime();
        Self {
            record: Arc::default(),
            now: Arc::new(move || leasehold_worker::Runtime::now(&runtime)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Record> {
        self.record
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records the start of an invocation; the returned guard records its end, also when the
    /// handler's future is dropped.
    pub fn enter(&self, delivery: &Delivery<String>) -> InvocationGuard {
        let now = (self.now)();
        let mut record = self.lock();
        let index = record.invocations.len();
        record.invocations.push(InvocationRecord {
            message: delivery.message().clone(),
            id: delivery.message_id().clone(),
            delivery_count: delivery.delivery_count(),
            attempt: delivery.attempt(),
            started: now,
            ended: None,
            cancelled: None,
        });
        record.marks.push(Mark::Start(index));
        let same = record
            .running
            .entry(delivery.message_id().clone())
            .or_insert(0);
        *same += 1;
        let same = *same;
        record.max_same_message = record.max_same_message.max(same);
        record.running_total += 1;
        record.max_total = record.max_total.max(record.running_total);
        InvocationGuard {
            recorder: self.clone(),
            index,
            returned: false,
        }
    }

    fn exit(&self, index: usize, ended: Ended) {
        let now = (self.now)();
        let mut record = self.lock();
        record.invocations[index].ended = Some((now, ended));
        record.marks.push(Mark::End(index));
        let id = record.invocations[index].id.clone();
        if let Some(same) = record.running.get_mut(&id) {
            *same -= 1;
        }
        record.running_total -= 1;
    }

    /// Every invocation so far, in start order.
    pub fn invocations(&self) -> Vec<InvocationRecord> {
        self.lock().invocations.clone()
    }

    /// Starts and ends, in the order they happened.
    pub fn marks(&self) -> Vec<Mark> {
        self.lock().marks.clone()
    }

    /// The invocations of the message(s) with this payload, in start order.
    pub fn invocations_of(&self, message: &str) -> Vec<InvocationRecord> {
        self.lock()
            .invocations
            .iter()
            .filter(|invocation| invocation.message == message)
            .cloned()
            .collect()
    }

    /// How many invocations with this payload have started.
    pub fn started(&self, message: &str) -> usize {
        self.lock()
            .invocations
            .iter()
            .filter(|invocation| invocation.message == message)
            .count()
    }

    /// How many invocations with this payload are running now.
    pub fn running(&self, message: &str) -> usize {
        self.lock()
            .invocations
            .iter()
            .filter(|invocation| invocation.message == message && invocation.ended.is_none())
            .count()
    }

    /// Invocations of any message running now.
    pub fn running_total(&self) -> usize {
        self.lock().running_total
    }

    /// The most invocations seen running at once.
    pub fn max_running(&self) -> usize {
        self.lock().max_total
    }

    /// The most invocations of one message (by id) seen running at once.
    pub fn max_same_message(&self) -> usize {
        self.lock().max_same_message
    }

    /// Notes the cancellation reason invocation `guard` observed.
    pub fn cancelled(&self, guard: &InvocationGuard, reason: CancelReason) {
        let now = (self.now)();
        self.lock().invocations[guard.index].cancelled = Some((now, reason));
    }
}

/// Marks an invocation running; records its end when the handler returns or is dropped.
pub struct InvocationGuard {
    recorder: Recorder,
    index: usize,
    returned: bool,
}

impl InvocationGuard {
    /// The handler is about to return normally.
    pub fn returned(mut self) {
        self.returned = true;
    }
}

impl Drop for InvocationGuard {
    fn drop(&mut self) {
        let ended = if self.returned {
            Ended::Returned
        } else {
            Ended::Dropped
        };
        self.recorder.exit(self.index, ended);
    }
}

// ----- probe backend -----------------------------------------------------------------------------

/// A [`MemoryBackend`] wrapped in [`Taps`]: records every lease the worker asks to ack, and can
/// be told to fail renew calls (as a broken connection would), so the worker's own decisions
/// can be checked independently of the backend's fencing.
pub type Probe = Hooked<MemoryBackend, Taps>;

/// A probe over the consumer `name` of `stream`, and the test's handle on it.
pub fn probe(stream: &MemoryStream, name: &str) -> (Probe, Taps) {
    let taps = Taps::default();
    let inner = stream.consumer(name).expect("a fresh consumer name");
    (Hooked::new(inner, taps.clone()), taps)
}

/// The test's handle on a [`Probe`].
#[derive(Clone, Default)]
pub struct Taps(Arc<TapsInner>);

#[derive(Default)]
struct TapsInner {
    fail_renews: AtomicBool,
    /// 0: fetches go through; 1: they fail transiently; 2: fatally.
    fail_fetches: AtomicU8,
    acks: Mutex<Vec<LeaseRef>>,
    renew_calls: AtomicUsize,
    failed_fetches: AtomicUsize,
    seen: Mutex<Vec<Seen>>,
}

/// What a [`Probe`] saw of its fetches, in order, with the test's own marks in between.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// A fetch allowed to wait was first polled.
    Waits,
    /// A fetch delivered messages.
    Delivered,
    /// The test's [`Taps::mark`].
    Mark(&'static str),
}

impl Taps {
    /// From now on fetches fail with `kind`, or go through (`None`).
    pub fn fail_fetches(&self, kind: Option<ErrorKind>) {
        let code = match kind {
            None => 0,
            Some(ErrorKind::Transient) => 1,
            Some(ErrorKind::Fatal) => 2,
        };
        self.0.fail_fetches.store(code, Ordering::SeqCst);
    }

    /// From now on renew calls fail (`true`) or go through (`false`).
    pub fn fail_renews(&self, fail: bool) {
        self.0.fail_renews.store(fail, Ordering::SeqCst);
    }

    /// Every lease the worker asked to ack, in order.
    pub fn acks(&self) -> Vec<LeaseRef> {
        self.0
            .acks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The acks the worker sent for message `id`.
    pub fn acks_of(&self, id: &MessageId) -> Vec<LeaseRef> {
        self.acks().into_iter().filter(|l| l.id == *id).collect()
    }

    /// Renew calls made so far.
    pub fn renew_calls(&self) -> usize {
        self.0.renew_calls.load(Ordering::SeqCst)
    }

    /// Fetch calls failed on purpose so far.
    pub fn failed_fetches(&self) -> usize {
        self.0.failed_fetches.load(Ordering::SeqCst)
    }

    /// Adds the test's own mark to what the probe saw (from a handler, say).
    pub fn mark(&self, mark: &'static str) {
        self.see(Seen::Mark(mark));
    }

    /// What the probe saw so far, in order.
    pub fn seen(&self) -> Vec<Seen> {
        self.0
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn see(&self, seen: Seen) {
        self.0
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(seen);
    }
}

impl Hooks<Bytes> for Taps {
    async fn before(&self, call: Call<'_>) -> BackendResult<()> {
        match call {
            Call::Fetch { wait, .. } => {
                let fail = self.0.fail_fetches.load(Ordering::SeqCst);
                if fail != 0 {
                    self.0.failed_fetches.fetch_add(1, Ordering::SeqCst);
                }
                match fail {
                    1 => Err(BackendError::transient(
                        "fetch failed (injected by the test)",
                    )),
                    2 => Err(BackendError::fatal(
                        "NOPERM this user has no permissions (injected by the test)",
                    )),
                    _ => {
                        if !wait.is_zero() {
                            self.see(Seen::Waits);
                        }
                        Ok(())
                    }
                }
            }
            Call::Renew(_) => {
                self.0.renew_calls.fetch_add(1, Ordering::SeqCst);
                if self.0.fail_renews.load(Ordering::SeqCst) {
                    return Err(BackendError::transient(
                        "renew failed (injected by the test)",
                    ));
                }
                Ok(())
            }
            Call::Ack(leases) => {
                self.0
                    .acks
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .extend_from_slice(leases);
                Ok(())
            }
            _ => Ok(()),
        }
    }

    async fn fetched(&self, answer: &mut BackendResult<FetchAnswer<Bytes>>) {
        if answer.as_ref().is_ok_and(|answer| !answer.is_empty()) {
            self.see(Seen::Delivered);
        }
    }
}
