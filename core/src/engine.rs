//! The [`LeaseEngine`]: a sans-IO state machine for leased, heartbeated message processing.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use crate::config::{Config, ConfigError, Settings};
use crate::effect::{Effect, Stats};
use crate::lease::{Lease, LeaseTable, Settle, State};
use crate::timers::{Epochs, Rng, Timers};
use crate::types::{
    CancelReason, DeadLetterReason, Fetched, InvocationId, LeaseId, MessageId, Outcome, RenewId,
    RenewResult, SettleResult, SourceId,
};

/// Per-source fetch pacing.
#[derive(Debug)]
struct Source {
    /// The fetch awaiting its result.
    outstanding: Option<Outstanding>,
    /// No fetch before this instant.
    next_at: Instant,
    /// How long the next fetch may block in the backend.
    wait: Duration,
    /// Consecutive failed fetches, for the backoff.
    failures: u32,
}

/// A fetch awaiting its result.
#[derive(Debug, Clone, Copy)]
struct Outstanding {
    /// How many it may deliver (slots reserved for it).
    max: usize,
    /// Its epoch: its send time confirms what it delivers.
    epoch: u64,
    /// How long the backend was allowed to block.
    wait: Duration,
}

/// The renew round in flight: one or more `Renew` chunks sent together.
#[derive(Debug)]
struct Round {
    first: u64,
    answered: Vec<bool>,
    remaining: usize,
    epoch: u64,
    seq: u64,
    sent_at: Instant,
    failed: bool,
}

#[derive(Debug, Clone, Copy)]
struct Shutdown {
    deadline: Instant,
    cancelled_running: bool,
}

/// The lease engine. See the [crate documentation](crate) for the model and an example.
///
/// `P` is the payload type, opaque to the engine (bytes, a decoded message, `()`...).
pub struct LeaseEngine<P> {
    cfg: Settings,
    now: Instant,
    /// Monotonic sequence of fence adoptions and sends, to recognise stale results.
    seq: u64,
    leases: LeaseTable<P>,
    /// Invocations still winding down after their lease was lost, by message.
    orphans: HashMap<(SourceId, MessageId), LeaseId>,
    sources: Vec<Source>,
    next_source: usize,
    /// Slots promised to outstanding fetches.
    reserved: usize,
    held: usize,
    running: usize,
    releasing: usize,
    /// Held leases waiting for an orphaned invocation of their message: they need a slot soon.
    blocked: usize,
    deadlines: Timers,
    repolls: Timers,
    retries: Timers,
    ready: Timers,
    epochs: Epochs,
    round: Option<Round>,
    renew_due: Option<Instant>,
    next_renew_id: u64,
    acks: Vec<LeaseId>,
    /// An input came since fetches were last decided.
    fetch_due: bool,
    effects: VecDeque<Effect>,
    shutdown: Option<Shutdown>,
    drained: bool,
    rng: Rng,
    stats: Stats,
}

