//! The behavioural suite (`leasehold-worker-suite`) on smol, in real time with the suite's short
//! intervals (poll 20 ms, re-poll 50 ms, claim timeout 0.5-1 s where leases must lapse).
//!
//! Each test runs its workers on its own executor, driven by the test thread (as tokio's
//! current-thread runtime does), not on smol's shared global executor: tests run in parallel,
//! and on a shared executor thread one test's stall (a handler panic printing a backtrace
//! under `RUST_BACKTRACE=1` takes long in a debug build) would delay every other test's
//! heartbeats past their lease time.

use std::cell::RefCell;
use std::future::Future;
use std::sync::Arc;

use leasehold_smol::SmolRuntime;
use leasehold_worker_suite::TestRuntime;
use smol::Executor;

thread_local! {
    /// The executor of the test running on this thread.
    static EXECUTOR: RefCell<Option<Arc<Executor<'static>>>> = const { RefCell::new(None) };
}

/// Workers spawn on the test's executor; time is the system's.
#[derive(Clone)]
struct Smol(SmolRuntime);

impl Smol {
    /// The runtime of the test running on this thread (inside [`block_on_local`]).
    fn current() -> Self {
        let executor = EXECUTOR.with(|e| e.borrow().clone());
        Self(SmolRuntime::with_executor(
            executor.expect("called inside block_on_local"),
        ))
    }
}

impl TestRuntime for Smol {
    type Runtime = SmolRuntime;

    fn runtime(&self) -> SmolRuntime {
        self.0.clone()
    }

    fn is_virtual(&self) -> bool {
        false
    }
}

/// Runs `future` and every task it spawns on a fresh executor, on this thread.
fn block_on_local<F: Future>(future: F) -> F::Output {
    let executor = Arc::new(Executor::new());
    EXECUTOR.with(|e| *e.borrow_mut() = Some(executor.clone()));
    smol::block_on(executor.run(future))
}

leasehold_worker_suite::worker_suite!(Smol::current(), block_on_local);
