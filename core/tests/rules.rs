//! One test (or a few) per engine rule of issue 2 / DESIGN §3, on explicit instants.
//!
//! Every test starts at `t0` and moves time by hand (`t0 + ms(..)`); the engine is driven through
//! `handle_*` and its effects are drained and compared exactly.

mod common;

use std::time::{Duration, Instant};

use common::*;
use leasehold_core::{
    CancelReason, DeadLetterReason, Effect, Fence, LeaseEngine, LeaseId, MessageId, Outcome,
    RenewResult, RetryPolicy, SettleResult, StreamId,
};

// ----- rule 1: Pending ---------------------------------------------------------------------------

/// Rule 1: a `Pending` message keeps its lease (it is in the next `Renew`) and frees its
/// invocation slot (at concurrency 1 another message is fetched and run while it waits).
#[test]
fn rule01_pending_keeps_its_lease_and_frees_its_slot() {
    let t0 = Instant::now();
    let cfg = config().concurrency(1).repoll_interval(ms(1500));
    let mut e = engine(&cfg, t0);
    assert_eq!(drain(&mut e), vec![fetch(1, ms(1000))]);

    e.handle_fetched(t0 + ms(10), S0, vec![msg(1)]);
    let fx = drain(&mut e);
    let (inv_a, a) = one_run(&fx);
    assert_eq!(
        fx,
        vec![Effect::Run {
            invocation: inv_a,
            lease: a
        }]
    );

    // Pending: the slot frees, so the one slot is offered to a new fetch at once.
    e.handle_outcome(t0 + ms(100), inv_a, Outcome::Pending);
    assert_eq!(drain(&mut e), vec![fetch(1, Duration::ZERO)]);
    assert_eq!(e.running(), 0);
    assert_eq!(e.held(), 1, "the pending message keeps its lease");
    assert!(e.lease(a).is_some());

    e.handle_fetched(t0 + ms(150), S0, vec![msg(2)]);
    let fx = drain(&mut e);
    let (inv_b, b) = one_run(&fx);
    assert_eq!(
        fx,
        vec![Effect::Run {
            invocation: inv_b,
            lease: b
        }]
    );
    assert_eq!(message_of(&e, b), MessageId::from(2));

    // The heartbeat renews the waiting lease with the running one, in one Renew.
    assert_eq!(e.poll_timeout(), Some(t0 + ms(1000)));
    e.handle_timeout(t0 + ms(1000));
    let fx = drain(&mut e);
    let (batch, leases) = one_renew(&fx);
    assert_eq!(fx.len(), 1, "{fx:?}");
    assert_eq!(leases, vec![a, b]);
    e.handle_renewed(
        t0 + ms(1010),
        batch,
        [(a, RenewResult::Kept), (b, RenewResult::Kept)],
    );
    assert_eq!(drain(&mut e), vec![]);
    assert!(e.lease(a).is_some());
}

/// Rule 1: a `Pending` message is re-run after exactly `repoll_interval`, not before
/// (`poll_timeout()` names that instant; a `handle_timeout` just before does nothing).
#[test]
fn rule01_pending_is_rerun_after_exactly_repoll_interval() {
    let t0 = Instant::now();
    let cfg = config().concurrency(1).repoll_interval(ms(400));
    let mut e = engine(&cfg, t0);
    drain(&mut e);
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1)]);
    let (inv1, a) = one_run(&drain(&mut e));

    e.handle_outcome(t0 + ms(100), inv1, Outcome::Pending);
    assert_eq!(drain(&mut e), vec![fetch(1, Duration::ZERO)]);
    // Nothing new: the next fetch is paced to t0+1100.
    e.handle_fetched(t0 + ms(110), S0, vec![]);
    assert_eq!(drain(&mut e), vec![]);

    assert_eq!(e.poll_timeout(), Some(t0 + ms(500)));
    e.handle_timeout(t0 + ms(499));
    assert_eq!(drain(&mut e), vec![], "no re-run before repoll_interval");
    e.handle_timeout(t0 + ms(500));
    let fx = drain(&mut e);
    let (inv2, lease) = one_run(&fx);
    assert_eq!(
        fx,
        vec![Effect::Run {
            invocation: inv2,
            lease: a
        }]
    );
    assert_eq!(lease, a, "the re-run is under the same lease");
    assert_ne!(inv2, inv1, "a re-run is a new invocation");
    assert_eq!(e.lease(a).unwrap().attempt(), 2);
    assert_eq!(e.stats().pending, 1);
    assert_eq!(e.stats().invocations, 2);
}

/// Rule 1: re-runs that are due go before new fetches: when a re-run is due and a slot frees,
/// the slot goes to the re-run's `Run` and no `Fetch` takes it.
#[test]
fn rule01_due_reruns_go_before_new_fetches() {
    let t0 = Instant::now();
    let cfg = config().concurrency(1).repoll_interval(ms(400));
    let mut e = engine(&cfg, t0);
    drain(&mut e);
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1)]);
    let (inv_a, a) = one_run(&drain(&mut e));
    e.handle_outcome(t0 + ms(100), inv_a, Outcome::Pending);
    assert_eq!(drain(&mut e), vec![fetch(1, Duration::ZERO)]);
    e.handle_fetched(t0 + ms(150), S0, vec![msg(2)]);
    let (inv_b, b) = one_run(&drain(&mut e));

    // A's re-run is due at t0+500, but B holds the only slot.
    assert_eq!(e.poll_timeout(), Some(t0 + ms(500)));
    e.handle_timeout(t0 + ms(500));
    assert_eq!(drain(&mut e), vec![]);

    // B finishes: its slot goes to A's re-run, not to a fetch.
    e.handle_outcome(t0 + ms(600), inv_b, Outcome::Done);
    let fx = drain(&mut e);
    let (inv_a2, _) = one_run(&fx);
    assert_eq!(
        fx,
        vec![
            Effect::Run {
                invocation: inv_a2,
                lease: a
            },
            Effect::Ack { leases: vec![b] }
        ]
    );
    assert!(fetches(&fx).is_empty());

    // Once A is done the slot is free for new intake.
    e.handle_outcome(t0 + ms(700), inv_a2, Outcome::Done);
    assert_eq!(
        drain(&mut e),
        vec![fetch(1, Duration::ZERO), Effect::Ack { leases: vec![a] }]
    );
}

// ----- rule 2: serial per message, redelivery adopts the new fence --------------------------------

