//! Helpers shared by the engine's integration tests: effect draining and filtering, deliveries,
//! and a small randomized (but seeded, hence reproducible) driver for whole-engine scenarios.
//!
//! Every test starts at `t0` and moves time by hand (`t0 + ms(..)`); the engine is driven through
//! `handle_*` and its effects are drained and compared exactly. The guarantees the tests name are
//! numbered as in the crate docs of `leasehold-core`.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use leasehold_core::{
    CancelReason, Config, DeadLetterReason, Effect, Fence, Fetched, InvocationId, LeaseEngine,
    LeaseId, MessageId, Outcome, RenewId, RenewResult, SettleResult, StreamId,
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
/// (1 s ×2, cap 10 s). Tests override what they exercise.
pub fn config() -> Config {
    Config::default()
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
pub fn engine(config: &Config, t0: Instant) -> LeaseEngine<String> {
    LeaseEngine::new(config, t0).expect("valid test configuration")
}

/// Every effect the engine has queued, in order.
pub fn drain<P>(engine: &mut LeaseEngine<P>) -> Vec<Effect> {
    std::iter::from_fn(|| engine.poll_effect()).collect()
}

/// A first delivery (count 1, fence 1) of message `id`.
pub fn msg(id: u64) -> Fetched<String> {
    delivery(id, 1, 1)
}

/// A delivery of message `id` with the given delivery count and fence.
pub fn delivery(id: u64, delivery_count: u32, fence: u64) -> Fetched<String> {
    Fetched {
        id: id.into(),
        payload: format!("payload {id}"),
        delivery_count,
        fence: Fence(fence),
    }
}

/// `Effect::Fetch` for stream 0.
pub fn fetch(max: usize, wait: Duration) -> Effect {
    Effect::Fetch {
        stream: S0,
        max,
        wait,
    }
}

/// The `Run` effects, as `(invocation, lease)`.
pub fn runs(effects: &[Effect]) -> Vec<(InvocationId, LeaseId)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Run { invocation, lease } => Some((*invocation, *lease)),
            _ => None,
        })
        .collect()
}

/// The one `Run` effect of `effects`; panics unless there is exactly one.
pub fn one_run(effects: &[Effect]) -> (InvocationId, LeaseId) {
    match runs(effects)[..] {
        [run] => run,
        _ => panic!("expected exactly one Run in {effects:?}"),
    }
}

/// The `Fetch` effects, as `(stream, max, wait)`.
pub fn fetches(effects: &[Effect]) -> Vec<(StreamId, usize, Duration)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Fetch { stream, max, wait } => Some((*stream, *max, *wait)),
            _ => None,
        })
        .collect()
}

/// The `Renew` effects, as `(batch, leases)`.
pub fn renews(effects: &[Effect]) -> Vec<(RenewId, Vec<LeaseId>)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Renew { batch, leases } => Some((*batch, leases.clone())),
            _ => None,
        })
        .collect()
}

/// The one `Renew` effect of `effects`; panics unless there is exactly one.
pub fn one_renew(effects: &[Effect]) -> (RenewId, Vec<LeaseId>) {
    let mut all = renews(effects);
    assert_eq!(all.len(), 1, "expected exactly one Renew in {effects:?}");
    all.remove(0)
}

/// The `Ack` effects' lease lists.
pub fn acks(effects: &[Effect]) -> Vec<Vec<LeaseId>> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Ack { leases } => Some(leases.clone()),
            _ => None,
        })
        .collect()
}

/// The `Release` effects, as `(lease, delay)`.
pub fn releases(effects: &[Effect]) -> Vec<(LeaseId, Duration)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Release { lease, delay } => Some((*lease, *delay)),
            _ => None,
        })
        .collect()
}

/// The `Cancel` effects, as `(invocation, reason)`.
pub fn cancels(effects: &[Effect]) -> Vec<(InvocationId, CancelReason)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Cancel { invocation, reason } => Some((*invocation, *reason)),
            _ => None,
        })
        .collect()
}

/// The `DeadLetter` effects, as `(lease, reason)`.
pub fn dead_letters(effects: &[Effect]) -> Vec<(LeaseId, DeadLetterReason)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::DeadLetter { lease, reason } => Some((*lease, reason.clone())),
            _ => None,
        })
        .collect()
}

