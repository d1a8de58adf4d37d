//! Guarantee 4 of the crate docs: every held lease is in a renew at least every
//! `heartbeat_interval`, one round at a time, except while its release is in flight.
//!
//! Renewing is what keeps another replica from taking a message whose handler is still running. One
//! heartbeat renews every lease in one `Renew` (in chunks only above `renew_batch_size`); while a
//! round is unanswered no other starts, and an overdue one goes out with the answer. A lease whose
//! ack is in flight is still renewed, so a slow ack cannot let it lapse; one whose release is in
//! flight is not, since a renew landing after the release would undo its delay.

mod common;

use std::time::Instant;

use common::*;
use leasehold_core::{LeaseId, Outcome, RenewResult};

fn three_running(cfg: &leasehold_core::Config, t0: Instant) -> (TestEngine, Vec<LeaseId>) {
    let mut e = engine(cfg, t0);
    assert_eq!(drain(&mut e), vec![fetch(3, ms(1000))]);
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1), msg(2), msg(3)]);
    let fx = drain(&mut e);
    assert_eq!(fx.len(), 3, "{fx:?}");
    let leases = runs(&fx).into_iter().map(|(_, l)| l).collect();
    (e, leases)
}

/// The heartbeat emits ONE `Renew` for all held leases per `heartbeat_interval`.
#[test]
fn one_renew_for_all_leases_per_heartbeat() {
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

/// A heartbeat is chunked into several `Renew` effects only above `renew_batch_size`.
#[test]
fn renew_is_chunked_only_above_batch_size() {
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

/// At most one renew round is outstanding: no new `Renew` while one is unanswered, even when a
/// heartbeat interval passes; the next comes right after the answer if overdue.
#[test]
fn at_most_one_renew_round_outstanding() {
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
        vec![Seen::Renew {
            batch: batch2,
            leases: renewed.clone()
        }]
    );
    assert_eq!(renewed, leases);
    assert_ne!(batch2, batch);
}

/// After a renew *failure* answered when the next heartbeat is already overdue, the next round
/// comes right after the answer (leases are at risk: renewing must not wait for a timer).
#[test]
fn renew_failure_when_overdue_renews_right_after_the_answer() {
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

/// An ack in flight stays in the heartbeat, so a slow ack cannot let its lease lapse.
#[test]
fn ack_in_flight_is_still_renewed() {
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
    assert_eq!(drain(&mut e), vec![Seen::Ack { leases: vec![a] }]);
    e.handle_timeout(t0 + ms(500));
    let renews: Vec<_> = drain(&mut e)
        .into_iter()
        .filter_map(|fx| match fx {
            Seen::Renew { leases, .. } => Some(leases),
            _ => None,
        })
        .collect();
    assert_eq!(renews, vec![vec![a]]);
}
