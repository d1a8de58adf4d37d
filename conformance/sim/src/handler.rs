//! The handler every replica's worker runs: it follows the behaviour its message drew when it
//! was published (invocations counted across replicas), on the replica's virtual time, and
//! tells the checker when it starts, what it sees and how it ends.
//!
//! On a cancellation a handler reacts within the cancel grace: half the time it returns
//! `Done` anyway (which the driver must discard), otherwise a failure. A hanging one ignores
//! the signal, and the driver drops it once the grace is over.

use std::future::Future;
use std::pin::pin;
use std::time::Duration;

use futures::future::{select, Either};
use leasehold_core::Outcome;
use leasehold_worker::{Delivery, Runtime};

use crate::checker::{lock, SharedState};
use crate::runtime::SimRuntime;

/// Marks an invocation ended when the driver drops its future without it returning.
struct Guard {
    shared: SharedState,
    invocation: usize,
    returned: bool,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if !self.returned {
            lock(&self.shared).dropped(self.invocation);
        }
    }
}

/// The handler of replica `replica`'s worker.
pub(crate) fn handler(
    shared: SharedState,
    replica: usize,
    rt: SimRuntime,
) -> impl Fn(Delivery<Vec<u8>>) -> std::pin::Pin<Box<dyn Future<Output = Outcome> + Send>>
       + Send
       + Sync
       + 'static {
    move |delivery: Delivery<Vec<u8>>| {
        let shared = shared.clone();
        let rt = rt.clone();
        Box::pin(async move {
            let started = rt.now();
            let (invocation, plan, react, done_anyway, limit) = {
                let mut s = lock(&shared);
                let (invocation, n) = s.start_invocation(
                    replica,
                    delivery.message_id(),
                    delivery.fence().0,
                    delivery.cancellation().clone(),
                );
                let msg = s.invocations[invocation].msg;
                let behaviour = s.msgs[msg].behaviour;
                let cfg = s.cfg.clone();
                let plan = behaviour.plan(n, &cfg, &mut s.rng);
                let grace = s.settings.cancel_grace;
                let react = s.rng.duration(Duration::ZERO, grace);
                let done_anyway = s.rng.chance(0.5);
                (
                    invocation,
                    plan,
                    react,
                    done_anyway,
                    cfg.max_processing_time,
                )
            };
            let mut guard = Guard {
                shared: shared.clone(),
                invocation,
                returned: false,
            };
            let Some((after, outcome)) = plan.finish else {
                // Hangs: notices the cancellation, ignores it; the driver drops it.
                let reason = delivery.cancelled().await;
                lock(&shared).cancel_seen(invocation, reason);
                return std::future::pending().await;
            };
            let deadline = rt.now() + after;
            let finished = pin!(rt.sleep_until(deadline));
            let outcome = match select(finished, pin!(delivery.cancelled())).await {
                Either::Left(_) => outcome,
                Either::Right((reason, _)) => {
                    lock(&shared).cancel_seen(invocation, reason);
                    // Reacts within the grace, unless it finishes on its own first.
                    let at = (rt.now() + react).min(deadline);
                    rt.sleep_until(at).await;
                    if at == deadline {
                        outcome
                    } else if done_anyway {
                        Outcome::Done
                    } else {
                        Outcome::Failed {
                            error: "cancelled".into(),
                        }
                    }
                }
            };
            let overran = rt.now().saturating_duration_since(started) >= limit;
            lock(&shared).returned(invocation, &outcome, overran);
            guard.returned = true;
            outcome
        })
    }
}
