//! The reference model: the harness's own bookkeeping of every delivery, invocation and request,
//! computed from the inputs it gives and the effects it sees, never from engine internals.
//!
//! Each input is mirrored in the engine's order (`begin`: local expiry, max processing time,
//! shutdown deadline, due re-polls, due settle retries; then the input itself), which lets the
//! model predict every `Run` of a new delivery, every `Cancel`, `Ack`, `Release` and
//! `DeadLetter`, and the exact content of every heartbeat round. What it does not predict
//! (when a fetch or a heartbeat round is sent, which ready lease takes a free slot) it bounds
//! by the invariants instead. The only engine call it makes is [`LeaseEngine::lease`], as a
//! driver does, to learn which delivery (payload tag) a new `LeaseId` stands for.
//!
//! [`LeaseEngine::lease`]: leasehold_core::LeaseEngine::lease

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use leasehold_core::{
    CancelReason, DeadLetterReason, Fence, Fetched, InvocationId, LeaseId, MessageId, Outcome,
    RenewId, RenewResult, RetryPolicy, Settings, SettleResult, StreamId,
};

/// A delivery's payload: a number unique per delivery, so an effect's `LeaseId` can be tied to
/// the delivery that created it.
pub(crate) type Tag = u64;

/// How a held lease is settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Ack,
    Release,
    DeadLetter,
}

/// What a settle effect must carry.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Carry {
    Nothing,
    Delay(Duration),
    Backoff { deliveries: u32 },
    Reason(DeadLetterReason),
}

/// Why a lease is gone for good.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    Settled(Op),
    Lost,
    Expired,
    Abandoned,
    OrphanReported,
}

/// Where a delivery is in its life, as the model sees it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum MState {
    /// Created within a fetch's budget: its `Run` must follow in this step.
    Taken,
    /// Taken while a cancelled invocation of the same message still runs.
    Blocked,
    Running {
        inv: InvocationId,
        started: Instant,
        cancelled: Option<CancelReason>,
    },
    /// Returned `Pending`: ready to re-run at `due` at the latest, `earliest` at the soonest (a
    /// delivery's first re-poll may come early by up to `repoll_spread` of the interval).
    Waiting {
        earliest: Instant,
        due: Instant,
    },
    Ready,
    Settling {
        op: Op,
        carry: Carry,
        in_flight: bool,
        /// Decided in this step: the effect must appear among this step's effects.
        must_send: bool,
        /// `gen` when the effect was sent: a later adoption makes a `Lost` answer stale.
        sent_gen: u32,
        retry_at: Option<Instant>,
    },
    /// Lost or expired while running: not held, its cancelled invocation still occupies a slot.
    Orphan {
        inv: InvocationId,
        successor: Option<Tag>,
    },
    Gone(End),
}

impl MState {
    pub(crate) fn is_held(&self) -> bool {
        !matches!(self, MState::Orphan { .. } | MState::Gone(_))
    }
    /// Held and not being released: a renew landing after a release would undo its delay,
    /// while acks and dead-letters in flight stay in the heartbeat.
    pub(crate) fn is_renewable(&self) -> bool {
        self.is_held()
            && !matches!(
                self,
                MState::Settling {
                    op: Op::Release,
                    in_flight: true,
                    ..
                }
            )
    }
    pub(crate) fn is_in_flight(&self) -> bool {
        matches!(
            self,
            MState::Settling {
                in_flight: true,
                ..
            }
        )
    }
}

/// One delivery that created a lease.
#[derive(Debug, Clone)]
pub(crate) struct MLease {
    pub stream: StreamId,
    pub msg: MessageId,
    pub id: Option<LeaseId>,
    pub fence: Fence,
    pub delivery_count: u32,
    /// Adoptions of a newer delivery so far.
    pub gen: u32,
    /// Send time of the fetch or renew that last confirmed it.
    pub confirmed: Instant,
    /// Send time of the last `Renew` naming it, or of the fetch that (re)delivered it.
    pub baseline: Instant,
    /// Delivered beyond the fetch's budget (or during shutdown): released at once, and not
    /// counted against `max_leases`.
    pub overflow: bool,
    pub state: MState,
    /// `Run` effects seen for it.
    pub runs: u32,
    /// A `Cancel` this step must emit.
    pub must_cancel: Option<(InvocationId, CancelReason)>,
}

