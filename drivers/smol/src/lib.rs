//! # leasehold-smol: leasehold workers on smol
//!
//! The [`Runtime`] for smol (its executor and async-io timers), and the worker API bound to it.
#![forbid(unsafe_code)]

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

pub use leasehold_worker::*;
use smol::Executor;

/// Where the worker's tasks run: a given executor, or smol's global one.
#[derive(Debug, Clone, Default)]
pub struct SmolRuntime {
    executor: Option<Arc<Executor<'static>>>,
}

impl SmolRuntime {
    /// Tasks run on smol's global executor (`smol::spawn`).
    pub fn global() -> Self {
        Self::default()
    }

    /// Tasks run on `executor`; the caller drives it (e.g. `executor.run(..)` on some threads).
    pub fn with_executor(executor: Arc<Executor<'static>>) -> Self {
        Self {
            executor: Some(executor),
        }
    }
}

impl Runtime for SmolRuntime {
    fn spawn(&self, future: BoxFuture) {
        self.spawn_unboxed(future);
    }

    fn spawn_unboxed<F>(&self, future: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        match &self.executor {
            Some(executor) => executor.spawn(future).detach(),
            None => smol::spawn(future).detach(),
        }
    }

    // Not an `async fn`: the timer must not borrow `self`, the driver needs it `'static`.
    #[allow(clippy::manual_async_fn)]
    fn sleep_until(&self, deadline: Instant) -> impl Future<Output = ()> + Send + 'static {
        async move {
            smol::Timer::at(deadline).await;
        }
    }

    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A worker builder on smol's global executor.
pub fn worker<B>() -> WorkerBuilder<SmolRuntime, B>
where
    B: leasehold_worker::core::Backend,
    B::Payload: AsRef<[u8]>,
{
    WorkerBuilder::new(SmolRuntime::global())
}
