//! The [`Harness`]: owns a [`LeaseEngine`], plays a driver and a backend for it step by step,
//! and checks every effect and the state after every input against the reference model.

use std::collections::VecDeque;
use std::ops::Range;
use std::time::{Duration, Instant};

use leasehold_core::{
    Effect, ErrorKind, Fence, Fetched, LeaseEngine, LeaseId, MessageId, Outcome, RenewResult,
    SettleResult, StreamId,
};

use crate::model::{Model, OldSettle, Op, Tag};
use crate::observe::Problems;
use crate::scenario::{
    Finish, Item, Jump, RenewAnswer, Scenario, SettleAnswer, Setup, Step, MAX_ITEMS, POOL,
};
use crate::violation::Violation;

/// Most timeouts one `Wait` may fire before the harness calls it a timer storm.
const MAX_TIMEOUTS_PER_WAIT: usize = 1000;
/// Inputs shown in a violation's history.
const HISTORY: usize = 12;

/// What an input was, for the history.
#[derive(Clone)]
enum Input {
    Start,
    Step(Step),
    Timeout,
    Injected(Effect<Tag>),
}

impl std::fmt::Display for Input {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Input::Start => f.write_str("engine created"),
            Input::Step(step) => write!(f, "{step:?}"),
            Input::Timeout => f.write_str("handle_timeout"),
            Input::Injected(effect) => write!(f, "injected {effect:?}"),
        }
    }
}

/// Drives one engine through a scenario, checking the engine's guarantees after every input.
///
/// Each scenario step becomes one engine input (a `Wait` becomes one `handle_timeout` per
/// `poll_timeout` passed, as a real driver does; a `Burst` several inputs fed back to back).
/// After each input (after the last of a burst) the harness drains every effect, checks it
/// against what the reference model decided, records what is now outstanding (fetches per
/// stream, running invocations, renew chunks, ack batches, releases, dead-letters), then checks
/// the guarantees of `leasehold-core`'s crate docs and the engine's public view (`held`,
/// `running`, `lease`, `valid_until`, `poll_timeout`, `is_drained`, `stats`) against the model.
/// The first drain with a problem ends the run with a [`Violation`] listing every problem found
/// after it.
pub struct Harness {
    engine: LeaseEngine<Tag>,
    model: Model,
    clock: Instant,
    skew: Duration,
    /// Within a burst: whether its first input was given.
    bursting: Option<bool>,
    step: usize,
    next_tag: Tag,
    next_fence: u64,
    next_fresh: u64,
    effects: Vec<Effect<Tag>>,
    history: VecDeque<(usize, Input, Instant, Range<usize>)>,
}

impl std::fmt::Debug for Harness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Harness")
            .field("step", &self.step)
            .field("engine", &self.engine)
            .finish_non_exhaustive()
    }
}

impl Harness {
    /// A harness around a fresh engine configured by `setup`; checks the engine's first effects.
    ///
    /// # Panics
    /// If `setup` does not validate (setups from `Arbitrary` always do).
    pub fn new(setup: &Setup) -> Result<Self, Violation> {
        Self::starting_at(setup, origin())
    }

    /// [`new`](Self::new), the engine created at `origin`: two harnesses started at the same
    /// instant emit equal effects (instants included) for equal inputs.
    pub fn starting_at(setup: &Setup, origin: Instant) -> Result<Self, Violation> {
        let config = setup.config();
        let settings = config
            .validate()
            .unwrap_or_else(|e| panic!("setup {setup:?} does not validate: {e}"));
        let engine = LeaseEngine::with_streams(&config, setup.streams, origin)
            .unwrap_or_else(|e| panic!("setup {setup:?} does not validate: {e}"));
        let mut harness = Self {
            engine,
            model: Model::new(settings, usize::from(setup.streams), origin),
            clock: origin,
            skew: Duration::ZERO,
            bursting: None,
            step: 0,
            next_tag: 0,
            next_fence: 0,
            next_fresh: 0,
            effects: Vec::new(),
            history: VecDeque::new(),
        };
        harness.model.created();
        harness.drain(Input::Start)?;
        Ok(harness)
    }

