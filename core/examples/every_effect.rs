//! Driving a `LeaseEngine` by hand through all twelve effects, on explicit instants.
//!
//! Two streams: `orders`, on a toy in-process store, and `audit`, whose store refuses every
//! call (`ErrorKind::Fatal`). Handlers take simulated time, so leases live across heartbeats,
//! and a peer consumer takes one message over mid-run. What happens:
//!
//! - 0 s: both streams are fetched. `audit` fails fatally → `Halt`. `orders` delivers four
//!   messages → four `Run`s; the next fetch finds nothing and waits (a *waiting fetch*, up to
//!   the 1 s poll interval, answered as soon as there is something to take).
//! - 1 s: `flaky` fails → `Failed`, then `Release` with the retry backoff (0.84 s: the jitter
//!   comes from the engine's seed, so every run is the same).
//! - 1.84 s: the waiting fetch takes `flaky` again (delivery 2, its last allowed one).
//! - 2 s: `resize` is done → `Ack`.
//! - 2.84 s: `flaky` fails again → `DeadLetter`.
//! - 3 s: `thumbnail` is published, and a waiting fetch takes it at once.
//! - 5 s: `thumbnail` is done → `Ack`. A peer takes `stolen` over (the delivery count, which is
//!   the fence here, goes to 2).
//! - 10 s: the heartbeat → `Renew`: `report` is `Kept` (→ `LeaseValid` for its running
//!   handler), `stolen` is `Lost` (→ `Lost`, then `Cancel`: its handler stops and reports).
//! - 15 s: `report` is done → `Ack`.
//! - 20 s: shutdown, with a fetch waiting: the driver answers it with what it got (nothing),
//!   so the engine can finish → `Drained`.
//!
//! `cargo run -p leasehold-core --example every_effect` prints the effects;
//! `core/tests/every_effect.rs` runs it under `cargo test`, and it panics unless every effect
//! was seen.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use leasehold_core::{
    Config, Effect, ErrorKind, Fence, Fetched, InvocationId, LeaseEngine, LeaseRef, Outcome,
    RenewResult, SettleResult, StreamId,
};

const ORDERS: StreamId = StreamId(0);
const AUDIT: StreamId = StreamId(1);

/// Every effect's name; [`name`] matches exhaustively, so a new effect fails this build.
const ALL: [&str; 12] = [
    "Fetch",
    "Run",
    "Cancel",
    "LeaseValid",
    "Renew",
    "Ack",
    "Release",
    "DeadLetter",
    "Failed",
    "Lost",
    "Halt",
    "Drained",
];

fn name<P>(effect: &Effect<P>) -> &'static str {
    match effect {
        Effect::Fetch { .. } => "Fetch",
        Effect::Run(_) => "Run",
        Effect::Cancel { .. } => "Cancel",
        Effect::LeaseValid { .. } => "LeaseValid",
        Effect::Renew { .. } => "Renew",
        Effect::Ack { .. } => "Ack",
        Effect::Release { .. } => "Release",
        Effect::DeadLetter { .. } => "DeadLetter",
        Effect::Failed { .. } => "Failed",
        Effect::Lost { .. } => "Lost",
        Effect::Halt { .. } => "Halt",
        Effect::Drained => "Drained",
    }
}

/// Who holds a message of the toy store.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Holder {
    Nobody,
    Us,
    Peer,
}

struct Entry {
    payload: &'static str,
    /// The delivery count, which is also the fence (as on Redis and in memory).
    count: u32,
    holder: Holder,
    /// When a message nobody holds may be taken (a release's delay).
    from: Instant,
}

/// One stream, one consumer group, one consumer ("us"), and a peer that can take messages.
#[derive(Default)]
struct Store {
    entries: BTreeMap<u64, Entry>,
    next_id: u64,
    acked: Vec<&'static str>,
    dead: Vec<&'static str>,
}

impl Store {
    fn publish(&mut self, now: Instant, payload: &'static str) {
        self.next_id += 1;
        let entry = Entry {
            payload,
            count: 0,
            holder: Holder::Nobody,
            from: now,
        };
        self.entries.insert(self.next_id, entry);
    }

    /// When the next message nobody holds may be taken.
    fn next_available(&self) -> Option<Instant> {
        let free = self.entries.values().filter(|e| e.holder == Holder::Nobody);
        free.map(|e| e.from).min()
    }

