//! Guarantee 3 of the crate docs, for an invocation still running when its lease expires
//! locally (the backend stopped answering renews): it is cancelled, but a `Done` it returns
//! within the cancel grace after the expiry has its ack sent, fenced, as a late ack. The
//! backend refuses it if anyone took the message over; otherwise the work is not redone. A
//! lease known lost (a renew answered `Lost`), a `Done` past the grace or past the invocation's
//! time limit, a redelivery of the message meanwhile, or more late acks than `max_leases` keep
//! the old rule: the result is void.
//!
//! The configuration is the tests' usual one: claim 3 s, margin 300 ms, so a lease delivered by
//! the fetch sent at t0 expires locally at t0 + 2.7 s, and the cancel grace is 150 ms (half the
//! margin): a `Done` is acked late until t0 + 2.85 s.

mod common;

use std::time::{Duration, Instant};

use common::*;
use leasehold_core::{
    CancelReason, Effect, Fence, InvocationId, LeaseId, LossReason, Outcome, RenewResult,
    SettleResult,
};

/// When the lease of message 1 expires locally, and when the cancel grace after it ends.
const EXPIRY: Duration = Duration::from_millis(2700);
const GRACE_END: Duration = Duration::from_millis(2850);

/// An engine that ran message 1 from t0 + 10 ms and sent a renew at t0 + 1 s that is never
/// answered, up to the local expiry at t0 + 2.7 s, which cancelled the invocation.
fn expired_while_running(
    config: leasehold_core::Config,
    t0: Instant,
) -> (TestEngine, InvocationId, LeaseId) {
    let mut e = engine(&config, t0);
    drain(&mut e);
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1)]);
    let (inv, a) = one_run(&drain(&mut e));
    e.handle_timeout(t0 + ms(1000));
    one_renew(&drain(&mut e));
    e.handle_timeout(t0 + EXPIRY);
    let fx = drain_all(&mut e);
    assert!(
        fx.iter().any(|f| matches!(
            f,
            Effect::Lost {
                reason: LossReason::Expired,
                ..
            }
        )),
        "{fx:?}"
    );
    assert!(
        fx.contains(&Effect::Cancel {
            invocation: inv,
            reason: CancelReason::LeaseExpired
        }),
        "{fx:?}"
    );
    assert_eq!((e.held(), e.running(), e.late_acks()), (0, 1, 0));
    (e, inv, a)
}

fn acked(effects: &[Effect<String>]) -> Vec<LeaseId> {
    effects
        .iter()
        .filter_map(|f| match f {
            Effect::Ack { leases, .. } => Some(leases.clone()),
            _ => None,
        })
        .flatten()
        .collect()
}

/// The lease `a` is gone, no late ack is left, and the counters are (acked, acked late, acked
/// after expiry, expired, lost).
fn assert_ended(
    e: &leasehold_core::LeaseEngine<String>,
    a: LeaseId,
    counts: (u64, u64, u64, u64, u64),
) {
    let s = *e.stats();
    assert_eq!(
        (
            s.acked,
            s.acked_late,
            s.acked_after_expiry,
            s.expired,
            s.lost
        ),
        counts
    );
    assert_eq!(e.late_acks(), 0);
    assert!(e.lease(a).is_none());
}

fn losses(effects: &[Effect<String>]) -> Vec<LossReason> {
    effects
        .iter()
        .filter_map(|f| match f {
            Effect::Lost { reason, .. } => Some(*reason),
            _ => None,
        })
        .collect()
}

/// A `Done` just inside the grace is acked, fenced with the delivery's own fence; the backend
/// confirms it: counted once as acked (late, after expiry), once as expired, never as lost,
/// and the message never runs again.
#[test]
fn a_done_within_the_cancel_grace_after_expiry_is_acked_late() {
    let t0 = Instant::now();
    let (mut e, inv, a) = expired_while_running(config(), t0);
    let done_at = t0 + GRACE_END - Duration::from_nanos(1);
    e.handle_outcome(done_at, inv, Outcome::Done);
    let fx = drain_all(&mut e);
    assert_eq!(acked(&fx), vec![a], "{fx:?}");
    let fences: Vec<Fence> = fx
        .iter()
        .filter_map(|f| match f {
            Effect::Ack { lease_refs, .. } => Some(lease_refs[0].fence),
            _ => None,
        })
        .collect();
    assert_eq!(
        fences,
        vec![msg(1).fence],
        "the ack carries the delivery's fence"
    );
    // Not held, no slot: intake goes on while the ack is out.
    assert_eq!((e.held(), e.running(), e.late_acks()), (0, 0, 1));
    assert!(
        fx.iter().any(|f| matches!(f, Effect::Fetch { .. })),
        "{fx:?}"
    );
    assert_eq!(e.valid_until(a), None);

    e.handle_acked(done_at + ms(5), [(a, SettleResult::Ok)]);
    let fx = drain_all(&mut e);
    assert!(losses(&fx).is_empty(), "{fx:?}");
    assert_ended(&e, a, (1, 1, 1, 1, 0));
}

