//! Stale inputs change nothing: outcomes of unknown, already reported or superseded invocations,
//! renew answers for unknown or already answered batches, settle answers for a lease not being
//! settled that way, and a `now` older than one given before.
//!
//! A driver's answers race with the engine's own decisions: they come late, twice, or after the
//! lease is gone. The guarantees hold whatever the order of inputs only if such inputs are ignored.

mod common;

use std::time::{Duration, Instant};

use common::*;
use leasehold_core::{Outcome, RenewResult, SettleResult};

/// An outcome for an unknown invocation, a second outcome for the same invocation, and an outcome
/// of an earlier invocation of a re-invocation message are ignored.
#[test]
fn stale_or_unknown_outcomes_are_ignored() {
    let t0 = Instant::now();
    // An invocation from another engine is unknown here.
    let mut other = engine(&config(), t0);
    drain(&mut other);
    other.handle_fetched(t0, S0, vec![msg(1)]);
    let (foreign, _) = one_run(&drain(&mut other));
    let mut e = engine(&config().concurrency(1).repoll_interval(ms(400)), t0);
    assert_eq!(drain(&mut e), vec![fetch(1, ms(1000))]);
    e.handle_outcome(t0 + ms(1), foreign, Outcome::Done);
    assert_eq!(drain(&mut e), vec![]);

    e.handle_fetched(t0 + ms(10), S0, vec![msg(1)]);
    let (inv1, a) = one_run(&drain(&mut e));
    e.handle_outcome(t0 + ms(20), inv1, Outcome::Pending);
    assert_eq!(drain(&mut e), vec![fetch(1, Duration::ZERO)]);
    // Nothing new: the next fetch goes at once, blocking until the re-invocation is due.
    e.handle_fetched(t0 + ms(25), S0, vec![]);
    assert_eq!(drain(&mut e), vec![fetch(1, ms(395))]);
    // A second outcome of the same (finished) invocation: ignored, no ack.
    e.handle_outcome(t0 + ms(30), inv1, Outcome::Done);
    assert_eq!(drain(&mut e), vec![]);
    e.handle_timeout(t0 + ms(420));
    e.handle_fetched(t0 + ms(420), S0, vec![]);
    let (inv2, _) = one_run(&drain(&mut e));
    // The earlier invocation's outcome arrives again during the re-invocation: ignored.
    e.handle_outcome(t0 + ms(430), inv1, Outcome::Done);
    assert_eq!(drain(&mut e), vec![]);
    assert_eq!(e.running(), 1);
    e.handle_outcome(t0 + ms(440), inv2, Outcome::Done);
    assert_eq!(
        drain(&mut e),
        vec![fetch(1, ms(1000)), Seen::Ack { leases: vec![a] }]
    );
    // A second Done for the acked invocation: no second ack.
    e.handle_outcome(t0 + ms(450), inv2, Outcome::Done);
    assert_eq!(drain(&mut e), vec![]);
    e.handle_acked(t0 + ms(460), [(a, SettleResult::Ok)]);
    drain(&mut e);
    // An outcome for a lease that is gone.
    e.handle_outcome(
        t0 + ms(470),
        inv2,
        Outcome::Reject {
            reason: "late".into(),
        },
    );
    assert!(dead_letters(&drain(&mut e)).is_empty());
    assert_eq!(e.stats().acked, 1);
}

