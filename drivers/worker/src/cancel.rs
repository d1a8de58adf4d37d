//! The cancellation signal a handler can await, and the race between finishing and cancelling.

#[cfg(not(loom))]
use event_listener::Event;
use leasehold_core::CancelReason;

use crate::sync::{AtomicU8, Ordering};

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
/// cancel grace, its future is dropped. Either way its result is discarded, never acked.
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
    /// stands; if not, the result is discarded.
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