impl<P> std::fmt::Debug for LeaseEngine<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseEngine")
            .field("held", &self.held)
            .field("running", &self.running)
            .field("reserved", &self.reserved)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl<P> LeaseEngine<P> {
    /// An engine serving one source, starting at `now`.
    pub fn new(config: &Config, now: Instant) -> Result<Self, ConfigError> {
        Self::with_sources(config, 1, now)
    }

    /// An engine serving `sources` sources (streams) with one shared concurrency budget;
    /// they are numbered `SourceId(0)..SourceId(sources - 1)`.
    pub fn with_sources(config: &Config, sources: u16, now: Instant) -> Result<Self, ConfigError> {
        let cfg = config.validate()?;
        if sources == 0 {
            return Err(ConfigError::NoSources);
        }
        let poll = cfg.poll_interval;
        let source = || Source {
            outstanding: None,
            next_at: now,
            wait: poll,
            failures: 0,
        };
        let mut engine = Self {
            rng: Rng::new(cfg.seed),
            cfg,
            now,
            seq: 0,
            leases: LeaseTable::new(),
            orphans: HashMap::new(),
            sources: (0..sources).map(|_| source()).collect(),
            next_source: 0,
            reserved: 0,
            held: 0,
            running: 0,
            releasing: 0,
            blocked: 0,
            deadlines: Timers::fifo(),
            repolls: Timers::heap(),
            retries: Timers::fifo(),
            ready: Timers::fifo(),
            epochs: Epochs::default(),
            round: None,
            renew_due: None,
            next_renew_id: 0,
            acks: Vec::new(),
            fetch_due: true,
            effects: VecDeque::new(),
            shutdown: None,
            drained: false,
            stats: Stats::default(),
        };
        engine.finish();
        Ok(engine)
    }

    // ----- outputs -------------------------------------------------------------------------

    /// The next effect to execute, if any. Drain effects before sleeping on
    /// [`poll_timeout`](Self::poll_timeout).
    ///
    /// `Ack` and `Fetch` are decided here, when everything else has been drained: a driver
    /// that feeds a burst of inputs before draining gets one ack batch and one fetch sized for
    /// all the slots the burst freed, instead of one tiny fetch per finished invocation.
    pub fn poll_effect(&mut self) -> Option<Effect> {
        if self.effects.is_empty() && std::mem::take(&mut self.fetch_due) {
            self.fetch();
        }
        if self.effects.is_empty() {
            self.flush_acks();
        }
        self.effects.pop_front()
    }

    /// When to call [`handle_timeout`](Self::handle_timeout) next; `None` when only an input
    /// can change anything. Always after the last `now` once effects are drained (no busy loop).
    pub fn poll_timeout(&self) -> Option<Instant> {
        let ttl = self.cfg.lease_ttl();
        let mut next: Option<Instant> = None;
        let mut consider = |at: Option<Instant>| {
            if let Some(at) = at {
                next = Some(next.map_or(at, |n| n.min(at)));
            }
        };
        consider(self.epochs.oldest_live().map(|(_, sent)| sent + ttl));
        for fifo in [&self.deadlines, &self.repolls, &self.retries] {
            if fifo.live > 0 {
                consider(fifo.front().map(|(due, _, _)| due));
            }
        }
        if self.round.is_none() && self.renewable() > 0 {
            consider(self.renew_due);
        }
        if let Some(shutdown) = self.shutdown {
            if !shutdown.cancelled_running {
                consider(Some(shutdown.deadline));
            }
        } else if self.fetch_budget() > 0 {
            for source in self.sources.iter().filter(|s| s.outstanding.is_none()) {
                consider(Some(source.next_at));
            }
        }
        next
    }

    /// The lease `id`, while the engine knows it (held, or its cancelled invocation still runs).
    pub fn lease(&self, id: LeaseId) -> Option<&Lease<P>> {
        self.leases.get(id)
    }

    /// Until when the lease counts as valid locally: the send time of its last successful renew
    /// (or of the fetch that delivered it) plus `claim_timeout - expiry_margin`. `None` once the
    /// lease is not held. A handler checks `now < valid_until` right before a side effect.
    pub fn valid_until(&self, id: LeaseId) -> Option<Instant> {
        let lease = self.leases.get(id)?;
        lease
            .state
            .is_held()
            .then(|| self.epochs.sent_at(lease.epoch) + self.cfg.lease_ttl())
    }

    /// The validated configuration.
    pub fn settings(&self) -> &Settings {
        &self.cfg
    }

    /// Counters of what happened so far.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Leases held now (running, waiting, ready, or being settled).
    pub fn held(&self) -> usize {
        self.held
    }

    /// Invocations running now, including cancelled ones that have not reported yet.
    pub fn running(&self) -> usize {
        self.running
    }

    /// Whether shutdown has completed (`Effect::Drained` was emitted).
    pub fn is_drained(&self) -> bool {
        self.drained
    }

    // ----- inputs --------------------------------------------------------------------------

    /// Timers may be due: call when [`poll_timeout`](Self::poll_timeout) has passed.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.begin(now);
        self.finish();
    }

    /// A fetch for `source` returned these messages (possibly none).
    ///
    /// A message this engine already holds adopts the new delivery's fence and count and starts
    /// nothing. Messages beyond what the fetch asked for (or any during shutdown) are released
    /// at once, never run.
    pub fn handle_fetched(&mut self, now: Instant, source: SourceId, messages: Vec<Fetched<P>>) {
        self.begin(now);
        let (mut budget, epoch) = match self
            .sources
            .get_mut(usize::from(source.0))
            .and_then(|s| s.outstanding.take())
        {
            Some(Outstanding { max, epoch, wait }) => {
                self.reserved -= max;
                let sent_at = self.epochs.sent_at(epoch);
                let poll = self.cfg.poll_interval;
                let src = &mut self.sources[usize::from(source.0)];
                src.failures = 0;
                // Empty: the next fetch comes a poll interval after this one was sent — at once
                // if the backend already blocked for its whole wait, since waiting again here
                // would only delay new messages. Short: fetch again at once, letting the backend
                // block for new entries. Full: there is probably more, fetch at once, no blocking.
                let waited_out = !wait.is_zero() && self.now >= sent_at + wait;
                (src.next_at, src.wait) = match messages.len() {
                    0 if waited_out => (self.now, poll),
                    0 => (sent_at + poll, poll),
                    n if n < max => (self.now, poll),
                    _ => (self.now, Duration::ZERO),
                };
                (max, epoch)
            }
            None => (0, self.epochs.open(self.now)),
        };
        let sent_at = self.epochs.sent_at(epoch);
        let hb_due = sent_at + self.cfg.heartbeat_interval;
        // The fetch took so long that its deliveries may have lapsed already: never run them.
        let expired = sent_at + self.cfg.lease_ttl() <= self.now;
        for message in messages {
            self.stats.delivered += 1;
            if expired {
                self.stats.expired += 1;
                continue;
            }
            if let Some(id) = self.leases.find(source, &message.id) {
                self.adopt(id, message, epoch);
                continue;
            }
            let take = budget > 0 && self.shutdown.is_none();
            if !take && self.shutdown.is_none() {
                self.stats.overflow += 1;
            }
            let id = self.create(source, message, epoch);
            self.renew_due = Some(self.renew_due.map_or(hb_due, |d| d.min(hb_due)));
            if !take {
                self.settle(id, Settle::Release(Duration::ZERO));
                continue;
            }
            budget -= 1;
            let orphan = if self.orphans.is_empty() {
                None
            } else {
                let key = (source, self.leases.get(id).expect("created").id.clone());
                self.orphans.get(&key).copied()
            };
            match orphan {
                Some(orphan) => {
                    // An earlier invocation of this message still winds down: serial per message.
                    if let Some(o) = self.leases.get_mut(orphan) {
                        o.state = State::Orphaned {
                            successor: Some(id),
                        };
                    }
                }
                None => self.start_run(id),
            }
        }
        self.epochs.unpin(epoch);
        self.finish();
    }

    /// A fetch for `source` failed; the next one backs off exponentially (capped).
    pub fn handle_fetch_failed(&mut self, now: Instant, source: SourceId) {
        self.begin(now);
        if let Some(src) = self.sources.get_mut(usize::from(source.0)) {
            if let Some(Outstanding { max, epoch, .. }) = src.outstanding.take() {
                src.failures = src.failures.saturating_add(1);
                let factor = 1u32 << (src.failures - 1).min(20);
                let backoff = self
                    .cfg
                    .poll_interval
                    .saturating_mul(factor)
                    .min(self.cfg.fetch_backoff_max);
                src.next_at = self.now + backoff;
                src.wait = self.cfg.poll_interval;
                self.reserved -= max;
                self.epochs.unpin(epoch);
            }
        }
        self.finish();
    }

    /// An invocation finished with `outcome`. Outcomes of cancelled invocations, or of leases
    /// lost meanwhile, are discarded (the slot is freed); unknown invocations are ignored.
    pub fn handle_outcome(&mut self, now: Instant, invocation: InvocationId, outcome: Outcome) {
        self.begin(now);
        let id = invocation.lease;
        let state = match self.leases.get(id) {
            Some(lease) if lease.attempt == invocation.run && lease.state.is_running() => {
                lease.state.clone()
            }
            _ => return self.finish(),
        };
        match state {
            State::Orphaned { successor } => self.end_orphan(id, successor),
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
        self.now = self.now.max(now);
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
        self.begin(now);
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

    /// Results of an `Ack` effect, one per lease.
    pub fn handle_acked(
        &mut self,
        now: Instant,
        results: impl IntoIterator<Item = (LeaseId, SettleResult)>,
    ) {
        // Answers are about sends already made: apply them before timers re-send anything.
        self.now = self.now.max(now);
        for (id, result) in results {
            self.settled(id, result, |op| matches!(op, Settle::Ack));
        }
        self.begin(now);
        self.finish();
    }

    /// Result of a `Release` effect.
    pub fn handle_released(&mut self, now: Instant, lease: LeaseId, result: SettleResult) {
        self.now = self.now.max(now);
        self.settled(lease, result, |op| matches!(op, Settle::Release(_)));
        self.begin(now);
        self.finish();
    }

    /// Result of a `DeadLetter` effect.
    pub fn handle_dead_lettered(&mut self, now: Instant, lease: LeaseId, result: SettleResult) {
        self.now = self.now.max(now);
        self.settled(lease, result, |op| matches!(op, Settle::DeadLetter(_)));
        self.begin(now);
        self.finish();
    }

    /// Begin shutdown: fetch nothing more; release waiting leases at once (delay 0); let running
    /// invocations finish until `deadline`, then cancel and release them. `Effect::Drained`
    /// follows once no lease is held. A second call can only bring the deadline forward.
    pub fn handle_shutdown(&mut self, now: Instant, deadline: Instant) {
        self.begin(now);
        if let Some(shutdown) = &mut self.shutdown {
            if !shutdown.cancelled_running {
                shutdown.deadline = shutdown.deadline.min(deadline);
            }
        } else {
            self.shutdown = Some(Shutdown {
                deadline,
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
                .map(|(id, l)| (id, l.state.clone()))
                .collect();
            for (id, state) in waiting {
                match state {
                    State::Settling { op, .. } => self.settle(id, op),
                    _ => self.settle(id, Settle::Release(Duration::ZERO)),
                }
            }
        }
        self.advance();
        self.finish();
    }

    // ----- internals -----------------------------------------------------------------------

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    fn begin(&mut self, now: Instant) {
        self.now = self.now.max(now);
        self.fetch_due = true;
        self.advance();
    }

    fn renewable(&self) -> usize {
        self.held - self.releasing
    }

    /// How many more messages a fetch may bring: free slots that are not promised to ready or
    /// blocked re-runs or to outstanding fetches, within the lease budget.
    fn fetch_budget(&self) -> usize {
        let slots = self
            .cfg
            .concurrency
            .saturating_sub(self.running + self.ready.live + self.blocked + self.reserved);
        let leases = self
            .cfg
            .max_leases
            .saturating_sub(self.held + self.reserved);
        slots.min(leases)
    }

    /// Runs every timer that is due at `self.now`.
    fn advance(&mut self) {
        let now = self.now;
        // Local expiry first, so nothing below acts on a lease that may have lapsed. Nothing
        // can have lapsed before the oldest confirming epoch's deadline.
        let ttl = self.cfg.lease_ttl();
        let lapsing = self
            .epochs
            .oldest_live()
            .is_some_and(|(_, sent)| sent + ttl <= now);
        if let Some(cutoff) = now.checked_sub(ttl).filter(|_| lapsing) {
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
        while let Some((due, id, stamp)) = self.deadlines.front() {
            if due > now {
                break;
            }
            self.deadlines.pop_front();
            if self.is_current(id, stamp) {
                self.cancel(id, CancelReason::MaxProcessingTime);
            }
        }
        if let Some(shutdown) = self.shutdown {
            if !shutdown.cancelled_running && shutdown.deadline <= now {
                self.shutdown = Some(Shutdown {
                    cancelled_running: true,
                    ..shutdown
                });
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
        }
        while let Some((due, id, stamp)) = self.repolls.front() {
            if due > now {
                break;
            }
            self.repolls.pop_front();
            if self.is_current(id, stamp) {
                self.set_state(id, State::Ready);
            }
        }
        while let Some((due, id, stamp)) = self.retries.front() {
            if due > now {
                break;
            }
            self.retries.pop_front();
            if self.is_current(id, stamp) {
                if let Some(State::Settling { op, .. }) = self.leases.get(id).map(|l| &l.state) {
                    let op = op.clone();
                    self.settle(id, op);
                }
            }
        }
    }

    /// Ends every input: starts an overdue heartbeat and due re-runs, tidies timers, and
    /// reports `Drained`. Anything an input made due happens here (fetches and acks when the
    /// effects are polled), so `poll_timeout` is never in the past once effects are drained.
    fn finish(&mut self) {
        if self.round.is_none() && self.renew_due.is_some_and(|due| due <= self.now) {
            if self.renewable() > 0 {
                self.start_round();
            } else {
                self.renew_due = None;
            }
        }
        while self.running + self.reserved < self.cfg.concurrency {
            let Some((_, id, stamp)) = self.ready.front() else {
                break;
            };
            self.ready.pop_front();
            if self.is_current(id, stamp) {
                self.start_run(id);
            }
        }
        let leases = &self.leases;
        let is_live = |id: LeaseId, stamp: u32| leases.get(id).is_some_and(|l| l.stamp == stamp);
        for fifo in [
            &mut self.deadlines,
            &mut self.repolls,
            &mut self.retries,
            &mut self.ready,
        ] {
            fifo.prune(is_live);
        }
        self.epochs.prune();
        let idle_sources = self.sources.iter().all(|s| s.outstanding.is_none());
        if self.shutdown.is_some()
            && !self.drained
            && self.held == 0
            && self.running == 0
            && idle_sources
        {
            self.drained = true;
            self.effects.push_back(Effect::Drained);
        }
    }

    /// Sends the acks collected since the last poll as one batch.
    fn flush_acks(&mut self) {
        if self.acks.is_empty() {
            return;
        }
        let mut leases = std::mem::take(&mut self.acks);
        // A lease dropped after its Done (lost, expired) is not acked.
        leases.retain(|id| {
            self.leases.get(*id).is_some_and(|l| {
                matches!(
                    l.state,
                    State::Settling {
                        op: Settle::Ack,
                        in_flight: true,
                        ..
                    }
                )
            })
        });
        if !leases.is_empty() {
            self.effects.push_back(Effect::Ack { leases });
        }
    }

    /// Issues fetches for due sources, sharing the budget round-robin.
    fn fetch(&mut self) {
        if self.shutdown.is_some() {
            return;
        }
        let mut budget = self.fetch_budget();
        if budget == 0 {
            return;
        }
        let now = self.now;
        let is_due = |s: &Source| s.outstanding.is_none() && s.next_at <= now;
        let due = self.sources.iter().filter(|s| is_due(s)).count();
        if due == 0 {
            return;
        }
        // Leave room for waiting re-runs: a fetch may block no longer than the next one is due.
        let until_repoll = (self.repolls.live > 0)
            .then(|| self.repolls.front())
            .flatten()
            .map(|(due, _, _)| due.saturating_duration_since(now));
        let starved = due > budget;
        let mut shares = due.min(budget);
        let n = self.sources.len();
        let start = self.next_source;
        for i in (0..n).map(|k| (start + k) % n) {
            if shares == 0 {
                break;
            }
            if !is_due(&self.sources[i]) {
                continue;
            }
            let max = budget.div_ceil(shares);
            shares -= 1;
            budget -= max;
            let src = &mut self.sources[i];
            let mut wait = if starved { Duration::ZERO } else { src.wait };
            if let Some(until) = until_repoll {
                wait = wait.min(until);
            }
            let epoch = self.epochs.open(now);
            src.outstanding = Some(Outstanding { max, epoch, wait });
            self.reserved += max;
            self.next_source = (i + 1) % n;
            self.effects.push_back(Effect::Fetch {
                source: SourceId(i as u16),
                max,
                wait,
            });
        }
    }

    fn start_round(&mut self) {
        let ids: Vec<LeaseId> = self
            .leases
            .iter()
            .filter(|(_, l)| l.state.is_renewable())
            .map(|(id, _)| id)
            .collect();
        let epoch = self.epochs.open(self.now);
        let seq = self.next_seq();
        let chunks = ids.len().div_ceil(self.cfg.renew_batch_size);
        let first = self.next_renew_id;
        self.next_renew_id += chunks as u64;
        for (i, chunk) in ids.chunks(self.cfg.renew_batch_size).enumerate() {
            self.effects.push_back(Effect::Renew {
                batch: RenewId(first + i as u64),
                leases: chunk.to_vec(),
            });
        }
        self.renew_due = None;
        self.round = Some(Round {
            first,
            answered: vec![false; chunks],
            remaining: chunks,
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
            let hb = self.cfg.heartbeat_interval;
            let mut next = round.sent_at + hb;
            if round.failed {
                next = next.min(self.now + hb / 4);
            }
            self.renew_due = Some(self.renew_due.map_or(next, |d| d.min(next)));
        }
    }

    fn is_current(&self, id: LeaseId, stamp: u32) -> bool {
        self.leases.get(id).is_some_and(|l| l.stamp == stamp)
    }

    fn create(&mut self, source: SourceId, message: Fetched<P>, epoch: u64) -> LeaseId {
        let fence_seq = self.next_seq();
        let state = State::Blocked;
        let id = self.leases.insert(Lease {
            source,
            id: message.id,
            payload: message.payload,
            delivery_count: message.delivery_count,
            fence: message.fence,
            fence_seq,
            attempt: 0,
            epoch,
            stamp: 0,
            state: state.clone(),
        });
        self.enter(id, &state, epoch, 0);
        id
    }

    /// A held message was delivered again: adopt the newer delivery, start nothing.
    fn adopt(&mut self, id: LeaseId, message: Fetched<P>, epoch: u64) {
        self.stats.redelivered += 1;
        let fence_seq = self.next_seq();
        let lease = self.leases.get_mut(id).expect("found");
        lease.fence = message.fence;
        lease.delivery_count = message.delivery_count;
        lease.fence_seq = fence_seq;
        if lease.epoch < epoch {
            let old = std::mem::replace(&mut lease.epoch, epoch);
            self.epochs.remove(old);
            self.epochs.add(epoch);
        }
    }

    fn start_run(&mut self, id: LeaseId) {
        let lease = self.leases.get_mut(id).expect("held");
        lease.attempt += 1;
        let run = lease.attempt;
        self.set_state(id, State::Running { cancelled: None });
        self.stats.runs += 1;
        self.effects.push_back(Effect::Run {
            invocation: InvocationId { lease: id, run },
            lease: id,
        });
    }

    fn cancel(&mut self, id: LeaseId, reason: CancelReason) {
        let Some(lease) = self.leases.get(id) else {
            return;
        };
        if let State::Running { cancelled: None } = lease.state {
            let invocation = InvocationId {
                lease: id,
                run: lease.attempt,
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

    /// Sends (or re-sends) the settle operation for a held lease.
    fn settle(&mut self, id: LeaseId, op: Settle) {
        let sent_seq = self.next_seq();
        let effect = match &op {
            Settle::Ack => {
                self.acks.push(id);
                None
            }
            Settle::Release(delay) => Some(Effect::Release {
                lease: id,
                delay: *delay,
            }),
            Settle::DeadLetter(reason) => Some(Effect::DeadLetter {
                lease: id,
                reason: (**reason).clone(),
            }),
        };
        self.set_state(
            id,
            State::Settling {
                op,
                in_flight: true,
                sent_seq,
            },
        );
        self.effects.extend(effect);
    }

    /// The backend answered a settle operation for `id`.
    fn settled(&mut self, id: LeaseId, result: SettleResult, expected: fn(&Settle) -> bool) {
        let Some(lease) = self.leases.get(id) else {
            return;
        };
        let State::Settling {
            op,
            in_flight: true,
            sent_seq,
        } = &lease.state
        else {
            return;
        };
        if !expected(op) {
            return;
        }
        let (op, sent_seq, refenced) = (op.clone(), *sent_seq, lease.fence_seq > *sent_seq);
        match result {
            SettleResult::Ok => {
                match op {
                    Settle::Ack => self.stats.acked += 1,
                    Settle::Release(_) => self.stats.released += 1,
                    Settle::DeadLetter(_) => self.stats.dead_lettered += 1,
                }
                self.remove(id);
            }
            // Sent with a fence that was replaced meanwhile: try again with the new one, unless
            // the lease lapsed meanwhile (the expiry that follows this answer drops it).
            SettleResult::Lost
                if refenced && self.valid_until(id).is_some_and(|t| t > self.now) =>
            {
                self.settle(id, op)
            }
            SettleResult::Lost if refenced => self.set_state(
                id,
                State::Settling {
                    op,
                    in_flight: false,
                    sent_seq,
                },
            ),
            SettleResult::Lost => {
                self.stats.lost += 1;
                self.remove(id);
            }
            SettleResult::Failed if self.shutdown.is_some_and(|s| s.deadline <= self.now) => {
                self.stats.abandoned += 1;
                self.remove(id);
            }
            SettleResult::Failed => {
                let renewable_due = self.epochs.sent_at(lease.epoch) + self.cfg.heartbeat_interval;
                self.set_state(
                    id,
                    State::Settling {
                        op,
                        in_flight: false,
                        sent_seq,
                    },
                );
                self.renew_due = Some(
                    self.renew_due
                        .map_or(renewable_due, |d| d.min(renewable_due)),
                );
            }
        }
    }

    /// The lease is no longer ours (lost or expired): never act on it again. A running
    /// invocation is cancelled and keeps its slot as an orphan until it reports.
    fn drop_lease(&mut self, id: LeaseId, reason: CancelReason) {
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
            let key = (lease.source, lease.id.clone());
            if cancelled.is_none() {
                self.cancel(id, reason);
            }
            self.leases.unindex(id);
            self.orphans.insert(key, id);
            self.set_state(id, State::Orphaned { successor: None });
        } else {
            self.remove(id);
        }
    }

    /// A cancelled invocation of a lost lease reported: free its slot, unblock its successor.
    fn end_orphan(&mut self, id: LeaseId, successor: Option<LeaseId>) {
        if let Some(lease) = self.leases.get(id) {
            let key = (lease.source, lease.id.clone());
            if self.orphans.get(&key) == Some(&id) {
                self.orphans.remove(&key);
            }
        }
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

    fn remove(&mut self, id: LeaseId) {
        if let Some(lease) = self.leases.get(id) {
            let (state, epoch) = (lease.state.clone(), lease.epoch);
            self.leave(&state, epoch);
            self.leases.remove(id);
        }
    }

    /// Moves a lease to `state`, keeping counters and timers in step.
    fn set_state(&mut self, id: LeaseId, state: State) {
        let lease = self.leases.get_mut(id).expect("known lease");
        lease.stamp = lease.stamp.wrapping_add(1);
        let (stamp, epoch) = (lease.stamp, lease.epoch);
        let old = std::mem::replace(&mut lease.state, state.clone());
        self.leave(&old, epoch);
        self.enter(id, &state, epoch, stamp);
    }

    fn leave(&mut self, state: &State, epoch: u64) {
        if state.is_held() {
            self.held -= 1;
            self.epochs.remove(epoch);
        }
        if state.is_running() {
            self.running -= 1;
        }
        if state.is_releasing() {
            self.releasing -= 1;
        }
        if *state == State::Blocked {
            self.blocked -= 1;
        }
        if let Some(fifo) = self.timers_of(state) {
            fifo.live -= 1;
        }
    }

    fn enter(&mut self, id: LeaseId, state: &State, epoch: u64, stamp: u32) {
        if state.is_held() {
            self.held += 1;
            self.epochs.add(epoch);
        }
        if state.is_running() {
            self.running += 1;
        }
        if state.is_releasing() {
            self.releasing += 1;
        }
        if *state == State::Blocked {
            self.blocked += 1;
        }
        let delay = match state {
            State::Running { cancelled: None } => self.cfg.max_processing_time,
            State::Waiting => self.repoll_delay(id),
            State::Settling {
                in_flight: false, ..
            } => self.cfg.poll_interval,
            _ => Duration::ZERO,
        };
        let due = self.now + delay;
        if let Some(fifo) = self.timers_of(state) {
            fifo.push(due, id, stamp);
        }
    }

    /// `repoll_interval`, except a delivery's first re-poll, which is shortened by a random
    /// fraction (at most `repoll_spread`) so a burst of `Pending` messages is checked spread
    /// over the interval rather than all at one instant; the cadence stays exact afterwards.
    fn repoll_delay(&mut self, id: LeaseId) -> Duration {
        let interval = self.cfg.repoll_interval;
        let first = self.leases.get(id).is_some_and(|l| l.attempt == 1);
        if first && self.cfg.repoll_spread > 0.0 {
            interval.mul_f64(1.0 - self.cfg.repoll_spread * self.rng.next_f64())
        } else {
            interval
        }
    }

    fn timers_of(&mut self, state: &State) -> Option<&mut Timers> {
        match state {
            State::Running { cancelled: None } => Some(&mut self.deadlines),
            State::Waiting => Some(&mut self.repolls),
            State::Ready => Some(&mut self.ready),
            State::Settling {
                in_flight: false, ..
            } => Some(&mut self.retries),
            _ => None,
        }
    }
}
