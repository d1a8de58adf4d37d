//! The adaptive prefetch (the default configuration) does not hoard: two real workers share one
//! memory stream on virtual time; quick handlers first (they make both fetch ahead), then a few
//! long ones. No long job waits in one worker, fetched and not started, while the other worker
//! has a free slot for longer than one fetch round trip.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use leasehold_core::{
    Backend, BackendResult, DeadLetterReason, Fetched, LeaseRef, MessageId, RenewResult,
    SettleResult, Undeliverable,
};
use leasehold_memory::{MemoryStream, StreamConfig};
use leasehold_sim::rng::Rng;
use leasehold_sim::runtime::{SimRuntime, World};
use leasehold_worker::{Config, Delivery, Outcome, Runtime, WorkerBuilder};

const MS: Duration = Duration::from_millis(1);
/// Each fetch takes this long, there and back.
const RTT: Duration = Duration::from_millis(2);
const CONCURRENCY: usize = 4;

/// What happened, on virtual time.
#[derive(Default)]
struct Record {
    /// Per worker, every change of its running count: (instant, running after it).
    running: [Vec<(Instant, usize)>; 2],
    /// Per message: (worker, fetched at, started at).
    waits: Vec<(usize, MessageId, Instant, Option<Instant>)>,
    /// Per worker, the size of every fetch answered with something.
    fetched: [Vec<usize>; 2],
}

type Shared = Arc<Mutex<Record>>;

/// A backend whose fetch takes one round trip; it notes what each fetch brought, and when.
struct Slow<B> {
    inner: B,
    rt: SimRuntime,
    worker: usize,
    record: Shared,
}

impl<B: Backend> Backend for Slow<B> {
    type Payload = B::Payload;

    async fn publish(&self, payload: Self::Payload) -> BackendResult<MessageId> {
        self.inner.publish(payload).await
    }
    fn claim_timeout(&self) -> Option<Duration> {
        self.inner.claim_timeout()
    }
    fn enqueued_at(&self, id: &MessageId) -> Option<SystemTime> {
        self.inner.enqueued_at(id)
    }
    fn take_undeliverable(&self) -> Vec<Undeliverable> {
        self.inner.take_undeliverable()
    }
    fn next_due(&self) -> Option<Duration> {
        self.inner.next_due()
    }
    async fn fetch(&self, max: usize, wait: Duration) -> BackendResult<Vec<Fetched<B::Payload>>> {
        let rt = &self.rt;
        rt.sleep_until(rt.now() + RTT / 2).await;
        let fetched = self.inner.fetch(max, wait).await?;
        rt.sleep_until(rt.now() + RTT / 2).await;
        let now = rt.now();
        let mut record = self.record.lock().unwrap();
        if !fetched.is_empty() {
            record.fetched[self.worker].push(fetched.len());
        }
        for message in &fetched {
            record
                .waits
                .push((self.worker, message.id.clone(), now, None));
        }
        Ok(fetched)
    }
    async fn renew(&self, lease_refs: &[LeaseRef]) -> BackendResult<Vec<RenewResult>> {
        self.inner.renew(lease_refs).await
    }
    async fn ack(&self, lease_refs: &[LeaseRef]) -> BackendResult<Vec<SettleResult>> {
        self.inner.ack(lease_refs).await
    }
    async fn release(&self, lease_ref: &LeaseRef, delay: Duration) -> BackendResult<SettleResult> {
        self.inner.release(lease_ref, delay).await
    }
    async fn dead_letter(
        &self,
        lease_ref: &LeaseRef,
        reason: &DeadLetterReason,
    ) -> BackendResult<SettleResult> {
        self.inner.dead_letter(lease_ref, reason).await
    }
    async fn stream_len(&self) -> BackendResult<u64> {
        self.inner.stream_len().await
    }
    async fn pending(&self) -> BackendResult<u64> {
        self.inner.pending().await
    }
}

/// Whether worker `w` had a free slot at some instant of `from..to` (its running count as
/// recorded, changes included).
fn free_during(record: &Record, w: usize, from: Instant, to: Instant) -> Option<Instant> {
    let changes = &record.running[w];
    let at_from = changes
        .iter()
        .take_while(|(at, _)| *at <= from)
        .last()
        .map_or(0, |(_, n)| *n);
    if at_from < CONCURRENCY {
        return Some(from);
    }
    changes
        .iter()
        .find(|(at, n)| *at > from && *at < to && *n < CONCURRENCY)
        .map(|(at, _)| *at)
}