    /// Takes up to `max`: each taking is a new delivery with a new fence.
    fn fetch(&mut self, now: Instant, max: usize) -> Vec<Fetched<&'static str>> {
        let free = |e: &&mut Entry| e.holder == Holder::Nobody && e.from <= now;
        let entries = self.entries.iter_mut().filter(|(_, e)| free(e)).take(max);
        let taken = entries.map(|(id, e)| {
            (e.count, e.holder) = (e.count + 1, Holder::Us);
            Fetched::new((*id).into(), e.payload, e.count, Fence(e.count.into()))
        });
        taken.collect()
    }

    /// The entry `lease` is about, if we hold it with that fence (the owner and fence check
    /// every lease operation makes).
    fn held(&mut self, lease: &LeaseRef) -> Option<(u64, &mut Entry)> {
        let id: u64 = lease.id.as_str().parse().ok()?;
        let entry = self.entries.get_mut(&id)?;
        let current = entry.holder == Holder::Us && u64::from(entry.count) == lease.fence.0;
        current.then_some((id, entry))
    }

    fn renew(&mut self, lease: &LeaseRef) -> RenewResult {
        match self.held(lease) {
            Some(_) => RenewResult::Kept,
            None => RenewResult::Lost,
        }
    }

    fn ack(&mut self, lease: &LeaseRef) -> SettleResult {
        let Some((id, _)) = self.held(lease) else {
            return SettleResult::Lost;
        };
        let entry = self.entries.remove(&id).expect("held");
        self.acked.push(entry.payload);
        SettleResult::Ok
    }

    fn release(&mut self, now: Instant, lease: &LeaseRef, delay: Duration) -> SettleResult {
        let Some((_, entry)) = self.held(lease) else {
            return SettleResult::Lost;
        };
        (entry.holder, entry.from) = (Holder::Nobody, now + delay);
        SettleResult::Ok
    }

    fn dead_letter(&mut self, lease: &LeaseRef) -> SettleResult {
        let Some((id, _)) = self.held(lease) else {
            return SettleResult::Lost;
        };
        let entry = self.entries.remove(&id).expect("held");
        self.dead.push(entry.payload);
        SettleResult::Ok
    }

    /// A peer consumer takes `payload` over: a new delivery, so a new fence.
    fn take_over(&mut self, payload: &str) {
        let entry = self.entries.values_mut().find(|e| e.payload == payload);
        let entry = entry.expect("published");
        (entry.count, entry.holder) = (entry.count + 1, Holder::Peer);
    }
}

/// A handler invocation in progress: it ends at `ends`, earlier if cancelled.
struct Handler {
    invocation: InvocationId,
    payload: &'static str,
    ends: Instant,
    cancelled: bool,
}

/// How long the handler runs on each payload, and what it comes to.
fn handle(payload: &str) -> (Duration, Outcome) {
    let s = Duration::from_secs;
    match payload {
        "flaky" => (
            s(1),
            Outcome::Failed {
                error: "disk full".into(),
            },
        ),
        "report" => (s(15), Outcome::Done),
        "stolen" => (s(40), Outcome::Done),
        _ => (s(2), Outcome::Done),
    }
}

