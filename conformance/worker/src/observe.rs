//! What operators see: the metrics add up to what happened, every class of event is logged at
//! its level with what explains it, the happy path is quiet, and no log line carries a payload.

use std::time::Duration;

use leasehold_memory::Bytes;
use leasehold_worker::core::{ErrorKind, LeaseRef, RenewResult};
use leasehold_worker::meters::{
    ACKS, BACKEND_ERRORS, DEAD_LETTERS, DELIVERIES, FETCH_RTT, HANDLER_DURATION, HELD, INVOCATIONS,
    LEASES_LOST, LEASE_MARGIN, RENEW_RTT, RUNNING,
};
use leasehold_worker::{Delivery, Outcome};

use crate::capture::{Logs, Metrics};
use crate::support::*;
use crate::TestRuntime;

/// A payload's bytes that must never reach a log line.
const SECRET: &str = "s3cr3t-payload";

/// A scripted run — three messages succeed, one fails once and then succeeds, one is rejected,
/// one cannot be decoded — and what it records: the counters equal what happened (and the
/// shutdown report), every invocation's duration is observed, the gauges end at zero; the
/// failure is logged at WARN with its error and the next delay, each dead letter with its
/// reason; a handler's own log line carries its message's span; no payload byte is logged.
pub async fn metrics_and_logs_account_for_every_message<T: TestRuntime>(rt: T) {
    let logs = Logs::capture();
    let metrics = Metrics::new();
    let stream = memory_stream(&rt.clock(), LONG_CLAIM);
    for message in ["ok-1", "ok-2", "ok-3", "flaky", "refuse"] {
        publish(&stream, &format!("{message} {SECRET}"));
    }
    stream.publish(Bytes::from(format!("\u{1}{SECRET}").into_bytes()));
    let handler = |d: Delivery<String>| async move {
        tracing::info!("the handler speaks");
        match d.message().split(' ').next() {
            Some("flaky") if d.delivery_count() == 1 => Outcome::Failed {
                error: "the flaky service timed out".into(),
            },
            Some("refuse") => Outcome::Reject {
                reason: "not for this worker".into(),
            },
            _ => Outcome::Done,
        }
    };
    let (probe, _) = probe(&stream, "w1");
    let worker = metrics.start(|| {
        builder(&rt, base_config().concurrency(2))
            .stream("obs", probe, handler)
            .start()
            .expect("valid worker")
    });
    wait_until(&rt, "the stream to drain", || stream.is_empty()).await;
    let report = worker.shutdown(LONG_CLAIM).await;
    assert_eq!((report.acked, report.dead_lettered), (4, 2), "{report:?}");

    let m = metrics.snapshot();
    let on = [("stream", "obs")];
    let outcome = |o: &'static str| m.counter(INVOCATIONS, &[("stream", "obs"), ("outcome", o)]);
    assert_eq!(
        m.counter(DELIVERIES, &on),
        7,
        "six messages, one delivered twice"
    );
    assert_eq!(m.counter(ACKS, &on), 4);
    assert_eq!(
        (outcome("done"), outcome("failed"), outcome("rejected")),
        (4, 1, 2)
    );
    assert_eq!(
        (outcome("retry"), outcome("pending"), outcome("cancelled")),
        (0, 0, 0)
    );
    let dead = |r: &'static str| m.counter(DEAD_LETTERS, &[("stream", "obs"), ("reason", r)]);
    assert_eq!((dead("rejected"), dead("max_deliveries")), (2, 0));
    assert_eq!(m.histogram(HANDLER_DURATION, &on).len(), 7);
    assert!(!m.histogram(FETCH_RTT, &on).is_empty());
    assert_eq!(m.gauge(RUNNING, &on), Some(0.0));
    assert_eq!(m.gauge(HELD, &on), Some(0.0));
    for name in [LEASES_LOST, BACKEND_ERRORS, RENEW_RTT] {
        assert!(m.names().iter().any(|n| n == name), "{name} is registered");
    }

    let failed = logs.with(&["WARN", "handler failed", "the flaky service timed out"]);
    assert_eq!(failed.len(), 1, "{:#?}", logs.lines());
    assert!(failed[0].contains("retry_in=20ms"), "{}", failed[0]);
    assert_eq!(
        logs.with(&["WARN", "dead-lettering", "not for this worker"])
            .len(),
        1
    );
    assert_eq!(logs.with(&["WARN", "dead-lettering", "decode"]).len(), 1);
    // The undecodable message never reaches the handler.
    let spoken = logs.with(&["the handler speaks"]);
    assert_eq!(spoken.len(), 6, "{spoken:#?}");
    assert!(
        spoken
            .iter()
            .all(|l| l.contains("invocation{stream=obs message_id=") && l.contains("attempt=")),
        "{spoken:#?}"
    );
    assert!(logs.at("ERROR").is_empty(), "{:#?}", logs.at("ERROR"));
    assert_no_payload(&logs);
}