/// One `Renew` effect.
#[derive(Debug, Clone)]
pub(crate) struct Chunk {
    pub batch: RenewId,
    pub leases: Vec<LeaseId>,
    pub answered: bool,
}

/// The heartbeat round in flight.
#[derive(Debug, Clone)]
pub(crate) struct Round {
    pub step: u64,
    pub sent_at: Instant,
    pub chunks: Vec<Chunk>,
    /// Per lease, its `gen` when the round was sent.
    pub gens: HashMap<Tag, u32>,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Shutdown {
    pub deadline: Instant,
    pub cancelled_running: bool,
}

/// Limits of the stale-answer histories.
const HISTORY: usize = 16;

/// The reference model and the record of outstanding requests.
#[derive(Debug)]
pub(crate) struct Model {
    pub cfg: Settings,
    /// The engine's creation time, for printing instants as offsets.
    pub origin: Instant,
    pub now: Instant,
    /// Number of the input being mirrored (each step and each timeout within one).
    pub input: u64,
    pub leases: BTreeMap<Tag, MLease>,
    pub by_id: HashMap<LeaseId, Tag>,
    /// Unreported invocations (running or orphaned), to the delivery they run for.
    pub runs: BTreeMap<InvocationId, Tag>,
    pub seen_runs: BTreeSet<InvocationId>,
    pub seen_batches: BTreeSet<RenewId>,
    /// Per stream, the outstanding fetch: its `max` and send time.
    pub fetches: Vec<Option<(usize, Instant)>>,
    pub round: Option<Round>,
    pub acks: Vec<Vec<LeaseId>>,
    pub releases: Vec<LeaseId>,
    pub dead_letters: Vec<LeaseId>,
    pub acks_this_input: usize,
    pub shutdown: Option<Shutdown>,
    pub drained: bool,
    /// Reported invocations, answered chunks and settles, for stale answers.
    pub old_runs: Vec<InvocationId>,
    pub old_chunks: Vec<(RenewId, Vec<LeaseId>)>,
    pub old_settles: Vec<(Op, LeaseId)>,
}

impl Model {
    pub(crate) fn new(cfg: Settings, streams: usize, now: Instant) -> Self {
        Self {
            cfg,
            origin: now,
            now,
            input: 0,
            leases: BTreeMap::new(),
            by_id: HashMap::new(),
            runs: BTreeMap::new(),
            seen_runs: BTreeSet::new(),
            seen_batches: BTreeSet::new(),
            fetches: vec![None; streams],
            round: None,
            acks: Vec::new(),
            releases: Vec::new(),
            dead_letters: Vec::new(),
            acks_this_input: 0,
            shutdown: None,
            drained: false,
            old_runs: Vec::new(),
            old_chunks: Vec::new(),
            old_settles: Vec::new(),
        }
    }

    /// An instant as an offset from the engine's creation, for messages.
    pub(crate) fn at(&self, t: Instant) -> String {
        format!("+{:?}", t.saturating_duration_since(self.origin))
    }

    pub(crate) fn ttl(&self) -> Duration {
        self.cfg.lease_ttl()
    }

    /// The held lease of a message, if any.
    pub(crate) fn held_of(&self, stream: StreamId, msg: &MessageId) -> Option<Tag> {
        self.leases
            .iter()
            .find(|(_, l)| l.state.is_held() && l.stream == stream && l.msg == *msg)
            .map(|(tag, _)| *tag)
    }

    fn orphan_of(&self, stream: StreamId, msg: &MessageId) -> Option<Tag> {
        self.leases
            .iter()
            .find(|(_, l)| {
                matches!(l.state, MState::Orphan { .. }) && l.stream == stream && l.msg == *msg
            })
            .map(|(tag, _)| *tag)
    }

    fn lease(&mut self, tag: Tag) -> &mut MLease {
        self.leases.get_mut(&tag).expect("model lease")
    }