    /// Every effect the engine emitted so far, in order.
    pub fn effects(&self) -> &[Effect<Tag>] {
        &self.effects
    }

    /// The engine under test.
    pub fn engine(&self) -> &LeaseEngine<u64> {
        &self.engine
    }

    /// Checks `effect` as if the engine had just emitted it after its last input. For tests
    /// that prove the checker reports hand-made violations.
    pub fn inject(&mut self, effect: Effect<Tag>) -> Result<(), Violation> {
        let start = self.effects.len();
        let mut out = Problems::new();
        self.model.observe(&effect, &self.engine, &mut out);
        self.effects.push(effect.clone());
        self.model.check(&self.engine, &mut out);
        self.record(Input::Injected(effect), start);
        self.verdict(out)
    }

    /// Applies an input step (or a burst) with every effect it causes passed through `tamper`
    /// before it is checked: a deliberately wrong engine.
    #[cfg(test)]
    pub(crate) fn apply_tampered(
        &mut self,
        step: &Step,
        tamper: &mut dyn FnMut(Effect<Tag>) -> Vec<Effect<Tag>>,
    ) -> Result<(), Violation> {
        match step {
            Step::Burst(steps) => {
                self.bursting = Some(false);
                for step in steps.iter().filter(|s| s.is_input()) {
                    self.feed_burst(step);
                }
                self.bursting = None;
            }
            step => {
                self.feed(step);
            }
        }
        self.drain_with(Input::Step(step.clone()), tamper)?;
        self.step += 1;
        Ok(())
    }

    /// The model, for tests that make its expectations wrong.
    #[cfg(test)]
    pub(crate) fn model_mut(&mut self) -> &mut Model {
        &mut self.model
    }

    /// Runs the checks of the state again, as after a drain with no effect.
    #[cfg(test)]
    pub(crate) fn recheck(&mut self) -> Result<(), Violation> {
        let mut out = Problems::new();
        self.model.check(&self.engine, &mut out);
        self.verdict(out)
    }

    /// Applies one step and checks everything it caused.
    pub fn apply(&mut self, step: &Step) -> Result<(), Violation> {
        match step {
            Step::Wait(jump) => self.wait(*jump)?,
            Step::Stall(jump) => self.clock += self.span(*jump),
            Step::Wake => self.timeout()?,
            Step::Tick => {
                if let Some(t) = self.engine.poll_timeout() {
                    self.clock = self.clock.max(t);
                    self.timeout()?;
                }
            }
            Step::Skew { back_ms } => self.set_skew(*back_ms),
            Step::Burst(steps) => {
                self.bursting = Some(false);
                for step in steps {
                    match step {
                        Step::Skew { back_ms } => self.set_skew(*back_ms),
                        step if step.is_input() => self.feed_burst(step),
                        // Time passing and nested bursts are not part of a burst.
                        _ => {}
                    }
                }
                self.bursting = None;
                self.drain(Input::Step(step.clone()))?;
            }
            step => {
                self.feed(step);
                self.drain(Input::Step(step.clone()))?;
            }
        }
        self.step += 1;
        Ok(())
    }

    fn set_skew(&mut self, back_ms: u16) {
        self.skew = Duration::from_millis(u64::from(back_ms % 500));
    }

    fn span(&self, jump: Jump) -> Duration {
        let cfg = &self.model.cfg;
        match jump {
            Jump::Tiny(n) => Duration::from_millis(u64::from(n % 4)),
            Jump::Short(n) => cfg.heartbeat_interval * u32::from(n) / 255,
            Jump::Long(n) => cfg.claim_timeout * 2 * u32::from(n) / 255,
        }
    }

