//! The backend SPI: what a driver needs from a stream store. Plain trait definitions, no runtime.
//!
//! A backend handle serves **one stream, one consumer group, one consumer**: several replicas
//! are several handles with distinct consumer names. Every lease operation is owner-checked and
//! fenced (it succeeds only for the consumer holding the message *and* only with the fence of
//! the current delivery) and answers per lease, never all-or-nothing. A transport failure of a
//! whole call is an `Err`; the engine then retries while its local lease expiry keeps it from
//! acting on leases it may have lost.

use std::future::Future;
use std::time::{Duration, SystemTime};

use crate::types::{
    DeadLetterReason, Fence, Fetched, MessageId, RenewResult, SettleResult, Tenure,
};

/// An entry a backend dead-lettered by itself: it can never be delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Undeliverable {
    /// The entry's id in the stream.
    pub id: MessageId,
    /// Why (stored with the dead letter too).
    pub reason: String,
}

impl Undeliverable {
    /// Entry `id`, dead-lettered because of `reason`.
    pub fn new(id: MessageId, reason: impl Into<String>) -> Self {
        Self {
            id,
            reason: reason.into(),
        }
    }
}

/// What one fetch brought: the messages it delivered, and what the driver needs to know about
/// the stream besides, in the same answer so a wrapper cannot lose it on the way.
///
/// It reads as its messages (`answer.len()`, `answer[0]`, `for m in &answer`); the two notes
/// default to nothing, which is right for a backend without delayed messages that never
/// dead-letters by itself.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FetchAnswer<P> {
    /// The deliveries, at most the `max` asked for.
    pub messages: Vec<Fetched<P>>,
    /// How long after this answer the stream's next delayed message is due (zero: it is due
    /// already; `None`: nothing is delayed). The engine fetches again then, and blocks no
    /// longer ([`LeaseEngine::handle_due`]), so an idle worker picks a delayed message up when
    /// it is due without polling; that fetch promotes it.
    ///
    /// [`LeaseEngine::handle_due`]: crate::LeaseEngine::handle_due
    pub next_due: Option<Duration>,
    /// Entries this fetch dead-lettered by itself because it can never deliver them (a Redis
    /// entry without the payload field), for the worker to count and log like its own dead
    /// letters.
    pub undeliverable: Vec<Undeliverable>,
}

impl<P> FetchAnswer<P> {
    /// An answer with these messages, nothing delayed and nothing dead-lettered.
    pub fn new(messages: Vec<Fetched<P>>) -> Self {
        Self {
            messages,
            next_due: None,
            undeliverable: Vec::new(),
        }
    }

    /// The same answer, saying when the next delayed message is due.
    #[must_use]
    pub fn with_next_due(mut self, next_due: Option<Duration>) -> Self {
        self.next_due = next_due;
        self
    }

    /// The same answer, with the entries the fetch dead-lettered by itself.
    #[must_use]
    pub fn with_undeliverable(mut self, undeliverable: Vec<Undeliverable>) -> Self {
        self.undeliverable = undeliverable;
        self
    }
}

impl<P> Default for FetchAnswer<P> {
    fn default() -> Self {
        Self::new(Vec::new())
    }
}

impl<P> From<Vec<Fetched<P>>> for FetchAnswer<P> {
    fn from(messages: Vec<Fetched<P>>) -> Self {
        Self::new(messages)
    }
}

impl<P> std::ops::Deref for FetchAnswer<P> {
    type Target = [Fetched<P>];

    fn deref(&self) -> &[Fetched<P>] {
        &self.messages
    }
}

impl<P> IntoIterator for FetchAnswer<P> {
    type Item = Fetched<P>;
    type IntoIter = std::vec::IntoIter<Fetched<P>>;

    fn into_iter(self) -> Self::IntoIter {
        self.messages.into_iter()
    }
}

impl<'a, P> IntoIterator for &'a FetchAnswer<P> {
    type Item = &'a Fetched<P>;
    type IntoIter = std::slice::Iter<'a, Fetched<P>>;

