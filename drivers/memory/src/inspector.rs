//! [`MemoryInspector`]: the inspector SPI ([`Inspector`]) over memory streams.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

use leasehold_core::{
    group_streams, queue_overview, DeadLetterEntry, Discovered, InspectError, Inspector, Listing,
    MessageId, NotDead, Overview, Page, PendingEntry, PendingQuery, Purged, QueueOverview,
    Requeued, Selection,
};

use crate::id;
use crate::stream::MemoryStream;

/// Reads [`MemoryStream`]s and acts on their dead letters, with the semantics the Redis
/// backend's inspector has on Redis. Cheap to clone.
///
/// Memory streams have no names of their own: the inspector knows those it was given
/// ([`with_stream`](Self::with_stream), [`add`](Self::add)), and any other name is
/// [`InspectError::NoSuchStream`]. Each has one consumer group, named
/// [`DEFAULT_GROUP`](Self::DEFAULT_GROUP) unless [`group`](Self::group) says otherwise.
///
/// - **Overview**: `length` counts the entries in the stream, pending ones included (not the
///   delayed messages waiting outside it); `lag` the entries never delivered. The oldest pending
///   entry's age and each consumer's idle time are measured on the stream's clock: the age
///   since the entry entered the stream (a delayed message enters when a fetch moves it in),
///   the idle time since the consumer's last fetch, renew, ack, release or dead-letter (or its
///   registration). Consumers are listed by name: every live one, and one whose handle was
///   dropped while it still holds entries, until those are taken over.
/// - **Ids** are the stream's `0-<n>`, and the dead letters' own `0-<n>` (from a counter of the
///   dead-letter stream, never reused): the same text can name an entry and a dead letter. A
///   cursor ([`Page::after`](leasehold_core::Page)) of another form is
///   [`InspectError::Invalid`].
/// - **Dead-letter times** are kept on the stream's clock: [`Selection::OlderThan`] compares
///   ages on it, and a listed entry's `at` is the system time now less its age there.
/// - **Requeue** removes each dead letter and appends its payload as a fresh entry (the next
///   id; its first delivery has delivery count 1) in one critical section per dead letter, and
///   wakes waiting fetches. **Purge** removes each in one too. Explicit ids of live entries,
///   or that are no entry ids at all, refuse the whole action with nothing changed; ids that
///   are no dead letters (any more: moved or purged before, or meanwhile) are reported `gone`.
#[derive(Clone, Debug)]
pub struct MemoryInspector {
    streams: Arc<BTreeMap<String, MemoryStream>>,
    group: Arc<str>,
}

impl Default for MemoryInspector {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryInspector {
    /// The name the inspector gives each stream's one consumer group, unless told another.
    pub const DEFAULT_GROUP: &'static str = "default";

    /// An inspector that knows no stream yet.
    pub fn new() -> Self {
        Self {
            streams: Arc::default(),
            group: Self::DEFAULT_GROUP.into(),
        }
    }

    /// Knows `stream` as `name` too.
    #[must_use]
    pub fn with_stream(mut self, name: impl Into<String>, stream: &MemoryStream) -> Self {
        self.add(name, stream);
        self
    }

    /// Knows `stream` as `name` from now on (in place of any stream of that name). Clones made
    /// before do not see it.
    pub fn add(&mut self, name: impl Into<String>, stream: &MemoryStream) -> &mut Self {
        Arc::make_mut(&mut self.streams).insert(name.into(), stream.clone());
        self
    }

    /// Knows every shard of `queue` under its stream name (`{queue:i}`), so that it shows as
    /// one sharded queue ([`discover`](Self::discover), [`queue`](Self::queue)).
    #[must_use]
    pub fn with_queue(mut self, queue: &crate::MemoryQueue) -> Self {
        for (name, stream) in queue.shards().streams().zip(queue.streams()) {
            self.add(name, stream);
        }
        self
    }

    /// The names of the streams it knows, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.streams.keys().map(String::as_str)
    }

    /// The streams it knows, the shards of each sharded queue (named `{queue:i}`) grouped under
    /// the queue, sorted by name.
    pub fn discover(&self) -> Vec<Discovered> {
        group_streams(self.streams.keys().cloned())
    }

    /// The sharded queue `queue`: the overviews of the shards it knows and their totals, or
    /// `None` when it knows no stream named like one of its shards.
    ///
    /// # Errors
    ///
    /// As [`Inspector::overview`].
    pub async fn queue(&self, queue: &str) -> Result<Option<QueueOverview>, InspectError> {
        let shards = self.discover().into_iter().find_map(|d| match d {
            Discovered::Queue {
                queue: name,
                shards,
            } if name == queue => Some(shards),
            _ => None,
        });
        match shards {
            Some(shards) => queue_overview(self, queue, &shards).await.map(Some),
            None => Ok(None),
        }
    }

    /// Names the streams' consumer group (default [`DEFAULT_GROUP`](Self::DEFAULT_GROUP)).
    #[must_use]
    pub fn group(mut self, name: impl Into<String>) -> Self {
        self.group = name.into().into();
        self
    }

