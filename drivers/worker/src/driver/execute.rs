//! Each effect, executed: a backend call as a task bounded by the call timeout (or polled in
//! place when it completes at once), a handler invocation on its stream's task pool, a
//! cancellation signalled.

use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::channel::oneshot;
use futures::future::{select, Either};
use futures::FutureExt;
use leasehold_core::{
    Backend, BackendError, BackendResult, CancelReason, DeadLetterReason, Effect, FetchAnswer,
    Invocation, InvocationId, LeaseRef, LossReason, StreamId,
};

use crate::cancel::Cancellation;
use crate::delivery::Handed;
use crate::event::Event;
use crate::meters::Dead;
use crate::runtime::Runtime;

use super::invocations::Running;
use super::Driver;

impl<R: Runtime, B: Backend> Driver<R, B> {
    /// Executes every pending effect.
    pub(super) fn execute(&mut self) {
        self.pass_now = None;
        self.handed_over = false;
        while let Some(effect) = self.engine.poll_effect() {
            match effect {
                Effect::Fetch { stream, max, wait } => self.fetch(stream, max, wait),
                Effect::Run(invocation) => self.start(invocation),
                Effect::Cancel { invocation, reason } => self.cancel(invocation, reason),
                Effect::LeaseValid { invocation, until } => {
                    if let Some(running) = self.invocations.get(&invocation) {
                        running.cancellation.set_valid_until(self.base, Some(until));
                    }
                }
                Effect::Renew {
                    batch,
                    stream,
                    leases,
                    lease_refs,
                } => {
                    let backend = self.backend(stream);
                    let sent = self.now();
                    self.call(
                        async move {
                            answer_each("renew", &lease_refs, backend.renew(&lease_refs).await)
                        },
                        move |result| Event::Renewed(batch, stream, sent, leases, result),
                    );
                }
                Effect::Ack {
                    batch,
                    stream,
                    leases,
                    lease_refs,
                } => {
                    let backend = self.backend(stream);
                    self.call(
                        async move {
                            answer_each("ack", &lease_refs, backend.ack(&lease_refs).await)
                        },
                        move |result| Event::Acked(batch, stream, leases, result),
                    );
                }
                Effect::Release {
                    stream,
                    lease,
                    lease_ref,
                    delay,
                } => {
                    let backend = self.backend(stream);
                    self.call(
                        async move { backend.release(&lease_ref, delay).await },
                        move |result| Event::Released(lease, stream, result),
                    );
                }
                Effect::DeadLetter {
                    stream,
                    lease,
                    lease_ref,
                    reason,
                } => {
                    let backend = self.backend(stream);
                    let dead = match &reason {
                        DeadLetterReason::MaxDeliveries { .. } => Dead::MaxDeliveries,
                        _ => Dead::Rejected,
                    };
                    tracing::warn!(
                        stream = %self.streams[usize::from(stream.0)].name,
                        message_id = %lease_ref.id,
                        %reason,
                        "dead-lettering a message"
                    );
                    self.call(
                        async move { backend.dead_letter(&lease_ref, &reason).await },
                        move |result| Event::DeadLettered(lease, stream, dead, result),
                    );
                }
                Effect::Failed {
                    stream,
                    lease_ref,
                    delivery_count,
                    error,
                    retry_in,
                } => tracing::warn!(
                    stream = %self.streams[usize::from(stream.0)].name,
                    message_id = %lease_ref.id,
                    delivery_count,
                    %error,
                    retry_in = ?retry_in,
                    "handler failed; the message will be delivered again"
                ),
                Effect::Lost {
                    stream,
                    lease_ref,
                    reason,
                    margin,
                } => {
                    let s = &self.streams[usize::from(stream.0)];
                    s.meters.lost(reason);
                    if reason == LossReason::Expired {
                        tracing::warn!(
                            stream = %s.name,
                            message_id = %lease_ref.id,
                            fence = lease_ref.fence.0,
                            reason = reason.label(),
                            margin = ?margin,
                            "lease expired locally: another consumer may run the message; only a Done within the cancel grace is still acked, fenced"
                        );
                    } else {
                        tracing::warn!(
                            stream = %s.name,
                            message_id = %lease_ref.id,
                            fence = lease_ref.fence.0,
                            reason = reason.label(),
                            margin = ?margin,
                            "lease lost: another consumer may run the message; this delivery's result is discarded"
                        );
                    }
                }
                Effect::Halt { stream } => self.halt(stream),
                Effect::Drained => self.drained = true,
            }
        }
        // Woken last: a runtime that runs the task woken last first (tokio does) then starts a
        // handler as soon as the driver yields, before the calls this pass sent go on.
        for waker in self.to_wake.drain(..) {
            waker.wake();
        }
    }

