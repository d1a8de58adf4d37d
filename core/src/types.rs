//! The vocabulary shared by the engine, drivers and backends: ids, deliveries, outcomes, results.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Index of a stream (one backend handle: a stream, its consumer group, this consumer) served by
/// one engine, in the order the streams were added. Streams share the
/// engine's concurrency budget; fetches for them are spread round-robin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StreamId(pub u16);

/// A message's id in its backend, e.g. a Redis stream entry id `1700000000000-0`.
///
/// Two deliveries with equal ids on one stream are the same message; equal payloads are not.
/// Shared, not copied: the engine, the handler and the ack each hold one without an allocation.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MessageId(Arc<str>);

impl MessageId {
    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for MessageId {
    fn from(id: &str) -> Self {
        Self(id.into())
    }
}

impl From<String> for MessageId {
    fn from(id: String) -> Self {
        Self(id.into())
    }
}

impl From<u64> for MessageId {
    fn from(id: u64) -> Self {
        Self(id.to_string().into())
    }
}

/// A fencing token: which delivery of a message an operation acts for.
///
/// The engine never compares or orders fences: it carries each delivery's fence from the fetch
/// to that delivery's renews, acks, releases and dead-letters, and the backend refuses (`Lost`)
/// any of them whose fence is not the current delivery's. So any token works that changes at
/// every takeover and never repeats for the same message: a counter, the delivery count (the
/// Redis and in-memory backends': each takeover increments it, a renew does not), a random
/// 64-bit token. The derived order means nothing to the engine.
///
/// The fence and the [delivery count](Fetched::delivery_count) are two things: the count says
/// how often a message was delivered (it decides when a failing message is dead-lettered), the
/// fence tells its deliveries apart. Handlers may pass the fence to a downstream system that
/// refuses stale writers; one that keeps the highest fence it saw needs fences that grow with
/// each takeover, as the Redis and in-memory backends' do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fence(pub u64);

/// A consumer's tenure when a delivery was made: lets a backend vouch for the delivery's fence
/// without reading it back.
///
/// A backend that keeps tenures changes a consumer's tenure, never to a value it had before,
/// every time a message leaves the consumer's hands other than by its own fenced operations (a
/// takeover, above all). So while the consumer's tenure is still the one a delivery was made
/// under, that delivery is held with its fence, and a fenced operation on it needs no per-lease
/// check. [`Tenure::NONE`]: the backend keeps none and checks every fence. Opaque to the engine,
/// which carries it from the fetch to the operations, like the fence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Tenure(pub u64);

impl Tenure {
    /// No tenure: every fenced operation checks the fence itself.
    pub const NONE: Self = Self(0);
}

/// One message returned by a fetch.
///
/// Built with [`Fetched::new`] and its `with_*` methods; it may grow fields, so it cannot be
/// built field by field outside this crate.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Fetched<P> {
    /// The message's id in the backend.
    pub id: MessageId,
    /// The message's payload, opaque to the engine.
    pub payload: P,
    /// How often the backend has delivered this message (1 for the first delivery). It survives
    /// crashes and restarts, so it counts attempts across replicas.
    pub delivery_count: u32,
    /// The fence of this delivery.
    pub fence: Fence,
    /// The consumer's tenure when this delivery was made ([`Tenure::NONE`] if the backend
    /// keeps none).
    pub tenure: Tenure,
}

impl<P> Fetched<P> {
    /// A delivery of message `id`, the `delivery_count`-th, made under `fence`, without a
    /// tenure.
    pub fn new(id: MessageId, payload: P, delivery_count: u32, fence: Fence) -> Self {
        Self {
            id,
            payload,
            delivery_count,
            fence,
            tenure: Tenure::NONE,
        }
    }

    /// The same delivery, made under the consumer's `tenure`.
    #[must_use]
    pub fn with_tenure(mut self, tenure: Tenure) -> Self {
        self.tenure = tenure;
        self
    }
}

/// Identifies a held lease inside one engine. Never reused, so a late result for a lease that
/// is gone cannot be mistaken for a newer one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeaseId {
    pub(crate) slot: u32,
    pub(crate) generation: u32,
}

/// Identifies one handler invocation (one `Run` effect).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InvocationId {
    pub(crate) lease: LeaseId,
    /// Which invocation of the lease's delivery this is: its attempt (1 for the first).
    pub(crate) attempt: u32,
}

impl InvocationId {
    /// The lease this invocation runs under.
    pub fn lease(self) -> LeaseId {
        self.lease
    }
}

/// Identifies one `Renew` effect, to match its result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RenewId(pub(crate) u64);

