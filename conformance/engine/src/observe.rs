//! Checking each effect as it is drained, against what the reference model decided.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use leasehold_core::{
    AckId, CancelReason, DeadLetterReason, Effect, Invocation, InvocationId, LeaseEngine, LeaseId,
    LeaseRef, RenewId, StreamId,
};

use crate::model::{AckOut, Carry, Chunk, End, Expect, FetchOut, MState, Model, Op, Tag};
use crate::violation::{Problem, Rule};

/// Collects problems found while checking one input.
pub(crate) type Problems = Vec<Problem>;

pub(crate) fn problem(out: &mut Problems, rule: Rule, detail: String) {
    out.push(Problem { rule, detail });
}

/// What a release or dead-letter effect carried.
pub(crate) enum Settle<'a> {
    Delay(Duration),
    Reason(&'a DeadLetterReason),
}

impl Model {
    /// Checks one effect the engine emitted (or one injected by a test) and records it.
    pub(crate) fn observe(
        &mut self,
        effect: &Effect<Tag>,
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
            Effect::Fetch { stream, max, wait } => self.on_fetch(*stream, *max, *wait, out),
            Effect::Run(invocation) => self.on_run(invocation, out),
            Effect::Cancel { invocation, reason } => self.on_cancel(*invocation, *reason, out),
            Effect::LeaseValid { invocation, until } => self.on_valid(*invocation, *until, out),
            Effect::Renew {
                batch,
                stream,
                leases,
                lease_refs,
            } => self.on_renew(*batch, *stream, leases, lease_refs, engine, out),
            Effect::Ack {
                batch,
                stream,
                leases,
                lease_refs,
            } => self.on_ack(*batch, *stream, leases, lease_refs, engine, out),
            Effect::Release {
                stream,
                lease,
                lease_ref,
                delay,
            } => {
                let carried = Settle::Delay(*delay);
                self.on_settle(
                    Op::Release,
                    *stream,
                    *lease,
                    lease_ref,
                    &carried,
                    engine,
                    out,
                );
                self.releases.push(*lease);
            }
            Effect::DeadLetter {
                stream,
                lease,
                lease_ref,
                reason,
            } => {
                let carried = Settle::Reason(reason);
                self.on_settle(
                    Op::DeadLetter,
                    *stream,
                    *lease,
                    lease_ref,
                    &carried,
                    engine,
                    out,
                );
                self.dead_letters.push(*lease);
            }
            Effect::Lost {
                stream,
                lease_ref,
                reason,
                margin,
            } => {
                let notice = Expect::Lost {
                    stream: *stream,
                    msg: lease_ref.id.clone(),
                    fence: lease_ref.fence,
                    reason: *reason,
                    margin: *margin,
                };
                self.on_notice(notice, out);
            }
            Effect::Failed {
                stream,
                lease_ref,
                delivery_count,
                error,
                retry_in,
            } => {
                let notice = Expect::Failed {
                    stream: *stream,
                    msg: lease_ref.id.clone(),
                    fence: lease_ref.fence,
                    delivery_count: *delivery_count,
                    error: error.clone(),
                    retry_in: *retry_in,
                };
                self.on_notice(notice, out);
            }
            Effect::Halt { stream } => self.on_halt(*stream, out),
            Effect::Drained => self.on_drained(out),
        }
    }

    /// The delivery a lease id stands for: known from an earlier effect, or learnt from the
    /// engine (the lease's payload tag) the first time it is named.
    pub(crate) fn bind(
        &mut self,
        id: LeaseId,
        engine: &LeaseEngine<Tag>,
        out: &mut Problems,
    ) -> Option<Tag> {
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
                model.id = Some(id);
                self.by_id.insert(id, tag);
                return Some(tag);
            }
        }
        None
    }

    fn on_fetch(&mut self, stream: StreamId, max: usize, wait: Duration, out: &mut Problems) {
        let s = usize::from(stream.0);
        if self.shutdown.is_some() {
            problem(
                out,
                Rule::Model,
                format!("Fetch from stream {s} after shutdown"),
            );
        }
        if self.halted.get(s).copied().unwrap_or(false) {
            problem(
                out,
                Rule::Model,
                format!("Fetch from stream {s}, whose intake a fatal error halted"),
            );
        }
        if !self.assigned.get(s).copied().unwrap_or(true) {
            problem(
                out,
                Rule::Model,
                format!("Fetch from stream {s}, which is not assigned"),
            );
        }
        if max == 0 {
            problem(
                out,
                Rule::Model,
                format!("Fetch of 0 messages from stream {s}"),
            );
        }
        let seq = (self.input, 2 + self.fetches_polled);
        self.fetches_polled += 1;
        // Decided together, once every input was applied: the budget then is theirs to share.
        let budget = self.fetch_budget();
        let polled = self.polled.get_or_insert((budget, 0));
        polled.1 += max;
        // A fixed prefetch ignores it.
        self.observed_fresh = false;
        let now = self.now;
        let Some(slot) = self.fetches.get_mut(s) else {
            problem(out, Rule::Model, format!("Fetch from unknown stream {s}"));
            return;
        };
        if slot.is_some() {
            problem(
                out,
                Rule::Model,
                format!("second Fetch outstanding for stream {s}"),
            );
        }
        *slot = Some(FetchOut {
            max,
            sent_at: now,
            seq,
            wait,
        });
        // Its deliveries are leased from its send time: a backend that blocks the whole wait
        // and takes an entry at its end must hand it over within a heartbeat.
        if wait > self.cfg.max_fetch_wait() {
            problem(
                out,
                Rule::Expiry,
                format!(
                    "Fetch {{ stream {s}, max {max} }} may block {wait:?}, beyond \
                     heartbeat_interval {:?} (or poll_interval {:?}): a delivery taken at \
                     the end of the wait would arrive with its lease spent",
                    self.cfg.heartbeat_interval, self.cfg.poll_interval
                ),
            );
        }
        if max > self.cfg.fetch_batch_size {
            problem(
                out,
                Rule::Capacity,
                format!(
                    "Fetch {{ stream {s}, max {max} }} above fetch_batch_size {}",
                    self.cfg.fetch_batch_size
                ),
            );
        }
        let (running, reserved) = (self.running(), self.reserved());
        if running + reserved > self.capacity() {
            problem(
                out,
                Rule::Capacity,
                format!(
                    "Fetch {{ stream {s}, max {max} }} while {running} run and fetches \
                     reserve {reserved} slots of {} (concurrency {} + prefetch {})",
                    self.capacity(),
                    self.cfg.concurrency,
                    self.prefetch()
                ),
            );
        }
    }

    fn on_run(&mut self, invocation: &Invocation<Tag>, out: &mut Problems) {
        let (tag, inv) = (invocation.payload, invocation.id);
        let id = inv.lease();
        let Some(lease) = self.leases.get_mut(&tag) else {
            problem(
                out,
                Rule::Model,
                format!("Run {inv:?} carries delivery {tag}, which created no lease in the model"),
            );
            return;
        };
        match (self.by_id.get(&id), lease.id) {
            (Some(&bound), _) if bound != tag => problem(
                out,
                Rule::Model,
                format!("Run {inv:?} of delivery {tag}, but {id:?} is delivery {bound}"),
            ),
            (_, Some(other)) if other != id => problem(
                out,
                Rule::Model,
                format!("delivery {tag} has two lease ids: {other:?} and {id:?}"),
            ),
            _ => {
                lease.id = Some(id);
                self.by_id.insert(id, tag);
            }
        }
        let (stream, msg) = (lease.stream, lease.msg.clone());
        let what = format!("Run {inv:?} of {stream:?}/{msg} (delivery {tag})");
        if invocation.stream != stream || invocation.lease_ref.id != msg {
            problem(
                out,
                Rule::Model,
                format!(
                    "{what} names {:?}/{} instead",
                    invocation.stream, invocation.lease_ref.id
                ),
            );
        }
        let expected = self
            .expected
            .iter()
            .position(|e| matches!(e, Expect::Run { tag: t, .. } if *t == tag))
            .map(|i| self.expected.remove(i));
        match expected {
            Some(Expect::Run {
                attempt,
                fence,
                delivery_count,
                valid_until,
                ..
            }) => {
                let carried = (
                    invocation.attempt,
                    invocation.lease_ref.fence,
                    invocation.delivery_count,
                    invocation.valid_until,
                );
                if carried != (attempt, fence, delivery_count, valid_until) {
                    problem(
                        out,
                        Rule::Model,
                        format!(
                            "{what} carries attempt {}, {:?}, count {}, valid until {}; model \
                             expects attempt {attempt}, {fence:?}, count {delivery_count}, \
                             valid until {}",
                            invocation.attempt,
                            invocation.lease_ref.fence,
                            invocation.delivery_count,
                            self.at(invocation.valid_until),
                            self.at(valid_until)
                        ),
                    );
                }
            }
            _ => {
                let state = &self.leases[&tag].state;
                let serial = self
                    .leases
                    .values()
                    .any(|l| l.state.is_running() && l.stream == stream && l.msg == msg);
                let rule = if serial {
                    Rule::Serial
                } else if matches!(
                    state,
                    MState::Gone(End::Lost | End::Expired) | MState::Orphan { .. }
                ) {
                    Rule::Expiry
                } else if self.running() >= self.cfg.concurrency {
                    Rule::Capacity
                } else {
                    Rule::Model
                };
                problem(
                    out,
                    rule,
                    format!(
                        "{what} not expected (lease is {state:?}, {} of {} slots running)",
                        self.running(),
                        self.cfg.concurrency
                    ),
                );
            }
        }
        if self
            .invocations
            .insert(inv, (tag, invocation.attempt))
            .is_some()
        {
            problem(
                out,
                Rule::Model,
                format!("invocation id {inv:?} used twice"),
            );
        }
        self.unreported.insert(inv, tag);
    }

    fn on_cancel(&mut self, inv: InvocationId, reason: CancelReason, out: &mut Problems) {
        let Some(&(tag, attempt)) = self.invocations.get(&inv) else {
            problem(
                out,
                Rule::Model,
                format!("Cancel {{ {inv:?}, {reason:?} }} of an invocation never run"),
            );
            return;
        };
        let found = self.expected.iter().position(|e| {
            matches!(e, Expect::Cancel { tag: t, attempt: a, .. } if *t == tag && *a == attempt)
        });
        match found.map(|i| self.expected.remove(i)) {
            Some(Expect::Cancel {
                reason: expected, ..
            }) if expected == reason => {}
            other => problem(
                out,
                Rule::Model,
                format!(
                    "Cancel {{ {inv:?}, {reason:?} }} not expected (model expects {other:?}; \
                     lease is {:?})",
                    self.leases[&tag].state
                ),
            ),
        }
    }

    fn on_valid(&mut self, inv: InvocationId, until: Instant, out: &mut Problems) {
        let Some(&(tag, attempt)) = self.invocations.get(&inv) else {
            problem(
                out,
                Rule::Model,
                format!("LeaseValid for {inv:?}, an invocation never run"),
            );
            return;
        };
        let found = self.expected.iter().position(
            |e| matches!(e, Expect::Valid { tag: t, attempt: a, .. } if *t == tag && *a == attempt),
        );
        let state = &self.leases[&tag].state;
        match found.map(|i| self.expected.remove(i)) {
            Some(Expect::Valid {
                until: expected, ..
            }) => {
                if until != expected {
                    // A later `until` would let the handler act on a lease that may have lapsed.
                    let rule = if until > expected {
                        Rule::Expiry
                    } else {
                        Rule::Model
                    };
                    problem(
                        out,
                        rule,
                        format!(
                            "LeaseValid {{ {inv:?} }} until {}, model {}",
                            self.at(until),
                            self.at(expected)
                        ),
                    );
                }
            }
            _ => {
                let rule = if state.is_held() {
                    Rule::Model
                } else {
                    Rule::Expiry
                };
                problem(
                    out,
                    rule,
                    format!(
                        "LeaseValid {{ {inv:?} }} until {} not expected: no confirmation of \
                         delivery {tag} (lease is {state:?})",
                        self.at(until)
                    ),
                );
            }
        }
    }

    fn on_renew(
        &mut self,
        batch: RenewId,
        stream: StreamId,
        ids: &[LeaseId],
        lease_refs: &[LeaseRef],
        engine: &LeaseEngine<Tag>,
        out: &mut Problems,
    ) {
        if self.round.is_some() {
            problem(
                out,
                Rule::Model,
                format!("Renew {batch:?} while a heartbeat round is still outstanding"),
            );
        }
        if !self.seen_batches.insert(batch) {
            problem(
                out,
                Rule::Model,
                format!("renew batch id {batch:?} used twice"),
            );
        }
        if ids.is_empty() || ids.len() > self.cfg.renew_batch_size || ids.len() != lease_refs.len()
        {
            problem(
                out,
                Rule::Model,
                format!(
                    "Renew chunk of {} leases and {} lease refs, batch size {}",
                    ids.len(),
                    lease_refs.len(),
                    self.cfg.renew_batch_size
                ),
            );
        }
        for &id in ids {
            let Some(tag) = self.bind(id, engine, out) else {
                continue;
            };
            let lease = &self.leases[&tag];
            if lease.stream != stream {
                problem(
                    out,
                    Rule::Model,
                    format!(
                        "Renew {batch:?} of {stream:?} names {:?}/{} of another stream",
                        lease.stream, lease.msg
                    ),
                );
            }
        }
        self.new_chunks.push(Chunk {
            batch,
            stream,
            leases: ids.to_vec(),
            lease_refs: lease_refs.to_vec(),
            answered: false,
        });
    }

    fn on_ack(
        &mut self,
        batch: AckId,
        stream: StreamId,
        ids: &[LeaseId],
        lease_refs: &[LeaseRef],
        engine: &LeaseEngine<Tag>,
        out: &mut Problems,
    ) {
        let s = usize::from(stream.0);
        if !self.seen_acks.insert(batch) {
            problem(
                out,
                Rule::Model,
                format!("ack batch id {batch:?} used twice"),
            );
        }
        if s >= self.acking.len() {
            problem(
                out,
                Rule::Model,
                format!("Ack {batch:?} for unknown stream {s}"),
            );
            return;
        }
        if let Some(AckOut { batch: other, .. }) = &self.acking[s] {
            problem(
                out,
                Rule::Model,
                format!(
                    "Ack {batch:?} on stream {s} while its Ack {other:?} is unanswered (one in \
                     flight per stream)"
                ),
            );
        }
        if ids.is_empty() || ids.len() != lease_refs.len() {
            problem(
                out,
                Rule::Model,
                format!(
                    "Ack {batch:?} of {} leases and {} lease refs",
                    ids.len(),
                    lease_refs.len()
                ),
            );
        }
        let (now, ttl) = (self.now, self.ttl());
        let mut tags: Vec<Tag> = Vec::new();
        for (i, &id) in ids.iter().enumerate() {
            let Some(tag) = self.bind(id, engine, out) else {
                continue;
            };
            let lease = &self.leases[&tag];
            let what = format!("Ack {batch:?} of {:?}/{} ({id:?})", lease.stream, lease.msg);
            if lease.stream != stream {
                problem(out, Rule::Model, format!("{what} on stream {s}"));
            }
            if let Some(r) = lease_refs.get(i) {
                if r.id != lease.msg || r.fence != lease.fence {
                    problem(
                        out,
                        Rule::Model,
                        format!("{what} carries {r:?}, model has fence {:?}", lease.fence),
                    );
                }
            }
            // A late ack (its `Done` came before the lease expired locally) is the one ack of a
            // lease no longer held: nobody is known to have taken it over.
            let late = lease.state.is_late();
            if !lease.state.is_held() && !late {
                problem(
                    out,
                    Rule::AckAfterDone,
                    format!("{what} for a lease no longer held ({:?})", lease.state),
                );
            } else if !lease.state.awaits_ack() {
                problem(
                    out,
                    Rule::AckAfterDone,
                    format!("{what} not expected: lease is {:?}", lease.state),
                );
            }
            if !late && lease.confirmed + ttl <= now {
                problem(
                    out,
                    Rule::AckAfterDone,
                    format!("{what} for a lease expired locally, not as a late ack"),
                );
            }
            if tags.contains(&tag) {
                problem(out, Rule::Model, format!("{what} twice in one Ack"));
            }
            tags.push(tag);
        }
        // Every ack due on the stream goes in its one batch.
        let left_out: Vec<String> = self
            .leases
            .iter()
            .filter(|(tag, l)| l.stream == stream && l.state.awaits_ack() && !tags.contains(tag))
            .map(|(tag, l)| format!("{}/{} (delivery {tag})", l.msg, l.fence.0))
            .collect();
        if !left_out.is_empty() {
            problem(
                out,
                Rule::Model,
                format!(
                    "Ack {batch:?} on stream {s} leaves out acks due: {}",
                    left_out.join(", ")
                ),
            );
        }
        for tag in &tags {
            let lease = self.leases.get_mut(tag).expect("bound");
            let gen = lease.gen;
            if let MState::Settling {
                op: Op::Ack,
                in_flight: true,
                batch: sent @ None,
                sent_gen,
                ..
            }
            | MState::Late {
                in_flight: true,
                batch: sent @ None,
                sent_gen,
                ..
            } = &mut lease.state
            {
                *sent = Some(batch);
                *sent_gen = gen;
            }
        }
        self.acking[s] = Some(AckOut {
            batch,
            leases: ids.to_vec(),
        });
    }

    #[allow(clippy::too_many_arguments)]
    fn on_settle(
        &mut self,
        op: Op,
        stream: StreamId,
        id: LeaseId,
        lease_ref: &LeaseRef,
        carried: &Settle<'_>,
        engine: &LeaseEngine<Tag>,
        out: &mut Problems,
    ) {
        let Some(tag) = self.bind(id, engine, out) else {
            return;
        };
        let lease = &self.leases[&tag];
        let what = format!("{op:?} of {:?}/{} ({id:?})", lease.stream, lease.msg);
        if stream != lease.stream || lease_ref.id != lease.msg {
            problem(
                out,
                Rule::Model,
                format!("{what} names {stream:?}/{}", lease_ref.id),
            );
        }
        let found = self.expected.iter().position(
            |e| matches!(e, Expect::Settle { tag: t, op: o, .. } if *t == tag && *o == op),
        );
        match found.map(|i| self.expected.remove(i)) {
            Some(Expect::Settle { fence, carry, .. }) => {
                if lease_ref.fence != fence {
                    problem(
                        out,
                        Rule::Model,
                        format!(
                            "{what} carries {:?}, the lease's fence when it was sent is {fence:?}",
                            lease_ref.fence
                        ),
                    );
                }
                check_carry(&carry, carried, &what, out);
            }
            _ => {
                let state = &self.leases[&tag].state;
                let rule = match state {
                    MState::Gone(End::Lost | End::Expired) | MState::Orphan { .. } => Rule::Expiry,
                    _ => Rule::Model,
                };
                problem(
                    out,
                    rule,
                    format!("{what} not expected: lease is {state:?}"),
                );
            }
        }
    }

    /// A `Lost` or `Failed` notice: exactly as the model announced it.
    fn on_notice(&mut self, notice: Expect, out: &mut Problems) {
        match self.expected.iter().position(|e| *e == notice) {
            Some(i) => {
                self.expected.remove(i);
            }
            None => {
                let announced: Vec<&Expect> = self
                    .expected
                    .iter()
                    .filter(|e| matches!(e, Expect::Lost { .. } | Expect::Failed { .. }))
                    .collect();
                problem(
                    out,
                    Rule::Model,
                    format!("{notice:?} not expected (the model announced {announced:?})"),
                );
            }
        }
    }

    fn on_halt(&mut self, stream: StreamId, out: &mut Problems) {
        let found = self
            .expected
            .iter()
            .position(|e| *e == Expect::Halt { stream });
        match found {
            Some(i) => {
                self.expected.remove(i);
            }
            None => problem(
                out,
                Rule::Model,
                format!(
                    "Halt of {stream:?} not expected (halted before: {})",
                    self.halted
                        .get(usize::from(stream.0))
                        .copied()
                        .unwrap_or(false)
                ),
            ),
        }
    }

    fn on_drained(&mut self, out: &mut Problems) {
        if self.shutdown.is_none() {
            problem(out, Rule::Drain, "Drained before shutdown".into());
        }
        if self.drained {
            problem(out, Rule::Drain, "Drained twice".into());
        }
        let (held, running, reserved) = (self.held(), self.running(), self.reserved());
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
        match self.expected.iter().position(|e| *e == Expect::Drained) {
            Some(i) => {
                self.expected.remove(i);
            }
            None if out.is_empty() => {
                problem(out, Rule::Drain, "Drained not expected".into());
            }
            None => {}
        }
        self.drained = true;
    }

    /// The renew round the drained inputs sent, if any: it must name exactly the renewable
    /// leases at the end of one of them, with their streams and fences then, in chunks per
    /// stream. It becomes the round in flight.
    pub(crate) fn check_round(&mut self, out: &mut Problems) {
        if self.new_chunks.is_empty() {
            return;
        }
        let chunks = std::mem::take(&mut self.new_chunks);
        let mut named: Vec<(Tag, StreamId, &LeaseRef)> = Vec::new();
        for chunk in &chunks {
            for (id, r) in chunk.leases.iter().zip(&chunk.lease_refs) {
                if let Some(&tag) = self.by_id.get(id) {
                    named.push((tag, chunk.stream, r));
                }
            }
        }
        let tags: BTreeSet<Tag> = named.iter().map(|(tag, ..)| *tag).collect();
        if tags.len() != named.len() {
            problem(
                out,
                Rule::Heartbeat,
                "a lease named twice in one heartbeat round".into(),
            );
        }
        let matches = |snapshot: &crate::model::Snapshot| {
            snapshot.renewable.len() == tags.len()
                && named.iter().all(|(tag, stream, r)| {
                    snapshot
                        .renewable
                        .get(tag)
                        .is_some_and(|(s, msg, fence, _)| {
                            s == stream && *msg == r.id && *fence == r.fence
                        })
                })
        };
        let found = self.snapshots.iter().find(|s| matches(s)).cloned();
        let now = found.as_ref().map_or(self.now, |s| s.now);
        let (seq, gens) = match &found {
            Some(snapshot) => {
                // Per stream, as few chunks as the batch size allows.
                let size = self.cfg.renew_batch_size;
                let streams: BTreeSet<StreamId> = chunks.iter().map(|c| c.stream).collect();
                for stream in streams {
                    let leases = snapshot
                        .renewable
                        .values()
                        .filter(|(s, ..)| *s == stream)
                        .count();
                    let sent = chunks.iter().filter(|c| c.stream == stream).count();
                    if sent != leases.div_ceil(size) {
                        problem(
                            out,
                            Rule::Model,
                            format!(
                                "{leases} renewable leases of {stream:?} in {sent} Renew \
                                 chunks (batch size {size})"
                            ),
                        );
                    }
                }
                let gens = snapshot
                    .renewable
                    .iter()
                    .map(|(tag, (.., gen))| (*tag, *gen))
                    .collect();
                ((snapshot.input, 1), gens)
            }
            None => {
                self.round_mismatch(&named, out);
                let gens = tags
                    .iter()
                    .map(|tag| (*tag, self.leases[tag].gen))
                    .collect();
                ((self.input, 1), gens)
            }
        };
        for tag in &tags {
            if let Some(lease) = self.leases.get_mut(tag) {
                lease.baseline = now;
            }
        }
        self.round = Some(crate::model::Round {
            sent_at: now,
            seq,
            chunks,
            gens,
        });
    }

    /// Why a round matches no drained input's renewable leases, against the last of them.
    fn round_mismatch(&self, named: &[(Tag, StreamId, &LeaseRef)], out: &mut Problems) {
        let before = out.len();
        for (tag, _, r) in named {
            let lease = &self.leases[tag];
            let who = format!("{:?}/{} (delivery {tag})", lease.stream, lease.msg);
            match &lease.state {
                MState::Gone(End::Lost | End::Expired) | MState::Orphan { .. } => problem(
                    out,
                    Rule::Expiry,
                    format!(
                        "Renew names {who}, which is no longer held ({:?})",
                        lease.state
                    ),
                ),
                state if !state.is_renewable() => problem(
                    out,
                    Rule::Model,
                    format!("Renew names {who}, which is not renewable ({state:?})"),
                ),
                _ if r.fence != lease.fence => problem(
                    out,
                    Rule::Model,
                    format!(
                        "Renew carries {r:?} for {who}, model fence {:?}",
                        lease.fence
                    ),
                ),
                _ => {}
            }
        }
        if let Some(last) = self.snapshots.last() {
            for (tag, (stream, msg, ..)) in &last.renewable {
                if !named.iter().any(|(t, ..)| t == tag) {
                    problem(
                        out,
                        Rule::Heartbeat,
                        format!(
                            "{stream:?}/{msg} (delivery {tag}) missing from the heartbeat round"
                        ),
                    );
                }
            }
        }
        if out.len() == before {
            problem(
                out,
                Rule::Heartbeat,
                "the heartbeat round names the renewable leases of no drained input".into(),
            );
        }
    }
}

fn check_carry(carry: &Carry, carried: &Settle<'_>, what: &str, out: &mut Problems) {
    let ok = match (carry, carried) {
        (Carry::Delay(expected), Settle::Delay(delay)) => expected == delay,
        (Carry::Reason(expected), Settle::Reason(reason)) => expected == *reason,
        _ => false,
    };
    if !ok {
        let carried = match carried {
            Settle::Delay(d) => format!("delay {d:?}"),
            Settle::Reason(r) => format!("reason {r}"),
        };
        problem(
            out,
            Rule::Model,
            format!("{what} carries {carried}, model expects {carry:?}"),
        );
    }
}
