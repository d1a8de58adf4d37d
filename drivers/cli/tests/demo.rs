//! The demo, in-process and small: no message runs twice at once, none is lost, on both
//! runtimes. (The figures it prints are for people; here only its promises are checked.)

use std::time::Duration;

use leasehold_cli::demo::{self, DemoOptions, Work, MAX_DELIVERIES};
use leasehold_cli::{CliError, RuntimeKind};

fn small(runtime: RuntimeKind) -> DemoOptions {
    DemoOptions {
        workers: 3,
        concurrency: 4,
        messages: 300,
        runtime,
        rate: 0,
        timeout: Duration::from_secs(60),
        ..DemoOptions::default()
    }
}

fn check(options: &DemoOptions) {
    let report = demo::run(options).expect("the demo starts");
    assert!(report.passed(), "{report}");
    assert_eq!(report.duplicates, 0, "{report}");
    assert_eq!(report.unsettled, 0, "{report}");
    assert_eq!(report.published, options.messages);
    // Every poison message was dead-lettered, and nothing else.
    let poison = demo::workload(options.messages, options.seed)
        .iter()
        .filter(|w| **w == Work::Poison)
        .count();
    assert!(poison > 0, "the workload has poison messages");
    assert_eq!(report.dead_lettered, poison, "{report}");
    assert_eq!(report.acked + report.dead_lettered, options.messages);
    // The workers' own counters agree with what the handlers saw.
    assert_eq!(report.shutdown.acked, report.acked as u64, "{report}");
    assert_eq!(report.shutdown.dead_lettered, poison as u64, "{report}");
    assert_eq!(report.engine.invocations, report.invocations, "{report}");
    // Pending messages were re-invoked, failing ones retried.
    assert!(report.reinvocations > 0, "{report}");
    assert!(
        report.retries >= poison as u64 * u64::from(MAX_DELIVERIES - 1),
        "{report}"
    );
    let summary = report.to_string();
    assert!(summary.contains("duplicates observed"), "{summary}");
    assert!(summary.contains("OK:"), "{summary}");
}

#[test]
fn demo_on_tokio_loses_nothing_and_runs_nothing_twice() {
    check(&small(RuntimeKind::Tokio));
}

#[test]
fn demo_on_smol_loses_nothing_and_runs_nothing_twice() {
    check(&small(RuntimeKind::Smol));
}

/// With the dashboard served over its stream, on either runtime (it runs on a thread of its
/// own, so it never blocks theirs).
#[test]
fn demo_with_its_dashboard_on_both_runtimes() {
    for runtime in [RuntimeKind::Tokio, RuntimeKind::Smol] {
        check(&DemoOptions {
            dashboard: Some("127.0.0.1:0".parse().unwrap()),
            ..small(runtime)
        });
    }
}

#[test]
fn a_dashboard_that_cannot_bind_is_an_error_not_a_panic() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let options = DemoOptions {
        dashboard: Some(taken.local_addr().unwrap()),
        ..small(RuntimeKind::Tokio)
    };
    match demo::run(&options) {
        Err(CliError::Invalid(message)) => assert!(message.contains("cannot serve"), "{message}"),
        other => panic!("expected an error: {other:?}"),
    }
}

#[test]
fn demo_paced_publishing_with_one_worker() {
    check(&DemoOptions {
        workers: 1,
        rate: 2000,
        ..small(RuntimeKind::Tokio)
    });
}

#[test]
fn bad_options_are_errors_not_panics() {
    let bad = [
        DemoOptions {
            workers: 0,
            ..DemoOptions::default()
        },
        DemoOptions {
            concurrency: 0,
            ..DemoOptions::default()
        },
        DemoOptions {
            messages: 0,
            ..DemoOptions::default()
        },
        DemoOptions {
            claim_timeout: Duration::ZERO,
            ..DemoOptions::default()
        },
        DemoOptions {
            poll_interval: Duration::ZERO,
            ..DemoOptions::default()
        },
    ];
    for options in bad {
        let error = demo::run(&options).expect_err("invalid options");
        assert!(
            matches!(error, CliError::Invalid(_) | CliError::Config(_)),
            "{error}"
        );
        assert!(!error.to_string().is_empty());
    }
}

/// A claim timeout too short to renew a lease in (`--claim-timeout 1ms` used to be accepted,
/// and its leases lapsed over and over: hundreds of duplicate runs) is refused before anything
/// runs, with the engine's error naming the minimum.
#[test]
fn a_claim_timeout_too_short_to_renew_in_is_refused() {
    let options = DemoOptions {
        claim_timeout: Duration::from_millis(1),
        ..DemoOptions::default()
    };
    let error = demo::run(&options).expect_err("too short a claim timeout");
    assert!(matches!(error, CliError::Config(_)), "{error}");
    assert!(error.to_string().contains("minimum of 20ms"), "{error}");
}
