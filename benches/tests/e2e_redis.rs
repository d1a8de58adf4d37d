//! The Redis end-to-end benchmark runs on a small count against its own redis-server, and every
//! round processes every message. (Its figures are not asserted: they are for people.)

use leasehold_benches::e2e::redis::{self as bench_redis, RedisBenchOptions, Variant};
use leasehold_benches::e2e::BenchError;
use leasehold_redis::FenceCheck;

/// Every CPU figure present is finite and not negative; the server's is always readable.
fn assert_cpu(variant: &Variant) {
    for &us in variant.server_cpu_us.iter().chain(&variant.client_cpu_us) {
        assert!(us.is_finite() && us >= 0.0, "{variant:?}");
    }
    assert!(
        variant.server_cpu_us.len() <= variant.rates.len(),
        "{variant:?}"
    );
    assert!(
        variant.client_cpu_us.len() <= variant.rates.len(),
        "{variant:?}"
    );
    assert!(
        variant.server_cpu_median().is_some(),
        "INFO cpu is read every round: {variant:?}"
    );
    if cfg!(target_os = "linux") {
        assert!(variant.client_cpu_median().is_some(), "{variant:?}");
    }
}

#[test]
fn bench_redis_runs_one_small_round() {
    let options = RedisBenchOptions {
        messages: 200,
        rounds: 1,
        concurrency: vec![1, 100],
        prefetch: vec![0, 50],
        threads: None,
        progress: false,
        metrics: true,
        long: false,
        slow: true,
        fence_check: FenceCheck::Tenure,
    };
    let report = bench_redis::run(&options).expect("the redis bench runs");
    let metered: Vec<(usize, usize)> = report.metered.iter().map(|(key, _)| *key).collect();
    assert_eq!(metered, [(1, 0), (1, 50), (100, 0), (100, 50)]);
    assert!(report.metered_ratio(100, 0).is_some_and(|r| r > 0.0));
    assert_eq!(report.raw.rates.len(), 1);
    assert!(report.raw.calls.is_empty());
    assert_cpu(&report.raw);
    let keys: Vec<(usize, usize)> = report.no_op.iter().map(|(key, _)| *key).collect();
    assert_eq!(keys, [(1, 0), (1, 50), (100, 0), (100, 50)]);
    for ((concurrency, prefetch), variant) in &report.no_op {
        assert_eq!(
            variant.name,
            format!("leasehold no-op, c={concurrency}, prefetch {prefetch}")
        );
        assert_eq!(variant.rates.len(), 1);
        assert_eq!(variant.calls.len(), 1);
        for calls in &variant.calls {
            assert_eq!(calls.fetched, 200, "each message fetched once: {calls:?}");
        }
        assert_cpu(variant);
        assert!(report
            .ratio(*concurrency, *prefetch)
            .is_some_and(|r| r > 0.0));
    }
    assert_eq!(report.ratio(100, 1000), None);
    // Deleting on ack, beside the default retention, at c=100 and the first prefetch.
    let [((100, 0), deleting)] = report.deleting.as_slice() else {
        panic!("one delete-on-ack variant: {:?}", report.deleting)
    };
    assert_eq!(
        deleting.name,
        "leasehold no-op, c=100, prefetch 0, delete on ack"
    );
    assert_eq!(deleting.calls[0].fetched, 200, "{deleting:?}");
    assert!(report.retention_ratio().is_some_and(|r| r > 0.0));
    let prefetches: Vec<usize> = report.slow.iter().map(|(p, _)| *p).collect();
    assert_eq!(prefetches, [0, 50]);
    for (prefetch, variant) in &report.slow {
        assert_eq!(
            variant.name,
            format!("leasehold 10 ms, c=1000, prefetch {prefetch}")
        );
        assert_eq!(variant.rates.len(), 1);
        for calls in &variant.calls {
            assert_eq!(calls.fetched, 200, "each message fetched once: {calls:?}");
        }
        assert_cpu(variant);
        assert!(report.slow_ratio(*prefetch).is_some_and(|r| r > 0.0));
    }
    // The runtime's own rate for the 10 ms handler, measured alongside, below the ideal.
    let sleep_loop = report
        .sleep_loop
        .as_ref()
        .expect("measured with the 10 ms rows");
    assert_eq!(sleep_loop.rates.len(), 1);
    assert!(sleep_loop.median() > 0.0, "{sleep_loop:?}");
    for (prefetch, _) in &report.slow {
        assert!(report
            .slow_to_sleep_loop(*prefetch)
            .is_some_and(|r| r > 0.0));
    }
    // 10 000 leases, 1000 ids per script: 10 script calls per heartbeat tick.
    assert!(!report.renew_ms.is_empty());
    assert!(
        report.renew_scripts.iter().all(|&n| n == 10.0),
        "{report:?}"
    );
    assert!(report.rss.during_kb > 0, "{report:?}");
    let table = report.to_string();
    assert!(table.contains("raw XREADGROUP loop"), "{table}");
    assert!(table.contains("server CPU µs/msg"), "{table}");
    assert!(table.contains("client CPU µs/msg"), "{table}");
    let leasehold = report.no_op.iter().chain(&report.deleting).map(|(_, v)| v);
    for variant in leasehold.chain(report.slow.iter().map(|(_, v)| v)) {
        let row = table
            .lines()
            .find(|line| line.starts_with(&format!("| {} |", variant.name)))
            .unwrap_or_else(|| panic!("no row for {}: {table}", variant.name));
        assert_eq!(row.matches('|').count(), 12, "11 columns: {row}");
    }
    // The target verdict on every c=100 row, the 10 ms verdict on every 10 ms row.
    let verdicts = |prefix: &str, target: &str| {
        table
            .lines()
            .filter(|line| line.starts_with(prefix))
            .filter(|line| line.contains(target))
            .count()
    };
    assert_eq!(
        verdicts("| leasehold no-op, c=100,", "≥ 0.7 × raw"),
        2,
        "{table}"
    );
    assert_eq!(
        verdicts("| leasehold no-op, c=1,", "≥ 0.7 × raw"),
        0,
        "{table}"
    );
    assert_eq!(verdicts("| leasehold 10 ms,", "≥ 0.8 ×"), 2, "{table}");

    let json = report.to_json();
    assert_eq!(json["bench"], "e2e-redis");
    assert_eq!(json["raw"]["name"], "raw XREADGROUP loop");
    assert_eq!(json["raw"]["msg_per_s"].as_f64(), Some(report.raw.median()));
    let deleting = json["delete_on_ack"].as_array().expect("delete_on_ack");
    assert_eq!(deleting.len(), 1);
    assert_eq!(
        deleting[0]["default_retention_ratio"].as_f64(),
        report.retention_ratio()
    );
    let no_op = json["no_op"].as_array().expect("no_op");
    assert_eq!(no_op.len(), 4);
    for ((key, variant), json) in report.no_op.iter().zip(no_op) {
        assert_eq!(json["name"], variant.name.as_str());
        assert_eq!(
            (&json["concurrency"], &json["prefetch"]),
            (&key.0.into(), &key.1.into())
        );
        assert_eq!(json["ratio_to_raw"].as_f64(), report.ratio(key.0, key.1));
        assert_eq!(json["met"].is_boolean(), key.0 == 100, "{json}");
    }
    let slow = json["slow"].as_array().expect("slow");
    assert_eq!(slow.len(), 2);
    for ((prefetch, _), json) in report.slow.iter().zip(slow) {
        assert_eq!(
            json["ratio_to_ideal"].as_f64(),
            report.slow_ratio(*prefetch)
        );
        assert_eq!(
            json["ratio_to_sleep_loop"].as_f64(),
            report.slow_to_sleep_loop(*prefetch)
        );
        assert!(json["met"].is_boolean(), "{json}");
    }
    assert_eq!(
        json["sleep_loop"]["msg_per_s"].as_f64(),
        Some(sleep_loop.median())
    );
    assert_eq!(json["heartbeat"]["script_calls_per_tick"], 10.0);
    assert_eq!(json["rss"]["during_kb"], report.rss.during_kb);
}

#[test]
fn bench_redis_rejects_bad_options() {
    for options in [
        RedisBenchOptions {
            messages: 0,
            ..RedisBenchOptions::default()
        },
        RedisBenchOptions {
            rounds: 0,
            ..RedisBenchOptions::default()
        },
        RedisBenchOptions {
            concurrency: vec![8, 0],
            ..RedisBenchOptions::default()
        },
        RedisBenchOptions {
            prefetch: vec![],
            ..RedisBenchOptions::default()
        },
        RedisBenchOptions {
            threads: Some(0),
            ..RedisBenchOptions::default()
        },
    ] {
        assert!(matches!(
            bench_redis::run(&options),
            Err(BenchError::Invalid(_))
        ));
    }
}
