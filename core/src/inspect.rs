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
///
/// Built with [`Page::first`] or [`Page::after`] (and [`Page::with_after`]); it may grow fields,
/// so it cannot be built field by field outside this crate.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
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

    /// The same page size, after `after` (`None`: from the start).
    #[must_use]
    pub fn with_after(mut self, after: impl Into<Option<MessageId>>) -> Self {
        self.after = after.into();
        self
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
#[non_exhaustive]
pub struct Listing<T> {
    /// The entries, in id order.
    pub entries: Vec<T>,
    /// The page after this one, if there may be more.
    pub next: Option<Page>,
}

impl<T> Listing<T> {
    /// `entries`, followed by the page `next` (`None`: the last page).
    pub fn new(entries: Vec<T>, next: Option<Page>) -> Self {
        Self { entries, next }
    }
}

/// A stream, its consumer groups, its dead letters.
///
/// Built with [`Overview::new`] and its `with_*` methods; it may grow counters, so it cannot be
/// built field by field outside this crate.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
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

impl Overview {
    /// Stream `stream`: empty, without groups, dead letters or delayed messages until set.
    pub fn new(stream: impl Into<String>) -> Self {
        Self {
            stream: stream.into(),
            length: 0,
            groups: Vec::new(),
            dead_letters: 0,
            delayed: DelayedSummary::default(),
        }
    }

    /// The same, with `length` entries in the stream.
    #[must_use]
    pub fn with_length(mut self, length: u64) -> Self {
        self.length = length;
        self
    }

    /// The same, with these consumer groups.
    #[must_use]
    pub fn with_groups(mut self, groups: Vec<GroupOverview>) -> Self {
        self.groups = groups;
        self
    }

    /// The same, with `dead_letters` entries in the dead-letter stream.
    #[must_use]
    pub fn with_dead_letters(mut self, dead_letters: u64) -> Self {
        self.dead_letters = dead_letters;
        self
    }

    /// The same, with these delayed messages.
    #[must_use]
    pub fn with_delayed(mut self, delayed: DelayedSummary) -> Self {
        self.delayed = delayed;
        self
    }
}

/// One consumer group of a stream.
///
/// Built with [`GroupOverview::new`] and its `with_*` methods; it may grow counters, so it
/// cannot be built field by field outside this crate.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
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

impl GroupOverview {
    /// Group `name`: nothing pending, no consumers, and its lag and delivered count unknown
    /// (`None`) until set.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            lag: None,
            pending: 0,
            delivered: None,
            oldest_pending_age: None,
            consumers: Vec::new(),
        }
    }

    /// The same, with this lag (`None`: the backend cannot tell).
    #[must_use]
    pub fn with_lag(mut self, lag: impl Into<Option<u64>>) -> Self {
        self.lag = lag.into();
        self
    }

    /// The same, with `pending` entries delivered and not yet acknowledged.
    #[must_use]
    pub fn with_pending(mut self, pending: u64) -> Self {
        self.pending = pending;
        self
    }

    /// The same, with this count of entries read since the stream began (`None`: the backend
    /// cannot tell).
    #[must_use]
    pub fn with_delivered(mut self, delivered: impl Into<Option<u64>>) -> Self {
        self.delivered = delivered.into();
        self
    }

    /// The same, with its oldest pending entry this old (`None`: nothing pending).
    #[must_use]
    pub fn with_oldest_pending_age(mut self, age: impl Into<Option<Duration>>) -> Self {
        self.oldest_pending_age = age.into();
        self
    }

    /// The same, with these consumers.
    #[must_use]
    pub fn with_consumers(mut self, consumers: Vec<ConsumerOverview>) -> Self {
        self.consumers = consumers;
        self
    }
}

/// One consumer of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConsumerOverview {
    /// Its name.
    pub name: String,
    /// Entries it holds.
    pub pending: u64,
    /// Time since it was last seen (its last fetch, renew or ack).
    pub idle: Duration,
}

impl ConsumerOverview {
    /// Consumer `name`, holding `pending` entries, last seen `idle` ago.
    pub fn new(name: impl Into<String>, pending: u64, idle: Duration) -> Self {
        Self {
            name: name.into(),
            pending,
            idle,
        }
    }
}