    fn wait(&mut self, jump: Jump) -> Result<(), Violation> {
        let span = self.span(jump);
        let target = self.clock + span;
        let mut fired = 0;
        while let Some(t) = self.engine.poll_timeout().filter(|t| *t <= target) {
            fired += 1;
            if fired > MAX_TIMEOUTS_PER_WAIT {
                let detail = format!("more than {MAX_TIMEOUTS_PER_WAIT} timeouts within {span:?}");
                return self.verdict(vec![crate::violation::Problem {
                    rule: crate::violation::Rule::NoBusyLoop,
                    detail,
                }]);
            }
            self.clock = self.clock.max(t);
            self.timeout()?;
        }
        self.clock = target;
        Ok(())
    }

    fn timeout(&mut self) -> Result<(), Violation> {
        let now = self.clock;
        self.model.timeout(now);
        self.engine.handle_timeout(now);
        self.drain(Input::Timeout)
    }

    /// The `now` an input carries: the clock, or older after a `Skew`.
    ///
    /// The first input of a burst carries the clock (a pending skew waits for the next one), so
    /// the engine's clock is the same for every input of the burst: back to back.
    fn input_now(&mut self) -> Instant {
        if self.bursting == Some(false) {
            return self.clock;
        }
        let skew = std::mem::take(&mut self.skew);
        self.clock.checked_sub(skew).unwrap_or(self.clock)
    }

    /// [`feed`](Self::feed), noting the first input of a burst.
    fn feed_burst(&mut self, step: &Step) {
        if self.feed(step) {
            self.bursting = Some(true);
        }
    }