    fn tags(&self, keep: impl Fn(&MLease) -> bool) -> Vec<Tag> {
        self.leases
            .iter()
            .filter(|(_, l)| keep(l))
            .map(|(tag, _)| *tag)
            .collect()
    }

    // ----- the engine's `begin`: timers due at `now` ------------------------------------------

    /// Starts mirroring an input at `now`: the clock never goes back; due timers run.
    pub(crate) fn begin(&mut self, now: Instant) {
        self.start(now);
        self.advance();
    }

    /// Starts mirroring an input whose answers apply before timers run (renew and settle
    /// answers are about sends already made).
    fn start(&mut self, now: Instant) {
        self.input += 1;
        self.acks_this_input = 0;
        self.now = self.now.max(now);
    }

    /// Everything due at `self.now`, in the engine's order.
    fn advance(&mut self) {
        let now = self.now;
        self.expire();
        let mpt = self.cfg.max_processing_time;
        for tag in self.tags(|l| {
            matches!(l.state, MState::Running { started, cancelled: None, .. } if started + mpt <= now)
        }) {
            self.cancel(tag, CancelReason::MaxProcessingTime);
        }
        if let Some(shutdown) = &mut self.shutdown {
            if !shutdown.cancelled_running && shutdown.deadline <= now {
                shutdown.cancelled_running = true;
                for tag in self.tags(|l| {
                    matches!(
                        l.state,
                        MState::Running {
                            cancelled: None,
                            ..
                        }
                    )
                }) {
                    self.cancel(tag, CancelReason::Shutdown);
                }
            }
        }
        for tag in self.tags(|l| matches!(l.state, MState::Waiting { due, .. } if due <= now)) {
            self.lease(tag).state = MState::Ready;
        }
        for tag in self.tags(|l| {
            matches!(l.state, MState::Settling { in_flight: false, retry_at: Some(at), .. } if at <= now)
        }) {
            self.resend(tag);
        }
    }

    /// Drops every held lease whose confirmation is `ttl` old.
    fn expire(&mut self) {
        let cutoff = self.ttl();
        let now = self.now;
        for tag in self.tags(|l| l.state.is_held() && l.confirmed + cutoff <= now) {
            self.drop_lease(tag, CancelReason::LeaseExpired);
        }
    }

    fn cancel(&mut self, tag: Tag, reason: CancelReason) {
        let lease = self.lease(tag);
        if let MState::Running {
            inv,
            cancelled: cancelled @ None,
            ..
        } = &mut lease.state
        {
            *cancelled = Some(reason);
            lease.must_cancel = Some((*inv, reason));
        }
    }

    /// The lease is not ours any more: a running invocation is cancelled and becomes an orphan.
    fn drop_lease(&mut self, tag: Tag, reason: CancelReason) {
        let lease = self.lease(tag);
        match lease.state {
            MState::Running { inv, cancelled, .. } => {
                if cancelled.is_none() {
                    lease.must_cancel = Some((inv, reason));
                }
                lease.state = MState::Orphan {
                    inv,
                    successor: None,
                };
            }
            MState::Orphan { .. } | MState::Gone(_) => {}
            _ => {
                lease.state = MState::Gone(match reason {
                    CancelReason::LeaseExpired => End::Expired,
                    _ => End::Lost,
                })
            }
        }
    }

    /// Decides a settle operation: its effect must be sent in this step.
    fn settle(&mut self, tag: Tag, op: Op, carry: Carry) {
        let lease = self.lease(tag);
        lease.state = MState::Settling {
            op,
            carry,
            in_flight: true,
            must_send: true,
            sent_gen: lease.gen,
            retry_at: None,
        };
    }

    /// Sends a settle operation again (after a transient failure, a stale `Lost`, or shutdown).
    fn resend(&mut self, tag: Tag) {
        let lease = self.lease(tag);
        if let MState::Settling { op, carry, .. } = &lease.state {
            let (op, carry) = (*op, carry.clone());
            self.settle(tag, op, carry);
        }
    }

