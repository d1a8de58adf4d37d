//! Guarantee 6 of the crate docs: after `Seen::Drained` no lease is held.
//!
//! `handle_shutdown` stops fetching, hands waiting messages and deliveries that arrive afterwards
//! straight back (a release with delay 0), lets running invocations finish until the deadline and
//! then cancels them, and emits `Drained` exactly once, when nothing is held or running. A worker
//! that stops this way loses no finished work and leaves no message waiting out a claim timeout on
//! the backend.

mod common;

use std::time::{Duration, Instant};

use common::*;
use leasehold_core::{CancelReason, MessageId, Outcome, SettleResult};

/// After `handle_shutdown` no more `Fetch`; waiting leases are released at once with delay 0;
/// running invocations get until the deadline (then `Cancel { Shutdown }` and a release with delay
/// 0 once they report); deliveries after shutdown are released with delay 0 and never run;
/// `Drained` comes exactly once, when no lease is held and nothing runs.
#[test]
fn shutdown_releases_waits_cancels_and_drains_once() {
    let t0 = Instant::now();
    let cfg = config()
        .concurrency(3)
        .max_leases(10)
        .claim_timeout(secs(60))
        .heartbeat_interval(secs(20))
        .expiry_margin(secs(6));
    let mut e = engine(&cfg, t0);
    assert_eq!(drain(&mut e), vec![fetch(3, ms(1000))]);
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1), msg(2), msg(3)]);
    let fx = drain(&mut e);
    let [(ia, a), (ib, b), (ic, c)] = runs(&fx)[..] else {
        panic!("{fx:?}")
    };
    e.handle_outcome(t0 + ms(100), ia, Outcome::Pending);
    assert_eq!(drain(&mut e), vec![fetch(1, Duration::ZERO)]);

    let mut after = Vec::new();
    e.handle_shutdown(t0 + ms(200), t0 + ms(1200));
    let fx = drain(&mut e);
    assert_eq!(
        fx,
        vec![Seen::Release {
            lease: a,
            delay: Duration::ZERO
        }]
    );
    after.extend(fx);

    // Finishing before the deadline: acked.
    e.handle_outcome(t0 + ms(300), ib, Outcome::Done);
    let fx = drain(&mut e);
    assert_eq!(fx, vec![Seen::Ack { leases: vec![b] }]);
    after.extend(fx);

    // The outstanding fetch answers: released at once, never run.
    e.handle_fetched(t0 + ms(400), S0, vec![msg(4)]);
    let fx = drain(&mut e);
    let [(d, delay)] = releases(&fx)[..] else {
        panic!("{fx:?}")
    };
    assert_eq!(fx, vec![Seen::Release { lease: d, delay }]);
    assert_eq!(delay, Duration::ZERO);
    assert_eq!(message_of(&e, d), MessageId::from(4));
    after.extend(fx);

    // C runs until the deadline, then is cancelled.
    assert_eq!(e.poll_timeout(), Some(t0 + ms(1200)));
    e.handle_timeout(t0 + ms(1199));
    assert_eq!(drain(&mut e), vec![]);
    e.handle_timeout(t0 + ms(1200));
    let fx = drain(&mut e);
    assert_eq!(
        fx,
        vec![Seen::Cancel {
            invocation: ic,
            reason: CancelReason::Shutdown
        }]
    );
    after.extend(fx);
    e.handle_outcome(t0 + ms(1300), ic, Outcome::Done);
    let fx = drain(&mut e);
    assert_eq!(
        fx,
        vec![Seen::Release {
            lease: c,
            delay: Duration::ZERO
        }]
    );
    after.extend(fx);

    // Settle results: Drained only after the last one.
    e.handle_released(t0 + ms(1400), a, SettleResult::Ok);
    after.extend(drain(&mut e));
    e.handle_acked(t0 + ms(1400), [(b, SettleResult::Ok)]);
    after.extend(drain(&mut e));
    e.handle_released(t0 + ms(1400), d, SettleResult::Ok);
    after.extend(drain(&mut e));
    assert!(!after.contains(&Seen::Drained));
    assert!(!e.is_drained());
    e.handle_released(t0 + ms(1500), c, SettleResult::Ok);
    assert_eq!(drain(&mut e), vec![Seen::Drained]);
    assert!(e.is_drained());
    assert_eq!(e.held(), 0);
    assert_eq!(e.running(), 0);

    for at in [2000, 30_000, 120_000] {
        e.handle_timeout(t0 + ms(at));
        after.extend(drain(&mut e));
    }
    assert!(
        fetches(&after).is_empty(),
        "fetch after shutdown: {after:?}"
    );
    assert!(runs(&after).is_empty(), "run after shutdown: {after:?}");
    assert_eq!(e.stats().invocations, 3);
    assert_eq!(e.poll_timeout(), None);
}

