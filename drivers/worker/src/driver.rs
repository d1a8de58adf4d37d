//! The driver loop, written once: it owns the engine, executes its effects as concurrent tasks,
//! feeds their results back, and sleeps until the engine's next timeout.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::channel::{mpsc, oneshot};
use futures::future::{select, Either};
use futures::{FutureExt, StreamExt};
use leasehold_core::{
    Backend, BackendError, BackendResult, Effect, Fetched, InvocationId, LeaseEngine, LeaseId,
    LeaseRef, Outcome, RenewId, RenewResult, SettleResult, SourceId, Stats,
};

use crate::cancel::Cancellation;
use crate::delivery::{Clock, Meta, Validity};
use crate::runtime::Runtime;
use crate::worker::ShutdownReport;

/// A type-erased handler: decodes the payload and runs the user's function.
pub(crate) type ErasedHandler<P> =
    Arc<dyn Fn(P, Meta) -> Pin<Box<dyn Future<Output = Outcome> + Send>> + Send + Sync>;

/// One stream served by the worker.
pub(crate) struct Stream<B: Backend> {
    pub(crate) name: Arc<str>,
    pub(crate) backend: Arc<B>,
    pub(crate) handler: ErasedHandler<B::Payload>,
}

/// Everything that reaches the driver: results of the tasks it spawned, and commands.
pub(crate) enum Event<P> {
    Fetched(SourceId, BackendResult<Vec<Fetched<P>>>),
    Outcome(InvocationId, Outcome),
    Renewed(RenewId, BackendResult<Vec<(LeaseId, RenewResult)>>),
    Acked(SourceId, Vec<(LeaseId, SettleResult)>),
    Released(LeaseId, SettleResult),
    DeadLettered(LeaseId, SettleResult),
    Shutdown(Duration, Option<oneshot::Sender<ShutdownReport>>),
    Stats(oneshot::Sender<Stats>),
}

/// Most events handled before effects are executed, so one busy burst cannot starve dispatch.
const MAX_BURST: usize = 1024;

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
    /// How long a cancelled handler may take to finish before its future is dropped.
    pub(crate) cancel_grace: Duration,
    /// Bound on one backend call (a fetch gets its `wait` on top).
    pub(crate) call_timeout: Duration,
}

struct Invocation {
    cancellation: Cancellation,
    validity: Arc<Validity>,
}

pub(crate) struct Driver<R: Runtime, B: Backend> {
    rt: R,
    engine: LeaseEngine<B::Payload>,
    streams: Arc<[Stream<B>]>,
    tx: mpsc::UnboundedSender<Event<B::Payload>>,
    rx: mpsc::UnboundedReceiver<Event<B::Payload>>,
    invocations: HashMap<InvocationId, Invocation>,
    /// Per source, dropping it abandons the fetch in flight.
    fetch_abandon: Vec<Option<oneshot::Sender<()>>>,
    /// Per source: `Some` while an ack call is in flight, holding the acks due meanwhile.
    acks_waiting: Vec<Option<Vec<LeaseId>>>,
    waiters: Vec<oneshot::Sender<ShutdownReport>>,
    options: DriverOptions,
    clock: Clock,
    base: Instant,
    drained: bool,
}

impl<R: Runtime, B: Backend> Driver<R, B> {
    pub(crate) fn new(
        rt: R,
        engine: LeaseEngine<B::Payload>,
        streams: Vec<Stream<B>>,
        tx: mpsc::UnboundedSender<Event<B::Payload>>,
        rx: mpsc::UnboundedReceiver<Event<B::Payload>>,
        options: DriverOptions,
    ) -> Self {
        let clock_rt = rt.clone();
        let base = rt.now();
        let fetch_abandon = std::iter::repeat_with(|| None)
            .take(streams.len())
            .collect();
        let acks_waiting = std::iter::repeat_with(|| None)
            .take(streams.len())
            .collect();
        Self {
            clock: Arc::new(move || clock_rt.now()),
            rt,
            engine,
            streams: streams.into(),
            tx,
            rx,
            invocations: HashMap::new(),
            fetch_abandon,
            acks_waiting,
            waiters: Vec::new(),
            options,
            base,
            drained: false,
        }
    }