/// Which pending entries to list.
///
/// Built with [`PendingQuery::new`] or [`PendingQuery::all`] and its `with_*` methods; it may
/// grow filters, so it cannot be built field by field outside this crate.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PendingQuery {
    /// The page.
    pub page: Page,
    /// Only those held by this consumer.
    pub consumer: Option<String>,
    /// Only those idle at least this long (not renewed: near lapsing, or lapsed).
    pub min_idle: Option<Duration>,
}

impl PendingQuery {
    /// Every pending entry, the page `page` of them.
    pub fn new(page: Page) -> Self {
        Self {
            page,
            consumer: None,
            min_idle: None,
        }
    }

    /// Every pending entry, a page of `limit` at a time.
    pub fn all(limit: usize) -> Self {
        Self::new(Page::first(limit))
    }

    /// The same query, the page `page` of it.
    #[must_use]
    pub fn with_page(mut self, page: Page) -> Self {
        self.page = page;
        self
    }

    /// The same query, only the entries held by `consumer` (`None`: by any).
    #[must_use]
    pub fn with_consumer(mut self, consumer: impl Into<Option<String>>) -> Self {
        self.consumer = consumer.into();
        self
    }

    /// The same query, only the entries idle at least `min_idle` (`None`: however idle).
    #[must_use]
    pub fn with_min_idle(mut self, min_idle: impl Into<Option<Duration>>) -> Self {
        self.min_idle = min_idle.into();
        self
    }
}

/// A delivered, unacknowledged entry.
///
/// Built with [`PendingEntry::new`]; it may grow fields, so it cannot be built field by field
/// outside this crate.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
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

impl PendingEntry {
    /// Entry `id`, held by `owner`, idle for `idle`, delivered `delivery_count` times.
    pub fn new(
        id: impl Into<MessageId>,
        owner: impl Into<String>,
        idle: Duration,
        delivery_count: u32,
    ) -> Self {
        Self {
            id: id.into(),
            owner: owner.into(),
            idle,
            delivery_count,
        }
    }
}

/// An entry of the dead-letter stream.
///
/// Built with [`DeadLetterEntry::new`] and its `with_*` methods; it may grow fields, so it
/// cannot be built field by field outside this crate.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
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

impl DeadLetterEntry {
    /// Dead letter `id`, entry `original_id` of its stream, dead-lettered for `reason` at
    /// delivery count `delivery_count`; without its time or payload.
    pub fn new(
        id: impl Into<MessageId>,
        original_id: impl Into<MessageId>,
        reason: impl Into<String>,
        delivery_count: u32,
    ) -> Self {
        Self {
            id: id.into(),
            original_id: original_id.into(),
            reason: reason.into(),
            delivery_count,
            at: None,
            payload: None,
        }
    }

    /// The same, dead-lettered at `at` (`None`: the backend does not know).
    #[must_use]
    pub fn with_at(mut self, at: impl Into<Option<SystemTime>>) -> Self {
        self.at = at.into();
        self
    }

    /// The same, with its payload (`None`: not asked for).
    #[must_use]
    pub fn with_payload(mut self, payload: impl Into<Option<Vec<u8>>>) -> Self {
        self.payload = payload.into();
        self
    }
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

/// What a requeue did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Requeued {
    /// Each dead letter put back, and its new id in the stream (a fresh message: delivery
    /// count 1).
    pub moved: Vec<(MessageId, MessageId)>,
    /// Selected ids that were no dead letters by the time their turn came (requeued or purged
    /// before, or meanwhile).
    pub gone: Vec<MessageId>,
}

impl Requeued {
    /// Dead letters `moved` (old id, new id), and ids `gone` already.
    pub fn new(moved: Vec<(MessageId, MessageId)>, gone: Vec<MessageId>) -> Self {
        Self { moved, gone }
    }
}

/// What a purge did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Purged {
    /// The dead letters deleted.
    pub deleted: Vec<MessageId>,
    /// Selected ids that were gone by the time their turn came.
    pub gone: Vec<MessageId>,
}

