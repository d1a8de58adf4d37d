//! The [`LeaseEngine`]: a sans-IO state machine for leased, heartbeated message processing.
//!
//! This module holds the engine's state, its outputs, the timer pass every input starts with
//! ([`advance`](LeaseEngine::advance)) and ends with ([`finish`](LeaseEngine::finish)), and the
//! state transitions that keep counters and timers in step. The inputs live by topic:
//! [`fetch`] (deliveries and fetch pacing), [`assign`] (which streams are fetched from),
//! [`heartbeat`] (renew rounds and local expiry) and
//! [`settle`] (outcomes, acks, releases, dead letters, lost leases, shutdown).
//!
//! Time inside the engine is a [`Tick`] (nanoseconds since the instant the engine was created):
//! `Instant`s are converted once per input and back only in `poll_timeout` and `valid_until`.

mod assign;
mod fetch;
mod heartbeat;
mod settle;

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use crate::config::{Config, ConfigError, Settings};
use crate::effect::{Effect, Stats, StreamLoad};
use crate::lease::{Lease, LeaseTable, State};
use crate::timers::{ticks, Entry, Epochs, Fifo, Heap, Rng, Tick, Timers};
use crate::types::{DeadLetterReason, InvocationId, LeaseId, MessageId, StreamId};

/// Per-stream fetch pacing and acks.
#[derive(Debug)]
struct Pacing {
    /// The fetch awaiting its result.
    outstanding: Option<Outstanding>,
    /// No fetch before this instant.
    next_at: Tick,
    /// How long the next fetch may block in the backend (at most `fetch_wait`).
    wait: Tick,
    /// When the stream's next delayed message is due, as its last fetch learned
    /// (`Tick::MAX`: none known): the next fetch comes no later, and blocks no longer.
    due: Tick,
    /// Consecutive failed fetches, for the backoff.
    failures: u32,
    /// A fatal error stopped the stream's intake: it is never fetched from again.
    halted: bool,
    /// The stream is assigned to this engine ([`LeaseEngine::handle_assignment`]): only then
    /// is it fetched from. Its held leases are served either way.
    assigned: bool,
    /// Leases due to be acked, waiting for the next `Ack` of the stream.
    acks: Vec<LeaseId>,
    /// The stream's `Ack` in flight: one at a time, so a backend whose calls take a round trip
    /// gets batches, not one call per message.
    acking: Option<AckInFlight>,
    /// Consecutive `Ack` calls that failed as a whole: the backoff of late acks.
    ack_failures: u32,
    /// Its leases by class: held, running (orphans included), orphaned.
    held: usize,
    running: usize,
    orphaned: usize,
}

impl Pacing {
    /// Whether the stream may be fetched from at all: assigned, not halted, no fetch of it
    /// outstanding (its pacing decides when).
    #[inline]
    fn fetchable(&self) -> bool {
        self.outstanding.is_none() && self.assigned && !self.halted
    }

    /// When the next fetch is due: after the pacing's delay, or when a delayed message is.
    #[inline]
    fn fetch_at(&self) -> Tick {
        self.next_at.min(self.due)
    }

    /// How long a fetch sent at `now` may block: never past a delayed message's due time.
    #[inline]
    fn wait_at(&self, now: Tick) -> Tick {
        self.wait.min(self.due.saturating_sub(now))
    }
}

/// An `Ack` effect awaiting its answer.
#[derive(Debug)]
struct AckInFlight {
    batch: u64,
    /// The sequence number its leases were sent at (their `sent_seq`).
    seq: u64,
    leases: Vec<LeaseId>,
}

/// A fetch awaiting its result.
#[derive(Debug, Clone, Copy)]
struct Outstanding {
    /// How many it may deliver (slots reserved for it).
    max: usize,
    /// Its epoch: its send time confirms what it delivers.
    epoch: u64,
    /// How long the backend was allowed to block.
    wait: Tick,
    /// Sent without waiting because more streams were due than the budget could serve: an
    /// empty answer pauses the stream a poll interval, so the other streams get their turns
    /// instead of a loop of non-blocking fetches.
    starved: bool,
}