/// Identifies one `Ack` effect, to match its result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AckId(pub(crate) u64);

/// What a handler invocation came to.
///
/// Exhaustive on purpose: these are the only things an invocation can come to, and a driver or
/// a test matching on them should hear about a new one from the compiler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Finished: the message is acked.
    Done,
    /// Not finished yet (a VM still provisioning): keep the lease, free the invocation slot,
    /// invoke again after `repoll_interval`.
    Pending,
    /// A failed attempt: release the message so it is retried after `delay`, or after the
    /// policy's backoff when `None`; dead-letter it once `max_deliveries` is reached.
    Retry {
        /// Explicit delay before the retry, overriding the backoff.
        delay: Option<Duration>,
    },
    /// The message can never succeed (e.g. it cannot be decoded): dead-letter it at once.
    Reject {
        /// Why, recorded with the dead letter.
        reason: String,
    },
    /// The handler returned an error or panicked (reported by the driver): a failed attempt,
    /// handled like `Retry { delay: None }`.
    Failed {
        /// The error, recorded if the message ends up dead-lettered.
        error: String,
    },
}

impl Outcome {
    /// A failed attempt, retried after the retry policy's backoff.
    pub fn retry() -> Self {
        Self::Retry { delay: None }
    }

    /// A failed attempt, retried once `delay` has passed (instead of the backoff).
    pub fn retry_after(delay: Duration) -> Self {
        Self::Retry { delay: Some(delay) }
    }

    /// The message can never succeed: dead-letter it at once, with `reason`.
    pub fn reject(reason: impl Into<String>) -> Self {
        Self::Reject {
            reason: reason.into(),
        }
    }
}

/// Why an invocation was cancelled.
///
/// Exhaustive on purpose: these are the engine's only reasons to stop a handler, and drivers
/// encode them compactly (one byte beside the cancel signal).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CancelReason {
    /// A renew reported the lease lost: another consumer may run the message now.
    LeaseLost,
    /// No successful renew for `claim_timeout - margin`: the lease may have lapsed.
    LeaseExpired,
    /// The invocation ran longer than `max_processing_time`.
    MaxProcessingTime,
    /// Shutdown's grace period is over.
    Shutdown,
}

/// Why the engine let go of a lease it did not settle. Another consumer may run the message
/// now (or soon): any result of this delivery is thrown away, except a `Done` its invocation
/// returns within the cancel grace after an expiry, whose ack is still sent, fenced (the
/// backend refuses it if anyone took the message over).
///
/// Exhaustive on purpose: a driver labels its metrics and logs by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LossReason {
    /// No renew confirmed it within `claim_timeout - margin` (or its fetch answered that
    /// late): it may have lapsed on the backend.
    Expired,
    /// A renew found it owned elsewhere: another consumer took it over. Also a late ack (a
    /// `Done` whose lease expired locally) whose message was delivered again meanwhile.
    TakenOver,
    /// Its ack, release or dead-letter found it owned elsewhere: it was taken over before it
    /// could be settled.
    LostAtSettle,
}

impl LossReason {
    /// A short label, for metrics and logs.
    pub fn label(self) -> &'static str {
        match self {
            LossReason::Expired => "expired",
            LossReason::TakenOver => "taken_over",
            LossReason::LostAtSettle => "lost_at_settle",
        }
    }
}

/// Why a message is dead-lettered.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeadLetterReason {
    /// The handler rejected the message.
    Rejected(String),
    /// The message failed on its last allowed delivery.
    MaxDeliveries {
        /// The delivery count it failed on.
        deliveries: u32,
        /// The last failure.
        last_error: String,
    },
}

impl fmt::Display for DeadLetterReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Rejected(reason) => write!(f, "rejected: {reason}"),
            Self::MaxDeliveries {
                deliveries,
                last_error,
            } => write!(
                f,
                "failed {deliveries} deliveries, last error: {last_error}"
            ),
        }
    }
}

/// A backend's answer for one lease of a `Renew` batch. Exhaustive: the backend contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RenewResult {
    /// Still ours: the lease's idle time was reset.
    Kept,
    /// Not ours any more (another consumer took it, it was deleted, or the fence is stale).
    Lost,
}

/// A backend's answer for one lease of an `Ack`, `Release` or `DeadLetter`. Exhaustive: the
/// backend contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettleResult {
    /// Done.
    Ok,
    /// Refused: the lease is not ours any more (or the fence is stale). Nothing was changed.
    Lost,
    /// A transient failure (timeout, connection lost): the engine retries while the lease holds.
    Failed,
}
