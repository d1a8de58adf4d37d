//! The heartbeat: renew rounds (one `Renew` per `renew_batch_size` held leases), their results,
//! and local expiry of leases whose renews stopped succeeding.

use std::time::Instant;

use super::{LeaseEngine, Round};
use crate::backend::{ErrorKind, LeaseRef};
use crate::effect::Effect;
use crate::timers::Tick;
use crate::types::{CancelReason, LeaseId, RenewId, RenewResult, StreamId};

impl<P: Clone> LeaseEngine<P> {
    /// Results of the `Renew` effect `batch`: one per lease the backend answered for. A lease
    /// left out keeps its state. Results for leases the engine let go meanwhile, or whose fence
    /// changed since, are ignored and counted as stale.
    pub fn handle_renewed(
        &mut self,
        now: Instant,
        batch: RenewId,
        results: impl IntoIterator<Item = (LeaseId, RenewResult)>,
    ) {
        // Apply before advancing the clock: a successful renew proves the lease was still ours
        // at its send time, so it must not be expired by the time its answer is read.
        self.set_now(now);
        match self.answer_round(batch, false) {
            None => self.stats.unexpected += 1,
            Some((epoch, seq, _)) => {
                for (id, result) in results {
                    if !self.leases.was_issued(id) {
                        self.stats.unexpected += 1;
                        continue;
                    }
                    let Some(lease) = self.leases.get_mut(id) else {
                        self.stats.stale += 1;
                        continue;
                    };
                    if !lease.state.is_held() || lease.fence_seq > seq {
                        self.stats.stale += 1;
                        continue;
                    }
                    match result {
                        RenewResult::Kept if lease.epoch < epoch => {
                            let old = std::mem::replace(&mut lease.epoch, epoch);
                            self.epochs.remove(old);
                            self.epochs.add(epoch);
                            self.confirmed(id);
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
        }
        self.begin_now();
        self.finish();
    }

    /// The `Renew` effect `batch` failed as a whole (timeout, connection lost). Its leases keep
    /// their state; the next round comes sooner, and leases expire if renewing keeps failing.
    /// A fatal error also stops the stream's intake.
    pub fn handle_renew_failed(&mut self, now: Instant, batch: RenewId, kind: ErrorKind) {
        self.begin(now);
        match self.answer_round(batch, true) {
            None => self.stats.unexpected += 1,
            Some((_, _, stream)) => {
                if kind == ErrorKind::Fatal {
                    self.halt(stream);
                }
                self.close_round_if_answered();
            }
        }
        self.finish();
    }

    /// Sends one renew round for every renewable lease: per stream, in chunks of
    /// `renew_batch_size`.
    pub(super) fn start_round(&mut self) {
        let size = self.cfg.renew_batch_size;
        let left = self.renewable();
        // Built chunk by chunk (no list of all ids first); with one stream, each chunk sized
        // for what is left.
        let mut chunks: Vec<(StreamId, Vec<LeaseId>, Vec<LeaseRef>)> =
            Vec::with_capacity(left.div_ceil(size));
        // Per stream, the index of its chunk being filled.
        let mut filling: Vec<Option<usize>> = vec![None; self.streams.len()];
        let renewable = self.leases.iter().filter(|(_, l)| l.state.is_renewable());
        for (placed, (id, lease)) in renewable.enumerate() {
            let open = &mut filling[usize::from(lease.stream.0)];
            let chunk = match *open {
                Some(i) if chunks[i].1.len() < size => i,
                _ => {
                    let capacity = size.min(left - placed).max(1);
                    chunks.push((
                        lease.stream,
                        Vec::with_capacity(capacity),
                        Vec::with_capacity(capacity),
                    ));
                    *open = Some(chunks.len() - 1);
                    chunks.len() - 1
                }
            };
            chunks[chunk].1.push(id);
            chunks[chunk].2.push(lease.lease_ref());
        }
        let epoch = self.epochs.open(self.now);
        let seq = self.next_seq();
        let count = chunks.len();
        let first = self.next_renew_id;
        self.next_renew_id += count as u64;
        let mut streams = Vec::with_capacity(count);
        for (i, (stream, leases, lease_refs)) in chunks.into_iter().enumerate() {
            streams.push(stream);
            self.effects.push_back(Effect::Renew {
                batch: RenewId(first + i as u64),
                stream,
                leases,
                lease_refs,
            });
        }
        self.renew_due = None;
        self.round = Some(Round {
            first,
            answered: vec![false; count],
            streams,
            remaining: count,
            epoch,
            seq,
            sent_at: self.now,
            failed: false,
        });
    }

    /// Marks chunk `batch` answered; returns the round's epoch and sequence, and the chunk's
    /// stream, if it was pending.
    fn answer_round(&mut self, batch: RenewId, failed: bool) -> Option<(u64, u64, StreamId)> {
        let round = self.round.as_mut()?;
        let index = usize::try_from(batch.0.checked_sub(round.first)?).ok()?;
        let answered = round.answered.get_mut(index)?;
        if std::mem::replace(answered, true) {
            return None;
        }
        round.remaining -= 1;
        round.failed |= failed;
        Some((round.epoch, round.seq, round.streams[index]))
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
    /// lapsed on the backend by now), in the order of their latest delivery: where more `Done`s
    /// expire at once than late acks may be kept, the earlier deliveries keep theirs.
    pub(super) fn expire(&mut self, cutoff: Tick) {
        if let Some(epoch) = self.epochs.newest_live_sent_by(cutoff) {
            let mut expired: Vec<(u64, LeaseId)> = self
                .leases
                .iter()
                .filter(|(_, l)| l.state.is_held() && l.epoch <= epoch)
                .map(|(id, l)| (l.fence_seq, id))
                .collect();
            expired.sort_unstable_by_key(|&(delivered, _)| delivered);
            for (_, id) in expired {
                self.drop_lease(id, CancelReason::LeaseExpired);
            }
        }
    }
}
