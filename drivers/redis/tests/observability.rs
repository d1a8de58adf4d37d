//! What operators see of a worker on a real, throwaway `redis-server` (password-protected):
//! metrics that add up to what Redis recorded — deliveries, outcomes, dead letters (the ones the
//! backend makes by itself for entries without a payload included), a lease lost to a peer's
//! takeover, pickup delay from the entry ids' times — and log lines that explain each, without
//! the password or a payload byte.
//!
//! One runtime thread, so the log capture (the thread's subscriber) sees the worker's lines.

use std::time::{Duration, Instant};

use leasehold_redis::{RedisBackend, RedisConfig};
use leasehold_redis_harness::{RedisServer, Reply};
use leasehold_tokio::TokioRuntime;
use leasehold_worker::meters::{
    ACKS, DEAD_LETTERS, DELIVERIES, FETCH_RTT, INVOCATIONS, LEASES_LOST, LEASE_MARGIN,
    PICKUP_DELAY, RENEW_RTT,
};
use leasehold_worker::{Config, Delivery, Outcome, WorkerBuilder};
use leasehold_worker_suite::capture::{Logs, Metrics};

const PASSWORD: &str = "hunter2-observed";
const SECRET: &str = "s3cr3t-payload";
const STREAM: &str = "jobs";
const GROUP: &str = "workers";
const CLAIM: Duration = Duration::from_secs(1);
const PATIENCE: Duration = Duration::from_secs(15);

fn run<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(future)
}

fn cmd(server: &RedisServer, args: &[&str]) -> Reply {
    server.command(args).expect("the test server answers")
}

fn len(server: &RedisServer, key: &str) -> i64 {
    match cmd(server, &["XLEN", key]) {
        Reply::Integer(n) => n,
        other => panic!("XLEN {key}: {other:?}"),
    }
}

/// How many entries the group holds pending.
fn pending_count(server: &RedisServer) -> i64 {
    match cmd(server, &["XPENDING", STREAM, GROUP]) {
        Reply::Array(Some(summary)) => match summary.first() {
            Some(Reply::Integer(n)) => *n,
            other => panic!("XPENDING summary: {other:?}"),
        },
        other => panic!("XPENDING summary: {other:?}"),
    }
}

/// The only pending entry: its id and idle time in milliseconds.
fn pending(server: &RedisServer) -> (String, i64) {
    let Reply::Array(Some(rows)) = cmd(server, &["XPENDING", STREAM, GROUP, "-", "+", "10"]) else {
        panic!("XPENDING answers an array");
    };
    let [Reply::Array(Some(row))] = rows.as_slice() else {
        panic!("one pending entry: {rows:?}");
    };
    match (&row[0], &row[2]) {
        (Reply::Bulk(Some(id)), Reply::Integer(idle)) => {
            (String::from_utf8(id.clone()).expect("an id"), *idle)
        }
        other => panic!("{other:?}"),
    }
}