/// A lease another consumer took over is counted as lost (`taken_over`) and logged at WARN
/// with the validity it still had; the cancelled invocation is counted as such.
pub async fn a_takeover_is_counted_and_logged_with_the_lease_margin<T: TestRuntime>(rt: T) {
    let logs = Logs::capture();
    let metrics = Metrics::new();
    let clock = rt.clock();
    let stream = memory_stream(&clock, SHORT_CLAIM);
    let id = publish(&stream, "victim");
    let thief = stream.consumer("thief").expect("fresh name");
    let gate = Gate::new();
    let handler = {
        let gate = gate.clone();
        move |d: Delivery<String>| {
            let gate = gate.clone();
            async move {
                gate.wait().await;
                d.cancelled().await;
                Outcome::Done
            }
        }
    };
    let (probe, _) = probe(&stream, "w1");
    let worker = metrics.start(|| {
        builder(&rt, base_config().claim_timeout(SHORT_CLAIM))
            .stream("obs", probe, handler)
            .start()
            .expect("valid worker")
    });
    wait_until(&rt, "the message to be taken", || {
        stream.pending_info(&id).is_some()
    })
    .await;
    gate.open();
    // The lease lapses on the backend (its clock runs ahead) and another consumer takes it,
    // while the worker still counts it valid: its next renew learns of the takeover.
    clock.jump(SHORT_CLAIM);
    let stolen = thief.fetch_now(1);
    assert_eq!(stolen.len(), 1);
    let lease_ref = LeaseRef::new(id.clone(), stolen[0].fence);
    wait_until(&rt, "the takeover to be noticed", || {
        assert_eq!(
            thief.renew_now(std::slice::from_ref(&lease_ref)),
            [RenewResult::Kept]
        );
        !logs.with(&["lease lost"]).is_empty()
    })
    .await;
    let report = worker.shutdown(LONG_CLAIM).await;
    assert_eq!((report.lost, report.cancelled), (1, 1), "{report:?}");

    let m = metrics.snapshot();
    let lost = |r: &'static str| m.counter(LEASES_LOST, &[("stream", "obs"), ("reason", r)]);
    assert_eq!(
        (lost("taken_over"), lost("expired"), lost("lost_at_settle")),
        (1, 0, 0)
    );
    assert_eq!(
        m.counter(INVOCATIONS, &[("stream", "obs"), ("outcome", "cancelled")]),
        1
    );
    let margins = m.histogram(LEASE_MARGIN, &[("stream", "obs")]);
    assert!(
        margins
            .iter()
            .all(|&m| m > 0.0 && m < SHORT_CLAIM.as_secs_f64()),
        "{margins:?}"
    );
    let line = logs.with(&["WARN", "lease lost", "reason=\"taken_over\""]);
    assert_eq!(line.len(), 1, "{:#?}", logs.lines());
    assert!(
        line[0].contains("margin=") && !line[0].contains("margin=0ns"),
        "{}",
        line[0]
    );
    assert!(line[0].contains(&format!("message_id={id}")), "{}", line[0]);
    assert_no_payload(&logs);
}

/// Messages that all succeed, then a clean shutdown: nothing is logged above DEBUG but the
/// shutdown report (INFO), and nothing at WARN or ERROR.
pub async fn the_happy_path_logs_nothing_above_debug<T: TestRuntime>(rt: T) {
    let logs = Logs::capture();
    let stream = memory_stream(&rt.clock(), LONG_CLAIM);
    for i in 0..20 {
        publish(&stream, &format!("job {i} {SECRET}"));
    }
    let (probe, _) = probe(&stream, "w1");
    let worker = builder(&rt, base_config().concurrency(4))
        .stream("quiet", probe, |_: Delivery<String>| async {})
        .start()
        .expect("valid worker");
    wait_until(&rt, "the stream to drain", || stream.is_empty()).await;
    let report = worker.shutdown(LONG_CLAIM).await;
    assert_eq!(report.acked, 20);
    let loud = logs.above_debug();
    assert_eq!(loud.len(), 1, "only the shutdown report: {loud:#?}");
    assert!(
        loud[0].starts_with("INFO") && loud[0].contains("worker shut down"),
        "{loud:#?}"
    );
    assert!(loud[0].contains("acked=20"), "{}", loud[0]);
    assert_no_payload(&logs);
}

