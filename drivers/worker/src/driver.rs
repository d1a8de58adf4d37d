//! The driver loop, written once: it owns the engine, executes its effects as concurrent tasks,
//! feeds their results back, and sleeps until the engine's next timeout.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::hash::{BuildHasherDefault, Hasher};
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use futures::channel::oneshot;
use futures::future::{select, Either};
use futures::FutureExt;
use leasehold_core::{
    Backend, BackendError, BackendResult, Effect, InvocationId, LeaseEngine, LeaseId, LeaseRef,
    RenewId, SettleResult, StreamId,
};

use crate::cancel::Cancellation;
use crate::dispatch::{Dispatch, Invocation};
use crate::event::Event;
use crate::inbox::Inbox;
use crate::report::ShutdownReport;
use crate::runtime::Runtime;

/// One stream served by the worker.
pub(crate) struct Stream<B: Backend> {
    pub(crate) name: Arc<str>,
    pub(crate) backend: Arc<B>,
    /// Starts its handler's tasks.
    pub(crate) dispatch: Arc<dyn Dispatch<B::Payload>>,
}

/// Loop turns without awaiting after which the driver yields to the executor.
const YIELD_EVERY: usize = 64;

/// Completes on its second poll: lets the executor run other tasks.
async fn yield_now() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if std::mem::replace(&mut yielded, true) {
            std::task::Poll::Ready(())
        } else {
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        }
    })
    .await;
}

/// Tunables of the driver itself (the engine has its own config).
#[derive(Debug, Clone, Copy)]
pub(crate) struct DriverOptions {
    /// Bound on one backend call (a fetch gets its `wait` on top).
    pub(crate) call_timeout: Duration,
}