/// Rule 2: a held message is never run twice at once; a delivery of a message already held
/// (same stream and id, new fence and count) adopts the new fence, starts nothing, and the
/// eventual ack carries the lease with the new fence.
#[test]
fn rule02_redelivery_of_held_message_adopts_fence_and_starts_nothing() {
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
            Effect::Run {
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
    e.handle_fetched(t0 + ms(50), S0, vec![]);
    assert_eq!(drain(&mut e), vec![]);
    assert_eq!(e.stats().invocations, 1);

    // The re-run comes on schedule, as the only invocation of the message.
    e.handle_timeout(t0 + ms(430));
    let fx = drain(&mut e);
    let (inv2, _) = one_run(&fx);
    assert_eq!(
        fx,
        vec![Effect::Run {
            invocation: inv2,
            lease: a
        }]
    );
    e.handle_outcome(t0 + ms(440), inv2, Outcome::Done);
    assert_eq!(drain(&mut e), vec![Effect::Ack { leases: vec![a] }]);
    assert_eq!(
        e.lease(a).unwrap().fence(),
        Fence(8),
        "the ack carries the new fence"
    );
    assert_eq!(e.stats().invocations, 2);
}

/// Rule 2: once a redelivery's fence is adopted, a renew answer about the replaced fence (sent
/// before the adoption and refused by the backend as stale) does not drop the lease.
#[test]
fn rule02_renew_answer_for_a_replaced_fence_is_ignored() {
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

// ----- rule 3: heartbeat -------------------------------------------------------------------------

fn three_running(cfg: &leasehold_core::Config, t0: Instant) -> (LeaseEngine<String>, Vec<LeaseId>) {
    let mut e = engine(cfg, t0);
    assert_eq!(drain(&mut e), vec![fetch(3, ms(1000))]);
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1), msg(2), msg(3)]);
    let fx = drain(&mut e);
    assert_eq!(fx.len(), 3, "{fx:?}");
    let leases = runs(&fx).into_iter().map(|(_, l)| l).collect();
    (e, leases)
}

/// Rule 3: the heartbeat emits ONE `Renew` for all held leases per `heartbeat_interval`.
#[test]
fn rule03_one_renew_for_all_leases_per_heartbeat() {
    let t0 = Instant::now();
    let (mut e, leases) = three_running(&config().concurrency(3), t0);

    assert_eq!(e.poll_timeout(), Some(t0 + ms(1000)));
    e.handle_timeout(t0 + ms(999));
    assert_eq!(drain(&mut e), vec![]);
    e.handle_timeout(t0 + ms(1000));
    let fx = drain(&mut e);
    let (batch, renewed) = one_renew(&fx);
    assert_eq!(fx.len(), 1);
    assert_eq!(renewed, leases);
    e.handle_renewed(
        t0 + ms(1050),
        batch,
        renewed.iter().map(|l| (*l, RenewResult::Kept)),
    );
    assert_eq!(drain(&mut e), vec![]);

    // The next one a heartbeat after the previous send.
    assert_eq!(e.poll_timeout(), Some(t0 + ms(2000)));
    e.handle_timeout(t0 + ms(1999));
    assert_eq!(drain(&mut e), vec![]);
    e.handle_timeout(t0 + ms(2000));
    let (_, renewed) = one_renew(&drain(&mut e));
    assert_eq!(renewed, leases);
}

/// Rule 3: a heartbeat is chunked into several `Renew` effects only above `renew_batch_size`.
#[test]
fn rule03_renew_is_chunked_only_above_batch_size() {
    let t0 = Instant::now();
    let (mut e, leases) = three_running(&config().concurrency(3).renew_batch_size(3), t0);
    e.handle_timeout(t0 + ms(1000));
    let fx = drain(&mut e);
    assert_eq!(renews(&fx).len(), 1, "3 leases, batch size 3: one Renew");
    assert_eq!(fx.len(), 1);

    let (mut e, leases2) = three_running(&config().concurrency(3).renew_batch_size(2), t0);
    assert_eq!(leases, leases2);
    e.handle_timeout(t0 + ms(1000));
    let fx = drain(&mut e);
    let chunks = renews(&fx);
    assert_eq!(fx.len(), 2, "{fx:?}");
    assert_eq!(chunks.len(), 2);
    assert_eq!(chunks[0].1, leases[..2]);
    assert_eq!(chunks[1].1, leases[2..]);
    assert_ne!(chunks[0].0, chunks[1].0);

    // Answering one chunk does not open a new round, even once a heartbeat has passed.
    e.handle_renewed(
        t0 + ms(1050),
        chunks[0].0,
        chunks[0].1.iter().map(|l| (*l, RenewResult::Kept)),
    );
    assert_eq!(drain(&mut e), vec![]);
    e.handle_timeout(t0 + ms(2000));
    assert_eq!(drain(&mut e), vec![]);
    // The last chunk closes the round; the overdue round follows at once.
    e.handle_renewed(
        t0 + ms(2100),
        chunks[1].0,
        chunks[1].1.iter().map(|l| (*l, RenewResult::Kept)),
    );
    let fx = drain(&mut e);
    let next = renews(&fx);
    assert_eq!(fx.len(), 2, "{fx:?}");
    assert_eq!(next[0].1, leases[..2]);
    assert_eq!(next[1].1, leases[2..]);
}

/// Rule 3: at most one renew round is outstanding: no new `Renew` while one is unanswered, even
/// when a heartbeat interval passes; the next comes right after the answer if overdue.
#[test]
fn rule03_at_most_one_renew_round_outstanding() {
    let t0 = Instant::now();
    let (mut e, leases) = three_running(&config().concurrency(3), t0);
    e.handle_timeout(t0 + ms(1000));
    let (batch, _) = one_renew(&drain(&mut e));
    e.handle_timeout(t0 + ms(2000));
    assert_eq!(
        drain(&mut e),
        vec![],
        "no second round while one is outstanding"
    );
    e.handle_timeout(t0 + ms(2500));
    assert_eq!(drain(&mut e), vec![]);
    assert_eq!(
        e.poll_timeout(),
        Some(t0 + ms(2700)),
        "only the local expiry is pending"
    );
    // Answered late (but before expiry): the overdue round goes out with the answer.
    e.handle_renewed(
        t0 + ms(2600),
        batch,
        leases.iter().map(|l| (*l, RenewResult::Kept)),
    );
    let fx = drain(&mut e);
    let (batch2, renewed) = one_renew(&fx);
    assert_eq!(
        fx,
        vec![Effect::Renew {
            batch: batch2,
            leases: renewed.clone()
        }]
    );
    assert_eq!(renewed, leases);
    assert_ne!(batch2, batch);
}

/// Rule 3: after a renew *failure* answered when the next heartbeat is already overdue, the next
/// round comes right after the answer (leases are at risk: renewing must not wait for a timer).
#[test]
fn rule03_renew_failure_when_overdue_renews_right_after_the_answer() {
    let t0 = Instant::now();
    let (mut e, leases) = three_running(&config().concurrency(3), t0);
    e.handle_timeout(t0 + ms(1000));
    let (batch, _) = one_renew(&drain(&mut e));
    e.handle_renew_failed(t0 + ms(2100), batch);
    let fx = drain(&mut e);
    assert_eq!(
        renews(&fx).len(),
        1,
        "the round due at t0+2000 should go out with the failure's answer at t0+2100: {fx:?} \
         (poll_timeout {:?})",
        e.poll_timeout().map(|at| at.saturating_duration_since(t0))
    );
    assert_eq!(renews(&fx)[0].1, leases);
}

// ----- rule 4: lost and expired leases ------------------------------------------------------------

