//! Worker-level properties: a real `leasehold-tokio` worker (real time) over the backend under
//! test. The factory's clock must be real time (Redis, or a memory stream on the system clock).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use leasehold_core::Backend;
use leasehold_tokio::{Config, Delivery, Json, Outcome, TokioRuntime, Worker, WorkerBuilder};

use crate::{fetch, open, pending, publish, stream_len, BackendFactory};

/// Cadence of empty fetches.
const POLL: Duration = Duration::from_millis(25);
/// How long a property waits for something that must happen.
const PATIENCE: Duration = Duration::from_secs(10);

/// The worker configuration of the properties: the factory's claim timeout, heartbeat a third
/// of it, short polls.
fn config<F: BackendFactory>(f: &F, concurrency: usize) -> Config {
    let claim = f.claim_timeout();
    Config::default()
        .concurrency(concurrency)
        .claim_timeout(claim)
        .heartbeat_interval(claim / 3)
        .poll_interval(POLL)
        .repoll_interval(POLL * 2)
        .shutdown_grace(Duration::from_secs(2))
}

/// Publishes `n` JSON-encoded (a JSON number is its decimal digits).
async fn publish_n<B: Backend<Payload: From<Vec<u8>>>>(b: &B, n: u64) {
    publish(b, n.to_string().as_bytes()).await;
}

/// One handler invocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct InvocationRecord {
    message: u64,
    attempt: u32,
    delivery_count: u32,
    worker: usize,
}

#[derive(Default)]
struct Record {
    invocations: Vec<InvocationRecord>,
    /// Start (`true`) and end (`false`) of invocations, by message, in order.
    marks: Vec<(u64, bool)>,
    running: HashMap<u64, usize>,
    running_total: usize,
    max_total: usize,
    max_same: usize,
    ended: usize,
}

/// Records invocations and how many ran at once.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Record>>);

impl Recorder {
    fn lock(&self) -> MutexGuard<'_, Record> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn enter(&self, worker: usize, d: &Delivery<u64>) -> Guard {
        let mut r = self.lock();
        let message = *d.message();
        r.invocations.push(InvocationRecord {
            message,
            attempt: d.attempt(),
            delivery_count: d.delivery_count(),
            worker,
        });
        r.marks.push((message, true));
        let same = r.running.entry(message).or_insert(0);
        *same += 1;
        let same = *same;
        r.max_same = r.max_same.max(same);
        r.running_total += 1;
        r.max_total = r.max_total.max(r.running_total);
        Guard {
            recorder: self.clone(),
            message,
        }
    }

    fn invocations(&self) -> Vec<InvocationRecord> {
        self.lock().invocations.clone()
    }

    fn invocations_of(&self, message: u64) -> Vec<InvocationRecord> {
        self.invocations()
            .into_iter()
            .filter(|r| r.message == message)
            .collect()
    }

    fn ended(&self) -> usize {
        self.lock().ended
    }
}

/// Records the end of an invocation when dropped.
struct Guard {
    recorder: Recorder,
    message: u64,
}

impl Drop for Guard {
    fn drop(&mut self) {
        let mut r = self.recorder.lock();
        r.marks.push((self.message, false));
        if let Some(same) = r.running.get_mut(&self.message) {
            *same -= 1;
        }
        r.running_total -= 1;
        r.ended += 1;
    }
}

