//! `leasehold::tokio::shutdown_signal` completes on SIGTERM (what Kubernetes, systemd and Docker
//! send) and on SIGINT (Ctrl-C), saying which. Signals are process-wide, so both are checked in
//! one test, one after the other, in a test binary of its own.
#![cfg(all(unix, feature = "tokio"))]

use std::future::Future;
use std::pin::pin;
use std::process::Command;
use std::task::{Context, Waker};
use std::time::Duration;

use leasehold::tokio::{shutdown_signal, Signal};

/// Sends `signal` to this process.
fn raise(signal: &str) {
    let status = Command::new("kill")
        .args([&format!("-{signal}"), &std::process::id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill -{signal} failed");
}

async fn answers(signal: &str) -> Signal {
    let mut waiting = pin!(shutdown_signal());
    // The first poll installs the handlers; before it, the signal would end the process.
    let first = waiting
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()));
    assert!(first.is_pending(), "completed before any signal: {first:?}");
    raise(signal);
    tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the signal is seen within 10 s")
        .expect("the handlers are installed")
}

#[tokio::test]
async fn completes_on_sigterm_and_on_ctrl_c() {
    assert_eq!(answers("TERM").await, Signal::Terminate);
    assert_eq!(answers("INT").await, Signal::Interrupt);
    // Installed for good: a later SIGTERM no longer ends the process.
    raise("TERM");
    tokio::time::sleep(Duration::from_millis(50)).await;
}
