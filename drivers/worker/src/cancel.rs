//! The cancellation signal a handler can await, and the race between finishing and cancelling.

#[cfg(not(loom))]
use event_listener::Event;
#[cfg(not(loom))]
use std::time::Instant;

use leasehold_core::CancelReason;

use crate::sync::{AtomicU8, Ordering};

#[cfg(not(loom))]
fn nanos_since(base: Instant, at: Instant) -> u64 {
    u64::try_from(at.saturating_duration_since(base).as_nanos()).unwrap_or(u64::MAX)
}

const RUNNING: u8 = 0;
const FINISHED: u8 = 1;

fn encode(reason: CancelReason) -> u8 {
    match reason {
        CancelReason::LeaseLost => 2,
        CancelReason::LeaseExpired => 3,
        CancelReason::MaxProcessingTime => 4,
        CancelReason::Shutdown => 5,
    }
}

fn decode(state: u8) -> Option<CancelReason> {
    match state {
        2 => Some(CancelReason::LeaseLost),
        3 => Some(CancelReason::LeaseExpired),
        4 => Some(CancelReason::MaxProcessingTime),
        5 => Some(CancelReason::Shutdown),
        _ => None,
    }
}

/// Cancellation of one invocation, shared by the driver (which fires it) and the handler.
///
/// A handler that does long work should select on [`cancelled`](Cancellation::cancelled) (or
/// check [`is_cancelled`](Cancellation::is_cancelled)) and stop: its lease is lost, it ran past
/// `max_processing_time`, or the shutdown grace is over. If it does not stop within the driver's
/// cancel grace, its future is dropped. Either way its result is discarded, except a `Done`
/// after [`CancelReason::LeaseExpired`]: the engine may still ack it, fenced (the backend
/// refuses the ack if anyone took the message over).
///
/// Finishing and cancelling race on one atomic state: exactly one of
/// [`finish`](Cancellation::finish) and [`cancel`](Cancellation::cancel) wins.
#[derive(Debug, Clone, Default)]
pub struct Cancellation {
    inner: crate::sync::Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    state: AtomicU8,
    #[cfg(not(loom))]
    event: Event,
    /// Until when the invocation's lease counts as valid, in nanoseconds after the driver's
    /// base instant (0: not valid); the driver updates it after every renew. Kept here so an
    /// invocation needs one shared allocation, not two. Not part of the finish/cancel race.
    #[cfg(not(loom))]
    valid_until: std::sync::atomic::AtomicU64,
}

impl Cancellation {
    /// A signal that has not fired.
    pub fn new() -> Self {
        Self::default()
    }

    /// Fires the signal and wakes every waiter, unless the invocation already finished or was
    /// cancelled before. Returns whether this call cancelled it.
    pub fn cancel(&self, reason: CancelReason) -> bool {
        let won = self
            .inner
            .state
            .compare_exchange(RUNNING, encode(reason), Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        #[cfg(not(loom))]
        if won {
            self.inner.event.notify(usize::MAX);
        }
        won
    }

    /// Marks the invocation finished, unless it was cancelled first. Returns whether its result
    /// stands; if not, the result is discarded (but for a `Done` after an expiry: see above).
    pub fn finish(&self) -> bool {
        self.inner
            .state
            .compare_exchange(RUNNING, FINISHED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Why the invocation was cancelled, if it was.
    pub fn reason(&self) -> Option<CancelReason> {
        decode(self.inner.state.load(Ordering::Acquire))
    }

    /// Whether the signal has fired.
    pub fn is_cancelled(&self) -> bool {
        self.reason().is_some()
    }

    #[cfg(not(loom))]
    /// Sets until when the lease counts as valid (`None`: not valid), relative to `base`.
    pub(crate) fn set_valid_until(&self, base: Instant, until: Option<Instant>) {
        let nanos = until.map_or(0, |until| nanos_since(base, until));
        self.inner
            .valid_until
            .store(nanos, std::sync::atomic::Ordering::Release);
    }

    #[cfg(not(loom))]
    /// Whether the lease counts as valid at `now` (the cancellation is not looked at).
    pub(crate) fn valid_at(&self, base: Instant, now: Instant) -> bool {
        nanos_since(base, now)
            < self
                .inner
                .valid_until
                .load(std::sync::atomic::Ordering::Acquire)
    }

    /// Completes when the signal fires, with its reason.
    #[cfg(not(loom))]
    pub async fn cancelled(&self) -> CancelReason {
        loop {
            if let Some(reason) = self.reason() {
                return reason;
            }
            let listener = self.inner.event.listen();
            if let Some(reason) = self.reason() {
                return reason;
            }
            listener.await;
        }
    }
}