/// The renew round in flight: one or more `Renew` chunks sent together.
#[derive(Debug)]
struct Round {
    first: u64,
    answered: Vec<bool>,
    /// The stream of each chunk.
    streams: Vec<StreamId>,
    remaining: usize,
    epoch: u64,
    seq: u64,
    sent_at: Tick,
    failed: bool,
}

#[derive(Debug, Clone, Copy)]
struct Shutdown {
    deadline: Instant,
    deadline_at: Tick,
    cancelled_running: bool,
}

/// The configured durations in ticks.
#[derive(Debug, Clone, Copy)]
struct Durations {
    lease_ttl: Tick,
    heartbeat: Tick,
    /// A quarter heartbeat: how soon a round follows a failed one.
    heartbeat_quarter: Tick,
    poll: Tick,
    /// The longest a fetch may block in the backend: `poll_interval`, but never more than
    /// `heartbeat_interval`. A fetch's deliveries are dated from its send time, so one taken at
    /// the end of a longer wait would arrive with little or none of its lease left; within a
    /// heartbeat it arrives when its first renew is due, as a renewed lease would, and that
    /// renew has the slack every heartbeat has (`claim_timeout - margin - heartbeat`).
    fetch_wait: Tick,
    max_processing_time: Tick,
}

/// What the engine has observed of its handlers and fetches: the inputs of the adaptive
/// prefetch. Each is smoothed (each sample moves it an eighth of the way), in ticks; `None`
/// until the first sample.
#[derive(Debug, Clone, Copy, Default)]
struct Observed {
    /// How long an invocation runs: from its `Run` to its outcome (cancelled ones excluded).
    handler: Option<Tick>,
    /// How long a fetch takes: from its `Fetch` to its answer, sampled only from fetches that
    /// did not wait for new entries (asked not to, or answered full).
    fetch_rtt: Option<Tick>,
    /// An invocation ended since the last fetch was sent: the handler time is fresh evidence.
    /// Without it nothing is fetched ahead, so a worker that was idle (or has just started a
    /// batch) takes no more than its free slots on an estimate that may be stale: when quick
    /// handlers give way to long ones, an idle replica gets the rest.
    fresh: bool,
}

/// How many fetch round trips of work the adaptive prefetch holds: one to cover the fetch in
/// flight, the rest for the jitter of both estimates and of the handlers (measured on Redis:
/// 2 left a quick worker's slots waiting for fetches now and then, 4 matched a hand-tuned
/// prefetch of 3000).
const ROUND_TRIPS_AHEAD: u128 = 4;

/// Moves a smoothed estimate an eighth of the way to `sample` (the first sample is taken as is).
#[inline]
fn smooth(estimate: &mut Option<Tick>, sample: Tick) {
    *estimate = Some(match *estimate {
        None => sample,
        Some(old) if sample >= old => old + (sample - old) / 8,
        Some(old) => old - (old - sample) / 8,
    });
}

/// What a state carries beyond its two bytes, kept beside the slab (see [`State`]).
#[derive(Debug)]
enum Extra {
    /// The delay of a release.
    Release(Duration),
    /// The reason of a dead letter.
    DeadLetter(Box<DeadLetterReason>),
    /// The newer lease of an orphan's message, blocked until the orphan reports.
    Successor(LeaseId),
}