/// A hasher for the driver's invocation ids (a few small integers, never chosen by anyone
/// outside the engine): one multiply per word (FxHash) instead of SipHash.
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.write_u64(u64::from(byte));
        }
    }

    fn write_u32(&mut self, word: u32) {
        self.write_u64(u64::from(word));
    }

    fn write_u64(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// The cancellation (which carries the lease's validity) of each running invocation.
type Invocations = HashMap<InvocationId, Cancellation, BuildHasherDefault<IdHasher>>;

/// The timer the driver sleeps on, and the deadline it was armed for.
type Timer = (Instant, Pin<Box<dyn Future<Output = ()> + Send>>);

pub(crate) struct Driver<R: Runtime, B: Backend> {
    rt: R,
    engine: LeaseEngine<B::Payload>,
    streams: Vec<Stream<B>>,
    inbox: Arc<Inbox<Event<B::Payload>>>,
    /// Results of backend calls that completed in place: handled like posted events, without
    /// a trip through the inbox.
    ready: Vec<Event<B::Payload>>,
    invocations: Invocations,
    /// Per stream, dropping it abandons the fetch in flight.
    fetch_abandon: Vec<Option<oneshot::Sender<()>>>,
    /// Per stream: `Some` while an ack call is in flight, holding the acks due meanwhile.
    acks_waiting: Vec<Option<Vec<LeaseId>>>,
    waiters: Vec<oneshot::Sender<ShutdownReport>>,
    options: DriverOptions,
    /// Kept across waits while the engine's next deadline is not earlier: arming a timer for
    /// every wait would cost a timer registration per burst of events.
    timer: Option<Timer>,
    base: Instant,
    drained: bool,
}

impl<R: Runtime, B: Backend> Driver<R, B> {
    /// A driver for `engine` over `streams`; `base` is the instant the handlers' lease
    /// validity is measured from (their [`Env`](crate::dispatch::Env)'s).
    pub(crate) fn new(
        rt: R,
        engine: LeaseEngine<B::Payload>,
        streams: Vec<Stream<B>>,
        inbox: Arc<Inbox<Event<B::Payload>>>,
        options: DriverOptions,
        base: Instant,
    ) -> Self {
        let fetch_abandon = std::iter::repeat_with(|| None)
            .take(streams.len())
            .collect();
        let acks_waiting = std::iter::repeat_with(|| None)
            .take(streams.len())
            .collect();
        Self {
            rt,
            engine,
            streams,
            inbox,
            ready: Vec::new(),
            invocations: Invocations::default(),
            fetch_abandon,
            acks_waiting,
            waiters: Vec::new(),
            options,
            timer: None,
            base,
            drained: false,
        }
    }

    /// Runs until shutdown has drained every lease.
    pub(crate) async fn run(mut self) {
        // Events taken from the inbox in one go; swapped with the inbox's own vector, so both
        // keep their capacity and taking a burst allocates nothing.
        let mut burst: Vec<Event<B::Payload>> = Vec::new();
        let mut busy = 0usize;
        loop {
            self.execute();
            if self.drained {
                let report = ShutdownReport::from(*self.engine.stats());
                for waiter in self.waiters.drain(..) {
                    let _ = waiter.send(report);
                }
                return;
            }
            // Both, always: in-place results must not keep posted events waiting.
            let took = self.inbox.try_take(&mut burst);
            let woke = if took || !self.ready.is_empty() {
                // Something is ready already: no timer needed, but let other tasks run now
                // and then, since calls completing in place keep this loop busy.
                busy += 1;
                if busy.is_multiple_of(YIELD_EVERY) {
                    yield_now().await;
                }
                true
            } else {
                self.arm_timer();
                let inbox = &self.inbox;
                let timer = &mut self.timer;
                let woke = std::future::poll_fn(|cx| {
                    if inbox.poll_take(cx, &mut burst).is_ready() {
                        return Poll::Ready(true);
                    }
                    match timer {
                        Some((_, sleep)) => sleep.as_mut().poll(cx).map(|()| false),
                        None => Poll::Pending,
                    }
                })
                .await;
                if woke {
                    // Handlers that finish together wake the driver at the first outcome. Let
                    // the others (queued behind it on this thread, or running on another) post
                    // theirs first: a burst costs one pass through the engine, one ack and one
                    // fetch, where taking outcomes one by one would cost a fetch and a
                    // thread hand-off per message. Stop as soon as a pass brings nothing new.
                    while burst.len() < self.invocations.len() {
                        let before = burst.len();
                        yield_now().await;
                        self.inbox.take_more(&mut burst);
                        if burst.len() == before {
                            break;
                        }
                    }
                }
                woke
            };
            if woke {
                // Feed everything that came before draining effects: the engine then sends one
                // ack batch and one fetch sized for all the slots the burst freed.
                let now = self.rt.now();
                let mut ready = std::mem::take(&mut self.ready);
                for event in ready.drain(..).chain(burst.drain(..)) {
                    self.handle(now, event);
                }
                // Keep the capacity, unless handling produced new ready events meanwhile.
                if self.ready.is_empty() {
                    self.ready = ready;
                }
            } else {
                self.timer_fired();
            }
        }
    }

    /// Makes sure a timer fires no later than the engine's next deadline. A timer armed for an
    /// earlier deadline is kept: firing early only costs a look at the engine.
    fn arm_timer(&mut self) {
        let Some(at) = self.engine.poll_timeout() else {
            return;
        };
        if !matches!(&self.timer, Some((armed, _)) if *armed <= at) {
            self.timer = Some((at, Box::pin(self.rt.sleep_until(at))));
        }
    }

    /// The timer fired: feeds the engine a timeout if its deadline has come (a timer armed for
    /// a deadline that has gone away since is just dropped).
    fn timer_fired(&mut self) {
        let Some((armed, _)) = self.timer.take() else {
            return;
        };
        let now = self.rt.now();
        match self.engine.poll_timeout() {
            Some(at) if at <= now || at == armed => self.engine.handle_timeout(now),
            _ => {}
        }
    }

    fn handle(&mut self, now: Instant, event: Event<B::Payload>) {
        match event {
            Event::Fetched(stream, Ok(messages)) => {
                self.engine.handle_fetched(now, stream, messages);
            }
            Event::Fetched(stream, Err(error)) => {
                tracing::warn!(stream = %self.streams[usize::from(stream.0)].name, %error, "fetch failed");
                self.engine.handle_fetch_failed(now, stream);
            }
            Event::Outcome(invocation, outcome) => {
                self.invocations.remove(&invocation);
                self.engine.handle_outcome(now, invocation, outcome);
            }
            Event::Renewed(batch, Ok(results)) => {
                self.engine.handle_renewed(now, batch, results);
                for (id, cancellation) in &self.invocations {
                    cancellation.set_valid_until(self.base, self.engine.valid_until(id.lease()));
                }
            }
            Event::Renewed(batch, Err(error)) => {
                tracing::warn!(%error, "renew failed");
                self.engine.handle_renew_failed(now, batch);
            }
            Event::Acked(stream, leases, results) => {
                match results {
                    Some(results) => self
                        .engine
                        .handle_acked(now, leases.into_iter().zip(results)),
                    None => self
                        .engine
                        .handle_acked(now, leases.into_iter().map(|id| (id, SettleResult::Failed))),
                }
                // The stream's ack call is back: send what came due meanwhile as one batch.
                let waiting = &mut self.acks_waiting[usize::from(stream.0)];
                match waiting.take() {
                    Some(leases) if !leases.is_empty() => self.send_acks(stream, leases),
                    _ => {}
                }
            }
            Event::Released(lease, result) => self.engine.handle_released(now, lease, result),
            Event::DeadLettered(lease, result) => {
                self.engine.handle_dead_lettered(now, lease, result)
            }
            Event::Shutdown(grace, reply) => {
                self.waiters.extend(reply);
                self.engine.handle_shutdown(now, now + grace);
                // No more fetches are needed: stop the ones waiting for new entries.
                self.fetch_abandon
                    .iter_mut()
                    .for_each(|abandon| drop(abandon.take()));
            }
            Event::Stats(reply) => {
                let _ = reply.send(*self.engine.stats());
            }
        }
    }

    /// Executes every pending effect.
    fn execute(&mut self) {
        while let Some(effect) = self.engine.poll_effect() {
            match effect {
                Effect::Fetch { stream, max, wait } => self.fetch(stream, max, wait),
                Effect::Run { invocation, lease } => self.run_handler(invocation, lease),
                Effect::Cancel { invocation, reason } => {
                    if let Some(cancellation) = self.invocations.get(&invocation) {
                        cancellation.cancel(reason);
                    }
                }
                Effect::Renew { batch, leases } => self.renew(batch, leases),
                Effect::Ack { leases } => self.ack(leases),
                Effect::Release { lease, delay } => self.release(lease, delay),
                Effect::DeadLetter { lease, reason } => {
                    let Some((stream, lease_ref)) = self.resolve(lease) else {
                        continue;
                    };
                    let backend = self.backend(stream);
                    let call = async move { backend.dead_letter(&lease_ref, &reason).await };
                    self.call(call, move |result| {
                        Event::DeadLettered(lease, result.unwrap_or(SettleResult::Failed))
                    });
                }
                Effect::Drained => self.drained = true,
            }
        }
    }

    fn backend(&self, stream: StreamId) -> Arc<B> {
        self.streams[usize::from(stream.0)].backend.clone()
    }

    /// The leases the engine still knows, grouped by stream (in stream order), with their
    /// backend references.
    fn by_stream(&self, leases: Vec<LeaseId>) -> Vec<(StreamId, Vec<LeaseId>, Vec<LeaseRef>)> {
        if self.streams.len() == 1 {
            let (mut ids, mut refs) = (Vec::with_capacity(leases.len()), Vec::new());
            refs.reserve_exact(leases.len());
            for id in leases {
                if let Some((_, lease_ref)) = self.resolve(id) {
                    ids.push(id);
                    refs.push(lease_ref);
                }
            }
            return if ids.is_empty() {
                Vec::new()
            } else {
                vec![(StreamId(0), ids, refs)]
            };
        }
        let mut groups: BTreeMap<StreamId, (Vec<LeaseId>, Vec<LeaseRef>)> = BTreeMap::new();
        for id in leases {
            if let Some((stream, lease_ref)) = self.resolve(id) {
                let (ids, refs) = groups.entry(stream).or_default();
                ids.push(id);
                refs.push(lease_ref);
            }
        }
        groups
            .into_iter()
            .map(|(stream, (ids, refs))| (stream, ids, refs))
            .collect()
    }

    fn resolve(&self, lease: LeaseId) -> Option<(StreamId, LeaseRef)> {
        let lease = self.engine.lease(lease)?;
        Some((lease.stream(), lease.lease_ref()))
    }

    /// Runs a backend call bounded by the call timeout; its result becomes an event.
    fn call<T: Send + 'static>(
        &mut self,
        call: impl Future<Output = BackendResult<T>> + Send + 'static,
        event: impl FnOnce(BackendResult<T>) -> Event<B::Payload> + Send + 'static,
    ) {
        // Poll once in place: a call that completes at once (an in-memory backend, an answer
        // already buffered) costs no task, no timer and no trip through the inbox.
        let mut call = Box::pin(call);
        match call.as_mut().now_or_never() {
            Some(result) => self.ready.push(event(result)),
            None => self.spawn_call(self.options.call_timeout, call, event),
        }
    }

    /// Spawns a call that did not complete in place, bounded by `timeout`.
    fn spawn_call<T: Send + 'static>(
        &self,
        timeout: Duration,
        call: Pin<Box<impl Future<Output = BackendResult<T>> + Send + 'static>>,
        event: impl FnOnce(BackendResult<T>) -> Event<B::Payload> + Send + 'static,
    ) {
        let (rt, inbox) = (self.rt.clone(), self.inbox.clone());
        self.rt.spawn(Box::pin(async move {
            let deadline = rt.sleep_until(rt.now() + timeout);
            let result = match select(call, pin!(deadline)).await {
                Either::Left((result, _)) => result,
                Either::Right(_) => Err(BackendError::transient(format!(
                    "backend call timed out after {timeout:?}"
                ))),
            };
            // The driver may be gone after shutdown; then nobody needs the result.
            let _ = inbox.send(event(result));
        }));
    }

    /// Fetches; a fetch that does not complete in place runs in a task that shutdown can
    /// abandon: a fetch blocked waiting for new entries must not hold shutdown up, and dropping
    /// it loses nothing (the `Backend::fetch` contract).
    fn fetch(&mut self, stream: StreamId, max: usize, wait: Duration) {
        let backend = self.backend(stream);
        let mut fetch = Box::pin(async move { backend.fetch(max, wait).await });
        if let Some(result) = fetch.as_mut().now_or_never() {
            self.ready.push(Event::Fetched(stream, result));
            return;
        }
        let (abandon, abandoned) = oneshot::channel::<()>();
        self.fetch_abandon[usize::from(stream.0)] = Some(abandon);
        self.spawn_call(
            wait + self.options.call_timeout,
            Box::pin(async move {
                match select(fetch, abandoned).await {
                    Either::Left((result, _)) => result,
                    Either::Right(_) => Err(BackendError::transient("fetch abandoned at shutdown")),
                }
            }),
            move |result| Event::Fetched(stream, result),
        );
    }

    fn run_handler(&mut self, invocation: InvocationId, lease_id: LeaseId) {
        let Some(lease) = self.engine.lease(lease_id) else {
            return;
        };
        let stream = usize::from(lease.stream().0);
        let cancellation = Cancellation::new();
        cancellation.set_valid_until(self.base, self.engine.valid_until(lease_id));
        let handed = Invocation {
            id: invocation,
            message_id: lease.message_id().clone(),
            delivery_count: lease.delivery_count(),
            attempt: lease.attempt(),
            fence: lease.fence(),
            cancellation: cancellation.clone(),
        };
        let payload = lease.payload().clone();
        self.invocations.insert(invocation, cancellation);
        Arc::clone(&self.streams[stream].dispatch).dispatch(payload, handed);
    }

    fn renew(&mut self, batch: RenewId, leases: Vec<LeaseId>) {
        let calls: Vec<_> = self
            .by_stream(leases)
            .into_iter()
            .map(|(stream, ids, refs)| {
                let backend = self.backend(stream);
                async move {
                    let results = backend.renew(&refs).await?;
                    Ok::<_, BackendError>(ids.into_iter().zip(results).collect::<Vec<_>>())
                }
            })
            .collect();
        // Streams answer independently: a failed one leaves its leases out (they keep their
        // state); only when every stream failed is the batch reported failed.
        let call = async move {
            let mut merged = Vec::new();
            let mut last_error = None;
            for result in futures::future::join_all(calls).await {
                match result {
                    Ok(results) => merged.extend(results),
                    Err(error) => last_error = Some(error),
                }
            }
            match last_error {
                Some(error) if merged.is_empty() => Err(error),
                _ => Ok(merged),
            }
        };
        self.call(call, move |result| Event::Renewed(batch, result));
    }

    /// Acks, batched per stream: while a stream's ack call is in flight, acks that come due
    /// wait and go out together when it returns (at most one round trip later), so a backend
    /// whose calls take a round trip gets batches instead of one call per message.
    fn ack(&mut self, leases: Vec<LeaseId>) {
        if self.streams.len() == 1 {
            // One stream: every lease is its; `send_acks` drops any the engine forgot.
            self.ack_stream(StreamId(0), leases);
            return;
        }
        let mut groups: Vec<Vec<LeaseId>> = vec![Vec::new(); self.streams.len()];
        for id in leases {
            if let Some(lease) = self.engine.lease(id) {
                groups[usize::from(lease.stream().0)].push(id);
            }
        }
        for (stream, leases) in groups.into_iter().enumerate() {
            if !leases.is_empty() {
                let stream = StreamId(u16::try_from(stream).expect("at most 65535 streams"));
                self.ack_stream(stream, leases);
            }
        }
    }

    fn ack_stream(&mut self, stream: StreamId, leases: Vec<LeaseId>) {
        match &mut self.acks_waiting[usize::from(stream.0)] {
            Some(waiting) => waiting.extend(leases),
            slot @ None => {
                *slot = Some(Vec::new());
                self.send_acks(stream, leases);
            }
        }
    }

    /// One ack call for `leases` of `stream`; marks the stream's ack call in flight. Leases
    /// the engine no longer knows are left out.
    fn send_acks(&mut self, stream: StreamId, mut leases: Vec<LeaseId>) {
        let mut refs = Vec::with_capacity(leases.len());
        leases.retain(|&id| match self.engine.lease(id) {
            Some(lease) if lease.stream() == stream => {
                refs.push(lease.lease_ref());
                true
            }
            _ => false,
        });
        if leases.is_empty() {
            self.acks_waiting[usize::from(stream.0)] = None;
            return;
        }
        self.acks_waiting[usize::from(stream.0)].get_or_insert_with(Vec::new);
        let backend = self.backend(stream);
        self.call(async move { backend.ack(&refs).await }, move |result| {
            Event::Acked(stream, leases, result.ok())
        });
    }

    fn release(&mut self, lease: LeaseId, delay: Duration) {
        let Some((stream, lease_ref)) = self.resolve(lease) else {
            return;
        };
        let backend = self.backend(stream);
        self.call(
            async move { backend.release(&lease_ref, delay).await },
            move |result| Event::Released(lease, result.unwrap_or(SettleResult::Failed)),
        );
    }
}

impl<R: Runtime, B: Backend> Drop for Driver<R, B> {
    fn drop(&mut self) {
        // Later posts fail (a worker handle then knows the driver is gone), and replies still
        // waiting in the inbox are dropped, which answers their callers.
        drop(self.inbox.close());
    }
}
