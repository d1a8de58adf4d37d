//! A hand driver for the benchmarks: an engine holding `n` leases, driven on explicit instants.
//!
//! The held leases are *pending* messages: each was fetched, run once and returned
//! [`Outcome::Pending`], so it keeps its lease and waits for a re-poll. `repoll_interval` is one
//! year, so no re-poll ever falls inside a benchmark; `claim_timeout` is 3 s (heartbeat every
//! second), and the clock advances by one microsecond per input, so a timed section of a few
//! thousand lifecycles spans a few milliseconds and no heartbeat falls inside it: the benchmarks
//! run heartbeats *between* timed sections with [`Driver::heartbeat`], as a live worker would,
//! which also keeps the engine's per-fetch bookkeeping (epochs) from piling up the way it never
//! does in production. Each heartbeat moves the clock by one second, so a year of re-poll delay
//! leaves room for 31 million of them. (Time only moves by explicit amounts, so the length of
//! these periods costs nothing; any timer that did fall inside a timed section would emit an
//! unexpected effect, and the driver panics on those.)
//!
//! The engine never reads the clock: `now` starts at one `Instant::now()` taken at construction
//! and only ever moves forward by explicit amounts.

use std::hint::black_box;
use std::time::{Duration, Instant};

use leasehold_core::{
    Config, Effect, Fence, Fetched, InvocationId, LeaseEngine, MessageId, Outcome, RenewResult,
    SettleResult, StreamId, MAX_DURATION,
};

/// The claim timeout of every benchmark engine; the heartbeat follows at a third of it.
pub const CLAIM_TIMEOUT: Duration = Duration::from_secs(3);

/// The poll interval: after a heartbeat's empty fetch answer, the next fetch is due again well
/// before the heartbeat after it.
pub const POLL_INTERVAL: Duration = Duration::from_millis(10);

/// How far the clock moves per input.
pub const TICK: Duration = Duration::from_micros(1);

/// First message number of deliveries made after the fill, so they never collide with held ones.
const FRESH_IDS: u64 = 1_000_000_000;

/// A Redis-stream-like message id, `<ms>-<seq>` with 13 + 1 + 5 = 19 bytes, unique per `i`.
pub fn message_id(i: u64) -> MessageId {
    MessageId::from(format!(
        "{}-{:05}",
        1_700_000_000_000 + i / 100_000,
        i % 100_000
    ))
}

/// The benchmark configuration: `max_leases` and `concurrency` as given, re-polls one year away,
/// a 3 s claim timeout (1 s heartbeat), a 10 ms poll interval, everything else default.
pub fn config(max_leases: usize, concurrency: usize) -> Config {
    Config::default()
        .concurrency(concurrency)
        .max_leases(max_leases)
        .claim_timeout(CLAIM_TIMEOUT)
        .poll_interval(POLL_INTERVAL)
        .repoll_interval(MAX_DURATION)
}

/// An engine with its clock, answering effects the way a backend that always succeeds would.
#[derive(Debug)]
pub struct Driver<P> {
    /// The engine under test.
    pub engine: LeaseEngine<P>,
    /// The current instant; moves forward only.
    pub now: Instant,
    /// The stream of the `Fetch` awaiting an answer, if any.
    fetch: Option<StreamId>,
    /// Number of the next message id to deliver.
    next_id: u64,
    /// Leases the fill left held (the lifecycle must come back to this number).
    held: usize,
    /// Invocations started by the fill and not answered (only [`Driver::with_running`]).
    pub running: Vec<InvocationId>,
}

impl<P: Clone + std::fmt::Debug> Driver<P> {
    fn new(config: &Config) -> Self {
        let now = Instant::now();
        let engine = LeaseEngine::new(config, now).expect("the benchmark configuration is valid");
        Self {
            engine,
            now,
            fetch: None,
            next_id: 0,
            held: 0,
            running: Vec::new(),
        }
    }

    fn tick(&mut self) {
        self.now += TICK;
    }

    /// The next `n` messages, as the backend's fetch reply would hand them over.
    pub fn next_delivery(
        &mut self,
        n: usize,
        mut payload: impl FnMut(u64) -> P,
    ) -> Vec<Fetched<P>> {
        (0..n)
            .map(|_| {
                let i = self.next_id;
                self.next_id += 1;
                Fetched::new(message_id(i), payload(i), 1, Fence(1))
            })
            .collect()
    }

