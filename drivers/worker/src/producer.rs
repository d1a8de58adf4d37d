//! [`Producer`]: typed publishing over any [`Publisher`], with the worker's codecs.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use leasehold_core::{
    BackendError, Dedupe, DelayedSummary, Due, MessageId, Outgoing, PublishRejected, Published,
    Publisher,
};

use crate::codec::{CodecError, Encode, Json};

/// Publishes messages of type `M`, encoded with `C` (JSON by default; the worker of the stream
/// decodes with the same codec).
///
/// Cheap to clone: clones share one publisher (on Redis, one multiplexed connection), so one
/// producer can serve every task of a process.
///
/// ```
/// use std::time::Duration;
/// use leasehold_core::Publisher;
/// use leasehold_memory::{MemoryStream, StreamConfig};
/// use leasehold_worker::{Producer, PublishOptions};
///
/// # futures::executor::block_on(async {
/// let stream = MemoryStream::new(StreamConfig::new(Duration::from_secs(30)))?;
/// let producer = Producer::<u64, _>::new(stream.clone());
///
/// producer.publish(&7).await?;
/// producer.publish_batch(&[8, 9]).await?;
/// // Not deliverable for a minute, and published once however often this line is retried.
/// let once = PublishOptions::new().delay(Duration::from_secs(60)).dedupe("order-10", Duration::from_secs(3600));
/// let first = producer.publish_with(&10, once.clone()).await?;
/// let again = producer.publish_with(&10, once).await?;
/// assert!(again.duplicate && again.id == first.id);
///
/// assert_eq!(stream.len(), 3);
/// assert_eq!(producer.delayed().await?.len, 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
pub struct Producer<M, P, C = Json<M>> {
    publisher: Arc<P>,
    codec: Arc<C>,
    _message: PhantomData<fn(&M)>,
}

impl<M, P> Producer<M, P, Json<M>>
where
    P: Publisher,
    P::Payload: From<Vec<u8>>,
    Json<M>: Encode<M>,
{
    /// A producer of JSON messages.
    pub fn new(publisher: P) -> Self {
        Self::with_codec(publisher, Json::default())
    }
}

impl<M, P, C> Producer<M, P, C>
where
    P: Publisher,
    P::Payload: From<Vec<u8>>,
    C: Encode<M>,
{
    /// A producer encoding with `codec` (e.g. [`Raw`](crate::Raw) for bytes).
    pub fn with_codec(publisher: P, codec: C) -> Self {
        Self::from_parts(Arc::new(publisher), Arc::new(codec))
    }

    /// A producer over a shared publisher and codec (the shards of a sharded producer share
    /// one codec).
    pub(crate) fn from_parts(publisher: Arc<P>, codec: Arc<C>) -> Self {
        Self {
            publisher,
            codec,
            _message: PhantomData,
        }
    }

    /// Publishes `message`, deliverable at once; returns its id.
    ///
    /// # Errors
    ///
    /// If it cannot be encoded or the store fails.
    pub async fn publish(&self, message: &M) -> Result<MessageId, PublishError> {
        let outgoing = Outgoing::new(self.encode(message)?);
        Ok(self.send(vec![outgoing]).await?.remove(0).id)
    }

    /// Publishes every message, in order, in one round trip on Redis; returns their ids.
    ///
    /// # Errors
    ///
    /// If one cannot be encoded (nothing is sent) or the store fails (some may have been
    /// published: a retry publishes them again, unless they carry deduplication keys).
    pub async fn publish_batch<'a, I>(&self, messages: I) -> Result<Vec<MessageId>, PublishError>
    where
        I: IntoIterator<Item = &'a M>,
        M: 'a,
    {
        let batch = messages
            .into_iter()
            .map(|m| self.encode(m).map(Outgoing::new))
            .collect::<Result<Vec<_>, _>>()?;
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let published = self.send(batch).await?;
        Ok(published.into_iter().map(|p| p.id).collect())
    }

    /// Publishes `message` with `options`: delayed, deduplicated, or both.
    ///
    /// # Errors
    ///
    /// If the options are out of range (a delay over a year, an empty deduplication key; nothing
    /// is sent), the message cannot be encoded, or the store fails.
    pub async fn publish_with(
        &self,
        message: &M,
        options: PublishOptions,
    ) -> Result<Published, PublishError> {
        let outgoing = Outgoing::new(self.encode(message)?)
            .with_due(options.due)
            .with_dedupe(options.dedupe);
        outgoing.check(SystemTime::now())?;
        Ok(self.send(vec![outgoing]).await?.remove(0))
    }

    /// How many delayed messages wait, and when the next is due.
    ///
    /// # Errors
    ///
    /// If the store fails.
    pub async fn delayed(&self) -> Result<DelayedSummary, PublishError> {
        Ok(self.publisher.delayed().await?)
    }

    /// The publisher this producer sends through.
    pub fn publisher(&self) -> &P {
        &self.publisher
    }

    fn encode(&self, message: &M) -> Result<P::Payload, PublishError> {
        Ok(self.codec.encode(message)?.into())
    }

    async fn send(&self, batch: Vec<Outgoing<P::Payload>>) -> Result<Vec<Published>, PublishError> {
        let n = batch.len();
        let published = self.publisher.publish_batch(batch).await?;
        if published.len() != n {
            return Err(PublishError::Backend(BackendError::fatal(format!(
                "the publisher answered {} results for {n} messages",
                published.len()
            ))));
        }
        Ok(published)
    }
}

