//! Helpers shared by the engine's integration tests: effect draining and filtering, deliveries,
//! and a small randomized (but seeded, hence reproducible) driver for whole-engine scenarios.
//!
//! Every test starts at `t0` and moves time by hand (`t0 + ms(..)`); the engine is driven through
//! `handle_*` and its effects are drained and compared exactly. The guarantees the tests name are
//! numbered as in the crate docs of `leasehold-core`.
#![allow(dead_code)]

use std::collections::HashMap;
use std::time::{Duration, Instant};

use leasehold_core::{
    AckId, CancelReason, Config, DeadLetterReason, Effect, ErrorKind, Fence, Fetched, InvocationId,
    LeaseEngine, LeaseId, MessageId, Outcome, RenewId, RenewResult, SettleResult, StreamId,
};

/// `n` milliseconds.
pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// `n` seconds.
pub fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// The only stream of a single-stream engine.
pub const S0: StreamId = StreamId(0);

/// A small, fast configuration: claim 3 s, heartbeat 1 s, margin 300 ms (lease valid 2.7 s after
/// the send time of its last confirmation), poll 1 s, re-poll 400 ms, no retry jitter
/// (1 s ×2, cap 10 s), nothing fetched ahead (a fixed prefetch of 0: fetch sizes follow the
/// free slots alone; `tests/adaptive.rs` exercises the adaptive default). Tests override what
/// they exercise.
pub fn config() -> Config {
    Config::default()
        .prefetch(0)
        .claim_timeout(secs(3))
        .heartbeat_interval(ms(1000))
        .expiry_margin(ms(300))
        .poll_interval(ms(1000))
        .repoll_interval(ms(400))
        .retry(leasehold_core::RetryPolicy {
            initial: secs(1),
            multiplier: 2.0,
            max: secs(10),
            jitter: 0.0,
        })
}

/// Builds an engine, asserting the configuration is valid.
pub fn engine(config: &Config, t0: Instant) -> TestEngine {
    TestEngine::new(LeaseEngine::new(config, t0).expect("valid test configuration"))
}

/// An engine serving `streams` streams, asserting the configuration is valid.
pub fn engine_with_streams(config: &Config, streams: u16, t0: Instant) -> TestEngine {
    TestEngine::new(LeaseEngine::with_streams(config, streams, t0).expect("valid test config"))
}

/// The engine under test, with the bookkeeping a driver keeps: which ack batch each lease was
/// sent in, so a test answers acks by lease. Every engine method is reachable through `Deref`;
/// the few defined here answer the way a driver does (a whole ack batch, a transient failure).
pub struct TestEngine {
    engine: LeaseEngine<String>,
    /// The ack batch each lease was last sent in.
    ack_batch: HashMap<LeaseId, AckId>,
}

impl TestEngine {
    fn new(engine: LeaseEngine<String>) -> Self {
        Self {
            engine,
            ack_batch: HashMap::new(),
        }
    }

    /// The next effect, noting the batch of an `Ack`.
    pub fn poll_effect(&mut self) -> Option<Effect<String>> {
        let effect = self.engine.poll_effect()?;
        if let Effect::Ack { batch, leases, .. } = &effect {
            for id in leases {
                self.ack_batch.insert(*id, *batch);
            }
        }
        Some(effect)
    }

    /// Answers acks by lease: each lease's answer goes to the batch it was sent in (one
    /// `handle_acked` per batch, in the order the batches first appear).
    pub fn handle_acked(
        &mut self,
        now: Instant,
        results: impl IntoIterator<Item = (LeaseId, SettleResult)>,
    ) {
        let mut batches: Vec<(AckId, Vec<(LeaseId, SettleResult)>)> = Vec::new();
        for (id, result) in results {
            let batch = *self
                .ack_batch
                .get(&id)
                .unwrap_or_else(|| panic!("{id:?} was never in an Ack"));
            match batches.iter_mut().find(|(b, _)| *b == batch) {
                Some((_, answers)) => answers.push((id, result)),
                None => batches.push((batch, vec![(id, result)])),
            }
        }
        for (batch, answers) in batches {
            self.engine.handle_acked(now, batch, answers);
        }
    }

    /// The batch of the latest `Ack` polled.
    pub fn last_ack_batch(&self) -> Option<AckId> {
        self.ack_batch.values().max().copied()
    }

    /// A release's answer from the backend.
    pub fn handle_released(&mut self, now: Instant, lease: LeaseId, result: SettleResult) {
        self.engine.handle_released(now, lease, Ok(result));
    }

