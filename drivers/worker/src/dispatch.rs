//! Handler tasks. Each stream has a pool of them, started as needed until there is one per
//! invocation in flight at once, and kept while the worker runs. A task takes one invocation at
//! a time from the stream's queue: it decodes the payload, calls the user's function, honours
//! cancellation (with a grace period) and reports the outcome to the driver's inbox, then takes
//! the next.
//!
//! Why a pool and not a task per invocation: handing an invocation to a waiting task is a queue
//! push and a wake, where a spawn is an aligned allocation, a registration with the runtime and
//! a free, often on another thread. Spawning was most of the driver's time per message, and the
//! driver is the serial part of a worker.
//!
//! Why the queue wakes idle tasks as a chain (see [`crate::queue`]), one at a time, each woken
//! task waking the next before it runs its invocation: waking a task per queued invocation put
//! a fetch's worth of tasks on every thread of the runtime, and each of their outcomes reached
//! the driver as a wake from another thread. With the chain, handlers that finish at once run
//! back to back on few tasks and one thread; handlers that wait still all start, one task
//! switch apart.

use std::future::Future;
use std::marker::PhantomData;
use std::panic::AssertUnwindSafe;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::task::Waker;
use std::time::{Duration, Instant, SystemTime};

use futures::future::{select, Either};
use futures::FutureExt;
use leasehold_core::{CancelReason, Invocation, MessageId, Outcome};
use tracing::Instrument;

use crate::cancel::Cancellation;
use crate::codec::Decode;
use crate::delivery::{Delivery, Handed, IntoOutcome, StreamScope};
use crate::event::Event;
use crate::inbox::Inbox;
use crate::meters::{Ended, HandlerMeters};
use crate::queue::{InvocationQueue, Taker};
use crate::runtime::Runtime;

/// What every handler task of a worker needs besides its stream's handler.
pub(crate) struct Env<R, P> {
    pub(crate) rt: R,
    /// Where outcomes go.
    pub(crate) inbox: Arc<Inbox<Event<P>>>,
    /// The instant lease validity is measured from (see [`Cancellation::valid_at`]).
    pub(crate) base: Instant,
    /// How long a cancelled handler may take to finish before its future is dropped.
    pub(crate) grace: Duration,
}

impl<R: Clone, P> Clone for Env<R, P> {
    fn clone(&self) -> Self {
        Self {
            rt: self.rt.clone(),
            inbox: self.inbox.clone(),
            base: self.base,
            grace: self.grace,
        }
    }
}

/// A stream's handler with its types erased: runs invocations on its tasks.
pub(crate) trait Dispatch<P>: Send + Sync {
    /// Hands one invocation of this stream's handler to a task of its pool, and returns the
    /// idle task to wake for it, if any: the driver wakes it at the end of its pass. By
    /// reference: the driver touches no count of the shared dispatcher per message (the
    /// handler tasks, on the other threads, change it).
    fn dispatch(&self, payload: P, handed: Handed) -> Option<Waker>;
}

/// When a message was enqueued, if its backend knows ([`Backend::enqueued_at`]): looked up by
/// the handler task of a message's first invocation, off the driver.
///
/// [`Backend::enqueued_at`]: leasehold_core::Backend::enqueued_at
pub(crate) type EnqueuedAt = Arc<dyn Fn(&MessageId) -> Option<SystemTime> + Send + Sync>;

/// Builds a stream's dispatcher once the worker's environment exists (at `start`), given the
/// stream's name, what its tasks record and how they learn when a message was enqueued.
pub(crate) type MakeDispatch<R, P> =
    Box<dyn FnOnce(Env<R, P>, Arc<str>, HandlerMeters, EnqueuedAt) -> Arc<dyn Dispatch<P>> + Send>;

/// The dispatcher of a stream served by `handler` over messages `codec` decodes.
pub(crate) fn make<R, P, M, C, H, F>(codec: C, handler: H) -> MakeDispatch<R, P>
where
    R: Runtime,
    P: AsRef<[u8]> + Send + 'static,
    M: Send + 'static,
    C: Decode<M>,
    H: Fn(Delivery<M>) -> F + Send + Sync + 'static,
    F: Future + Send + 'static,
    F::Output: IntoOutcome,
{
    Box::new(move |env, stream, meters, enqueued_at| {
        Arc::new_cyclic(|me| Typed {
            me: me.clone(),
            env,
            stream,
            meters,
            enqueued_at,
            codec,
            handler,
            types: PhantomData,
            queue: Arc::new(InvocationQueue::new()),
            tasks: AtomicUsize::new(0),
            busy: AtomicUsize::new(0),
        })
    })
}

