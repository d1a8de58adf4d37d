//! The few things the driver needs from an async runtime, in the spirit of quinn's `Runtime`.

use std::future::Future;
use std::pin::Pin;
use std::time::Instant;

/// A boxed, sendable future: what the driver spawns.
pub type BoxFuture = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// An async runtime: spawn a task, sleep until an instant, read the clock.
///
/// The driver reads time only through [`now`](Runtime::now), so a runtime with a virtual clock
/// (tokio's paused time) runs the whole worker faster than real time.
pub trait Runtime: Clone + Send + Sync + 'static {
    /// Runs `future` to completion in the background (detached).
    fn spawn(&self, future: BoxFuture);

    /// Like [`spawn`](Runtime::spawn), for a future of a concrete type: a runtime whose spawn
    /// is generic can take it as it is, without boxing it first (the driver spawns its handler
    /// tasks this way). The default boxes it and calls `spawn`.
    fn spawn_unboxed<F>(&self, future: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.spawn(Box::pin(future));
    }

    /// Completes at `deadline`.
    fn sleep_until(&self, deadline: Instant) -> impl Future<Output = ()> + Send + 'static;

    /// The runtime's monotonic clock.
    fn now(&self) -> Instant;
}