/// A running invocation that finishes with `Done` before the deadline is acked, and `Drained`
/// follows without waiting for the deadline.
#[test]
fn shutdown_lets_running_invocations_finish_before_the_deadline() {
    let t0 = Instant::now();
    let mut e = engine(&config().concurrency(1), t0);
    drain(&mut e);
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1)]);
    let (inv, a) = one_run(&drain(&mut e));
    e.handle_shutdown(t0 + ms(20), t0 + ms(2000));
    assert_eq!(drain(&mut e), vec![]);
    e.handle_outcome(t0 + ms(500), inv, Outcome::Done);
    assert_eq!(drain(&mut e), vec![Seen::Ack { leases: vec![a] }]);
    e.handle_acked(t0 + ms(600), [(a, SettleResult::Ok)]);
    assert_eq!(drain(&mut e), vec![Seen::Drained]);
    e.handle_timeout(t0 + ms(2000));
    assert_eq!(
        drain(&mut e),
        vec![],
        "Drained comes once, no cancel after it"
    );
}

/// An invocation that returns `Pending` during shutdown is not kept for a re-invocation: its lease
/// is released at once with delay 0.
#[test]
fn pending_during_shutdown_is_released_at_once() {
    let t0 = Instant::now();
    let mut e = engine(&config().concurrency(1), t0);
    drain(&mut e);
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1)]);
    let (inv, a) = one_run(&drain(&mut e));
    e.handle_shutdown(t0 + ms(20), t0 + ms(2000));
    assert_eq!(drain(&mut e), vec![]);
    e.handle_outcome(t0 + ms(30), inv, Outcome::Pending);
    assert_eq!(
        drain(&mut e),
        vec![Seen::Release {
            lease: a,
            delay: Duration::ZERO
        }]
    );
    e.handle_released(t0 + ms(40), a, SettleResult::Ok);
    assert_eq!(drain(&mut e), vec![Seen::Drained]);
}

/// `Drained` waits for an outstanding fetch, however long it would wait: a driver that stops
/// waiting answers it, as failed or with what it got (deliveries are handed back first).
#[test]
fn drained_waits_for_the_outstanding_fetch_to_be_answered() {
    let t0 = Instant::now();
    for answer in ["failed", "empty", "a delivery"] {
        let mut e = engine(&config(), t0);
        assert_eq!(drain(&mut e), vec![fetch(1, ms(1000))]);
        e.handle_shutdown(t0 + ms(10), t0 + ms(1010));
        assert_eq!(drain(&mut e), vec![], "{answer}");
        // Nothing is held, and the deadline passes: still no `Drained` while it is unanswered.
        e.handle_timeout(t0 + ms(1500));
        assert_eq!(drain(&mut e), vec![], "{answer}");
        assert!(!e.is_drained(), "{answer}");
        // Answered within the lease's validity, so a delivery is handed back, not let lapse.
        let now = t0 + ms(2000);
        match answer {
            "failed" => e.handle_fetch_failed(now, S0),
            "empty" => e.handle_fetched(now, S0, vec![]),
            _ => {
                e.handle_fetched(now, S0, vec![msg(1)]);
                let fx = drain(&mut e);
                let [(lease, Duration::ZERO)] = releases(&fx)[..] else {
                    panic!("{fx:?}")
                };
                e.handle_released(now, lease, SettleResult::Ok);
            }
        }
        assert_eq!(drain(&mut e), vec![Seen::Drained], "{answer}");
    }
}