/// Whether any effect names `lease` (in a Run, Renew, Ack, Release or DeadLetter).
pub fn mentions(effects: &[Effect], lease: LeaseId) -> bool {
    effects.iter().any(|e| match e {
        Effect::Run { lease: l, .. }
        | Effect::Release { lease: l, .. }
        | Effect::DeadLetter { lease: l, .. } => *l == lease,
        Effect::Cancel { invocation, .. } => invocation.lease() == lease,
        Effect::Renew { leases, .. } | Effect::Ack { leases } => leases.contains(&lease),
        Effect::Fetch { .. } | Effect::Drained => false,
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
    /// Every effect, in order.
    pub log: Vec<Effect>,
    /// `poll_timeout()` after each input.
    pub timeouts: Vec<Option<Instant>>,
    /// Inputs after which `poll_timeout()` was not after `now` (guarantee 7).
    pub busy_loops: Vec<String>,
    /// Breaches of guarantees 1 and 2 (concurrency, max_leases, two runs of one message).
    pub violations: Vec<String>,
    fetches: Vec<(StreamId, usize)>,
    runs: Vec<(InvocationId, (StreamId, MessageId))>,
    renews: Vec<(RenewId, Vec<LeaseId>)>,
    acks: Vec<LeaseId>,
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
            log: Vec::new(),
            timeouts: Vec::new(),
            busy_loops: Vec::new(),
            violations: Vec::new(),
            fetches: Vec::new(),
            runs: Vec::new(),
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
                Effect::Run { invocation, lease } => {
                    let l = self.engine.lease(*lease).expect("a run's lease is known");
                    let key = (l.stream(), l.message_id().clone());
                    if self.runs.iter().any(|(_, k)| *k == key) {
                        self.violations.push(format!(
                            "step {} ({input}): second concurrent Run of {key:?}",
                            self.step
                        ));
                    }
                    self.runs.push((*invocation, key));
                    if self.runs.len() > self.concurrency {
                        self.violations.push(format!(
                            "step {} ({input}): {} runs outstanding > concurrency {}",
                            self.step,
                            self.runs.len(),
                            self.concurrency
                        ));
                    }
                }
                Effect::Renew { batch, leases } => self.renews.push((*batch, leases.clone())),
                Effect::Ack { leases } => self.acks.extend(leases.iter().copied()),
                Effect::Release { lease, .. } => self.releases.push(*lease),
                Effect::DeadLetter { lease, .. } => self.dead.push(*lease),
                Effect::Cancel { .. } | Effect::Drained => {}
            }
            self.log.push(effect);
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
                    self.engine.handle_fetch_failed(self.now, stream);
                    return self.after("fetch failed");
                }
                let n = self.rng.below(max as u64 + 1 + u64::from(self.overdeliver));
                let messages = (0..n)
                    .map(|_| {
                        let id = self.rng.below(24);
                        self.next_fence += 1;
                        Fetched {
                            id: id.into(),
                            payload: id,
                            delivery_count: 1 + self.rng.below(5) as u32,
                            fence: Fence(self.next_fence),
                        }
                    })
                    .collect();
                self.engine.handle_fetched(self.now, stream, messages);
                self.after("fetched");
            }
            3..=5 => {
                let mut runs = std::mem::take(&mut self.runs);
                let picked = self.pick(&mut runs);
                self.runs = runs;
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
                    self.engine.handle_renew_failed(self.now, batch);
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
                        let Some(lease) = picked else { return };
                        self.engine.handle_acked(self.now, [(lease, result)]);
                        self.after("acked");
                    }
                    1 => {
                        let mut releases = std::mem::take(&mut self.releases);
                        let picked = self.pick(&mut releases);
                        self.releases = releases;
                        let Some(lease) = picked else { return };
                        self.engine.handle_released(self.now, lease, result);
                        self.after("released");
                    }
                    _ => {
                        let mut dead = std::mem::take(&mut self.dead);
                        let picked = self.pick(&mut dead);
                        self.dead = dead;
                        let Some(lease) = picked else { return };
                        self.engine.handle_dead_lettered(self.now, lease, result);
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
