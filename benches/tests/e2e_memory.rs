//! The memory end-to-end benchmark runs on a small count and every leasehold round acks every
//! message. (Its figures are not asserted: they come from `cargo bench --bench e2e-memory`, not
//! from tests.)

use leasehold_benches::e2e::memory::{self as bench, BenchOptions};
use leasehold_benches::e2e::BenchError;

#[test]
fn bench_runs_interleaved_rounds() {
    let options = BenchOptions {
        messages: 2000,
        rounds: 2,
        concurrency: vec![1, 64],
        threads: None,
        progress: false,
        metrics: true,
    };
    let report = bench::run(&options).expect("the bench runs");
    assert_eq!(report.rows.len(), 2);
    for row in &report.rows {
        assert_eq!(row.baseline.len(), 2);
        assert_eq!(row.metered.len(), 2);
        assert!(row.metered_ratio().is_some_and(|r| r > 0.0));
        assert_eq!(row.leasehold.len(), 2);
        assert!(row.ratio() > 0.0);
        for calls in &row.calls {
            assert_eq!(calls.fetched, 2000, "each message fetched once: {calls:?}");
        }
    }
    let table = report.to_string();
    assert!(table.contains("| 64 |"), "{table}");
    let json = report.to_json();
    assert_eq!(json["bench"], "e2e-memory");
    assert_eq!(json["messages"], 2000);
    let rows = json["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), report.rows.len());
    for (row, json) in report.rows.iter().zip(rows) {
        assert_eq!(json["concurrency"], row.concurrency);
        assert_eq!(json["ratio"].as_f64(), Some(row.ratio()));
        assert_eq!(
            json["leasehold_msg_per_s"].as_f64(),
            Some(row.leasehold_median())
        );
        assert_eq!(
            json["rounds"]["baseline_msg_per_s"]
                .as_array()
                .map(Vec::len),
            Some(2)
        );
        assert_eq!(json["rounds"]["calls"][0]["fetched"], 2000);
    }
}

#[test]
fn bench_rejects_bad_options() {
    for options in [
        BenchOptions {
            messages: 0,
            ..BenchOptions::default()
        },
        BenchOptions {
            rounds: 0,
            ..BenchOptions::default()
        },
        BenchOptions {
            concurrency: vec![],
            ..BenchOptions::default()
        },
        BenchOptions {
            concurrency: vec![8, 0],
            ..BenchOptions::default()
        },
        BenchOptions {
            threads: Some(0),
            ..BenchOptions::default()
        },
    ] {
        assert!(matches!(bench::run(&options), Err(BenchError::Invalid(_))));
    }
}