    /// A dead-letter's answer from the backend.
    pub fn handle_dead_lettered(&mut self, now: Instant, lease: LeaseId, result: SettleResult) {
        self.engine.handle_dead_lettered(now, lease, Ok(result));
    }

    /// A fetch that failed transiently.
    pub fn handle_fetch_failed(&mut self, now: Instant, stream: StreamId) {
        self.engine
            .handle_fetch_failed(now, stream, ErrorKind::Transient);
    }

    /// The ack call `batch` failed.
    pub fn handle_ack_failed(&mut self, now: Instant, batch: AckId, kind: ErrorKind) {
        self.engine.handle_ack_failed(now, batch, kind);
    }

    /// A renew call that failed transiently.
    pub fn handle_renew_failed(&mut self, now: Instant, batch: RenewId) {
        self.engine
            .handle_renew_failed(now, batch, ErrorKind::Transient);
    }
}

impl std::ops::Deref for TestEngine {
    type Target = LeaseEngine<String>;
    fn deref(&self) -> &Self::Target {
        &self.engine
    }
}

impl std::ops::DerefMut for TestEngine {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.engine
    }
}

/// An effect as the tests compare it: what it names, without what it carries for the backend
/// (lease refs, payload, the stream of a renew or ack) and without the notices `LeaseValid`,
/// `Failed` and `Lost` (see [`drain_all`] for every effect as it is).
#[derive(Debug, Clone, PartialEq)]
pub enum Seen {
    Fetch {
        stream: StreamId,
        max: usize,
        wait: Duration,
    },
    Run {
        invocation: InvocationId,
        lease: LeaseId,
    },
    Cancel {
        invocation: InvocationId,
        reason: CancelReason,
    },
    Renew {
        batch: RenewId,
        leases: Vec<LeaseId>,
    },
    Ack {
        leases: Vec<LeaseId>,
    },
    Release {
        lease: LeaseId,
        delay: Duration,
    },
    DeadLetter {
        lease: LeaseId,
        reason: DeadLetterReason,
    },
    Halt {
        stream: StreamId,
    },
    Drained,
}

impl Seen {
    fn of(effect: &Effect<String>) -> Option<Self> {
        Some(match effect {
            Effect::Fetch { stream, max, wait } => Seen::Fetch {
                stream: *stream,
                max: *max,
                wait: *wait,
            },
            Effect::Run(invocation) => Seen::Run {
                invocation: invocation.id,
                lease: invocation.id.lease(),
            },
            Effect::Cancel { invocation, reason } => Seen::Cancel {
                invocation: *invocation,
                reason: *reason,
            },
            Effect::LeaseValid { .. } | Effect::Failed { .. } | Effect::Lost { .. } => return None,
            Effect::Renew { batch, leases, .. } => Seen::Renew {
                batch: *batch,
                leases: leases.clone(),
            },
            Effect::Ack { leases, .. } => Seen::Ack {
                leases: leases.clone(),
            },
            Effect::Release { lease, delay, .. } => Seen::Release {
                lease: *lease,
                delay: *delay,
            },
            Effect::DeadLetter { lease, reason, .. } => Seen::DeadLetter {
                lease: *lease,
                reason: reason.clone(),
            },
            Effect::Halt { stream } => Seen::Halt { stream: *stream },
            Effect::Drained => Seen::Drained,
        })
    }
}

/// Every effect the engine has queued, in order, as the tests compare them ([`Seen`]).
pub fn drain(engine: &mut TestEngine) -> Vec<Seen> {
    drain_all(engine).iter().filter_map(Seen::of).collect()
}

/// Every effect the engine has queued, in order, as it is.
pub fn drain_all(engine: &mut TestEngine) -> Vec<Effect<String>> {
    std::iter::from_fn(|| engine.poll_effect()).collect()
}

/// A first delivery (count 1, fence 1) of message `id`.
pub fn msg(id: u64) -> Fetched<String> {
    delivery(id, 1, 1)
}

/// A delivery of message `id` with the given delivery count and fence.
pub fn delivery(id: u64, delivery_count: u32, fence: u64) -> Fetched<String> {
    Fetched::new(
        id.into(),
        format!("payload {id}"),
        delivery_count,
        Fence(fence),
    )
}

/// A fetch from stream 0.
pub fn fetch(max: usize, wait: Duration) -> Seen {
    Seen::Fetch {
        stream: S0,
        max,
        wait,
    }
}

/// The `Run` effects, as `(invocation, lease)`.
pub fn runs(effects: &[Seen]) -> Vec<(InvocationId, LeaseId)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Seen::Run { invocation, lease } => Some((*invocation, *lease)),
            _ => None,
        })
        .collect()
}

