//! [`MemoryBackend`]: one consumer's handle, with the `Backend` implementation.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use leasehold_core::{
    Backend, BackendResult, DeadLetterReason, FetchAnswer, LeaseRef, MessageId, RenewResult,
    SettleResult,
};

use crate::config::MemoryError;
use crate::stream::MemoryStream;
use crate::wakeup;

/// One consumer of a [`MemoryStream`]'s group: implements [`Backend`] for a worker.
///
/// Every lease operation is owner-checked and fenced: it acts only if this consumer holds the
/// message **and** the lease's fence equals the message's current delivery count; otherwise it
/// answers `Lost` and changes nothing. Results come per lease, in order.
///
/// Next to the async [`Backend`] methods there are synchronous `*_now` variants, for
/// simulators and tests that drive the store without an executor; they never wait.
///
/// Dropping the handle frees its name; the messages it held stay pending until reclaimed.
pub struct MemoryBackend {
    stream: MemoryStream,
    name: Arc<str>,
    /// The membership of its sharded queue and its shard, for a consumer from a `MemoryQueue`.
    pub(crate) members: Option<(Arc<crate::queue::MemberTable>, u16)>,
}

impl MemoryStream {
    /// A backend handle for the consumer `name` of this stream's group.
    ///
    /// Names identify lease owners, so each live worker needs its own. Dropping the handle frees
    /// the name; the messages it held stay pending under that name until the claim timeout
    /// lets another consumer reclaim them, exactly like a crashed Redis consumer.
    ///
    /// # Errors
    ///
    /// If `name` is empty or a live consumer of this stream already has it.
    pub fn consumer(&self, name: &str) -> Result<MemoryBackend, MemoryError> {
        let now = self.now();
        let name = self.store().register(now, name)?;
        Ok(MemoryBackend {
            stream: self.clone(),
            name,
            members: None,
        })
    }
}

impl MemoryBackend {
    /// This consumer's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The stream this consumer reads.
    pub fn stream(&self) -> &MemoryStream {
        &self.stream
    }

    /// Takes up to `max` messages without waiting: first reclaimable ones (idle for the claim
    /// timeout, or released and past their delay; delivery count + 1, owner = this consumer),
    /// then new ones (delivery count 1). When both kinds are available each gets half of `max`,
    /// the odd slot alternating, and a share one kind cannot use goes to the other. Delayed
    /// messages that are due join the stream first, as new entries, and the answer says how
    /// long until the next one is due, on the stream's clock.
    pub fn fetch_now(&self, max: usize) -> FetchAnswer<Bytes> {
        self.fetch_and_look_ahead(max).0
    }

    /// The fetch of [`fetch_now`](Self::fetch_now), when the next pending message lapses and
    /// when the next delayed message is due.
    fn fetch_and_look_ahead(
        &self,
        max: usize,
    ) -> (FetchAnswer<Bytes>, Option<Instant>, Option<Instant>) {
        let now = self.stream.now();
        let mut store = self.stream.store();
        let fetched = store.fetch(now, &self.name, max);
        let (next_lapse, next_due) = (store.next_claimable(), store.next_due());
        drop(store);
        let answer = FetchAnswer::new(fetched)
            .with_next_due(next_due.map(|due| due.saturating_duration_since(now)));
        (answer, next_lapse, next_due)
    }

    /// Resets the idle time of each lease this consumer holds with that fence (the delivery
    /// count stays); `Lost` for any other.
    pub fn renew_now(&self, lease_refs: &[LeaseRef]) -> Vec<RenewResult> {
        let now = self.stream.now();
        self.stream.store().renew(now, &self.name, lease_refs)
    }

    /// Removes each message this consumer holds with that fence from the stream; `Lost` (and
    /// nothing removed) for any other.
    pub fn ack_now(&self, lease_refs: &[LeaseRef]) -> Vec<SettleResult> {
        let now = self.stream.now();
        self.stream.store().ack(now, &self.name, lease_refs)
    }