impl Purged {
    /// Dead letters `deleted`, and ids `gone` already.
    pub fn new(deleted: Vec<MessageId>, gone: Vec<MessageId>) -> Self {
        Self { deleted, gone }
    }
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

/// What an inspector found in a listing of streams: a plain stream, or the shards of a sharded
/// queue (streams named `{queue:i}`, see [`Shards::parse`](crate::Shards::parse)), grouped.
///
/// More kinds may be found later: a match on it outside this crate needs a `_` arm (every kind
/// has a [`name`](Self::name)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Discovered {
    /// A stream that is no shard.
    Stream(String),
    /// A sharded queue: its name and the shards found, (index, stream) by index.
    Queue {
        /// The queue's name.
        queue: String,
        /// The shards found, ascending (a shard not created yet is missing).
        shards: Vec<(u16, String)>,
    },
}

impl Discovered {
    /// The stream's or the queue's name.
    pub fn name(&self) -> &str {
        match self {
            Self::Stream(name) => name,
            Self::Queue { queue, .. } => queue,
        }
    }
}

/// Groups `streams` into plain streams and sharded queues, sorted by name (a queue under its
/// name, its shards by index).
pub fn group_streams(streams: impl IntoIterator<Item = String>) -> Vec<Discovered> {
    use std::collections::BTreeMap;
    let mut queues: BTreeMap<String, Vec<(u16, String)>> = BTreeMap::new();
    let mut found = Vec::new();
    for stream in streams {
        match crate::Shards::parse(&stream) {
            Some((queue, shard)) => queues
                .entry(queue.to_owned())
                .or_default()
                .push((shard, stream)),
            None => found.push(Discovered::Stream(stream)),
        }
    }
    found.extend(queues.into_iter().map(|(queue, mut shards)| {
        shards.sort();
        Discovered::Queue { queue, shards }
    }));
    found.sort_by(|a, b| a.name().cmp(b.name()));
    found
}

/// One consumer group over a sharded queue's shards: the group of that name on each shard,
/// summed.
///
/// Built with [`QueueGroupOverview::new`] and its `with_*` methods; it may grow counters, so it
/// cannot be built field by field outside this crate.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueGroupOverview {
    /// The group's name.
    pub name: String,
    /// Entries not yet delivered, over the shards that have the group (`None` when a shard
    /// cannot tell).
    pub lag: Option<u64>,
    /// Entries delivered and not yet acknowledged, over its shards.
    pub pending: u64,
    /// Age of the oldest pending entry of any shard.
    pub oldest_pending_age: Option<Duration>,
    /// Distinct consumer names over its shards.
    pub consumers: usize,
    /// Shards that have this group.
    pub shards: usize,
}

impl QueueGroupOverview {
    /// Group `name`: on no shard yet, nothing pending, no consumers, and its lag unknown
    /// (`None`) until set.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            lag: None,
            pending: 0,
            oldest_pending_age: None,
            consumers: 0,
            shards: 0,
        }
    }

    /// The same, with this lag over its shards (`None`: a shard cannot tell).
    #[must_use]
    pub fn with_lag(mut self, lag: impl Into<Option<u64>>) -> Self {
        self.lag = lag.into();
        self
    }

    /// The same, with `pending` entries delivered and not yet acknowledged.
    #[must_use]
    pub fn with_pending(mut self, pending: u64) -> Self {
        self.pending = pending;
        self
    }

    /// The same, with its oldest pending entry this old (`None`: nothing pending).
    #[must_use]
    pub fn with_oldest_pending_age(mut self, age: impl Into<Option<Duration>>) -> Self {
        self.oldest_pending_age = age.into();
        self
    }

    /// The same, with `consumers` distinct consumer names.
    #[must_use]
    pub fn with_consumers(mut self, consumers: usize) -> Self {
        self.consumers = consumers;
        self
    }

    /// The same, on `shards` shards.
    #[must_use]
    pub fn with_shards(mut self, shards: usize) -> Self {
        self.shards = shards;
        self
    }
}

/// A sharded queue: totals over its shards, and each shard's own overview.
///
/// Built by [`QueueOverview::from_shards`], or with [`QueueOverview::new`] and its `with_*`
/// methods; it may grow counters, so it cannot be built field by field outside this crate.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueOverview {
    /// The queue's name.
    pub queue: String,
    /// Entries in all shards' streams.
    pub length: u64,
    /// Entries delivered and not yet acknowledged, over every group of every shard.
    pub pending: u64,
    /// Entries not yet delivered, over every group of every shard (`None` when a shard cannot
    /// tell).
    pub lag: Option<u64>,
    /// Dead letters of all shards.
    pub dead_letters: u64,
    /// Delayed messages of all shards: how many, and the soonest due.
    pub delayed: DelayedSummary,
    /// Age of the oldest pending entry of any shard.
    pub oldest_pending_age: Option<Duration>,
    /// Each group, summed over the shards that have it, by name.
    pub groups: Vec<QueueGroupOverview>,
    /// Each shard found: its index and overview, ascending.
    pub shards: Vec<(u16, Overview)>,
}