    fn fail(&mut self, tag: Tag, delay: Option<Duration>, error: String) {
        let deliveries = self.lease(tag).delivery_count;
        if deliveries >= self.cfg.max_deliveries {
            let reason = DeadLetterReason::MaxDeliveries {
                deliveries,
                last_error: error,
            };
            self.settle(tag, Op::DeadLetter, Carry::Reason(reason));
        } else {
            let carry = delay.map_or(Carry::Backoff { deliveries }, Carry::Delay);
            self.settle(tag, Op::Release, carry);
        }
    }

    // ----- inputs ------------------------------------------------------------------------------

    /// `handle_timeout`.
    pub(crate) fn timeout(&mut self, now: Instant) {
        self.begin(now);
    }

    /// `handle_fetched`: deliveries carry their tag as payload.
    pub(crate) fn fetched(&mut self, now: Instant, stream: StreamId, batch: &[Fetched<Tag>]) {
        self.begin(now);
        let (mut budget, confirm) = match self.fetches[usize::from(stream.0)].take() {
            Some((max, sent_at)) => (max, sent_at),
            // Nothing was asked: the deliveries are dated at the engine's clock (never at an
            // older `now`, which would put them out of send order).
            None => (0, self.now),
        };
        if confirm + self.ttl() <= self.now {
            // The fetch took so long that its deliveries may have lapsed: none may be run,
            // held or acted on (not even a held message's new fence is adopted).
            return;
        }
        // Taken leases start while slots are free; the rest (prefetched) wait, ready.
        let mut starting = 0;
        for message in batch {
            if let Some(tag) = self.held_of(stream, &message.id) {
                let lease = self.lease(tag);
                lease.gen += 1;
                lease.fence = message.fence;
                lease.delivery_count = message.delivery_count;
                lease.confirmed = lease.confirmed.max(confirm);
                // A redelivery resets the backend's idle time like a renew does.
                lease.baseline = lease.baseline.max(confirm);
                continue;
            }
            let take = budget > 0 && self.shutdown.is_none();
            let tag = message.payload;
            let orphan = self.orphan_of(stream, &message.id);
            self.leases.insert(
                tag,
                MLease {
                    stream,
                    msg: message.id.clone(),
                    id: None,
                    fence: message.fence,
                    delivery_count: message.delivery_count,
                    gen: 0,
                    confirmed: confirm,
                    baseline: confirm,
                    overflow: !take,
                    state: MState::Taken,
                    runs: 0,
                    must_cancel: None,
                },
            );
            if !take {
                self.settle(tag, Op::Release, Carry::Delay(Duration::ZERO));
                continue;
            }
            budget -= 1;
            if let Some(orphan) = orphan {
                self.lease(tag).state = MState::Blocked;
                if let MState::Orphan { successor, .. } = &mut self.lease(orphan).state {
                    *successor = Some(tag);
                }
            } else if self.runs.len() + starting < self.cfg.concurrency {
                starting += 1;
            } else {
                self.lease(tag).state = MState::Ready;
            }
        }
    }

    /// `handle_fetch_failed`.
    pub(crate) fn fetch_failed(&mut self, now: Instant, stream: StreamId) {
        self.begin(now);
        self.fetches[usize::from(stream.0)] = None;
    }