/// One instant later the grace is over: the driver drops a handler by then, and a `Done` the
/// engine still hears of is void (the message runs again after the claim timeout).
#[test]
fn a_done_after_the_cancel_grace_is_void() {
    let t0 = Instant::now();
    let (mut e, inv, a) = expired_while_running(config(), t0);
    e.handle_outcome(t0 + GRACE_END, inv, Outcome::Done);
    let fx = drain_all(&mut e);
    assert!(acked(&fx).is_empty(), "{fx:?}");
    assert_eq!((e.running(), e.late_acks()), (0, 0));
    assert!(e.lease(a).is_none());
    let s = *e.stats();
    assert_eq!((s.acked, s.acked_after_expiry, s.expired), (0, 0, 1));
}

/// Any other outcome of the cancelled invocation stays void: only finished work is acked.
#[test]
fn only_a_done_of_an_expired_lease_is_acked() {
    let t0 = Instant::now();
    for outcome in [
        Outcome::Pending,
        Outcome::Retry { delay: None },
        Outcome::Failed {
            error: "cancelled".into(),
        },
        Outcome::Reject {
            reason: "bad".into(),
        },
    ] {
        let (mut e, inv, _) = expired_while_running(config(), t0);
        e.handle_outcome(t0 + EXPIRY + ms(10), inv, outcome.clone());
        let fx = drain_all(&mut e);
        assert!(
            fx.iter().all(|f| matches!(f, Effect::Fetch { .. })),
            "{outcome:?}: {fx:?}"
        );
        assert_eq!((e.running(), e.late_acks()), (0, 0), "{outcome:?}");
    }
}

/// The backend refuses the fenced ack (someone took the message over): the result is void, and
/// nothing is counted or reported again (the lease was reported expired already).
#[test]
fn a_refused_ack_after_expiry_voids_the_result_and_counts_nothing_twice() {
    let t0 = Instant::now();
    let (mut e, inv, a) = expired_while_running(config(), t0);
    e.handle_outcome(t0 + EXPIRY + ms(50), inv, Outcome::Done);
    assert_eq!(acked(&drain_all(&mut e)), vec![a]);
    e.handle_acked(t0 + EXPIRY + ms(60), [(a, SettleResult::Lost)]);
    let fx = drain_all(&mut e);
    assert!(losses(&fx).is_empty(), "{fx:?}");
    assert_ended(&e, a, (0, 0, 0, 1, 0));
}

/// A late ack whose call fails is retried like any late ack, and confirmed later.
#[test]
fn a_failed_ack_after_expiry_is_retried() {
    let t0 = Instant::now();
    let (mut e, inv, a) = expired_while_running(config(), t0);
    e.handle_outcome(t0 + EXPIRY + ms(50), inv, Outcome::Done);
    assert_eq!(acked(&drain_all(&mut e)), vec![a]);
    let batch = e.last_ack_batch().unwrap();
    e.handle_ack_failed(
        t0 + EXPIRY + ms(60),
        batch,
        leasehold_core::ErrorKind::Transient,
    );
    drain_all(&mut e);
    assert_eq!(e.late_acks(), 1);
    let mut now = t0 + EXPIRY + ms(60);
    let mut again = Vec::new();
    while again.is_empty() {
        now = e
            .poll_timeout()
            .expect("the late ack's retry is due")
            .max(now);
        e.handle_timeout(now);
        for f in drain_all(&mut e) {
            match f {
                Effect::Ack { leases, .. } => again.extend(leases),
                Effect::Fetch { stream, .. } => e.handle_fetched(now, stream, vec![]),
                _ => {}
            }
        }
    }
    assert_eq!(again, vec![a]);
    e.handle_acked(now + ms(5), [(a, SettleResult::Ok)]);
    drain_all(&mut e);
    assert_eq!(e.stats().acked_after_expiry, 1);
}

