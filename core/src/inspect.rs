//! The inspector SPI: what an operator reads of a stream (depth, lag, who holds what and for how
//! long, what was dead-lettered and why), and the two things they may do to its dead letters:
//! put them back, or purge them.
//!
//! Reads are paged by id (a cursor and a limit), so no call walks a million-entry pending list
//! at once. Actions are atomic per entry: a crash midway neither loses nor duplicates an entry,
//! and repeating one does nothing more (the entries it moved are gone from the dead letters).

use crate::publish::DelayedSummary;
use std::future::Future;
use std::time::{Duration, SystemTime};

use crate::backend::BackendError;
use crate::types::MessageId;

/// Why an inspector call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InspectError {
    /// No stream of that name.
    #[error("no stream named {0:?}")]
    NoSuchStream(String),
    /// The stream has no consumer group of that name.
    #[error("stream {stream:?} has no consumer group {group:?} (its groups: {groups:?})")]
    NoSuchGroup {
        /// The stream.
        stream: String,
        /// The group asked for.
        group: String,
        /// The groups it has.
        groups: Vec<String>,
    },
    /// No group was named, and the stream does not have exactly one.
    #[error("stream {stream:?} has {} consumer groups ({groups:?}): name one", .groups.len())]
    WhichGroup {
        /// The stream.
        stream: String,
        /// The groups it has.
        groups: Vec<String>,
    },
    /// The key holds something else than a stream.
    #[error("{key:?} is a {kind}, not a stream")]
    NotAStream {
        /// The key.
        key: String,
        /// What it holds (`string`, `hash`, ...).
        kind: String,
    },
    /// Ids given to an action are not dead letters of the stream: nothing was changed.
    #[error("not dead letters of {stream:?}, nothing changed: {}", describe(.ids))]
    NotDeadLetters {
        /// The stream.
        stream: String,
        /// Each id, and what it is instead.
        ids: Vec<(MessageId, NotDead)>,
    },
    /// A bad argument (an id that is not an id, a zero limit).
    #[error("{0}")]
    Invalid(String),
    /// The backend failed.
    #[error(transparent)]
    Backend(#[from] BackendError),
}

/// What an id given as a dead letter is instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NotDead {
    /// A live entry of the stream (a purge would delete work that may still run).
    Live,
    /// Neither a dead letter nor a live entry.
    Unknown,
}

fn describe(ids: &[(MessageId, NotDead)]) -> String {
    ids.iter()
        .map(|(id, what)| match what {
            NotDead::Live => format!("{id} (a live entry of the stream)"),
            NotDead::Unknown => format!("{id} (no such entry)"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// One page of a listing: at most `limit` entries with ids after `after` (from the start when
/// `None`), in id order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// Where the previous page stopped: the last id it returned.
    pub after: Option<MessageId>,
    /// The most entries to return (at least 1).
    pub limit: usize,
}

impl Page {
    /// The first page of `limit` entries.
    pub fn first(limit: usize) -> Self {
        Self { after: None, limit }
    }

    /// The page after `id`.
    pub fn after(id: impl Into<MessageId>, limit: usize) -> Self {
        Self {
            after: Some(id.into()),
            limit,
        }
    }

    /// A page of no entries is a mistake of the caller: refused.
    pub fn validate(&self) -> Result<(), InspectError> {
        if self.limit == 0 {
            return Err(InspectError::Invalid(
                "a page limit must be at least 1".into(),
            ));
        }
        Ok(())
    }
}

/// A page of entries, and where the next one starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing<T> {
    /// The entries, in id order.
    pub entries: Vec<T>,
    /// The page after this one, if there may be more.
    pub next: Option<Page>,
}

/// A stream, its consumer groups, its dead letters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overview {
    /// The stream's name.
    pub stream: String,
    /// Entries in the stream, pending ones included.
    pub length: u64,
    /// Its consumer groups.
    pub groups: Vec<GroupOverview>,
    /// Entries in its dead-letter stream.
    pub dead_letters: u64,
    /// Its delayed messages, not in the stream yet: how many, and when the next is due.
    pub delayed: DelayedSummary,
}

/// One consumer group of a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupOverview {
    /// The group's name.
    pub name: String,
    /// Entries not yet delivered to the group (`None` when the backend cannot tell, e.g. after
    /// entries were deleted from the middle of the stream).
    pub lag: Option<u64>,
    /// Entries delivered and not yet acknowledged.
    pub pending: u64,
    /// Entries the group has read since the stream began (`None` when the backend cannot
    /// tell). A counter: its growth minus the growth of `pending` is what the group settled
    /// meanwhile, and its growth plus the growth of `lag` is what was appended.
    pub delivered: Option<u64>,
    /// Age (since it was appended) of the oldest pending entry.
    pub oldest_pending_age: Option<Duration>,
    /// Its consumers.
    pub consumers: Vec<ConsumerOverview>,
}