    /// `handle_outcome`.
    pub(crate) fn outcome(&mut self, now: Instant, inv: InvocationId, outcome: &Outcome) {
        self.begin(now);
        let Some(tag) = self.runs.remove(&inv) else {
            return;
        };
        self.old_runs.push(inv);
        trim(&mut self.old_runs);
        let state = self.lease(tag).state.clone();
        match state {
            MState::Orphan { successor, .. } => {
                self.lease(tag).state = MState::Gone(End::OrphanReported);
                let blocked = successor.filter(|s| {
                    self.leases
                        .get(s)
                        .is_some_and(|l| l.state == MState::Blocked)
                });
                if let Some(next) = blocked {
                    if self.shutdown.is_some() {
                        self.settle(next, Op::Release, Carry::Delay(Duration::ZERO));
                    } else {
                        self.lease(next).state = MState::Ready;
                    }
                }
            }
            MState::Running {
                cancelled: Some(CancelReason::MaxProcessingTime),
                ..
            } => self.fail(tag, None, "max processing time exceeded".into()),
            MState::Running {
                cancelled: Some(_), ..
            } => self.settle(tag, Op::Release, Carry::Delay(Duration::ZERO)),
            MState::Running {
                cancelled: None, ..
            } => match outcome {
                Outcome::Done => self.settle(tag, Op::Ack, Carry::Nothing),
                Outcome::Pending if self.shutdown.is_some() => {
                    self.settle(tag, Op::Release, Carry::Delay(Duration::ZERO))
                }
                Outcome::Pending => {
                    let interval = self.cfg.repoll_interval;
                    let spread = if self.lease(tag).runs == 1 {
                        interval.mul_f64(self.cfg.repoll_spread)
                    } else {
                        Duration::ZERO
                    };
                    self.lease(tag).state = MState::Waiting {
                        earliest: self.now + interval - spread,
                        due: self.now + interval,
                    }
                }
                Outcome::Retry { delay } => self.fail(tag, *delay, "handler asked to retry".into()),
                Outcome::Failed { error } => self.fail(tag, None, error.clone()),
                Outcome::Reject { reason } => self.settle(
                    tag,
                    Op::DeadLetter,
                    Carry::Reason(DeadLetterReason::Rejected(reason.clone())),
                ),
            },
            other => unreachable!("an unreported invocation's lease is {other:?}"),
        }
    }

    /// `handle_renewed`: results apply before the clock advances.
    pub(crate) fn renewed(
        &mut self,
        now: Instant,
        batch: RenewId,
        results: &[(LeaseId, RenewResult)],
    ) {
        self.start(now);
        if let Some((sent_at, gens)) = self.answer_chunk(batch) {
            for (id, result) in results {
                let Some(&tag) = self.by_id.get(id) else {
                    continue;
                };
                let lease = self.lease(tag);
                let stale = gens.get(&tag).is_none_or(|gen| lease.gen > *gen);
                if !lease.state.is_held() || stale {
                    continue;
                }
                match result {
                    RenewResult::Kept => lease.confirmed = lease.confirmed.max(sent_at),
                    // An ack, release or dead-letter in flight may have removed the entry
                    // itself: its own answer tells what happened.
                    RenewResult::Lost if lease.state.is_in_flight() => {}
                    RenewResult::Lost => self.drop_lease(tag, CancelReason::LeaseLost),
                }
            }
            self.close_round();
        }
        self.advance();
    }

    /// `handle_renew_failed`.
    pub(crate) fn renew_failed(&mut self, now: Instant, batch: RenewId) {
        self.begin(now);
        if self.answer_chunk(batch).is_some() {
            self.close_round();
        }
    }

    /// Marks a chunk of the current round answered; its send time and the round's gens if it
    /// was outstanding.
    fn answer_chunk(&mut self, batch: RenewId) -> Option<(Instant, HashMap<Tag, u32>)> {
        let round = self.round.as_mut()?;
        let chunk = round
            .chunks
            .iter_mut()
            .find(|c| c.batch == batch && !c.answered)?;
        chunk.answered = true;
        self.old_chunks.push((chunk.batch, chunk.leases.clone()));
        trim(&mut self.old_chunks);
        Some((round.sent_at, round.gens.clone()))
    }

    fn close_round(&mut self) {
        if self
            .round
            .as_ref()
            .is_some_and(|r| r.chunks.iter().all(|c| c.answered))
        {
            self.round = None;
        }
    }