/// A lease known lost (a renew answered `Lost`: a takeover) is never acked, whatever its
/// invocation returns and however soon.
#[test]
fn a_done_after_a_takeover_is_never_acked() {
    let t0 = Instant::now();
    let mut e = engine(&config(), t0);
    drain(&mut e);
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1)]);
    let (inv, a) = one_run(&drain(&mut e));
    e.handle_timeout(t0 + ms(1000));
    let (batch, _) = one_renew(&drain(&mut e));
    e.handle_renewed(t0 + ms(1010), batch, [(a, RenewResult::Lost)]);
    assert_eq!(
        drain(&mut e),
        vec![Seen::Cancel {
            invocation: inv,
            reason: CancelReason::LeaseLost
        }]
    );
    e.handle_outcome(t0 + ms(1011), inv, Outcome::Done);
    let fx = drain_all(&mut e);
    assert!(acked(&fx).is_empty(), "{fx:?}");
    assert_eq!(e.late_acks(), 0);
    // Nor later, when the lease would have expired.
    e.handle_timeout(t0 + secs(5));
    assert!(acked(&drain_all(&mut e)).is_empty());
    let s = *e.stats();
    assert_eq!((s.acked, s.lost, s.expired), (0, 1, 0));
}

/// An invocation already cancelled for its time limit is a failed attempt, also if its lease
/// then expires: its `Done` is void. And the grace ends no later than the time limit.
#[test]
fn a_done_past_the_time_limit_is_void() {
    let t0 = Instant::now();
    // Time limit 2.75 s from the start at t0 + 10 ms: t0 + 2.76 s, inside the grace.
    let limited = || config().max_processing_time(ms(2750));
    let (mut e, inv, a) = expired_while_running(limited(), t0);
    e.handle_outcome(t0 + ms(2759), inv, Outcome::Done);
    assert_eq!(acked(&drain_all(&mut e)), vec![a], "before the limit");
    let (mut e, inv, _) = expired_while_running(limited(), t0);
    e.handle_outcome(t0 + ms(2760), inv, Outcome::Done);
    assert!(acked(&drain_all(&mut e)).is_empty(), "at the limit");
    assert_eq!(e.late_acks(), 0);

    // Cancelled for the limit first (t0 + 1.01 s), then expired: void.
    let mut e = engine(&config().max_processing_time(ms(1000)), t0);
    drain(&mut e);
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1)]);
    let (inv, _) = one_run(&drain(&mut e));
    e.handle_timeout(t0 + ms(1010));
    let fx = drain(&mut e);
    assert!(cancels(&fx).contains(&(inv, CancelReason::MaxProcessingTime)));
    e.handle_timeout(t0 + EXPIRY);
    drain(&mut e);
    e.handle_outcome(t0 + EXPIRY + ms(10), inv, Outcome::Done);
    assert!(acked(&drain_all(&mut e)).is_empty());
    assert_eq!(e.late_acks(), 0);
}

/// The message is delivered to this engine again while the expired invocation winds down: the
/// new delivery waits (never two runs of a message at once), the old `Done` is void (its fence
/// is stale: the redelivery was a takeover), and the new delivery runs once the old one
/// reported.
#[test]
fn a_redelivery_while_the_orphan_winds_down_voids_its_done() {
    let t0 = Instant::now();
    let (mut e, inv, a) = expired_while_running(config().concurrency(2), t0);
    // The fetch for the second slot (sent at t0 + 10 ms) answers empty; the next one delivers
    // message 1 again.
    let now = t0 + EXPIRY + ms(10);
    e.handle_fetched(now, S0, vec![]);
    let fx = drain_all(&mut e);
    assert!(
        fx.iter().any(|f| matches!(f, Effect::Fetch { .. })),
        "a slot is free: {fx:?}"
    );
    let again = delivery(1, 2, 2);
    e.handle_fetched(now + ms(10), S0, vec![again]);
    let fx = drain_all(&mut e);
    assert!(
        !fx.iter().any(|f| matches!(f, Effect::Run(_))),
        "the redelivery waits for the cancelled invocation: {fx:?}"
    );
    e.handle_outcome(now + ms(20), inv, Outcome::Done);
    let fx = drain_all(&mut e);
    assert!(acked(&fx).is_empty(), "{fx:?}");
    let reinvocations: Vec<u64> = fx
        .iter()
        .filter_map(|f| match f {
            Effect::Run(invocation) => Some(invocation.lease_ref.fence.0),
            _ => None,
        })
        .collect();
    assert_eq!(reinvocations, vec![2], "{fx:?}");
    assert_eq!(e.late_acks(), 0);
    assert!(e.lease(a).is_none());
}

