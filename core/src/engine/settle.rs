//! Invocations and how they end: outcomes, acks, releases and dead letters (and their results),
//! leases lost or expired (orphaned invocations), and shutdown.

use std::time::{Duration, Instant};

use super::{AckInFlight, Extra, LeaseEngine, Shutdown};
use crate::backend::ErrorKind;
use crate::effect::Effect;
use crate::lease::{Op, State};
use crate::timers::ticks;
use crate::types::{
    AckId, CancelReason, DeadLetterReason, InvocationId, LeaseId, LossReason, Outcome,
    SettleResult, StreamId,
};

/// How a lease is settled, with what the operation carries.
#[derive(Debug)]
pub(super) enum Settle {
    Ack,
    Release(Duration),
    DeadLetter(Box<DeadLetterReason>),
}

impl<P: Clone> LeaseEngine<P> {
    /// An invocation finished with `outcome`. Outcomes of cancelled invocations, or of leases
    /// lost meanwhile, are discarded (the slot is freed); unknown invocations are ignored.
    ///
    /// Except a `Done` of an invocation cancelled because its lease expired locally (nobody is
    /// known to have taken the message over), reported within the cancel grace after that
    /// expiry and before its `max_processing_time`: its fenced ack is sent as a late ack, so
    /// the work is redone only if the backend refuses it (a takeover). A message delivered to
    /// this engine again meanwhile, or more late acks than `max_leases`, keep the old rule.
    pub fn handle_outcome(&mut self, now: Instant, invocation: InvocationId, outcome: Outcome) {
        self.begin(now);
        let id = invocation.lease;
        let state = match self.leases.get(id) {
            Some(lease) if lease.attempt == invocation.attempt && lease.state.is_running() => {
                lease.state
            }
            _ => {
                self.stats.unexpected += 1;
                return self.finish();
            }
        };
        match state {
            State::Orphaned if matches!(outcome, Outcome::Done) && self.may_ack_orphan(id) => {
                self.ack_orphan(id)
            }
            State::Orphaned => self.end_orphan(id),
            State::Running {
                cancelled: Some(CancelReason::MaxProcessingTime),
            } => self.fail(id, None, "max processing time exceeded".into()),
            State::Running { cancelled: Some(_) } => {
                self.settle(id, Settle::Release(Duration::ZERO))
            }
            State::Running { cancelled: None } => {
                let started = self.leases.get(id).expect("running").sent_seq;
                super::smooth(&mut self.observed.handler, self.now.saturating_sub(started));
                self.observed.fresh = true;
                self.ended(id, outcome)
            }
            _ => unreachable!("is_running covers Running and Orphaned"),
        }
        self.finish();
    }

    /// A running invocation that was not cancelled returned `outcome`.
    fn ended(&mut self, id: LeaseId, outcome: Outcome) {
        match outcome {
            Outcome::Done => self.settle(id, Settle::Ack),
            Outcome::Pending if self.shutdown.is_some() => {
                self.settle(id, Settle::Release(Duration::ZERO))
            }
            Outcome::Pending => {
                self.stats.pending += 1;
                self.set_state(id, State::Waiting);
            }
            Outcome::Retry { delay } => self.fail(id, delay, "handler asked to retry".into()),
            Outcome::Failed { error } => self.fail(id, None, error),
            Outcome::Reject { reason } => self.settle(
                id,
                Settle::DeadLetter(Box::new(DeadLetterReason::Rejected(reason))),
            ),
        }
    }

    /// The backend dead-lettered `count` entries by itself while fetching: they could never be
    /// delivered (see [`FetchAnswer::undeliverable`](crate::FetchAnswer::undeliverable)).
    /// They count with the engine's own dead letters; nothing else changes.
    pub fn handle_undeliverable(&mut self, count: usize) {
        self.stats.dead_lettered += count as u64;
    }