    /// Gives the engine (and the model) the input `step` stands for, without draining: what it
    /// acts on was outstanding before it.
    fn feed(&mut self, step: &Step) -> bool {
        let now = self.input_now();
        let (model, engine) = (&mut self.model, &mut self.engine);
        match step {
            Step::Fetched { pick, items } => {
                let streams: Vec<usize> = (0..model.fetches.len())
                    .filter(|&s| model.fetches[s].is_some())
                    .collect();
                let Some(&stream) = choose(&streams, *pick) else {
                    return false;
                };
                let batch = self.deliveries(stream, items);
                let stream = StreamId(stream as u16);
                self.model.fetched(now, stream, &batch);
                self.engine.handle_fetched(now, stream, batch);
            }
            Step::FetchFailed { pick, fatal } => {
                let streams: Vec<usize> = (0..model.fetches.len())
                    .filter(|&s| model.fetches[s].is_some())
                    .collect();
                let Some(&stream) = choose(&streams, *pick) else {
                    return false;
                };
                let (stream, kind) = (StreamId(stream as u16), kind(*fatal));
                model.fetch_failed(now, stream, kind);
                engine.handle_fetch_failed(now, stream, kind);
            }
            Step::Unsolicited { stream, count } => {
                let stream = usize::from(*stream) % model.fetches.len();
                if model.fetches[stream].is_some() || model.shutdown.is_some() {
                    return false;
                }
                let items = vec![Item::Fresh { count: 0 }; usize::from(*count) % (MAX_ITEMS + 1)];
                let batch = self.deliveries(stream, &items);
                let stream = StreamId(stream as u16);
                self.model.fetched(now, stream, &batch);
                self.engine.handle_fetched(now, stream, batch);
            }
            Step::Finish { pick, outcome } => {
                let unreported: Vec<_> = model.unreported.keys().copied().collect();
                let Some(&inv) = choose(&unreported, *pick) else {
                    return false;
                };
                let outcome = outcome_of(*outcome);
                model.outcome(now, inv, &outcome);
                engine.handle_outcome(now, inv, outcome);
            }
            Step::FinishStale { pick, outcome } => {
                let Some(&inv) = choose(&model.old_invocations, *pick) else {
                    return false;
                };
                let outcome = outcome_of(*outcome);
                model.outcome(now, inv, &outcome);
                engine.handle_outcome(now, inv, outcome);
            }
            Step::Renewed { pick, answers } => {
                let chunks: Vec<_> = model
                    .round
                    .iter()
                    .flat_map(|r| r.chunks.iter().filter(|c| !c.answered))
                    .map(|c| (c.batch, c.leases.clone()))
                    .collect();
                let Some((batch, leases)) = choose(&chunks, *pick).cloned() else {
                    return false;
                };
                let results: Vec<(LeaseId, RenewResult)> = leases
                    .iter()
                    .enumerate()
                    .filter_map(|(i, id)| {
                        let answer = answers.get(i % answers.len().max(1)).copied();
                        match answer.unwrap_or(RenewAnswer::Kept) {
                            RenewAnswer::Kept => Some((*id, RenewResult::Kept)),
                            RenewAnswer::Lost => Some((*id, RenewResult::Lost)),
                            RenewAnswer::Omit => None,
                        }
                    })
                    .collect();
                model.renewed(now, batch, &results);
                engine.handle_renewed(now, batch, results);
            }
            Step::RenewFailed { pick, fatal } => {
                let chunks: Vec<_> = model
                    .round
                    .iter()
                    .flat_map(|r| r.chunks.iter().filter(|c| !c.answered))
                    .map(|c| c.batch)
                    .collect();
                let Some(&batch) = choose(&chunks, *pick) else {
                    return false;
                };
                model.renew_failed(now, batch, kind(*fatal));
                engine.handle_renew_failed(now, batch, kind(*fatal));
            }
            Step::RenewStale { pick, lost } => {
                let Some((batch, leases)) = choose(&model.old_chunks, *pick).cloned() else {
                    return false;
                };
                let result = if *lost {
                    RenewResult::Lost
                } else {
                    RenewResult::Kept
                };
                let results: Vec<_> = leases.iter().map(|id| (*id, result)).collect();
                model.renewed(now, batch, &results);
                engine.handle_renewed(now, batch, results);
            }
            Step::Acked { pick, answers } => {
                let batches = model.ack_batches();
                let Some((batch, leases)) = choose(&batches, *pick).cloned() else {
                    return false;
                };
                if let Some(kind) = answers.first().and_then(|a| a.call_error()) {
                    model.ack_failed(now, batch, kind);
                    engine.handle_ack_failed(now, batch, kind);
                    return true;
                }
                let results: Vec<_> = leases
                    .iter()
                    .enumerate()
                    .filter_map(|(i, id)| {
                        let answer = answers.get(i % answers.len().max(1)).copied();
                        match answer.unwrap_or(SettleAnswer::Ok) {
                            SettleAnswer::Omit => None,
                            answer => Some((*id, settle_result(answer))),
                        }
                    })
                    .collect();
                model.acked(now, batch, &results);
                engine.handle_acked(now, batch, results);
            }
            Step::Released { pick, answer } => {
                if model.releases.is_empty() {
                    return false;
                }
                let id = model
                    .releases
                    .remove(usize::from(*pick) % model.releases.len());
                let result = call_result(*answer);
                model.settle_answered(now, Op::Release, id, result);
                engine.handle_released(now, id, result);
            }
            Step::DeadLettered { pick, answer } => {
                if model.dead_letters.is_empty() {
                    return false;
                }
                let len = model.dead_letters.len();
                let id = model.dead_letters.remove(usize::from(*pick) % len);
                let result = call_result(*answer);
                model.settle_answered(now, Op::DeadLetter, id, result);
                engine.handle_dead_lettered(now, id, result);
            }
            Step::SettleStale { pick, answer } => {
                let Some(&old) = choose(&model.old_settles, *pick) else {
                    return false;
                };
                let result = call_result(*answer);
                match (old, result) {
                    (OldSettle::Ack(batch, _), Err(kind)) => {
                        model.ack_failed(now, batch, kind);
                        engine.handle_ack_failed(now, batch, kind);
                    }
                    (OldSettle::Ack(batch, id), Ok(result)) => {
                        model.acked(now, batch, &[(id, result)]);
                        engine.handle_acked(now, batch, [(id, result)]);
                    }
                    (OldSettle::Release(id), result) => {
                        model.settle_answered(now, Op::Release, id, result);
                        engine.handle_released(now, id, result);
                    }
                    (OldSettle::DeadLetter(id), result) => {
                        model.settle_answered(now, Op::DeadLetter, id, result);
                        engine.handle_dead_lettered(now, id, result);
                    }
                }
            }
            Step::Shutdown { grace_ms } => {
                let deadline = now + Duration::from_millis(u64::from(grace_ms % 400));
                model.shutdown(now, deadline);
                engine.handle_shutdown(now, deadline);
            }
            Step::Wake => {
                model.timeout(now);
                engine.handle_timeout(now);
            }
            Step::Assign { stream, fetching } => {
                let stream = StreamId(u16::from(*stream) % model.fetches.len() as u16);
                model.assignment(now, stream, *fetching);
                engine.handle_assignment(now, stream, *fetching);
            }
            Step::Wait(_) | Step::Stall(_) | Step::Tick | Step::Skew { .. } | Step::Burst(_) => {
                unreachable!("not an input")
            }
        }
        true
    }