/// The one `Run` effect of `effects`; panics unless there is exactly one.
pub fn one_run(effects: &[Seen]) -> (InvocationId, LeaseId) {
    match runs(effects)[..] {
        [run] => run,
        _ => panic!("expected exactly one Run in {effects:?}"),
    }
}

/// The `Fetch` effects, as `(stream, max, wait)`.
pub fn fetches(effects: &[Seen]) -> Vec<(StreamId, usize, Duration)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Seen::Fetch { stream, max, wait } => Some((*stream, *max, *wait)),
            _ => None,
        })
        .collect()
}

/// The `Renew` effects, as `(batch, leases)`.
pub fn renews(effects: &[Seen]) -> Vec<(RenewId, Vec<LeaseId>)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Seen::Renew { batch, leases } => Some((*batch, leases.clone())),
            _ => None,
        })
        .collect()
}

/// The one `Renew` effect of `effects`; panics unless there is exactly one.
pub fn one_renew(effects: &[Seen]) -> (RenewId, Vec<LeaseId>) {
    let mut all = renews(effects);
    assert_eq!(all.len(), 1, "expected exactly one Renew in {effects:?}");
    all.remove(0)
}

/// The `Ack` effects' lease lists.
pub fn acks(effects: &[Seen]) -> Vec<Vec<LeaseId>> {
    effects
        .iter()
        .filter_map(|e| match e {
            Seen::Ack { leases } => Some(leases.clone()),
            _ => None,
        })
        .collect()
}

/// The `LeaseValid` effects, as `(invocation, until)`.
pub fn validities(effects: &[Effect<String>]) -> Vec<(InvocationId, Instant)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::LeaseValid { invocation, until } => Some((*invocation, *until)),
            _ => None,
        })
        .collect()
}

/// The `Release` effects, as `(lease, delay)`.
pub fn releases(effects: &[Seen]) -> Vec<(LeaseId, Duration)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Seen::Release { lease, delay } => Some((*lease, *delay)),
            _ => None,
        })
        .collect()
}

/// The `Cancel` effects, as `(invocation, reason)`.
pub fn cancels(effects: &[Seen]) -> Vec<(InvocationId, CancelReason)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Seen::Cancel { invocation, reason } => Some((*invocation, *reason)),
            _ => None,
        })
        .collect()
}

/// The `DeadLetter` effects, as `(lease, reason)`.
pub fn dead_letters(effects: &[Seen]) -> Vec<(LeaseId, DeadLetterReason)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Seen::DeadLetter { lease, reason } => Some((*lease, reason.clone())),
            _ => None,
        })
        .collect()
}

/// Whether any effect names `lease` (in a Run, Renew, Ack, Release or DeadLetter).
pub fn mentions(effects: &[Seen], lease: LeaseId) -> bool {
    effects.iter().any(|e| match e {
        Seen::Run { lease: l, .. }
        | Seen::Release { lease: l, .. }
        | Seen::DeadLetter { lease: l, .. } => *l == lease,
        Seen::Cancel { invocation, .. } => invocation.lease() == lease,
        Seen::Renew { leases, .. } | Seen::Ack { leases } => leases.contains(&lease),
        Seen::Fetch { .. } | Seen::Halt { .. } | Seen::Drained => false,
    })
}

/// The message id of a lease the engine knows.
pub fn message_of<P>(engine: &LeaseEngine<P>, lease: LeaseId) -> MessageId {
    engine
        .lease(lease)
        .expect("lease known to the engine")
        .message_id()
        .clone()
}

/// Asserts guarantee 7 (no busy loop): `poll_timeout()` is `None` or strictly after `now`.
pub fn assert_no_busy_loop<P>(engine: &LeaseEngine<P>, now: Instant) {
    if let Some(at) = engine.poll_timeout() {
        assert!(
            at > now,
            "poll_timeout {:?} is not after now (it is {:?} before or at it)",
            at,
            now.saturating_duration_since(at)
        );
    }
}

// ----- a seeded random driver ------------------------------------------------------------------

/// xorshift64*: the test's own deterministic randomness.
#[derive(Debug, Clone)]
pub struct TestRng(u64);

