//! Guarantees 5 and 3 of the crate docs: a lease without a successful renew for
//! `claim_timeout - expiry_margin`, counted from the renew's send time, is dropped, and so is one a
//! renew reports lost; neither is acked (except a `Done` within the cancel grace after an expiry:
//! see `tests/orphan_acks.rs`).
//!
//! By then the backend may have handed the message to another replica, so this worker must stop
//! acting on it: its running invocation is cancelled, its late outcome settles nothing, and no
//! later `Renew`, `Ack` or `Release` names it. Validity is counted from when the renew (or the
//! fetch that delivered the lease) was sent, not from its answer: the backend restarted its own
//! count at some instant after the send, so counting from the send errs on the safe side. A late
//! answer therefore still counts from its send, and a delivery that arrives already past that point
//! is not run.

mod common;

use std::time::{Duration, Instant};

use common::*;
use leasehold_core::{CancelReason, Outcome, RenewResult, SettleResult};

/// A lease reported `RenewResult::Lost` is dropped: its running invocation gets
/// `Cancel { LeaseLost }`, its later `Done` produces no `Ack`, and it is never in a later `Renew`,
/// `Ack` or `Release`.
#[test]
fn lost_lease_is_cancelled_and_never_acted_on_again() {
    let t0 = Instant::now();
    let mut e = engine(&config().concurrency(2), t0);
    assert_eq!(drain(&mut e), vec![fetch(2, ms(1000))]);
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1), msg(2)]);
    let fx = drain(&mut e);
    let [(inv_a, a), (inv_b, b)] = runs(&fx)[..] else {
        panic!("{fx:?}")
    };

    e.handle_timeout(t0 + ms(1000));
    let (batch, leases) = one_renew(&drain(&mut e));
    assert_eq!(leases, vec![a, b]);
    e.handle_renewed(
        t0 + ms(1010),
        batch,
        [(a, RenewResult::Lost), (b, RenewResult::Kept)],
    );
    assert_eq!(
        drain(&mut e),
        vec![Seen::Cancel {
            invocation: inv_a,
            reason: CancelReason::LeaseLost
        }]
    );
    assert_eq!(e.valid_until(a), None);
    assert_eq!(e.held(), 1);
    assert_eq!(e.stats().lost, 1);

    // Its Done is discarded: no Ack, no Release; its slot is free again.
    e.handle_outcome(t0 + ms(1100), inv_a, Outcome::Done);
    let fx = drain(&mut e);
    assert_eq!(fx, vec![fetch(1, Duration::ZERO)]);
    assert!(e.lease(a).is_none());
    // The non-blocking fetch found nothing: the next one goes at once and may block.
    e.handle_fetched(t0 + ms(1110), S0, vec![]);
    assert_eq!(drain(&mut e), vec![fetch(1, ms(1000))]);

    let mut later = Vec::new();
    e.handle_timeout(t0 + ms(2000));
    let fx = drain(&mut e);
    let (batch, leases) = one_renew(&fx);
    assert_eq!(leases, vec![b]);
    later.extend(fx);
    e.handle_renewed(t0 + ms(2010), batch, [(b, RenewResult::Kept)]);
    later.extend(drain(&mut e));
    e.handle_outcome(t0 + ms(2100), inv_b, Outcome::Done);
    let fx = drain(&mut e);
    assert_eq!(acks(&fx), vec![vec![b]]);
    later.extend(fx);
    e.handle_acked(t0 + ms(2200), [(b, SettleResult::Ok)]);
    later.extend(drain(&mut e));
    e.handle_timeout(t0 + ms(5000));
    later.extend(drain(&mut e));
    assert!(!mentions(&later, a), "lost lease acted on again: {later:?}");
    assert_eq!(e.stats().acked, 1);
}

/// A waiting (`Pending`) lease reported lost is dropped: it is never re-invoked, renewed or
/// released.
#[test]
fn lost_waiting_lease_is_not_reinvoked() {
    let t0 = Instant::now();
    let mut e = engine(
        &config()
            .concurrency(1)
            .max_leases(1)
            .repoll_interval(ms(1500)),
        t0,
    );
    drain(&mut e);
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1)]);
    let (inv, a) = one_run(&drain(&mut e));
    e.handle_outcome(t0 + ms(100), inv, Outcome::Pending);
    assert_eq!(drain(&mut e), vec![], "max_leases 1 is full");
    e.handle_timeout(t0 + ms(1000));
    let (batch, leases) = one_renew(&drain(&mut e));
    assert_eq!(leases, vec![a]);
    e.handle_renewed(t0 + ms(1010), batch, [(a, RenewResult::Lost)]);
    // Nothing to cancel; the lease is gone, so intake resumes.
    assert_eq!(drain(&mut e), vec![fetch(1, Duration::ZERO)]);
    assert!(e.lease(a).is_none());
    assert_eq!(e.held(), 0);
    e.handle_fetched(t0 + ms(1020), S0, vec![]);
    let mut later = drain(&mut e);
    for at in [1600, 2000, 3000, 4000] {
        e.handle_timeout(t0 + ms(at));
        later.extend(drain(&mut e));
    }
    assert!(!mentions(&later, a), "{later:?}");
    assert_eq!(e.stats().invocations, 1);
}