/// Polls `done` until it holds; fails `prop` with `what` after [`PATIENCE`].
async fn wait_until<Fut: std::future::Future<Output = bool>>(
    prop: &str,
    what: &str,
    mut done: impl FnMut() -> Fut,
) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !done().await {
        ensure!(
            prop,
            tokio::time::Instant::now() < deadline,
            "gave up after {PATIENCE:?} waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Starts a worker on `backend` whose handler records into `recorder` as `worker`, sleeps
/// `busy`, and returns `outcome(message, attempt)`.
fn start<F: BackendFactory>(
    config: Config,
    backend: F::Backend,
    recorder: &Recorder,
    worker: usize,
    busy: Duration,
    outcome: fn(u64, u32) -> Outcome,
) -> Worker<<F::Backend as Backend>::Payload>
where
    <F::Backend as Backend>::Payload: AsRef<[u8]>,
{
    let recorder = recorder.clone();
    leasehold_tokio::worker()
        .config(config)
        .stream("jobs", backend, move |d: Delivery<u64>| {
            let guard = recorder.enter(worker, &d);
            let verdict = outcome(*d.message(), d.attempt());
            async move {
                tokio::time::sleep(busy).await;
                drop(guard);
                verdict
            }
        })
        .start()
        .expect("a valid worker")
}

fn done(_: u64, _: u32) -> Outcome {
    Outcome::Done
}

/// Backpressure and serial invocations: a worker with concurrency 3 over 12 messages never runs
/// more than 3 handlers at once nor two invocations of one message at once, runs each once and acks
/// them all.
pub async fn worker_backpressure_and_serial<F: BackendFactory>(f: &F) {
    const P: &str = "worker_backpressure_and_serial";
    const N: usize = 3;
    const MESSAGES: u64 = 12;
    let (_, mut r) = open(f, 2).await;
    let observer = r.remove(1);
    for i in 0..MESSAGES {
        publish_n(&observer, i).await;
    }
    let recorder = Recorder::default();
    let worker = start::<F>(
        config(f, N),
        r.remove(0),
        &recorder,
        0,
        Duration::from_millis(40),
        done,
    );
    wait_until(P, "every message acked", || async {
        stream_len(&observer).await == 0
    })
    .await;
    let report = worker.shutdown(Duration::from_secs(2)).await;
    let record = recorder.lock();
    ensure!(
        P,
        record.max_total <= N,
        "{} handlers ran at once with concurrency {N}",
        record.max_total
    );
    ensure!(
        P,
        record.max_same == 1,
        "{} invocations of one message ran at once",
        record.max_same
    );
    let mut seen: Vec<u64> = record.invocations.iter().map(|r| r.message).collect();
    seen.sort_unstable();
    ensure!(
        P,
        seen == (0..MESSAGES).collect::<Vec<_>>(),
        "each message must run exactly once, invocations: {seen:?}"
    );
    ensure!(
        P,
        report.acked == MESSAGES,
        "the worker acked {} of {MESSAGES}",
        report.acked
    );
}

/// No reclaim of live work: two workers on one stream, handlers running 2.5× the claim
/// timeout; heartbeats keep the leases, so each message runs exactly once, with delivery count 1.
pub async fn worker_no_reclaim_of_live_work<F: BackendFactory>(f: &F) {
    const P: &str = "worker_no_reclaim_of_live_work";
    const MESSAGES: u64 = 4;
    let (claim, mut r) = open(f, 3).await;
    let observer = r.remove(2);
    for i in 0..MESSAGES {
        publish_n(&observer, i).await;
    }
    let recorder = Recorder::default();
    let busy = claim * 5 / 2;
    let b = start::<F>(config(f, 4), r.remove(1), &recorder, 1, busy, done);
    let a = start::<F>(config(f, 4), r.remove(0), &recorder, 0, busy, done);
    wait_until(P, "every message acked", || async {
        stream_len(&observer).await == 0
    })
    .await;
    // Give a stray second invocation the chance to show.
    tokio::time::sleep(POLL * 4).await;
    let (ra, rb) = (
        a.shutdown(Duration::from_secs(2)).await,
        b.shutdown(Duration::from_secs(2)).await,
    );
    let invocations = recorder.invocations();
    for i in 0..MESSAGES {
        let of: Vec<InvocationRecord> = invocations
            .iter()
            .filter(|r| r.message == i)
            .copied()
            .collect();
        ensure!(
            P,
            of.len() == 1,
            "message {i} ran {} times although its handler was alive: {of:?}",
            of.len()
        );
        ensure!(
            P,
            of[0].delivery_count == 1,
            "message {i} was delivered again: {of:?}"
        );
    }
    ensure!(
        P,
        ra.acked + rb.acked == MESSAGES,
        "the workers acked {} + {} of {MESSAGES}",
        ra.acked,
        rb.acked
    );
    ensure!(
        P,
        ra.lost + rb.lost == 0,
        "leases lost: {} + {}",
        ra.lost,
        rb.lost
    );
}

fn pending_twice(message: u64, attempt: u32) -> Outcome {
    if message == 0 && attempt < 3 {
        Outcome::Pending
    } else {
        Outcome::Done
    }
}

/// `Pending` re-poll: at concurrency 1, a message that answers `Pending` twice is invoked again
/// as attempts 1, 2, 3 of one delivery (no other delivery of it in between), other messages run
/// while it waits, and all are acked.
pub async fn worker_pending_repoll<F: BackendFactory>(f: &F) {
    const P: &str = "worker_pending_repoll";
    const OTHERS: u64 = 3;
    let (_, mut r) = open(f, 2).await;
    let observer = r.remove(1);
    for i in 0..=OTHERS {
        publish_n(&observer, i).await;
    }
    let recorder = Recorder::default();
    let config = config(f, 1).repoll_interval(Duration::from_millis(200));
    let worker = start::<F>(
        config,
        r.remove(0),
        &recorder,
        0,
        Duration::from_millis(5),
        pending_twice,
    );
    wait_until(P, "every message acked", || async {
        stream_len(&observer).await == 0
    })
    .await;
    let report = worker.shutdown(Duration::from_secs(2)).await;
    let invocations = recorder.invocations();
    let pending: Vec<InvocationRecord> = recorder.invocations_of(0);
    ensure!(
        P,
        pending.iter().map(|r| r.attempt).collect::<Vec<_>>() == [1, 2, 3],
        "the Pending message ran as attempts {:?}, expected [1, 2, 3]",
        pending.iter().map(|r| r.attempt).collect::<Vec<_>>()
    );
    ensure!(
        P,
        pending.iter().all(|r| r.delivery_count == 1),
        "the Pending message was delivered again: {pending:?}"
    );
    let first = invocations.iter().position(|r| r.message == 0).unwrap_or(0);
    let last = invocations
        .iter()
        .rposition(|r| r.message == 0)
        .unwrap_or(0);
    let between = invocations[first..last]
        .iter()
        .filter(|r| r.message != 0)
        .count();
    ensure!(
        P,
        between > 0,
        "no other message ran while the Pending one waited: {invocations:?}"
    );
    for i in 1..=OTHERS {
        ensure!(
            P,
            recorder.invocations_of(i).len() == 1,
            "message {i} ran {} times",
            recorder.invocations_of(i).len()
        );
    }
    ensure!(
        P,
        recorder.lock().max_total <= 1,
        "more than one invocation at once at concurrency 1"
    );
    ensure!(
        P,
        report.acked == OTHERS + 1,
        "acked {} of {}",
        report.acked,
        OTHERS + 1
    );
}

/// A tokio runtime of its own for a worker that will crash: [`Isolated::kill`] shuts it down in
/// the background, so no task on it (the worker's driver, heartbeats, handlers) is polled again,
/// without any graceful shutdown.
struct Isolated(Option<tokio::runtime::Runtime>);

impl Isolated {
    fn new() -> Self {
        Self(Some(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .expect("a tokio runtime"),
        ))
    }

    fn runtime(&self) -> TokioRuntime {
        let rt = self.0.as_ref().expect("not killed yet");
        TokioRuntime::from_handle(rt.handle().clone())
    }

    fn kill(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

impl Drop for Isolated {
    fn drop(&mut self) {
        // Dropping a runtime in an async context panics; this never blocks.
        self.kill();
    }
}

/// Crash failover: worker a, on a runtime of its own, takes a message whose handler never
/// finishes; once it runs (and a couple of heartbeats have passed), a's runtime is shut down
/// in the background — no graceful shutdown, no release, its heartbeats just stop. The message
/// is not handed back at once; worker b takes it over after the claim timeout, with delivery
/// count ≥ 2, runs it once and acks it once.
pub async fn worker_crash_failover<F: BackendFactory>(f: &F) {
    const P: &str = "worker_crash_failover";
    let (claim, mut r) = open(f, 3).await;
    let observer = r.remove(2);
    publish_n(&observer, 7).await;
    let recorder = Recorder::default();
    let mut isolated = Isolated::new();
    let victim_recorder = recorder.clone();
    let victim: Worker<<F::Backend as Backend>::Payload> = WorkerBuilder::new(isolated.runtime())
        .config(config(f, 1))
        .stream("jobs", r.remove(0), move |d: Delivery<u64>| {
            // Held until the runtime dies: the handler never ends.
            let guard = victim_recorder.enter(0, &d);
            async move {
                std::future::pending::<()>().await;
                drop(guard);
                Outcome::Done
            }
        })
        .start()
        .expect("a valid worker");
    wait_until(P, "worker a started the message", || async {
        !recorder.invocations().is_empty()
    })
    .await;
    // Let a couple of heartbeats pass, so the crash hits a lease that is being renewed.
    tokio::time::sleep(claim * 2 / 3).await;
    isolated.kill();
    ensure!(
        P,
        fetch(&observer, 1).await.is_empty(),
        "the crashed worker's message was claimable at once (handed back, not crashed?)"
    );
    let peer = start::<F>(
        config(f, 1),
        r.remove(0),
        &recorder,
        1,
        Duration::ZERO,
        done,
    );
    wait_until(P, "worker b completed the message", || async {
        stream_len(&observer).await == 0
    })
    .await;
    // Give a stray second invocation or ack the chance to show.
    tokio::time::sleep(POLL * 4).await;
    let report = peer.shutdown(Duration::from_secs(2)).await;
    let invocations = recorder.invocations_of(7);
    ensure!(
        P,
        invocations.len() == 2 && invocations[0].worker == 0 && invocations[1].worker == 1,
        "expected one invocation on a then one on b, got {invocations:?}"
    );
    ensure!(
        P,
        invocations[0].delivery_count == 1,
        "a's delivery count is {}",
        invocations[0].delivery_count
    );
    ensure!(
        P,
        invocations[1].delivery_count >= 2,
        "b took the message over with delivery count {}",
        invocations[1].delivery_count
    );
    ensure!(
        P,
        report.acked == 1,
        "worker b acked {} messages, 1 expected",
        report.acked
    );
    // Only now: dropping the crashed worker's handle earlier would have asked for a graceful
    // shutdown.
    drop(victim);
}

fn always_pending(_: u64, _: u32) -> Outcome {
    Outcome::Pending
}

/// Shutdown hands back: a message waiting for its re-poll when the worker shuts down is
/// released at once, so a fresh handle fetches it immediately — nothing lost, no claim timeout
/// to wait out.
pub async fn worker_shutdown_hands_back<F: BackendFactory>(f: &F) {
    const P: &str = "worker_shutdown_hands_back";
    let (_, mut r) = open(f, 2).await;
    let fresh = r.remove(1);
    publish_n(&fresh, 7).await;
    let recorder = Recorder::default();
    let config = config(f, 1).repoll_interval(Duration::from_secs(30));
    let worker = start::<F>(
        config,
        r.remove(0),
        &recorder,
        0,
        Duration::ZERO,
        always_pending,
    );
    wait_until(P, "the message ran once and returned Pending", || async {
        recorder.ended() >= 1
    })
    .await;
    let report = worker.shutdown(Duration::from_secs(2)).await;
    ensure!(
        P,
        report.released >= 1,
        "shutdown released {} leases, 1 message was waiting",
        report.released
    );
    let again = fetch(&fresh, 10).await;
    ensure!(
        P,
        again.len() == 1,
        "a fresh handle fetched {} messages right after shutdown, 1 was handed back",
        again.len()
    );
    ensure!(
        P,
        again[0].payload.as_ref() == b"7",
        "a different message came back"
    );
    ensure!(
        P,
        recorder.invocations().len() == 1,
        "the message ran more than once"
    );
}

/// Prefetch hands back: with concurrency 1 and prefetch 3, the worker leases the running
/// message and three more (the backend counts four pending while one has started); shutdown
/// releases the prefetched ones at once, so every message is either acked by the worker or
/// fetched by a fresh handle right after shutdown — none lost, none waiting out a claim
/// timeout — and none ran twice.
pub async fn worker_prefetch_hands_back<F: BackendFactory>(f: &F) {
    const P: &str = "worker_prefetch_hands_back";
    const MESSAGES: u64 = 4;
    let (_, mut r) = open(f, 2).await;
    let fresh = r.remove(1);
    for i in 0..MESSAGES {
        publish_n(&fresh, i).await;
    }
    let recorder = Recorder::default();
    let worker = start::<F>(
        config(f, 1).prefetch(3),
        r.remove(0),
        &recorder,
        0,
        Duration::from_millis(1500),
        done,
    );
    wait_until(P, "one message running and all four leased", || async {
        !recorder.invocations().is_empty() && pending(&fresh).await == MESSAGES
    })
    .await;
    ensure!(
        P,
        recorder.invocations().len() == 1,
        "{} handlers started with concurrency 1",
        recorder.invocations().len()
    );
    let report = worker.shutdown(Duration::from_secs(5)).await;
    let back = fetch(&fresh, 10).await;
    ensure!(
        P,
        report.acked + back.len() as u64 == MESSAGES,
        "{} acked and {} fetched right after shutdown, of {MESSAGES}",
        report.acked,
        back.len()
    );
    let record = recorder.lock();
    ensure!(P, record.max_same == 1, "a message ran twice at once");
    let ran: Vec<u64> = record.invocations.iter().map(|r| r.message).collect();
    for message in &back {
        let n: u64 = std::str::from_utf8(message.payload.as_ref())
            .ok()
            .and_then(|s| s.parse().ok())
            .expect("a published number");
        ensure!(
            P,
            !ran.contains(&n),
            "message {n} ran and was handed back (invocations: {ran:?})"
        );
    }
}

/// `consume()` compatibility: `true` acks the message; `false` keeps it for the next
/// `consume`; an empty stream returns `false`.
pub async fn consume_compat<F: BackendFactory>(f: &F) {
    const P: &str = "consume_compat";
    let (_, r) = open(f, 1).await;
    let a = &r[0];
    let json = Json::<u64>::default();
    ensure!(
        P,
        !leasehold_tokio::consume(a, &json, |_: u64| true)
            .await
            .expect("consume failed"),
        "consume on an empty stream returned true"
    );
    publish_n(a, 1).await;
    publish_n(a, 2).await;
    let mut seen = None;
    let consumed = leasehold_tokio::consume(a, &json, |m: u64| {
        seen = Some(m);
        true
    })
    .await
    .expect("consume failed");
    ensure!(P, consumed && seen == Some(1), "consume took {seen:?}");
    ensure!(P, stream_len(a).await == 1, "consume → true did not ack");
    let mut kept = None;
    let consumed = leasehold_tokio::consume(a, &json, |m: u64| {
        kept = Some(m);
        false
    })
    .await
    .expect("consume failed");
    ensure!(P, consumed && kept == Some(2), "consume took {kept:?}");
    ensure!(
        P,
        stream_len(a).await == 1,
        "consume → false removed the message"
    );
    let mut again = None;
    let consumed = leasehold_tokio::consume(a, &json, |m: u64| {
        again = Some(m);
        true
    })
    .await
    .expect("consume failed");
    ensure!(
        P,
        consumed && again == Some(2),
        "the next consume after false got {again:?}, not the kept message"
    );
    ensure!(P, stream_len(a).await == 0, "consume → true did not ack");
}