/// Rule 4: a lease reported `RenewResult::Lost` is dropped: its running invocation gets
/// `Cancel { LeaseLost }`, its later `Done` produces no `Ack`, and it is never in a later
/// `Renew`, `Ack` or `Release`.
#[test]
fn rule04_lost_lease_is_cancelled_and_never_acted_on_again() {
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
        vec![Effect::Cancel {
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
    e.handle_fetched(t0 + ms(1110), S0, vec![]);
    assert_eq!(drain(&mut e), vec![]);

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

/// Rule 4: a waiting (`Pending`) lease reported lost is dropped: it is never re-run, renewed
/// or released.
#[test]
fn rule04_lost_waiting_lease_is_not_rerun() {
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

/// Rule 4: local expiry: no successful renew for `claim_timeout - expiry_margin` from the send
/// time of the fetch that delivered the lease → `Cancel { LeaseExpired }` at exactly that
/// instant (valid one instant before); nothing is acked, renewed or released for it afterwards.
#[test]
fn rule04_lease_expires_locally_at_ttl_after_last_confirmation_send_time() {
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
            Effect::Run {
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
        vec![Effect::Renew {
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
        vec![Effect::Cancel {
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
    // A's invocation reports Done: discarded, no Ack / Release.
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

/// Rule 4: a renew answered late but successfully keeps the lease valid, counted from the
/// renew's *send* time.
#[test]
fn rule04_late_successful_renew_keeps_lease_valid_from_its_send_time() {
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
        vec![fetch(1, Duration::ZERO), Effect::Ack { leases: vec![a] }]
    );
}

/// Rule 4: a delivery whose fetch was sent more than `claim_timeout - expiry_margin` ago is
/// already expired locally when it arrives (its `valid_until` has passed): it must not be run,
/// and no timeout may be left in the past.
#[test]
fn rule04_delivery_already_expired_on_arrival_is_not_run() {
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

// ----- rule 5: max processing time ---------------------------------------------------------------

/// Rule 5: `max_processing_time` exceeded → `Cancel { MaxProcessingTime }`; the invocation's
/// later outcome (even `Done`) counts as a failed attempt: released with the backoff, never acked.
#[test]
fn rule05_max_processing_time_cancels_and_counts_as_failure() {
    let t0 = Instant::now();
    let cfg = config()
        .concurrency(1)
        .max_processing_time(ms(500))
        .max_deliveries(3);
    let mut e = engine(&cfg, t0);
    drain(&mut e);
    e.handle_fetched(t0 + ms(10), S0, vec![delivery(1, 1, 1)]);
    let (inv, a) = one_run(&drain(&mut e));

    assert_eq!(e.poll_timeout(), Some(t0 + ms(510)));
    e.handle_timeout(t0 + ms(509));
    assert_eq!(drain(&mut e), vec![]);
    e.handle_timeout(t0 + ms(510));
    assert_eq!(
        drain(&mut e),
        vec![Effect::Cancel {
            invocation: inv,
            reason: CancelReason::MaxProcessingTime
        }]
    );
    assert!(e.valid_until(a).is_some(), "the lease is still ours");
    assert_eq!(
        e.running(),
        1,
        "the slot is held until the invocation reports"
    );

    e.handle_outcome(t0 + ms(600), inv, Outcome::Done);
    assert_eq!(
        drain(&mut e),
        vec![
            Effect::Release {
                lease: a,
                delay: secs(1)
            },
            fetch(1, Duration::ZERO)
        ]
    );
    assert_eq!(e.stats().failures, 1);
    assert_eq!(e.stats().acked, 0);
}

/// Rule 5: a max-processing-time failure on the last allowed delivery is dead-lettered.
#[test]
fn rule05_max_processing_time_on_last_delivery_dead_letters() {
    let t0 = Instant::now();
    let cfg = config()
        .concurrency(1)
        .max_processing_time(ms(500))
        .max_deliveries(3);
    let mut e = engine(&cfg, t0);
    drain(&mut e);
    e.handle_fetched(t0 + ms(10), S0, vec![delivery(1, 3, 3)]);
    let (inv, a) = one_run(&drain(&mut e));
    e.handle_timeout(t0 + ms(510));
    assert_eq!(
        cancels(&drain(&mut e)),
        vec![(inv, CancelReason::MaxProcessingTime)]
    );
    e.handle_outcome(t0 + ms(520), inv, Outcome::Pending);
    let fx = drain(&mut e);
    assert!(acks(&fx).is_empty() && releases(&fx).is_empty(), "{fx:?}");
    let dead = dead_letters(&fx);
    assert_eq!(dead.len(), 1, "{fx:?}");
    assert_eq!(dead[0].0, a);
    assert!(
        matches!(
            dead[0].1,
            DeadLetterReason::MaxDeliveries { deliveries: 3, .. }
        ),
        "{:?}",
        dead[0].1
    );
}

// ----- rule 6: backoff, dead letters -------------------------------------------------------------

/// Fails one delivery per entry of `counts` (each a fresh message with that delivery count)
/// with `outcome`, and returns the effect that settled each.
fn fail_each(cfg: &leasehold_core::Config, counts: &[u32], outcome: &Outcome) -> Vec<Effect> {
    let t0 = Instant::now();
    let mut e = engine(&cfg.clone().concurrency(1), t0);
    drain(&mut e);
    let mut settled = Vec::new();
    for (i, &count) in counts.iter().enumerate() {
        let at = t0 + ms(10 * i as u64 + 1);
        e.handle_fetched(at, S0, vec![delivery(i as u64, count, u64::from(count))]);
        let (inv, lease) = one_run(&drain(&mut e));
        e.handle_outcome(at, inv, outcome.clone());
        let fx = drain(&mut e);
        assert!(acks(&fx).is_empty(), "{fx:?}");
        let mut settle: Vec<Effect> = fx
            .into_iter()
            .filter(|f| matches!(f, Effect::Release { .. } | Effect::DeadLetter { .. }))
            .collect();
        assert_eq!(settle.len(), 1);
        assert!(mentions(&settle, lease));
        settled.push(settle.remove(0));
    }
    settled
}

fn release_delays(effects: &[Effect]) -> Vec<Duration> {
    let delays: Vec<Duration> = releases(effects).into_iter().map(|(_, d)| d).collect();
    assert_eq!(delays.len(), effects.len(), "all released: {effects:?}");
    delays
}

/// Rule 6: with jitter 0 the backoff is exact: `initial × multiplier^(count-1)`, capped at
/// `retry.max`; `Outcome::Failed` behaves like `Retry { delay: None }`.
#[test]
fn rule06_backoff_grows_by_multiplier_and_is_capped() {
    let retry = RetryPolicy {
        initial: secs(1),
        multiplier: 2.0,
        max: secs(10),
        jitter: 0.0,
    };
    let cfg = config().retry(retry).max_deliveries(10);
    let counts = [1, 2, 3, 4, 5, 6];
    let expected: Vec<Duration> = [1, 2, 4, 8, 10, 10].into_iter().map(secs).collect();
    let retry_delays = release_delays(&fail_each(&cfg, &counts, &Outcome::Retry { delay: None }));
    assert_eq!(retry_delays, expected);
    let failed = Outcome::Failed {
        error: "panicked".into(),
    };
    assert_eq!(release_delays(&fail_each(&cfg, &counts, &failed)), expected);

    let retry = RetryPolicy {
        initial: ms(100),
        multiplier: 3.0,
        max: secs(1),
        jitter: 0.0,
    };
    let delays = release_delays(&fail_each(&config().retry(retry), &[1, 2, 3, 4], &failed));
    assert_eq!(delays, vec![ms(100), ms(300), ms(900), secs(1)]);
}

/// Rule 6: jitter comes from the seeded generator: the same seed gives the same delays (two
/// engines), a different seed different ones; every delay lies in `[base × (1-jitter), base]`.
#[test]
fn rule06_jitter_is_seeded_and_bounded() {
    let retry = RetryPolicy {
        initial: secs(1),
        multiplier: 2.0,
        max: secs(100),
        jitter: 0.5,
    };
    let counts = [1, 2, 3, 4, 5, 6, 7, 8];
    let outcome = Outcome::Retry { delay: None };
    let run = |seed| {
        release_delays(&fail_each(
            &config().retry(retry.clone()).seed(seed),
            &counts,
            &outcome,
        ))
    };
    let first = run(7);
    assert_eq!(first, run(7), "same seed, same delays");
    assert_ne!(first, run(8), "different seed, different delays");
    for (delay, count) in first.iter().zip(counts) {
        let base = secs(1 << (count - 1)).min(secs(100));
        assert!(
            *delay <= base && *delay >= base / 2,
            "count {count}: {delay:?} vs base {base:?}"
        );
    }
    let distinct: std::collections::HashSet<_> = first
        .iter()
        .zip(counts)
        .map(|(d, c)| d.as_nanos() * 1000 / secs(1 << (c - 1)).as_nanos())
        .collect();
    assert!(
        distinct.len() > 1,
        "jitter should vary the fraction: {first:?}"
    );
}

/// Rule 6: `Retry { delay: Some(d) }` releases with exactly `d`.
#[test]
fn rule06_explicit_retry_delay_is_used() {
    let outcome = Outcome::Retry {
        delay: Some(ms(1234)),
    };
    let delays = release_delays(&fail_each(&config(), &[1, 5], &outcome));
    assert_eq!(delays, vec![ms(1234), ms(1234)]);
}

/// Rule 6: at `max_deliveries` (the delivery count of the `Fetched`) a failure dead-letters with
/// `MaxDeliveries`; below it, it is released.
#[test]
fn rule06_failure_at_max_deliveries_dead_letters() {
    let cfg = config().max_deliveries(3);
    let settled = fail_each(
        &cfg,
        &[2, 3, 4],
        &Outcome::Failed {
            error: "boom".into(),
        },
    );
    assert!(
        matches!(settled[0], Effect::Release { delay, .. } if delay == secs(2)),
        "{settled:?}"
    );
    for (effect, deliveries) in settled[1..].iter().zip([3, 4]) {
        match effect {
            Effect::DeadLetter { reason, .. } => assert_eq!(
                *reason,
                DeadLetterReason::MaxDeliveries {
                    deliveries,
                    last_error: "boom".into()
                }
            ),
            other => panic!("expected a dead letter, got {other:?}"),
        }
    }
    let settled = fail_each(&cfg, &[3], &Outcome::Retry { delay: Some(ms(5)) });
    assert!(
        matches!(
            &settled[0],
            Effect::DeadLetter {
                reason: DeadLetterReason::MaxDeliveries { deliveries: 3, .. },
                ..
            }
        ),
        "{settled:?}"
    );
}

/// Rule 6: `Outcome::Reject` dead-letters at once with `Rejected`, whatever the delivery count.
#[test]
fn rule06_reject_dead_letters_at_once() {
    let reject = Outcome::Reject {
        reason: "cannot decode".into(),
    };
    let settled = fail_each(&config().max_deliveries(10), &[1], &reject);
    match &settled[0] {
        Effect::DeadLetter { reason, .. } => {
            assert_eq!(*reason, DeadLetterReason::Rejected("cannot decode".into()))
        }
        other => panic!("expected a dead letter, got {other:?}"),
    }
}

// ----- rule 7: acks are batched ------------------------------------------------------------------

/// Rule 7: acks due at one input go out as ONE `Ack` effect: here three acks whose retry (after a
/// transient failure) falls due at the same instant, and three re-sent at shutdown. Acks due at
/// different inputs are not held back.
#[test]
fn rule07_acks_due_at_one_input_form_one_effect() {
    let t0 = Instant::now();
    // max_leases 3: nothing else is fetched while the three are being acked. A slow heartbeat
    // (20 s) keeps renews out of the way.
    let cfg = config()
        .concurrency(3)
        .max_leases(3)
        .claim_timeout(secs(60))
        .heartbeat_interval(secs(20))
        .expiry_margin(secs(6));
    let mut e = engine(&cfg, t0);
    drain(&mut e);
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1), msg(2), msg(3)]);
    let fx = drain(&mut e);
    let [(ia, a), (ib, b), (ic, c)] = runs(&fx)[..] else {
        panic!("{fx:?}")
    };

    // Each Done is its own input: one Ack each, at once.
    e.handle_outcome(t0 + ms(100), ia, Outcome::Done);
    assert_eq!(drain(&mut e), vec![Effect::Ack { leases: vec![a] }]);
    e.handle_outcome(t0 + ms(110), ib, Outcome::Done);
    assert_eq!(drain(&mut e), vec![Effect::Ack { leases: vec![b] }]);
    e.handle_outcome(t0 + ms(120), ic, Outcome::Done);
    assert_eq!(drain(&mut e), vec![Effect::Ack { leases: vec![c] }]);

    // All three fail transiently in one answer; their retries fall due together: one Ack.
    e.handle_acked(
        t0 + ms(200),
        [
            (a, SettleResult::Failed),
            (b, SettleResult::Failed),
            (c, SettleResult::Failed),
        ],
    );
    assert_eq!(drain(&mut e), vec![]);
    assert_eq!(e.poll_timeout(), Some(t0 + ms(1200)));
    e.handle_timeout(t0 + ms(1200));
    assert_eq!(
        drain(&mut e),
        vec![Effect::Ack {
            leases: vec![a, b, c]
        }]
    );

    // Failed again; shutdown re-sends all pending acks at once: one Ack.
    e.handle_acked(
        t0 + ms(1300),
        [
            (a, SettleResult::Failed),
            (b, SettleResult::Failed),
            (c, SettleResult::Failed),
        ],
    );
    assert_eq!(drain(&mut e), vec![]);
    e.handle_shutdown(t0 + ms(1400), t0 + ms(5000));
    assert_eq!(
        drain(&mut e),
        vec![Effect::Ack {
            leases: vec![a, b, c]
        }]
    );
    e.handle_acked(
        t0 + ms(1500),
        [
            (a, SettleResult::Ok),
            (b, SettleResult::Ok),
            (c, SettleResult::Ok),
        ],
    );
    assert_eq!(drain(&mut e), vec![Effect::Drained]);
    assert_eq!(e.stats().acked, 3);
}

// ----- rule 8: shutdown --------------------------------------------------------------------------

/// Rule 8: after `handle_shutdown` no more `Fetch`; waiting leases are released at once with
/// delay 0; running invocations get until the deadline (then `Cancel { Shutdown }` and a release
/// with delay 0 once they report); deliveries after shutdown are released with delay 0 and never
/// run; `Drained` comes exactly once, when no lease is held and nothing runs.
#[test]
fn rule08_shutdown_releases_waits_cancels_and_drains_once() {
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
        vec![Effect::Release {
            lease: a,
            delay: Duration::ZERO
        }]
    );
    after.extend(fx);

    // Finishing before the deadline: acked.
    e.handle_outcome(t0 + ms(300), ib, Outcome::Done);
    let fx = drain(&mut e);
    assert_eq!(fx, vec![Effect::Ack { leases: vec![b] }]);
    after.extend(fx);

    // The outstanding fetch answers: released at once, never run.
    e.handle_fetched(t0 + ms(400), S0, vec![msg(4)]);
    let fx = drain(&mut e);
    let [(d, delay)] = releases(&fx)[..] else {
        panic!("{fx:?}")
    };
    assert_eq!(fx, vec![Effect::Release { lease: d, delay }]);
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
        vec![Effect::Cancel {
            invocation: ic,
            reason: CancelReason::Shutdown
        }]
    );
    after.extend(fx);
    e.handle_outcome(t0 + ms(1300), ic, Outcome::Done);
    let fx = drain(&mut e);
    assert_eq!(
        fx,
        vec![Effect::Release {
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
    assert!(!after.contains(&Effect::Drained));
    assert!(!e.is_drained());
    e.handle_released(t0 + ms(1500), c, SettleResult::Ok);
    assert_eq!(drain(&mut e), vec![Effect::Drained]);
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

/// Rule 8: a running invocation that finishes with `Done` before the deadline is acked, and
/// `Drained` follows without waiting for the deadline.
#[test]
fn rule08_shutdown_lets_running_invocations_finish_before_the_deadline() {
    let t0 = Instant::now();
    let mut e = engine(&config().concurrency(1), t0);
    drain(&mut e);
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1)]);
    let (inv, a) = one_run(&drain(&mut e));
    e.handle_shutdown(t0 + ms(20), t0 + ms(2000));
    assert_eq!(drain(&mut e), vec![]);
    e.handle_outcome(t0 + ms(500), inv, Outcome::Done);
    assert_eq!(drain(&mut e), vec![Effect::Ack { leases: vec![a] }]);
    e.handle_acked(t0 + ms(600), [(a, SettleResult::Ok)]);
    assert_eq!(drain(&mut e), vec![Effect::Drained]);
    e.handle_timeout(t0 + ms(2000));
    assert_eq!(
        drain(&mut e),
        vec![],
        "Drained comes once, no cancel after it"
    );
}

/// Rule 8: an invocation that returns `Pending` during shutdown is not kept for a re-run: its
/// lease is released at once with delay 0.
#[test]
fn rule08_pending_during_shutdown_is_released_at_once() {
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
        vec![Effect::Release {
            lease: a,
            delay: Duration::ZERO
        }]
    );
    e.handle_released(t0 + ms(40), a, SettleResult::Ok);
    assert_eq!(drain(&mut e), vec![Effect::Drained]);
}

// ----- rule 9: fetch pacing ----------------------------------------------------------------------

/// Rule 9: an empty fetch → the next `Fetch` not before its send time + `poll_interval`
/// (`poll_timeout()` names it); an empty answer that took that long already → fetch at once.
#[test]
fn rule09_empty_fetch_waits_poll_interval_from_its_send_time() {
    let t0 = Instant::now();
    let mut e = engine(&config().concurrency(1), t0);
    assert_eq!(drain(&mut e), vec![fetch(1, ms(1000))]);
    e.handle_fetched(t0 + ms(300), S0, vec![]);
    assert_eq!(drain(&mut e), vec![]);
    assert_eq!(e.poll_timeout(), Some(t0 + ms(1000)));
    e.handle_timeout(t0 + ms(999));
    assert_eq!(drain(&mut e), vec![]);
    e.handle_timeout(t0 + ms(1000));
    assert_eq!(drain(&mut e), vec![fetch(1, ms(1000))]);
    // This one blocked the whole poll interval in the backend: fetch again at once.
    e.handle_fetched(t0 + ms(2000), S0, vec![]);
    assert_eq!(drain(&mut e), vec![fetch(1, ms(1000))]);
}

/// Rule 9: a short fetch (non-empty, fewer than `max`) → next fetch at once with
/// `wait = poll_interval`; a full one → next fetch at once (when a slot is free) with `wait = 0`.
#[test]
fn rule09_short_fetch_refetches_waiting_full_fetch_without_waiting() {
    let t0 = Instant::now();
    let mut e = engine(&config().concurrency(3), t0);
    assert_eq!(drain(&mut e), vec![fetch(3, ms(1000))]);
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1)]);
    let fx = drain(&mut e);
    let (_, a) = one_run(&fx);
    assert_eq!(
        fx,
        vec![
            Effect::Run {
                invocation: one_run(&fx).0,
                lease: a
            },
            fetch(2, ms(1000))
        ]
    );
    // Full: 2 of 2. No slot left, so nothing now...
    e.handle_fetched(t0 + ms(20), S0, vec![msg(2), msg(3)]);
    let fx = drain(&mut e);
    assert_eq!(runs(&fx).len(), 2);
    assert_eq!(fx.len(), 2, "{fx:?}");
    let (inv_b, _) = runs(&fx)[0];
    // ...and as soon as one frees, a fetch without waiting.
    e.handle_outcome(t0 + ms(30), inv_b, Outcome::Done);
    let fx = drain(&mut e);
    assert_eq!(fetches(&fx), vec![(S0, 1, Duration::ZERO)]);
}

/// Rule 9: failed fetches back off `poll_interval × 2^(n-1)` per consecutive failure, capped at
/// `fetch_backoff_max`, reset after a success.
#[test]
fn rule09_failed_fetches_back_off_exponentially_capped_and_reset() {
    let t0 = Instant::now();
    let mut e = engine(&config().concurrency(1).fetch_backoff_max(secs(5)), t0);
    assert_eq!(drain(&mut e), vec![fetch(1, ms(1000))]);
    let mut now = t0;
    for backoff in [1000, 2000, 4000, 5000, 5000] {
        now += ms(10);
        e.handle_fetch_failed(now, S0);
        assert_eq!(drain(&mut e), vec![]);
        let due = now + ms(backoff);
        assert_eq!(e.poll_timeout(), Some(due), "backoff {backoff} ms");
        e.handle_timeout(due - ms(1));
        assert_eq!(drain(&mut e), vec![]);
        e.handle_timeout(due);
        assert_eq!(drain(&mut e), vec![fetch(1, ms(1000))]);
        now = due;
    }
    // A success (empty) resets the count: the next failure backs off one poll interval again.
    e.handle_fetched(now + ms(10), S0, vec![]);
    assert_eq!(drain(&mut e), vec![]);
    now += ms(1000);
    e.handle_timeout(now);
    assert_eq!(drain(&mut e), vec![fetch(1, ms(1000))]);
    e.handle_fetch_failed(now + ms(10), S0);
    assert_eq!(e.poll_timeout(), Some(now + ms(1010)));
}

// ----- rule 10: backpressure ---------------------------------------------------------------------

/// Rule 10: never more `Run`s outstanding than `concurrency`; a `Fetch` asks only for free slots
/// and none is sent while full; `max_leases` bounds held leases (waiting leases fill it → no
/// fetch).
#[test]
fn rule10_backpressure_bounds_runs_fetches_and_leases() {
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

/// Rule 10 with `prefetch`: a fetch may bring that many messages beyond the free slots; they
/// are held (renewed, released at shutdown) without running, start the moment a slot frees
/// (no fetch round trip in between), and the next fetch goes out while every slot is busy.
/// Running never exceeds `concurrency`.
#[test]
fn rule10_prefetched_messages_wait_held_and_start_when_a_slot_frees() {
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
    assert_eq!(e.lease(c).unwrap().attempt(), 1, "its first run");
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

/// Rule 10 with `fetch_batch_size`: a fetch asks for at most that many messages; a full one is
/// followed at once (no blocking wait) by a fetch for the room left, so with prefetch room the
/// next batch is on its way while the last one is handled.
#[test]
fn rule10_fetches_are_capped_and_a_full_capped_fetch_is_followed_at_once() {
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

/// Rule 10 (whole engine): a seeded random driver never sees more runs outstanding than
/// `concurrency`, more leases than `max_leases`, or two concurrent runs of one message.
#[test]
fn rule10_random_driver_never_exceeds_concurrency_or_runs_a_message_twice() {
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
        // Over-delivery is rule 11: the extras are held (being released) beyond max_leases.
        sim.overdeliver = false;
        sim.run(1500);
        assert!(
            sim.violations.is_empty(),
            "seed {seed}: {:#?}",
            sim.violations
        );
    }
}

// ----- rule 11: overflow -------------------------------------------------------------------------

/// Rule 11: deliveries beyond what the fetch asked for are released with delay 0 and never run.
#[test]
fn rule11_extra_deliveries_are_released_at_once_and_never_run() {
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
            Effect::Run {
                invocation: inv,
                lease: a
            },
            Effect::Release {
                lease: b,
                delay: Duration::ZERO
            },
            Effect::Release {
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
        vec![fetch(1, Duration::ZERO), Effect::Ack { leases: vec![a] }]
    );
    assert_eq!(e.stats().invocations, 1);
    assert_eq!(e.stats().released, 2);
}

// ----- rule 12: several streams ------------------------------------------------------------------

/// Rule 12: streams share one concurrency budget.
#[test]
fn rule12_sources_share_one_concurrency_budget() {
    let t0 = Instant::now();
    let mut e = LeaseEngine::<String>::with_streams(&config().concurrency(2), 2, t0).unwrap();
    let s1 = StreamId(1);
    assert_eq!(
        drain(&mut e),
        vec![
            fetch(1, ms(1000)),
            Effect::Fetch {
                stream: s1,
                max: 1,
                wait: ms(1000)
            }
        ]
    );
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1)]);
    let (ia, _) = one_run(&drain(&mut e));
    e.handle_fetched(t0 + ms(10), s1, vec![msg(2)]);
    let fx = drain(&mut e);
    assert_eq!(
        fx.len(),
        1,
        "both slots used, no fetch on either stream: {fx:?}"
    );
    assert_eq!(e.running(), 2);
    e.handle_outcome(t0 + ms(20), ia, Outcome::Done);
    let fx = drain(&mut e);
    assert_eq!(fetches(&fx).len(), 1, "one free slot, one fetch: {fx:?}");
    assert_eq!(fetches(&fx)[0].1, 1);
}

/// Rule 12: fetches are spread round-robin over the streams.
#[test]
fn rule12_fetches_go_round_robin() {
    let t0 = Instant::now();
    let mut e = LeaseEngine::<String>::with_streams(&config().concurrency(1), 3, t0).unwrap();
    let mut order = Vec::new();
    let mut fx = drain(&mut e);
    for i in 0..6u64 {
        let [(stream, max, _)] = fetches(&fx)[..] else {
            panic!("{fx:?}")
        };
        assert_eq!(max, 1);
        order.push(stream.0);
        let at = t0 + ms(10 * i + 5);
        e.handle_fetched(at, stream, vec![msg(i)]);
        let (inv, _) = one_run(&drain(&mut e));
        e.handle_outcome(at, inv, Outcome::Done);
        fx = drain(&mut e);
    }
    assert_eq!(order, vec![0, 1, 2, 0, 1, 2]);
}

/// Rule 12: a `Pending` message on stream 0 does not block stream 1; equal ids on two streams
/// are two messages.
#[test]
fn rule12_pending_on_one_source_does_not_block_another() {
    let t0 = Instant::now();
    let mut e = LeaseEngine::<String>::with_streams(&config().concurrency(1), 2, t0).unwrap();
    let s1 = StreamId(1);
    let fx = drain(&mut e);
    assert_eq!(fetches(&fx).len(), 1);
    assert_eq!(fetches(&fx)[0].0, S0);
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1)]);
    let (ia, a) = one_run(&drain(&mut e));
    e.handle_outcome(t0 + ms(100), ia, Outcome::Pending);
    let fx = drain(&mut e);
    assert_eq!(fetches(&fx).len(), 1, "{fx:?}");
    assert_eq!(fetches(&fx)[0].0, s1);
    e.handle_fetched(t0 + ms(110), s1, vec![delivery(1, 1, 9)]);
    let fx = drain(&mut e);
    let (_, b) = one_run(&fx);
    assert_ne!(a, b);
    assert_eq!(e.lease(b).unwrap().stream(), s1);
    assert_eq!(
        e.lease(a).unwrap().fence(),
        Fence(1),
        "not adopted across streams"
    );
    assert_eq!(e.stats().redelivered, 0);
    assert_eq!(e.held(), 2);
}