    /// Results of the `Ack` effect `batch`, one per lease. A lease of the batch left out of
    /// the results counts as a transient failure (it is acked again later).
    pub fn handle_acked(
        &mut self,
        now: Instant,
        batch: AckId,
        results: impl IntoIterator<Item = (LeaseId, SettleResult)>,
    ) {
        // Answers are about sends already made: apply them before timers re-send anything.
        self.set_now(now);
        match self.take_ack(batch, false) {
            None => self.stats.unexpected += 1,
            Some(acked) => {
                for (id, result) in results {
                    if self.in_ack(id, acked.seq) {
                        self.settled(id, result, Op::Ack);
                    } else {
                        self.not_settling(id);
                    }
                }
                for &id in &acked.leases {
                    if self.in_ack(id, acked.seq) {
                        self.settled(id, SettleResult::Failed, Op::Ack);
                    }
                }
            }
        }
        self.begin_now();
        self.finish();
    }

    /// The `Ack` effect `batch` failed as a whole. Its leases are acked again after a transient
    /// error (late acks after a backoff that grows while the stream's `Ack` calls keep
    /// failing); after a fatal one they are given up (they lapse on the backend and are
    /// delivered again) and the stream's intake stops.
    pub fn handle_ack_failed(&mut self, now: Instant, batch: AckId, kind: ErrorKind) {
        self.set_now(now);
        match self.take_ack(batch, true) {
            None => self.stats.unexpected += 1,
            Some(acked) => {
                for &id in &acked.leases {
                    if self.in_ack(id, acked.seq) {
                        self.settle_failed(id, Op::Ack, kind);
                    }
                }
            }
        }
        self.begin_now();
        self.finish();
    }

    /// The answer to a `Release` effect: the backend's result, or the call's failure.
    pub fn handle_released(
        &mut self,
        now: Instant,
        lease: LeaseId,
        result: Result<SettleResult, ErrorKind>,
    ) {
        self.set_now(now);
        self.settle_answered(lease, result, Op::Release);
        self.begin_now();
        self.finish();
    }

    /// The answer to a `DeadLetter` effect: the backend's result, or the call's failure.
    pub fn handle_dead_lettered(
        &mut self,
        now: Instant,
        lease: LeaseId,
        result: Result<SettleResult, ErrorKind>,
    ) {
        self.set_now(now);
        self.settle_answered(lease, result, Op::DeadLetter);
        self.begin_now();
        self.finish();
    }

    /// Begin shutdown: fetch nothing more; release waiting leases at once (delay 0); send acks
    /// waiting for a retry (late ones included) at once; let running invocations finish until
    /// `deadline`, then cancel and release them. `Effect::Drained` follows once no lease is
    /// held and no late ack awaits an answer; a settle (late ack included) that fails after
    /// the deadline is given up and counted ([`Stats::abandoned`](crate::Stats::abandoned),
    /// and [`Stats::abandoned_acks`](crate::Stats::abandoned_acks) for finished work). A second call can only bring the deadline forward.
    pub fn handle_shutdown(&mut self, now: Instant, deadline: Instant) {
        self.begin(now);
        let deadline_at = self.tick(deadline);
        if let Some(shutdown) = &mut self.shutdown {
            if !shutdown.cancelled_running && deadline < shutdown.deadline {
                shutdown.deadline = deadline;
                shutdown.deadline_at = deadline_at;
            }
        } else {
            self.shutdown = Some(Shutdown {
                deadline,
                deadline_at,
                cancelled_running: false,
            });
            let waiting: Vec<(LeaseId, State)> = self
                .leases
                .iter()
                .filter(|(_, l)| {
                    matches!(
                        l.state,
                        State::Waiting
                            | State::Ready
                            | State::Blocked
                            | State::Settling {
                                in_flight: false,
                                ..
                            }
                            | State::Late {
                                in_flight: false,
                                ..
                            }
                    )
                })
                .map(|(id, l)| (id, l.state))
                .collect();
            for (id, state) in waiting {
                match state {
                    State::Settling { op, .. } => self.send_settle(id, op),
                    State::Late { .. } => self.send_late(id),
                    _ => self.settle(id, Settle::Release(Duration::ZERO)),
                }
            }
        }
        self.advance();
        self.finish();
    }

