//! What a handler receives, and what it may return.

use std::fmt::Display;
use std::sync::Arc;
use std::time::Instant;

use leasehold_core::{CancelReason, Fence, Invocation, MessageId, Outcome};

use crate::cancel::Cancellation;

/// What every invocation of one stream shares (its handler's dispatcher implements it).
pub(crate) trait StreamScope: Send + Sync {
    /// The stream's name.
    fn stream(&self) -> &str;
    /// The runtime's clock, so virtual time works too.
    fn now(&self) -> Instant;
    /// The instant lease validity is measured from (see [`Cancellation::valid_at`]).
    fn base(&self) -> Instant;
}

/// One invocation as the driver hands it over: the engine's [`Invocation`] without its payload,
/// and what only the worker knows of it. The handler's [`Delivery`] keeps the invocation and its
/// cancellation, moved, not copied.
///
/// Small on purpose: it is moved into and out of the stream's queue for every message, and
/// a handler's future (which holds the `Delivery`) is moved as it starts; 32 bytes more here
/// measured about 4 % of the memory backend's drain at concurrency 100. So the hand-over time
/// is kept in 8 bytes, and the enqueue time is looked up by the handler task (off the driver).
pub(crate) struct Handed {
    pub(crate) invocation: Invocation<()>,
    /// The signal the driver fires; it also carries the lease's validity.
    pub(crate) cancellation: Cancellation,
    /// When the driver handed it over, in nanoseconds after the worker's base instant (its
    /// pass's time: no clock read per invocation).
    pub(crate) handed_at: u64,
}

/// One message handed to a handler, with what it needs to act safely on it.
pub struct Delivery<M> {
    message: M,
    scope: Arc<dyn StreamScope>,
    /// The invocation as the engine made it, kept whole.
    invocation: Invocation<()>,
    /// The signal the driver fires; it also carries the lease's validity.
    cancellation: Cancellation,
}

impl<M> std::fmt::Debug for Delivery<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let invocation = &self.invocation;
        f.debug_struct("Delivery")
            .field("stream", &self.scope.stream())
            .field("id", &invocation.lease_ref.id)
            .field("delivery_count", &invocation.delivery_count)
            .field("attempt", &invocation.attempt)
            .finish_non_exhaustive()
    }
}

impl<M> Delivery<M> {
    pub(crate) fn new(
        message: M,
        scope: Arc<dyn StreamScope>,
        invocation: Invocation<()>,
        cancellation: Cancellation,
    ) -> Self {
        Self {
            message,
            scope,
            invocation,
            cancellation,
        }
    }

    /// The decoded message.
    pub fn message(&self) -> &M {
        &self.message
    }

    /// Takes the message out.
    pub fn into_message(self) -> M {
        self.message
    }

    /// The stream it came from.
    pub fn stream(&self) -> &str {
        self.scope.stream()
    }

    /// The message's id in the backend.
    pub fn message_id(&self) -> &MessageId {
        &self.invocation.lease_ref.id
    }

    /// How often the backend has delivered it (1 the first time); survives crashes.
    pub fn delivery_count(&self) -> u32 {
        self.invocation.delivery_count
    }

    /// Invocations of this delivery so far in this worker, this one included (each
    /// re-invocation after `Outcome::Pending` counts up).
    pub fn attempt(&self) -> u32 {
        self.invocation.attempt
    }

    /// The fence of this delivery: pass it to a downstream system that can reject stale writers.
    pub fn fence(&self) -> Fence {
        self.invocation.lease_ref.fence
    }

    /// The invocation's cancellation signal.
    pub fn cancellation(&self) -> &Cancellation {
        &self.cancellation
    }

    /// Completes when the invocation is cancelled, with the reason.
    pub async fn cancelled(&self) -> CancelReason {
        self.cancellation.cancelled().await
    }

    /// Whether the lease is still valid *now*: not cancelled, and renewed recently enough.
    /// Answered against the clock at the moment of asking, so a handler resumed after a long
    /// stall (GC pause, SIGSTOP, frozen VM) learns it may have lost the message before any
    /// timer fired. Check it right before committing a side effect.
    pub fn lease_valid(&self) -> bool {
        let scope = &self.scope;
        let cancellation = &self.cancellation;
        !cancellation.is_cancelled() && cancellation.valid_at(scope.base(), scope.now())
    }
}

/// What a handler may return: an [`Outcome`], `()` (= `Done`), or a `Result` of either, whose
/// error counts as a failed attempt (`Outcome::Failed`).
pub trait IntoOutcome {
    /// The outcome this value stands for.
    fn into_outcome(self) -> Outcome;
}

impl IntoOutcome for Outcome {
    fn into_outcome(self) -> Outcome {
        self
    }
}

impl IntoOutcome for () {
    fn into_outcome(self) -> Outcome {
        Outcome::Done
    }
}

impl<T: IntoOutcome, E: Display> IntoOutcome for Result<T, E> {
    fn into_outcome(self) -> Outcome {
        match self {
            Ok(value) => value.into_outcome(),
            Err(error) => Outcome::Failed {
                error: error.to_string(),
            },
        }
    }
}