// ----- rule 13: settle results -------------------------------------------------------------------

/// Rule 13: an ack answered `Failed` is retried after `poll_interval`, and the lease keeps being
/// renewed meanwhile.
#[test]
fn rule13_failed_ack_is_retried_and_lease_renewed_meanwhile() {
    let t0 = Instant::now();
    let cfg = config()
        .concurrency(1)
        .max_leases(1)
        .heartbeat_interval(ms(500));
    let mut e = engine(&cfg, t0);
    drain(&mut e);
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1)]);
    let (inv, a) = one_run(&drain(&mut e));
    e.handle_outcome(t0 + ms(100), inv, Outcome::Done);
    assert_eq!(drain(&mut e), vec![Effect::Ack { leases: vec![a] }]);
    e.handle_acked(t0 + ms(200), [(a, SettleResult::Failed)]);
    assert_eq!(drain(&mut e), vec![]);

    assert_eq!(e.poll_timeout(), Some(t0 + ms(500)));
    e.handle_timeout(t0 + ms(500));
    let (batch, leases) = one_renew(&drain(&mut e));
    assert_eq!(leases, vec![a]);
    e.handle_renewed(t0 + ms(510), batch, [(a, RenewResult::Kept)]);
    e.handle_timeout(t0 + ms(1000));
    let (batch, leases) = one_renew(&drain(&mut e));
    assert_eq!(leases, vec![a]);
    e.handle_renewed(t0 + ms(1010), batch, [(a, RenewResult::Kept)]);
    assert_eq!(drain(&mut e), vec![]);

    assert_eq!(e.poll_timeout(), Some(t0 + ms(1200)));
    e.handle_timeout(t0 + ms(1199));
    assert_eq!(drain(&mut e), vec![]);
    e.handle_timeout(t0 + ms(1200));
    assert_eq!(drain(&mut e), vec![Effect::Ack { leases: vec![a] }]);
    e.handle_acked(t0 + ms(1300), [(a, SettleResult::Ok)]);
    assert_eq!(drain(&mut e), vec![fetch(1, Duration::ZERO)]);
    assert_eq!(e.stats().acked, 1);
    assert!(e.lease(a).is_none());
}