/// The lease engine. See the [crate documentation](crate) for the model and an example.
///
/// `P` is the payload type, opaque to the engine (bytes, a decoded message, `()`...); each `Run`
/// effect carries a clone, so it should be cheap to clone.
pub struct LeaseEngine<P> {
    cfg: Settings,
    durations: Durations,
    /// The instant tick 0 stands for: the `now` the engine was created at.
    base: Instant,
    now: Tick,
    /// Monotonic sequence of fence adoptions and sends, to recognise stale results.
    seq: u64,
    leases: LeaseTable<P>,
    /// Release delays, dead-letter reasons and orphans' successors, by slot.
    extras: hashbrown::HashMap<u32, Extra>,
    /// Invocations still winding down after their lease was lost, by message.
    orphans: HashMap<(StreamId, MessageId), LeaseId>,
    streams: Vec<Pacing>,
    next_stream: usize,
    /// Slots promised to outstanding fetches.
    reserved: usize,
    held: usize,
    running: usize,
    releasing: usize,
    /// Held leases waiting for an orphaned invocation of their message: they need a slot soon.
    blocked: usize,
    /// Late acks: `Done`s whose lease expired locally before the backend confirmed their ack,
    /// or whose invocation returned within the cancel grace after it (at most `max_leases`).
    late: usize,
    deadlines: Timers<Fifo>,
    repolls: Timers<Heap>,
    retries: Timers<Fifo>,
    /// Retries of late acks, after a backoff that grows while the stream's acks keep failing.
    late_retries: Timers<Heap>,
    ready: Timers<Fifo>,
    epochs: Epochs,
    round: Option<Round>,
    renew_due: Option<Tick>,
    next_renew_id: u64,
    next_ack_id: u64,
    /// A stream has acks due and no `Ack` in flight.
    ack_due: bool,
    /// An input came since fetches were last decided.
    fetch_due: bool,
    effects: VecDeque<Effect<P>>,
    shutdown: Option<Shutdown>,
    drained: bool,
    rng: Rng,
    stats: Stats,
    observed: Observed,
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

/// The effect queue keeps at most this much capacity once drained, so a burst of effects (a
/// fetch of thousands of `Run`s) does not pin its memory.
const EFFECTS_KEPT: usize = 64;

/// What can be read, and what needs no payload: no `Clone` needed.
impl<P> LeaseEngine<P> {
    /// When to call [`handle_timeout`](Self::handle_timeout) next; `None` when only an input
    /// can change anything. Always after the last `now` once effects are drained (no busy loop).
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut next = Tick::MAX;
        let mut any = false;
        let mut consider = |at: Tick| {
            next = next.min(at);
            any = true;
        };
        if let Some(sent) = self.epochs.oldest_live() {
            consider(sent.saturating_add(self.durations.lease_ttl));
        }
        // A queue's front is live once `finish` has pruned it, if the queue has a live entry.
        if self.deadlines.live > 0 {
            if let Some(entry) = self.deadlines.front() {
                consider(entry.due);
            }
        }
        if self.repolls.live > 0 {
            if let Some(entry) = self.repolls.front() {
                consider(entry.due);
            }
        }
        if self.retries.live > 0 {
            if let Some(entry) = self.retries.front() {
                consider(entry.due);
            }
        }
        if self.late_retries.live > 0 {
            if let Some(entry) = self.late_retries.front() {
                consider(entry.due);
            }
        }
        if self.round.is_none() && self.renewable() > 0 {
            if let Some(due) = self.renew_due {
                consider(due);
            }
        }
        if let Some(shutdown) = self.shutdown {
            if !shutdown.cancelled_running {
                // The deadline is compared as the caller's `Instant`, which may lie outside the
                // ticks' range (before the engine was created, say).
                let others = any.then(|| self.instant(next));
                return Some(others.map_or(shutdown.deadline, |o| o.min(shutdown.deadline)));
            }
        } else if self.fetch_budget() > 0 {
            for stream in self.streams.iter().filter(|s| s.fetchable()) {
                consider(stream.fetch_at());
            }
        }
        any.then(|| self.instant(next))
    }

    /// The lease `id`, while the engine knows it (held, or its cancelled invocation still runs).
    pub fn lease(&self, id: LeaseId) -> Option<&Lease<P>> {
        self.leases.get(id)
    }

    /// Until when the lease counts as valid locally: the send time of its last successful renew
    /// (or of the fetch that delivered it) plus `claim_timeout - expiry_margin`. `None` once the
    /// lease is not held. A handler checks `now < valid_until` right before a side effect.
    pub fn valid_until(&self, id: LeaseId) -> Option<Instant> {
        self.valid_until_tick(id).map(|t| self.instant(t))
    }

    fn valid_until_tick(&self, id: LeaseId) -> Option<Tick> {
        let lease = self.leases.get(id)?;
        lease
            .state
            .is_held()
            .then(|| self.confirmation_deadline(lease.epoch))
    }

    /// When a lease last confirmed by `epoch` expires locally.
    #[inline]
    fn confirmation_deadline(&self, epoch: u64) -> Tick {
        self.epochs
            .sent_at(epoch)
            .saturating_add(self.durations.lease_ttl)
    }

