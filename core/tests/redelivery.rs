//! Guarantee 2 of the crate docs: at most one invocation per message at a time, also when a held
//! message is delivered again.
//!
//! An at-least-once backend may deliver a message again while a first delivery is still being
//! worked on. A delivery of a message already held adopts the new fence and count and starts
//! nothing (a renew answer about the replaced fence then changes nothing). When a lease is lost,
//! its cancelled invocation keeps its slot until it reports, and the message, if it comes back
//! meanwhile, waits for that report. Two invocations of one message at once would run its side
//! effects twice, side by side.

mod common;

use std::time::{Duration, Instant};

use common::*;
use leasehold_core::{CancelReason, Fence, MessageId, Outcome, RenewResult};

/// A held message is never run twice at once; a delivery of a message already held (same stream and
/// id, new fence and count) adopts the new fence, starts nothing, and the eventual ack carries the
/// lease with the new fence.
#[test]
fn redelivery_of_held_message_adopts_fence_and_starts_nothing() {
    let t0 = Instant::now();
    let cfg = config().concurrency(2).repoll_interval(ms(400));
    let mut e = engine(&cfg, t0);
    assert_eq!(drain(&mut e), vec![fetch(2, ms(1000))]);
    e.handle_fetched(t0 + ms(10), S0, vec![delivery(1, 1, 1)]);
    let fx = drain(&mut e);
    let (inv1, a) = one_run(&fx);
    assert_eq!(
        fx,
        vec![
            Seen::Run {
                invocation: inv1,
                lease: a
            },
            fetch(1, ms(1000))
        ]
    );

    // Redelivered while running: adopt fence 7 and count 2, start nothing.
    e.handle_fetched(t0 + ms(20), S0, vec![delivery(1, 2, 7)]);
    assert_eq!(drain(&mut e), vec![fetch(1, Duration::ZERO)]);
    assert_eq!(e.lease(a).unwrap().fence(), Fence(7));
    assert_eq!(e.lease(a).unwrap().delivery_count(), 2);
    assert_eq!(e.running(), 1);
    assert_eq!(e.held(), 1);
    assert_eq!(e.stats().redelivered, 1);

    // Pending, then redelivered again while waiting: adopt fence 8, start nothing.
    e.handle_outcome(t0 + ms(30), inv1, Outcome::Pending);
    assert_eq!(drain(&mut e), vec![]);
    e.handle_fetched(t0 + ms(40), S0, vec![delivery(1, 3, 8)]);
    assert_eq!(drain(&mut e), vec![fetch(2, Duration::ZERO)]);
    assert_eq!(e.lease(a).unwrap().fence(), Fence(8));
    // Nothing new: the next fetch goes at once, blocking no longer than the re-invocation is due.
    e.handle_fetched(t0 + ms(50), S0, vec![]);
    assert_eq!(drain(&mut e), vec![fetch(2, ms(380))]);
    assert_eq!(e.stats().invocations, 1);

    // The backend's wait ends as the re-invocation is due: the re-invocation comes on schedule, as
    // the only invocation of the message, and the other slot fetches again.
    e.handle_timeout(t0 + ms(430));
    e.handle_fetched(t0 + ms(430), S0, vec![]);
    let fx = drain(&mut e);
    let (inv2, _) = one_run(&fx);
    assert_eq!(
        fx,
        vec![
            Seen::Run {
                invocation: inv2,
                lease: a
            },
            fetch(1, ms(1000))
        ]
    );
    e.handle_outcome(t0 + ms(440), inv2, Outcome::Done);
    assert_eq!(drain(&mut e), vec![Seen::Ack { leases: vec![a] }]);
    assert_eq!(
        e.lease(a).unwrap().fence(),
        Fence(8),
        "the ack carries the new fence"
    );
    assert_eq!(e.stats().invocations, 2);
}