async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !done() {
        assert!(Instant::now() < deadline, "gave up waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[test]
fn metrics_and_logs_account_for_a_run_on_redis() {
    let server = RedisServer::builder()
        .password(PASSWORD)
        .start()
        .unwrap_or_else(|e| panic!("this test needs redis-server: {e}"));
    run(async {
        let logs = Logs::capture();
        let metrics = Metrics::new();
        let backend = RedisBackend::connect(
            RedisConfig::new(server.url(), STREAM, GROUP)
                .consumer("a")
                .claim_timeout(CLAIM),
        )
        .await
        .expect("connecting with the password");
        for message in ["ok-1", "ok-2", "ok-3", "refuse", "hold"] {
            let json = format!("\"{message} {SECRET}\"");
            cmd(&server, &["XADD", STREAM, "*", "data", &json]);
        }
        cmd(&server, &["XADD", STREAM, "*", "other", SECRET]);
        let handler = |d: Delivery<String>| async move {
            match d.message().split(' ').next() {
                Some("refuse") => Outcome::Reject {
                    reason: "not for this worker".into(),
                },
                Some("hold") => {
                    d.cancelled().await;
                    Outcome::Done
                }
                _ => Outcome::Done,
            }
        };
        let config = Config::default()
            .claim_timeout(CLAIM)
            .heartbeat_interval(Duration::from_millis(300))
            .poll_interval(Duration::from_millis(50))
            .concurrency(4)
            .cancel_grace(Duration::from_millis(50));
        let worker = metrics.start(|| {
            WorkerBuilder::new(TokioRuntime::current())
                .config(config)
                .stream(STREAM, backend, handler)
                .start()
                .expect("valid worker")
        });

        // Everything but "hold" is settled (only it is pending, both dead letters written);
        // "hold" runs until a peer takes it over.
        let dead_stream = format!("{{{STREAM}}}:dead");
        wait_until("all but the held message settled", || {
            pending_count(&server) == 1 && len(&server, &dead_stream) == 2
        })
        .await;
        let (held, _) = pending(&server);
        // One of the worker's renews lands first (the entry's idle time drops), so a lease
        // margin is measured before the takeover.
        let mut longest = 0;
        wait_until("a renew of the held message", || {
            let (_, idle) = pending(&server);
            longest = longest.max(idle);
            idle < longest
        })
        .await;
        cmd(&server, &["XCLAIM", STREAM, GROUP, "peer", "0", &held]);
        wait_until("the takeover to be noticed", || {
            // The peer is alive: it keeps its claim fresh.
            cmd(
                &server,
                &["XCLAIM", STREAM, GROUP, "peer", "0", &held, "JUSTID"],
            );
            !logs.with(&["lease lost"]).is_empty()
        })
        .await;
        let report = worker.shutdown(Duration::from_secs(2)).await;
        assert_eq!(len(&server, &dead_stream), 2);
        assert_eq!(
            (report.acked, report.dead_lettered, report.lost),
            (3, 2, 1),
            "the report counts the backend's own dead letter too: {report:?}"
        );

        let m = metrics.snapshot();
        let on = [("stream", STREAM)];
        let outcome =
            |o: &'static str| m.counter(INVOCATIONS, &[("stream", STREAM), ("outcome", o)]);
        assert_eq!(
            m.counter(DELIVERIES, &on),
            5,
            "the entry without payload is not delivered"
        );
        assert_eq!(m.counter(ACKS, &on), 3);
        assert_eq!(
            (outcome("done"), outcome("rejected"), outcome("cancelled")),
            (3, 1, 1)
        );
        let dead = |r: &'static str| m.counter(DEAD_LETTERS, &[("stream", STREAM), ("reason", r)]);
        assert_eq!((dead("rejected"), dead("undeliverable")), (1, 1));
        assert_eq!(
            m.counter(LEASES_LOST, &[("stream", STREAM), ("reason", "taken_over")]),
            1
        );
        let pickup = m.histogram(PICKUP_DELAY, &on);
        assert_eq!(
            pickup.len(),
            5,
            "Redis ids carry the enqueue time: {pickup:?}"
        );
        assert!(
            pickup.iter().all(|&s| (0.0..60.0).contains(&s)),
            "{pickup:?}"
        );
        for name in [FETCH_RTT, RENEW_RTT, LEASE_MARGIN] {
            assert!(
                !m.histogram(name, &on).is_empty(),
                "{name} recorded nothing"
            );
        }

        assert_eq!(
            logs.with(&["WARN", "lease lost", "reason=\"taken_over\"", &held])
                .len(),
            1,
            "{:#?}",
            logs.lines()
        );
        assert_eq!(
            logs.with(&["WARN", "dead-lettering", "not for this worker"])
                .len(),
            1
        );
        assert_eq!(
            logs.with(&["WARN", "the backend dead-lettered", "no field"])
                .len(),
            1
        );
        let leaked = logs.with(&[PASSWORD]);
        assert!(leaked.is_empty(), "the password in the log: {leaked:#?}");
        let leaked = logs.with(&[SECRET]);
        assert!(leaked.is_empty(), "payload bytes in the log: {leaked:#?}");
    });
}

#[test]
fn a_wrong_password_is_reported_without_repeating_it() {
    let server = RedisServer::builder()
        .password(PASSWORD)
        .start()
        .unwrap_or_else(|e| panic!("this test needs redis-server: {e}"));
    run(async {
        let logs = Logs::capture();
        let url = format!("redis://:wrong-{PASSWORD}@127.0.0.1:{}/", server.port());
        let error = RedisBackend::connect(RedisConfig::new(url, STREAM, GROUP))
            .await
            .expect_err("the password is wrong");
        let text = format!("{error} {error:?}");
        assert!(!text.contains(PASSWORD), "{text}");
        assert!(logs.with(&[PASSWORD]).is_empty(), "{:#?}", logs.lines());
    });
}