    /// The messages of a fetch answer on `stream`, each with a fresh payload tag.
    fn deliveries(&mut self, stream: usize, items: &[Item]) -> Vec<Fetched<Tag>> {
        let max_count = self.model.cfg.max_deliveries + 1;
        let count = |c: u8| 1 + u32::from(c) % max_count;
        let mut batch: Vec<Fetched<Tag>> = Vec::new();
        for item in items.iter().take(MAX_ITEMS) {
            self.next_tag += 1;
            let (id, delivery_count, fence) = match *item {
                Item::Duplicate if !batch.is_empty() => {
                    let last = batch.last().expect("checked");
                    (last.id.clone(), last.delivery_count, last.fence)
                }
                Item::Pool { n, count: c } => (
                    MessageId::from(format!("p{}", n % POOL)),
                    count(c),
                    self.fence(),
                ),
                Item::Redeliver { pick } => {
                    let held: Vec<_> = self
                        .model
                        .leases
                        .values()
                        .filter(|l| {
                            (l.state.is_held() || l.state.is_late())
                                && usize::from(l.stream.0) == stream
                        })
                        .map(|l| (l.msg.clone(), l.delivery_count))
                        .collect();
                    match choose(&held, pick) {
                        Some((id, c)) => (id.clone(), c.saturating_add(1), self.fence()),
                        None => (self.fresh(), 1, self.fence()),
                    }
                }
                Item::Fresh { count: c } => (self.fresh(), count(c), self.fence()),
                Item::Duplicate => (self.fresh(), 1, self.fence()),
            };
            batch.push(Fetched::new(id, self.next_tag, delivery_count, fence));
        }
        batch
    }

    fn fresh(&mut self) -> MessageId {
        self.next_fresh += 1;
        MessageId::from(format!("f{}", self.next_fresh))
    }

    fn fence(&mut self) -> Fence {
        self.next_fence += 1;
        Fence(self.next_fence)
    }

    /// Drains and checks the effects of the inputs just given, then the state.
    fn drain(&mut self, input: Input) -> Result<(), Violation> {
        self.drain_with(input, &mut |effect| vec![effect])
    }

    /// [`drain`](Self::drain), with every drained effect passed through `tamper` before it is
    /// checked (tests make the engine misbehave with it).
    fn drain_with(
        &mut self,
        input: Input,
        tamper: &mut dyn FnMut(Effect<Tag>) -> Vec<Effect<Tag>>,
    ) -> Result<(), Violation> {
        let start = self.effects.len();
        let mut out = Problems::new();
        while let Some(effect) = self.engine.poll_effect() {
            for effect in tamper(effect) {
                self.model.observe(&effect, &self.engine, &mut out);
                self.effects.push(effect);
            }
        }
        self.model.check(&self.engine, &mut out);
        self.record(input, start);
        self.verdict(out)
    }

