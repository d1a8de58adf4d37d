//! The suite must catch broken backends: each test wraps the memory backend with one classic
//! flaw and expects the property that guards against it to fail with its name.

use std::time::Duration;

use leasehold_conformance::BackendFactory;
use leasehold_core::{
    Backend, BackendResult, DeadLetterReason, Fetched, LeaseRef, MessageId, RenewResult,
    SettleResult,
};
use leasehold_memory::{Bytes, ManualClock, MemoryBackend, MemoryStream, StreamConfig};

#[derive(Clone, Copy)]
enum Flaw {
    /// None: the wrapper is faithful.
    None,
    /// Renew answers `Kept` without checking owner or fence (the steal-back hole).
    RenewIgnoresOwner,
    /// Renew and ack answer all-or-nothing: one lost lease fails the whole batch.
    AllOrNothing,
    /// Fetch hands out one more message than asked.
    FetchOneTooMany,
    /// Release ignores its delay.
    ReleaseIgnoresDelay,
    /// Takeovers report a delivery count one too high (as if renews counted as deliveries).
    CountSkips,
}

struct Broken {
    inner: MemoryBackend,
    flaw: Flaw,
}

impl Backend for Broken {
    type Payload = Bytes;

    async fn publish(&self, payload: Bytes) -> BackendResult<MessageId> {
        self.inner.publish(payload).await
    }

    async fn fetch(&self, max: usize, wait: Duration) -> BackendResult<Vec<Fetched<Bytes>>> {
        let mut batch = match self.flaw {
            Flaw::FetchOneTooMany => self.inner.fetch(max + 1, wait).await?,
            _ => self.inner.fetch(max, wait).await?,
        };
        if let Flaw::CountSkips = self.flaw {
            for m in &mut batch {
                if m.delivery_count > 1 {
                    m.delivery_count += 1;
                }
            }
        }
        Ok(batch)
    }

    async fn renew(&self, leases: &[LeaseRef]) -> BackendResult<Vec<RenewResult>> {
        let results = self.inner.renew(leases).await?;
        Ok(match self.flaw {
            Flaw::RenewIgnoresOwner => vec![RenewResult::Kept; leases.len()],
            Flaw::AllOrNothing if results.contains(&RenewResult::Lost) => {
                vec![RenewResult::Lost; leases.len()]
            }
            _ => results,
        })
    }

    async fn ack(&self, leases: &[LeaseRef]) -> BackendResult<Vec<SettleResult>> {
        self.inner.ack(leases).await
    }

    async fn release(&self, lease: &LeaseRef, delay: Duration) -> BackendResult<SettleResult> {
        match self.flaw {
            Flaw::ReleaseIgnoresDelay => self.inner.release(lease, Duration::ZERO).await,
            _ => self.inner.release(lease, delay).await,
        }
    }

    async fn dead_letter(
        &self,
        lease: &LeaseRef,
        reason: &DeadLetterReason,
    ) -> BackendResult<SettleResult> {
        self.inner.dead_letter(lease, reason).await
    }

    async fn stream_len(&self) -> BackendResult<u64> {
        self.inner.stream_len().await
    }

    async fn pending(&self) -> BackendResult<u64> {
        self.inner.pending().await
    }
}

struct BrokenFactory {
    clock: ManualClock,
    flaw: Flaw,
}

impl BrokenFactory {
    fn new(flaw: Flaw) -> Self {
        Self {
            clock: ManualClock::new(),
            flaw,
        }
    }
}

impl BackendFactory for BrokenFactory {
    type Backend = Broken;

    fn claim_timeout(&self) -> Duration {
        Duration::from_secs(30)
    }

    async fn open(&self, claim_timeout: Duration, replicas: usize) -> Vec<Broken> {
        let stream = MemoryStream::with_clock(StreamConfig::new(claim_timeout), self.clock.clone())
            .expect("stream config");
        (0..replicas)
            .map(|i| Broken {
                inner: stream.consumer(&format!("replica-{i}")).expect("consumer"),
                flaw: self.flaw,
            })
            .collect()
    }

    async fn advance(&self, d: Duration) {
        self.clock.advance(d);
    }
}

#[tokio::test]
#[should_panic(expected = "property `renew_by_non_owner_is_lost` violated")]
async fn renew_without_owner_check_is_caught() {
    let f = BrokenFactory::new(Flaw::RenewIgnoresOwner);
    leasehold_conformance::renew_by_non_owner_is_lost(&f).await;
}

#[tokio::test]
#[should_panic(expected = "property `results_are_per_lease` violated")]
async fn all_or_nothing_batches_are_caught() {
    let f = BrokenFactory::new(Flaw::AllOrNothing);
    leasehold_conformance::results_are_per_lease(&f).await;
}

#[tokio::test]
#[should_panic(expected = "property `fetch_never_exceeds_max` violated")]
async fn oversized_fetch_is_caught() {
    let f = BrokenFactory::new(Flaw::FetchOneTooMany);
    leasehold_conformance::fetch_never_exceeds_max(&f).await;
}

#[tokio::test]
#[should_panic(expected = "property `release_with_delay` violated")]
async fn release_ignoring_its_delay_is_caught() {
    let f = BrokenFactory::new(Flaw::ReleaseIgnoresDelay);
    leasehold_conformance::release_with_delay(&f).await;
}

#[tokio::test]
#[should_panic(expected = "property `delivery_count_grows_on_takeover_not_renew` violated")]
async fn skipping_delivery_counts_is_caught() {
    let f = BrokenFactory::new(Flaw::CountSkips);
    leasehold_conformance::delivery_count_grows_on_takeover_not_renew(&f).await;
}

#[tokio::test]
async fn the_wrapper_without_a_flaw_passes_everything() {
    leasehold_conformance::run_all(&BrokenFactory::new(Flaw::None)).await;
}
