//! What a worker checks when it starts: the claim timeout is said once (the worker takes its
//! backend's), and a config that disagrees with a backend, or backends that disagree with each
//! other, are errors that say so.

use std::time::Duration;

use leasehold_memory::{MemoryStream, StreamConfig};
use leasehold_tokio::{Config, Delivery, WorkerError};

fn stream(claim: Duration) -> MemoryStream {
    MemoryStream::new(StreamConfig::new(claim)).expect("a valid stream config")
}

async fn no_op(_: Delivery<u32>) {}

#[tokio::test]
async fn an_unset_claim_timeout_is_taken_from_the_backend() {
    let claim = Duration::from_secs(5);
    let worker = leasehold_tokio::worker()
        .stream("jobs", stream(claim).consumer("w").unwrap(), no_op)
        .start()
        .expect("nothing to disagree with");
    let settings = worker.settings();
    assert_eq!(settings.claim_timeout, claim);
    assert_eq!(settings.heartbeat_interval, claim / 3, "derived from it");
    worker.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_config_that_disagrees_with_the_backend_is_refused() {
    let started = leasehold_tokio::worker()
        .config(Config::default().claim_timeout(Duration::from_secs(30)))
        .stream(
            "jobs",
            stream(Duration::from_secs(5)).consumer("w").unwrap(),
            no_op,
        )
        .start();
    let error = started.expect_err("30 s against the backend's 5 s");
    assert!(
        matches!(
            &error,
            WorkerError::ClaimTimeoutMismatch { stream, backend, config }
                if stream == "jobs" && *backend == Duration::from_secs(5)
                    && *config == Duration::from_secs(30)
        ),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("leave it out of the config"),
        "{error}"
    );
}

#[tokio::test]
async fn streams_with_different_claim_timeouts_are_refused() {
    let started = leasehold_tokio::worker()
        .stream(
            "a",
            stream(Duration::from_secs(5)).consumer("w").unwrap(),
            no_op,
        )
        .stream(
            "b",
            stream(Duration::from_secs(9)).consumer("w").unwrap(),
            no_op,
        )
        .start();
    let error = started.expect_err("one engine renews both on one cadence");
    assert!(
        matches!(&error, WorkerError::ClaimTimeoutsDiffer { first, second, .. }
            if first == "a" && second == "b"),
        "{error:?}"
    );
}

#[tokio::test]
async fn a_cancel_grace_past_the_margin_is_refused_at_start() {
    let started = leasehold_tokio::worker()
        .config(Config::default().cancel_grace(Duration::from_secs(1)))
        .stream(
            "jobs",
            // A 10 ms expiry margin, which a 1 s grace outlasts.
            stream(Duration::from_millis(100)).consumer("w").unwrap(),
            no_op,
        )
        .start();
    assert!(
        matches!(started, Err(WorkerError::Config(ref e)) if e.to_string().contains("cancel_grace")),
        "{started:?}"
    );
}
