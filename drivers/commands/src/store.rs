//! The store SPI: where command states live, next to the stream that carries the commands.

use std::future::Future;
use std::pin::Pin;

use futures::Stream;
use leasehold_core::Backend;
use serde::{Deserialize, Serialize};

use crate::state::{CommandState, Status};

/// A store call that failed: the backend SPI's error, transient (worth retrying: the worker
/// retries with backoff) or fatal (configuration, authentication, corrupt data).
pub type StoreError = leasehold_core::BackendError;

/// What an atomic submit did.
#[derive(Debug, Clone, PartialEq)]
pub enum Submit {
    /// The state was written and the command enqueued, together.
    Created,
    /// A command with this id exists: nothing was written or enqueued; here is its state.
    Exists(Box<CommandState>),
}

/// Where a listing by status stands: after the command with this status time and id.
///
/// Listings are ordered by ([`status_changed_at`](CommandState::status_changed_at), id). As
/// text (its `Display`, `FromStr` and serde form) it is `<millis>:<id>`, for a command line's
/// `--after`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct Cursor {
    /// The status time of the last command seen (milliseconds since the Unix epoch).
    pub at: u64,
    /// Its id.
    pub id: String,
}

impl Cursor {
    /// The cursor just after `state` in the listing of its status.
    pub fn of(state: &CommandState) -> Self {
        Self {
            at: state.status_changed_at,
            id: state.id.clone(),
        }
    }
}

impl std::fmt::Display for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.at, self.id)
    }
}

/// Text that is not a [`Cursor`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a listing cursor (<millis>:<id>)")]
pub struct CursorError(String);

impl std::str::FromStr for Cursor {
    type Err = CursorError;

    fn from_str(text: &str) -> Result<Self, CursorError> {
        let (at, id) = text
            .split_once(':')
            .ok_or_else(|| CursorError(text.into()))?;
        let at = at.parse().map_err(|_| CursorError(text.into()))?;
        Ok(Self { at, id: id.into() })
    }
}

impl From<Cursor> for String {
    fn from(cursor: Cursor) -> Self {
        cursor.to_string()
    }
}

impl TryFrom<String> for Cursor {
    type Error = CursorError;

    fn try_from(text: String) -> Result<Self, CursorError> {
        text.parse()
    }
}

/// Which page of a listing to read: at most `limit` states, after `after` (from the start
/// when `None`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Page {
    /// At most this many states; clamped to `1..=`[`Page::MAX_LIMIT`].
    pub limit: usize,
    /// Start after this command (from [`Listing::next`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<Cursor>,
}

impl Page {
    /// The largest page a store reads.
    pub const MAX_LIMIT: usize = 1000;

    /// The first `limit` states.
    pub fn first(limit: usize) -> Self {
        Self { limit, after: None }
    }

    /// This page, starting after `cursor` instead.
    #[must_use]
    pub fn starting_after(mut self, cursor: Cursor) -> Self {
        self.after = Some(cursor);
        self
    }

    /// The limit a store applies: `limit` within `1..=MAX_LIMIT`.
    pub fn effective_limit(&self) -> usize {
        self.limit.clamp(1, Self::MAX_LIMIT)
    }
}

/// The first 100.
impl Default for Page {
    fn default() -> Self {
        Self::first(100)
    }
}

/// How many commands each status holds (see [`CommandStore::counts`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusCounts([u64; 5]);

impl StatusCounts {
    /// The counts, in the order of [`Status::ALL`].
    pub fn new(counts: [u64; 5]) -> Self {
        Self(counts)
    }

    /// Commands in `status`.
    pub fn get(&self, status: Status) -> u64 {
        self.0[status_slot(status)]
    }

    /// Every status with its count, in life order.
    pub fn iter(&self) -> impl Iterator<Item = (Status, u64)> + '_ {
        Status::ALL.into_iter().zip(self.0)
    }

    /// Commands in all statuses.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
}

/// The position of `status` in [`Status::ALL`].
pub(crate) fn status_slot(status: Status) -> usize {
    match status {
        Status::Submitted => 0,
        Status::Running => 1,
        Status::Succeeded => 2,
        Status::Failed => 3,
        Status::Cancelled => 4,
    }
}

/// One page of the commands in a status.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Listing {
    /// The states, ordered by ([`status_changed_at`](CommandState::status_changed_at), id).
    pub states: Vec<CommandState>,
    /// Where the next page starts; `None` once the listing is complete. A page may hold fewer
    /// states than its limit (even none) and still have a next one: a store skips expired
    /// states, and bounds the work of one call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<Cursor>,
}

impl Listing {
    /// The page after this one, of `limit` states, if there is more.
    pub fn next_page(&self, limit: usize) -> Option<Page> {
        self.next
            .clone()
            .map(|cursor| Page::first(limit).starting_after(cursor))
    }
}

