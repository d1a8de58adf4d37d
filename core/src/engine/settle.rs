//! Runs and how they end: outcomes, acks, releases and dead letters (and their results), leases
//! lost or expired (orphaned invocations), and shutdown.

use std::time::{Duration, Instant};

use super::{Extra, LeaseEngine, Shutdown};
use crate::effect::Effect;
use crate::lease::{Op, State};
use crate::types::{CancelReason, DeadLetterReason, InvocationId, LeaseId, Outcome, SettleResult};

/// How a lease is settled, with what the operation carries.
#[derive(Debug)]
pub(super) enum Settle {
    Ack,
    Release(Duration),
    DeadLetter(Box<DeadLetterReason>),
}

impl<P> LeaseEngine<P> {
    /// An invocation finished with `outcome`. Outcomes of cancelled invocations, or of leases
    /// lost meanwhile, are discarded (the slot is freed); unknown invocations are ignored.
    pub fn handle_outcome(&mut self, now: Instant, invocation: InvocationId, outcome: Outcome) {
        self.begin(now);
        let id = invocation.lease;
        let state = match self.leases.get(id) {
            Some(lease) if lease.attempt == invocation.attempt && lease.state.is_running() => {
                lease.state
            }
            _ => return self.finish(),
        };
        match state {
            State::Orphaned => self.end_orphan(id),
            State::Running {
                cancelled: Some(CancelReason::MaxProcessingTime),
            } => self.fail(id, None, "max processing time exceeded".into()),
            State::Running { cancelled: Some(_) } => {
                self.settle(id, Settle::Release(Duration::ZERO))
            }
            State::Running { cancelled: None } => match outcome {
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
            },
            _ => unreachable!("is_running covers Running and Orphaned"),
        }
        self.finish();
    }

    /// Results of an `Ack` effect, one per lease.
    pub fn handle_acked(
        &mut self,
        now: Instant,
        results: impl IntoIterator<Item = (LeaseId, SettleResult)>,
    ) {
        // Answers are about sends already made: apply them before timers re-send anything.
        self.set_now(now);
        for (id, result) in results {
            self.settled(id, result, Op::Ack);
        }
        self.begin_now();
        self.finish();
    }

    /// Result of a `Release` effect.
    pub fn handle_released(&mut self, now: Instant, lease: LeaseId, result: SettleResult) {
        self.set_now(now);
        self.settled(lease, result, Op::Release);
        self.begin_now();
        self.finish();
    }

    /// Result of a `DeadLetter` effect.
    pub fn handle_dead_lettered(&mut self, now: Instant, lease: LeaseId, result: SettleResult) {
        self.set_now(now);
        self.settled(lease, result, Op::DeadLetter);
        self.begin_now();
        self.finish();
    }

    /// Begin shutdown: fetch nothing more; release waiting leases at once (delay 0); let running
    /// invocations finish until `deadline`, then cancel and release them. `Effect::Drained`
    /// follows once no lease is held. A second call can only bring the deadline forward.
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
                    )
                })
                .map(|(id, l)| (id, l.state))
                .collect();
            for (id, state) in waiting {
                match state {
                    State::Settling { op, .. } => self.send_settle(id, op),
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
        let run = lease.attempt;
        self.set_state(id, State::Running { cancelled: None });
        self.stats.invocations += 1;
        self.effects.push_back(Effect::Run {
            invocation: InvocationId {
                lease: id,
                attempt: run,
            },
            lease: id,
        });
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

    /// Sends (or re-sends) the settle operation `op` for a held lease. Acks are collected and
    /// sent as one batch when effects are polled.
    #[inline(always)]
    pub(super) fn send_settle(&mut self, id: LeaseId, op: Op) {
        let sent_seq = self.next_seq();
        match op {
            Op::Ack => self.acks.push(id),
            Op::Release | Op::DeadLetter => {
                let effect = self.settle_effect(id, op);
                self.effects.push_back(effect);
            }
        }
        self.leases.get_mut(id).expect("held").sent_seq = sent_seq;
        self.set_state(
            id,
            State::Settling {
                op,
                in_flight: true,
            },
        );
    }

    /// The `Release` or `DeadLetter` effect for a lease, from what it carries beside the slab.
    #[inline(never)]
    fn settle_effect(&self, id: LeaseId, op: Op) -> Effect {
        match (op, self.extras.get(&id.slot)) {
            (Op::Release, Some(Extra::Release(delay))) => Effect::Release {
                lease: id,
                delay: *delay,
            },
            (Op::DeadLetter, Some(Extra::DeadLetter(reason))) => Effect::DeadLetter {
                lease: id,
                reason: (**reason).clone(),
            },
            (op, extra) => unreachable!("{op:?} without what it carries (found {extra:?})"),
        }
    }

    /// The backend answered a settle operation `expected` for `id`.
    fn settled(&mut self, id: LeaseId, result: SettleResult, expected: Op) {
        let Some(lease) = self.leases.get(id) else {
            return;
        };
        let State::Settling {
            op,
            in_flight: true,
        } = lease.state
        else {
            return;
        };
        if op != expected {
            return;
        }
        let refenced = lease.fence_seq > lease.sent_seq;
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
                self.send_settle(id, op)
            }
            SettleResult::Lost if refenced => self.set_state(
                id,
                State::Settling {
                    op,
                    in_flight: false,
                },
            ),
            SettleResult::Lost => {
                self.stats.lost += 1;
                self.remove(id);
            }
            SettleResult::Failed if self.shutdown.is_some_and(|s| s.deadline_at <= self.now) => {
                self.stats.abandoned += 1;
                self.remove(id);
            }
            SettleResult::Failed => {
                let renewable_due = self
                    .epochs
                    .sent_at(lease.epoch)
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

    /// The acks collected since the last poll, as one batch.
    pub(super) fn ack_batch(&mut self) -> Option<Effect> {
        if self.acks.is_empty() {
            return None;
        }
        // A lease dropped after its Done (lost, expired) is not acked. The collecting vector
        // keeps its capacity; the effect gets a vector of its own.
        let leases = &self.leases;
        let still_acking = |id: &LeaseId| {
            leases.get(*id).is_some_and(|l| {
                l.state
                    == State::Settling {
                        op: Op::Ack,
                        in_flight: true,
                    }
            })
        };
        let mut batch = Vec::with_capacity(self.acks.len());
        for id in &self.acks {
            if still_acking(id) {
                batch.push(*id);
            }
        }
        self.acks.clear();
        (!batch.is_empty()).then_some(Effect::Ack { leases: batch })
    }

    /// The lease is no longer ours (lost or expired): never act on it again. A running
    /// invocation is cancelled and keeps its slot as an orphan until it reports.
    pub(super) fn drop_lease(&mut self, id: LeaseId, reason: CancelReason) {
        let Some(lease) = self.leases.get(id) else {
            return;
        };
        if !lease.state.is_held() {
            return;
        }
        match reason {
            CancelReason::LeaseExpired => self.stats.expired += 1,
            _ => self.stats.lost += 1,
        }
        if let State::Running { cancelled } = lease.state {
            let key = (lease.stream, lease.id.clone());
            if cancelled.is_none() {
                self.cancel(id, reason);
            }
            self.leases.unindex(id);
            self.orphans.insert(key, id);
            self.set_state(id, State::Orphaned);
        } else {
            self.remove(id);
        }
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
