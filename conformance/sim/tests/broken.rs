//! A checker that never fails is worth nothing: break the store or the driver on purpose and
//! require the simulator to catch each within a stated number of seeds. Seeds replay exactly,
//! so each bound is a fact about these seeds, with room left for the scenarios to change.

use leasehold_sim::{run_seed, BrokenDriver, Check, Failure, Flaw, Profile, SimConfig, StoreKind};

/// The first seed in `0..bound` that breaks a check, with its failure.
fn first_failure(cfg: &SimConfig, bound: u64) -> Option<Failure> {
    (0..bound).find_map(|seed| run_seed(cfg, seed).err().map(|f| *f))
}

fn caught(cfg: &SimConfig, bound: u64, check: Check) -> Failure {
    let failure = first_failure(cfg, bound).unwrap_or_else(|| {
        panic!(
            "no violation in seeds 0..{bound} of `{}`",
            cfg.replay_command(0)
        )
    });
    println!("{failure}");
    assert_eq!(failure.check, check, "{failure}");
    failure
}

/// The classic hole of a plain-`XCLAIM` heartbeat: renew is an unconditional `XCLAIM` (no
/// owner check, no fence). The engine leaves it a narrow window: its lease runs from when a
/// renew was *sent*, and a renew slower than that lease is given up, so a stolen-back renew
/// matters only when it lands after a peer's takeover and is answered while its sender still
/// counts the lease as its own. The lease-edge profile aims there; the first seed caught is
/// 114, the test allows 400.
#[test]
fn steal_back_renew_is_caught_as_a_single_runner_violation() {
    let cfg = SimConfig {
        store: StoreKind::Model(Some(Flaw::RenewStealsBack)),
        ..SimConfig::with_profile(Profile::LeaseEdge)
    };
    let failure = caught(&cfg, 400, Check::SingleRunner);
    assert!(failure
        .replay
        .contains("--backend steal-back --profile lease-edge"));
    // The trace shows the overlap: a takeover while the stolen-back runner was away.
    assert!(
        failure
            .trace
            .iter()
            .any(|l| l.contains("while a paused or stalled replica still runs it")),
        "{failure}"
    );
}

/// The unchecked `XACK`: a stale worker's late ack deletes the new owner's delivery. Late acks
/// need slow calls around the lease boundary: the lease-edge profile's first is seed 24.
#[test]
fn unfenced_ack_is_caught_as_a_fencing_violation() {
    let cfg = SimConfig {
        store: StoreKind::Model(Some(Flaw::AckIgnoresOwner)),
        ..SimConfig::with_profile(Profile::LeaseEdge)
    };
    caught(&cfg, 200, Check::Fencing);
}

/// A driver that acks what the engine discarded (a `Done` after its lease was lost):
/// caught at the ack, from seed 84 of the broad profile on (a `Done` after an expiry, which
/// used to catch it from seed 3, is the engine's own late ack now).
#[test]
fn a_driver_acking_discarded_results_is_caught() {
    let cfg = SimConfig {
        broken: Some(BrokenDriver::AcksAfterLoss),
        ..SimConfig::default()
    };
    let failure = caught(&cfg, 250, Check::SingleRunner);
    assert!(
        failure.detail.contains("should have been discarded"),
        "{failure}"
    );
    assert!(failure.replay.contains("--broken acks-after-loss"));
}

/// A driver that drops a renew result (the last of each reply): the worker refuses a reply
/// that does not answer every lease, as a fatal error, and a worker stopped by an error nobody
/// injected is caught at once (seed 0).
#[test]
fn a_driver_dropping_renew_results_is_caught() {
    let cfg = SimConfig {
        broken: Some(BrokenDriver::DropsRenewResult),
        ..SimConfig::default()
    };
    let failure = caught(&cfg, 20, Check::Engine);
    assert!(
        failure
            .detail
            .contains("renew answered 0 results for 1 leases"),
        "{failure}"
    );
}

/// A driver that misreads a renew's `Lost` as `Kept`. The engine's own lease (from the send
/// time) already stops a runner before its store lease lapses, so a `Lost` while the engine
/// still counts the lease valid takes a clock that lagged or a stolen lease; the lease-edge
/// profile's first is seed 96 (the steal-back store's, which breaks alike, is 114).
#[test]
fn a_driver_keeping_lost_leases_is_caught() {
    let cfg = SimConfig {
        broken: Some(BrokenDriver::KeepsLostLeases),
        ..SimConfig::with_profile(Profile::LeaseEdge)
    };
    let failure = caught(&cfg, 400, Check::SingleRunner);
    assert!(failure.replay.contains("--broken keeps-lost-leases"));
}

/// A driver that answers a shutting-down worker's releases without making them: the worker's
/// report claims hand-offs the store never saw. Graceful restarts during faults make this
/// common: seed 3 of the broad profile.
#[test]
fn a_driver_faking_releases_at_shutdown_is_caught() {
    let cfg = SimConfig {
        broken: Some(BrokenDriver::ForgetsLeaseAtShutdown),
        ..SimConfig::default()
    };
    let failure = caught(&cfg, 50, Check::NoLeak);
    assert!(
        failure.detail.contains("shutdown report claims"),
        "{failure}"
    );
}

/// A store that enqueues delayed messages at once: their first delivery comes before their due
/// time (seed 2 of the broad profile).
#[test]
fn a_store_ignoring_due_times_is_caught() {
    let cfg = SimConfig {
        store: StoreKind::Model(Some(Flaw::DelayIgnored)),
        ..SimConfig::default()
    };
    let failure = caught(&cfg, 20, Check::DueTime);
    assert!(failure.detail.contains("before its due time"), "{failure}");
    assert!(failure.replay.contains("--backend ignores-delay"));
}

/// A store that forgets deduplication keys: a repeated publish is no duplicate (seed 1 of the
/// broad profile).
#[test]
fn a_store_ignoring_deduplication_keys_is_caught() {
    let cfg = SimConfig {
        store: StoreKind::Model(Some(Flaw::DedupeIgnored)),
        ..SimConfig::default()
    };
    let failure = caught(&cfg, 20, Check::Dedupe);
    assert!(failure.detail.contains("(duplicate: false)"), "{failure}");
    assert!(failure.replay.contains("--backend ignores-dedupe"));
}

/// The liveness check fails when its bound is too tight to hold: shrink it a thousandfold.
#[test]
fn liveness_check_fails_when_the_bound_is_too_tight() {
    let cfg = SimConfig {
        bound_scale: 0.001,
        ..SimConfig::default()
    };
    let failure = caught(&cfg, 20, Check::Liveness);
    assert!(failure.replay.contains("--bound-scale 0.001"));
}
