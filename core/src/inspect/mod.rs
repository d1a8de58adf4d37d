//! The inspector SPI: what an operator reads of a stream (depth, lag, who holds what and for how
//! long, what was dead-lettered and why), and the two things they may do to its dead letters:
//! put them back, or purge them.
//!
//! Reads are paged by id (a cursor and a limit), so no call walks a million-entry pending list
//! at once. Actions are atomic per entry: a crash midway neither loses nor duplicates an entry,
//! and repeating one does nothing more (the entries it moved are gone from the dead letters).
//!
//! `views` holds what the reads answer, `queue` the views of a sharded queue summed over its
//! shards.

mod queue;
mod views;

use std::future::Future;
use std::time::Duration;

pub use queue::{group_streams, queue_overview, Discovered, QueueGroupOverview, QueueOverview};
pub use views::{
    ConsumerOverview, DeadLetterEntry, GroupOverview, Listing, Overview, Page, PendingEntry,
    PendingQuery, Purged, Requeued,
};

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

/// Which dead letters an action is for.
///
/// Exhaustive on purpose: every backend acts on each kind, so a new kind is a change each
/// backend has to make, not one it could pass over with a `_` arm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    /// These (their ids in the dead-letter stream).
    Ids(Vec<MessageId>),
    /// Every one.
    All,
    /// Those dead-lettered at least this long ago.
    OlderThan(Duration),
}

/// Reads streams and acts on their dead letters. Implemented by each backend; the data types
/// above are built by the backends with their constructors and `with_*` methods (they are
/// `#[non_exhaustive]`, so they may grow fields without breaking a backend or a reader).
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