fn run(seed: u64) -> (Record, Instant, Instant) {
    let mut world = World::<()>::new(Instant::now(), Rng::new(seed));
    let stream =
        MemoryStream::with_clock(StreamConfig::new(Duration::from_secs(10)), world.clock())
            .expect("a valid stream");
    let record: Shared = Shared::default();
    let mut workers = Vec::new();
    for w in 0..2 {
        let node = world.new_node();
        let rt = world.runtime(node);
        let backend = Slow {
            inner: stream.consumer(&format!("worker-{w}")).expect("a consumer"),
            rt: rt.clone(),
            worker: w,
            record: record.clone(),
        };
        let (handler_rt, r) = (rt.clone(), record.clone());
        let worker = WorkerBuilder::new(rt)
            // The defaults: the prefetch adapts. A short poll, so idle workers look often.
            .config(
                Config::default()
                    .concurrency(CONCURRENCY)
                    .poll_interval(20 * MS),
            )
            .stream(
                "s",
                backend,
                move |delivery: Delivery<serde_json::Value>| {
                    let (rt, record) = (handler_rt.clone(), r.clone());
                    async move {
                        let took = MS * delivery.message()["ms"].as_u64().expect("ms") as u32;
                        let change = |delta: isize| {
                            let mut record = record.lock().unwrap();
                            let now = rt.now();
                            let last = record.running[w].last().map_or(0, |(_, n)| *n);
                            let n = last.checked_add_signed(delta).expect("counted");
                            record.running[w].push((now, n));
                            if delta > 0 {
                                let id = delivery.message_id();
                                let wait = record
                                    .waits
                                    .iter_mut()
                                    .rev()
                                    .find(|(by, m, _, started)| {
                                        *by == w && m == id && started.is_none()
                                    })
                                    .expect("fetched before it runs");
                                wait.3 = Some(now);
                            }
                        };
                        change(1);
                        rt.sleep_until(rt.now() + took).await;
                        change(-1);
                        Outcome::Done
                    }
                },
            )
            .start()
            .expect("the worker starts");
        workers.push((node, worker));
    }
    let publish = |n: u64, ms: u64| {
        stream.publish(serde_json::to_vec(&serde_json::json!({ "n": n, "ms": ms })).unwrap());
    };
    // Quick handlers: 400 of 1 ms, a fetch round trip of 2 ms. Each worker fetches ahead.
    for n in 0..400 {
        publish(n, 1);
    }
    let mut steps = 0u64;
    let mut step_until = |world: &mut World<()>, done: &dyn Fn() -> bool| {
        while !done() {
            let _ = world.step().expect("no busy loop");
            steps += 1;
            assert!(steps < 2_000_000, "the run never ended");
        }
    };
    step_until(&mut world, &|| stream.is_empty());
    let quiet = world.now() + Duration::from_millis(100);
    step_until(&mut world, &|| world_now_after(&stream, quiet));
    // Then a few long jobs: six of 1 s, for eight slots in all.
    let long_from = world.now();
    for n in 400..406 {
        publish(n, 1000);
    }
    step_until(&mut world, &|| stream.is_empty());
    let end = world.now();
    for (node, worker) in workers {
        let mut shutdown = world.spawn(node, worker.shutdown(Duration::from_secs(5)));
        while shutdown.try_take().is_none() {
            let _ = world.step().expect("no busy loop");
        }
    }
    let record = Arc::try_unwrap(record)
        .ok()
        .expect("the workers are gone")
        .into_inner()
        .unwrap();
    (record, long_from, end)
}

/// The stream's clock has reached `at` (the memory stream runs on the world's clock).
fn world_now_after(stream: &MemoryStream, at: Instant) -> bool {
    stream.now() >= at
}

#[test]
fn adaptive_defaults_do_not_hoard_long_jobs() {
    for seed in [1, 2, 3] {
        let (record, long_from, _) = run(seed);
        // The quick phase fetched ahead (else this test would show nothing).
        let most = record.fetched.iter().flatten().max().copied().unwrap_or(0);
        assert!(
            most > CONCURRENCY,
            "seed {seed}: quick handlers should make a worker fetch beyond its {CONCURRENCY} \
             slots; largest fetch {most}"
        );
        let mut long_started = [0, 0];
        for (w, id, fetched, started) in &record.waits {
            let started = started.unwrap_or_else(|| panic!("seed {seed}: {id} never started"));
            if *fetched < long_from {
                // Quick jobs fetched ahead wait about two round trips by design.
                continue;
            }
            long_started[*w] += 1;
            // Waiting in worker `w` past one round trip while the other had a free slot.
            let late = *fetched + RTT;
            if started > late {
                if let Some(at) = free_during(&record, 1 - w, late, started) {
                    panic!(
                        "seed {seed}: {id} waited in worker {w} from {:?} to {:?} while worker \
                         {} had a free slot at {:?}",
                        *fetched - long_from,
                        started - long_from,
                        1 - w,
                        at.saturating_duration_since(long_from)
                    );
                }
            }
        }
        assert_eq!(
            long_started.iter().sum::<usize>(),
            6,
            "seed {seed}: {long_started:?}"
        );
    }
}
