//! What a handler receives, and what it may return.

use std::fmt::Display;
use std::sync::Arc;
use std::time::Instant;

use leasehold_core::{CancelReason, Fence, MessageId, Outcome};

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

/// Everything about one invocation except the decoded message.
pub(crate) struct Meta {
    pub(crate) scope: Arc<dyn StreamScope>,
    pub(crate) id: MessageId,
    pub(crate) delivery_count: u32,
    pub(crate) attempt: u32,
    pub(crate) fence: Fence,
    /// The cancellation signal, which also carries the lease's validity.
    pub(crate) cancellation: Cancellation,
}

/// One message handed to a handler, with what it needs to act safely on it.
pub struct Delivery<M> {
    message: M,
    meta: Meta,
}

impl<M> std::fmt::Debug for Delivery<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delivery")
            .field("stream", &self.meta.scope.stream())
            .field("id", &self.meta.id)
            .field("delivery_count", &self.meta.delivery_count)
            .field("attempt", &self.meta.attempt)
            .finish_non_exhaustive()
    }
}

impl<M> Delivery<M> {
    pub(crate) fn new(message: M, meta: Meta) -> Self {
        Self { message, meta }
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
        self.meta.scope.stream()
    }

    /// The message's id in the backend.
    pub fn message_id(&self) -> &MessageId {
        &self.meta.id
    }

    /// How often the backend has delivered it (1 the first time); survives crashes.
    pub fn delivery_count(&self) -> u32 {
        self.meta.delivery_count
    }

    /// Invocations of this delivery so far in this worker, this one included (re-runs after
    /// `Outcome::Pending` count up).
    pub fn attempt(&self) -> u32 {
        self.meta.attempt
    }

    /// The fence of this delivery: pass it to a downstream system that can reject stale writers.
    pub fn fence(&self) -> Fence {
        self.meta.fence
    }

    /// The invocation's cancellation signal.
    pub fn cancellation(&self) -> &Cancellation {
        &self.meta.cancellation
    }

    /// Completes when the invocation is cancelled, with the reason.
    pub async fn cancelled(&self) -> CancelReason {
        self.meta.cancellation.cancelled().await
    }

    /// Whether the lease is still valid *now*: not cancelled, and renewed recently enough.
    /// Answered against the clock at the moment of asking, so a handler resumed after a long
    /// stall (GC pause, SIGSTOP, frozen VM) learns it may have lost the message before any
    /// timer fired. Check it right before committing a side effect.
    pub fn lease_valid(&self) -> bool {
        let scope = &self.meta.scope;
        let cancellation = &self.meta.cancellation;
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
