//! The behavioural suite (`leasehold-worker-suite`) on tokio: a current-thread runtime on paused
//! time, so every interval passes instantly and time bounds are exact.

use std::future::Future;

use leasehold_tokio::TokioRuntime;
use leasehold_worker_suite::TestRuntime;

/// The worker runs on the test's runtime, whose clock is tokio's virtual one.
#[derive(Clone)]
struct PausedTokio(TokioRuntime);

impl TestRuntime for PausedTokio {
    type Runtime = TokioRuntime;

    fn runtime(&self) -> TokioRuntime {
        self.0.clone()
    }

    fn is_virtual(&self) -> bool {
        true
    }
}

/// Runs `future` on a fresh current-thread runtime whose clock starts paused.
fn block_on_paused<F: Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a tokio runtime")
        .block_on(future)
}

leasehold_worker_suite::worker_suite!(PausedTokio(TokioRuntime::current()), block_on_paused);
