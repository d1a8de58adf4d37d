//! [`ShardedProducer`]: publishing to a sharded queue, by key or spread.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use leasehold_core::{DelayedSummary, MessageId, Publisher, Shards};

use crate::codec::{Encode, Json};
use crate::producer::{Producer, PublishError, PublishOptions};

/// Where a message of a sharded queue went: its shard, its id there, and whether it was a
/// deduplicated repeat (ids are per shard: the pair names the message).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Placed {
    /// The shard (its stream is `shards.stream(shard)`).
    pub shard: u16,
    /// The message's id in that shard's stream.
    pub id: MessageId,
    /// A deduplicated repeat: nothing was enqueued, `id` is the first message's.
    pub duplicate: bool,
}

/// The publishers given do not match the queue's shards.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{queue} has {shards} shards but {publishers} publishers were given: one per shard, in shard order")]
pub struct ShardCountError {
    /// The queue.
    pub queue: String,
    /// Its shard count.
    pub shards: u16,
    /// The publishers given.
    pub publishers: usize,
}

/// Publishes messages of type `M` to a sharded queue: one [`Producer`] per shard, one codec.
///
/// - [`publish_keyed`](Self::publish_keyed) sends a message to the shard of its key
///   ([`Shards::for_key`]): messages of one key stay in one stream, in publish order, so a
///   worker that runs one at a time sees them in order.
/// - [`publish`](Self::publish) and [`publish_batch`](Self::publish_batch) spread messages
///   round-robin over the shards. Round-robin, not the shortest shard: it costs no round trip
///   (knowing the lengths would cost one per shard, and they change under every worker), it
///   evens out whatever the message sizes, and a backlog that forms anyway is drained by the
///   workers, which share one budget over the shards they fetch from.
/// - A message with a deduplication key ([`publish_with`](Self::publish_with)) goes to the
///   shard of that key, and its key is held there: a retried publish lands on the same shard,
///   so it is recognised as a repeat. Delays wait on the shard the message goes to.
///
/// Cheap to clone: clones share the publishers and the round-robin position.
pub struct ShardedProducer<M, P, C = Json<M>> {
    shards: Shards,
    producers: Arc<[Producer<M, P, C>]>,
    next: Arc<AtomicUsize>,
}

impl<M, P> ShardedProducer<M, P, Json<M>>
where
    P: Publisher,
    P::Payload: From<Vec<u8>>,
    Json<M>: Encode<M>,
{
    /// A producer of JSON messages over `publishers`, one per shard in shard order.
    ///
    /// # Errors
    ///
    /// If there is not one publisher per shard.
    pub fn new(
        shards: Shards,
        publishers: impl IntoIterator<Item = P>,
    ) -> Result<Self, ShardCountError> {
        Self::with_codec(shards, publishers, Json::default())
    }
}

