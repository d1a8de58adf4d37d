//! The pickup benchmark runs on a small count against its own redis-server: every message of
//! every round is handled on both sides, and the command counts say how each consumer waits.
//! (Its latencies are not asserted: they are for people.)

use leasehold_benches::e2e::pickup::{self, PickupOptions};

#[test]
fn bench_pickup_runs_one_small_round() {
    let options = PickupOptions {
        messages: 40,
        rate: 1000,
        concurrency: 10,
        rounds: 2,
        threads: None,
        progress: false,
    };
    let report = pickup::run(&options).expect("the pickup bench runs");
    assert_eq!(report.raw.rounds.len(), 2);
    assert_eq!(report.leasehold.rounds.len(), 2);
    for round in report.raw.rounds.iter().chain(&report.leasehold.rounds) {
        assert!(
            round.p50_us > 0.0 && round.p50_us <= round.p99_us,
            "{round:?}"
        );
        assert!(round.p99_us <= round.max_us, "{round:?}");
    }
    // The raw consumer: XREADGROUP and XACK, at most one each per message (fewer when a read
    // finds several), nothing else.
    for round in &report.raw.rounds {
        assert!(round.commands_per_msg <= 2.0 + 1e-9, "{round:?}");
        assert!(
            round
                .by_command
                .iter()
                .all(|(name, _)| name == "xreadgroup" || name == "xack"),
            "{round:?}"
        );
    }
    // leasehold waits in XREADGROUP (consuming), never in a non-consuming XREAD.
    for round in &report.leasehold.rounds {
        let xread = round.by_command.iter().find(|(name, _)| name == "xread");
        assert!(xread.is_none(), "{round:?}");
    }
    let json = report.to_json();
    assert_eq!(json["bench"], "pickup");
    assert_eq!(
        json["leasehold"]["rounds"].as_array().map(Vec::len),
        Some(2)
    );
    assert!(report.to_string().contains("p99 leasehold / raw"));
}