    /// The shutdown deadline passed: cancel every running invocation.
    pub(super) fn shutdown_deadline_passed(&mut self) {
        if let Some(shutdown) = &mut self.shutdown {
            shutdown.cancelled_running = true;
        }
        let running: Vec<LeaseId> = self
            .leases
            .iter()
            .filter(|(_, l)| matches!(l.state, State::Running { cancelled: None }))
            .map(|(id, _)| id)
            .collect();
        for id in running {
            self.cancel(id, CancelReason::Shutdown);
        }
    }

    pub(super) fn start_run(&mut self, id: LeaseId) {
        let lease = self.leases.get_mut(id).expect("held");
        lease.attempt += 1;
        lease.sent_seq = self.now;
        self.set_state(id, State::Running { cancelled: None });
        self.stats.invocations += 1;
        let run = self.run_effect(id);
        self.effects.push_back(run);
    }

    pub(super) fn cancel(&mut self, id: LeaseId, reason: CancelReason) {
        let Some(lease) = self.leases.get(id) else {
            return;
        };
        if let State::Running { cancelled: None } = lease.state {
            let invocation = InvocationId {
                lease: id,
                attempt: lease.attempt,
            };
            self.set_state(
                id,
                State::Running {
                    cancelled: Some(reason),
                },
            );
            self.stats.cancelled += 1;
            self.effects
                .push_back(Effect::Cancel { invocation, reason });
        }
    }

    /// A failed attempt: dead-letter on the last allowed delivery, else release with backoff.
    fn fail(&mut self, id: LeaseId, delay: Option<Duration>, error: String) {
        self.stats.failures += 1;
        let deliveries = self.leases.get(id).expect("held").delivery_count;
        if deliveries >= self.cfg.max_deliveries {
            let reason = DeadLetterReason::MaxDeliveries {
                deliveries,
                last_error: error,
            };
            self.settle(id, Settle::DeadLetter(Box::new(reason)));
        } else {
            let delay = delay.unwrap_or_else(|| self.backoff(deliveries));
            let lease = self.leases.get(id).expect("held");
            self.effects.push_back(Effect::Failed {
                stream: lease.stream,
                lease_ref: lease.lease_ref(),
                delivery_count: deliveries,
                error,
                retry_in: delay,
            });
            self.settle(id, Settle::Release(delay));
        }
    }

    fn backoff(&mut self, deliveries: u32) -> Duration {
        let retry = &self.cfg.retry;
        let exponent = deliveries.saturating_sub(1).min(1024) as i32;
        let max = retry.max.as_secs_f64();
        let secs = retry.initial.as_secs_f64() * retry.multiplier.powi(exponent);
        let secs = if secs.is_finite() { secs.min(max) } else { max };
        let jittered = secs * (1.0 - retry.jitter * self.rng.next_f64());
        Duration::from_secs_f64(jittered.clamp(0.0, max))
    }

    /// Settles a held lease with `op`: keeps what the operation carries and sends it.
    #[inline(always)]
    pub(super) fn settle(&mut self, id: LeaseId, op: Settle) {
        let op = match op {
            Settle::Ack => Op::Ack,
            Settle::Release(delay) => {
                self.extras.insert(id.slot, Extra::Release(delay));
                Op::Release
            }
            Settle::DeadLetter(reason) => {
                self.extras.insert(id.slot, Extra::DeadLetter(reason));
                Op::DeadLetter
            }
        };
        self.send_settle(id, op);
    }

