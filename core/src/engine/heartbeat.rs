//! The heartbeat: renew rounds (one `Renew` per `renew_batch_size` held leases), their results,
//! and local expiry of leases whose renews stopped succeeding.

use std::time::Instant;

use super::{LeaseEngine, Round};
use crate::effect::Effect;
use crate::timers::Tick;
use crate::types::{CancelReason, LeaseId, RenewId, RenewResult};

impl<P> LeaseEngine<P> {
    /// Results of the `Renew` effect `batch`: one per lease the backend answered for. A lease
    /// left out keeps its state. Results for leases whose fence changed since are ignored.
    pub fn handle_renewed(
        &mut self,
        now: Instant,
        batch: RenewId,
        results: impl IntoIterator<Item = (LeaseId, RenewResult)>,
    ) {
        // Apply before advancing the clock: a successful renew proves the lease was still ours
        // at its send time, so it must not be expired by the time its answer is read.
        self.set_now(now);
        if let Some((epoch, seq)) = self.answer_round(batch, false) {
            for (id, result) in results {
                let Some(lease) = self.leases.get_mut(id) else {
                    continue;
                };
                if !lease.state.is_held() || lease.fence_seq > seq {
                    continue;
                }
                match result {
                    RenewResult::Kept if lease.epoch < epoch => {
                        let old = std::mem::replace(&mut lease.epoch, epoch);
                        self.epochs.remove(old);
                        self.epochs.add(epoch);
                    }
                    RenewResult::Kept => {}
                    // An ack or dead-letter in flight may have removed the entry: its own result
                    // tells what happened.
                    RenewResult::Lost if lease.state.is_in_flight() => {}
                    RenewResult::Lost => self.drop_lease(id, CancelReason::LeaseLost),
                }
            }
            self.close_round_if_answered();
        }
        self.begin_now();
        self.finish();
    }

    /// The `Renew` effect `batch` failed as a whole (timeout, connection lost). Its leases keep
    /// their state; the next round comes sooner, and leases expire if renewing keeps failing.
    pub fn handle_renew_failed(&mut self, now: Instant, batch: RenewId) {
        self.begin(now);
        if self.answer_round(batch, true).is_some() {
            self.close_round_if_answered();
        }
        self.finish();
    }

    /// Sends one renew round for every renewable lease, in chunks of `renew_batch_size`.
    pub(super) fn start_round(&mut self) {
        let size = self.cfg.renew_batch_size;
        // Built chunk by chunk (no list of all ids first), each sized for what is left.
        let mut left = self.renewable();
        let mut chunks: Vec<Vec<LeaseId>> = Vec::with_capacity(left.div_ceil(size));
        for (id, _) in self.leases.iter().filter(|(_, l)| l.state.is_renewable()) {
            match chunks.last_mut() {
                Some(chunk) if chunk.len() < size => chunk.push(id),
                _ => {
                    let mut chunk = Vec::with_capacity(size.min(left).max(1));
                    chunk.push(id);
                    chunks.push(chunk);
                }
            }
            left = left.saturating_sub(1);
        }
        let epoch = self.epochs.open(self.now);
        let seq = self.next_seq();
        let count = chunks.len();
        let first = self.next_renew_id;
        self.next_renew_id += count as u64;
        for (i, leases) in chunks.into_iter().enumerate() {
            self.effects.push_back(Effect::Renew {
                batch: RenewId(first + i as u64),
                leases,
            });
        }
        self.renew_due = None;
        self.round = Some(Round {
            first,
            answered: vec![false; count],
            remaining: count,
            epoch,
            seq,
            sent_at: self.now,
            failed: false,
        });
    }

    /// Marks chunk `batch` answered; returns the round's epoch and sequence if it was pending.
    fn answer_round(&mut self, batch: RenewId, failed: bool) -> Option<(u64, u64)> {
        let round = self.round.as_mut()?;
        let index = usize::try_from(batch.0.checked_sub(round.first)?).ok()?;
        let answered = round.answered.get_mut(index)?;
        if std::mem::replace(answered, true) {
            return None;
        }
        round.remaining -= 1;
        round.failed |= failed;
        Some((round.epoch, round.seq))
    }

    fn close_round_if_answered(&mut self) {
        if self.round.as_ref().is_some_and(|r| r.remaining == 0) {
            let round = self.round.take().expect("checked");
            self.epochs.unpin(round.epoch);
            let mut next = round.sent_at.saturating_add(self.durations.heartbeat);
            if round.failed {
                next = next.min(self.now.saturating_add(self.durations.heartbeat_quarter));
            }
            self.renew_by(next);
        }
    }

    /// Drops every held lease last confirmed by an epoch sent at or before `cutoff` (it may have
    /// lapsed on the backend by now).
    pub(super) fn expire(&mut self, cutoff: Tick) {
        if let Some(epoch) = self.epochs.newest_live_sent_by(cutoff) {
            let expired: Vec<LeaseId> = self
                .leases
                .iter()
                .filter(|(_, l)| l.state.is_held() && l.epoch <= epoch)
                .map(|(id, _)| id)
                .collect();
            for id in expired {
                self.drop_lease(id, CancelReason::LeaseExpired);
            }
        }
    }
}
