//! The CI sweep: fixed seed ranges against the real memory backend, every check on.
//!
//! About 14 ms per seed in a debug build (three real workers on virtual time), so these
//! ~5 100 seeds take under a minute on 2 cores. A failure prints the seed, the broken check,
//! the replay command and the last events.

use leasehold_sim::{run_seeds, Profile, SimConfig, StoreKind, Summary};

fn sweep(cfg: &SimConfig, first: u64, count: u64) -> Summary {
    let summary = run_seeds(cfg, first, count, 1, usize::MAX);
    if let Some(failure) = summary.failures.first() {
        panic!(
            "{} of {count} seeds broke a check; the first:\n{failure}",
            summary.failures.len()
        );
    }
    assert_eq!(summary.seeds, count);
    summary
}

/// The sweep must exercise what it claims to: faults of every kind, takeovers, dead letters.
fn assert_eventful(summary: &Summary, cfg: &SimConfig) {
    let t = &summary.totals;
    assert!(t.slow_calls > 0, "{t:?}");
    if cfg.slow_share < 1.0 {
        assert!(t.failed_calls > 0 && t.lost_answers > 0, "{t:?}");
        assert!(
            t.duplicated_calls > 0,
            "no call reached the store twice: {t:?}"
        );
        assert!(t.halts > 0, "no fatal error stopped a worker: {t:?}");
    }
    assert!(
        t.stalls > 0 && t.deploys > 0,
        "no clock stall or deploy: {t:?}"
    );
    assert!(t.stale_inputs > 0, "no answer raced an expiry: {t:?}");
    assert!(t.crashes > 0 && t.restarts > 0, "no crash: {t:?}");
    assert!(
        t.pauses > 0 && t.link_faults > 0,
        "no pause or link fault: {t:?}"
    );
    assert!(
        t.paused_overlaps > 0,
        "no takeover from a paused replica: {t:?}"
    );
    assert!(t.dead_lettered > 0 && t.acked > t.dead_lettered, "{t:?}");
    assert!(t.reinvocations > 0, "{t:?}");
    assert!(
        t.delayed > 0 && t.duplicates > 0,
        "no delayed message or no duplicate publish: {t:?}"
    );
    assert_eq!(
        t.acked + t.dead_lettered,
        t.messages,
        "every message settled"
    );
}

#[test]
fn broad_faults_seeds_0_to_1000() {
    let cfg = SimConfig::default();
    assert_eventful(&sweep(&cfg, 0, 1000), &cfg);
}

#[test]
fn broad_faults_seeds_1000_to_2000() {
    let cfg = SimConfig::default();
    assert_eventful(&sweep(&cfg, 1000, 1000), &cfg);
}

#[test]
fn broad_faults_five_replicas_thirty_messages() {
    let cfg = SimConfig {
        replicas: 5,
        messages: 30,
        ..SimConfig::default()
    };
    assert_eventful(&sweep(&cfg, 0, 300), &cfg);
}

#[test]
fn lease_edge_faults() {
    let cfg = SimConfig::with_profile(Profile::LeaseEdge);
    assert_eventful(&sweep(&cfg, 0, 2000), &cfg);
}

#[test]
fn model_store_without_flaw_passes_too() {
    // The broken-backend tests run on the model: without its flaw it must be as clean as the
    // memory backend, or what they catch could be the model's own fault.
    let cfg = SimConfig {
        store: StoreKind::Model(None),
        ..SimConfig::default()
    };
    sweep(&cfg, 0, 200);
    sweep(
        &SimConfig {
            store: StoreKind::Model(None),
            ..SimConfig::with_profile(Profile::LeaseEdge)
        },
        0,
        100,
    );
}

#[test]
fn every_message_delayed_and_deduplicated() {
    // The due-time and deduplication checks on every message, under both fault profiles.
    for (profile, seeds) in [(Profile::Broad, 300), (Profile::LeaseEdge, 200)] {
        let cfg = SimConfig {
            delayed_share: 1.0,
            dedupe_share: 1.0,
            ..SimConfig::with_profile(profile)
        };
        let summary = sweep(&cfg, 5000, seeds);
        let t = &summary.totals;
        // One in eight is due at publish; the rest wait outside the stream.
        assert!(t.delayed * 10 > t.messages * 8, "{t:?}");
        assert!(t.duplicates * 3 > t.messages, "{t:?}");
        assert_eq!(
            t.acked + t.dead_lettered,
            t.messages,
            "every message settled"
        );
    }
}