    /// Sends (or re-sends) the settle operation `op` for a held lease. Acks are queued per
    /// stream and sent as one batch when effects are polled, one batch in flight per stream.
    #[inline(always)]
    pub(super) fn send_settle(&mut self, id: LeaseId, op: Op) {
        match op {
            Op::Ack => {
                // Sent when the batch goes out (which stamps `sent_seq`); until then it belongs
                // to no batch.
                let lease = self.leases.get_mut(id).expect("held");
                lease.sent_seq = 0;
                let stream = lease.stream;
                let pacing = &mut self.streams[usize::from(stream.0)];
                pacing.acks.push(id);
                self.ack_due |= pacing.acking.is_none();
            }
            Op::Release | Op::DeadLetter => {
                let sent_seq = self.next_seq();
                self.leases.get_mut(id).expect("held").sent_seq = sent_seq;
                let effect = self.settle_effect(id, op);
                self.effects.push_back(effect);
            }
        }
        self.set_state(
            id,
            State::Settling {
                op,
                in_flight: true,
            },
        );
    }

    /// Sends (or re-sends) a late ack: like an ack, it goes out with its stream's next batch.
    pub(super) fn send_late(&mut self, id: LeaseId) {
        let lease = self.leases.get_mut(id).expect("late");
        let orphan = matches!(
            lease.state,
            State::Late { orphan: true, .. } | State::Orphaned
        );
        lease.sent_seq = 0;
        let stream = lease.stream;
        let pacing = &mut self.streams[usize::from(stream.0)];
        pacing.acks.push(id);
        self.ack_due |= pacing.acking.is_none();
        self.set_state(
            id,
            State::Late {
                in_flight: true,
                orphan,
            },
        );
    }

    /// The `Release` or `DeadLetter` effect for a lease, from what it carries beside the slab.
    #[inline(never)]
    fn settle_effect(&self, id: LeaseId, op: Op) -> Effect<P> {
        let lease = self.leases.get(id).expect("held");
        let (stream, lease_ref) = (lease.stream, lease.lease_ref());
        match (op, self.extras.get(&id.slot)) {
            (Op::Release, Some(Extra::Release(delay))) => Effect::Release {
                stream,
                lease: id,
                lease_ref,
                delay: *delay,
            },
            (Op::DeadLetter, Some(Extra::DeadLetter(reason))) => Effect::DeadLetter {
                stream,
                lease: id,
                lease_ref,
                reason: (**reason).clone(),
            },
            (op, extra) => unreachable!("{op:?} without what it carries (found {extra:?})"),
        }
    }

    /// A release or dead-letter was answered (or its call failed).
    fn settle_answered(&mut self, id: LeaseId, result: Result<SettleResult, ErrorKind>, op: Op) {
        let sent = self.leases.get(id).is_some_and(|l| {
            l.state
                == State::Settling {
                    op,
                    in_flight: true,
                }
        });
        if !sent {
            return self.not_settling(id);
        }
        match result {
            Ok(result) => self.settled(id, result, op),
            Err(kind) => self.settle_failed(id, op, kind),
        }
    }

    /// An answer came for a lease that is not waiting for one: stale if the engine let the
    /// lease go meanwhile (it expired while the call was out), unexpected otherwise.
    fn not_settling(&mut self, id: LeaseId) {
        if self.leases.get(id).is_none() && self.leases.was_issued(id) {
            self.stats.stale += 1;
        } else {
            self.stats.unexpected += 1;
        }
    }

    /// The settle call for `id` failed: retried after a transient error; given up after a
    /// fatal one, which also stops the stream's intake.
    fn settle_failed(&mut self, id: LeaseId, op: Op, kind: ErrorKind) {
        match kind {
            ErrorKind::Transient => self.settled(id, SettleResult::Failed, op),
            ErrorKind::Fatal => {
                let stream = self.leases.get(id).expect("settling").stream;
                self.stats.abandoned += 1;
                if op == Op::Ack {
                    self.stats.abandoned_acks += 1;
                }
                self.remove(id);
                self.halt(stream);
            }
        }
    }

