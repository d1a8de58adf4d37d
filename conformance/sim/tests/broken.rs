//! A checker that never fails is worth nothing: swap in deliberately broken stores and require
//! the simulator to catch each within a bounded search of seeds.

use leasehold_sim::{run_seed, Check, Failure, Flaw, Profile, SimConfig, StoreKind};

/// The first seed in `0..bound` that breaks a check, with its failure.
fn first_failure(cfg: &SimConfig, bound: u64) -> Option<Failure> {
    (0..bound).find_map(|seed| run_seed(cfg, seed).err().map(|f| *f))
}

/// The classic hole of a plain-`XCLAIM` heartbeat: renew is an unconditional `XCLAIM` (no owner check,
/// no fence). Against this engine it needs a heartbeat that lands after a peer's takeover while
/// its sender is paused, the window the lease-edge profile aims at; there it is caught within a
/// few seeds, and the test allows 200.
#[test]
fn steal_back_renew_is_caught_as_a_single_runner_violation() {
    let cfg = SimConfig {
        store: StoreKind::Model(Some(Flaw::RenewStealsBack)),
        ..SimConfig::with_profile(Profile::LeaseEdge)
    };
    let failure = first_failure(&cfg, 200).expect("no violation in 200 seeds");
    println!("{failure}");
    assert_eq!(failure.check, Check::SingleRunner, "{failure}");
    assert!(failure
        .replay
        .contains("--backend steal-back --profile lease-edge"));
    // The trace shows the steal: a renew of the old delivery accepted after the takeover.
    assert!(
        failure
            .trace
            .iter()
            .any(|l| l.contains("while a paused replica still runs it")),
        "{failure}"
    );
}

/// The unchecked `XACK`: a stale worker's late ack deletes the new owner's delivery. Late
/// acks need slow calls around the lease boundary too: the broad profile catches it in about
/// one seed of 150, the lease-edge profile in about one of 20.
#[test]
fn unfenced_ack_is_caught_as_a_fencing_violation() {
    let cfg = SimConfig {
        store: StoreKind::Model(Some(Flaw::AckIgnoresOwner)),
        ..SimConfig::with_profile(Profile::LeaseEdge)
    };
    let failure = first_failure(&cfg, 200).expect("no violation in 200 seeds");
    println!("{failure}");
    assert_eq!(failure.check, Check::Fencing, "{failure}");
}

/// The liveness check fails when its bound is too tight to hold: shrink it a thousandfold.
#[test]
fn liveness_check_fails_when_the_bound_is_too_tight() {
    let cfg = SimConfig {
        bound_scale: 0.001,
        ..SimConfig::default()
    };
    let failure = first_failure(&cfg, 20).expect("a bound of 0.1 % must be exceeded");
    assert_eq!(failure.check, Check::Liveness, "{failure}");
    assert!(failure.replay.contains("--bound-scale 0.001"));
}
