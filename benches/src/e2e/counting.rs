//! A backend wrapper that counts calls and acks, shared by the memory and Redis benchmarks.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use leasehold_memory::Bytes;
use leasehold_tokio::core::{
    Backend, BackendResult, DeadLetterReason, Fetched, LeaseRef, MessageId, RenewResult,
    SettleResult,
};
use tokio::sync::Notify;

/// Counts a round's successful acks and wakes the timer at the last one.
pub(crate) struct AckCounter {
    pub(crate) target: usize,
    pub(crate) acked: AtomicUsize,
    pub(crate) all_acked: Notify,
    pub(crate) calls: CallCounts,
}

/// Backend calls a leasehold round made: how well the driver batches.
#[derive(Debug, Default)]
pub(crate) struct CallCounts {
    pub(crate) fetches: AtomicUsize,
    pub(crate) fetched: AtomicUsize,
    pub(crate) acks: AtomicUsize,
    pub(crate) renews: AtomicUsize,
}

/// A backend wrapper counting calls and successful acks (to stop the clock at the last one).
pub(crate) struct Counting<B> {
    pub(crate) inner: B,
    pub(crate) acked: Arc<AckCounter>,
}

impl<B: Backend<Payload = Bytes>> Backend for Counting<B> {
    type Payload = Bytes;

    fn claim_timeout(&self) -> Option<Duration> {
        self.inner.claim_timeout()
    }

    fn enqueued_at(&self, id: &MessageId) -> Option<std::time::SystemTime> {
        self.inner.enqueued_at(id)
    }

    fn take_undeliverable(&self) -> Vec<leasehold_core::Undeliverable> {
        self.inner.take_undeliverable()
    }

    fn next_due(&self) -> Option<Duration> {
        self.inner.next_due()
    }

    async fn publish(&self, payload: Bytes) -> BackendResult<MessageId> {
        self.inner.publish(payload).await
    }

    async fn fetch(&self, max: usize, wait: Duration) -> BackendResult<Vec<Fetched<Bytes>>> {
        let fetched = self.inner.fetch(max, wait).await?;
        let calls = &self.acked.calls;
        calls.fetches.fetch_add(1, Ordering::Relaxed);
        calls.fetched.fetch_add(fetched.len(), Ordering::Relaxed);
        Ok(fetched)
    }

    async fn renew(&self, lease_refs: &[LeaseRef]) -> BackendResult<Vec<RenewResult>> {
        self.acked.calls.renews.fetch_add(1, Ordering::Relaxed);
        self.inner.renew(lease_refs).await
    }

    async fn ack(&self, lease_refs: &[LeaseRef]) -> BackendResult<Vec<SettleResult>> {
        self.acked.calls.acks.fetch_add(1, Ordering::Relaxed);
        let results = self.inner.ack(lease_refs).await?;
        let ok = results.iter().filter(|r| **r == SettleResult::Ok).count();
        let counter = &self.acked;
        let before = counter.acked.fetch_add(ok, Ordering::AcqRel);
        if before < counter.target && before + ok >= counter.target {
            counter.all_acked.notify_one();
        }
        Ok(results)
    }

    async fn release(&self, lease_ref: &LeaseRef, delay: Duration) -> BackendResult<SettleResult> {
        self.inner.release(lease_ref, delay).await
    }

    async fn dead_letter(
        &self,
        lease_ref: &LeaseRef,
        reason: &DeadLetterReason,
    ) -> BackendResult<SettleResult> {
        self.inner.dead_letter(lease_ref, reason).await
    }

    async fn stream_len(&self) -> BackendResult<u64> {
        self.inner.stream_len().await
    }

    async fn pending(&self) -> BackendResult<u64> {
        self.inner.pending().await
    }
}
