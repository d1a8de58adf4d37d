//! Checking each effect as it is drained, against the reference model.

use std::collections::HashMap;
use std::time::Duration;

use leasehold_core::{DeadLetterReason, Effect, InvocationId, LeaseEngine, LeaseId, RenewId};

use crate::model::{backoff_range, Carry, Chunk, End, MState, Model, Op, Round, Tag};
use crate::violation::{Problem, Rule};

/// Collects problems found while checking one input.
pub(crate) type Problems = Vec<Problem>;

pub(crate) fn problem(out: &mut Problems, rule: Rule, detail: String) {
    out.push(Problem { rule, detail });
}

impl Model {
    /// Checks one effect the engine emitted (or one injected by a test) and records it.
    pub(crate) fn observe(
        &mut self,
        effect: &Effect,
        engine: &LeaseEngine<Tag>,
        out: &mut Problems,
    ) {
        if self.drained {
            problem(
                out,
                Rule::Drain,
                format!("{effect:?} emitted after Drained"),
            );
        }
        match effect {
            Effect::Fetch { stream, max, .. } => self.on_fetch(usize::from(stream.0), *max, out),
            Effect::Run { invocation, lease } => self.on_run(*invocation, *lease, engine, out),
            Effect::Cancel { invocation, reason } => {
                // Looked up by invocation: it may have reported within this same input.
                let expected = self
                    .leases
                    .values_mut()
                    .find(|l| l.must_cancel.is_some_and(|(inv, _)| inv == *invocation));
                match expected {
                    Some(lease) if lease.must_cancel.is_some_and(|(_, r)| r == *reason) => {
                        lease.must_cancel = None;
                    }
                    other => {
                        let expected = other.and_then(|l| l.must_cancel);
                        problem(
                            out,
                            Rule::Model,
                            format!(
                                "Cancel {{ {invocation:?}, {reason:?} }} not expected (model \
                                 expects {expected:?}; running: {})",
                                self.runs.contains_key(invocation)
                            ),
                        );
                    }
                }
            }
            Effect::Renew { batch, leases } => self.on_renew(*batch, leases, engine, out),
            Effect::Ack { leases } => {
                self.acks_this_input += 1;
                if self.acks_this_input > 1 {
                    problem(
                        out,
                        Rule::Model,
                        "two Ack effects for one input (acks are batched)".into(),
                    );
                }
                if leases.is_empty() {
                    problem(out, Rule::Model, "empty Ack".into());
                }
                for id in leases {
                    self.on_settle(Op::Ack, *id, None, engine, out);
                }
                self.acks.push(leases.clone());
            }
            Effect::Release { lease, delay } => {
                self.on_settle(
                    Op::Release,
                    *lease,
                    Some(&Settle::Delay(*delay)),
                    engine,
                    out,
                );
                self.releases.push(*lease);
            }
            Effect::DeadLetter { lease, reason } => {
                self.on_settle(
                    Op::DeadLetter,
                    *lease,
                    Some(&Settle::Reason(reason)),
                    engine,
                    out,
                );
                self.dead_letters.push(*lease);
            }
            Effect::Drained => {
                if self.shutdown.is_none() {
                    problem(out, Rule::Drain, "Drained before shutdown".into());
                }
                if self.drained {
                    problem(out, Rule::Drain, "Drained twice".into());
                }
                let (held, running, reserved) = (self.held(), self.runs.len(), self.reserved());
                if held + running > 0 || self.fetches.iter().any(Option::is_some) {
                    problem(
                        out,
                        Rule::Drain,
                        format!(
                            "Drained while {held} leases held, {running} invocations running, \
                             {reserved} slots fetching"
                        ),
                    );
                }
                self.drained = true;
            }
        }
    }

    /// Ties an effect's lease id to the delivery that created it (the payload tag).
    fn bind(&mut self, id: LeaseId, engine: &LeaseEngine<Tag>, out: &mut Problems) -> Option<Tag> {
        if let Some(&tag) = self.by_id.get(&id) {
            return Some(tag);
        }
        let Some(lease) = engine.lease(id) else {
            problem(
                out,
                Rule::Model,
                format!("effect names {id:?}, which the engine does not know"),
            );
            return None;
        };
        let tag = *lease.payload();
        match self.leases.get_mut(&tag) {
            None => problem(
                out,
                Rule::Model,
                format!("{id:?} carries delivery {tag}, which created no lease in the model"),
            ),
            Some(model) if model.id.is_some() => problem(
                out,
                Rule::Model,
                format!(
                    "delivery {tag} has two lease ids: {:?} and {id:?}",
                    model.id
                ),
            ),
            Some(model) => {
                if model.stream != lease.stream() || model.msg != *lease.message_id() {
                    problem(
                        out,
                        Rule::Model,
                        format!(
                            "{id:?} is message {:?}/{} in the engine, {:?}/{} in the model",
                            lease.stream(),
                            lease.message_id(),
                            model.stream,
                            model.msg
                        ),
                    );
                }
                model.id = Some(id);
                self.by_id.insert(id, tag);
                return Some(tag);
            }
        }
        None
    }

