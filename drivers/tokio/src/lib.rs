//! # leasehold-tokio: leasehold workers on tokio
//!
//! The [`Runtime`] for tokio, and the worker API bound to it. Time comes from
//! `tokio::time::Instant`, so tests can run workers on tokio's paused clock, faster than real
//! time.
#![forbid(unsafe_code)]

use std::future::Future;
use std::time::Instant;

pub use leasehold_worker::*;

/// The tokio runtime handle the worker spawns on.
#[derive(Debug, Clone)]
pub struct TokioRuntime {
    handle: tokio::runtime::Handle,
}

impl TokioRuntime {
    /// The runtime of the calling context.
    ///
    /// # Panics
    /// Outside a tokio runtime; use [`TokioRuntime::from_handle`] there.
    pub fn current() -> Self {
        Self::from_handle(tokio::runtime::Handle::current())
    }

    /// A given runtime.
    pub fn from_handle(handle: tokio::runtime::Handle) -> Self {
        Self { handle }
    }
}

impl Runtime for TokioRuntime {
    fn spawn(&self, future: BoxFuture) {
        self.handle.spawn(future);
    }

    fn spawn_unboxed<F>(&self, future: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.handle.spawn(future);
    }

    fn sleep_until(&self, deadline: Instant) -> impl Future<Output = ()> + Send + 'static {
        tokio::time::sleep_until(tokio::time::Instant::from_std(deadline))
    }

    fn now(&self) -> Instant {
        tokio::time::Instant::now().into_std()
    }
}

/// A worker builder on the current tokio runtime.
///
/// # Panics
/// Outside a tokio runtime.
pub fn worker<B>() -> WorkerBuilder<TokioRuntime, B>
where
    B: leasehold_worker::core::Backend,
    B::Payload: AsRef<[u8]>,
{
    WorkerBuilder::new(TokioRuntime::current())
}