/// A backend outage: every failed call is counted by op and kind, but the log gets one line
/// per stream and call per interval (with how many were not logged), not one per failure; a
/// fatal error is logged at ERROR once, halts the stream and stops the worker.
pub async fn an_outage_is_counted_in_full_but_logged_sparingly<T: TestRuntime>(rt: T) {
    let logs = Logs::capture();
    let metrics = Metrics::new();
    let stream = memory_stream(&rt.clock(), LONG_CLAIM);
    let (probe, taps) = probe(&stream, "w1");
    taps.fail_fetches(Some(ErrorKind::Transient));
    let worker = metrics.start(|| {
        builder(
            &rt,
            base_config().fetch_backoff_max(Duration::from_millis(40)),
        )
        .stream("obs", probe, |_: Delivery<String>| async {})
        .start()
        .expect("valid worker")
    });
    wait_until(&rt, "ten failed fetches", || taps.failed_fetches() >= 10).await;
    taps.fail_fetches(Some(ErrorKind::Fatal));
    assert!(worker.closed().await.is_stopped());
    let failures = taps.failed_fetches() as u64;
    let report = worker.shutdown(LONG_CLAIM).await;
    assert_eq!(report.halted.len(), 1);

    let m = metrics.snapshot();
    let errors = |kind: &'static str| {
        m.counter(
            BACKEND_ERRORS,
            &[("stream", "obs"), ("op", "fetch"), ("kind", kind)],
        )
    };
    assert_eq!(errors("fatal"), 1);
    assert_eq!(errors("transient") + errors("fatal"), failures);
    let warned = logs.with(&["WARN", "backend call failed"]);
    assert!(
        !warned.is_empty() && (warned.len() as u64) < failures / 2,
        "{} lines for {failures} failures: {warned:#?}",
        warned.len()
    );
    assert_eq!(
        logs.with(&["ERROR", "backend call failed fatally"]).len(),
        1
    );
    assert_eq!(logs.with(&["ERROR", "stream halted", "NOPERM"]).len(), 1);
    assert_eq!(worker_health_lines(&logs), 1);
}

/// The shutdown report of a worker that halted is a WARN (an operator must look).
fn worker_health_lines(logs: &Logs) -> usize {
    logs.with(&["WARN", "worker shut down", "halted=1"]).len()
}

fn assert_no_payload(logs: &Logs) {
    let leaked = logs.with(&[SECRET]);
    assert!(leaked.is_empty(), "payload bytes in the log: {leaked:#?}");
}

/// `snapshot()` is the live picture per stream: what runs, what is held and waiting, which
/// stream halted and why; it adds up to the engine's totals.
pub async fn a_snapshot_shows_what_runs_and_what_halted<T: TestRuntime>(rt: T) {
    let busy_stream = memory_stream(&rt.clock(), LONG_CLAIM);
    let sick_stream = memory_stream(&rt.clock(), LONG_CLAIM);
    let (busy, _) = probe(&busy_stream, "w1");
    let (sick, sick_taps) = probe(&sick_stream, "w1");
    for i in 0..3 {
        publish(&busy_stream, &format!("job {i}"));
    }
    let gate = Gate::new();
    let handler = {
        let gate = gate.clone();
        move |_: Delivery<String>| {
            let gate = gate.clone();
            async move { gate.wait().await }
        }
    };
    sick_taps.fail_fetches(Some(ErrorKind::Fatal));
    let worker = builder(&rt, base_config().concurrency(2).prefetch(1))
        .stream("busy", busy, handler.clone())
        .stream("sick", sick, handler)
        .start()
        .expect("valid worker");
    let deadline = rt.now() + PATIENCE;
    let snapshot = loop {
        let snapshot = worker.snapshot().await.expect("the worker runs");
        let [busy, sick] = snapshot.streams.as_slice() else {
            panic!("two streams: {snapshot:?}")
        };
        if busy.running == 2 && busy.waiting == 1 && sick.halted.is_some() {
            break snapshot;
        }
        assert!(
            rt.now() < deadline,
            "two running, one waiting, one stream halted: {snapshot:?}"
        );
        rt.sleep(STEP).await;
    };
    let [busy, sick] = snapshot.streams.as_slice() else {
        panic!("two streams: {snapshot:?}")
    };
    assert_eq!(
        (busy.stream.as_str(), busy.held, busy.halted.as_deref()),
        ("busy", 3, None)
    );
    assert_eq!(
        (sick.stream.as_str(), sick.held, sick.running),
        ("sick", 0, 0)
    );
    assert!(
        sick.halted.as_deref().is_some_and(|e| e.contains("NOPERM")),
        "{sick:?}"
    );
    assert_eq!((snapshot.running(), snapshot.held()), (2, 3));
    assert_eq!(snapshot.stats.halted, 1);
    gate.open();
    wait_until(&rt, "the busy stream to drain", || busy_stream.is_empty()).await;
    let report = worker.shutdown(LONG_CLAIM).await;
    assert_eq!(report.acked, 3);
}
