//! The adaptive prefetch (the default): how much the engine fetches ahead of its free slots
//! follows what it observes of its handlers and fetches, on the instants of its inputs alone.
//!
//! A small driver runs the engine on explicit instants against an endless stream: every fetch is
//! answered in full one round trip after it was sent, every handler returns `Done` after the
//! time the test gives it, acks and renews are answered one round trip later.

mod common;

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use common::*;
use leasehold_core::{
    Config, Effect, Fence, Fetched, InvocationId, LeaseEngine, Outcome, RenewResult, SettleResult,
};

enum Event {
    Fetched(usize),
    Outcome(InvocationId),
    Acked(leasehold_core::AckId, Vec<leasehold_core::LeaseId>),
    Renewed(leasehold_core::RenewId, Vec<leasehold_core::LeaseId>),
}

/// The engine against an endless stream, on explicit instants.
struct Drive {
    t0: Instant,
    now: Instant,
    engine: LeaseEngine<u64>,
    events: BinaryHeap<Reverse<(Instant, u64)>>,
    pending: std::collections::HashMap<u64, Event>,
    seq: u64,
    next_id: u64,
    rtt: Duration,
    /// How long the handler of message `id` runs.
    handler: Box<dyn Fn(u64) -> Duration>,
    /// Every fetch sent: (instant, max, slots free then).
    fetches: Vec<(Instant, usize, usize)>,
    /// Most messages held ready (fetched, not started yet) while every slot was busy.
    most_ready: usize,
    delivered: usize,
    started: usize,
    done: u64,
}

impl Drive {
    fn new(config: &Config, rtt: Duration, handler: impl Fn(u64) -> Duration + 'static) -> Self {
        let t0 = Instant::now();
        Self {
            t0,
            now: t0,
            engine: LeaseEngine::new(config, t0).expect("valid"),
            events: BinaryHeap::new(),
            pending: Default::default(),
            seq: 0,
            next_id: 1,
            rtt,
            handler: Box::new(handler),
            fetches: Vec::new(),
            most_ready: 0,
            delivered: 0,
            started: 0,
            done: 0,
        }
    }

    fn at(&mut self, at: Instant, event: Event) {
        self.seq += 1;
        self.events.push(Reverse((at, self.seq)));
        self.pending.insert(self.seq, event);
    }

    fn effects(&mut self) {
        while let Some(effect) = self.engine.poll_effect() {
            let now = self.now;
            match effect {
                Effect::Fetch { max, .. } => {
                    let free = self.engine.settings().concurrency - self.engine.running();
                    self.fetches.push((now, max, free));
                    self.at(now + self.rtt, Event::Fetched(max));
                }
                Effect::Run(invocation) => {
                    self.started += 1;
                    let took = (self.handler)(invocation.payload);
                    self.at(now + took, Event::Outcome(invocation.id));
                }
                Effect::Ack { batch, leases, .. } => {
                    self.at(now + self.rtt, Event::Acked(batch, leases))
                }
                Effect::Renew { batch, leases, .. } => {
                    self.at(now + self.rtt, Event::Renewed(batch, leases))
                }
                Effect::LeaseValid { .. } => {}
                other => panic!("not in this story: {other:?}"),
            }
        }
        if self.engine.running() == self.engine.settings().concurrency {
            self.most_ready = self.most_ready.max(self.delivered - self.started);
        }
    }

    /// Runs until `until` (engine time since the start).
    fn run(&mut self, until: Duration) {
        let end = self.t0 + until;
        self.effects();
        loop {
            let next_event = self.events.peek().map(|Reverse((at, _))| *at);
            let timeout = self.engine.poll_timeout();
            let next = match (next_event, timeout) {
                (Some(e), Some(t)) => e.min(t),
                (Some(e), None) => e,
                (None, Some(t)) => t,
                (None, None) => break,
            };
            if next > end {
                break;
            }
            self.now = next;
            if next_event == Some(next) {
                let Reverse((_, seq)) = self.events.pop().expect("peeked");
                match self.pending.remove(&seq).expect("scheduled") {
                    Event::Fetched(max) => {
                        let batch = (0..max)
                            .map(|_| {
                                let id = self.next_id;
                                self.next_id += 1;
                                Fetched::new(id.into(), id, 1, Fence(1))
                            })
                            .collect();
                        self.delivered += max;
                        self.engine.handle_fetched(next, S0, batch);
                    }
                    Event::Outcome(invocation) => {
                        self.done += 1;
                        self.engine.handle_outcome(next, invocation, Outcome::Done)
                    }
                    Event::Acked(batch, leases) => self.engine.handle_acked(
                        next,
                        batch,
                        leases.into_iter().map(|id| (id, SettleResult::Ok)),
                    ),
                    Event::Renewed(batch, leases) => self.engine.handle_renewed(
                        next,
                        batch,
                        leases.into_iter().map(|id| (id, RenewResult::Kept)),
                    ),
                }
            } else {
                self.engine.handle_timeout(next);
            }
            self.effects();
        }
    }
}

/// Before a handler has finished and a fetch was answered, nothing is fetched ahead: the first
/// fetch asks for the free slots only.
#[test]
fn nothing_is_fetched_ahead_before_anything_was_observed() {
    let t0 = Instant::now();
    let mut e = engine(&Config::default().concurrency(10), t0);
    assert_eq!(e.prefetch(), 0);
    assert_eq!(fetches(&drain(&mut e)), vec![(S0, 10, secs(1))]);
}