impl<M, P, C> Clone for Producer<M, P, C> {
    fn clone(&self) -> Self {
        Self {
            publisher: Arc::clone(&self.publisher),
            codec: Arc::clone(&self.codec),
            _message: PhantomData,
        }
    }
}

impl<M, P: fmt::Debug, C> fmt::Debug for Producer<M, P, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Producer")
            .field("publisher", &self.publisher)
            .finish_non_exhaustive()
    }
}

/// How one message is published: when it is due, and its deduplication key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[must_use]
pub struct PublishOptions {
    due: Option<Due>,
    dedupe: Option<Dedupe>,
}

impl PublishOptions {
    /// Deliverable at once, no deduplication.
    pub fn new() -> Self {
        Self::default()
    }

    /// Not deliverable before `delay` has passed on the store's clock (on Redis: the server's,
    /// so producers with skewed clocks agree). At most a year.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.due = Some(Due::After(delay));
        self
    }

    /// Not deliverable before wall-clock time `at`, compared with the store's clock (on Redis:
    /// the server's). A time in the past means at once; at most a year ahead.
    pub fn at(mut self, at: SystemTime) -> Self {
        self.due = Some(Due::At(at));
        self
    }

    /// The deduplication key, if any: a sharded producer routes by it.
    pub(crate) fn dedupe_key(&self) -> Option<&str> {
        self.dedupe.as_ref().map(|d| d.key.as_str())
    }

    /// Deduplicated by `key` for `ttl` after the first publish: a producer that retries a
    /// publish (it timed out, it restarted) enqueues the work once, and learns the first
    /// message's id. It does not make two messages with *different* keys that mean the same work
    /// one: choose the key from the work's identity (an order id), not from the attempt. The
    /// ttl is 1 ms to a year.
    pub fn dedupe(mut self, key: impl Into<String>, ttl: Duration) -> Self {
        self.dedupe = Some(Dedupe::new(key, ttl));
        self
    }
}

/// Why a publish failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PublishError {
    /// The message could not be encoded; nothing was sent.
    #[error(transparent)]
    Encode(#[from] CodecError),
    /// The options are out of range; nothing was sent.
    #[error(transparent)]
    Rejected(#[from] PublishRejected),
    /// The store failed (see [`BackendError::kind`] for whether a retry may help).
    #[error(transparent)]
    Backend(#[from] BackendError),
}