    /// The backend answered the settle operation `op` for `id`, which is in flight.
    fn settled(&mut self, id: LeaseId, result: SettleResult, op: Op) {
        let lease = self.leases.get(id).expect("settling");
        if let State::Late { .. } = lease.state {
            return self.late_settled(id, result);
        }
        let refenced = lease.fence_seq > lease.sent_seq;
        let epoch = lease.epoch;
        match result {
            SettleResult::Ok => {
                match op {
                    Op::Ack => self.stats.acked += 1,
                    Op::Release => self.stats.released += 1,
                    Op::DeadLetter => self.stats.dead_lettered += 1,
                }
                self.remove(id);
            }
            // Sent with a fence that was replaced meanwhile: try again with the new one, unless
            // the lease lapsed meanwhile (the expiry that follows this answer drops it).
            SettleResult::Lost
                if refenced && self.valid_until_tick(id).is_some_and(|t| t > self.now) =>
            {
                self.stats.stale += 1;
                self.send_settle(id, op)
            }
            SettleResult::Lost if refenced => {
                self.stats.stale += 1;
                self.set_state(
                    id,
                    State::Settling {
                        op,
                        in_flight: false,
                    },
                )
            }
            SettleResult::Lost => {
                self.stats.lost += 1;
                self.report_loss(id, LossReason::LostAtSettle);
                self.remove(id);
            }
            SettleResult::Failed if self.shutdown.is_some_and(|s| s.deadline_at <= self.now) => {
                self.stats.abandoned += 1;
                if op == Op::Ack {
                    self.stats.abandoned_acks += 1;
                }
                self.remove(id);
            }
            SettleResult::Failed => {
                let renewable_due = self
                    .epochs
                    .sent_at(epoch)
                    .saturating_add(self.durations.heartbeat);
                self.set_state(
                    id,
                    State::Settling {
                        op,
                        in_flight: false,
                    },
                );
                self.renew_by(renewable_due);
            }
        }
    }

    /// The backend answered the late ack of `id`, which is in flight.
    fn late_settled(&mut self, id: LeaseId, result: SettleResult) {
        let orphan = self
            .leases
            .get(id)
            .is_some_and(|l| matches!(l.state, State::Late { orphan: true, .. }));
        match result {
            // The work is done and stays done.
            SettleResult::Ok => {
                self.stats.acked += 1;
                self.stats.acked_late += 1;
                if orphan {
                    self.stats.acked_after_expiry += 1;
                }
                self.remove(id);
            }
            // Taken over: the message is someone else's now, and its result is discarded. An
            // orphan's lease was reported expired already.
            SettleResult::Lost if orphan => self.remove(id),
            SettleResult::Lost => {
                self.stats.lost += 1;
                self.report_loss(id, LossReason::LostAtSettle);
                self.remove(id);
            }
            SettleResult::Failed if self.shutdown.is_some_and(|s| s.deadline_at <= self.now) => {
                self.stats.abandoned += 1;
                self.stats.abandoned_acks += 1;
                self.remove(id);
            }
            SettleResult::Failed => self.set_state(
                id,
                State::Late {
                    in_flight: false,
                    orphan,
                },
            ),
        }
    }

    /// A late ack's message was delivered again: the late ack is given up as taken over (an
    /// answer still to come for it is stale). An orphan's lease was reported expired already.
    pub(super) fn late_superseded(&mut self, id: LeaseId) {
        let orphan = self
            .leases
            .get(id)
            .is_some_and(|l| matches!(l.state, State::Late { orphan: true, .. }));
        if !orphan {
            self.stats.lost += 1;
            self.report_loss(id, LossReason::TakenOver);
        }
        self.remove(id);
    }

    /// Whether `id` is a lease of the ack batch sent at `seq` still waiting for its answer.
    fn in_ack(&self, id: LeaseId, seq: u64) -> bool {
        self.leases
            .get(id)
            .is_some_and(|l| l.sent_seq == seq && l.state.is_acking())
    }