    /// An engine (concurrency 1) holding `held` pending leases, with room for `room` more; when
    /// `room > 0` a `Fetch` is outstanding at the end, ready for [`Driver::lifecycle`].
    pub fn with_pending(held: usize, room: usize, mut payload: impl FnMut(u64) -> P) -> Self {
        let mut driver = Self::new(&config(held + room, 1));
        while let Some(effect) = driver.engine.poll_effect() {
            match effect {
                Effect::Fetch { stream, max, .. } if driver.engine.held() < held => {
                    let n = max.min(held - driver.engine.held());
                    let delivery = driver.next_delivery(n, &mut payload);
                    driver.tick();
                    driver.engine.handle_fetched(driver.now, stream, delivery);
                }
                Effect::Fetch { stream, .. } => driver.fetch = Some(stream),
                Effect::Run(invocation) => {
                    driver.tick();
                    driver
                        .engine
                        .handle_outcome(driver.now, invocation.id, Outcome::Pending);
                }
                other => panic!("unexpected effect while filling: {other:?}"),
            }
        }
        assert_eq!(driver.engine.held(), held, "fill stopped early");
        assert_eq!(driver.engine.stats().pending, held as u64);
        assert_eq!(driver.fetch.is_some(), room > 0);
        driver.held = held;
        driver.next_id = driver.next_id.max(FRESH_IDS);
        driver
    }

    /// An engine (concurrency = `n`) whose one fetch delivered `n` messages that are all running
    /// (`fetch_batch_size` is `n`, so that one fetch asks for them all).
    pub fn with_running(n: usize, payload: impl FnMut(u64) -> P) -> Self {
        let mut driver = Self::new(&config(n, n).fetch_batch_size(n));
        match driver.engine.poll_effect() {
            Some(Effect::Fetch { stream, max, .. }) if max == n => {
                let delivery = driver.next_delivery(n, payload);
                driver.tick();
                driver.engine.handle_fetched(driver.now, stream, delivery);
            }
            other => panic!("expected a fetch for {n}, got {other:?}"),
        }
        while let Some(effect) = driver.engine.poll_effect() {
            match effect {
                Effect::Run(invocation) => driver.running.push(invocation.id),
                other => panic!("unexpected effect while filling: {other:?}"),
            }
        }
        assert_eq!(driver.engine.running(), n);
        driver.held = n;
        driver
    }

    /// One heartbeat tick: moves the clock to the engine's next timeout (the renew round is the
    /// only timer due there), lets it emit the round (one `Renew` per `renew_batch_size` leases)
    /// and answers every lease `Kept`. Returns how many leases were renewed.
    ///
    /// A fetch outstanding meanwhile is answered empty at that instant, as a backend that blocked
    /// and found nothing would; the engine then sends a fresh one. (Left outstanding across the
    /// heartbeat's jump, it would confirm its next delivery as of a heartbeat ago, and that lease
    /// would need a renew at once.)
    pub fn heartbeat(&mut self) -> usize {
        let due = self.engine.poll_timeout().expect("a renew round is due");
        self.now = self.now.max(due);
        let fetching = self.fetch.take();
        match fetching {
            Some(stream) => self.engine.handle_fetched(self.now, stream, Vec::new()),
            None => self.engine.handle_timeout(self.now),
        }
        let mut renewed = 0;
        while let Some(effect) = self.engine.poll_effect() {
            match effect {
                Effect::Renew { batch, leases, .. } => {
                    renewed += leases.len();
                    let kept = leases.into_iter().map(|id| (id, RenewResult::Kept));
                    self.engine.handle_renewed(self.now, batch, kept);
                }
                Effect::Fetch { stream, .. } => self.fetch = Some(stream),
                // A running invocation hears of its renewed lease; nothing to answer.
                Effect::LeaseValid { .. } => {}
                other => panic!("unexpected effect in a heartbeat: {other:?}"),
            }
        }
        assert_eq!(self.fetch.is_some(), fetching.is_some(), "no new fetch");
        renewed
    }

    /// One message's whole life: the outstanding `Fetch` is answered with `delivery` (one
    /// message), the `Run` is answered `Done`, the `Ack` is answered `Ok`, and the engine asks
    /// for the next fetch. A driver also asks `poll_timeout` once when it goes back to sleep, so
    /// that is included. Each input is one [`TICK`] after the previous one.
    pub fn lifecycle(&mut self, delivery: Vec<Fetched<P>>) {
        let stream = self.fetch.take().expect("a fetch is outstanding");
        self.tick();
        self.engine.handle_fetched(self.now, stream, delivery);
        while let Some(effect) = self.engine.poll_effect() {
            match effect {
                Effect::Run(invocation) => {
                    self.tick();
                    self.engine
                        .handle_outcome(self.now, invocation.id, Outcome::Done);
                }
                Effect::Ack { batch, leases, .. } => {
                    self.tick();
                    let ok = leases.into_iter().map(|id| (id, SettleResult::Ok));
                    self.engine.handle_acked(self.now, batch, ok);
                }
                Effect::Fetch { stream, .. } => self.fetch = Some(stream),
                other => panic!("unexpected effect in a lifecycle: {other:?}"),
            }
        }
        black_box(self.engine.poll_timeout());
    }

    /// Checks that lifecycles left the engine as the fill did: the same leases held, a fetch
    /// outstanding, and `acked` messages acked in all.
    pub fn verify(&self, acked: u64) {
        assert_eq!(self.engine.held(), self.held, "held leases changed");
        assert!(self.fetch.is_some(), "no fetch outstanding");
        assert_eq!(
            self.engine.stats().acked,
            acked,
            "not every lifecycle acked"
        );
    }
}