impl QueueOverview {
    /// Queue `queue`: no shards, empty, and its lag unknown (`None`) until set.
    pub fn new(queue: impl Into<String>) -> Self {
        Self {
            queue: queue.into(),
            length: 0,
            pending: 0,
            lag: None,
            dead_letters: 0,
            delayed: DelayedSummary::default(),
            oldest_pending_age: None,
            groups: Vec::new(),
            shards: Vec::new(),
        }
    }

    /// The same, with `length` entries in all shards' streams.
    #[must_use]
    pub fn with_length(mut self, length: u64) -> Self {
        self.length = length;
        self
    }

    /// The same, with `pending` entries delivered and not yet acknowledged.
    #[must_use]
    pub fn with_pending(mut self, pending: u64) -> Self {
        self.pending = pending;
        self
    }

    /// The same, with this lag over every group of every shard (`None`: a shard cannot tell).
    #[must_use]
    pub fn with_lag(mut self, lag: impl Into<Option<u64>>) -> Self {
        self.lag = lag.into();
        self
    }

    /// The same, with `dead_letters` dead letters over all shards.
    #[must_use]
    pub fn with_dead_letters(mut self, dead_letters: u64) -> Self {
        self.dead_letters = dead_letters;
        self
    }

    /// The same, with these delayed messages over all shards.
    #[must_use]
    pub fn with_delayed(mut self, delayed: DelayedSummary) -> Self {
        self.delayed = delayed;
        self
    }

    /// The same, with its oldest pending entry this old (`None`: nothing pending).
    #[must_use]
    pub fn with_oldest_pending_age(mut self, age: impl Into<Option<Duration>>) -> Self {
        self.oldest_pending_age = age.into();
        self
    }

    /// The same, with these groups, summed over their shards.
    #[must_use]
    pub fn with_groups(mut self, groups: Vec<QueueGroupOverview>) -> Self {
        self.groups = groups;
        self
    }

    /// The same, with these shards (index and overview of each).
    #[must_use]
    pub fn with_shards(mut self, shards: Vec<(u16, Overview)>) -> Self {
        self.shards = shards;
        self
    }

    /// The totals of `shards` (index and overview of each shard found) of queue `queue`.
    pub fn from_shards(queue: impl Into<String>, mut shards: Vec<(u16, Overview)>) -> Self {
        use std::collections::{BTreeMap, BTreeSet};
        shards.sort_by_key(|(i, _)| *i);
        let mut groups: BTreeMap<&str, (QueueGroupOverview, BTreeSet<&str>)> = BTreeMap::new();
        let mut total = Self::new(queue).with_lag(Some(0));
        for (_, o) in &shards {
            total.length += o.length;
            total.dead_letters += o.dead_letters;
            total.delayed.len += o.delayed.len;
            total.delayed.next_due = min_some(total.delayed.next_due, o.delayed.next_due);
            for g in &o.groups {
                total.pending += g.pending;
                total.lag = total.lag.zip(g.lag).map(|(a, b)| a + b);
                total.oldest_pending_age = total.oldest_pending_age.max(g.oldest_pending_age);
                let (sum, consumers) = groups.entry(&g.name).or_insert_with(|| {
                    let empty = QueueGroupOverview::new(g.name.clone()).with_lag(Some(0));
                    (empty, BTreeSet::new())
                });
                sum.lag = sum.lag.zip(g.lag).map(|(a, b)| a + b);
                sum.pending += g.pending;
                sum.oldest_pending_age = sum.oldest_pending_age.max(g.oldest_pending_age);
                sum.shards += 1;
                consumers.extend(g.consumers.iter().map(|c| c.name.as_str()));
            }
        }
        total.groups = groups
            .into_values()
            .map(|(mut sum, consumers)| {
                sum.consumers = consumers.len();
                sum
            })
            .collect();
        total.shards = shards;
        total
    }
}

