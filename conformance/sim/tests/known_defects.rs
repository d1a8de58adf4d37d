//! Engine defects the simulator found, now fixed in `leasehold-core`: each test pins the fix.

use std::time::{Duration, Instant};

use leasehold_core::{
    Config, Effect, Fence, Fetched, LeaseEngine, Outcome, SettleResult, StreamId,
};
use leasehold_sim::{run_seed, Profile, SimConfig};

/// Defect 1: a `Lost` answer to a release (or dead-letter) whose lease was re-fenced meanwhile
/// re-sends the settle effect *before* the input's clock advance runs local expiry; when the
/// same input expires the lease (here: the answer arrives after a long pause), the engine emits
/// a `Release` naming a lease it no longer knows. Drivers that resolve leases when executing
/// (the worker's does) skip it, so nothing reaches the store, but the effect breaks the
/// engine's contract ("the driver reads the lease right after polling"). The fix: run expiry
/// before re-sending (or drop queued settle effects of leases that are gone).
///
/// The minimal engine-level reproduction. Regression test once fixed: `assert!(stale.is_empty())`.
#[test]
fn known_defect_release_resent_for_a_lease_expired_in_the_same_input() {
    let t0 = Instant::now();
    let cfg = Config::default().claim_timeout(Duration::from_secs(10)); // lease TTL 9 s
    let mut engine = LeaseEngine::<u32>::new(&cfg, t0).unwrap();
    let delivery = |fence: u64| Fetched {
        id: "0-1".into(),
        payload: 7,
        delivery_count: fence as u32,
        fence: Fence(fence),
    };
    assert!(matches!(engine.poll_effect(), Some(Effect::Fetch { .. })));
    engine.handle_fetched(t0, StreamId(0), vec![delivery(1)]);
    let Some(Effect::Run { invocation, lease }) = engine.poll_effect() else {
        panic!("expected a run");
    };
    // A failed attempt: released with a 1 s delay (the release is in flight)...
    engine.handle_outcome(
        t0,
        invocation,
        Outcome::Retry {
            delay: Some(Duration::from_secs(1)),
        },
    );
    while engine.poll_effect().is_some() {}
    // ...the store applies it, and this consumer's next fetch takes the message back (fence 2):
    // the engine adopts the new fence and keeps releasing.
    engine.handle_fetched(t0 + Duration::from_secs(2), StreamId(0), vec![delivery(2)]);
    while engine.poll_effect().is_some() {}
    // The release's answer (sent with fence 1: Lost) arrives after a 20 s stall.
    engine.handle_released(t0 + Duration::from_secs(22), lease, SettleResult::Lost);
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

/// The same defect as the simulator found it, minimized to one replica and three messages:
/// `cargo run -p leasehold-sim --release -- --seed 5912 --replicas 1 --messages 3 --profile
/// lease-edge --print`. Regression test once fixed: `run_seed(&cfg, 5912).is_ok()`.
#[test]
fn known_defect_seed_5912_one_replica_three_messages() {
    let cfg = SimConfig {
        replicas: 1,
        messages: 3,
        ..SimConfig::with_profile(Profile::LeaseEdge)
    };
    if let Err(failure) = run_seed(&cfg, 5912) {
        panic!("{failure}");
    }
    // Skipping the stale effect the way the worker driver does, every other check holds.
    let skipping = SimConfig {
        skip_stale_effects: true,
        ..cfg
    };
    let report = run_seed(&skipping, 5912).expect("passes");
    assert_eq!(report.stale_effects, 0);
}