/// An invocation waiting in a stream's queue.
type Queued<P> = (P, Handed);

/// A stream's typed handler, its pool of tasks and everything they share, in one allocation.
///
/// The queue closes when this is dropped (after the driver is gone), and the tasks, which only
/// hold a weak reference to it between invocations, end.
struct Typed<R, P, M, C, H, F> {
    /// Itself, for the tasks it starts (they hold it weakly between invocations).
    me: Weak<Self>,
    env: Env<R, P>,
    stream: Arc<str>,
    meters: HandlerMeters,
    enqueued_at: EnqueuedAt,
    codec: C,
    handler: H,
    types: PhantomData<fn() -> (M, F)>,
    /// The invocations handed over and not yet taken; each task started holds it too.
    queue: Arc<InvocationQueue<Queued<P>>>,
    /// Tasks started. Only the driver changes it.
    tasks: AtomicUsize,
    /// Invocations handed over that no task has finished yet. Never more than `tasks`, so every
    /// queued invocation has a task that will take it: the queue wakes an idle one, or none is
    /// idle and a busy one comes back to the queue before it idles.
    busy: AtomicUsize,
}

impl<R, P, M, C, H, F> StreamScope for Typed<R, P, M, C, H, F>
where
    R: Runtime,
    P: Send + 'static,
    C: Send + Sync,
    H: Send + Sync,
{
    fn stream(&self) -> &str {
        &self.stream
    }

    fn now(&self) -> Instant {
        self.env.rt.now()
    }

    fn base(&self) -> Instant {
        self.env.base
    }
}

impl<R, P, M, C, H, F> Dispatch<P> for Typed<R, P, M, C, H, F>
where
    R: Runtime,
    P: AsRef<[u8]> + Send + 'static,
    M: Send + 'static,
    C: Decode<M>,
    H: Fn(Delivery<M>) -> F + Send + Sync + 'static,
    F: Future + Send + 'static,
    F::Output: IntoOutcome,
{
    fn dispatch(&self, payload: P, handed: Handed) -> Option<Waker> {
        let busy = self.busy.fetch_add(1, Ordering::AcqRel) + 1;
        if busy > self.tasks.load(Ordering::Relaxed) {
            self.tasks.fetch_add(1, Ordering::Relaxed);
            let task = Self::serve(self.me.clone(), Taker::new(&self.queue));
            self.env.rt.spawn_unboxed(task);
        }
        self.queue.push_unwoken((payload, handed))
    }
}

impl<R, P, M, C, H, F> Drop for Typed<R, P, M, C, H, F> {
    /// The driver is gone: the idle tasks are woken and end (a task that still takes a queued
    /// invocation drops it, as nobody waits for its outcome).
    fn drop(&mut self) {
        self.queue.close();
    }
}

