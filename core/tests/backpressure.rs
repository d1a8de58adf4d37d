//! Guarantee 1 of the crate docs: running invocations ≤ `concurrency`, held leases ≤ `max_leases`,
//! and no fetch while full (slots and `prefetch` room).
//!
//! A worker must not take more messages than it can work on: a message it holds idle is one another
//! replica could be running. A fetch asks only for the room there is (at most `fetch_batch_size`);
//! prefetched messages wait, held and renewed, and start the moment a slot frees; deliveries beyond
//! what a fetch asked for are released at once and never run. A seeded random driver checks the
//! bounds, and guarantee 2, over whole runs.

mod common;

use std::time::{Duration, Instant};

use common::*;
use leasehold_core::{MessageId, Outcome, SettleResult};

/// Never more `Run`s outstanding than `concurrency`; a `Fetch` asks only for free slots and none is
/// sent while full; `max_leases` bounds held leases (waiting leases fill it → no fetch).
#[test]
fn backpressure_bounds_runs_fetches_and_leases() {
    let t0 = Instant::now();
    let mut e = engine(
        &config()
            .concurrency(2)
            .max_leases(3)
            .repoll_interval(ms(400)),
        t0,
    );
    assert_eq!(drain(&mut e), vec![fetch(2, ms(1000))]);
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1), msg(2)]);
    let fx = drain(&mut e);
    let [(ia, a), (ib, b)] = runs(&fx)[..] else {
        panic!("{fx:?}")
    };
    assert_eq!(fx.len(), 2, "full: no fetch: {fx:?}");
    assert_eq!(e.running(), 2);
    // poll_timeout does not wake us for a fetch while full: only the heartbeat.
    assert_eq!(e.poll_timeout(), Some(t0 + ms(1000)));

    // One slot frees: a fetch for one.
    e.handle_outcome(t0 + ms(100), ia, Outcome::Pending);
    assert_eq!(drain(&mut e), vec![fetch(1, Duration::ZERO)]);
    e.handle_fetched(t0 + ms(110), S0, vec![msg(3)]);
    let (ic, c) = one_run(&drain(&mut e));
    assert_eq!(e.held(), 3);

    // Slots free up, but 3 leases are held (max_leases): no fetch.
    e.handle_outcome(t0 + ms(200), ib, Outcome::Pending);
    assert_eq!(drain(&mut e), vec![]);
    e.handle_outcome(t0 + ms(210), ic, Outcome::Pending);
    assert_eq!(drain(&mut e), vec![]);
    assert_eq!(e.running(), 0);
    assert_eq!(e.held(), 3);

    // Re-runs: A at t0+500, B at t0+600; C at t0+610 must wait for a free slot.
    e.handle_timeout(t0 + ms(500));
    let (ia2, _) = one_run(&drain(&mut e));
    e.handle_timeout(t0 + ms(600));
    let fx = drain(&mut e);
    assert_eq!(runs(&fx).len(), 1);
    assert_eq!(runs(&fx)[0].1, b);
    e.handle_timeout(t0 + ms(610));
    assert_eq!(drain(&mut e), vec![], "two running: C waits");
    assert_eq!(e.running(), 2);
    e.handle_outcome(t0 + ms(700), ia2, Outcome::Done);
    let fx = drain(&mut e);
    let (_, lease) = one_run(&fx);
    assert_eq!(lease, c);
    assert_eq!(acks(&fx), vec![vec![a]]);
    assert!(fetches(&fx).is_empty(), "still 3 leases held: {fx:?}");
    assert!(e.running() <= 2);
}

/// With `prefetch`, a fetch may bring that many messages beyond the free slots; they are held
/// (renewed, released at shutdown) without running, start the moment a slot frees (no fetch round
/// trip in between), and the next fetch goes out while every slot is busy. Running never exceeds
/// `concurrency`.
#[test]
fn prefetched_messages_wait_held_and_start_when_a_slot_frees() {
    let t0 = Instant::now();
    let cfg = config().concurrency(2).prefetch(2).max_leases(10);
    let mut e = engine(&cfg, t0);
    assert_eq!(
        drain(&mut e),
        vec![fetch(4, ms(1000))],
        "slots + prefetch room"
    );
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1), msg(2), msg(3), msg(4)]);
    let fx = drain(&mut e);
    let [(ia, a), (ib, b)] = runs(&fx)[..] else {
        panic!("two runs expected: {fx:?}")
    };
    assert_eq!(
        fx.len(),
        2,
        "no fetch: slots and prefetch room are full: {fx:?}"
    );
    assert_eq!((message_of(&e, a), message_of(&e, b)), (1.into(), 2.into()));
    assert_eq!(
        (e.running(), e.held()),
        (2, 4),
        "3 and 4 are held, not running"
    );

    // A slot frees: the first prefetched message starts in the same input, and a fetch for
    // the one place of prefetch room that opened goes out with it.
    e.handle_outcome(t0 + ms(20), ia, Outcome::Done);
    let fx = drain(&mut e);
    let (_, c) = one_run(&fx);
    assert_eq!(message_of(&e, c), 3.into());
    assert_eq!(e.lease(c).unwrap().attempt(), 1, "its first invocation");
    assert_eq!(acks(&fx), vec![vec![a]]);
    assert_eq!(fetches(&fx), vec![(S0, 1, Duration::ZERO)]);
    assert_eq!(e.running(), 2);
    e.handle_acked(t0 + ms(25), [(a, SettleResult::Ok)]);

    // Another slot frees while that fetch is out: the second prefetched message starts at
    // once (the fetch's one message fits in the prefetch room), and no second fetch goes out.
    e.handle_outcome(t0 + ms(30), ib, Outcome::Done);
    let fx = drain(&mut e);
    let (_, d) = one_run(&fx);
    assert_eq!(message_of(&e, d), 4.into());
    assert!(
        fetches(&fx).is_empty(),
        "one fetch per stream in flight: {fx:?}"
    );
    assert_eq!(acks(&fx), vec![vec![b]]);
    e.handle_acked(t0 + ms(35), [(b, SettleResult::Ok)]);
    e.handle_fetched(t0 + ms(40), S0, vec![msg(5)]);
    assert!(
        runs(&drain(&mut e)).is_empty(),
        "both slots busy: message 5 waits"
    );
    assert_eq!((e.running(), e.held()), (2, 3));

    // The waiting prefetched lease is renewed with the running ones.
    e.handle_timeout(t0 + ms(1000));
    let (_, renewed) = one_renew(&drain(&mut e));
    assert_eq!(renewed.len(), 3);
    let five = *renewed
        .iter()
        .find(|&&l| l != c && l != d)
        .expect("a third lease");
    assert_eq!(message_of(&e, five), 5.into());
    assert_eq!(
        e.lease(five).unwrap().attempt(),
        0,
        "prefetched, not run yet"
    );

    // Shutdown hands it back at once.
    e.handle_shutdown(t0 + ms(1010), t0 + secs(30));
    assert_eq!(releases(&drain(&mut e)), vec![(five, Duration::ZERO)]);
}