    /// The stream's ack batch `batch`, no longer in flight; `failed` if the call failed as a
    /// whole (late acks back off while that keeps happening).
    fn take_ack(&mut self, batch: AckId, failed: bool) -> Option<AckInFlight> {
        let stream = self.streams.iter_mut().find(|s| {
            s.acking
                .as_ref()
                .is_some_and(|acking| acking.batch == batch.0)
        })?;
        stream.ack_failures = if failed {
            stream.ack_failures.saturating_add(1)
        } else {
            0
        };
        let acked = stream.acking.take();
        self.ack_due |= !stream.acks.is_empty();
        acked
    }

    /// The acks collected since the last poll, as one batch per stream that has none in
    /// flight.
    pub(super) fn ack_batches(&mut self) {
        for i in 0..self.streams.len() {
            let pacing = &self.streams[i];
            if pacing.acking.is_some() || pacing.acks.is_empty() {
                continue;
            }
            // A lease dropped after its Done (lost, or expired past the cap of late acks) is not
            // acked. The collecting vector keeps its capacity; the effect gets vectors of its own.
            let seq = self.next_seq();
            let mut due = std::mem::take(&mut self.streams[i].acks);
            let mut leases = Vec::with_capacity(due.len());
            let mut lease_refs = Vec::with_capacity(due.len());
            for &id in &due {
                match self.leases.get_mut(id) {
                    Some(lease) if lease.state.is_acking() && lease.sent_seq != seq => {
                        lease.sent_seq = seq;
                        leases.push(id);
                        lease_refs.push(lease.lease_ref());
                    }
                    _ => {}
                }
            }
            due.clear();
            self.streams[i].acks = due;
            if leases.is_empty() {
                continue;
            }
            let batch = self.next_ack_id;
            self.next_ack_id += 1;
            self.streams[i].acking = Some(AckInFlight {
                batch,
                seq,
                leases: leases.clone(),
            });
            self.effects.push_back(Effect::Ack {
                batch: AckId(batch),
                stream: StreamId(i as u16),
                leases,
                lease_refs,
            });
        }
    }

    /// The lease is no longer ours (lost or expired): never act on it again. A running
    /// invocation is cancelled and keeps its slot as an orphan until it reports.
    ///
    /// Except a lease that expired after its handler returned `Done`, before the backend
    /// confirmed the ack: it becomes a late ack, no longer held, whose fenced ack is retried
    /// until the backend answers (a redelivery of its message ends it as a takeover). At most
    /// `max_leases` late acks are kept (the most leases the engine ever holds, so memory stays
    /// within twice the lease budget however long the backend is away); past that, a lease
    /// expiring after its `Done` is let go of as before, and its message runs again after the
    /// claim timeout. An invocation still running when its lease expires may become one too,
    /// if it returns `Done` within the cancel grace (see [`Self::handle_outcome`]).
    pub(super) fn drop_lease(&mut self, id: LeaseId, reason: CancelReason) {
        let Some(lease) = self.leases.get(id) else {
            return;
        };
        if !lease.state.is_held() {
            return;
        }
        // A `Done` whose ack the backend has not confirmed yet keeps it, fenced: expired
        // locally (the backend did not answer), nobody is known to have taken it over.
        if let (
            CancelReason::LeaseExpired,
            State::Settling {
                op: Op::Ack,
                in_flight,
            },
        ) = (reason, lease.state)
        {
            if self.late < self.cfg.max_leases {
                return self.set_state(
                    id,
                    State::Late {
                        in_flight,
                        orphan: false,
                    },
                );
            }
        }
        let loss = match reason {
            CancelReason::LeaseExpired => {
                self.stats.expired += 1;
                LossReason::Expired
            }
            _ => {
                self.stats.lost += 1;
                LossReason::TakenOver
            }
        };
        let (state, key) = (lease.state, (lease.stream, lease.id.clone()));
        // Until when a `Done` of an invocation cancelled here may still be acked, fenced: the
        // cancel grace after the local expiry, and no later than the invocation's own limit.
        // Only for an expiry: a loss means someone else holds the message.
        let ack_until = match (reason, state) {
            (CancelReason::LeaseExpired, State::Running { cancelled: None }) => self
                .confirmation_deadline(lease.epoch)
                .saturating_add(ticks(self.cfg.cancel_grace))
                .min(
                    lease
                        .sent_seq
                        .saturating_add(self.durations.max_processing_time),
                ),
            _ => 0,
        };
        self.report_loss(id, loss);
        if let State::Running { cancelled } = state {
            if cancelled.is_none() {
                self.cancel(id, reason);
            }
            self.leases.unindex(id);
            self.orphans.insert(key, id);
            self.set_state(id, State::Orphaned);
            self.leases.get_mut(id).expect("orphaned").sent_seq = ack_until;
        } else {
            self.remove(id);
        }
    }