    fn record(&mut self, input: Input, start: usize) {
        if self.history.len() == HISTORY {
            self.history.pop_front();
        }
        let range = start..self.effects.len();
        self.history
            .push_back((self.step, input, self.model.now, range));
    }

    fn verdict(&self, problems: Problems) -> Result<(), Violation> {
        if problems.is_empty() {
            return Ok(());
        }
        let mut history = String::new();
        for (step, input, now, range) in &self.history {
            history.push_str(&format!(
                "  step {step} at {}: {input}\n",
                self.model.at(*now)
            ));
            for effect in &self.effects[range.clone()] {
                history.push_str(&format!("      -> {effect:?}\n"));
            }
        }
        let input = self
            .history
            .back()
            .map_or(String::new(), |(_, input, _, _)| input.to_string());
        Err(Violation {
            step: self.step,
            input,
            problems,
            history,
        })
    }
}

fn choose<T>(items: &[T], pick: u8) -> Option<&T> {
    (!items.is_empty()).then(|| &items[usize::from(pick) % items.len()])
}

fn outcome_of(finish: Finish) -> Outcome {
    match finish {
        Finish::Done => Outcome::Done,
        Finish::Pending => Outcome::Pending,
        Finish::Retry => Outcome::Retry { delay: None },
        Finish::RetryAfter(ms) => Outcome::Retry {
            delay: Some(Duration::from_millis(u64::from(ms))),
        },
        Finish::Reject => Outcome::Reject {
            reason: "cannot decode".into(),
        },
        Finish::Failed => Outcome::Failed {
            error: "handler error".into(),
        },
    }
}

fn kind(fatal: bool) -> ErrorKind {
    if fatal {
        ErrorKind::Fatal
    } else {
        ErrorKind::Transient
    }
}

/// A lease's answer in an ack's results (a call failure there stands for this lease failing).
fn settle_result(answer: SettleAnswer) -> SettleResult {
    match answer {
        SettleAnswer::Ok => SettleResult::Ok,
        SettleAnswer::Lost => SettleResult::Lost,
        _ => SettleResult::Failed,
    }
}

/// The answer to a release or dead-letter call.
fn call_result(answer: SettleAnswer) -> Result<SettleResult, ErrorKind> {
    match answer.call_error() {
        Some(kind) => Err(kind),
        None => Ok(settle_result(answer)),
    }
}

/// Runs a scenario through a fresh harness; the effects it produced, or the first violation.
pub fn run(scenario: &Scenario) -> Result<Vec<Effect<Tag>>, Violation> {
    run_from(scenario, origin())
}

fn run_from(scenario: &Scenario, origin: Instant) -> Result<Vec<Effect<Tag>>, Violation> {
    let mut harness = Harness::starting_at(&scenario.setup, origin)?;
    for step in &scenario.steps {
        harness.apply(step)?;
    }
    Ok(harness.effects)
}

/// An engine's creation instant: far enough from the platform's zero that a skewed `now` never
/// underflows.
fn origin() -> Instant {
    Instant::now() + Duration::from_secs(1)
}

/// Runs a scenario twice from the same instant: no violation, and the same effects both times
/// (determinism).
pub fn check(scenario: &Scenario) -> Result<(), Violation> {
    let origin = origin();
    let first = run_from(scenario, origin)?;
    let second = run_from(scenario, origin)?;
    if first == second {
        return Ok(());
    }
    let at = first
        .iter()
        .zip(&second)
        .position(|(a, b)| a != b)
        .unwrap_or(first.len().min(second.len()));
    Err(Violation {
        step: 0,
        input: "the whole scenario, twice".into(),
        problems: vec![crate::violation::Problem {
            rule: crate::violation::Rule::Determinism,
            detail: format!(
                "effect {at} differs: {:?} vs {:?} ({} vs {} effects)",
                first.get(at),
                second.get(at),
                first.len(),
                second.len()
            ),
        }],
        history: String::new(),
    })
}
