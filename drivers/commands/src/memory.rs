//! The in-process store: states in a map next to a [`MemoryStream`] (or one per shard), one
//! lock for both, and an ordered index per status, moved with every state write.

use std::collections::{BTreeSet, HashMap};
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures::channel::mpsc;
use leasehold_core::{ShardError, Shards};
use leasehold_memory::{MemoryBackend, MemoryStream};

use crate::state::{CommandState, Status};
use crate::store::{
    status_slot as slot, CancelFeed, CommandStore, Cursor, Listing, Page, StatusCounts, StoreError,
    Submit,
};
use crate::DEFAULT_TTL;

/// The name the routing of a sharded memory store hashes under (only the count matters).
const SHARDS_NAME: &str = "commands";
/// Expired states are swept out after this many submits (reads skip them anyway).
const SWEEP_EVERY: u64 = 1024;

/// A command store in process memory, for tests, demos and single-process use.
///
/// States expire `ttl` after their last write, on the stream's clock (so a
/// [`ManualClock`](leasehold_memory::ManualClock) drives expiry too).
///
/// A [`sharded`](Self::sharded) store spreads its commands over several streams by id
/// ([`Shards::for_key`]), as the Redis store does over shards; a worker consumes them all.
#[derive(Clone)]
pub struct MemoryCommandStore {
    streams: Vec<MemoryStream>,
    shards: Shards,
    ttl: Duration,
    inner: Arc<Mutex<Inner>>,
}

#[derive(Default)]
struct Inner {
    states: HashMap<String, (CommandState, Instant)>,
    /// Per status (by [`slot`]): (status time, id) of every stored state in it, expired ones
    /// until they are met or swept.
    index: [BTreeSet<(u64, String)>; 5],
    cancel_feeds: Vec<mpsc::UnboundedSender<String>>,
    submits: u64,
}

fn index_key(state: &CommandState) -> (u64, String) {
    (state.status_changed_at, state.id.clone())
}

impl Inner {
    /// Stores `state` until `expires`, moving it between the status indexes.
    fn put(&mut self, state: CommandState, expires: Instant) {
        let key = index_key(&state);
        let slot = slot(state.status);
        if let Some((old, _)) = self.states.insert(state.id.clone(), (state, expires)) {
            self.index[self::slot(old.status)].remove(&index_key(&old));
        }
        self.index[slot].insert(key);
    }

    /// Forgets the state of `id` and its index entry.
    fn remove(&mut self, id: &str) {
        if let Some((old, _)) = self.states.remove(id) {
            self.index[slot(old.status)].remove(&index_key(&old));
        }
    }
}

impl std::fmt::Debug for MemoryCommandStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryCommandStore")
            .field("ttl", &self.ttl)
            .field("states", &self.lock().states.len())
            .finish_non_exhaustive()
    }
}

impl MemoryCommandStore {
    /// A store whose commands travel on `stream`, with the default TTL (7 days).
    pub fn new(stream: MemoryStream) -> Self {
        Self {
            streams: vec![stream],
            shards: Shards::new(SHARDS_NAME, 1).expect("one shard of a named queue"),
            ttl: DEFAULT_TTL,
            inner: Arc::default(),
        }
    }

    /// A store whose commands are spread over `streams`, one shard each: command `id` travels
    /// on shard [`Shards::for_key`]`(id)`. The streams' clock (the first one's) drives expiry.
    ///
    /// # Errors
    ///
    /// No streams, or more than [`MAX_SHARDS`](leasehold_core::MAX_SHARDS).
    pub fn sharded(streams: impl IntoIterator<Item = MemoryStream>) -> Result<Self, ShardError> {
        let streams: Vec<MemoryStream> = streams.into_iter().collect();
        let count = u32::try_from(streams.len()).unwrap_or(u32::MAX);
        let shards = Shards::new(SHARDS_NAME, count)?;
        Ok(Self {
            streams,
            shards,
            ttl: DEFAULT_TTL,
            inner: Arc::default(),
        })
    }

    /// How long a state is kept after its last write.
    #[must_use]
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// The stream carrying the commands (of a sharded store: shard 0's).
    pub fn stream(&self) -> &MemoryStream {
        &self.streams[0]
    }

    /// Every shard's stream, shard 0 first (one for an unsharded store).
    pub fn streams(&self) -> &[MemoryStream] {
        &self.streams
    }

    /// The shard command `id` travels on.
    pub fn shard_of(&self, id: &str) -> u16 {
        self.shards.for_key(id.as_bytes())
    }

    fn stream_of(&self, id: &str) -> &MemoryStream {
        &self.streams[usize::from(self.shard_of(id))]
    }