/// One consumer of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerOverview {
    /// Its name.
    pub name: String,
    /// Entries it holds.
    pub pending: u64,
    /// Time since it was last seen (its last fetch, renew or ack).
    pub idle: Duration,
}

/// Which pending entries to list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingQuery {
    /// The page.
    pub page: Page,
    /// Only those held by this consumer.
    pub consumer: Option<String>,
    /// Only those idle at least this long (not renewed: near lapsing, or lapsed).
    pub min_idle: Option<Duration>,
}

impl PendingQuery {
    /// Every pending entry, a page of `limit` at a time.
    pub fn all(limit: usize) -> Self {
        Self {
            page: Page::first(limit),
            consumer: None,
            min_idle: None,
        }
    }
}

/// A delivered, unacknowledged entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingEntry {
    /// Its id.
    pub id: MessageId,
    /// The consumer holding it.
    pub owner: String,
    /// Time since it was last delivered or renewed: it lapses at the claim timeout.
    pub idle: Duration,
    /// How often it was delivered (the fence of the current delivery).
    pub delivery_count: u32,
}

/// An entry of the dead-letter stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetterEntry {
    /// Its id in the dead-letter stream.
    pub id: MessageId,
    /// Its id in the stream it came from.
    pub original_id: MessageId,
    /// Why it was dead-lettered.
    pub reason: String,
    /// Its delivery count then.
    pub delivery_count: u32,
    /// When it was dead-lettered, where the backend knows.
    pub at: Option<SystemTime>,
    /// Its payload, when asked for.
    pub payload: Option<Vec<u8>>,
}

/// Which dead letters an action is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    /// These (their ids in the dead-letter stream).
    Ids(Vec<MessageId>),
    /// Every one.
    All,
    /// Those dead-lettered at least this long ago.
    OlderThan(Duration),
}

/// What a requeue did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Requeued {
    /// Each dead letter put back, and its new id in the stream (a fresh message: delivery
    /// count 1).
    pub moved: Vec<(MessageId, MessageId)>,
    /// Selected ids that were no dead letters by the time their turn came (requeued or purged
    /// before, or meanwhile).
    pub gone: Vec<MessageId>,
}

/// What a purge did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Purged {
    /// The dead letters deleted.
    pub deleted: Vec<MessageId>,
    /// Selected ids that were gone by the time their turn came.
    pub gone: Vec<MessageId>,
}

/// Reads streams and acts on their dead letters. Implemented by each backend; the data types
/// above are plain structs, built by the backends.
pub trait Inspector: Send + Sync + 'static {
    /// The stream, its groups and consumers, its dead letters.
    fn overview(&self, stream: &str)
        -> impl Future<Output = Result<Overview, InspectError>> + Send;

    /// A page of the pending entries of `group` (`None`: the stream's only group).
    fn pending(
        &self,
        stream: &str,
        group: Option<&str>,
        query: &PendingQuery,
    ) -> impl Future<Output = Result<Listing<PendingEntry>, InspectError>> + Send;

    /// A page of the dead letters, with their payloads if `payloads`.
    fn dead_letters(
        &self,
        stream: &str,
        page: &Page,
        payloads: bool,
    ) -> impl Future<Output = Result<Listing<DeadLetterEntry>, InspectError>> + Send;

    /// One dead letter, with its payload (`None`: no such dead letter).
    fn dead_letter(
        &self,
        stream: &str,
        id: &MessageId,
    ) -> impl Future<Output = Result<Option<DeadLetterEntry>, InspectError>> + Send;

    /// Puts dead letters back into the stream as fresh messages, each atomically (moved once,
    /// or not at all). Ids of live entries of the stream refuse the whole action up front
    /// (naming every id that is no dead letter); ids that are no dead letters any more (moved or
    /// purged before) are reported in [`Requeued::gone`], so repeating an interrupted requeue
    /// finishes it and doubles nothing.
    fn requeue(
        &self,
        stream: &str,
        which: &Selection,
    ) -> impl Future<Output = Result<Requeued, InspectError>> + Send;

    /// Deletes dead letters. Ids of live entries of the stream (work that may still run)
    /// refuse the whole action up front; ids that are no dead letters any more are reported in
    /// [`Purged::gone`].
    fn purge_dead(
        &self,
        stream: &str,
        which: &Selection,
    ) -> impl Future<Output = Result<Purged, InspectError>> + Send;
}
