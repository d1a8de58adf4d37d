//! The driver loop, written once: it owns the engine, executes its effects as concurrent tasks,
//! feeds their results back, and sleeps until the engine's next timeout.
//!
//! - this file: the loop (take a burst of results, feed it, execute what the engine asks, sleep
//!   until the next result or the engine's deadline);
//! - [`inputs`]: each result, as the engine input it is (with its round trip measured);
//! - [`execute`]: each effect, as the backend call or handler task it is;
//! - [`notices`]: what operators see of it (logs, metrics, health, the live snapshot).

mod execute;
mod inputs;
mod invocations;
mod notices;
mod sharding;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use futures::channel::oneshot;
use leasehold_core::{Backend, LeaseEngine};

use crate::dispatch::Dispatch;
use crate::event::Event;
use crate::health::{Health, HealthCell};
use crate::inbox::Inbox;
use crate::meters::StreamMeters;
use crate::report::{HaltedStream, ShutdownReport};
use crate::runtime::Runtime;

use invocations::Invocations;
use notices::Throttle;
pub(crate) use sharding::{MemberIo, Sharding};

/// One stream served by the worker.
pub(crate) struct Stream<B: Backend> {
    pub(crate) name: Arc<str>,
    pub(crate) backend: Arc<B>,
    /// Starts its handler's tasks.
    pub(crate) dispatch: Arc<dyn Dispatch<B::Payload>>,
    pub(crate) meters: StreamMeters,
    /// Failures of its calls, logged at most once a while each.
    pub(crate) throttles: [Throttle; 5],
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
    /// Per stream, the first fatal error a call of it returned: what a `Halt` is reported
    /// with (later errors, even in the same burst of answers, do not overwrite it).
    first_fatal: Vec<Option<String>>,
    /// The streams halted so far, with their errors.
    halted: Vec<HaltedStream>,
    health: Arc<HealthCell>,
    waiters: Vec<oneshot::Sender<ShutdownReport>>,
    options: DriverOptions,
    /// Kept across waits while the engine's next deadline is not earlier: arming a timer for
    /// every wait would cost a timer registration per burst of events.
    timer: Option<Timer>,
    base: Instant,
    drained: bool,
    /// The instant of the current pass over the effects, once read (see `execute`).
    pass_now: Option<Instant>,
    /// Whether this pass over the effects handed an invocation to a handler task.
    handed_over: bool,
    /// The handler tasks to wake at the end of this pass (see `execute`).
    to_wake: Vec<Waker>,
    /// The sharded queue it serves, if any: its membership and shard assignment.
    sharding: Option<Sharding>,
}

impl<R: Runtime, B: Backend> Driver<R, B> {
    /// A driver for `engine` over `streams`; `base` is the instant the handlers' lease
    /// validity is measured from (their [`Env`](crate::dispatch::Env)'s).
    pub(crate) fn new(
        rt: R,
        engine: LeaseEngine<B::Payload>,
        streams: Vec<Stream<B>>,
        inbox: Arc<Inbox<Event<B::Payload>>>,
        health: Arc<HealthCell>,
        options: DriverOptions,
        base: Instant,
    ) -> Self {
        let n = streams.len();
        Self {
            rt,
            engine,
            fetch_abandon: std::iter::repeat_with(|| None).take(n).collect(),
            first_fatal: vec![None; n],
            streams,
            inbox,
            ready: Vec::new(),
            invocations: Invocations::default(),
            halted: Vec::new(),
            health,
            waiters: Vec::new(),
            options,
            timer: None,
            base,
            drained: false,
            pass_now: None,
            handed_over: false,
            to_wake: Vec::new(),
            sharding: None,
        }
    }

    /// The driver of a worker serving a sharded queue (its shards among `streams`).
    pub(crate) fn with_sharding(mut self, sharding: Option<Sharding>) -> Self {
        self.sharding = sharding;
        self
    }

    /// Runs until shutdown has drained every lease.
    pub(crate) async fn run(mut self) {
        // Events taken from the inbox in one go; swapped with the inbox's own vector, so both
        // keep their capacity and taking a burst allocates nothing.
        let mut burst: Vec<Event<B::Payload>> = Vec::new();
        let mut busy = 0usize;
        loop {
            self.membership();
            self.execute();
            if self.drained {
                self.publish_load();
                let report = ShutdownReport::new(*self.engine.stats(), self.halted.clone());
                report.log();
                self.health.set(Health::Stopped("shut down".into()));
                for waiter in self.waiters.drain(..) {
                    let _ = waiter.send(report.clone());
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
                    self.publish_load();
                    yield_now().await;
                }
                true
            } else {
                // The gauges, before each wait and every few busy turns: setting them on every
                // turn would cost the driver a few atomic writes per message.
                self.publish_load();
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
        let at = match (self.engine.poll_timeout(), self.membership_timeout()) {
            (Some(a), Some(b)) => a.min(b),
            (Some(at), None) | (None, Some(at)) => at,
            (None, None) => return,
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
}

impl<R: Runtime, B: Backend> Drop for Driver<R, B> {
    fn drop(&mut self) {
        if !self.drained {
            self.health.set(Health::Stopped(
                "the worker's task ended before shutdown".into(),
            ));
        }
        // Later posts fail (a worker handle then knows the driver is gone), and replies still
        // waiting in the inbox are dropped, which answers their callers.
        drop(self.inbox.close());
    }
}