    /// Runs until shutdown has drained every lease.
    pub(crate) async fn run(mut self) {
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
            let wake = match self.rx.try_recv() {
                // Something is ready already: no timer needed, but let other tasks run now
                // and then, since calls completing in place keep this loop busy.
                Ok(event) => {
                    busy += 1;
                    if busy % YIELD_EVERY == 0 {
                        yield_now().await;
                    }
                    Some(event)
                }
                Err(_) => {
                    let next = self.rx.next();
                    match self.engine.poll_timeout() {
                        Some(at) => match select(next, pin!(self.rt.sleep_until(at))).await {
                            Either::Left((event, _)) => event,
                            Either::Right(_) => None,
                        },
                        None => next.await,
                    }
                }
            };
            match wake {
                None => self.engine.handle_timeout(self.rt.now()),
                Some(event) => {
                    self.handle(event);
                    // Feed everything already waiting before draining effects: the engine then
                    // sends one ack batch and one fetch sized for all the slots the burst freed.
                    for _ in 1..MAX_BURST {
                        let Ok(event) = self.rx.try_recv() else { break };
                        self.handle(event);
                    }
                }
            }
        }
    }

    fn handle(&mut self, event: Event<B::Payload>) {
        let now = self.rt.now();
        match event {
            Event::Fetched(source, Ok(messages)) => {
                self.engine.handle_fetched(now, source, messages);
            }
            Event::Fetched(source, Err(error)) => {
                tracing::warn!(stream = %self.streams[usize::from(source.0)].name, %error, "fetch failed");
                self.engine.handle_fetch_failed(now, source);
            }
            Event::Outcome(invocation, outcome) => {
                self.invocations.remove(&invocation);
                self.engine.handle_outcome(now, invocation, outcome);
            }
            Event::Renewed(batch, Ok(results)) => {
                self.engine.handle_renewed(now, batch, results);
                for (id, invocation) in &self.invocations {
                    invocation.validity.set(self.engine.valid_until(id.lease()));
                }
            }
            Event::Renewed(batch, Err(error)) => {
                tracing::warn!(%error, "renew failed");
                self.engine.handle_renew_failed(now, batch);
            }
            Event::Acked(source, results) => {
                self.engine.handle_acked(now, results);
                // The stream's ack call is back: send what came due meanwhile as one batch.
                let waiting = &mut self.acks_waiting[usize::from(source.0)];
                match waiting.take() {
                    Some(leases) if !leases.is_empty() => self.send_acks(source, leases),
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
                Effect::Fetch { source, max, wait } => self.fetch(source, max, wait),
                Effect::Run { invocation, lease } => self.run_handler(invocation, lease),
                Effect::Cancel { invocation, reason } => {
                    if let Some(running) = self.invocations.get(&invocation) {
                        running.cancellation.cancel(reason);
                    }
                }
                Effect::Renew { batch, leases } => self.renew(batch, leases),
                Effect::Ack { leases } => self.ack(leases),
                Effect::Release { lease, delay } => self.release(lease, delay),
                Effect::DeadLetter { lease, reason } => {
                    let Some((source, lease_ref)) = self.resolve(lease) else {
                        continue;
                    };
                    let backend = self.backend(source);
                    let call = async move { backend.dead_letter(&lease_ref, &reason).await };
                    self.call(call, move |result| {
                        Event::DeadLettered(lease, result.unwrap_or(SettleResult::Failed))
                    });
                }
                Effect::Drained => self.drained = true,
            }
        }
    }

    fn backend(&self, source: SourceId) -> Arc<B> {
        self.streams[usize::from(source.0)].backend.clone()
    }

    /// The leases the engine still knows, grouped by source, with their backend references.
    fn by_source(&self, leases: Vec<LeaseId>) -> BTreeMap<SourceId, (Vec<LeaseId>, Vec<LeaseRef>)> {
        let mut groups: BTreeMap<SourceId, (Vec<LeaseId>, Vec<LeaseRef>)> = BTreeMap::new();
        for id in leases {
            if let Some((source, lease_ref)) = self.resolve(id) {
                let (ids, refs) = groups.entry(source).or_default();
                ids.push(id);
                refs.push(lease_ref);
            }
        }
        groups
    }

    fn resolve(&self, lease: LeaseId) -> Option<(SourceId, LeaseRef)> {
        let lease = self.engine.lease(lease)?;
        let lease_ref = LeaseRef {
            id: lease.message_id().clone(),
            fence: lease.fence(),
        };
        Some((lease.source(), lease_ref))
    }

    /// Spawns a backend call bounded by the call timeout; its result becomes an event.
    fn call<T: Send + 'static>(
        &self,
        call: impl Future<Output = BackendResult<T>> + Send + 'static,
        event: impl FnOnce(BackendResult<T>) -> Event<B::Payload> + Send + 'static,
    ) {
        self.call_within(self.options.call_timeout, call, event);
    }

    fn call_within<T: Send + 'static>(
        &self,
        timeout: Duration,
        call: impl Future<Output = BackendResult<T>> + Send + 'static,
        event: impl FnOnce(BackendResult<T>) -> Event<B::Payload> + Send + 'static,
    ) {
        // Poll once in place: a call that completes at once (an in-memory backend, an answer
        // already buffered) costs no task and no timer, only a message to ourselves.
        let mut call = Box::pin(call);
        if let Some(result) = call.as_mut().now_or_never() {
            let _ = self.tx.unbounded_send(event(result));
            return;
        }
        let (rt, tx) = (self.rt.clone(), self.tx.clone());
        self.rt.spawn(Box::pin(async move {
            let deadline = rt.sleep_until(rt.now() + timeout);
            let result = match select(call, pin!(deadline)).await {
                Either::Left((result, _)) => result,
                Either::Right(_) => Err(BackendError::transient(format!(
                    "backend call timed out after {timeout:?}"
                ))),
            };
            // The driver may be gone after shutdown; then nobody needs the result.
            let _ = tx.unbounded_send(event(result));
        }));
    }

    /// Fetches in a task that shutdown can abandon: a fetch blocked waiting for new entries
    /// must not hold shutdown up, and dropping it loses nothing (the `Backend::fetch` contract).
    fn fetch(&mut self, source: SourceId, max: usize, wait: Duration) {
        let backend = self.backend(source);
        let (abandon, abandoned) = oneshot::channel::<()>();
        self.fetch_abandon[usize::from(source.0)] = Some(abandon);
        self.call_within(
            wait + self.options.call_timeout,
            async move {
                match select(pin!(backend.fetch(max, wait)), abandoned).await {
                    Either::Left((result, _)) => result,
                    Either::Right(_) => Err(BackendError::transient("fetch abandoned at shutdown")),
                }
            },
            move |result| Event::Fetched(source, result),
        );
    }

    fn run_handler(&mut self, invocation: InvocationId, lease_id: LeaseId) {
        let Some(lease) = self.engine.lease(lease_id) else {
            return;
        };
        let stream = &self.streams[usize::from(lease.source().0)];
        let cancellation = Cancellation::new();
        let validity = Arc::new(Validity::new(self.base, self.engine.valid_until(lease_id)));
        let meta = Meta {
            stream: stream.name.clone(),
            id: lease.message_id().clone(),
            delivery_count: lease.delivery_count(),
            attempt: lease.attempt(),
            fence: lease.fence(),
            cancellation: cancellation.clone(),
            validity: validity.clone(),
            clock: self.clock.clone(),
        };
        let payload = lease.payload().clone();
        let handler = stream.handler.clone();
        self.invocations.insert(
            invocation,
            Invocation {
                cancellation: cancellation.clone(),
                validity,
            },
        );
        let (rt, tx, grace) = (self.rt.clone(), self.tx.clone(), self.options.cancel_grace);
        self.rt.spawn(Box::pin(async move {
            let outcome = invoke(rt, handler, payload, meta, cancellation, grace).await;
            let _ = tx.unbounded_send(Event::Outcome(invocation, outcome));
        }));
    }

    fn renew(&self, batch: RenewId, leases: Vec<LeaseId>) {
        let calls: Vec<_> = self
            .by_source(leases)
            .into_iter()
            .map(|(source, (ids, refs))| {
                let backend = self.backend(source);
                async move {
                    let results = backend.renew(&refs).await?;
                    Ok::<_, BackendError>(ids.into_iter().zip(results).collect::<Vec<_>>())
                }
            })
            .collect();
        // Sources answer independently: a failed one leaves its leases out (they keep their
        // state); only when every source failed is the batch reported failed.
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
        for (source, leases) in self.by_source_ids(leases) {
            match &mut self.acks_waiting[usize::from(source.0)] {
                Some(waiting) => waiting.extend(leases),
                slot @ None => {
                    *slot = Some(Vec::new());
                    self.send_acks(source, leases);
                }
            }
        }
    }

    /// One ack call for `leases` of `source`; marks the stream's ack call in flight.
    fn send_acks(&mut self, source: SourceId, leases: Vec<LeaseId>) {
        let Some((_, (ids, refs))) = self.by_source(leases).into_iter().next() else {
            self.acks_waiting[usize::from(source.0)] = None;
            return;
        };
        self.acks_waiting[usize::from(source.0)].get_or_insert_with(Vec::new);
        let backend = self.backend(source);
        let sent = ids.clone();
        self.call(async move { backend.ack(&refs).await }, move |result| {
            Event::Acked(
                source,
                match result {
                    Ok(results) => sent.into_iter().zip(results).collect(),
                    Err(_) => sent
                        .into_iter()
                        .map(|id| (id, SettleResult::Failed))
                        .collect(),
                },
            )
        });
    }

    /// Lease ids grouped by source (leases the engine no longer knows are dropped).
    fn by_source_ids(&self, leases: Vec<LeaseId>) -> BTreeMap<SourceId, Vec<LeaseId>> {
        let mut groups: BTreeMap<SourceId, Vec<LeaseId>> = BTreeMap::new();
        for id in leases {
            if let Some(lease) = self.engine.lease(id) {
                groups.entry(lease.source()).or_default().push(id);
            }
        }
        groups
    }

    fn release(&self, lease: LeaseId, delay: Duration) {
        let Some((source, lease_ref)) = self.resolve(lease) else {
            return;
        };
        let backend = self.backend(source);
        self.call(
            async move { backend.release(&lease_ref, delay).await },
            move |result| Event::Released(lease, result.unwrap_or(SettleResult::Failed)),
        );
    }
}

