//! Waiting for the process to be asked to stop, on tokio.

use std::future::Future;
use std::io;
use std::pin::pin;
use std::task::Poll;

/// Which request to stop arrived: what [`shutdown_signal`] answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Signal {
    /// Ctrl-C in a terminal (`SIGINT` on Unix).
    Interrupt,
    /// `SIGTERM`: what Kubernetes, systemd and Docker send to stop a process (Unix only).
    Terminate,
}

/// Completes when the process is asked to stop: Ctrl-C, or on Unix `SIGTERM` too.
///
/// Await it, then shut the worker down gracefully, so that running handlers get the shutdown
/// grace and unfinished messages are handed back at once rather than waiting out the claim
/// timeout on another replica:
///
/// ```no_run
/// # async fn run<P>(worker: leasehold::Worker<P>) -> std::io::Result<()> {
/// let signal = leasehold::tokio::shutdown_signal().await?;
/// eprintln!("{signal:?}: stopping");
/// worker.shutdown(std::time::Duration::from_secs(30)).await;
/// # Ok(())
/// # }
/// ```
///
/// The handlers are installed when the future is first polled, and stay installed for the life
/// of the process (tokio never uninstalls them): from then on neither signal ends the process by
/// itself, so a second Ctrl-C does not cut a graceful shutdown short; the grace passed to
/// [`Worker::shutdown`](crate::Worker::shutdown) bounds it. Outside Unix only Ctrl-C is
/// watched.
///
/// # Errors
/// When a handler cannot be installed (see [`tokio::signal::ctrl_c`](::tokio::signal::ctrl_c)).
///
/// # Panics
/// Outside a tokio runtime with its I/O driver enabled (`#[tokio::main]` enables it).
pub async fn shutdown_signal() -> io::Result<Signal> {
    #[cfg(unix)]
    let mut terminate =
        ::tokio::signal::unix::signal(::tokio::signal::unix::SignalKind::terminate())?;
    let mut interrupt = pin!(::tokio::signal::ctrl_c());
    std::future::poll_fn(|cx| {
        if let Poll::Ready(result) = interrupt.as_mut().poll(cx) {
            return Poll::Ready(result.map(|()| Signal::Interrupt));
        }
        #[cfg(unix)]
        if terminate.poll_recv(cx).is_ready() {
            return Poll::Ready(Ok(Signal::Terminate));
        }
        Poll::Pending
    })
    .await
}
