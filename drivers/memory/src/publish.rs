//! [`MemoryStream`] as a [`Publisher`]: delayed messages and deduplication keys on the stream's
//! clock, and the synchronous publishing the simulator and tests use.

use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use leasehold_core::{
    BackendError, BackendResult, DelayedSummary, Due, Outgoing, PublishRejected, Published,
    Publisher,
};

use crate::store;
use crate::stream::MemoryStream;

impl MemoryStream {
    /// Publishes one message, synchronously: what [`Publisher::publish_batch`] does for each.
    ///
    /// - **Delayed** ([`Due`]): `Due::After(d)` is due at `now + d` on the stream's clock;
    ///   `Due::At(t)` is converted to a delay from the system's wall clock at the publish
    ///   (`t.duration_since(SystemTime::now())`), a time in the past meaning at once. A message
    ///   not due yet waits outside the stream (so [`len`](Self::len) does not count it) with id
    ///   `delayed:<n>`; the first fetch at or after its due time appends it to the stream with a
    ///   entry id, and its first delivery has delivery count 1. One already due is appended
    ///   at once.
    /// - **Deduplicated** ([`Dedupe`](leasehold_core::Dedupe)): while the key is within its
    ///   `ttl` of the first publish (on the stream's clock), another publish with it enqueues
    ///   nothing and answers the first message's id (a `delayed:<n>` one if that was delayed)
    ///   with `duplicate: true`. Afterwards the key publishes again. Expired keys are dropped as
    ///   later publishes come.
    ///
    /// Wakes waiting fetches (a delayed message may be due before they would look again).
    ///
    /// # Errors
    ///
    /// The rule of [`Outgoing::check`] it breaks; nothing is published then.
    pub fn publish_with_now(&self, message: Outgoing<Bytes>) -> Result<Published, PublishRejected> {
        let mut published = self.publish_batch_now(vec![message])?;
        Ok(published.remove(0))
    }

    /// Publishes every message, in order, under one lock of the store: no fetch sees part of
    /// the batch. Each message as in [`publish_with_now`](Self::publish_with_now); a key
    /// published earlier in the batch makes a later use of it a duplicate.
    ///
    /// # Errors
    ///
    /// The first rule of [`Outgoing::check`] a message breaks; nothing of the batch is
    /// published then.
    pub fn publish_batch_now(
        &self,
        batch: Vec<Outgoing<Bytes>>,
    ) -> Result<Vec<Published>, PublishRejected> {
        let wall = SystemTime::now();
        for message in &batch {
            message.check(wall)?;
        }
        let now = self.now();
        let batch = batch
            .into_iter()
            .map(|message| resolve(now, message))
            .collect::<Result<Vec<_>, _>>()?;
        let published: Vec<Published> = {
            let mut store = self.store();
            batch
                .into_iter()
                .map(|message| store.publish_outgoing(now, message))
                .collect()
        };
        if published.iter().any(|p| !p.duplicate) {
            self.wake();
        }
        Ok(published)
    }

    /// How many delayed messages wait outside the stream, and how long until the next is due
    /// on the stream's clock (zero if one is due and no fetch has moved it into the stream
    /// yet).
    pub fn delayed_now(&self) -> DelayedSummary {
        let now = self.now();
        let store = self.store();
        let next_due = store
            .next_due()
            .map(|due| due.saturating_duration_since(now));
        DelayedSummary::new(store.delayed_len() as u64, next_due)
    }

    /// How many delayed messages wait outside the stream.
    pub fn delayed_len(&self) -> usize {
        self.store().delayed_len()
    }
}

/// The message's due time and key expiry as instants of the stream's clock at `now`.
fn resolve(now: Instant, message: Outgoing<Bytes>) -> Result<store::Outgoing, PublishRejected> {
    let delay = match message.due {
        None => None,
        Some(Due::After(delay)) => Some(delay),
        Some(Due::At(at)) => Some(
            at.duration_since(SystemTime::now())
                .unwrap_or(Duration::ZERO),
        ),
    };
    // Both are at most a year after `check`, so this fails only for a clock centuries past
    // its start; refused like a delay too long then.
    let later = |by: Duration| now.checked_add(by).ok_or(PublishRejected::DelayTooLong(by));
    let due = delay.map(later).transpose()?;
    let dedupe = match message.dedupe {
        Some(dedupe) => Some((dedupe.key, later(dedupe.ttl)?)),
        None => None,
    };
    Ok(store::Outgoing {
        payload: message.payload,
        due,
        dedupe,
    })
}

/// Completes at once; see [`publish_batch_now`](MemoryStream::publish_batch_now) and
/// [`delayed_now`](MemoryStream::delayed_now) for the semantics.
impl Publisher for MemoryStream {
    type Payload = Bytes;

    /// # Errors
    ///
    /// A batch with a message [`Outgoing::check`] refuses is refused whole, as a fatal error
    /// (retrying cannot help), with nothing published.
    async fn publish_batch(&self, batch: Vec<Outgoing<Bytes>>) -> BackendResult<Vec<Published>> {
        self.publish_batch_now(batch)
            .map_err(|rejected| BackendError::fatal(rejected.to_string()).with_source(rejected))
    }

    async fn delayed(&self) -> BackendResult<DelayedSummary> {
        Ok(self.delayed_now())
    }
}