fn min_some(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The overview of the sharded queue whose shards are `shards` (index and stream, as
/// [`group_streams`] finds them): each shard's [`Inspector::overview`], one after the other,
/// and their totals. A shard deleted meanwhile is left out.
///
/// # Errors
///
/// Any other failure of a shard's overview.
pub async fn queue_overview<I: Inspector + ?Sized>(
    inspector: &I,
    queue: &str,
    shards: &[(u16, String)],
) -> Result<QueueOverview, InspectError> {
    let mut found = Vec::with_capacity(shards.len());
    for (index, stream) in shards {
        match inspector.overview(stream).await {
            Ok(overview) => found.push((*index, overview)),
            Err(InspectError::NoSuchStream(_)) => {}
            Err(error) => return Err(error),
        }
    }
    Ok(QueueOverview::from_shards(queue, found))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn overview(stream: &str, length: u64, groups: Vec<GroupOverview>) -> Overview {
        Overview::new(stream)
            .with_length(length)
            .with_groups(groups)
            .with_dead_letters(length / 10)
            .with_delayed(DelayedSummary::new(1, Some(Duration::from_secs(length))))
    }

    fn group(
        name: &str,
        pending: u64,
        lag: Option<u64>,
        oldest: u64,
        who: &[&str],
    ) -> GroupOverview {
        GroupOverview::new(name)
            .with_lag(lag)
            .with_pending(pending)
            .with_oldest_pending_age(Duration::from_secs(oldest))
            .with_consumers(
                who.iter()
                    .map(|name| ConsumerOverview::new(*name, 1, Duration::ZERO))
                    .collect(),
            )
    }

    #[test]
    fn streams_group_into_queues_by_shard_name() {
        let found = group_streams(
            [
                "{orders:1}",
                "plain",
                "{orders:0}",
                "{orders:10}",
                "{jobs:0}",
                "{bad:01}",
            ]
            .map(String::from),
        );
        let queue = |queue: &str, shards: &[(u16, &str)]| Discovered::Queue {
            queue: queue.into(),
            shards: shards.iter().map(|&(i, s)| (i, s.to_owned())).collect(),
        };
        assert_eq!(
            found,
            [
                queue("jobs", &[(0, "{jobs:0}")]),
                queue(
                    "orders",
                    &[(0, "{orders:0}"), (1, "{orders:1}"), (10, "{orders:10}")]
                ),
                Discovered::Stream("plain".into()),
                Discovered::Stream("{bad:01}".into()),
            ]
        );
        assert_eq!(found[1].name(), "orders");
    }

    #[test]
    fn a_queue_overview_sums_its_shards() {
        let shards = vec![
            (
                1,
                overview("{q:1}", 30, vec![group("w", 2, Some(5), 9, &["a", "b"])]),
            ),
            (
                0,
                overview(
                    "{q:0}",
                    20,
                    vec![
                        group("w", 3, Some(1), 4, &["a"]),
                        group("x", 1, None, 1, &[]),
                    ],
                ),
            ),
        ];
        let q = QueueOverview::from_shards("q", shards);
        assert_eq!((q.queue.as_str(), q.length, q.pending), ("q", 50, 6));
        assert_eq!(q.lag, None, "a shard's group cannot tell");
        assert_eq!(q.dead_letters, 5);
        assert_eq!(q.delayed.len, 2);
        assert_eq!(q.delayed.next_due, Some(Duration::from_secs(20)));
        assert_eq!(q.oldest_pending_age, Some(Duration::from_secs(9)));
        assert_eq!(q.shards.iter().map(|(i, _)| *i).collect::<Vec<_>>(), [0, 1]);
        let w = &q.groups[0];
        assert_eq!(
            (w.name.as_str(), w.pending, w.lag, w.consumers, w.shards),
            ("w", 5, Some(6), 2, 2)
        );
        assert_eq!((q.groups[1].name.as_str(), q.groups[1].lag), ("x", None));
        let empty = QueueOverview::from_shards("none", Vec::new());
        assert_eq!(
            (empty.length, empty.lag, empty.oldest_pending_age),
            (0, Some(0), None)
        );
    }
}