/// Something the world does at a given second: publish, take over, shut down.
enum Event {
    Publish(&'static str),
    TakeOver(&'static str),
    Shutdown,
}

/// Runs the story; returns the effects seen, in order, with the time each was seen at.
fn story() -> (Vec<(Duration, &'static str)>, Store) {
    let t0 = Instant::now();
    let config = Config::default()
        .concurrency(4)
        .claim_timeout(Duration::from_secs(30)) // heartbeat every 10 s
        .max_deliveries(2);
    let mut engine = LeaseEngine::<&'static str>::with_streams(&config, 2, t0).expect("valid");
    let mut now = t0;

    let mut store = Store::default();
    for payload in ["resize", "report", "flaky", "stolen"] {
        store.publish(t0, payload);
    }
    let mut events: Vec<(Instant, Event)> = vec![
        (t0 + Duration::from_secs(3), Event::Publish("thumbnail")),
        (t0 + Duration::from_secs(5), Event::TakeOver("stolen")),
        (t0 + Duration::from_secs(20), Event::Shutdown),
    ];
    let mut handlers: Vec<Handler> = Vec::new();
    // The fetch waiting for messages, if any: its `max`, and when its wait is over.
    let mut waiting: Option<(usize, Instant)> = None;
    let mut seen = Vec::new();

    loop {
        // 1. Execute every effect.
        while let Some(effect) = engine.poll_effect() {
            seen.push((now - t0, name(&effect)));
            match effect {
                // The audit store refuses every call: retrying cannot help.
                Effect::Fetch { stream: AUDIT, .. } => {
                    engine.handle_fetch_failed(now, AUDIT, ErrorKind::Fatal);
                }
                Effect::Fetch { stream, max, wait } => {
                    let messages = store.fetch(now, max);
                    if messages.is_empty() && !wait.is_zero() {
                        // Nothing there: wait for a message, at most `wait`.
                        waiting = Some((max, now + wait));
                    } else {
                        engine.handle_fetched(now, stream, messages);
                    }
                }
                Effect::Run(invocation) => {
                    let (took, _) = handle(invocation.payload);
                    handlers.push(Handler {
                        invocation: invocation.id,
                        payload: invocation.payload,
                        ends: now + took,
                        cancelled: false,
                    });
                }
                // Cooperative: the handler stops at once, and still reports how it ended.
                Effect::Cancel { invocation, .. } => {
                    for handler in handlers.iter_mut().filter(|h| h.invocation == invocation) {
                        (handler.ends, handler.cancelled) = (now, true);
                    }
                }
                // A real driver hands `until` to the handler's `lease_valid()`.
                Effect::LeaseValid { .. } => {}
                Effect::Renew {
                    batch,
                    leases,
                    lease_refs,
                    ..
                } => {
                    let results = lease_refs.iter().map(|lease_ref| store.renew(lease_ref));
                    engine.handle_renewed(now, batch, leases.into_iter().zip(results));
                }
                Effect::Ack {
                    batch,
                    leases,
                    lease_refs,
                    ..
                } => {
                    let results = lease_refs.iter().map(|lease_ref| store.ack(lease_ref));
                    engine.handle_acked(now, batch, leases.into_iter().zip(results));
                }
                Effect::Release {
                    lease,
                    lease_ref,
                    delay,
                    ..
                } => {
                    let result = store.release(now, &lease_ref, delay);
                    engine.handle_released(now, lease, Ok(result));
                }
                Effect::DeadLetter {
                    lease, lease_ref, ..
                } => {
                    let result = store.dead_letter(&lease_ref);
                    engine.handle_dead_lettered(now, lease, Ok(result));
                }
                // Notices: a real driver logs and counts them.
                Effect::Failed { .. } | Effect::Lost { .. } | Effect::Halt { .. } => {}
                Effect::Drained => return (seen, store),
            }
        }

        // 2. Sleep until the next thing happens: a timer of the engine, a handler ending, the
        //    waiting fetch's end (its wait, or a message to take), or an event of the world.
        let fetch_ends =
            waiting.map(|(_, until)| store.next_available().map_or(until, |at| at.min(until)));
        let next = [
            engine.poll_timeout(),
            handlers.iter().map(|h| h.ends).min(),
            fetch_ends,
            events.iter().map(|(at, _)| *at).min(),
        ];
        now = now.max(
            next.into_iter()
                .flatten()
                .min()
                .expect("something is pending"),
        );

        // 3. Feed the engine what happened by then.
        for (_, event) in events.extract_if(.., |(at, _)| *at <= now) {
            match event {
                Event::Publish(payload) => store.publish(now, payload),
                Event::TakeOver(payload) => store.take_over(payload),
                Event::Shutdown => {
                    engine.handle_shutdown(now, now + engine.settings().shutdown_grace);
                    // The engine holds `Drained` back while a fetch is outstanding: answer it.
                    // Dropping the wait loses nothing, since it took nothing yet.
                    if waiting.take().is_some() {
                        engine.handle_fetched(now, ORDERS, Vec::new());
                    }
                }
            }
        }
        for handler in handlers.extract_if(.., |h| h.ends <= now) {
            let outcome = match handler.cancelled {
                true => Outcome::Failed {
                    error: "cancelled".into(),
                },
                false => handle(handler.payload).1,
            };
            engine.handle_outcome(now, handler.invocation, outcome);
        }
        if let Some((max, until)) = waiting {
            let messages = store.fetch(now, max);
            if !messages.is_empty() || until <= now {
                waiting = None;
                engine.handle_fetched(now, ORDERS, messages);
            }
        }
        if engine.poll_timeout().is_some_and(|at| at <= now) {
            engine.handle_timeout(now);
        }
    }
}

/// Runs the story, prints the effects, and panics unless all twelve were seen and the story
/// ended as told. `pub`: `core/tests/every_effect.rs` runs it.
pub fn main() {
    let (seen, store) = story();
    for (at, effect) in &seen {
        println!("{:>6.3} s  {effect}", at.as_secs_f64());
    }
    let kinds: BTreeSet<&str> = seen.iter().map(|(_, effect)| *effect).collect();
    let missing: Vec<&str> = ALL.into_iter().filter(|e| !kinds.contains(e)).collect();
    assert!(missing.is_empty(), "effects never seen: {missing:?}");

    assert_eq!(store.acked, ["resize", "thumbnail", "report"]);
    assert_eq!(store.dead, ["flaky"]);
    // `stolen` stays with the peer that took it over; nothing else is left.
    let left: Vec<_> = store
        .entries
        .values()
        .map(|e| (e.payload, e.holder))
        .collect();
    assert_eq!(left, [("stolen", Holder::Peer)]);
}
