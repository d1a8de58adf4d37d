//! The store unavailable for a while, then back: down (calls refused, blocked fetches reset)
//! or paused (calls held until it is back). No fetch may bring deliveries whose leases are
//! already spent unless a fault forces it (a slow call, its replica frozen, an outage as long
//! as a lease on its own); and a client that queues calls while the store is down, sending them
//! once reconnected, is caught doing exactly that.

use leasehold_sim::{run_seed, run_seeds, BrokenDriver, Check, Profile, SimConfig};

#[test]
fn outages_expire_nothing_in_transit_beyond_what_they_force() {
    let cfg = SimConfig::with_profile(Profile::StoreOutage);
    let summary = run_seeds(&cfg, 0, 300, 1, usize::MAX);
    if let Some(failure) = summary.failures.first() {
        panic!(
            "{} of 300 seeds broke a check; the first:\n{failure}",
            summary.failures.len()
        );
    }
    let t = &summary.totals;
    assert!(t.outages >= 300, "too few outages: {t:?}");
    assert_eq!(
        t.acked + t.dead_lettered,
        t.messages,
        "every message settled"
    );
    println!(
        "{} outages; {} deliveries arrived expired, each forced by a fault",
        t.outages, t.expired_in_transit
    );
}

/// The reconnecting client that holds what it is asked while the store is down: its held
/// fetch arrives a reconnection backoff after the store is back, its leases spent. Seed 0 is
/// caught; the test allows 20.
#[test]
fn a_client_queueing_while_down_is_caught() {
    let cfg = SimConfig {
        broken: Some(BrokenDriver::QueuesWhileDown),
        ..SimConfig::with_profile(Profile::StoreOutage)
    };
    let failure = (0..20)
        .find_map(|seed| run_seed(&cfg, seed).err())
        .unwrap_or_else(|| panic!("no violation in seeds 0..20 of `{}`", cfg.replay_command(0)));
    println!("{failure}");
    assert_eq!(failure.check, Check::InTransit, "{failure}");
    assert!(
        failure.replay.contains("--profile store-outage"),
        "{failure}"
    );
    assert!(
        failure.replay.contains("--broken queues-while-down"),
        "{failure}"
    );
}