    fn stream(&self, name: &str) -> Result<&MemoryStream, InspectError> {
        self.streams
            .get(name)
            .ok_or_else(|| InspectError::NoSuchStream(name.into()))
    }

    /// The dead letters (sequence numbers) `which` selects, oldest first. Explicit ids that
    /// name live entries, or no entry id at all, refuse the whole action; ids that are no dead
    /// letters (any more) go on, to be reported gone, so repeating an interrupted action
    /// finishes it.
    fn select(&self, name: &str, which: &Selection) -> Result<Vec<u64>, InspectError> {
        let stream = self.stream(name)?;
        let now = stream.now();
        let store = stream.store();
        match which {
            Selection::Ids(ids) => {
                let wrong = store.not_dead(ids);
                let refused = wrong
                    .iter()
                    .any(|(id, what)| *what == NotDead::Live || id::parse(id.as_str()).is_none());
                if refused {
                    return Err(InspectError::NotDeadLetters {
                        stream: name.into(),
                        ids: wrong,
                    });
                }
                Ok(ids.iter().filter_map(|id| id::parse(id.as_str())).collect())
            }
            Selection::All => Ok(store.dead_since(now, None)),
            Selection::OlderThan(age) => Ok(store.dead_since(now, Some(*age))),
        }
    }
}

impl Inspector for MemoryInspector {
    async fn overview(&self, stream: &str) -> Result<Overview, InspectError> {
        let memory = self.stream(stream)?;
        let now = memory.now();
        Ok(memory.store().overview(now, stream, &self.group))
    }

    async fn pending(
        &self,
        stream: &str,
        group: Option<&str>,
        query: &PendingQuery,
    ) -> Result<Listing<PendingEntry>, InspectError> {
        let memory = self.stream(stream)?;
        match group {
            Some(group) if group != &*self.group => Err(InspectError::NoSuchGroup {
                stream: stream.into(),
                group: group.into(),
                groups: vec![self.group.to_string()],
            }),
            _ => {
                let after = cursor(&query.page)?;
                let now = memory.now();
                let entries = memory.store().pending_page(now, after, query);
                Ok(listing(entries, query.page.limit, |e| &e.id))
            }
        }
    }

    async fn dead_letters(
        &self,
        stream: &str,
        page: &Page,
        payloads: bool,
    ) -> Result<Listing<DeadLetterEntry>, InspectError> {
        let memory = self.stream(stream)?;
        let after = cursor(page)?;
        let times = (memory.now(), SystemTime::now());
        let entries = memory.store().dead_page(times, after, page.limit, payloads);
        Ok(listing(entries, page.limit, |e| &e.id))
    }

    async fn dead_letter(
        &self,
        stream: &str,
        id: &MessageId,
    ) -> Result<Option<DeadLetterEntry>, InspectError> {
        let memory = self.stream(stream)?;
        let Some(seq) = id::parse(id.as_str()) else {
            return Ok(None);
        };
        let times = (memory.now(), SystemTime::now());
        Ok(memory.store().dead_entry(times, seq))
    }

    async fn requeue(&self, stream: &str, which: &Selection) -> Result<Requeued, InspectError> {
        let seqs = self.select(stream, which)?;
        let memory = self.stream(stream)?;
        let mut report = Requeued::default();
        for seq in seqs {
            let now = memory.now();
            let moved = memory.store().requeue(now, seq);
            match moved {
                Some(new_id) => {
                    memory.wake();
                    report.moved.push((id::format(seq), new_id));
                }
                None => report.gone.push(id::format(seq)),
            }
        }
        Ok(report)
    }

    async fn purge_dead(&self, stream: &str, which: &Selection) -> Result<Purged, InspectError> {
        let seqs = self.select(stream, which)?;
        let memory = self.stream(stream)?;
        let mut report = Purged::default();
        for seq in seqs {
            let deleted = memory.store().purge(seq);
            let id = id::format(seq);
            if deleted {
                report.deleted.push(id);
            } else {
                report.gone.push(id);
            }
        }
        Ok(report)
    }
}

/// The sequence number a page starts after (0: from the start); refuses an empty page and a
/// cursor that is no id of a memory stream.
fn cursor(page: &Page) -> Result<u64, InspectError> {
    page.validate()?;
    match &page.after {
        None => Ok(0),
        Some(after) => id::parse(after.as_str()).ok_or_else(|| {
            InspectError::Invalid(format!("{after:?} is not an id of a memory stream (0-<n>)"))
        }),
    }
}

/// A page of `entries` (asked for `limit`): another may follow if it is full.
fn listing<T>(entries: Vec<T>, limit: usize, id: impl Fn(&T) -> &MessageId) -> Listing<T> {
    let next = (entries.len() == limit)
        .then(|| {
            entries
                .last()
                .map(|last| Page::after(id(last).clone(), limit))
        })
        .flatten();
    Listing::new(entries, next)
}