/// Rule 13: an ack answered `Lost` drops the lease: not re-sent, not renewed.
#[test]
fn rule13_lost_ack_drops_the_lease() {
    let t0 = Instant::now();
    let mut e = engine(&config().concurrency(1).max_leases(1), t0);
    drain(&mut e);
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1)]);
    let (inv, a) = one_run(&drain(&mut e));
    e.handle_outcome(t0 + ms(100), inv, Outcome::Done);
    assert_eq!(drain(&mut e), vec![Effect::Ack { leases: vec![a] }]);
    e.handle_acked(t0 + ms(200), [(a, SettleResult::Lost)]);
    let mut later = drain(&mut e);
    assert_eq!(later, vec![fetch(1, Duration::ZERO)]);
    assert!(e.lease(a).is_none());
    assert_eq!(e.stats().lost, 1);
    assert_eq!(e.stats().acked, 0);
    e.handle_fetched(t0 + ms(210), S0, vec![]);
    for at in [1000, 2000, 3000] {
        e.handle_timeout(t0 + ms(at));
        later.extend(drain(&mut e));
    }
    assert!(!mentions(&later, a), "{later:?}");
}

/// Rule 13: an ack sent with a fence that was replaced meanwhile (a redelivery adopted while
/// the ack was in flight) and answered `Lost` is re-sent with the new fence.
#[test]
fn rule13_lost_ack_with_replaced_fence_is_resent() {
    let t0 = Instant::now();
    let mut e = engine(&config().concurrency(2).max_leases(2), t0);
    assert_eq!(drain(&mut e), vec![fetch(2, ms(1000))]);
    e.handle_fetched(t0 + ms(10), S0, vec![delivery(1, 1, 1)]);
    let fx = drain(&mut e);
    let (inv, a) = one_run(&fx);
    assert_eq!(fetches(&fx), vec![(S0, 1, ms(1000))]);
    e.handle_outcome(t0 + ms(100), inv, Outcome::Done);
    assert_eq!(drain(&mut e), vec![Effect::Ack { leases: vec![a] }]);

    // While the ack (fence 1) is in flight, a redelivery with fence 2 is adopted.
    e.handle_fetched(t0 + ms(200), S0, vec![delivery(1, 2, 2)]);
    let fx = drain(&mut e);
    assert!(runs(&fx).is_empty(), "{fx:?}");
    assert_eq!(e.lease(a).unwrap().fence(), Fence(2));
    // The backend refused the fence-1 ack: re-send with fence 2.
    e.handle_acked(t0 + ms(300), [(a, SettleResult::Lost)]);
    assert_eq!(drain(&mut e), vec![Effect::Ack { leases: vec![a] }]);
    assert_eq!(e.lease(a).unwrap().fence(), Fence(2));
    assert_eq!(e.stats().lost, 0);
    e.handle_acked(t0 + ms(400), [(a, SettleResult::Ok)]);
    drain(&mut e);
    assert_eq!(e.stats().acked, 1);
    assert!(e.lease(a).is_none());
}

