//! The worker scenario suite (`scenarios/`) against a real, throwaway `redis-server`, on tokio:
//! each test gets a multi-thread runtime of its own; a crashing worker gets a separate runtime
//! that is shut down under it.

mod scenarios;

use std::future::Future;

use leasehold_tokio::TokioRuntime;

/// The test's runtime: workers and their Redis connections live on it.
#[derive(Clone)]
struct Tokio(TokioRuntime);

impl scenarios::support::TestRt for Tokio {
    type Runtime = TokioRuntime;
    type Isolated = IsolatedTokio;

    fn runtime(&self) -> TokioRuntime {
        self.0.clone()
    }

    fn unblock<T, F>(&self, f: F) -> impl Future<Output = T> + Send + 'static
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let task = tokio::task::spawn_blocking(f);
        async move { task.await.expect("a blocking task panicked") }
    }

    fn isolated(&self) -> IsolatedTokio {
        IsolatedTokio(Some(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .expect("a tokio runtime"),
        ))
    }
}

/// A runtime of its own for a worker that will crash: `kill` shuts it down in the background,
/// dropping every task on it (the driver, handlers, the Redis connections) without any
/// graceful shutdown.
struct IsolatedTokio(Option<tokio::runtime::Runtime>);

impl IsolatedTokio {
    fn handle(&self) -> &tokio::runtime::Handle {
        self.0.as_ref().expect("not killed yet").handle()
    }
}

impl scenarios::support::Isolated for IsolatedTokio {
    type Runtime = TokioRuntime;

    fn runtime(&self) -> TokioRuntime {
        TokioRuntime::from_handle(self.handle().clone())
    }

    fn run<T, F>(&self, future: F) -> impl Future<Output = T> + Send + 'static
    where
        T: Send + 'static,
        F: Future<Output = T> + Send + 'static,
    {
        let task = self.handle().spawn(future);
        async move { task.await.expect("a task on the isolated runtime failed") }
    }

    fn kill(mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

impl Drop for IsolatedTokio {
    fn drop(&mut self) {
        // Dropping a runtime inside an async context panics; this never blocks.
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

/// Runs a test on a fresh multi-thread runtime.
fn block_on<F: Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(future)
}

scenarios::all_scenarios!(Tokio(TokioRuntime::current()), block_on);