    /// A consumer of `stream`, checked against the worker's claim timeout.
    fn consumer_of(
        stream: &MemoryStream,
        claim_timeout: Duration,
    ) -> Result<MemoryBackend, StoreError> {
        if claim_timeout != stream.claim_timeout() {
            return Err(StoreError::fatal(format!(
                "the worker's claim timeout is {claim_timeout:?} but the memory stream's is \
                 {:?}; build the stream with StreamConfig::new({claim_timeout:?})",
                stream.claim_timeout()
            )));
        }
        // Numbered process-wide: several stores may share one stream, and names identify
        // lease owners.
        static CONSUMERS: AtomicU64 = AtomicU64::new(0);
        let name = format!("commands-{}", CONSUMERS.fetch_add(1, Ordering::Relaxed) + 1);
        stream
            .consumer(&name)
            .map_err(|e| StoreError::fatal(format!("consumer {name}")).with_source(e))
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave a half-written entry: every write is one
        // map insert and the index moves that go with it, none of which panics. So a poisoned
        // lock is still consistent.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The compare-and-set, under the lock.
    fn write_locked(&self, inner: &mut Inner, state: &CommandState, now: Instant) -> bool {
        match Self::live(inner, &state.id, now) {
            Some(current) if current.version + 1 == state.version => {
                inner.put(state.clone(), now + self.ttl);
                true
            }
            _ => false,
        }
    }

    fn live<'a>(inner: &'a Inner, id: &str, now: Instant) -> Option<&'a CommandState> {
        inner
            .states
            .get(id)
            .filter(|(_, expires)| *expires > now)
            .map(|(state, _)| state)
    }
}

impl CommandStore for MemoryCommandStore {
    type Backend = MemoryBackend;
    type Payload = bytes::Bytes;

    async fn submit(&self, state: &CommandState, entry: &[u8]) -> Result<Submit, StoreError> {
        let now = self.stream().now();
        let mut inner = self.lock();
        if let Some(existing) = Self::live(&inner, &state.id, now) {
            return Ok(Submit::Exists(Box::new(existing.clone())));
        }
        inner.submits += 1;
        if inner.submits.is_multiple_of(SWEEP_EVERY) {
            let expired: Vec<String> = inner
                .states
                .iter()
                .filter(|(_, (_, expires))| *expires <= now)
                .map(|(id, _)| id.clone())
                .collect();
            for id in expired {
                inner.remove(&id);
            }
        }
        // Both under the lock: no reader sees the state without the entry or the reverse.
        inner.put(state.clone(), now + self.ttl);
        self.stream_of(&state.id)
            .publish(bytes::Bytes::copy_from_slice(entry));
        Ok(Submit::Created)
    }

    async fn load(&self, id: &str) -> Result<Option<CommandState>, StoreError> {
        let now = self.stream().now();
        Ok(Self::live(&self.lock(), id, now).cloned())
    }

    async fn compare_and_set(&self, state: &CommandState) -> Result<bool, StoreError> {
        let now = self.stream().now();
        let mut inner = self.lock();
        Ok(self.write_locked(&mut inner, state, now))
    }

    async fn requeue(&self, state: &CommandState, entry: &[u8]) -> Result<bool, StoreError> {
        let now = self.stream().now();
        let mut inner = self.lock();
        // Both under the lock, as in submit.
        let written = self.write_locked(&mut inner, state, now);
        if written {
            self.stream_of(&state.id)
                .publish(bytes::Bytes::copy_from_slice(entry));
        }
        Ok(written)
    }

    async fn counts(&self) -> Result<StatusCounts, StoreError> {
        let inner = self.lock();
        Ok(StatusCounts::new(
            Status::ALL.map(|s| inner.index[slot(s)].len() as u64),
        ))
    }

    async fn list(&self, status: Status, page: &Page) -> Result<Listing, StoreError> {
        let now = self.stream().now();
        let limit = page.effective_limit();
        let mut inner = self.lock();
        let start = page
            .after
            .as_ref()
            .map_or(Bound::Unbounded, |c| Bound::Excluded((c.at, c.id.clone())));
        let mut states = Vec::new();
        let mut stale = Vec::new();
        let mut more = false;
        for (at, id) in inner.index[slot(status)].range((start, Bound::Unbounded)) {
            match Self::live(&inner, id, now) {
                Some(state) if state.status == status && state.status_changed_at == *at => {
                    if states.len() == limit {
                        more = true;
                        break;
                    }
                    states.push(state.clone());
                }
                _ => stale.push((*at, id.clone())),
            }
        }
        // Met expired: drop them (the index entry, and the state with it).
        for (at, id) in stale {
            inner.index[slot(status)].remove(&(at, id.clone()));
            if Self::live(&inner, &id, now).is_none() {
                inner.remove(&id);
            }
        }
        let next = more.then(|| Cursor::of(states.last().expect("a full page")));
        Ok(Listing { states, next })
    }

