//! A backend wrapper that counts calls and acks, shared by the memory and Redis benchmarks.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use leasehold_tokio::core::{
    BackendResult, Call, FetchAnswer, Hooked, Hooks, LeaseRef, SettleResult,
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

/// A backend counting calls and successful acks (to stop the clock at the last one).
pub(crate) type Counting<B> = Hooked<B, Arc<AckCounter>>;

impl<P: Send + Sync + 'static> Hooks<P> for AckCounter {
    async fn before(&self, call: Call<'_>) -> BackendResult<()> {
        match call {
            Call::Renew(_) => self.calls.renews.fetch_add(1, Ordering::Relaxed),
            Call::Ack(_) => self.calls.acks.fetch_add(1, Ordering::Relaxed),
            _ => 0,
        };
        Ok(())
    }

    async fn fetched(&self, answer: &mut BackendResult<FetchAnswer<P>>) {
        if let Ok(answer) = answer {
            self.calls.fetches.fetch_add(1, Ordering::Relaxed);
            self.calls
                .fetched
                .fetch_add(answer.len(), Ordering::Relaxed);
        }
    }

    fn acked(&self, _: &[LeaseRef], answer: &BackendResult<Vec<SettleResult>>) {
        let Ok(results) = answer else { return };
        let ok = results.iter().filter(|r| **r == SettleResult::Ok).count();
        let before = self.acked.fetch_add(ok, Ordering::AcqRel);
        if before < self.target && before + ok >= self.target {
            self.all_acked.notify_one();
        }
    }
}