// ----- rule 14: serial per message across a lost lease -------------------------------------------

/// Rule 14: a cancelled invocation whose lease was lost keeps its slot until it reports.
#[test]
fn rule14_cancelled_invocation_of_lost_lease_keeps_its_slot() {
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
        vec![Effect::Cancel {
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

/// Rule 14: if the message of a lost lease is delivered again while its cancelled invocation
/// still runs, the new delivery does not run until the old invocation has reported.
#[test]
fn rule14_redelivery_waits_for_the_cancelled_invocation() {
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
        vec![Effect::Cancel {
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

// ----- rule 15: no busy loop ---------------------------------------------------------------------

/// Rule 15: after every input of a long, varied, seeded random run, `poll_timeout()` is `None` or
/// strictly later than `now`.
#[test]
fn rule15_no_busy_loop_random_driver() {
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

/// Rule 15: a fetch answered after the heartbeat it would schedule was due leaves no timeout
/// in the past.
#[test]
fn rule15_no_busy_loop_when_fetch_answers_after_heartbeat_due() {
    let t0 = Instant::now();
    let mut e = engine(&config().concurrency(1).heartbeat_interval(ms(500)), t0);
    assert_eq!(drain(&mut e), vec![fetch(1, ms(1000))]);
    // A blocking fetch sent at t0 returns at t0+600; its lease's first renew was due at t0+500.
    e.handle_fetched(t0 + ms(600), S0, vec![msg(1)]);
    drain(&mut e);
    assert_no_busy_loop(&e, t0 + ms(600));
}

/// Rule 15: a renew failure answered after the next round was due leaves no timeout in the past.
#[test]
fn rule15_no_busy_loop_when_renew_fails_after_next_round_due() {
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

/// Rule 15: a release that fails after its lease missed a heartbeat (a release in flight is not
/// renewed, or a renew landing after it would undo its delay) leaves no timeout in the past.
#[test]
fn rule15_no_busy_loop_when_release_fails_after_missed_heartbeat() {
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
        vec![Effect::Release {
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

/// Rule 4: an ack in flight stays in the heartbeat, so a slow ack cannot let its lease lapse.
#[test]
fn rule04_ack_in_flight_is_still_renewed() {
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
    e.handle_outcome(t0 + ms(20), inv, Outcome::Done);
    assert_eq!(drain(&mut e), vec![Effect::Ack { leases: vec![a] }]);
    e.handle_timeout(t0 + ms(500));
    let renews: Vec<_> = drain(&mut e)
        .into_iter()
        .filter_map(|fx| match fx {
            Effect::Renew { leases, .. } => Some(leases),
            _ => None,
        })
        .collect();
    assert_eq!(renews, vec![vec![a]]);
}

/// Rule 15: explicit checks after each input of the common paths.
#[test]
fn rule15_no_busy_loop_on_common_paths() {
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
                Effect::Run { invocation, .. } => {
                    e.handle_outcome(now, invocation, Outcome::Pending)
                }
                Effect::Fetch { .. } => e.handle_fetched(now, S0, vec![]),
                Effect::Renew { batch, leases } => e.handle_renewed(
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

// ----- rule 16: determinism ----------------------------------------------------------------------

/// Rule 16: the same input sequence gives the same effect sequence (and the same timeouts).
#[test]
fn rule16_same_inputs_same_effects() {
    let t0 = Instant::now();
    for seed in [1, 2, 3] {
        let cfg = config()
            .concurrency(3)
            .max_leases(6)
            .retry(RetryPolicy {
                initial: secs(1),
                multiplier: 2.0,
                max: secs(10),
                jitter: 0.5,
            })
            .seed(seed);
        let mut one = Sim::new(&cfg, 2, seed, t0);
        let mut two = Sim::new(&cfg, 2, seed, t0);
        one.run(1500);
        two.run(1500);
        assert!(
            one.log.len() > 100,
            "a meaningful run: {} effects",
            one.log.len()
        );
        assert_eq!(one.log, two.log, "seed {seed}");
        assert_eq!(one.timeouts, two.timeouts, "seed {seed}");
        assert_eq!(one.engine.stats(), two.engine.stats());
    }
}

// ----- rule 17: stale inputs ---------------------------------------------------------------------

/// Rule 17: an outcome for an unknown invocation, a second outcome for the same invocation, and an
/// outcome of an earlier run of a re-run message are ignored.
#[test]
fn rule17_stale_or_unknown_outcomes_are_ignored() {
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
    e.handle_fetched(t0 + ms(25), S0, vec![]);
    drain(&mut e);
    // A second outcome of the same (finished) invocation: ignored, no ack.
    e.handle_outcome(t0 + ms(30), inv1, Outcome::Done);
    assert_eq!(drain(&mut e), vec![]);
    e.handle_timeout(t0 + ms(420));
    let (inv2, _) = one_run(&drain(&mut e));
    // The earlier run's outcome arrives again during the re-run: ignored.
    e.handle_outcome(t0 + ms(430), inv1, Outcome::Done);
    assert_eq!(drain(&mut e), vec![]);
    assert_eq!(e.running(), 1);
    e.handle_outcome(t0 + ms(440), inv2, Outcome::Done);
    assert_eq!(drain(&mut e), vec![Effect::Ack { leases: vec![a] }]);
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

/// Rule 17: a renew result for an unknown or already answered batch is ignored.
#[test]
fn rule17_stale_renew_results_are_ignored() {
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

/// Rule 17: settle results for a lease that is not being settled that way are ignored.
#[test]
fn rule17_settle_results_for_leases_not_being_settled_are_ignored() {
    let t0 = Instant::now();
    let mut e = engine(&config().concurrency(1).max_leases(1), t0);
    drain(&mut e);
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1)]);
    let (inv, a) = one_run(&drain(&mut e));
    // Running, not being acked: these change nothing.
    e.handle_acked(t0 + ms(20), [(a, SettleResult::Ok)]);
    e.handle_acked(t0 + ms(20), [(a, SettleResult::Lost)]);
    e.handle_released(t0 + ms(20), a, SettleResult::Ok);
    e.handle_dead_lettered(t0 + ms(20), a, SettleResult::Lost);
    assert_eq!(drain(&mut e), vec![]);
    assert_eq!(e.running(), 1);
    assert_eq!(e.held(), 1);
    e.handle_outcome(t0 + ms(30), inv, Outcome::Done);
    assert_eq!(drain(&mut e), vec![Effect::Ack { leases: vec![a] }]);
    // Being acked, not released: a release result is ignored.
    e.handle_released(t0 + ms(40), a, SettleResult::Lost);
    e.handle_dead_lettered(t0 + ms(40), a, SettleResult::Ok);
    assert_eq!(drain(&mut e), vec![]);
    assert_eq!(e.held(), 1);
    e.handle_acked(t0 + ms(50), [(a, SettleResult::Ok)]);
    assert_eq!(drain(&mut e), vec![fetch(1, Duration::ZERO)]);
    // Gone: a second ack result is ignored.
    e.handle_acked(t0 + ms(60), [(a, SettleResult::Failed)]);
    assert_eq!(drain(&mut e), vec![]);
    assert_eq!(e.stats().acked, 1);
}

/// Rule 17: a `now` earlier than a previous one is treated as the latest `now` (no panic, no
/// timers run twice, no timeout in the past).
#[test]
fn rule17_time_going_backwards_is_ignored() {
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
        vec![fetch(1, Duration::ZERO), Effect::Ack { leases: vec![a] }]
    );
    assert_no_busy_loop(&e, t0 + ms(1000));
}

// ----- re-poll spread -----------------------------------------------------------------------

/// Rule 1 (spread): with `repoll_spread`, a delivery's first re-poll comes between
/// `(1 - spread) × repoll_interval` and `repoll_interval` after its `Pending`; later re-polls
/// keep the exact cadence.
#[test]
fn rule01_first_repoll_is_spread_then_the_cadence_is_exact() {
    let t0 = Instant::now();
    let interval = ms(1000);
    let mut e = engine(
        &config()
            .concurrency(1)
            .repoll_interval(interval)
            .repoll_spread(0.5),
        t0,
    );
    drain(&mut e);
    e.handle_fetched(t0, S0, vec![msg(1)]);
    let (inv, _) = one_run(&drain(&mut e));
    e.handle_outcome(t0, inv, Outcome::Pending);
    // The freed slot fetches; nothing new is there.
    for effect in drain(&mut e) {
        if let Effect::Fetch { stream, .. } = effect {
            e.handle_fetched(t0, stream, vec![]);
        }
    }
    drain(&mut e);
    let mut reruns = Vec::new();
    while reruns.len() < 3 {
        let now = e.poll_timeout().expect("a re-poll is due");
        assert!(now < t0 + secs(10), "no re-run came");
        e.handle_timeout(now);
        let mut queue: std::collections::VecDeque<Effect> = drain(&mut e).into();
        while let Some(effect) = queue.pop_front() {
            match effect {
                Effect::Run { invocation, .. } => {
                    reruns.push(now);
                    e.handle_outcome(now, invocation, Outcome::Pending);
                }
                Effect::Fetch { stream, .. } => e.handle_fetched(now, stream, vec![]),
                Effect::Renew { batch, leases } => e.handle_renewed(
                    now,
                    batch,
                    leases.into_iter().map(|l| (l, RenewResult::Kept)),
                ),
                other => panic!("unexpected {other:?}"),
            }
            queue.extend(drain(&mut e));
        }
    }
    let first = reruns[0] - t0;
    assert!(
        first >= interval / 2 && first <= interval,
        "first re-poll after {first:?}"
    );
    assert_eq!(reruns[1] - reruns[0], interval);
    assert_eq!(reruns[2] - reruns[1], interval);
}

/// Rule 1 (spread): a burst of `Pending` messages is re-polled at many distinct instants across
/// the interval, not all at once; without spread they all come due together.
#[test]
fn rule01_a_burst_of_pending_messages_is_spread_over_the_interval() {
    let t0 = Instant::now();
    for (spread, expect_distinct) in [(1.0, true), (0.0, false)] {
        let mut e = engine(
            &config()
                .concurrency(100)
                .max_leases(100)
                .claim_timeout(secs(60))
                .heartbeat_interval(secs(20))
                .repoll_interval(secs(10))
                .repoll_spread(spread),
            t0,
        );
        drain(&mut e);
        e.handle_fetched(t0, S0, (1..=100).map(msg).collect());
        for (inv, _) in runs(&drain(&mut e)) {
            e.handle_outcome(t0, inv, Outcome::Pending);
        }
        drain(&mut e);
        let mut instants = std::collections::BTreeSet::new();
        let mut now = t0;
        let mut rerun = 0;
        while rerun < 100 {
            now = e.poll_timeout().expect("re-polls are due");
            assert!(now <= t0 + secs(10), "re-poll past the interval");
            e.handle_timeout(now);
            let mut queue: std::collections::VecDeque<Effect> = drain(&mut e).into();
            while let Some(effect) = queue.pop_front() {
                match effect {
                    Effect::Run { invocation, .. } => {
                        rerun += 1;
                        instants.insert(now);
                        e.handle_outcome(now, invocation, Outcome::Done);
                    }
                    Effect::Fetch { stream, .. } => e.handle_fetched(now, stream, vec![]),
                    Effect::Renew { batch, leases } => e.handle_renewed(
                        now,
                        batch,
                        leases.into_iter().map(|l| (l, RenewResult::Kept)),
                    ),
                    Effect::Ack { leases } => {
                        e.handle_acked(now, leases.into_iter().map(|l| (l, SettleResult::Ok)))
                    }
                    other => panic!("unexpected {other:?}"),
                }
                queue.extend(drain(&mut e));
            }
        }
        assert!(now <= t0 + secs(10), "all re-polled within one interval");
        if expect_distinct {
            assert!(
                instants.len() > 90,
                "only {} distinct instants",
                instants.len()
            );
        } else {
            assert_eq!(instants.len(), 1);
        }
    }
}