    fn on_fetch(&mut self, stream: usize, max: usize, out: &mut Problems) {
        if self.shutdown.is_some() {
            problem(
                out,
                Rule::Model,
                format!("Fetch from stream {stream} after shutdown"),
            );
        }
        if max == 0 {
            problem(
                out,
                Rule::Model,
                format!("Fetch of 0 messages from stream {stream}"),
            );
        }
        let Some(slot) = self.fetches.get_mut(stream) else {
            problem(
                out,
                Rule::Model,
                format!("Fetch from unknown stream {stream}"),
            );
            return;
        };
        if slot.is_some() {
            problem(
                out,
                Rule::Model,
                format!("second Fetch outstanding for stream {stream}"),
            );
        }
        *slot = Some((max, self.now));
        if max > self.cfg.fetch_batch_size {
            problem(
                out,
                Rule::Capacity,
                format!(
                    "Fetch {{ stream {stream}, max {max} }} above fetch_batch_size {}",
                    self.cfg.fetch_batch_size
                ),
            );
        }
        let (running, reserved) = (self.runs.len(), self.reserved());
        if running + reserved > self.capacity() {
            problem(
                out,
                Rule::Capacity,
                format!(
                    "Fetch {{ stream {stream}, max {max} }} while {running} run and fetches \
                     reserve {reserved} slots of {} (concurrency {} + prefetch {})",
                    self.capacity(),
                    self.cfg.concurrency,
                    self.cfg.prefetch
                ),
            );
        }
    }

    fn on_run(
        &mut self,
        inv: InvocationId,
        id: LeaseId,
        engine: &LeaseEngine<Tag>,
        out: &mut Problems,
    ) {
        let Some(tag) = self.bind(id, engine, out) else {
            return;
        };
        if inv.lease() != id {
            problem(out, Rule::Model, format!("Run {inv:?} names lease {id:?}"));
        }
        if !self.seen_runs.insert(inv) {
            problem(
                out,
                Rule::Model,
                format!("invocation id {inv:?} used twice"),
            );
        }
        if self.shutdown.is_some() {
            problem(out, Rule::Model, format!("Run {inv:?} after shutdown"));
        }
        let (stream, msg) = (self.leases[&tag].stream, self.leases[&tag].msg.clone());
        if let Some((other, _)) = self
            .runs
            .iter()
            .find(|(_, t)| self.leases[t].stream == stream && self.leases[t].msg == msg)
        {
            problem(
                out,
                Rule::Serial,
                format!("Run {inv:?} of {stream:?}/{msg} while {other:?} of it still runs"),
            );
        }
        let lease = self.leases.get_mut(&tag).expect("bound");
        lease.runs += 1;
        match &lease.state {
            MState::Taken | MState::Ready => {}
            MState::Waiting { earliest, .. } if *earliest <= self.now => {}
            MState::Gone(End::Lost | End::Expired) | MState::Orphan { .. } => problem(
                out,
                Rule::Expiry,
                format!("Run {inv:?} for {stream:?}/{msg}, whose lease was lost or expired"),
            ),
            other => problem(
                out,
                Rule::Model,
                format!("Run {inv:?} for {stream:?}/{msg} in state {other:?}"),
            ),
        }
        lease.state = MState::Running {
            inv,
            started: self.now,
            cancelled: None,
        };
        self.runs.insert(inv, tag);
        if self.runs.len() > self.cfg.concurrency {
            problem(
                out,
                Rule::Capacity,
                format!(
                    "{} invocations running, concurrency {}",
                    self.runs.len(),
                    self.cfg.concurrency
                ),
            );
        }
    }

