//! [`MemoryQueue`]: a sharded queue in memory — one [`MemoryStream`] per shard on one clock,
//! and the queue's membership table.

use std::collections::HashMap;
use std::fmt;
use std::time::{Duration, Instant};

use leasehold_core::{BackendError, BackendResult, Members, Shards};

use crate::backend::MemoryBackend;
use crate::clock::{Clock, SystemClock};
use crate::config::{MemoryError, StreamConfig};
use crate::stream::MemoryStream;
use crate::sync::{lock, Mutex};
use std::sync::Arc;

/// A sharded queue in one process: a [`MemoryStream`] per shard (shard `i`'s stream is
/// `shards.stream(i)`), and a membership table in which the workers serving it heartbeat
/// (each consumer handle it gives is a [`Members`] of the queue, the in-memory counterpart of
/// the Redis sorted set). A cheap, clone-able handle.
///
/// ```
/// use std::time::Duration;
/// use leasehold_core::Shards;
/// use leasehold_memory::{MemoryQueue, StreamConfig};
///
/// let queue = MemoryQueue::new(Shards::new("orders", 4)?, StreamConfig::new(Duration::from_secs(30)))?;
/// let shard = queue.shards().for_key(b"customer-7");
/// queue.stream(shard).expect("for_key is a shard").publish("order 1");
/// let backends = queue.consumers("worker-1")?; // one per shard, in shard order
/// assert_eq!(backends.len(), 4);
/// assert_eq!(queue.len(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct MemoryQueue {
    shards: Shards,
    streams: Vec<MemoryStream>,
    members: Arc<MemberTable>,
}

/// Who heartbeated when, on the queue's clock.
pub(crate) struct MemberTable {
    queue: String,
    clock: Box<dyn Clock>,
    seen: Mutex<HashMap<String, Instant>>,
}

impl MemoryQueue {
    /// An empty queue of `shards` on the system clock.
    ///
    /// # Errors
    ///
    /// If the stream configuration is invalid.
    pub fn new(shards: Shards, config: StreamConfig) -> Result<Self, MemoryError> {
        Self::with_clock(shards, config, SystemClock)
    }

    /// An empty queue of `shards` whose streams and membership read `clock`.
    ///
    /// # Errors
    ///
    /// If the stream configuration is invalid.
    pub fn with_clock(
        shards: Shards,
        config: StreamConfig,
        clock: impl Clock + Clone,
    ) -> Result<Self, MemoryError> {
        let streams = (0..shards.count())
            .map(|_| MemoryStream::with_clock(config.clone(), clock.clone()))
            .collect::<Result<_, _>>()?;
        Ok(Self {
            members: Arc::new(MemberTable {
                queue: shards.queue().to_owned(),
                clock: Box::new(clock),
                seen: Mutex::new(HashMap::new()),
            }),
            shards,
            streams,
        })
    }

    /// The queue's shards.
    pub fn shards(&self) -> &Shards {
        &self.shards
    }

    /// Shard `shard`'s stream (`None` beyond the shard count).
    pub fn stream(&self, shard: u16) -> Option<&MemoryStream> {
        self.streams.get(usize::from(shard))
    }

    /// Every shard's stream, shard 0 first.
    pub fn streams(&self) -> &[MemoryStream] {
        &self.streams
    }

    /// A consumer named `name` on every shard, in shard order: what a worker serving the
    /// queue is given. Each is also the worker's handle on the queue's membership.
    ///
    /// # Errors
    ///
    /// If `name` is empty or a live consumer already has it.
    pub fn consumers(&self, name: &str) -> Result<Vec<MemoryBackend>, MemoryError> {
        self.streams
            .iter()
            .zip(0..)
            .map(|(stream, shard)| {
                let mut backend = stream.consumer(name)?;
                backend.members = Some((self.members.clone(), shard));
                Ok(backend)
            })
            .collect()
    }

    /// The members heartbeated within `ttl`, by name.
    pub fn members(&self, ttl: Duration) -> Vec<String> {
        self.members.live(ttl)
    }

    /// Messages in all shards, pending ones included.
    pub fn len(&self) -> usize {
        self.streams.iter().map(MemoryStream::len).sum()
    }

    /// Whether no shard holds a message.
    pub fn is_empty(&self) -> bool {
        self.streams.iter().all(MemoryStream::is_empty)
    }

    /// Messages delivered and not yet acknowledged, in all shards.
    pub fn pending_len(&self) -> usize {
        self.streams.iter().map(MemoryStream::pending_len).sum()
    }
}

impl fmt::Debug for MemoryQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryQueue")
            .field("shards", &self.shards)
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}

impl MemberTable {
    /// Forgets members not heard of within `ttl`; the live ones, sorted.
    fn live(&self, ttl: Duration) -> Vec<String> {
        let now = self.clock.now();
        let mut seen = lock(&self.seen);
        seen.retain(|_, at| now.saturating_duration_since(*at) < ttl);
        let mut live: Vec<String> = seen.keys().cloned().collect();
        live.sort_unstable();
        live
    }
}

impl MemoryBackend {
    /// The membership table of this consumer's queue, if it came from a [`MemoryQueue`].
    fn member_table(&self, queue: &str) -> BackendResult<&MemberTable> {
        match &self.members {
            Some((table, _)) if table.queue == queue => Ok(table),
            Some((table, _)) => Err(BackendError::fatal(format!(
                "this consumer serves sharded queue {:?}, not {queue:?}",
                table.queue
            ))),
            None => Err(BackendError::fatal(
                "this consumer is not of a sharded queue: get it from MemoryQueue::consumers",
            )),
        }
    }
}

/// The queue's membership, on its clock. Only consumers from
/// [`MemoryQueue::consumers`] have one; the others answer a fatal error.
impl Members for MemoryBackend {
    fn member(&self) -> &str {
        self.name()
    }

    fn shard(&self) -> Option<(&str, u16)> {
        let (table, shard) = self.members.as_ref()?;
        Some((&table.queue, *shard))
    }

    async fn heartbeat(&self, queue: &str, ttl: Duration) -> BackendResult<Vec<String>> {
        let table = self.member_table(queue)?;
        let now = table.clock.now();
        lock(&table.seen).insert(self.name().to_owned(), now);
        Ok(table.live(ttl))
    }

    async fn leave(&self, queue: &str) -> BackendResult<()> {
        let table = self.member_table(queue)?;
        lock(&table.seen).remove(self.name());
        Ok(())
    }
}