/// With `fetch_batch_size`, a fetch asks for at most that many messages; a full one is followed at
/// once (no blocking wait) by a fetch for the room left, so with prefetch room the next batch is on
/// its way while the last one is handled.
#[test]
fn fetches_are_capped_and_a_full_capped_fetch_is_followed_at_once() {
    let t0 = Instant::now();
    let cfg = config()
        .concurrency(2)
        .prefetch(4)
        .fetch_batch_size(3)
        .max_leases(10);
    let mut e = engine(&cfg, t0);
    assert_eq!(
        drain(&mut e),
        vec![fetch(3, ms(1000))],
        "6 places, 3 per fetch"
    );
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1), msg(2), msg(3)]);
    let fx = drain(&mut e);
    assert_eq!(runs(&fx).len(), 2);
    assert_eq!(
        fetches(&fx),
        vec![(S0, 3, Duration::ZERO)],
        "full: the rest at once"
    );
    e.handle_fetched(t0 + ms(20), S0, vec![msg(4), msg(5)]);
    let fx = drain(&mut e);
    assert!(runs(&fx).is_empty(), "slots busy: 4 and 5 wait, prefetched");
    assert_eq!(
        fetches(&fx),
        vec![(S0, 1, ms(1000))],
        "short: the last place, may block"
    );
    assert_eq!((e.running(), e.held()), (2, 5));
}

/// Whole engine: a seeded random driver never sees more runs outstanding than `concurrency`, more
/// leases than `max_leases`, or two concurrent runs of one message.
#[test]
fn random_driver_never_exceeds_concurrency_or_runs_a_message_twice() {
    let t0 = Instant::now();
    for seed in 0..20 {
        // Half the seeds prefetch: held, not running, messages must not break the bounds.
        let prefetch = usize::try_from(seed % 2 * 2).unwrap();
        let cfg = config()
            .concurrency(3)
            .prefetch(prefetch)
            .max_leases(5)
            .seed(seed);
        let mut sim = Sim::new(&cfg, 2, seed, t0);
        // Over-delivered extras are held (being released) beyond max_leases; they have a test
        // of their own below.
        sim.overdeliver = false;
        sim.run(1500);
        assert!(
            sim.violations.is_empty(),
            "seed {seed}: {:#?}",
            sim.violations
        );
    }
}

/// Deliveries beyond what the fetch asked for are released with delay 0 and never run.
#[test]
fn extra_deliveries_are_released_at_once_and_never_run() {
    let t0 = Instant::now();
    let mut e = engine(&config().concurrency(1), t0);
    assert_eq!(drain(&mut e), vec![fetch(1, ms(1000))]);
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1), msg(2), msg(3)]);
    let fx = drain(&mut e);
    let (inv, a) = one_run(&fx);
    let [(b, _), (c, _)] = releases(&fx)[..] else {
        panic!("{fx:?}")
    };
    assert_eq!(
        fx,
        vec![
            Seen::Run {
                invocation: inv,
                lease: a
            },
            Seen::Release {
                lease: b,
                delay: Duration::ZERO
            },
            Seen::Release {
                lease: c,
                delay: Duration::ZERO
            },
        ]
    );
    assert_eq!(message_of(&e, b), MessageId::from(2));
    assert_eq!(message_of(&e, c), MessageId::from(3));
    assert_eq!(e.stats().overflow, 2);
    assert_eq!(e.stats().delivered, 3);

    e.handle_released(t0 + ms(20), b, SettleResult::Ok);
    e.handle_released(t0 + ms(20), c, SettleResult::Ok);
    assert_eq!(drain(&mut e), vec![]);
    e.handle_outcome(t0 + ms(30), inv, Outcome::Done);
    let fx = drain(&mut e);
    assert_eq!(
        fx,
        vec![fetch(1, Duration::ZERO), Seen::Ack { leases: vec![a] }]
    );
    assert_eq!(e.stats().invocations, 1);
    assert_eq!(e.stats().released, 2);
}