/// The message is delivered again after the `Done` became a late ack: the late ack ends as a
/// takeover (not reported again: the lease was reported expired), and the delivery runs.
#[test]
fn a_redelivery_after_the_late_ack_ends_it_as_a_takeover() {
    let t0 = Instant::now();
    let (mut e, inv, a) = expired_while_running(config(), t0);
    let now = t0 + EXPIRY + ms(50);
    e.handle_outcome(now, inv, Outcome::Done);
    let fx = drain_all(&mut e);
    assert_eq!(acked(&fx), vec![a]);
    let batch = e.last_ack_batch().unwrap();
    e.handle_ack_failed(now + ms(5), batch, leasehold_core::ErrorKind::Transient);
    drain_all(&mut e);
    assert_eq!(e.late_acks(), 1);
    let stream = fx
        .iter()
        .find_map(|f| match f {
            Effect::Fetch { stream, .. } => Some(*stream),
            _ => None,
        })
        .expect("the freed slot fetches");
    let again = delivery(1, 2, 2);
    e.handle_fetched(now + ms(10), stream, vec![again]);
    let fx = drain_all(&mut e);
    assert!(losses(&fx).is_empty(), "{fx:?}");
    let runs: Vec<u64> = fx
        .iter()
        .filter_map(|f| match f {
            Effect::Run(invocation) => Some(invocation.lease_ref.fence.0),
            _ => None,
        })
        .collect();
    assert_eq!(runs, vec![2], "{fx:?}");
    assert_eq!(e.late_acks(), 0);
    assert!(e.lease(a).is_none());
    let s = *e.stats();
    assert_eq!((s.lost, s.expired, s.acked), (0, 1, 0));
}

/// Late acks are bounded by `max_leases`: two expired invocations' `Done`s fit a bound of two;
/// with a bound of one taken by a pending late ack, the next expired invocation's `Done` is void.
#[test]
fn late_acks_after_expiry_count_against_the_bound() {
    let t0 = Instant::now();
    let mut e = engine(&config().concurrency(2).max_leases(2), t0);
    drain(&mut e);
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1), msg(2)]);
    let fx = drain(&mut e);
    let [(inv_a, a), (inv_b, b)] = runs(&fx)[..] else {
        panic!("{fx:?}")
    };
    e.handle_timeout(t0 + ms(1000));
    one_renew(&drain(&mut e));
    e.handle_timeout(t0 + EXPIRY);
    assert_eq!(cancels(&drain(&mut e)).len(), 2);
    e.handle_outcome(t0 + EXPIRY + ms(10), inv_a, Outcome::Done);
    e.handle_outcome(t0 + EXPIRY + ms(10), inv_b, Outcome::Done);
    let fx = drain_all(&mut e);
    assert_eq!(acked(&fx), vec![a, b], "{fx:?}");
    assert_eq!(e.late_acks(), 2);

    // Bound 1: message 1's ack fails past its expiry (a late ack); message 2 is fetched once
    // message 1 is no longer held, runs, and expires while running (renews and acks fail).
    let mut e = engine(&config().concurrency(1).max_leases(1), t0);
    drain(&mut e);
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1)]);
    let (inv_a, a) = one_run(&drain(&mut e));
    e.handle_outcome(t0 + ms(100), inv_a, Outcome::Done);
    let mut now = t0 + ms(100);
    let mut second = None;
    let mut voided = false;
    while now < t0 + secs(12) {
        for f in drain_all(&mut e) {
            match f {
                Effect::Fetch { stream, .. } if second.is_none() && e.late_acks() == 1 => {
                    e.handle_fetched(now, stream, vec![msg(2)]);
                }
                Effect::Fetch { stream, .. } => e.handle_fetched(now, stream, vec![]),
                Effect::Run(invocation) => second = Some(invocation.id),
                Effect::Renew { batch, .. } => e.handle_renew_failed(now, batch),
                Effect::Ack { batch, leases, .. } => {
                    assert_eq!(leases, vec![a], "only message 1 is acked");
                    e.handle_ack_failed(now, batch, leasehold_core::ErrorKind::Transient);
                }
                Effect::Cancel { invocation, reason } => {
                    assert_eq!(Some(invocation), second);
                    assert_eq!(reason, CancelReason::LeaseExpired);
                    assert_eq!(e.late_acks(), 1);
                    e.handle_outcome(now + ms(10), invocation, Outcome::Done);
                    voided = true;
                }
                _ => {}
            }
        }
        now = e
            .poll_timeout()
            .map_or(now + ms(100), |t| t.max(now + ms(1)));
        e.handle_timeout(now);
    }
    assert!(voided, "message 2 expired while running");
    let b = second.expect("message 2 ran").lease();
    assert!(e.lease(b).is_none());
    assert_eq!(e.late_acks(), 1);
    let s = *e.stats();
    assert_eq!((s.expired, s.acked_after_expiry), (1, 0));
}
