//! The producer SPI: appending messages, at once or when due, once per deduplication key.
//!
//! A [`Publisher`] needs no consumer group or consumer: it only appends. Each message may be
//! **delayed** (not deliverable before its due time, then like any other: its first delivery
//! has delivery count 1) and **deduplicated** (a second publish with the same key while the
//! first is within its time to live enqueues nothing and answers the first one's id). Both are
//! checked by [`Outgoing::check`] before anything is sent.

use std::future::Future;
use std::time::{Duration, SystemTime};

use crate::backend::BackendResult;
use crate::config::MAX_DURATION;
use crate::types::MessageId;

/// The longest delay, and the longest deduplication time to live: one year. Anything longer is
/// almost certainly a unit mistake (milliseconds given as seconds), so it is refused.
pub const MAX_DELAY: Duration = MAX_DURATION;

/// When a published message becomes deliverable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Due {
    /// This long after the publish, on the store's clock (Redis: the server's).
    After(Duration),
    /// At this wall-clock time on the store's clock (Redis: the server's); a time in the past
    /// means at once, like a message without a due time. On virtual time (a simulator, a test)
    /// the store and its publisher take "now" from the virtual clock, as [`Outgoing::check`]
    /// does, so `t` means `t` on that clock: the host's `SystemTime::now()` would put it on
    /// the host's clock instead.
    At(SystemTime),
}

/// Deduplication: while a message published with `key` is within `ttl` of its publish, another
/// publish with the same key enqueues nothing and answers the first message's id.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Dedupe {
    /// The key, unique per piece of work (an order id, a request id).
    pub key: String,
    /// How long the key is remembered after the first publish.
    pub ttl: Duration,
}

impl Dedupe {
    /// Deduplicate by `key` for `ttl` after the first publish.
    pub fn new(key: impl Into<String>, ttl: Duration) -> Self {
        Self {
            key: key.into(),
            ttl,
        }
    }
}

/// One message to publish, as a [`Publisher`] receives it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Outgoing<P> {
    /// The payload, encoded.
    pub payload: P,
    /// When it becomes deliverable; `None`: at once.
    pub due: Option<Due>,
    /// Its deduplication key, if any.
    pub dedupe: Option<Dedupe>,
}

impl<P> Outgoing<P> {
    /// A message deliverable at once, without a deduplication key.
    pub fn new(payload: P) -> Self {
        Self {
            payload,
            due: None,
            dedupe: None,
        }
    }

    /// The same message, due then (`None`: at once).
    #[must_use]
    pub fn with_due(mut self, due: impl Into<Option<Due>>) -> Self {
        self.due = due.into();
        self
    }

    /// The same message, deduplicated by this key (`None`: not deduplicated).
    #[must_use]
    pub fn with_dedupe(mut self, dedupe: impl Into<Option<Dedupe>>) -> Self {
        self.dedupe = dedupe.into();
        self
    }

    /// Whether a publisher may take it: a delay (or a due time from `now`) of at most
    /// [`MAX_DELAY`], and a non-empty deduplication key with a time to live of 1 ms ..=
    /// [`MAX_DELAY`]. `now` is the publisher's wall clock (`SystemTime::now()`, or a virtual
    /// one: the same "now" the store turns a [`Due::At`] into a delay from): the core reads no
    /// clock of its own.
    ///
    /// # Errors
    ///
    /// The first rule it breaks.
    pub fn check(&self, now: SystemTime) -> Result<(), PublishRejected> {
        match self.due {
            Some(Due::After(delay)) if delay > MAX_DELAY => {
                return Err(PublishRejected::DelayTooLong(delay))
            }
            Some(Due::At(at)) => {
                let delay = at.duration_since(now).unwrap_or_default();
                if delay > MAX_DELAY {
                    return Err(PublishRejected::DelayTooLong(delay));
                }
            }
            _ => {}
        }
        if let Some(dedupe) = &self.dedupe {
            if dedupe.key.is_empty() {
                return Err(PublishRejected::EmptyDedupeKey);
            }
            if dedupe.ttl < Duration::from_millis(1) || dedupe.ttl > MAX_DELAY {
                return Err(PublishRejected::DedupeTtl(dedupe.ttl));
            }
        }
        Ok(())
    }
}

/// A message a publisher refuses, before anything is sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PublishRejected {
    /// The delay (or due time) is further away than [`MAX_DELAY`].
    #[error("a delay of {0:?} is longer than the longest one, a year")]
    DelayTooLong(Duration),
    /// The deduplication key is empty.
    #[error("a deduplication key must not be empty")]
    EmptyDedupeKey,
    /// The deduplication time to live is below 1 ms or above [`MAX_DELAY`].
    #[error("a deduplication ttl must be between 1 ms and a year, got {0:?}")]
    DedupeTtl(Duration),
}

/// What a publish did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Published {
    /// The message's id: its entry id, or for a delayed message the id of its delayed entry
    /// (it gets an entry id when it is due). For a duplicate, the first message's id.
    pub id: MessageId,
    /// The deduplication key was taken: nothing was enqueued.
    pub duplicate: bool,
}

impl Published {
    /// A publish of message `id`; `duplicate` if it enqueued nothing.
    pub fn new(id: MessageId, duplicate: bool) -> Self {
        Self { id, duplicate }
    }
}

/// The delayed messages of a stream, not due yet (or due and not promoted yet).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DelayedSummary {
    /// How many there are.
    pub len: u64,
    /// How long until the next one is due (zero if one is due already); `None` if there is
    /// none.
    pub next_due: Option<Duration>,
}

impl DelayedSummary {
    /// `len` delayed messages, the next due after `next_due`.
    pub fn new(len: u64, next_due: Option<Duration>) -> Self {
        Self { len, next_due }
    }
}

/// Appends messages to one stream (Redis Streams, in-memory, your own). Needs no consumer.
///
/// A delayed message waits outside the stream until it is due; a consumer's fetch then moves
/// it into the stream (each exactly once, however many consumers fetch at the same time) and
/// reports when the next one is due ([`FetchAnswer::next_due`](crate::FetchAnswer::next_due)).
pub trait Publisher: Send + Sync + 'static {
    /// The payload type stored in the stream.
    type Payload: Clone + Send + Sync + 'static;

    /// Publishes each message, in order; one result per message. A backend with a network
    /// sends a batch in one round trip. Messages are checked with [`Outgoing::check`] first:
    /// a batch with one it refuses is refused whole, as a fatal error, with nothing sent.
    fn publish_batch(
        &self,
        batch: Vec<Outgoing<Self::Payload>>,
    ) -> impl Future<Output = BackendResult<Vec<Published>>> + Send;

    /// How many delayed messages wait, and when the next is due.
    fn delayed(&self) -> impl Future<Output = BackendResult<DelayedSummary>> + Send;
}
