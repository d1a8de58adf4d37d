//! The cancellation signal a handler can await.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use event_listener::Event;
use leasehold_core::CancelReason;

const NOT_CANCELLED: u8 = 0;

/// Cancellation of one invocation, shared by the driver (which fires it) and the handler.
///
/// A handler that does long work should select on [`cancelled`](Cancellation::cancelled) (or
/// check [`is_cancelled`](Cancellation::is_cancelled)) and stop: its lease is lost, it ran past
/// `max_processing_time`, or the shutdown grace is over. If it does not stop within the driver's
/// cancel grace, its future is dropped. Either way its result is discarded, never acked.
#[derive(Debug, Clone, Default)]
pub struct Cancellation {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    reason: AtomicU8,
    event: Event,
}

fn encode(reason: CancelReason) -> u8 {
    match reason {
        CancelReason::LeaseLost => 1,
        CancelReason::LeaseExpired => 2,
        CancelReason::MaxProcessingTime => 3,
        CancelReason::Shutdown => 4,
    }
}

fn decode(code: u8) -> Option<CancelReason> {
    match code {
        1 => Some(CancelReason::LeaseLost),
        2 => Some(CancelReason::LeaseExpired),
        3 => Some(CancelReason::MaxProcessingTime),
        4 => Some(CancelReason::Shutdown),
        _ => None,
    }
}

impl Cancellation {
    /// A signal that has not fired.
    pub fn new() -> Self {
        Self::default()
    }

    /// Fires the signal (the first reason wins) and wakes every waiter.
    pub fn cancel(&self, reason: CancelReason) {
        let fired = self
            .inner
            .reason
            .compare_exchange(
                NOT_CANCELLED,
                encode(reason),
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok();
        if fired {
            self.inner.event.notify(usize::MAX);
        }
    }

    /// Why the invocation was cancelled, if it was.
    pub fn reason(&self) -> Option<CancelReason> {
        decode(self.inner.reason.load(Ordering::Acquire))
    }

    /// Whether the signal has fired.
    pub fn is_cancelled(&self) -> bool {
        self.reason().is_some()
    }

    /// Completes when the signal fires, with its reason.
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