/// A stream of command ids that were just cancelled (a hint: missing one is harmless).
pub type CancelFeed = Pin<Box<dyn Stream<Item = String> + Send>>;

/// Where a command queue keeps its states and its stream.
///
/// Implementations must make [`submit`](Self::submit) atomic (state and stream entry written
/// together, or neither) and [`compare_and_set`](Self::compare_and_set) a true compare-and-set
/// on the version, and must refresh the state's TTL on every write.
///
/// The operator calls ([`list`](Self::list), [`requeue`](Self::requeue)) have defaults that
/// answer a fatal "not supported" error; a store that implements them keeps an index per
/// status, moved within every state write (submit, compare-and-set, requeue) so that a listing
/// never needs a scan of all states and never shows a command under a status it left.
pub trait CommandStore: Send + Sync + 'static {
    /// The queue's name: the `queue` label of the command metrics, and the stream name of
    /// its workers (in their logs and metrics). Default: `commands`.
    fn queue(&self) -> &str {
        "commands"
    }

    /// The stream backend a worker consumes the queue's entries with.
    type Backend: Backend<Payload = Self::Payload>;
    /// The backend's payload type.
    type Payload: AsRef<[u8]> + Clone + Send + Sync + 'static;

    /// Writes `state` (version 1) and enqueues `entry` for it, unless `state.id` exists.
    fn submit(
        &self,
        state: &CommandState,
        entry: &[u8],
    ) -> impl Future<Output = Result<Submit, StoreError>> + Send;

    /// The state of command `id`, if it exists (and has not expired).
    fn load(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<CommandState>, StoreError>> + Send;

    /// Writes `state` if the stored version is `state.version - 1`; returns whether it did. A
    /// missing (expired) state is a conflict.
    fn compare_and_set(
        &self,
        state: &CommandState,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// The live commands whose status is `status`, ordered by
    /// ([`status_changed_at`](CommandState::status_changed_at), id), starting after
    /// `page.after`, at most [`page.effective_limit()`](Page::effective_limit) of them.
    ///
    /// Ids whose state expired (or moved to another status) are skipped, and dropped from the
    /// index as they are met. Paging through a status while commands move sees every command
    /// that stays in it exactly once.
    fn list(
        &self,
        status: Status,
        page: &Page,
    ) -> impl Future<Output = Result<Listing, StoreError>> + Send {
        let _ = (status, page);
        async { Err(StoreError::fatal("this command store cannot list commands")) }
    }

    /// How many commands each status holds, from the status indexes (one cheap read each, no
    /// scan). An upper bound: a command whose state expired counts until a listing of its
    /// status meets it.
    fn counts(&self) -> impl Future<Output = Result<StatusCounts, StoreError>> + Send {
        async {
            Err(StoreError::fatal(
                "this command store cannot count commands",
            ))
        }
    }

    /// [`compare_and_set`](Self::compare_and_set) that also enqueues `entry` if it writes:
    /// both or neither. An operator's retry of a FAILED command uses it, so a retry is never
    /// lost (state written, nothing enqueued) nor doubled (two writers of one version).
    fn requeue(
        &self,
        state: &CommandState,
        entry: &[u8],
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        let _ = (state, entry);
        async {
            Err(StoreError::fatal(
                "this command store cannot requeue commands",
            ))
        }
    }

    /// Tells every worker that command `id` was just cancelled (best effort).
    fn announce_cancel(&self, id: &str) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// A feed of [`announce_cancel`](Self::announce_cancel)ed ids. It may end (a dropped
    /// connection); the worker then subscribes again.
    fn cancels(&self) -> impl Future<Output = Result<CancelFeed, StoreError>> + Send;

    /// A stream consumer for one worker, whose claim timeout is `claim_timeout`. A sharded
    /// store answers an error here: its workers take [`consumers`](Self::consumers).
    fn consumer(
        &self,
        claim_timeout: std::time::Duration,
    ) -> impl Future<Output = Result<Self::Backend, StoreError>> + Send;

    /// Every stream consumer one worker needs, each with the name the worker serves it under
    /// (in its logs and metrics): one per shard of a sharded store, all sharing the worker's
    /// one budget. Default: [`consumer`](Self::consumer), named [`queue`](Self::queue).
    fn consumers(
        &self,
        claim_timeout: std::time::Duration,
    ) -> impl Future<Output = Result<Vec<(String, Self::Backend)>, StoreError>> + Send {
        async move {
            let backend = self.consumer(claim_timeout).await?;
            Ok(vec![(self.queue().to_owned(), backend)])
        }
    }
}

/// The listing of `status` over several shards: `listings` are each shard's answer to the same
/// `page`. Every shard's page starts after the same cursor, so the first `limit` of the merge
/// are among the pages; but a shard whose page ended early (it has more) only covers the
/// listing up to its `next`, so the merge stops there too, and continues from there.
///
/// For a sharded store's [`list`](CommandStore::list): ask every shard for `page`, then merge.
pub fn merge_listings(listings: Vec<Listing>, page: &Page) -> Listing {
    let limit = page.effective_limit();
    // The furthest point every shard's page covers: the least `next` of those with more.
    let covered = listings.iter().filter_map(|l| l.next.clone()).min();
    let mut states: Vec<CommandState> = listings.into_iter().flat_map(|l| l.states).collect();
    states.sort_by(|a, b| Cursor::of(a).cmp(&Cursor::of(b)));
    if let Some(bound) = &covered {
        states.retain(|state| Cursor::of(state) <= *bound);
    }
    let truncated = states.len() > limit;
    states.truncate(limit);
    let next = if truncated || covered.is_some() {
        // After the last state given, or (none given) as far as every shard looked.
        states.last().map(Cursor::of).or(covered)
    } else {
        None
    };
    Listing { states, next }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_reads_back_from_its_text_and_json() {
        let cursor = Cursor {
            at: 1_700_000_000_123,
            id: "vm:1".into(),
        };
        assert_eq!(cursor.to_string(), "1700000000123:vm:1");
        assert_eq!(cursor.to_string().parse(), Ok(cursor.clone()));
        let json = serde_json::to_string(&cursor).unwrap();
        assert_eq!(json, "\"1700000000123:vm:1\"");
        assert_eq!(serde_json::from_str::<Cursor>(&json).unwrap(), cursor);
        for bad in ["", "12", "x:vm", "-1:vm"] {
            assert!(bad.parse::<Cursor>().is_err(), "{bad:?}");
        }
        assert!(serde_json::from_str::<Cursor>("\"nope\"").is_err());
    }

    #[test]
    fn cursors_order_by_time_then_id_bytes() {
        let at = |at, id: &str| Cursor { at, id: id.into() };
        assert!(at(1, "b") < at(2, "a"));
        assert!(at(2, "a") < at(2, "ab"));
        assert!(at(2, "B") < at(2, "a"));
    }

    fn listed(ids: &[(u64, &str)], next: Option<(u64, &str)>) -> Listing {
        let states = ids
            .iter()
            .map(|&(at, id)| {
                let mut state = CommandState::submitted(id.into(), "k".into(), Default::default());
                state.status_changed_at = at;
                state
            })
            .collect();
        let next = next.map(|(at, id)| Cursor { at, id: id.into() });
        Listing { states, next }
    }

    fn ids(listing: &Listing) -> Vec<&str> {
        listing.states.iter().map(|s| s.id.as_str()).collect()
    }

    #[test]
    fn shard_listings_merge_in_order_up_to_the_limit() {
        let a = listed(&[(1, "a"), (4, "d"), (6, "f")], Some((6, "f")));
        let b = listed(&[(2, "b"), (3, "c")], None);
        let merged = merge_listings(vec![a, b], &Page::first(3));
        assert_eq!(ids(&merged), ["a", "b", "c"]);
        assert_eq!(
            merged.next,
            Some(Cursor {
                at: 3,
                id: "c".into()
            })
        );
        // Everything fits, nobody has more: complete.
        let a = listed(&[(1, "a")], None);
        let b = listed(&[(2, "b")], None);
        let merged = merge_listings(vec![a, b], &Page::first(3));
        assert_eq!(ids(&merged), ["a", "b"]);
        assert_eq!(merged.next, None);
    }

    #[test]
    fn a_shard_that_stopped_early_bounds_the_merged_page() {
        // Shard a looked at entries up to 2 (skipping expired ones) and has more; shard b's
        // state at 5 may not come before a's next ones, so the page stops at a's cursor.
        let a = listed(&[(1, "a")], Some((2, "x")));
        let b = listed(&[(5, "e")], None);
        let merged = merge_listings(vec![a, b], &Page::first(10));
        assert_eq!(ids(&merged), ["a"]);
        assert_eq!(
            merged.next,
            Some(Cursor {
                at: 1,
                id: "a".into()
            })
        );
        // Nothing given yet: continue where every shard has looked.
        let a = listed(&[], Some((2, "x")));
        let b = listed(&[(5, "e")], None);
        let merged = merge_listings(vec![a, b], &Page::first(10));
        assert!(merged.states.is_empty());
        assert_eq!(
            merged.next,
            Some(Cursor {
                at: 2,
                id: "x".into()
            })
        );
    }

    #[test]
    fn a_page_limit_is_clamped() {
        assert_eq!(Page::first(0).effective_limit(), 1);
        assert_eq!(Page::first(5).effective_limit(), 5);
        assert_eq!(Page::first(usize::MAX).effective_limit(), Page::MAX_LIMIT);
        let listing = Listing {
            states: Vec::new(),
            next: Some(Cursor {
                at: 1,
                id: "a".into(),
            }),
        };
        let next = listing.next_page(7).unwrap();
        assert_eq!((next.limit, next.after), (7, listing.next.clone()));
        assert_eq!(Page::default().limit, 100);
    }
}
