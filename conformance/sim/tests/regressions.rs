//! Engine defects the simulator found, each pinned where it was fixed.

use std::time::{Duration, Instant};

use leasehold_core::{
    Config, Effect, Fence, Fetched, LeaseEngine, Outcome, SettleResult, StreamId,
};

/// A `Lost` answer to a release whose lease was re-fenced meanwhile re-sent the settle effect
/// before the input's clock advance ran local expiry; when that input also expired the lease
/// (the answer came after a long stall) the engine emitted a `Release` for a lease it no
/// longer knew. Expiry now runs first.
#[test]
fn a_release_is_not_resent_for_a_lease_expired_by_the_same_input() {
    let t0 = Instant::now();
    let cfg = Config::default().claim_timeout(Duration::from_secs(10)); // lease TTL 9 s
    let mut engine = LeaseEngine::<u32>::new(&cfg, t0).unwrap();
    let delivery = |fence: u64| Fetched::new("0-1".into(), 7, fence as u32, Fence(fence));
    assert!(matches!(engine.poll_effect(), Some(Effect::Fetch { .. })));
    engine.handle_fetched(t0, StreamId(0), vec![delivery(1)]);
    let Some(Effect::Run(invocation)) = engine.poll_effect() else {
        panic!("expected an invocation");
    };
    // A failed attempt: released with a 1 s delay (the release is in flight)...
    engine.handle_outcome(
        t0,
        invocation.id,
        Outcome::Retry {
            delay: Some(Duration::from_secs(1)),
        },
    );
    let mut released = None;
    while let Some(effect) = engine.poll_effect() {
        if let Effect::Release { lease, .. } = effect {
            released = Some(lease);
        }
    }
    let lease = released.expect("the failed attempt is released");
    // ...the store applies it, and this consumer's next fetch takes the message back (fence 2):
    // the engine adopts the new fence and keeps releasing.
    engine.handle_fetched(t0 + Duration::from_secs(2), StreamId(0), vec![delivery(2)]);
    while engine.poll_effect().is_some() {}
    // The release's answer (sent with fence 1: Lost) arrives after a 20 s stall.
    engine.handle_released(t0 + Duration::from_secs(22), lease, Ok(SettleResult::Lost));
    let mut stale = Vec::new();
    while let Some(effect) = engine.poll_effect() {
        let named = match &effect {
            Effect::Release { lease, .. } | Effect::DeadLetter { lease, .. } => Some(*lease),
            _ => None,
        };
        if named.is_some_and(|l| engine.lease(l).is_none()) {
            stale.push(effect);
        }
    }
    assert_eq!(engine.held(), 0, "the lease expired");
    assert!(
        stale.is_empty(),
        "effects for a lease the engine no longer knows: {stale:?}"
    );
}