    fn into_iter(self) -> Self::IntoIter {
        self.messages.iter()
    }
}

/// The message a lease operation is about, and the fence of the delivery it acts for.
///
/// Built with [`LeaseRef::new`] (or from the [`Fetched`] it came with); it may grow fields, so
/// it cannot be built field by field outside this crate.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct LeaseRef {
    /// The message's id in the backend.
    pub id: MessageId,
    /// The fence of the delivery this consumer holds.
    pub fence: Fence,
    /// The consumer's tenure when that delivery was made.
    pub tenure: Tenure,
}

impl LeaseRef {
    /// The lease of message `id` under the delivery with `fence`, without a tenure.
    pub fn new(id: MessageId, fence: Fence) -> Self {
        Self {
            id,
            fence,
            tenure: Tenure::NONE,
        }
    }

    /// The same lease, made under the consumer's `tenure`.
    #[must_use]
    pub fn with_tenure(mut self, tenure: Tenure) -> Self {
        self.tenure = tenure;
        self
    }
}

impl<P> From<&Fetched<P>> for LeaseRef {
    /// The lease a fetch just handed out.
    fn from(message: &Fetched<P>) -> Self {
        Self::new(message.id.clone(), message.fence).with_tenure(message.tenure)
    }
}

/// Whether an error is worth retrying. Exhaustive: the backend contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Timeouts, lost connections, a server restarting: retry with backoff.
    Transient,
    /// Configuration, authentication, protocol errors: retrying will not help.
    Fatal,
}

/// A failed backend call.
#[derive(Debug, thiserror::Error)]
#[error("{kind:?} backend error: {message}")]
pub struct BackendError {
    kind: ErrorKind,
    message: String,
    #[source]
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl BackendError {
    /// A transient error: the call may succeed if retried.
    pub fn transient(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Transient, message)
    }

    /// A fatal error: retrying will not help (bad configuration, authentication).
    pub fn fatal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Fatal, message)
    }

    fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            source: None,
        }
    }

    /// Attaches the underlying error.
    #[must_use]
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    /// Whether the call is worth retrying.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// Shorthand for `kind() == ErrorKind::Transient`.
    pub fn is_transient(&self) -> bool {
        self.kind == ErrorKind::Transient
    }
}

/// The result type of backend calls.
pub type BackendResult<T> = Result<T, BackendError>;

