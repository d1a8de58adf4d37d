//! What an inspector's reads answer: pages, overviews, pending entries, dead letters, and
//! what an action did. Built with constructors, so they can grow.

use std::time::{Duration, SystemTime};

use super::InspectError;
use crate::publish::DelayedSummary;
use crate::types::MessageId;

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