/// Runs one handler invocation: catches panics, honours cancellation with a grace period.
async fn invoke<R: Runtime, P>(
    rt: R,
    handler: ErasedHandler<P>,
    payload: P,
    meta: Meta,
    cancellation: Cancellation,
    grace: Duration,
) -> Outcome {
    let started = std::panic::catch_unwind(AssertUnwindSafe(|| handler(payload, meta)));
    let future = match started {
        Ok(future) => future,
        Err(panic) => return panicked(panic),
    };
    let mut future = pin!(AssertUnwindSafe(future).catch_unwind());
    // Most handlers finish on their first poll: no need to listen for a cancel then.
    let first = future.as_mut().now_or_never();
    let result = match first {
        Some(result) => result,
        None => match wait_or_cancel(&rt, future, &cancellation, grace).await {
            Ok(result) => result,
            Err(dropped) => return dropped,
        },
    };
    // A cancel that won the race makes the result void, whatever it is.
    if !cancellation.finish() {
        let reason = cancellation.reason().expect("only a cancel beats finish");
        return Outcome::Failed {
            error: format!("cancelled ({reason:?}) before it finished"),
        };
    }
    result.unwrap_or_else(panicked)
}

type Caught = std::thread::Result<Outcome>;

/// Runs the handler to completion unless cancelled; a cancelled handler gets `grace` to stop on
/// its own, then is dropped (`Err` carries the outcome to report for it).
async fn wait_or_cancel<R: Runtime>(
    rt: &R,
    mut future: Pin<&mut impl Future<Output = Caught>>,
    cancellation: &Cancellation,
    grace: Duration,
) -> Result<Caught, Outcome> {
    Ok(
        match select(future.as_mut(), pin!(cancellation.cancelled())).await {
            Either::Left((result, _)) => result,
            Either::Right((reason, _)) => {
                // Give the handler a moment to notice the signal and stop on its own.
                let grace_over = rt.sleep_until(rt.now() + grace);
                match select(future, pin!(grace_over)).await {
                    Either::Left((result, _)) => result,
                    Either::Right(_) => {
                        return Err(Outcome::Failed {
                            error: format!("cancelled ({reason:?}) and dropped after {grace:?}"),
                        })
                    }
                }
            }
        },
    )
}

fn panicked(panic: Box<dyn std::any::Any + Send>) -> Outcome {
    let message = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".into());
    Outcome::Failed {
        error: format!("handler panicked: {message}"),
    }
}