impl TestRng {
    /// A generator from a non-zero-ized seed.
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    /// A uniform `u64`.
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// True with probability `percent`/100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// A driver that plays backend and handlers at random (from a seed), on virtual time, and
/// records every effect and every breach of guarantees 1, 2 and 7 it observes.
pub struct Sim {
    /// The engine under test.
    pub engine: LeaseEngine<u64>,
    /// The current virtual time.
    pub now: Instant,
    rng: TestRng,
    concurrency: usize,
    max_leases: usize,
    streams: u16,
    /// Every effect, in order.
    pub log: Vec<Effect<u64>>,
    /// `poll_timeout()` after each input.
    pub timeouts: Vec<Option<Instant>>,
    /// Inputs after which `poll_timeout()` was not after `now` (guarantee 7).
    pub busy_loops: Vec<String>,
    /// Breaches of guarantees 1 and 2 (concurrency, max_leases, two invocations of one message).
    pub violations: Vec<String>,
    fetches: Vec<(StreamId, usize)>,
    running: Vec<(InvocationId, (StreamId, MessageId))>,
    renews: Vec<(RenewId, Vec<LeaseId>)>,
    acks: Vec<(AckId, Vec<LeaseId>)>,
    releases: Vec<LeaseId>,
    dead: Vec<LeaseId>,
    next_fence: u64,
    /// Whether fetches may deliver one more message than asked for (default true).
    pub overdeliver: bool,
    shut_down: bool,
    step: usize,
}

impl Sim {
    /// A simulation of `config` on `streams` streams, driven by `seed`.
    pub fn new(config: &Config, streams: u16, seed: u64, t0: Instant) -> Self {
        let engine = LeaseEngine::with_streams(config, streams, t0).expect("valid config");
        let settings = engine.settings().clone();
        let mut sim = Self {
            engine,
            now: t0,
            rng: TestRng::new(seed),
            concurrency: settings.concurrency,
            max_leases: settings.max_leases,
            streams,
            log: Vec::new(),
            timeouts: Vec::new(),
            busy_loops: Vec::new(),
            violations: Vec::new(),
            fetches: Vec::new(),
            running: Vec::new(),
            renews: Vec::new(),
            acks: Vec::new(),
            releases: Vec::new(),
            dead: Vec::new(),
            next_fence: 1,
            overdeliver: true,
            shut_down: false,
            step: 0,
        };
        sim.after("new");
        sim
    }

    fn pick<T>(&mut self, items: &mut Vec<T>) -> Option<T> {
        if items.is_empty() {
            None
        } else {
            let i = self.rng.below(items.len() as u64) as usize;
            Some(items.swap_remove(i))
        }
    }

    /// Drains effects into the log and the outstanding work, then checks the guarantees.
    fn after(&mut self, input: &str) {
        while let Some(effect) = self.engine.poll_effect() {
            match &effect {
                Effect::Fetch { stream, max, .. } => self.fetches.push((*stream, *max)),
                Effect::Run(invocation) => {
                    let key = (invocation.stream, invocation.lease_ref.id.clone());
                    if self.running.iter().any(|(_, k)| *k == key) {
                        self.violations.push(format!(
                            "step {} ({input}): second concurrent Run of {key:?}",
                            self.step
                        ));
                    }
                    self.running.push((invocation.id, key));
                    if self.running.len() > self.concurrency {
                        self.violations.push(format!(
                            "step {} ({input}): {} invocations outstanding > concurrency {}",
                            self.step,
                            self.running.len(),
                            self.concurrency
                        ));
                    }
                }
                Effect::Renew { batch, leases, .. } => self.renews.push((*batch, leases.clone())),
                Effect::Ack { batch, leases, .. } => self.acks.push((*batch, leases.clone())),
                Effect::Release { lease, .. } => self.releases.push(*lease),
                Effect::DeadLetter { lease, .. } => self.dead.push(*lease),
                Effect::Cancel { .. }
                | Effect::LeaseValid { .. }
                | Effect::Failed { .. }
                | Effect::Lost { .. }
                | Effect::Halt { .. }
                | Effect::Drained => {}
            }
            self.log.push(effect);
        }
        let loads: Vec<_> = (0..self.streams)
            .map(|s| self.engine.load(StreamId(s)))
            .collect();
        let held: usize = loads.iter().map(|l| l.held).sum();
        let running: usize = loads.iter().map(|l| l.running).sum();
        if held != self.engine.held() || running != self.engine.running() {
            self.violations.push(format!(
                "step {} ({input}): per-stream loads {loads:?} do not add up to held {} and \
                 running {}",
                self.step,
                self.engine.held(),
                self.engine.running()
            ));
        }
        if self.engine.held() > self.max_leases {
            self.violations.push(format!(
                "step {} ({input}): {} leases held > max_leases {}",
                self.step,
                self.engine.held(),
                self.max_leases
            ));
        }
        let timeout = self.engine.poll_timeout();
        if let Some(at) = timeout {
            if at <= self.now {
                self.busy_loops.push(format!(
                    "step {} ({input}): poll_timeout {:?} before or at now",
                    self.step,
                    self.now.saturating_duration_since(at)
                ));
            }
        }
        self.timeouts.push(timeout);
    }

