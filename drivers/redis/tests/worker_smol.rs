//! The worker scenario suite (`scenarios/`) against a real, throwaway `redis-server`, on smol:
//! workers run on an executor shared by this binary's tests; a crashing worker gets an executor
//! of its own that stops being run under it.

mod scenarios;

use std::future::Future;
use std::sync::{Arc, LazyLock};

use leasehold_smol::SmolRuntime;
use smol::Executor;

/// Workers run on [`SHARED`]; the Redis connections on async-io's reactor (redis-rs picks
/// smol outside a tokio runtime).
#[derive(Clone)]
struct Smol;

/// The executor the tests' workers share, run by four threads: smol's global executor has one
/// (unless `SMOL_THREADS` says otherwise), and tests run in parallel, so one test's busy moment
/// would hold back another's heartbeats.
static SHARED: LazyLock<Arc<Executor<'static>>> = LazyLock::new(|| {
    let executor = Arc::new(Executor::new());
    for n in 0..4 {
        let runner = executor.clone();
        std::thread::Builder::new()
            .name(format!("shared-smol-{n}"))
            .spawn(move || smol::block_on(runner.run(std::future::pending::<()>())))
            .expect("start a thread of the shared executor");
    }
    executor
});

impl scenarios::support::TestRt for Smol {
    type Runtime = SmolRuntime;
    type Isolated = IsolatedSmol;

    fn runtime(&self) -> SmolRuntime {
        SmolRuntime::with_executor(SHARED.clone())
    }

    fn unblock<T, F>(&self, f: F) -> impl Future<Output = T> + Send + 'static
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        smol::unblock(f)
    }

    fn isolated(&self) -> IsolatedSmol {
        let executor = Arc::new(Executor::new());
        let (stop, stopped) = smol::channel::bounded::<()>(1);
        let runner = executor.clone();
        let thread = std::thread::spawn(move || {
            smol::block_on(runner.run(async move {
                let _ = stopped.recv().await;
            }))
        });
        IsolatedSmol {
            executor,
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

/// An executor of its own, run by one thread, for a worker that will crash: `kill` stops that
/// thread, and nothing runs the executor's tasks (the driver, its handlers) ever again — a
/// frozen process: no heartbeat, no release, no graceful shutdown.
struct IsolatedSmol {
    executor: Arc<Executor<'static>>,
    stop: Option<smol::channel::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl scenarios::support::Isolated for IsolatedSmol {
    type Runtime = SmolRuntime;

    fn runtime(&self) -> SmolRuntime {
        SmolRuntime::with_executor(self.executor.clone())
    }

    fn run<T, F>(&self, future: F) -> impl Future<Output = T> + Send + 'static
    where
        T: Send + 'static,
        F: Future<Output = T> + Send + 'static,
    {
        self.executor.spawn(future)
    }

    fn kill(mut self) {
        self.stop_thread();
    }
}

impl IsolatedSmol {
    fn stop_thread(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            thread.join().expect("the isolated executor's thread");
        }
    }
}

impl Drop for IsolatedSmol {
    fn drop(&mut self) {
        self.stop_thread();
    }
}

scenarios::all_scenarios!(Smol, smol::block_on);
