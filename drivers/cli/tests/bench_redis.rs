//! `leasehold bench-redis` runs end to end on a small count against its own redis-server, and
//! every round processes every message. (Its figures are not asserted: they are for people.)

use leasehold_cli::bench_redis::{self, RedisBenchOptions};
use leasehold_cli::CliError;

#[test]
fn bench_redis_runs_one_small_round() {
    let options = RedisBenchOptions {
        messages: 200,
        rounds: 1,
        concurrency: vec![1, 100],
        threads: None,
        progress: false,
    };
    let report = bench_redis::run(&options).expect("the redis bench runs");
    assert_eq!(report.raw.rates.len(), 1);
    assert_eq!(report.no_op.len(), 2);
    for (_, variant) in &report.no_op {
        assert_eq!(variant.rates.len(), 1);
        for calls in &variant.calls {
            assert_eq!(calls.fetched, 200, "each message fetched once: {calls:?}");
        }
    }
    assert_eq!(report.slow.rates.len(), 1);
    assert!(report.ratio(100).is_some_and(|r| r > 0.0));
    // 10 000 leases, 1000 ids per script: 10 script calls per heartbeat tick.
    assert!(!report.renew_ms.is_empty());
    assert!(
        report.renew_scripts.iter().all(|&n| n == 10.0),
        "{report:?}"
    );
    assert!(report.rss.during_kb > 0, "{report:?}");
    let table = report.to_string();
    assert!(table.contains("raw XREADGROUP loop"), "{table}");
    assert!(table.contains("leasehold no-op, c=100"), "{table}");
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
            threads: Some(0),
            ..RedisBenchOptions::default()
        },
    ] {
        assert!(matches!(
            bench_redis::run(&options),
            Err(CliError::Invalid(_))
        ));
    }
}