    /// A lease was confirmed again (its epoch moved): a running invocation learns its new
    /// local expiry.
    #[inline]
    fn confirmed(&mut self, id: LeaseId) {
        let Some(lease) = self.leases.get(id) else {
            return;
        };
        if let State::Running { cancelled: None } = lease.state {
            let invocation = InvocationId {
                lease: id,
                attempt: lease.attempt,
            };
            let until = self.instant(self.confirmation_deadline(lease.epoch));
            self.effects
                .push_back(Effect::LeaseValid { invocation, until });
        }
    }

    /// A fatal error stopped `stream`'s intake: it is never fetched from again. `Halt` is
    /// emitted once, unless shutdown already completed: nothing follows `Drained`.
    fn halt(&mut self, stream: StreamId) {
        if let Some(pacing) = self.streams.get_mut(usize::from(stream.0)) {
            if !std::mem::replace(&mut pacing.halted, true) {
                self.stats.halted += 1;
                if !self.drained {
                    self.effects.push_back(Effect::Halt { stream });
                }
            }
        }
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

    /// Late acks now: `Done`s whose lease expired locally (the backend was unreachable) before
    /// the backend confirmed their ack, or whose cancelled invocation returned within the
    /// cancel grace after the expiry. They are not held; their fenced ack is retried until
    /// the backend answers, and only a takeover (it refuses the ack) lets the work run again.
    pub fn late_acks(&self) -> usize {
        self.late
    }

    /// What `stream` occupies now (all zero for a stream the engine does not have).
    pub fn load(&self, stream: StreamId) -> StreamLoad {
        self.streams
            .get(usize::from(stream.0))
            .map_or_else(StreamLoad::default, |s| StreamLoad {
                held: s.held,
                running: s.running,
                waiting: s.held - (s.running - s.orphaned),
            })
    }

    /// Whether shutdown has completed (`Effect::Drained` was emitted).
    pub fn is_drained(&self) -> bool {
        self.drained
    }

    // ----- time ----------------------------------------------------------------------------

    /// `at` in engine ticks (before the engine's creation counts as its creation).
    #[inline]
    fn tick(&self, at: Instant) -> Tick {
        ticks(at.saturating_duration_since(self.base))
    }

    /// The instant of tick `at`.
    fn instant(&self, at: Tick) -> Instant {
        self.base + Duration::from_nanos(at)
    }

    /// Moves the engine clock to `now` (never backwards).
    #[inline]
    fn set_now(&mut self, now: Instant) {
        self.now = self.now.max(self.tick(now));
    }

    fn renewable(&self) -> usize {
        self.held - self.releasing
    }

    /// Whether a held lease may have lapsed by now: nothing can have lapsed before the oldest
    /// confirming epoch's deadline.
    #[inline]
    fn lapsing(&self) -> bool {
        self.epochs
            .oldest_live()
            .is_some_and(|sent| sent.saturating_add(self.durations.lease_ttl) <= self.now)
    }

    /// The prefetch in force now: the configured one, or the adaptive one (see
    /// [`Config::prefetch`](crate::Config::prefetch)), which depends only on the instants of
    /// the inputs so far.
    ///
    /// Adaptive: `4 × concurrency × fetch_rtt / handler`, at most the ceiling
    /// ([`Settings::prefetch`]), 0 until both a handler time and a fetch round trip were
    /// observed. `handler` is the smoothed handler time, but never less than the age of the
    /// oldest running invocation: handlers that turned long hold nothing more ahead before
    /// the first of them ends. By Little's law, slots kept busy at `concurrency / handler`
    /// messages a second drain `concurrency × fetch_rtt / handler` while the next fetch
    /// travels; four times that absorbs the jitter of both. A prefetched message so waits
    /// about four round trips for a slot: long handlers get none. A fetch asks for it only if an
    /// invocation ended since the last fetch was sent (fresh evidence of the handler time).
    pub fn prefetch(&self) -> usize {
        if !self.cfg.adaptive_prefetch {
            return self.cfg.prefetch;
        }
        let (Some(handler), Some(rtt)) = (self.observed.handler, self.observed.fetch_rtt) else {
            return 0;
        };
        // The oldest running invocation (the deadlines are in start order, pruned from the
        // front whenever one goes stale).
        let age = match self.deadlines.front() {
            Some(entry) if self.deadlines.live > 0 => self
                .now
                .saturating_sub(entry.due.saturating_sub(self.durations.max_processing_time)),
            _ => 0,
        };
        let handler = u128::from(handler.max(age).max(1));
        let wanted = ROUND_TRIPS_AHEAD * self.cfg.concurrency as u128 * u128::from(rtt) / handler;
        wanted.min(self.cfg.prefetch as u128) as usize
    }

    /// Whether a ready lease may start: a slot is free and not promised to an outstanding
    /// fetch. Only the part of a fetch's reservation beyond the prefetch's ceiling is promised
    /// to slots: what it brings beyond the free slots waits, ready, anyway. Not beyond the
    /// adaptive prefetch as it is now: it may have shrunk since the fetch was sent, and a
    /// fetch that blocks for new entries would then keep a slot idle up to its whole wait
    /// while a message in hand waits for one.
    fn slot_free(&self) -> bool {
        self.running + self.reserved.saturating_sub(self.cfg.prefetch) < self.cfg.concurrency
    }

    /// How many more messages a fetch may bring: free slots (and prefetch room) that are not
    /// promised to ready or blocked invocations or to outstanding fetches, within the lease budget.
    /// An adaptive prefetch counts only while an invocation ended since the last fetch was sent.
    pub(super) fn fetch_budget(&self) -> usize {
        let ahead = if self.observed.fresh || !self.cfg.adaptive_prefetch {
            self.prefetch()
        } else {
            0
        };
        let slots = self
            .cfg
            .concurrency
            .saturating_add(ahead)
            .saturating_sub(self.running + self.ready.live + self.blocked + self.reserved);
        let leases = self
            .cfg
            .max_leases
            .saturating_sub(self.held + self.reserved);
        slots.min(leases)
    }
}

impl<P: Clone> LeaseEngine<P> {
    /// An engine serving one stream, starting at `now`.
    pub fn new(config: &Config, now: Instant) -> Result<Self, ConfigError> {
        Self::with_streams(config, 1, now)
    }