/// A stream store with fenced, owner-checked leases (Redis Streams, in-memory, your own).
///
/// Methods take `&self` and may be called concurrently (a fetch may block while renews and acks
/// proceed), so implementations share their connection state internally.
///
/// The contract in short (the backend guide, `GUIDE.md` in `leasehold-conformance`, has it
/// method by method, with examples; the conformance suite checks it):
///
/// - **Never block the thread.** The worker polls each call's future first on its one driver
///   loop, which also starts the handlers and sends the heartbeats of every stream it serves: a
///   call that blocks the thread while polled (a synchronous SQLite, file or HTTP client) stalls
///   all of them. Run blocking work on threads of its own and return a future that waits for
///   the result (`blocking::unblock`, a thread and a oneshot channel, or
///   `tokio::task::spawn_blocking` in a backend tied to tokio).
/// - **Let an empty fetch wait** up to its `wait` for a message to arrive. One that answers
///   at once leaves an idle worker to look again only a poll interval later: on a SQLite-style
///   test backend, 20–851 ms from publish to pickup, against 0–1 ms with a fetch that waits.
/// - **Fences** are carried, never compared or ordered, by the engine: from a delivery's fetch
///   to its renews, acks, releases and dead-letters. Refuse (`Lost`) any whose fence is not the
///   current delivery's; see [`Fence`] for what makes a token a fence.
/// - **Release** is owner-checked and fenced like an ack. Afterwards the message belongs to
///   no one: any consumer, the releasing one included, may take it once the delay has passed.
///   A backend may cap the delay (Redis: at the claim timeout); it documents its cap.
pub trait Backend: Send + Sync + 'static {
    /// The payload type stored in the stream (e.g. `Vec<u8>` or `bytes::Bytes`). Cloned once
    /// per handler invocation, so it should be cheap to clone.
    type Payload: Clone + Send + Sync + 'static;

    /// Appends a message; returns its id. Equal payloads are distinct messages.
    fn publish(
        &self,
        payload: Self::Payload,
    ) -> impl Future<Output = BackendResult<MessageId>> + Send;

    /// The idle time after which this backend lets another consumer take a lease, if it has a
    /// fixed one. The worker refuses to start when it differs from the engine's
    /// `claim_timeout`: a shorter one would let peers take messages the engine thinks it holds.
    fn claim_timeout(&self) -> Option<Duration> {
        None
    }

    /// When message `id` was appended to the stream, if the backend knows (Redis entry ids
    /// carry the server's time of the append): for measuring how long messages wait to be
    /// picked up. The default knows nothing.
    fn enqueued_at(&self, id: &MessageId) -> Option<SystemTime> {
        let _ = id;
        None
    }

    /// Whether the worker fetches from this stream from now on (a shard of a sharded queue
    /// assigned to it or to others; see [`Membership`](crate::Membership)). Leases keep being
    /// renewed, acked and released either way. A backend may free what only fetches need while
    /// it is not fetched from: the Redis backend closes its blocking connection, so a worker
    /// holds one only per shard it fetches from. The default does nothing.
    fn set_fetching(&self, fetching: bool) {
        let _ = fetching;
    }

    /// Takes up to `max` messages for this consumer: reclaimable ones (not renewed for the
    /// claim timeout, or released and past their delay) and new ones, neither starving the
    /// other; delayed messages that are due join the stream first (see
    /// [`Publisher`](crate::Publisher)). When none is available it may wait up to `wait` for new
    /// entries (or the next due time). Never returns more than `max`; every delivery carries its
    /// delivery count and fence. The answer also says when the next delayed message is due and
    /// which entries the fetch dead-lettered by itself ([`FetchAnswer`]); a backend without
    /// either answers `FetchAnswer::new(messages)` (or `messages.into()`).
    ///
    /// The future may be dropped while it waits (at shutdown, on a call timeout). Dropping it
    /// must lose nothing: messages it already took stay pending with this consumer and are
    /// reclaimed by someone after the claim timeout.
    fn fetch(
        &self,
        max: usize,
        wait: Duration,
    ) -> impl Future<Output = BackendResult<FetchAnswer<Self::Payload>>> + Send;

    /// Resets the idle time of each lease this consumer still holds with that fence; one result
    /// per lease, in order. A lease held by someone else is `Lost` and is not moved.
    fn renew(
        &self,
        lease_refs: &[LeaseRef],
    ) -> impl Future<Output = BackendResult<Vec<RenewResult>>> + Send;

    /// Acknowledges each message this consumer holds with that fence (it leaves the group's
    /// pending list, and the stream once no consumer group of it still needs it); one result
    /// per lease, in order (`Ok` or `Lost`). Another consumer's delivery is never removed.
    fn ack(
        &self,
        lease_refs: &[LeaseRef],
    ) -> impl Future<Output = BackendResult<Vec<SettleResult>>> + Send;

    /// Gives the lease back; any consumer may take the message once `delay` has passed.
    /// A backend may cap `delay` (Redis: at the claim timeout) and documents it.
    fn release(
        &self,
        lease_ref: &LeaseRef,
        delay: Duration,
    ) -> impl Future<Output = BackendResult<SettleResult>> + Send;

    /// Moves the message to the dead-letter stream with the reason and delivery count, and
    /// acknowledges it, atomically.
    fn dead_letter(
        &self,
        lease_ref: &LeaseRef,
        reason: &DeadLetterReason,
    ) -> impl Future<Output = BackendResult<SettleResult>> + Send;

    /// Messages in the stream (pending ones included).
    fn stream_len(&self) -> impl Future<Output = BackendResult<u64>> + Send;

    /// Messages delivered to any consumer and not yet acknowledged.
    fn pending(&self) -> impl Future<Output = BackendResult<u64>> + Send;
}
