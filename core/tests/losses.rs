//! Every lease the engine lets go of without settling it is announced with `Effect::Lost`: why
//! (expired locally, taken over at a renew, lost at its settle) and how much local validity it
//! still had. A running invocation of it is cancelled right after; a waiting one is not running,
//! so the notice is all a driver hears of it. `load` counts what each stream occupies.

mod common;

use std::time::{Duration, Instant};

use common::*;
use leasehold_core::{
    Effect, LeaseRef, LossReason, Outcome, RenewResult, SettleResult, StreamId, StreamLoad,
};

/// The `Lost` notices among `effects`: (message id, reason, margin).
fn losses(effects: &[Effect<String>]) -> Vec<(String, LossReason, Duration)> {
    effects
        .iter()
        .filter_map(|effect| match effect {
            Effect::Lost {
                lease_ref: LeaseRef { id, .. },
                reason,
                margin,
                ..
            } => Some((id.to_string(), *reason, *margin)),
            _ => None,
        })
        .collect()
}

fn load(held: usize, running: usize, waiting: usize) -> StreamLoad {
    let mut load = StreamLoad::default();
    (load.held, load.running, load.waiting) = (held, running, waiting);
    load
}

#[test]
fn a_lease_taken_over_at_a_renew_is_announced_with_its_margin_before_the_cancel() {
    let t0 = Instant::now();
    let mut e = engine(&config(), t0);
    drain(&mut e);
    e.handle_fetched(t0, S0, vec![msg(1)]);
    drain(&mut e);
    e.handle_timeout(t0 + ms(1000));
    let (batch, leases) = one_renew(&drain(&mut e));
    e.handle_renewed(t0 + ms(1100), batch, [(leases[0], RenewResult::Lost)]);
    let effects = drain_all(&mut e);
    // Valid until 2.7 s after the fetch was sent: 1.6 s were left.
    assert_eq!(
        losses(&effects),
        vec![(msg(1).id.to_string(), LossReason::TakenOver, ms(1600))]
    );
    let lost_at = effects
        .iter()
        .position(|e| matches!(e, Effect::Lost { .. }));
    let cancel_at = effects
        .iter()
        .position(|e| matches!(e, Effect::Cancel { .. }));
    assert!(lost_at < cancel_at, "{effects:?}");
    // The cancelled invocation still holds its slot, not a lease.
    assert_eq!(e.load(S0), load(0, 1, 0));
}

#[test]
fn a_local_expiry_is_announced_with_no_margin_left() {
    let t0 = Instant::now();
    let mut e = engine(&config(), t0);
    drain(&mut e);
    e.handle_fetched(t0, S0, vec![msg(1)]);
    drain(&mut e);
    // Every renew fails: the lease expires 2.7 s after its fetch was sent.
    e.handle_timeout(t0 + ms(1000));
    let (batch, _) = one_renew(&drain(&mut e));
    e.handle_renew_failed(t0 + ms(1010), batch);
    drain(&mut e);
    e.handle_timeout(t0 + ms(2700));
    let effects = drain_all(&mut e);
    assert_eq!(
        losses(&effects),
        vec![(msg(1).id.to_string(), LossReason::Expired, Duration::ZERO)]
    );
    assert_eq!(e.stats().expired, 1);
}

#[test]
fn a_waiting_lease_that_expires_is_announced_though_nothing_is_cancelled() {
    let t0 = Instant::now();
    let mut e = engine(&config().concurrency(1).prefetch(1), t0);
    drain(&mut e);
    e.handle_fetched(t0, S0, vec![msg(1), msg(2)]);
    drain(&mut e);
    assert_eq!(e.load(S0), load(2, 1, 1));
    e.handle_timeout(t0 + ms(2700));
    let effects = drain_all(&mut e);
    let mut lost = losses(&effects);
    lost.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(lost.len(), 2, "{effects:?}");
    assert!(lost.iter().all(|(_, r, _)| *r == LossReason::Expired));
    let cancels = effects
        .iter()
        .filter(|e| matches!(e, Effect::Cancel { .. }))
        .count();
    assert_eq!(cancels, 1, "only the running one is cancelled: {effects:?}");
    assert_eq!(e.load(S0), load(0, 1, 0));
}

#[test]
fn an_ack_that_finds_the_lease_taken_over_is_announced() {
    let t0 = Instant::now();
    let mut e = engine(&config(), t0);
    drain(&mut e);
    e.handle_fetched(t0, S0, vec![msg(1)]);
    let fx = drain(&mut e);
    let [(invocation, lease)] = runs(&fx)[..] else {
        panic!("{fx:?}")
    };
    e.handle_outcome(t0 + ms(100), invocation, Outcome::Done);
    drain(&mut e);
    e.handle_acked(t0 + ms(200), [(lease, SettleResult::Lost)]);
    let effects = drain_all(&mut e);
    assert_eq!(
        losses(&effects),
        vec![(msg(1).id.to_string(), LossReason::LostAtSettle, ms(2500))]
    );
    assert_eq!(e.load(S0), StreamLoad::default());
}

#[test]
fn deliveries_that_arrive_past_their_lease_are_announced_as_expired() {
    let t0 = Instant::now();
    let mut e = engine(&config(), t0);
    drain(&mut e);
    e.handle_fetched(t0 + ms(2700), S0, vec![msg(1)]);
    let effects = drain_all(&mut e);
    assert_eq!(
        losses(&effects),
        vec![(msg(1).id.to_string(), LossReason::Expired, Duration::ZERO)]
    );
    assert!(!effects.iter().any(|e| matches!(e, Effect::Run(_))));
}

#[test]
fn load_is_counted_per_stream() {
    let t0 = Instant::now();
    let mut e = engine_with_streams(&config().concurrency(2).prefetch(2), 2, t0);
    drain(&mut e);
    let s1 = StreamId(1);
    e.handle_fetched(t0, S0, vec![msg(1)]);
    e.handle_fetched(t0, s1, vec![msg(2), msg(3), msg(4)]);
    let fx = drain(&mut e);
    assert_eq!(runs(&fx).len(), 2);
    let total = e.load(S0).held + e.load(s1).held;
    assert_eq!(total, 4);
    assert_eq!(e.load(S0).running + e.load(s1).running, 2);
    assert_eq!(e.load(S0).waiting + e.load(s1).waiting, 2);
    assert_eq!(e.load(StreamId(7)), StreamLoad::default(), "no such stream");
}