/// Local expiry: no successful renew for `claim_timeout - expiry_margin` from the send time of the
/// fetch that delivered the lease → `Cancel { LeaseExpired }` at exactly that instant (valid one
/// instant before); nothing is acked, renewed or released for it afterwards.
#[test]
fn lease_expires_locally_at_ttl_after_last_confirmation_send_time() {
    let t0 = Instant::now();
    let mut e = engine(&config().concurrency(2), t0);
    assert_eq!(drain(&mut e), vec![fetch(2, ms(1000))]);
    // The fetch sent at t0 delivers A at t0+10 (short: fetch again).
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1)]);
    let fx = drain(&mut e);
    let (inv_a, a) = one_run(&fx);
    assert_eq!(
        fx,
        vec![
            Seen::Run {
                invocation: inv_a,
                lease: a
            },
            fetch(1, ms(1000))
        ]
    );
    e.handle_fetched(t0 + ms(20), S0, vec![]);
    assert_eq!(drain(&mut e), vec![]);
    assert_eq!(
        e.valid_until(a),
        Some(t0 + ms(2700)),
        "from the fetch's send time t0"
    );

    // Heartbeat at t0+1000 (never answered); the paced fetch, sent at t0+1010, delivers B.
    e.handle_timeout(t0 + ms(1000));
    let fx = drain(&mut e);
    let (batch, leases) = one_renew(&fx);
    assert_eq!(
        fx,
        vec![Seen::Renew {
            batch,
            leases: vec![a]
        }]
    );
    assert_eq!(leases, vec![a]);
    e.handle_timeout(t0 + ms(1010));
    assert_eq!(drain(&mut e), vec![fetch(1, ms(1000))]);
    e.handle_fetched(t0 + ms(1020), S0, vec![msg(2)]);
    let (inv_b, b) = one_run(&drain(&mut e));
    assert_eq!(e.valid_until(b), Some(t0 + ms(3710)));

    assert_eq!(e.poll_timeout(), Some(t0 + ms(2700)));
    e.handle_timeout(t0 + ms(2699));
    assert_eq!(drain(&mut e), vec![]);
    assert_eq!(
        e.valid_until(a),
        Some(t0 + ms(2700)),
        "still valid one instant before"
    );
    e.handle_timeout(t0 + ms(2700));
    assert_eq!(
        drain(&mut e),
        vec![Seen::Cancel {
            invocation: inv_a,
            reason: CancelReason::LeaseExpired
        }]
    );
    assert_eq!(e.valid_until(a), None);
    assert_eq!(e.valid_until(b), Some(t0 + ms(3710)));
    assert_eq!(e.stats().expired, 1);

    // The renew's success comes too late for A; the overdue next round renews B only.
    let mut later = Vec::new();
    e.handle_renewed(t0 + ms(2800), batch, [(a, RenewResult::Kept)]);
    let fx = drain(&mut e);
    let (batch2, leases) = one_renew(&fx);
    assert_eq!(leases, vec![b]);
    later.extend(fx);
    assert_eq!(
        e.valid_until(a),
        None,
        "a late renew does not revive an expired lease"
    );
    // A's invocation reports Done past the cancel grace (150 ms after the expiry): discarded,
    // no Ack / Release (tests/orphan_acks.rs: a Done within the grace is acked late).
    e.handle_outcome(t0 + ms(2900), inv_a, Outcome::Done);
    let fx = drain(&mut e);
    assert_eq!(fx, vec![fetch(1, Duration::ZERO)]);
    later.extend(fx);
    e.handle_fetched(t0 + ms(2910), S0, vec![]);
    later.extend(drain(&mut e));
    e.handle_renewed(t0 + ms(2950), batch2, [(b, RenewResult::Kept)]);
    later.extend(drain(&mut e));
    e.handle_timeout(t0 + ms(3800));
    later.extend(drain(&mut e));
    e.handle_outcome(t0 + ms(3900), inv_b, Outcome::Done);
    later.extend(drain(&mut e));
    assert_eq!(acks(&later), vec![vec![b]]);
    assert!(
        !mentions(&later, a),
        "expired lease acted on again: {later:?}"
    );
}

/// A renew answered late but successfully keeps the lease valid, counted from the renew's *send*
/// time.
#[test]
fn late_successful_renew_keeps_lease_valid_from_its_send_time() {
    let t0 = Instant::now();
    let mut e = engine(&config().concurrency(1), t0);
    drain(&mut e);
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1)]);
    let (inv, a) = one_run(&drain(&mut e));
    e.handle_timeout(t0 + ms(1000));
    let (batch, _) = one_renew(&drain(&mut e));

    // Answered at t0+2750, after the fetch-based expiry (t0+2700) but sent at t0+1000.
    e.handle_renewed(t0 + ms(2750), batch, [(a, RenewResult::Kept)]);
    let fx = drain(&mut e);
    assert!(cancels(&fx).is_empty(), "{fx:?}");
    assert_eq!(renews(&fx).len(), 1, "the overdue round goes out: {fx:?}");
    assert_eq!(e.valid_until(a), Some(t0 + ms(3700)));
    e.handle_timeout(t0 + ms(3699));
    assert_eq!(drain(&mut e), vec![]);
    e.handle_outcome(t0 + ms(3699), inv, Outcome::Done);
    assert_eq!(
        drain(&mut e),
        vec![fetch(1, Duration::ZERO), Seen::Ack { leases: vec![a] }]
    );
}

/// A delivery whose fetch was sent more than `claim_timeout - expiry_margin` ago is already expired
/// locally when it arrives (its `valid_until` has passed): it must not be run, and no timeout may
/// be left in the past.
#[test]
fn delivery_already_expired_on_arrival_is_not_run() {
    let t0 = Instant::now();
    let mut e = engine(&config().concurrency(1), t0);
    assert_eq!(drain(&mut e), vec![fetch(1, ms(1000))]);
    // The fetch sent at t0 (lease valid until t0+2700 by the engine's own rule) answers at t0+2800.
    e.handle_fetched(t0 + ms(2800), S0, vec![msg(1)]);
    let fx = drain(&mut e);
    assert!(
        runs(&fx).is_empty(),
        "a lease already past its local expiry was started: {fx:?}"
    );
    assert_no_busy_loop(&e, t0 + ms(2800));
}
