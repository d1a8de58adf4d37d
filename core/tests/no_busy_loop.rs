//! Guarantee 7 of the crate docs: `poll_timeout` is in the future whenever nothing can happen now.
//!
//! A driver sleeps until `poll_timeout`; one at or before `now` would make it spin, calling
//! `handle_timeout` in a loop with nothing to do. Checked after every input of seeded random runs,
//! of the common paths, and of the late answers most likely to leave a timer in the past.

mod common;

use std::time::Instant;

use common::*;
use leasehold_core::{Outcome, RenewResult, SettleResult};

/// After every input of a long, varied, seeded random run, `poll_timeout()` is `None` or strictly
/// later than `now`.
#[test]
fn no_busy_loop_random_driver() {
    let t0 = Instant::now();
    let mut failures = Vec::new();
    for seed in 0..20 {
        // Half the seeds prefetch: held, not running, messages must not break the bounds.
        let prefetch = usize::try_from(seed % 2 * 2).unwrap();
        let cfg = config()
            .concurrency(3)
            .prefetch(prefetch)
            .max_leases(5)
            .seed(seed);
        let mut sim = Sim::new(&cfg, 2, seed, t0);
        sim.run(1500);
        if let Some(first) = sim.busy_loops.first() {
            failures.push(format!(
                "seed {seed}: {} busy loops, first: {first}",
                sim.busy_loops.len()
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// A fetch answered after the heartbeat it would schedule was due leaves no timeout in the past.
#[test]
fn no_busy_loop_when_fetch_answers_after_heartbeat_due() {
    let t0 = Instant::now();
    let mut e = engine(&config().concurrency(1).heartbeat_interval(ms(500)), t0);
    // The wait is capped at the heartbeat (500 ms), but the answer still takes its round trip.
    assert_eq!(drain(&mut e), vec![fetch(1, ms(500))]);
    // A blocking fetch sent at t0 returns at t0+600; its lease's first renew was due at t0+500.
    e.handle_fetched(t0 + ms(600), S0, vec![msg(1)]);
    drain(&mut e);
    assert_no_busy_loop(&e, t0 + ms(600));
}

/// A renew failure answered after the next round was due leaves no timeout in the past.
#[test]
fn no_busy_loop_when_renew_fails_after_next_round_due() {
    let t0 = Instant::now();
    let mut e = engine(&config().concurrency(1), t0);
    drain(&mut e);
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1)]);
    drain(&mut e);
    e.handle_timeout(t0 + ms(1000));
    let (batch, _) = one_renew(&drain(&mut e));
    e.handle_renew_failed(t0 + ms(2100), batch);
    drain(&mut e);
    assert_no_busy_loop(&e, t0 + ms(2100));
}

/// A release that fails after its lease missed a heartbeat (a release in flight is not renewed, or
/// a renew landing after it would undo its delay) leaves no timeout in the past.
#[test]
fn no_busy_loop_when_release_fails_after_missed_heartbeat() {
    let t0 = Instant::now();
    let mut e = engine(
        &config()
            .concurrency(1)
            .max_leases(1)
            .heartbeat_interval(ms(500)),
        t0,
    );
    drain(&mut e);
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1)]);
    let (inv, a) = one_run(&drain(&mut e));
    e.handle_outcome(
        t0 + ms(20),
        inv,
        Outcome::Retry {
            delay: Some(ms(50)),
        },
    );
    assert_eq!(
        drain(&mut e),
        vec![Seen::Release {
            lease: a,
            delay: ms(50)
        }]
    );
    e.handle_timeout(t0 + ms(500));
    assert_eq!(drain(&mut e), vec![], "a release in flight is not renewed");
    e.handle_released(t0 + ms(700), a, SettleResult::Failed);
    drain(&mut e);
    assert_no_busy_loop(&e, t0 + ms(700));
}

/// Explicit checks after each input of the common paths.
#[test]
fn no_busy_loop_on_common_paths() {
    let t0 = Instant::now();
    let mut e = engine(&config().concurrency(2).repoll_interval(ms(400)), t0);
    drain(&mut e);
    assert_no_busy_loop(&e, t0);
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1)]);
    let fx = drain(&mut e);
    assert_no_busy_loop(&e, t0 + ms(10));
    let (inv, _) = one_run(&fx);
    e.handle_fetched(t0 + ms(20), S0, vec![]);
    drain(&mut e);
    assert_no_busy_loop(&e, t0 + ms(20));
    e.handle_outcome(t0 + ms(30), inv, Outcome::Pending);
    drain(&mut e);
    assert_no_busy_loop(&e, t0 + ms(30));
    let mut now = t0 + ms(30);
    for _ in 0..20 {
        let at = e.poll_timeout().expect("timers pending");
        now = at;
        e.handle_timeout(now);
        for effect in drain(&mut e) {
            match effect {
                Seen::Run { invocation, .. } => e.handle_outcome(now, invocation, Outcome::Pending),
                Seen::Fetch { .. } => e.handle_fetched(now, S0, vec![]),
                Seen::Renew { batch, leases } => e.handle_renewed(
                    now,
                    batch,
                    leases.into_iter().map(|l| (l, RenewResult::Kept)),
                ),
                other => panic!("unexpected {other:?}"),
            }
            drain(&mut e);
            assert_no_busy_loop(&e, now);
        }
        assert_no_busy_loop(&e, now);
    }
    assert!(now > t0 + secs(3), "time moved on: {:?}", now - t0);
}