    async fn announce_cancel(&self, id: &str) -> Result<(), StoreError> {
        self.lock()
            .cancel_feeds
            .retain(|feed| feed.unbounded_send(id.to_owned()).is_ok());
        Ok(())
    }

    async fn cancels(&self) -> Result<CancelFeed, StoreError> {
        let (tx, rx) = mpsc::unbounded();
        self.lock().cancel_feeds.push(tx);
        Ok(Box::pin(rx))
    }

    async fn consumer(&self, claim_timeout: Duration) -> Result<MemoryBackend, StoreError> {
        if self.streams.len() > 1 {
            return Err(StoreError::fatal(format!(
                "this command store has {} shards: a worker consumes each \
                 (CommandStore::consumers)",
                self.streams.len()
            )));
        }
        Self::consumer_of(self.stream(), claim_timeout)
    }

    async fn consumers(
        &self,
        claim_timeout: Duration,
    ) -> Result<Vec<(String, MemoryBackend)>, StoreError> {
        if self.streams.len() == 1 {
            let backend = Self::consumer_of(self.stream(), claim_timeout)?;
            return Ok(vec![(self.queue().to_owned(), backend)]);
        }
        self.shards
            .streams()
            .zip(&self.streams)
            .map(|(name, stream)| Ok((name, Self::consumer_of(stream, claim_timeout)?)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use futures::executor::block_on;
    use leasehold_memory::{ManualClock, StreamConfig};

    use super::*;

    fn store(ttl: Duration) -> (MemoryCommandStore, ManualClock) {
        let clock = ManualClock::new();
        let stream = MemoryStream::with_clock(StreamConfig::default(), clock.clone()).unwrap();
        (MemoryCommandStore::new(stream).with_ttl(ttl), clock)
    }

    fn state(id: &str) -> CommandState {
        CommandState::submitted(id.into(), "kind".into(), serde_json::Value::Null)
    }

    #[test]
    fn two_stores_on_one_stream_get_consumers_of_their_own() {
        let stream = MemoryStream::new(StreamConfig::default()).unwrap();
        let claim = stream.claim_timeout();
        let (a, b) = (
            MemoryCommandStore::new(stream.clone()),
            MemoryCommandStore::new(stream),
        );
        let first = block_on(a.consumer(claim)).expect("a consumer");
        let second = block_on(b.consumer(claim)).expect("another store, another consumer name");
        assert_ne!(first.name(), second.name());
    }

    #[test]
    fn states_expire_after_the_ttl_and_every_write_refreshes_it() {
        let ttl = Duration::from_secs(10);
        let (store, clock) = store(ttl);
        let first = state("a");
        assert_eq!(
            block_on(store.submit(&first, b"a")).unwrap(),
            Submit::Created
        );
        clock.advance(Duration::from_secs(8));
        let next = first.next();
        assert!(block_on(store.compare_and_set(&next)).unwrap());
        // 16 s after submit, 8 s after the write: still there.
        clock.advance(Duration::from_secs(8));
        assert_eq!(block_on(store.load("a")).unwrap(), Some(next.clone()));
        clock.advance(Duration::from_secs(2));
        assert_eq!(block_on(store.load("a")).unwrap(), None, "expired");
        assert!(
            !block_on(store.compare_and_set(&next.next())).unwrap(),
            "a write never resurrects an expired state"
        );
        // The id is free again.
        assert_eq!(
            block_on(store.submit(&state("a"), b"a")).unwrap(),
            Submit::Created
        );
        assert_eq!(store.stream().len(), 2);
    }

    #[test]
    fn compare_and_set_needs_the_previous_version() {
        let (store, _clock) = store(Duration::from_secs(60));
        let first = state("b");
        block_on(store.submit(&first, b"b")).unwrap();
        let mut stale = first.next();
        stale.version += 1;
        assert!(
            !block_on(store.compare_and_set(&stale)).unwrap(),
            "skips a version"
        );
        assert!(
            !block_on(store.compare_and_set(&first)).unwrap(),
            "same version"
        );
        assert!(block_on(store.compare_and_set(&first.next())).unwrap());
        assert!(
            !block_on(store.compare_and_set(&first.next())).unwrap(),
            "lost update"
        );
        let again = block_on(store.submit(&state("b"), b"b")).unwrap();
        assert!(matches!(again, Submit::Exists(s) if s.version == 2));
        assert_eq!(store.stream().len(), 1, "an existing id enqueues nothing");
    }
}
