//! The producer benchmark runs every row on small counts against its own redis-server: every
//! round publishes, and every worker acks, every message, and each row has both sides. (Its
//! figures are not asserted: they are for people.)

use std::time::Duration;

use leasehold_benches::e2e::producer::{self as bench, Kind, ProducerBenchOptions};
use leasehold_benches::e2e::BenchError;

fn small() -> ProducerBenchOptions {
    ProducerBenchOptions {
        messages: 300,
        batch: vec![10, 100],
        single: 50,
        rounds: 1,
        due_messages: 20,
        due_spread: Duration::from_millis(200),
        due_poll: vec![Duration::from_secs(1)],
        due_rounds: 1,
        block_probes: 3,
        ..ProducerBenchOptions::default()
    }
}

#[test]
fn producer_bench_runs_every_row() {
    let report = bench::run(&small()).expect("the producer bench runs");
    let kinds: Vec<Kind> = report.throughput.iter().map(|t| t.kind).collect();
    assert_eq!(
        kinds,
        [
            Kind::Batch(10),
            Kind::Batch(100),
            Kind::Single,
            Kind::Delayed
        ]
    );
    for t in &report.throughput {
        for side in [&t.baseline, &t.subject] {
            assert_eq!(side.rates.len(), 1, "{side:?}");
            assert!(side.median() > 0.0, "{side:?}");
            assert!(side.server_cpu_median().is_some(), "{side:?}");
        }
        assert!(t.ratio() > 0.0);
        assert_eq!(t.round_ratios().len(), 1);
        match t.kind {
            // Every message is one XADD, raw or not.
            Kind::Batch(_) | Kind::Single => {
                for side in [&t.baseline, &t.subject] {
                    assert_eq!(side.commands[0].xadd, 1.0, "{side:?}");
                }
            }
            // The delayed side's messages enter the stream in the fetches' promotions.
            Kind::Delayed => {
                assert_eq!(t.baseline.commands[0].xadd, 0.0, "{t:?}");
                assert_eq!(t.subject.commands[0].xadd, 1.0, "{t:?}");
                for side in [&t.baseline, &t.subject] {
                    assert_eq!(side.calls.len(), 1);
                    assert_eq!(side.calls[0].fetched, 300, "{side:?}");
                }
            }
        }
    }
    assert_eq!(report.accuracy.len(), 1);
    let accuracy = &report.accuracy[0];
    for side in [&accuracy.plain, &accuracy.delayed] {
        assert_eq!(side.rounds.len(), 1);
        assert_eq!(side.rounds[0].len(), 20);
        assert!(side.rounds[0].iter().all(|ms| ms.is_finite()), "{side:?}");
        // Never handled before its due time, give or take Redis's whole milliseconds.
        assert!(side.median_of(0.0) > -2.0, "{side:?}");
    }
    assert_eq!(report.block_overshoot_ms.len(), 3);
    assert!(report.hz.is_some());

    let table = report.to_string();
    for row in [
        "| 1 | publish_batch, batch 10 |",
        "| 2 | single publish |",
        "| 4 |",
    ] {
        assert!(table.contains(row), "no {row}: {table}");
    }
    assert!(
        table.contains("300 due delayed messages consumed"),
        "{table}"
    );
    assert!(table.contains("diagnostic: Redis's own wake-up"), "{table}");
    let json = report.to_json();
    assert_eq!(json["bench"], "producer");
    assert_eq!(json["throughput"].as_array().map(Vec::len), Some(4));
    assert_eq!(json["throughput"][0]["batch"], 10);
    assert_eq!(json["throughput"][2]["batch"], serde_json::Value::Null);
    assert_eq!(json["accuracy"][0]["poll_interval_ms"], 1000.0);
    assert!(json["accuracy"][0]["met"].is_boolean());
}

#[test]
fn producer_bench_runs_chosen_rows_only() {
    let report = bench::run(&ProducerBenchOptions {
        rows: vec![2],
        ..small()
    })
    .expect("row 2 runs");
    assert_eq!(report.throughput.len(), 1);
    assert_eq!(report.throughput[0].kind, Kind::Single);
    assert!(report.accuracy.is_empty() && report.block_overshoot_ms.is_empty());
    assert!(!report.to_string().contains("| 4 |"));
}

#[test]
fn producer_bench_rejects_bad_options() {
    for options in [
        ProducerBenchOptions {
            rows: vec![5],
            ..small()
        },
        ProducerBenchOptions {
            rows: vec![],
            ..small()
        },
        ProducerBenchOptions {
            messages: 0,
            ..small()
        },
        ProducerBenchOptions {
            batch: vec![10, 0],
            ..small()
        },
        ProducerBenchOptions {
            due_poll: vec![Duration::ZERO],
            ..small()
        },
        ProducerBenchOptions {
            due_rounds: 0,
            ..small()
        },
        ProducerBenchOptions {
            threads: Some(0),
            ..small()
        },
    ] {
        assert!(matches!(bench::run(&options), Err(BenchError::Invalid(_))));
    }
}