impl<R, P, M, C, H, F> Typed<R, P, M, C, H, F>
where
    R: Runtime,
    P: AsRef<[u8]> + Send + 'static,
    M: Send + 'static,
    C: Decode<M>,
    H: Fn(Delivery<M>) -> F + Send + Sync + 'static,
    F: Future + Send + 'static,
    F::Output: IntoOutcome,
{
    /// One invocation, to its outcome. The payload is decoded and the handler called here, at
    /// once: the future returned holds only the handler's future and what waiting on it takes
    /// (it is moved as it starts, for every message, so its size counts).
    ///
    /// It borrows the pool's runtime handle (its task holds the pool while it awaits it), rather
    /// than cloning it: a clone is a count shared by every thread, changed twice per message.
    fn run<'a>(
        self: &'a Arc<Self>,
        payload: P,
        invocation: Invocation<()>,
        cancellation: Cancellation,
    ) -> impl Future<Output = Outcome> + 'a {
        // The handler runs in this span, so its own log lines carry which message it handles.
        // Never the payload.
        let span = tracing::info_span!(
            "invocation",
            stream = %self.stream,
            message_id = %invocation.lease_ref.id,
            attempt = invocation.attempt,
            delivery_count = invocation.delivery_count,
            fence = invocation.lease_ref.fence.0,
        );
        let signal = cancellation.clone();
        let scope: Arc<dyn StreamScope> = self.clone();
        let started = {
            let _entered = span.enter();
            std::panic::catch_unwind(AssertUnwindSafe(|| {
                match self.codec.decode(payload.as_ref()) {
                    Ok(message) => Either::Left(
                        (self.handler)(Delivery::new(message, scope, invocation, signal))
                            .map(IntoOutcome::into_outcome),
                    ),
                    Err(error) => Either::Right(std::future::ready(Outcome::Reject {
                        reason: format!("cannot decode payload: {error}"),
                    })),
                }
            }))
        };
        let (rt, grace) = (&self.env.rt, self.env.grace);
        let outcome = async move {
            match started {
                Ok(future) => invoke(rt, future, cancellation, grace).await,
                Err(panic) => panicked(panic),
            }
        };
        // Without a subscriber that wants the span, no wrapper around every poll.
        if span.is_disabled() {
            Either::Left(outcome)
        } else {
            Either::Right(Box::pin(outcome.instrument(span)))
        }
    }

    /// A task of the stream's pool: runs the invocations it takes from the queue, one at a
    /// time, until the queue closes.
    async fn serve(stream: Weak<Self>, mut queue: Taker<Queued<P>>) {
        while let Some((payload, handed)) = queue.take().await {
            // Gone only with its driver: nobody is waiting for the outcome.
            let Some(this) = stream.upgrade() else {
                return;
            };
            let Handed {
                invocation,
                cancellation,
                handed_at,
            } = handed;
            let id = invocation.id;
            let enqueued = (invocation.attempt == 1)
                .then(|| (this.enqueued_at)(&invocation.lease_ref.id))
                .flatten();
            if let Some(enqueued) = enqueued {
                let waited = SystemTime::now().duration_since(enqueued);
                this.meters.picked_up(waited.unwrap_or_default());
            }
            // `invoke` catches the handler's panics; one from anywhere else (a handler future
            // that panics while dropped) fails the attempt too, and the task goes on.
            let outcome = AssertUnwindSafe(this.run(payload, invocation, cancellation.clone()))
                .catch_unwind()
                .await
                .unwrap_or_else(panicked);
            // Recorded here, not by the driver (the serial part of a worker), and before the
            // outcome is out, so that the counts are complete once the driver has seen it.
            let handed_at = this.env.base + Duration::from_nanos(handed_at);
            let ran = this.env.rt.now().saturating_duration_since(handed_at);
            let ended = Ended::of(&outcome, cancellation.is_cancelled());
            this.meters.ended(ended, ran);
            // Free before the outcome is out: the driver may hand over the next invocation as
            // soon as it sees it, and must then find this task counted as free.
            this.busy.fetch_sub(1, Ordering::AcqRel);
            // The driver may be gone after shutdown; then nobody needs the outcome.
            let _ = this.env.inbox.send(Event::Outcome(id, outcome));
        }
    }
}

/// Runs one handler invocation (a panic in its future counts as a failed attempt); honours
/// cancellation with a grace period.
async fn invoke<R: Runtime, F: Future<Output = Outcome>>(
    rt: &R,
    future: F,
    cancellation: Cancellation,
    grace: Duration,
) -> Outcome {
    let mut future = pin!(AssertUnwindSafe(future).catch_unwind());
    // Most handlers finish on their first poll: no need to listen for a cancel then.
    let first = future.as_mut().now_or_never();
    let result = match first {
        Some(result) => result,
        // Boxed: the wait (a cancel listener, a grace timer) would otherwise take room in
        // every handler task, most of which never get here.
        None => match Box::pin(wait_or_cancel(rt, future, &cancellation, grace)).await {
            Ok(result) => result,
            Err(dropped) => return dropped,
        },
    };
    // A cancel that won the race makes the result void, except a `Done` after the lease
    // expired locally: the engine may still ack it, fenced (refused if anyone took the message
    // over), so finished work is not redone after an outage.
    if !cancellation.finish() {
        let reason = cancellation.reason().expect("only a cancel beats finish");
        if reason == CancelReason::LeaseExpired && matches!(result, Ok(Outcome::Done)) {
            return Outcome::Done;
        }
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
    Outcome::Failed {
        error: panic_message(&*panic),
    }
}

/// How a caught handler panic is reported: `handler panicked: ` and the panic's text. For
/// crates that run handlers of their own (the command queue) and report them the same way.
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    let text = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic payload".into());
    format!("handler panicked: {text}")
}