/// Once a redelivery's fence is adopted, a renew answer about the replaced fence (sent before the
/// adoption and refused by the backend as stale) does not drop the lease.
#[test]
fn renew_answer_for_a_replaced_fence_is_ignored() {
    let t0 = Instant::now();
    let mut e = engine(&config().concurrency(2), t0);
    drain(&mut e);
    e.handle_fetched(t0 + ms(10), S0, vec![delivery(1, 1, 1)]);
    let (inv, a) = one_run(&drain(&mut e));
    e.handle_fetched(t0 + ms(20), S0, vec![]);
    drain(&mut e);
    e.handle_timeout(t0 + ms(1000));
    let (batch, leases) = one_renew(&drain(&mut e));
    assert_eq!(leases, vec![a]);
    // The paced fetch redelivers the message with fence 2 before the renew (fence 1) answers.
    e.handle_timeout(t0 + ms(1020));
    assert_eq!(drain(&mut e), vec![fetch(1, ms(1000))]);
    e.handle_fetched(t0 + ms(1030), S0, vec![delivery(1, 2, 2)]);
    assert!(runs(&drain(&mut e)).is_empty());
    e.handle_renewed(t0 + ms(1040), batch, [(a, RenewResult::Lost)]);
    let fx = drain(&mut e);
    assert!(cancels(&fx).is_empty(), "{fx:?}");
    assert_eq!(e.lease(a).unwrap().fence(), Fence(2));
    assert!(e.valid_until(a).is_some());
    e.handle_outcome(t0 + ms(1100), inv, Outcome::Done);
    assert_eq!(acks(&drain(&mut e)), vec![vec![a]]);
}

/// A cancelled invocation whose lease was lost keeps its slot until it reports.
#[test]
fn cancelled_invocation_of_lost_lease_keeps_its_slot() {
    let t0 = Instant::now();
    let mut e = engine(&config().concurrency(1), t0);
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
        }],
        "no fetch: the cancelled invocation still occupies the only slot"
    );
    assert_eq!(e.running(), 1);
    assert_eq!(e.held(), 0);
    e.handle_timeout(t0 + ms(1500));
    assert_eq!(drain(&mut e), vec![]);
    e.handle_outcome(t0 + ms(1600), inv, Outcome::Done);
    assert_eq!(drain(&mut e), vec![fetch(1, Duration::ZERO)]);
    assert_eq!(e.running(), 0);
}

/// If the message of a lost lease is delivered again while its cancelled invocation still runs, the
/// new delivery does not run until the old invocation has reported.
#[test]
fn redelivery_waits_for_the_cancelled_invocation() {
    let t0 = Instant::now();
    let mut e = engine(&config().concurrency(2), t0);
    drain(&mut e);
    e.handle_fetched(t0 + ms(10), S0, vec![delivery(1, 1, 1)]);
    let fx = drain(&mut e);
    let (inv, a) = one_run(&fx);
    assert_eq!(fetches(&fx), vec![(S0, 1, ms(1000))]);
    e.handle_fetched(t0 + ms(20), S0, vec![]);
    assert_eq!(drain(&mut e), vec![]);
    e.handle_timeout(t0 + ms(1000));
    let (batch, _) = one_renew(&drain(&mut e));
    e.handle_renewed(t0 + ms(1005), batch, [(a, RenewResult::Lost)]);
    assert_eq!(
        drain(&mut e),
        vec![Seen::Cancel {
            invocation: inv,
            reason: CancelReason::LeaseLost
        }]
    );
    assert_eq!(e.running(), 1);

    // Another replica's lease lapsed and the message comes back to us with fence 2.
    e.handle_timeout(t0 + ms(1010));
    assert_eq!(drain(&mut e), vec![fetch(1, ms(1000))]);
    e.handle_fetched(t0 + ms(1020), S0, vec![delivery(1, 2, 2)]);
    let fx = drain(&mut e);
    assert!(
        runs(&fx).is_empty(),
        "must not run beside the old invocation: {fx:?}"
    );
    assert_eq!(e.held(), 1);
    // (The engine may fetch for its other slot meanwhile; nothing comes.)
    for _ in fetches(&fx) {
        e.handle_fetched(t0 + ms(1030), S0, vec![]);
    }
    assert!(runs(&drain(&mut e)).is_empty());
    e.handle_timeout(t0 + ms(1500));
    assert!(runs(&drain(&mut e)).is_empty());

    // The old invocation reports: its Done is discarded, the new delivery runs.
    e.handle_outcome(t0 + ms(1600), inv, Outcome::Done);
    let fx = drain(&mut e);
    assert!(acks(&fx).is_empty(), "{fx:?}");
    let (inv2, a2) = one_run(&fx);
    assert_ne!(a2, a);
    assert_eq!(e.lease(a2).unwrap().fence(), Fence(2));
    assert_eq!(message_of(&e, a2), MessageId::from(1));
    e.handle_outcome(t0 + ms(1700), inv2, Outcome::Done);
    assert_eq!(acks(&drain(&mut e)), vec![vec![a2]]);
}