    /// Tells the driver a held lease is being let go of, with the validity it had left.
    fn report_loss(&mut self, id: LeaseId, reason: LossReason) {
        let margin = self.valid_until_tick(id).map_or(Duration::ZERO, |t| {
            Duration::from_nanos(t.saturating_sub(self.now))
        });
        if let Some(lease) = self.leases.get(id) {
            self.effects.push_back(Effect::Lost {
                stream: lease.stream,
                lease_ref: lease.lease_ref(),
                reason,
                margin,
            });
        }
    }

    /// Whether the orphan `id`, whose invocation returned `Done`, is acked late: its lease
    /// expired (was not lost) while it ran, the `Done` came within the cancel grace and the
    /// invocation's time limit, its message was not delivered here again meanwhile (that
    /// delivery would be a takeover, and the ack's fence stale), and fewer than `max_leases`
    /// late acks are pending.
    fn may_ack_orphan(&self, id: LeaseId) -> bool {
        let Some(lease) = self.leases.get(id) else {
            return false;
        };
        self.now < lease.sent_seq
            && self.late < self.cfg.max_leases
            && !matches!(self.extras.get(&id.slot), Some(Extra::Successor(_)))
            && self
                .leases
                .find(
                    self.leases.hash(lease.stream, &lease.id),
                    lease.stream,
                    &lease.id,
                )
                .is_none()
    }

    /// The orphan `id` returned `Done` in time (see [`Self::may_ack_orphan`]): its slot is
    /// freed and its fenced ack sent as a late ack, found again by its message (a redelivery
    /// ends it as a takeover).
    fn ack_orphan(&mut self, id: LeaseId) {
        let lease = self.leases.get(id).expect("orphaned");
        let key = (lease.stream, lease.id.clone());
        if self.orphans.get(&key) == Some(&id) {
            self.orphans.remove(&key);
        }
        self.extras.remove(&id.slot);
        self.leases.reindex(id);
        self.send_late(id);
    }

    /// A cancelled invocation of a lost lease reported: free its slot, unblock its successor.
    fn end_orphan(&mut self, id: LeaseId) {
        if let Some(lease) = self.leases.get(id) {
            let key = (lease.stream, lease.id.clone());
            if self.orphans.get(&key) == Some(&id) {
                self.orphans.remove(&key);
            }
        }
        let successor = match self.extras.get(&id.slot) {
            Some(Extra::Successor(successor)) => Some(*successor),
            _ => None,
        };
        self.remove(id);
        let blocked = successor.filter(|s| {
            self.leases
                .get(*s)
                .is_some_and(|l| l.state == State::Blocked)
        });
        if let Some(next) = blocked {
            if self.shutdown.is_some() {
                self.settle(next, Settle::Release(Duration::ZERO));
            } else {
                self.set_state(next, State::Ready);
            }
        }
    }
}