    /// Performs one random input.
    pub fn step(&mut self) {
        self.step += 1;
        if !self.shut_down && self.step > 1200 && self.rng.chance(2) {
            self.shut_down = true;
            let deadline = self.now + ms(self.rng.below(3000));
            self.engine.handle_shutdown(self.now, deadline);
            return self.after("shutdown");
        }
        // Weights: time 2, fetch answers 2, outcomes 3, renew answers 3, settle answers 3.
        match self.rng.below(13) {
            0 | 1 => {
                // Time passes: to the next timer, or by a random amount.
                let to_timer = self.rng.chance(40);
                self.now = match self.engine.poll_timeout() {
                    Some(at) if to_timer => at.max(self.now),
                    _ => self.now + ms(self.rng.below(150)),
                };
                self.engine.handle_timeout(self.now);
                self.after("timeout");
            }
            2 => {
                let mut fetches = std::mem::take(&mut self.fetches);
                let picked = self.pick(&mut fetches);
                self.fetches = fetches;
                let Some((stream, max)) = picked else { return };
                if self.rng.chance(10) {
                    self.engine
                        .handle_fetch_failed(self.now, stream, ErrorKind::Transient);
                    return self.after("fetch failed");
                }
                let n = self.rng.below(max as u64 + 1 + u64::from(self.overdeliver));
                let messages = (0..n)
                    .map(|_| {
                        let id = self.rng.below(24);
                        self.next_fence += 1;
                        Fetched::new(
                            id.into(),
                            id,
                            1 + self.rng.below(5) as u32,
                            Fence(self.next_fence),
                        )
                    })
                    .collect();
                self.engine.handle_fetched(self.now, stream, messages);
                self.after("fetched");
            }
            3..=5 => {
                let mut running = std::mem::take(&mut self.running);
                let picked = self.pick(&mut running);
                self.running = running;
                let Some((invocation, _)) = picked else {
                    return;
                };
                let outcome = match self.rng.below(10) {
                    0..=3 => Outcome::Done,
                    4..=6 => Outcome::Pending,
                    7 => Outcome::Retry {
                        delay: self.rng.chance(50).then(|| ms(self.rng.below(2000))),
                    },
                    8 => Outcome::Reject {
                        reason: "bad".into(),
                    },
                    _ => Outcome::Failed {
                        error: "boom".into(),
                    },
                };
                self.engine.handle_outcome(self.now, invocation, outcome);
                self.after("outcome");
            }
            6..=8 => {
                let mut renews = std::mem::take(&mut self.renews);
                let picked = self.pick(&mut renews);
                self.renews = renews;
                let Some((batch, leases)) = picked else {
                    return;
                };
                if self.rng.chance(10) {
                    self.engine
                        .handle_renew_failed(self.now, batch, ErrorKind::Transient);
                    return self.after("renew failed");
                }
                let results: Vec<_> = leases
                    .into_iter()
                    .map(|l| {
                        let r = if self.rng.chance(8) {
                            RenewResult::Lost
                        } else {
                            RenewResult::Kept
                        };
                        (l, r)
                    })
                    .collect();
                self.engine.handle_renewed(self.now, batch, results);
                self.after("renewed");
            }
            _ => {
                let result = match self.rng.below(10) {
                    0 => SettleResult::Failed,
                    1 => SettleResult::Lost,
                    _ => SettleResult::Ok,
                };
                match self.rng.below(3) {
                    0 => {
                        let mut acks = std::mem::take(&mut self.acks);
                        let picked = self.pick(&mut acks);
                        self.acks = acks;
                        let Some((batch, leases)) = picked else {
                            return;
                        };
                        let results: Vec<_> = leases.into_iter().map(|id| (id, result)).collect();
                        self.engine.handle_acked(self.now, batch, results);
                        self.after("acked");
                    }
                    1 => {
                        let mut releases = std::mem::take(&mut self.releases);
                        let picked = self.pick(&mut releases);
                        self.releases = releases;
                        let Some(lease) = picked else { return };
                        self.engine.handle_released(self.now, lease, Ok(result));
                        self.after("released");
                    }
                    _ => {
                        let mut dead = std::mem::take(&mut self.dead);
                        let picked = self.pick(&mut dead);
                        self.dead = dead;
                        let Some(lease) = picked else { return };
                        self.engine
                            .handle_dead_lettered(self.now, lease, Ok(result));
                        self.after("dead-lettered");
                    }
                }
            }
        }
    }

    /// Performs `n` random inputs.
    pub fn run(&mut self, n: usize) {
        for _ in 0..n {
            self.step();
        }
    }
}