    fn on_renew(
        &mut self,
        batch: RenewId,
        ids: &[LeaseId],
        engine: &LeaseEngine<Tag>,
        out: &mut Problems,
    ) {
        let input = self.input;
        if let Some(round) = &self.round {
            if round.step != input {
                problem(
                    out,
                    Rule::Model,
                    format!("Renew {batch:?} while a heartbeat round is still outstanding"),
                );
            }
        }
        if self.round.as_ref().is_none_or(|r| r.step != input) {
            self.round = Some(Round {
                step: input,
                sent_at: self.now,
                chunks: Vec::new(),
                gens: HashMap::new(),
            });
        }
        if !self.seen_batches.insert(batch) {
            problem(
                out,
                Rule::Model,
                format!("renew batch id {batch:?} used twice"),
            );
        }
        if ids.is_empty() || ids.len() > self.cfg.renew_batch_size {
            problem(
                out,
                Rule::Model,
                format!(
                    "Renew chunk of {} leases, batch size {}",
                    ids.len(),
                    self.cfg.renew_batch_size
                ),
            );
        }
        let now = self.now;
        for &id in ids {
            let Some(tag) = self.bind(id, engine, out) else {
                continue;
            };
            let lease = self.leases.get_mut(&tag).expect("bound");
            if !lease.state.is_held() {
                problem(
                    out,
                    Rule::Expiry,
                    format!(
                        "Renew names {:?}/{} which is no longer held ({:?})",
                        lease.stream, lease.msg, lease.state
                    ),
                );
            } else if !lease.state.is_renewable() {
                problem(
                    out,
                    Rule::Model,
                    format!(
                        "Renew names {:?}/{} whose release is in flight ({:?})",
                        lease.stream, lease.msg, lease.state
                    ),
                );
            }
            lease.baseline = now;
            let round = self.round.as_mut().expect("opened above");
            if round.gens.insert(tag, lease.gen).is_some() {
                problem(
                    out,
                    Rule::Model,
                    format!("{id:?} twice in one heartbeat round"),
                );
            }
        }
        let round = self.round.as_mut().expect("opened above");
        round.chunks.push(Chunk {
            batch,
            leases: ids.to_vec(),
            answered: false,
        });
    }

    fn on_settle(
        &mut self,
        op: Op,
        id: LeaseId,
        carried: Option<&Settle<'_>>,
        engine: &LeaseEngine<Tag>,
        out: &mut Problems,
    ) {
        let Some(tag) = self.bind(id, engine, out) else {
            return;
        };
        let (now, ttl, retry) = (self.now, self.ttl(), self.cfg.retry.clone());
        let lease = self.leases.get_mut(&tag).expect("bound");
        let what = format!("{op:?} of {:?}/{} ({id:?})", lease.stream, lease.msg);
        if !lease.state.is_held() {
            let rule = match (op, &lease.state) {
                (Op::Ack, _) => Rule::AckAfterDone,
                (_, MState::Gone(End::Lost | End::Expired) | MState::Orphan { .. }) => Rule::Expiry,
                _ => Rule::Model,
            };
            problem(
                out,
                rule,
                format!("{what} for a lease no longer held ({:?})", lease.state),
            );
            return;
        }
        if op == Op::Ack && lease.confirmed + ttl <= now {
            problem(
                out,
                Rule::AckAfterDone,
                format!("{what} for a lease expired locally"),
            );
        }
        match &mut lease.state {
            MState::Settling {
                op: decided,
                carry,
                must_send: must_send @ true,
                ..
            } if *decided == op => {
                *must_send = false;
                check_carry(carry, carried, &retry, &what, out);
            }
            state => {
                let rule = if op == Op::Ack {
                    Rule::AckAfterDone
                } else {
                    Rule::Model
                };
                problem(
                    out,
                    rule,
                    format!("{what} not expected: lease is {state:?}"),
                );
            }
        }
    }
}

/// What a release or dead-letter effect carried.
pub(crate) enum Settle<'a> {
    Delay(Duration),
    Reason(&'a DeadLetterReason),
}

fn check_carry(
    carry: &Carry,
    carried: Option<&Settle<'_>>,
    retry: &leasehold_core::RetryPolicy,
    what: &str,
    out: &mut Problems,
) {
    let ok = match (carry, carried) {
        (Carry::Nothing, None) => true,
        (Carry::Delay(expected), Some(Settle::Delay(delay))) => expected == delay,
        (Carry::Backoff { deliveries }, Some(Settle::Delay(delay))) => {
            let (lo, hi) = backoff_range(retry, *deliveries);
            (lo..=hi).contains(&delay.as_secs_f64())
        }
        (Carry::Reason(expected), Some(Settle::Reason(reason))) => expected == *reason,
        _ => false,
    };
    if !ok {
        let carried = match carried {
            None => "nothing".to_string(),
            Some(Settle::Delay(d)) => format!("delay {d:?}"),
            Some(Settle::Reason(r)) => format!("reason {r}"),
        };
        problem(
            out,
            Rule::Model,
            format!("{what} carries {carried}, model expects {carry:?}"),
        );
    }
}