    /// An engine serving `streams` streams with one shared concurrency budget;
    /// they are numbered `StreamId(0)..StreamId(streams - 1)`.
    pub fn with_streams(config: &Config, streams: u16, now: Instant) -> Result<Self, ConfigError> {
        let cfg = config.validate()?;
        if streams == 0 {
            return Err(ConfigError::NoStreams);
        }
        let durations = Durations {
            lease_ttl: ticks(cfg.lease_ttl()),
            heartbeat: ticks(cfg.heartbeat_interval),
            heartbeat_quarter: ticks(cfg.heartbeat_interval / 4),
            poll: ticks(cfg.poll_interval),
            fetch_wait: ticks(cfg.max_fetch_wait()),
            max_processing_time: ticks(cfg.max_processing_time),
        };
        let stream = || Pacing {
            outstanding: None,
            next_at: 0,
            wait: durations.fetch_wait,
            due: Tick::MAX,
            failures: 0,
            halted: false,
            assigned: true,
            acks: Vec::new(),
            acking: None,
            ack_failures: 0,
            held: 0,
            running: 0,
            orphaned: 0,
        };
        let mut engine = Self {
            rng: Rng::new(cfg.seed),
            cfg,
            durations,
            base: now,
            now: 0,
            seq: 0,
            leases: LeaseTable::new(),
            extras: hashbrown::HashMap::new(),
            orphans: HashMap::new(),
            streams: (0..streams).map(|_| stream()).collect(),
            next_stream: 0,
            reserved: 0,
            held: 0,
            running: 0,
            releasing: 0,
            blocked: 0,
            late: 0,
            deadlines: Timers::default(),
            repolls: Timers::default(),
            retries: Timers::default(),
            late_retries: Timers::default(),
            ready: Timers::default(),
            epochs: Epochs::default(),
            round: None,
            renew_due: None,
            next_renew_id: 0,
            next_ack_id: 0,
            ack_due: false,
            fetch_due: true,
            effects: VecDeque::new(),
            shutdown: None,
            drained: false,
            stats: Stats::default(),
            observed: Observed::default(),
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
    #[inline]
    pub fn poll_effect(&mut self) -> Option<Effect<P>> {
        if let Some(effect) = self.effects.pop_front() {
            return Some(effect);
        }
        if self.fetch_due || self.ack_due {
            if let Some(effect) = self.poll_decided() {
                return Some(effect);
            }
        }
        if self.effects.capacity() > EFFECTS_KEPT {
            self.effects.shrink_to(EFFECTS_KEPT);
        }
        None
    }

    /// The queue is empty: decide fetches, else send the acks collected.
    fn poll_decided(&mut self) -> Option<Effect<P>> {
        if std::mem::take(&mut self.fetch_due) {
            if let Some(effect) = self.fetch().or_else(|| self.effects.pop_front()) {
                return Some(effect);
            }
        }
        if std::mem::take(&mut self.ack_due) {
            self.ack_batches();
        }
        self.effects.pop_front()
    }

    // ----- inputs (the others are in fetch.rs, heartbeat.rs and settle.rs) -----------------

    /// Timers may be due: call when [`poll_timeout`](Self::poll_timeout) has passed.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.begin(now);
        self.finish();
    }

    // ----- the pass around every input -----------------------------------------------------

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// A lease needs renewing by `due`: the next heartbeat comes no later.
    #[inline]
    fn renew_by(&mut self, due: Tick) {
        self.renew_due = Some(self.renew_due.map_or(due, |d| d.min(due)));
    }

    /// Starts an input at `now`: runs the timers due by then.
    #[inline]
    fn begin(&mut self, now: Instant) {
        self.set_now(now);
        self.begin_now();
    }

    /// Starts an input whose `now` was already applied with [`set_now`](Self::set_now).
    #[inline]
    fn begin_now(&mut self) {
        self.fetch_due = true;
        self.advance();
    }

    /// Runs every timer that is due at `self.now`.
    #[inline(always)]
    fn advance(&mut self) {
        let now = self.now;
        let due = |front: Option<Entry>| front.is_some_and(|e| e.due <= now);
        if self.lapsing()
            || due(self.deadlines.front())
            || self
                .shutdown
                .is_some_and(|s| !s.cancelled_running && s.deadline_at <= now)
            || due(self.repolls.front())
            || due(self.retries.front())
            || due(self.late_retries.front())
        {
            self.run_due_timers();
        }
    }

    fn run_due_timers(&mut self) {
        let now = self.now;
        // Local expiry first, so nothing below acts on a lease that may have lapsed.
        if self.lapsing() {
            self.expire(now - self.durations.lease_ttl);
        }
        while let Some(entry) = self.deadlines.pop_due(now) {
            if let Some(id) = self.leases.current(entry.slot, entry.stamp) {
                self.cancel(id, crate::CancelReason::MaxProcessingTime);
            }
        }
        if let Some(shutdown) = self.shutdown {
            if !shutdown.cancelled_running && shutdown.deadline_at <= now {
                self.shutdown_deadline_passed();
            }
        }
        while let Some(entry) = self.repolls.pop_due(now) {
            if let Some(id) = self.leases.current(entry.slot, entry.stamp) {
                self.set_state(id, State::Ready);
            }
        }
        while let Some(entry) = self.retries.pop_due(now) {
            if let Some(id) = self.leases.current(entry.slot, entry.stamp) {
                if let State::Settling { op, .. } = self.leases.get(id).expect("current").state {
                    self.send_settle(id, op);
                }
            }
        }
        while let Some(entry) = self.late_retries.pop_due(now) {
            if let Some(id) = self.leases.current(entry.slot, entry.stamp) {
                self.send_late(id);
            }
        }
    }

    /// Ends every input: starts an overdue heartbeat and due re-invocations, tidies timers, and
    /// reports `Drained`. Anything an input made due happens here (fetches and acks when the
    /// effects are polled), so `poll_timeout` is never in the past once effects are drained.
    #[inline(always)]
    fn finish(&mut self) {
        let heartbeat_due = self.round.is_none() && self.renew_due.is_some_and(|d| d <= self.now);
        if heartbeat_due
            || self.ready.front().is_some()
            || self.deadlines.has_stale()
            || self.repolls.has_stale()
            || self.retries.has_stale()
            || self.late_retries.has_stale()
            || self.epochs.has_dead_front()
            || self.shutdown.is_some()
        {
            self.finish_slow();
        }
    }

    /// [`finish`](Self::finish) when there is something to do.
    fn finish_slow(&mut self) {
        if self.round.is_none() && self.renew_due.is_some_and(|due| due <= self.now) {
            self.heartbeat_due();
        }
        let leases = &self.leases;
        let is_live = |slot: u32, stamp: u32| leases.current(slot, stamp).is_some();
        // First: the adaptive prefetch reads the oldest running one.
        self.deadlines.prune(is_live);
        if self.ready.front().is_some() && self.slot_free() {
            self.start_ready();
        }
        let leases = &self.leases;
        let is_live = |slot: u32, stamp: u32| leases.current(slot, stamp).is_some();
        self.repolls.prune(is_live);
        self.retries.prune(is_live);
        self.late_retries.prune(is_live);
        self.ready.prune(is_live);
        self.epochs.prune();
        if self.shutdown.is_some()
            && !self.drained
            && self.held == 0
            && self.running == 0
            && self.late == 0
            && self.streams.iter().all(|s| s.outstanding.is_none())
        {
            self.drained = true;
            self.effects.push_back(Effect::Drained);
        }
    }

    fn heartbeat_due(&mut self) {
        if self.renewable() > 0 {
            self.start_round();
        } else {
            self.renew_due = None;
        }
    }

    /// Starts ready leases (re-invocations, prefetched messages) while invocation slots are free.
    fn start_ready(&mut self) {
        while self.slot_free() {
            let Some(entry) = self.ready.front() else {
                break;
            };
            self.ready.pop_front();
            if let Some(id) = self.leases.current(entry.slot, entry.stamp) {
                self.start_run(id);
            }
        }
    }

    // ----- state transitions ---------------------------------------------------------------

    /// Moves a lease to `state`, keeping counters and timers in step.
    #[inline(always)]
    fn set_state(&mut self, id: LeaseId, state: State) {
        let (old, epoch, stamp, stream) = self.leases.set_state(id, state);
        self.tally(stream, Some(old), Some(state));
        // Held and running counts (and the epoch's) change only when the state's class does.
        match (old.is_held(), state.is_held()) {
            (true, false) => {
                self.held -= 1;
                self.epochs.remove(epoch);
            }
            (false, true) => {
                self.held += 1;
                self.epochs.add(epoch);
            }
            _ => {}
        }
        self.running =
            self.running + usize::from(state.is_running()) - usize::from(old.is_running());
        self.leave_timers(old, id.slot, stamp.wrapping_sub(1));
        self.enter_timers(id, state, stamp);
    }

    /// Moves a lease of `stream` from state `from` to state `to` in its stream's load (`None`:
    /// the lease is created, or removed). Most transitions keep the class: nothing to count.
    #[inline(always)]
    fn tally(&mut self, stream: StreamId, from: Option<State>, to: Option<State>) {
        let class = |s: Option<State>| {
            s.map_or((0, 0, 0), |s| {
                (
                    usize::from(s.is_held()),
                    usize::from(s.is_running()),
                    usize::from(s == State::Orphaned),
                )
            })
        };
        let (old, new) = (class(from), class(to));
        if old != new {
            let pacing = &mut self.streams[usize::from(stream.0)];
            pacing.held = pacing.held + new.0 - old.0;
            pacing.running = pacing.running + new.1 - old.1;
            pacing.orphaned = pacing.orphaned + new.2 - old.2;
        }
    }

    /// A lease in `slot` with `stamp` leaves `state` for good (it is removed).
    #[inline(always)]
    fn leave(&mut self, state: State, epoch: u64, slot: u32, stamp: u32) {
        if state.is_held() {
            self.held -= 1;
            self.epochs.remove(epoch);
        }
        if state.is_running() {
            self.running -= 1;
        }
        self.leave_timers(state, slot, stamp);
    }

    /// A new lease enters `state`.
    #[inline(always)]
    fn enter(&mut self, id: LeaseId, stream: StreamId, state: State, epoch: u64, stamp: u32) {
        self.tally(stream, None, Some(state));
        if state.is_held() {
            self.held += 1;
            self.epochs.add(epoch);
        }
        if state.is_running() {
            self.running += 1;
        }
        self.enter_timers(id, state, stamp);
    }

    /// The per-state counts and timers of leaving `state` (entered with `stamp` by the lease in
    /// `slot`): its timer entry turns stale.
    #[inline(always)]
    fn leave_timers(&mut self, state: State, slot: u32, stamp: u32) {
        match state {
            State::Running { cancelled: None } => self.deadlines.forget(slot, stamp),
            State::Waiting => self.repolls.forget(slot, stamp),
            State::Ready => self.ready.forget(slot, stamp),
            State::Blocked => self.blocked -= 1,
            State::Settling {
                in_flight: false, ..
            } => self.retries.forget(slot, stamp),
            State::Late { in_flight, .. } => {
                self.late -= 1;
                if !in_flight {
                    self.late_retries.forget(slot, stamp);
                }
            }
            _ if state.is_releasing() => self.releasing -= 1,
            _ => {}
        }
    }

    /// The per-state counts and timers of entering `state` with `stamp`.
    #[inline(always)]
    fn enter_timers(&mut self, id: LeaseId, state: State, stamp: u32) {
        let now = self.now;
        match state {
            State::Running { cancelled: None } => {
                let due = now.saturating_add(self.durations.max_processing_time);
                self.deadlines.push(due, id.slot, stamp);
            }
            State::Waiting => self.schedule_repoll(id, stamp),
            State::Ready => self.ready.push(now, id.slot, stamp),
            State::Blocked => self.blocked += 1,
            State::Settling {
                in_flight: false, ..
            } => {
                let due = now.saturating_add(self.durations.poll);
                self.retries.push(due, id.slot, stamp);
            }
            State::Late { in_flight, .. } => {
                self.late += 1;
                if !in_flight {
                    let due = now.saturating_add(self.late_backoff(id));
                    self.late_retries.push(due, id.slot, stamp);
                }
            }
            _ if state.is_releasing() => self.releasing += 1,
            _ => {}
        }
    }

    /// How long a late ack waits before it is sent again: `poll_interval` after its stream's
    /// `Ack` calls were answered (the backend refused nothing; it failed this one), doubling
    /// with every consecutive `Ack` call that failed as a whole, up to `fetch_backoff_max`, so
    /// an unreachable backend is not hammered; `poll_interval` during shutdown, which waits
    /// for them.
    #[inline(never)]
    fn late_backoff(&self, id: LeaseId) -> Tick {
        let poll = self.durations.poll;
        let Some(lease) = self.leases.get(id) else {
            return poll;
        };
        let failures = self.streams[usize::from(lease.stream.0)].ack_failures;
        if self.shutdown.is_some() || failures <= 1 {
            return poll;
        }
        let factor = 1u64 << (failures - 1).min(20);
        poll.saturating_mul(factor)
            .min(ticks(self.cfg.fetch_backoff_max))
    }

    #[inline(never)]
    fn schedule_repoll(&mut self, id: LeaseId, stamp: u32) {
        let due = self.now.saturating_add(self.repoll_delay(id));
        self.repolls.push(due, id.slot, stamp);
    }

    /// `repoll_interval`, except a delivery's first re-poll, which is shortened by a random
    /// fraction (at most `repoll_spread`) so a burst of `Pending` messages is checked spread
    /// over the interval rather than all at one instant; the cadence stays exact afterwards.
    fn repoll_delay(&mut self, id: LeaseId) -> Tick {
        let interval = self.cfg.repoll_interval;
        let first = self.leases.get(id).is_some_and(|l| l.attempt == 1);
        if first && self.cfg.repoll_spread > 0.0 {
            ticks(interval.mul_f64(1.0 - self.cfg.repoll_spread * self.rng.next_f64()))
        } else {
            ticks(interval)
        }
    }

    /// Removes a lease and what it carries beside the slab.
    #[inline(always)]
    fn remove(&mut self, id: LeaseId) {
        if let Some((state, epoch, stamp, stream)) = self.leases.remove(id) {
            self.tally(stream, Some(state), None);
            self.leave(state, epoch, id.slot, stamp);
            if state.has_extra() {
                self.extras.remove(&id.slot);
            }
        }
    }
}