    /// Lets any consumer reclaim the message once `delay` has passed. Delays are capped at the
    /// claim timeout, as on Redis (`XCLAIM … IDLE claim_timeout - delay`). Owner and delivery
    /// count stay until someone reclaims it.
    pub fn release_now(&self, lease_ref: &LeaseRef, delay: Duration) -> SettleResult {
        let now = self.stream.now();
        let result = self
            .stream
            .store()
            .release(now, &self.name, lease_ref, delay);
        if result == SettleResult::Ok {
            self.stream.wake();
        }
        result
    }

    /// Moves the message to the dead-letter stream (with its id, payload, the reason's text and
    /// its delivery count) and acknowledges it, in one step.
    pub fn dead_letter_now(&self, lease_ref: &LeaseRef, reason: &DeadLetterReason) -> SettleResult {
        let now = self.stream.now();
        self.stream
            .store()
            .dead_letter(now, &self.name, lease_ref, reason.to_string())
    }

    /// The fetch of [`Backend::fetch`]: waits only on a real-time clock, for a publish, a
    /// release, the next lease lapse or the next delayed message's due time, until `wait` is
    /// over.
    async fn fetch_waiting(&self, max: usize, wait: Duration) -> FetchAnswer<Bytes> {
        let deadline = self.stream.now().checked_add(wait); // `None`: wait without end
        loop {
            let listener = self.stream.listen();
            let now = self.stream.now();
            let (fetched, next_lapse, next_due) = self.fetch_and_look_ahead(max);
            let expired = deadline.is_some_and(|deadline| now >= deadline);
            let can_wait = wakeup::CAN_WAIT && self.stream.is_real_time();
            if !fetched.is_empty() || max == 0 || expired || !can_wait {
                return fetched;
            }
            let wake_at = [deadline, next_lapse, next_due].into_iter().flatten().min();
            wakeup::wait(listener, wake_at).await;
        }
    }
}

impl Drop for MemoryBackend {
    fn drop(&mut self) {
        self.stream.store().unregister(&self.name);
    }
}

impl fmt::Debug for MemoryBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryBackend")
            .field("name", &self.name)
            .field("stream", &self.stream)
            .finish()
    }
}

/// Every method completes at once except `fetch`, which may wait; the `*_now` methods document
/// the semantics of each. No call ever fails: the in-memory store has no transport.
impl Backend for MemoryBackend {
    type Payload = Bytes;

    fn claim_timeout(&self) -> Option<Duration> {
        Some(self.stream().claim_timeout())
    }

    async fn publish(&self, payload: Bytes) -> BackendResult<MessageId> {
        Ok(self.stream.publish(payload))
    }

    /// Takes what [`fetch_now`](MemoryBackend::fetch_now) would. If that is nothing and the
    /// stream's clock is real-time, waits up to `wait` for a publish, a release, a lease to
    /// lapse or a delayed message to be due, then returns what is there (possibly nothing). On a virtual clock (e.g.
    /// [`ManualClock`](crate::ManualClock)) it never waits. Cancel-safe: dropping the future
    /// never loses a message. The answer says how long until the next delayed message is due
    /// (zero once it is), on the stream's clock.
    async fn fetch(&self, max: usize, wait: Duration) -> BackendResult<FetchAnswer<Bytes>> {
        Ok(self.fetch_waiting(max, wait).await)
    }

    async fn renew(&self, lease_refs: &[LeaseRef]) -> BackendResult<Vec<RenewResult>> {
        Ok(self.renew_now(lease_refs))
    }

    async fn ack(&self, lease_refs: &[LeaseRef]) -> BackendResult<Vec<SettleResult>> {
        Ok(self.ack_now(lease_refs))
    }

    async fn release(&self, lease_ref: &LeaseRef, delay: Duration) -> BackendResult<SettleResult> {
        Ok(self.release_now(lease_ref, delay))
    }

    async fn dead_letter(
        &self,
        lease_ref: &LeaseRef,
        reason: &DeadLetterReason,
    ) -> BackendResult<SettleResult> {
        Ok(self.dead_letter_now(lease_ref, reason))
    }

    async fn stream_len(&self) -> BackendResult<u64> {
        Ok(self.stream.len() as u64)
    }

    async fn pending(&self) -> BackendResult<u64> {
        Ok(self.stream.pending_len() as u64)
    }
}