/// Quick handlers (1 ms) against a 2 ms fetch round trip: by Little's law ten slots finish
/// 10 000 messages a second, 20 of them during one round trip; four times that is fetched
/// ahead, so fetches ask beyond the free slots and a batch always waits, ready, for the slots.
#[test]
fn quick_handlers_grow_the_fetch_ahead() {
    let config = Config::default().concurrency(10);
    let mut drive = Drive::new(&config, ms(2), |_| ms(1));
    drive.run(ms(200));
    assert_eq!(
        drive.engine.prefetch(),
        4 * 10 * 2,
        "4 × 10 slots × 2 ms / 1 ms"
    );
    let (_, first, _) = drive.fetches[0];
    assert_eq!(
        first, 10,
        "the first fetch, before any observation: the slots"
    );
    assert!(
        drive.fetches.iter().any(|&(_, max, free)| max > free + 10),
        "fetches ask ahead of the free slots: {:?}",
        &drive.fetches[..10]
    );
    assert!(drive.most_ready >= 20, "{}", drive.most_ready);
    // Slots never idle for a fetch once it adapted: ~10 000 messages a second.
    let rate = drive.done as f64 / 0.2;
    assert!(rate > 8_500.0, "{rate} msg/s");
}

/// The same engine without the prefetch (a fixed 0) idles its slots for a round trip per batch:
/// the adaptive default is what keeps them busy.
#[test]
fn without_the_fetch_ahead_the_same_slots_wait_for_fetches() {
    let config = Config::default().concurrency(10).prefetch(0);
    let mut drive = Drive::new(&config, ms(2), |_| ms(1));
    drive.run(ms(200));
    assert_eq!(drive.engine.prefetch(), 0);
    assert_eq!(drive.most_ready, 0);
    let rate = drive.done as f64 / 0.2;
    assert!(rate < 5_000.0, "{rate} msg/s");
}

/// Long handlers (1 s) against a 2 ms round trip: 4 × 10 × 2 ms / 1 s rounds to 0, so nothing
/// is held ahead, ever: every fetch asks for free slots only, no message waits ready for a
/// slot while another replica could run it.
#[test]
fn long_handlers_hold_nothing_ahead() {
    let config = Config::default().concurrency(10);
    let mut drive = Drive::new(&config, ms(2), |_| secs(1));
    drive.run(secs(10));
    assert_eq!(drive.engine.prefetch(), 0);
    assert!(drive.done >= 80, "{}", drive.done);
    for &(at, max, free) in &drive.fetches {
        assert!(
            max <= free,
            "at {:?}: asked {max} with {free} free",
            at - drive.t0
        );
    }
    assert_eq!(drive.most_ready, 0);
}

/// Handlers that turn long stop the fetch ahead before the first of them ends: the handler time
/// counts at least the age of the oldest running invocation.
#[test]
fn handlers_that_turn_long_stop_the_fetch_ahead_before_they_end() {
    let config = Config::default().concurrency(10);
    // Messages 1..=2000 take 1 ms, later ones 10 s.
    let mut drive = Drive::new(
        &config,
        ms(2),
        |id| if id <= 2000 { ms(1) } else { secs(10) },
    );
    drive.run(ms(150));
    assert!(drive.engine.prefetch() > 0, "quick so far");
    // Every slot now runs a long one; none has ended.
    drive.run(ms(400));
    assert_eq!(drive.engine.running(), 10);
    let (ended, fetched) = (drive.done, drive.delivered);
    // The next input (a timer, a renew's answer) comes at 600 ms: the oldest running one is
    // 400 ms old or more by then.
    let at = drive.t0 + ms(600);
    drive.now = at;
    drive.engine.handle_timeout(at);
    drive.effects();
    assert_eq!(drive.done, ended, "no long handler ends before 10 s");
    assert_eq!(drive.engine.prefetch(), 0);
    drive.run(secs(5));
    assert_eq!(drive.delivered, fetched, "no more fetched ahead");
}

/// A set `prefetch` is fixed whatever is observed; a set `max_leases` bounds the adaptive one.
#[test]
fn explicit_knobs_win() {
    let config = Config::default().concurrency(10).prefetch(5);
    let mut drive = Drive::new(&config, ms(2), |_| ms(1));
    drive.run(ms(100));
    assert_eq!(drive.engine.prefetch(), 5);
    let config = Config::default().concurrency(10).prefetch(5);
    let mut drive = Drive::new(&config, ms(2), |_| secs(1));
    drive.run(secs(3));
    assert_eq!(drive.engine.prefetch(), 5, "also with long handlers");

    let config = Config::default().concurrency(10).max_leases(16);
    let mut drive = Drive::new(&config, ms(2), |_| ms(1));
    drive.run(ms(100));
    assert_eq!(
        drive.engine.prefetch(),
        6,
        "within max_leases - concurrency"
    );
    assert!(drive.fetches.iter().all(|&(_, max, _)| max <= 16));

    let config = Config::default().concurrency(10).fetch_batch_size(4);
    let mut drive = Drive::new(&config, ms(2), |_| ms(1));
    drive.run(ms(100));
    assert_eq!(drive.engine.prefetch(), 16, "at most 4 fetch batches");
    assert!(drive.fetches.iter().all(|&(_, max, _)| max <= 4));
}

/// The same inputs give the same prefetch: it is read from the inputs' instants, never a clock.
#[test]
fn the_adaptation_is_deterministic() {
    let run = || {
        let config = Config::default().concurrency(7);
        let mut drive = Drive::new(&config, ms(3), |id| ms(1 + id % 5));
        drive.run(ms(300));
        let sizes: Vec<usize> = drive.fetches.iter().map(|&(_, max, _)| max).collect();
        (sizes, drive.engine.prefetch(), drive.done)
    };
    assert_eq!(run(), run());
}
