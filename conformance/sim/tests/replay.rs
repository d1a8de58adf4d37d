//! A seed replays exactly; the model store decides exactly like the memory backend; the
//! binary's one-line replay command reproduces a failure.

use std::process::Command;

use leasehold_sim::{run_seed_digest, Flaw, Profile, SimConfig, StoreKind};

#[test]
fn a_seed_replays_event_for_event() {
    let cfg = SimConfig::with_profile(Profile::LeaseEdge);
    for seed in [0, 1, 7, 100] {
        let a = run_seed_digest(&cfg, seed).expect("passes");
        let b = run_seed_digest(&cfg, seed).expect("passes");
        assert_eq!(a.digest, b.digest, "seed {seed} replayed differently");
        assert_eq!(a.events, b.events);
        assert_ne!(a.digest, 0);
    }
    let one = run_seed_digest(&cfg, 1).unwrap().digest;
    let two = run_seed_digest(&cfg, 2).unwrap().digest;
    assert_ne!(one, two, "different seeds, different runs");
}

/// The broken-backend tests use the model store; without a flaw it must make the very same
/// decisions as `leasehold-memory`, so that what they catch is the flaw and nothing else.
#[test]
fn model_store_runs_identically_to_the_memory_backend() {
    let all_delayed = SimConfig {
        delayed_share: 1.0,
        dedupe_share: 1.0,
        ..SimConfig::default()
    };
    let configs = [
        SimConfig::with_profile(Profile::Broad),
        SimConfig::with_profile(Profile::LeaseEdge),
        all_delayed,
    ];
    for memory in configs {
        let model = SimConfig {
            store: StoreKind::Model(None),
            ..memory.clone()
        };
        for seed in 0..40 {
            let a = run_seed_digest(&memory, seed).expect("memory passes");
            let b = run_seed_digest(&model, seed).expect("model passes");
            assert_eq!(
                a.digest, b.digest,
                "{:?} seed {seed} (delayed share {}): the runs diverge",
                memory.profile, memory.delayed_share
            );
        }
    }
    // And a flaw does change runs (the digest sees the difference).
    let correct = SimConfig::with_profile(Profile::LeaseEdge);
    let flawed = SimConfig {
        store: StoreKind::Model(Some(Flaw::AckIgnoresOwner)),
        ..correct.clone()
    };
    let differs = (0..100).any(|seed| {
        let a = run_seed_digest(&correct, seed).map(|r| r.digest);
        let b = run_seed_digest(&flawed, seed).map(|r| r.digest);
        a.ok() != b.ok()
    });
    assert!(differs);
}

fn sim(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold-sim"))
        .args(args)
        .output()
        .expect("the binary runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
    )
}

#[test]
fn the_printed_replay_command_reproduces_the_failure() {
    let (ok, out) = sim(&[
        "--seeds",
        "200",
        "--backend",
        "unfenced-ack",
        "--profile",
        "lease-edge",
        "--threads",
        "1",
    ]);
    assert!(!ok, "{out}");
    let line = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("replay: "))
        .expect("a replay line");
    let first = out
        .lines()
        .find(|l| l.contains("VIOLATES"))
        .unwrap()
        .to_string();
    let args: Vec<&str> = line
        .split_once(" -- ")
        .expect("cargo run ... -- args")
        .1
        .split_whitespace()
        .collect();
    let (ok, replayed) = sim(&args);
    assert!(!ok);
    assert!(replayed.contains(&first), "{first}\n---\n{replayed}");
}

#[test]
fn a_batch_prints_the_summary_table() {
    let (ok, out) = sim(&[
        "--seeds",
        "20",
        "--first",
        "5",
        "--replicas",
        "2",
        "--messages",
        "4",
    ]);
    assert!(ok, "{out}");
    for row in [
        "seeds run            20 (from 5; 2 replicas, 4 messages each)",
        "violations           0",
        "faults injected",
        "virtual time",
        "wall time",
    ] {
        assert!(out.contains(row), "missing {row:?} in\n{out}");
    }
}