/// A renew result for an unknown or already answered batch is ignored.
#[test]
fn stale_renew_results_are_ignored() {
    let t0 = Instant::now();
    let mut e = engine(&config().concurrency(1), t0);
    drain(&mut e);
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1)]);
    let (inv, a) = one_run(&drain(&mut e));
    e.handle_timeout(t0 + ms(1000));
    let (batch1, _) = one_renew(&drain(&mut e));
    e.handle_renewed(t0 + ms(1010), batch1, [(a, RenewResult::Kept)]);
    assert_eq!(drain(&mut e), vec![]);
    // The same batch answered again (and now "lost"): ignored.
    e.handle_renewed(t0 + ms(1020), batch1, [(a, RenewResult::Lost)]);
    assert_eq!(drain(&mut e), vec![]);
    e.handle_renew_failed(t0 + ms(1030), batch1);
    assert_eq!(drain(&mut e), vec![]);
    assert_eq!(e.valid_until(a), Some(t0 + ms(3700)));

    // A batch id this engine never issued (taken from a busier engine).
    let mut other = engine(&config().concurrency(1), t0);
    drain(&mut other);
    other.handle_fetched(t0, S0, vec![msg(1)]);
    let (_, oa) = one_run(&drain(&mut other));
    let mut foreign = None;
    for k in 1..=5u64 {
        other.handle_timeout(t0 + ms(1000 * k));
        let (b, _) = one_renew(&drain(&mut other));
        other.handle_renewed(t0 + ms(1000 * k + 1), b, [(oa, RenewResult::Kept)]);
        drain(&mut other);
        foreign = Some(b);
    }
    e.handle_renewed(t0 + ms(1040), foreign.unwrap(), [(a, RenewResult::Lost)]);
    assert_eq!(drain(&mut e), vec![]);
    e.handle_renew_failed(t0 + ms(1050), foreign.unwrap());
    assert_eq!(drain(&mut e), vec![]);
    assert!(e.valid_until(a).is_some());

    // The lease still works normally.
    e.handle_outcome(t0 + ms(1100), inv, Outcome::Done);
    assert_eq!(acks(&drain(&mut e)), vec![vec![a]]);
}

/// Settle results for a lease that is not being settled that way are ignored.
#[test]
fn settle_results_for_leases_not_being_settled_are_ignored() {
    let t0 = Instant::now();
    let mut e = engine(&config().concurrency(1).max_leases(1), t0);
    drain(&mut e);
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1)]);
    let (inv, a) = one_run(&drain(&mut e));
    // Running, not being settled: these change nothing, and are counted as unexpected. (An ack
    // answer names the batch of an `Ack` effect, so none can come for a lease never acked.)
    e.handle_released(t0 + ms(20), a, SettleResult::Ok);
    e.handle_dead_lettered(t0 + ms(20), a, SettleResult::Lost);
    assert_eq!(drain(&mut e), vec![]);
    assert_eq!(e.running(), 1);
    assert_eq!(e.held(), 1);
    assert_eq!(e.stats().unexpected, 2);
    e.handle_outcome(t0 + ms(30), inv, Outcome::Done);
    assert_eq!(drain(&mut e), vec![Seen::Ack { leases: vec![a] }]);
    // Being acked, not released: a release result is ignored.
    e.handle_released(t0 + ms(40), a, SettleResult::Lost);
    e.handle_dead_lettered(t0 + ms(40), a, SettleResult::Ok);
    assert_eq!(drain(&mut e), vec![]);
    assert_eq!(e.held(), 1);
    assert_eq!(e.stats().unexpected, 4);
    e.handle_acked(t0 + ms(50), [(a, SettleResult::Ok)]);
    assert_eq!(drain(&mut e), vec![fetch(1, Duration::ZERO)]);
    // Gone: a second answer for the same batch is ignored.
    e.handle_acked(t0 + ms(60), [(a, SettleResult::Failed)]);
    assert_eq!(drain(&mut e), vec![]);
    assert_eq!(e.stats().acked, 1);
    assert_eq!(e.stats().unexpected, 5);
}

/// A `now` earlier than a previous one is treated as the latest `now` (no panic, no timers run
/// twice, no timeout in the past).
#[test]
fn time_going_backwards_is_ignored() {
    let t0 = Instant::now();
    let mut e = engine(&config().concurrency(1), t0);
    drain(&mut e);
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1)]);
    let (inv, a) = one_run(&drain(&mut e));
    e.handle_timeout(t0 + ms(1000));
    let (batch, _) = one_renew(&drain(&mut e));
    e.handle_timeout(t0 + ms(500));
    assert_eq!(drain(&mut e), vec![]);
    e.handle_renewed(t0 + ms(200), batch, [(a, RenewResult::Kept)]);
    assert_eq!(drain(&mut e), vec![]);
    assert_no_busy_loop(&e, t0 + ms(1000));
    assert_eq!(e.poll_timeout(), Some(t0 + ms(2000)));
    e.handle_outcome(t0, inv, Outcome::Done);
    assert_eq!(
        drain(&mut e),
        vec![fetch(1, Duration::ZERO), Seen::Ack { leases: vec![a] }]
    );
    assert_no_busy_loop(&e, t0 + ms(1000));
}
