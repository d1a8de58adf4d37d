//! The suite must catch broken backends: each test wraps the memory backend with one classic
//! flaw and expects the property that guards against it to fail with its name.

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use leasehold_conformance::BackendFactory;
use leasehold_core::{
    Backend, BackendResult, DeadLetterReason, FetchAnswer, Fetched, LeaseRef, MessageId,
    RenewResult, SettleResult,
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
    /// Fetch serves new messages before reclaims whenever both are there, so lapsed leases
    /// starve while new messages keep coming.
    NewFirst,
    /// Fetch serves reclaims before new messages whenever both are there, so new messages
    /// starve while there is a backlog of lapsed leases.
    ReclaimsFirst,
    /// `pending()` counts every message in the stream, undelivered ones too.
    PendingCountsUndelivered,
    /// Renew answers `Lost` for a lease past its claim timeout, even though no peer took it.
    LapsedRenewLost,
}

/// More than any property has available at once: the fetch-order flaws take everything.
const TAKE_ALL: usize = 1024;

struct Broken {
    inner: MemoryBackend,
    flaw: Flaw,
    /// The fetch-order flaws: deliveries taken from the memory backend but not handed out yet.
    /// They stay pending for this consumer meanwhile, as if the backend had not served them.
    held: Mutex<Vec<Fetched<Bytes>>>,
}

impl Broken {
    fn held(&self) -> MutexGuard<'_, Vec<Fetched<Bytes>>> {
        self.held.lock().expect("not poisoned")
    }

    /// The fetch of the fetch-order flaws: takes every delivery the memory backend has (both
    /// kinds), then hands out up to `max` of those taken so far, the favoured kind first.
    async fn fetch_in_order(
        &self,
        max: usize,
        new_first: bool,
    ) -> BackendResult<FetchAnswer<Bytes>> {
        let taken = self.inner.fetch(TAKE_ALL, Duration::ZERO).await?;
        let mut held = self.held();
        held.extend(taken);
        // Stable: each kind stays in the order it was taken.
        held.sort_by_key(|m| (m.delivery_count == 1) != new_first);
        let n = max.min(held.len());
        Ok(FetchAnswer::new(held.drain(..n).collect()))
    }

    /// The renew of [`Flaw::LapsedRenewLost`]: `Lost` for each lease idle past the claim
    /// timeout, without touching it; the others renewed.
    async fn renew_unless_lapsed(
        &self,
        lease_refs: &[LeaseRef],
    ) -> BackendResult<Vec<RenewResult>> {
        let stream = self.inner.stream();
        let lapsed: Vec<bool> = lease_refs
            .iter()
            .map(|l| {
                stream
                    .pending_info(&l.id)
                    .is_some_and(|p| p.idle >= stream.claim_timeout())
            })
            .collect();
        let live: Vec<LeaseRef> = lease_refs
            .iter()
            .zip(&lapsed)
            .filter(|(_, &lapsed)| !lapsed)
            .map(|(l, _)| l.clone())
            .collect();
        let mut renewed = self.inner.renew(&live).await?.into_iter();
        Ok(lapsed
            .into_iter()
            .map(|lapsed| match lapsed {
                true => RenewResult::Lost,
                false => renewed.next().expect("one result per lease"),
            })
            .collect())
    }
}

impl Backend for Broken {
    type Payload = Bytes;

    async fn publish(&self, payload: Bytes) -> BackendResult<MessageId> {
        self.inner.publish(payload).await
    }

    async fn fetch(&self, max: usize, wait: Duration) -> BackendResult<FetchAnswer<Bytes>> {
        let mut batch = match self.flaw {
            Flaw::FetchOneTooMany => self.inner.fetch(max + 1, wait).await?,
            Flaw::NewFirst => self.fetch_in_order(max, true).await?,
            Flaw::ReclaimsFirst => self.fetch_in_order(max, false).await?,
            _ => self.inner.fetch(max, wait).await?,
        };
        if let Flaw::CountSkips = self.flaw {
            for m in &mut batch.messages {
                if m.delivery_count > 1 {
                    m.delivery_count += 1;
                }
            }
        }
        Ok(batch)
    }

    async fn renew(&self, lease_refs: &[LeaseRef]) -> BackendResult<Vec<RenewResult>> {
        if let Flaw::LapsedRenewLost = self.flaw {
            return self.renew_unless_lapsed(lease_refs).await;
        }
        let results = self.inner.renew(lease_refs).await?;
        Ok(match self.flaw {
            Flaw::RenewIgnoresOwner => vec![RenewResult::Kept; lease_refs.len()],
            Flaw::AllOrNothing if results.contains(&RenewResult::Lost) => {
                vec![RenewResult::Lost; lease_refs.len()]
            }
            _ => results,
        })
    }

    async fn ack(&self, lease_refs: &[LeaseRef]) -> BackendResult<Vec<SettleResult>> {
        self.inner.ack(lease_refs).await
    }

    async fn release(&self, lease_ref: &LeaseRef, delay: Duration) -> BackendResult<SettleResult> {
        match self.flaw {
            Flaw::ReleaseIgnoresDelay => self.inner.release(lease_ref, Duration::ZERO).await,
            _ => self.inner.release(lease_ref, delay).await,
        }
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
        match self.flaw {
            Flaw::PendingCountsUndelivered => self.inner.stream_len().await,
            _ => self.inner.pending().await,
        }
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
                held: Mutex::default(),
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
#[should_panic(expected = "property `reclaims_and_new_share_fetches` violated: lapsed messages")]
async fn new_messages_always_first_is_caught() {
    let f = BrokenFactory::new(Flaw::NewFirst);
    leasehold_conformance::reclaims_and_new_share_fetches(&f).await;
}

#[tokio::test]
#[should_panic(expected = "property `reclaims_and_new_share_fetches` violated: new messages")]
async fn reclaims_always_first_is_caught() {
    let f = BrokenFactory::new(Flaw::ReclaimsFirst);
    leasehold_conformance::reclaims_and_new_share_fetches(&f).await;
}

#[tokio::test]
#[should_panic(expected = "property `pending_counts_only_delivered` violated")]
async fn pending_counting_undelivered_messages_is_caught() {
    let f = BrokenFactory::new(Flaw::PendingCountsUndelivered);
    leasehold_conformance::pending_counts_only_delivered(&f).await;
}

#[tokio::test]
#[should_panic(expected = "property `lapsed_lease_untaken_is_still_owned` violated")]
async fn lapsed_untaken_renew_lost_is_caught() {
    let f = BrokenFactory::new(Flaw::LapsedRenewLost);
    leasehold_conformance::lapsed_lease_untaken_is_still_owned(&f).await;
}

#[tokio::test]
async fn the_wrapper_without_a_flaw_passes_everything() {
    leasehold_conformance::run_all(&BrokenFactory::new(Flaw::None)).await;
}