    /// Signals an invocation to stop, and says why.
    fn cancel(&mut self, invocation: InvocationId, reason: CancelReason) {
        let Some(running) = self.invocations.get(&invocation) else {
            return;
        };
        let stream = &self.streams[usize::from(running.stream.0)];
        match reason {
            CancelReason::Shutdown => tracing::info!(
                stream = %stream.name,
                ?reason,
                "cancelling an invocation: the shutdown grace is over"
            ),
            CancelReason::MaxProcessingTime => tracing::warn!(
                stream = %stream.name,
                ?reason,
                "cancelling an invocation: it ran past max_processing_time"
            ),
            // The loss itself was logged (at WARN) when the lease was let go of.
            CancelReason::LeaseLost | CancelReason::LeaseExpired => {
                tracing::debug!(stream = %stream.name, ?reason, "cancelling an invocation")
            }
        }
        running.cancellation.cancel(reason);
    }

    /// The time of this pass over the effects, read once: calls sent and handlers started in
    /// one pass are timed from it (a clock read per message would cost more than it tells).
    fn now(&mut self) -> Instant {
        match self.pass_now {
            Some(now) => now,
            None => *self.pass_now.insert(self.rt.now()),
        }
    }

    fn backend(&self, stream: StreamId) -> Arc<B> {
        self.streams[usize::from(stream.0)].backend.clone()
    }

    /// Runs a backend call bounded by the call timeout; its result becomes an event.
    pub(super) fn call<T: Send + 'static>(
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
    /// it loses nothing (the `Backend::fetch` contract), so an abandoned fetch fetched nothing.
    fn fetch(&mut self, stream: StreamId, max: usize, wait: Duration) {
        let backend = self.backend(stream);
        let sent = self.now();
        let mut fetch = Box::pin(async move { backend.fetch(max, wait).await });
        // A fetch that may wait seldom completes at once, and its first poll (sending the
        // read, arming its timer) would hold up the handlers this pass handed over: the runtime
        // starts them on this thread only once the driver yields. Its task polls it instead.
        if wait.is_zero() || !self.handed_over {
            if let Some(result) = fetch.as_mut().now_or_never() {
                self.ready.push(Event::Fetched(stream, sent, result));
                return;
            }
        }
        let (abandon, abandoned) = oneshot::channel::<()>();
        self.fetch_abandon[usize::from(stream.0)] = Some(abandon);
        self.spawn_call(
            wait + self.options.call_timeout,
            Box::pin(async move {
                match select(fetch, abandoned).await {
                    Either::Left((result, _)) => result,
                    Either::Right(_) => Ok(FetchAnswer::default()),
                }
            }),
            move |result| Event::Fetched(stream, sent, result),
        );
    }

    /// Hands an invocation to its stream's handler tasks.
    fn start(&mut self, invocation: Invocation<B::Payload>) {
        let (invocation, payload) = invocation.into_parts();
        let cancellation = Cancellation::new();
        cancellation.set_valid_until(self.base, Some(invocation.valid_until));
        let handed_at = nanos_since(self.base, self.now());
        let stream = &self.streams[usize::from(invocation.stream.0)];
        let running = Running {
            cancellation: cancellation.clone(),
            stream: invocation.stream,
        };
        self.invocations.insert(invocation.id, running);
        self.handed_over = true;
        let handed = Handed {
            invocation,
            cancellation,
            handed_at,
        };
        let wake = stream.dispatch.dispatch(payload, handed);
        self.to_wake.extend(wake);
    }
}

/// `at` in nanoseconds after `base`, as a [`Handed`] keeps it (saturating: 584 years).
pub(crate) fn nanos_since(base: Instant, at: Instant) -> u64 {
    u64::try_from(at.saturating_duration_since(base).as_nanos()).unwrap_or(u64::MAX)
}

/// A batch call's answer must carry one result per lease asked about: a backend that answers
/// otherwise broke its contract, which no retry mends (it would pair results with the wrong
/// leases), so it is a fatal error of that call.
fn answer_each<T>(
    op: &str,
    lease_refs: &[LeaseRef],
    answer: BackendResult<Vec<T>>,
) -> BackendResult<Vec<T>> {
    match answer {
        Ok(results) if results.len() != lease_refs.len() => Err(BackendError::fatal(format!(
            "the backend broke its contract: {op} answered {} results for {} leases",
            results.len(),
            lease_refs.len()
        ))),
        answer => answer,
    }
}

#[cfg(test)]
mod tests {
    use leasehold_core::{ErrorKind, Fence, RenewResult, SettleResult};

    use super::*;

    #[test]
    fn a_batch_answer_without_a_result_per_lease_is_a_fatal_error() {
        let lease_ref = |id: &str| LeaseRef::new(id.into(), Fence(1));
        let lease_refs = vec![lease_ref("1-0"), lease_ref("2-0")];
        let short = answer_each("renew", &lease_refs, Ok(vec![RenewResult::Kept]));
        let error = short.expect_err("one result for two leases");
        assert_eq!(error.kind(), ErrorKind::Fatal);
        assert!(
            error
                .to_string()
                .contains("renew answered 1 results for 2 leases"),
            "{error}"
        );
        let full = answer_each("ack", &lease_refs, Ok(vec![SettleResult::Ok; 2]));
        assert_eq!(full.unwrap(), vec![SettleResult::Ok; 2]);
        let failed: BackendResult<Vec<SettleResult>> = Err(BackendError::transient("down"));
        let kept = answer_each("ack", &lease_refs, failed).unwrap_err();
        assert_eq!(kept.kind(), ErrorKind::Transient);
    }
}