impl<M, P, C> ShardedProducer<M, P, C>
where
    P: Publisher,
    P::Payload: From<Vec<u8>>,
    C: Encode<M>,
{
    /// A producer encoding with `codec` over `publishers`, one per shard in shard order.
    ///
    /// # Errors
    ///
    /// If there is not one publisher per shard.
    pub fn with_codec(
        shards: Shards,
        publishers: impl IntoIterator<Item = P>,
        codec: C,
    ) -> Result<Self, ShardCountError> {
        let codec = Arc::new(codec);
        let producers: Vec<_> = publishers
            .into_iter()
            .map(|p| Producer::from_parts(Arc::new(p), codec.clone()))
            .collect();
        if producers.len() != usize::from(shards.count()) {
            return Err(ShardCountError {
                queue: shards.queue().to_owned(),
                shards: shards.count(),
                publishers: producers.len(),
            });
        }
        Ok(Self {
            shards,
            producers: producers.into(),
            next: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// The queue's shards.
    pub fn shards(&self) -> &Shards {
        &self.shards
    }

    /// The producer of shard `shard`, if there is one.
    pub fn shard(&self, shard: u16) -> Option<&Producer<M, P, C>> {
        self.producers.get(usize::from(shard))
    }

    /// Publishes `message` to the next shard round-robin.
    ///
    /// # Errors
    ///
    /// If it cannot be encoded or the store fails.
    pub async fn publish(&self, message: &M) -> Result<Placed, PublishError> {
        let shard = self.spread(1);
        let id = self.producers[usize::from(shard)].publish(message).await?;
        Ok(placed(shard, id, false))
    }

    /// Publishes `message` to the shard of `key`: messages of one key keep their order.
    ///
    /// # Errors
    ///
    /// If it cannot be encoded or the store fails.
    pub async fn publish_keyed(
        &self,
        key: impl AsRef<[u8]>,
        message: &M,
    ) -> Result<Placed, PublishError> {
        let shard = self.shards.for_key(key.as_ref());
        let id = self.producers[usize::from(shard)].publish(message).await?;
        Ok(placed(shard, id, false))
    }

    /// Publishes `message` with `options` to the shard of its deduplication key, or the next
    /// one round-robin without one.
    ///
    /// # Errors
    ///
    /// As [`Producer::publish_with`].
    pub async fn publish_with(
        &self,
        message: &M,
        options: PublishOptions,
    ) -> Result<Placed, PublishError> {
        let shard = match options.dedupe_key() {
            Some(key) => self.shards.for_key(key.as_bytes()),
            None => self.spread(1),
        };
        self.send_with(shard, message, options).await
    }

    /// Publishes `message` with `options` to the shard of `key` (its deduplication key, if
    /// any, is held there).
    ///
    /// # Errors
    ///
    /// As [`Producer::publish_with`].
    pub async fn publish_keyed_with(
        &self,
        key: impl AsRef<[u8]>,
        message: &M,
        options: PublishOptions,
    ) -> Result<Placed, PublishError> {
        let shard = self.shards.for_key(key.as_ref());
        self.send_with(shard, message, options).await
    }

    /// Publishes every message, spread round-robin: one batch per shard, sent concurrently
    /// (one round trip per shard on Redis). Answers in the order given.
    ///
    /// # Errors
    ///
    /// If one cannot be encoded or a store fails (the batches of other shards may have been
    /// published).
    pub async fn publish_batch<'a, I>(&self, messages: I) -> Result<Vec<Placed>, PublishError>
    where
        I: IntoIterator<Item = &'a M>,
        M: 'a,
    {
        let messages: Vec<&M> = messages.into_iter().collect();
        let n = self.producers.len();
        let start = usize::from(self.spread(messages.len()));
        let mut per_shard: Vec<Vec<&M>> = vec![Vec::new(); n];
        for (i, message) in messages.iter().enumerate() {
            per_shard[(start + i) % n].push(message);
        }
        let sends = per_shard
            .iter()
            .enumerate()
            .filter(|(_, batch)| !batch.is_empty())
            .map(|(shard, batch)| async move {
                let ids = self.producers[shard]
                    .publish_batch(batch.iter().copied())
                    .await?;
                Ok::<_, PublishError>((shard, ids))
            });
        let mut ids: Vec<std::vec::IntoIter<MessageId>> =
            (0..n).map(|_| Vec::new().into_iter()).collect();
        for result in futures::future::join_all(sends).await {
            let (shard, shard_ids) = result?;
            ids[shard] = shard_ids.into_iter();
        }
        let mut out = Vec::with_capacity(messages.len());
        for i in 0..messages.len() {
            let shard = (start + i) % n;
            let id = ids[shard].next().ok_or_else(|| {
                PublishError::Backend(leasehold_core::BackendError::fatal(
                    "a shard's publisher answered fewer ids than messages",
                ))
            })?;
            out.push(placed(shard as u16, id, false));
        }
        Ok(out)
    }

    /// Delayed messages over all shards: how many, and when the next is due.
    ///
    /// # Errors
    ///
    /// If a store fails.
    pub async fn delayed(&self) -> Result<DelayedSummary, PublishError> {
        let all = futures::future::join_all(self.producers.iter().map(Producer::delayed)).await;
        let mut sum = DelayedSummary::new(0, None);
        for summary in all {
            let summary = summary?;
            sum.len += summary.len;
            sum.next_due = match (sum.next_due, summary.next_due) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        Ok(sum)
    }

    /// The first of the next `n` round-robin shards.
    fn spread(&self, n: usize) -> u16 {
        let count = self.producers.len();
        (self.next.fetch_add(n, Ordering::Relaxed) % count) as u16
    }

    async fn send_with(
        &self,
        shard: u16,
        message: &M,
        options: PublishOptions,
    ) -> Result<Placed, PublishError> {
        let published = self.producers[usize::from(shard)]
            .publish_with(message, options)
            .await?;
        Ok(placed(shard, published.id, published.duplicate))
    }
}

fn placed(shard: u16, id: MessageId, duplicate: bool) -> Placed {
    Placed {
        shard,
        id,
        duplicate,
    }
}

impl<M, P, C> Clone for ShardedProducer<M, P, C> {
    fn clone(&self) -> Self {
        Self {
            shards: self.shards.clone(),
            producers: self.producers.clone(),
            next: self.next.clone(),
        }
    }
}

impl<M, P, C> fmt::Debug for ShardedProducer<M, P, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShardedProducer")
            .field("shards", &self.shards)
            .finish_non_exhaustive()
    }
}
