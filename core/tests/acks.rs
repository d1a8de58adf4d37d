//! Acks: those due at one input go out as one `Ack` effect, and each answer is acted on.
//!
//! Batching keeps the round trips to the backend few when many messages finish together. An ack
//! answered `Failed` is retried after `poll_interval`, its lease renewed meanwhile (guarantee 4 of
//! the crate docs), since a lost ack means a finished message is delivered and run again. One
//! answered `Lost` drops the lease, unless a redelivery replaced its fence while the ack was in
//! flight: then it is re-sent with the new fence (guarantee 3: acks are fenced).

mod common;

use std::time::{Duration, Instant};

use common::*;
use leasehold_core::{Fence, Outcome, RenewResult, SettleResult};

/// Acks due at one input go out as ONE `Ack` effect: here three acks whose retry (after a transient
/// failure) falls due at the same instant, and three re-sent at shutdown. Acks due at different
/// inputs are not held back.
#[test]
fn acks_due_at_one_input_form_one_effect() {
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

    // The first Done is acked at once; while its Ack is in flight, the acks that come due wait
    // (one Ack in flight per stream) and go out together when it is answered.
    e.handle_outcome(t0 + ms(100), ia, Outcome::Done);
    assert_eq!(drain(&mut e), vec![Seen::Ack { leases: vec![a] }]);
    e.handle_outcome(t0 + ms(110), ib, Outcome::Done);
    assert_eq!(drain(&mut e), vec![]);
    e.handle_outcome(t0 + ms(120), ic, Outcome::Done);
    assert_eq!(drain(&mut e), vec![]);
    e.handle_acked(t0 + ms(200), [(a, SettleResult::Failed)]);
    assert_eq!(drain(&mut e), vec![Seen::Ack { leases: vec![b, c] }]);

    // All three failed transiently at one instant; their retries fall due together: one Ack.
    e.handle_acked(
        t0 + ms(200),
        [(b, SettleResult::Failed), (c, SettleResult::Failed)],
    );
    assert_eq!(drain(&mut e), vec![]);
    assert_eq!(e.poll_timeout(), Some(t0 + ms(1200)));
    e.handle_timeout(t0 + ms(1200));
    assert_eq!(
        drain(&mut e),
        vec![Seen::Ack {
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
        vec![Seen::Ack {
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
    assert_eq!(drain(&mut e), vec![Seen::Drained]);
    assert_eq!(e.stats().acked, 3);
}

/// An ack answered `Failed` is retried after `poll_interval`, and the lease keeps being renewed
/// meanwhile.
#[test]
fn failed_ack_is_retried_and_lease_renewed_meanwhile() {
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
    assert_eq!(drain(&mut e), vec![Seen::Ack { leases: vec![a] }]);
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
    assert_eq!(drain(&mut e), vec![Seen::Ack { leases: vec![a] }]);
    e.handle_acked(t0 + ms(1300), [(a, SettleResult::Ok)]);
    assert_eq!(drain(&mut e), vec![fetch(1, Duration::ZERO)]);
    assert_eq!(e.stats().acked, 1);
    assert!(e.lease(a).is_none());
}

/// An ack answered `Lost` drops the lease: not re-sent, not renewed.
#[test]
fn lost_ack_drops_the_lease() {
    let t0 = Instant::now();
    let mut e = engine(&config().concurrency(1).max_leases(1), t0);
    drain(&mut e);
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1)]);
    let (inv, a) = one_run(&drain(&mut e));
    e.handle_outcome(t0 + ms(100), inv, Outcome::Done);
    assert_eq!(drain(&mut e), vec![Seen::Ack { leases: vec![a] }]);
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

/// An ack sent with a fence that was replaced meanwhile (a redelivery adopted while the ack was in
/// flight) and answered `Lost` is re-sent with the new fence.
#[test]
fn lost_ack_with_replaced_fence_is_resent() {
    let t0 = Instant::now();
    let mut e = engine(&config().concurrency(2).max_leases(2), t0);
    assert_eq!(drain(&mut e), vec![fetch(2, ms(1000))]);
    e.handle_fetched(t0 + ms(10), S0, vec![delivery(1, 1, 1)]);
    let fx = drain(&mut e);
    let (inv, a) = one_run(&fx);
    assert_eq!(fetches(&fx), vec![(S0, 1, ms(1000))]);
    e.handle_outcome(t0 + ms(100), inv, Outcome::Done);
    assert_eq!(drain(&mut e), vec![Seen::Ack { leases: vec![a] }]);

    // While the ack (fence 1) is in flight, a redelivery with fence 2 is adopted.
    e.handle_fetched(t0 + ms(200), S0, vec![delivery(1, 2, 2)]);
    let fx = drain(&mut e);
    assert!(runs(&fx).is_empty(), "{fx:?}");
    assert_eq!(e.lease(a).unwrap().fence(), Fence(2));
    // The backend refused the fence-1 ack: re-send with fence 2.
    e.handle_acked(t0 + ms(300), [(a, SettleResult::Lost)]);
    assert_eq!(drain(&mut e), vec![Seen::Ack { leases: vec![a] }]);
    assert_eq!(e.lease(a).unwrap().fence(), Fence(2));
    assert_eq!(e.stats().lost, 0);
    e.handle_acked(t0 + ms(400), [(a, SettleResult::Ok)]);
    drain(&mut e);
    assert_eq!(e.stats().acked, 1);
    assert!(e.lease(a).is_none());
}