    /// `handle_acked`, `handle_released`, `handle_dead_lettered`.
    /// Answers apply before timers run, so a retry due now is not re-sent first.
    pub(crate) fn settled(&mut self, now: Instant, op: Op, results: &[(LeaseId, SettleResult)]) {
        self.start(now);
        for (id, result) in results {
            self.old_settles.push((op, *id));
            trim(&mut self.old_settles);
            let Some(&tag) = self.by_id.get(id) else {
                continue;
            };
            let (now, poll, ttl) = (self.now, self.cfg.poll_interval, self.ttl());
            let deadline_over = self.shutdown.is_some_and(|s| s.deadline <= now);
            let lease = self.lease(tag);
            let MState::Settling {
                op: sent,
                in_flight: true,
                sent_gen,
                ..
            } = lease.state
            else {
                continue;
            };
            if sent != op {
                continue;
            }
            match result {
                SettleResult::Ok => lease.state = MState::Gone(End::Settled(op)),
                // A stale fence is retried with the new one, unless the lease lapsed: then
                // the expiry that follows this answer drops it.
                SettleResult::Lost if lease.gen > sent_gen && lease.confirmed + ttl > now => {
                    self.resend(tag)
                }
                SettleResult::Lost if lease.gen > sent_gen => {
                    if let MState::Settling {
                        in_flight,
                        retry_at,
                        ..
                    } = &mut lease.state
                    {
                        *in_flight = false;
                        *retry_at = Some(now + poll);
                    }
                }
                SettleResult::Lost => lease.state = MState::Gone(End::Lost),
                SettleResult::Failed if deadline_over => lease.state = MState::Gone(End::Abandoned),
                SettleResult::Failed => {
                    if let MState::Settling {
                        in_flight,
                        retry_at,
                        ..
                    } = &mut lease.state
                    {
                        *in_flight = false;
                        *retry_at = Some(now + poll);
                    }
                }
            }
        }
        self.advance();
    }

    /// `handle_shutdown`.
    pub(crate) fn shutdown(&mut self, now: Instant, deadline: Instant) {
        self.begin(now);
        match &mut self.shutdown {
            Some(shutdown) => {
                if !shutdown.cancelled_running {
                    shutdown.deadline = shutdown.deadline.min(deadline);
                }
            }
            None => {
                self.shutdown = Some(Shutdown {
                    deadline,
                    cancelled_running: false,
                });
                for tag in self.tags(|l| {
                    matches!(
                        l.state,
                        MState::Waiting { .. } | MState::Ready | MState::Blocked
                    )
                }) {
                    self.settle(tag, Op::Release, Carry::Delay(Duration::ZERO));
                }
                for tag in self.tags(|l| {
                    matches!(
                        l.state,
                        MState::Settling {
                            in_flight: false,
                            ..
                        }
                    )
                }) {
                    self.resend(tag);
                }
            }
        }
        self.advance();
    }

    // ----- counts ------------------------------------------------------------------------------

    pub(crate) fn held(&self) -> usize {
        self.leases.values().filter(|l| l.state.is_held()).count()
    }

    /// Held leases counted against `max_leases`: overflow deliveries are excluded (they are
    /// released at once and never run).
    pub(crate) fn held_counted(&self) -> usize {
        self.leases
            .values()
            .filter(|l| l.state.is_held() && !l.overflow)
            .count()
    }

    /// Slots promised to outstanding fetches.
    pub(crate) fn reserved(&self) -> usize {
        self.fetches.iter().flatten().map(|(max, _)| max).sum()
    }

    /// Slots plus prefetch room: what running invocations and outstanding fetches may fill.
    pub(crate) fn capacity(&self) -> usize {
        self.cfg.concurrency + self.cfg.prefetch
    }

    /// Whether a ready lease must start: a slot is free beyond the part of the outstanding
    /// fetches' reservation that the prefetch room does not cover.
    pub(crate) fn slot_free(&self) -> bool {
        self.runs.len() + self.reserved().saturating_sub(self.cfg.prefetch) < self.cfg.concurrency
    }

    /// Whether a heartbeat round has a chunk unanswered.
    pub(crate) fn round_outstanding(&self) -> bool {
        self.round.is_some()
    }
}

/// The range a backoff delay after `deliveries` failed deliveries must fall in.
pub(crate) fn backoff_range(retry: &RetryPolicy, deliveries: u32) -> (f64, f64) {
    let exponent = deliveries.saturating_sub(1).min(1024) as i32;
    let max = retry.max.as_secs_f64();
    let secs = retry.initial.as_secs_f64() * retry.multiplier.powi(exponent);
    let secs = if secs.is_finite() { secs.min(max) } else { max };
    (secs * (1.0 - retry.jitter) - 1e-6, secs + 1e-6)
}

fn trim<T>(history: &mut Vec<T>) {
    if history.len() > HISTORY {
        history.remove(0);
    }
}
