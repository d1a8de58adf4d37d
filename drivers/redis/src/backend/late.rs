//! Fetches that come back late, and fetches that meet a server gone away.
//!
//! The engine dates a delivery's lease from when its fetch was sent, and discards deliveries
//! whose lease ran out before the answer came: it cannot know when the server acted on the
//! read, so it assumes the earliest instant. That is right, and it throws work away whenever
//! the answer is late for a reason that did not delay the read itself: a server paused
//! (`CLIENT PAUSE`, a long script elsewhere) executes the read only when it resumes, and the
//! entries it takes then were leased just now, yet they arrive looking as old as the pause.
//! Discarded, they would stay pending with this consumer until reclaimed a claim timeout later.
//!
//! So a fetch answered later than its wait plus a tenth of the claim timeout (far more than a
//! round trip; far less than a lease, whatever the engine's expiry margin) hands nothing over
//! and holds its deliveries back. The engine fetches again at once (the fetch outlasted its
//! wait), and that fetch first renews the held deliveries, fenced and owner-checked, then hands
//! over those still held with their fence: a renew sent after the new fetch was, so the
//! engine's dating from the new fetch's send stays conservative. A held delivery someone else
//! took meanwhile is `Lost` to the renew and dropped. If the worker stops before that fetch,
//! they stay pending with this consumer and are reclaimed after the claim timeout, as entries
//! of a fetch dropped mid-wait are.
//!
//! A fetch that meets a server gone away waits for it within its wait (`conn::recover`).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use leasehold_core::{Backend, BackendResult, Fetched, LeaseRef, RenewResult};

use super::RedisBackend;
use crate::conn::waits_for_the_server;

/// Deliveries of late fetches, oldest first, until a fetch hands them over.
#[derive(Debug, Default)]
pub(crate) struct Held(Mutex<Vec<Fetched<Bytes>>>);

impl Held {
    /// Up to `max` held deliveries, taken out.
    fn take(&self, max: usize) -> Vec<Fetched<Bytes>> {
        let mut held = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let n = held.len().min(max);
        held.drain(..n).collect()
    }

    /// Puts deliveries back in front (their renew failed).
    fn put_back(&self, deliveries: Vec<Fetched<Bytes>>) {
        let mut held = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let later = std::mem::replace(&mut *held, deliveries);
        held.extend(later);
    }

    fn hold(&self, deliveries: Vec<Fetched<Bytes>>) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(deliveries);
    }
}

/// Whether a fetch that began at `began`, allowed to wait `wait`, is answered late at `now`.
pub(crate) fn late(began: Instant, wait: Duration, claim_timeout: Duration, now: Instant) -> bool {
    now.saturating_duration_since(began) > wait.saturating_add(claim_timeout / 10)
}

impl RedisBackend {
    /// `Backend::fetch`: held deliveries first (renewed), else a fetch; waits for a server
    /// that went away within `wait`, and holds back what comes late (see the module docs).
    pub(crate) async fn fetch_recovering(
        &self,
        max: usize,
        wait: Duration,
    ) -> BackendResult<Vec<Fetched<Bytes>>> {
        if max == 0 {
            return Ok(Vec::new());
        }
        let began = Instant::now();
        let deadline = began.checked_add(wait);
        let mut pause = Duration::ZERO;
        loop {
            let left = deadline.map_or(wait, |at| at.saturating_duration_since(Instant::now()));
            let fetched = match self.readopt(max).await {
                Ok(Some(adopted)) if !adopted.is_empty() => Ok(adopted),
                Ok(_) => self.fetch_within(max, left).await,
                Err(e) => Err(e),
            };
            match fetched {
                Ok(fetched) => {
                    if !fetched.is_empty()
                        && late(began, wait, self.config.claim_timeout, Instant::now())
                    {
                        tracing::debug!(
                            stream = %self.config.target.stream,
                            n = fetched.len(),
                            answered_after = ?began.elapsed(),
                            "a fetch was answered late: its deliveries wait for the next fetch"
                        );
                        self.held.hold(fetched);
                        return Ok(Vec::new());
                    }
                    return Ok(fetched);
                }
                Err(e) if waits_for_the_server(&e) => {
                    let stream = &self.config.target.stream;
                    let back = self
                        .commands
                        .wait_for_the_server(&e, deadline, &self.outage, stream, &mut pause)
                        .await?;
                    if !back {
                        // The wait is over and the server still away: nothing came, as from
                        // a wait that found nothing.
                        return Ok(Vec::new());
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Renews up to `max` held deliveries and returns those still held by this consumer with
    /// their fence (`None` when none was held).
    async fn readopt(&self, max: usize) -> BackendResult<Option<Vec<Fetched<Bytes>>>> {
        let held = self.held.take(max);
        if held.is_empty() {
            return Ok(None);
        }
        let leases: Vec<LeaseRef> = held.iter().map(LeaseRef::from).collect();
        match self.renew(&leases).await {
            Ok(kept) => Ok(Some(
                held.into_iter()
                    .zip(kept)
                    .filter_map(|(delivery, kept)| (kept == RenewResult::Kept).then_some(delivery))
                    .collect(),
            )),
            Err(e) => {
                self.held.put_back(held);
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use leasehold_core::Fence;

    use super::*;

    fn delivery(id: &str) -> Fetched<Bytes> {
        Fetched::new(id.into(), Bytes::new(), 1, Fence(1))
    }

    #[test]
    fn late_means_past_the_wait_by_a_tenth_of_the_claim_timeout() {
        let began = Instant::now();
        let (wait, claim) = (Duration::from_millis(500), Duration::from_secs(2));
        let at = |ms| began + Duration::from_millis(ms);
        assert!(!late(began, wait, claim, at(0)));
        assert!(!late(began, wait, claim, at(700)));
        assert!(late(began, wait, claim, at(701)));
        assert!(late(began, Duration::ZERO, claim, at(201)));
        assert!(!late(began, Duration::MAX, claim, at(100_000)));
    }

    #[test]
    fn held_deliveries_go_oldest_first_and_come_back_in_front() {
        let held = Held::default();
        held.hold(vec![delivery("1-0"), delivery("2-0"), delivery("3-0")]);
        let first = held.take(2);
        assert_eq!(
            first.iter().map(|f| f.id.as_str()).collect::<Vec<_>>(),
            ["1-0", "2-0"]
        );
        held.hold(vec![delivery("4-0")]);
        held.put_back(first);
        let all = held.take(10);
        assert_eq!(
            all.iter().map(|f| f.id.as_str()).collect::<Vec<_>>(),
            ["1-0", "2-0", "3-0", "4-0"]
        );
        assert!(held.take(10).is_empty());
    }
}
