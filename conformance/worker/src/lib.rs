//! # leasehold-worker-suite: the behavioural tests of leasehold workers, written once
//!
//! Every behaviour a user relies on (a slow stream never blocks a fast one, concurrency is a hard
//! bound, `Pending` work is re-invoked serially without holding a slot, nothing runs twice,
//! failures back off and dead-letter, lost leases cancel, shutdown loses nothing, `consume()`
//! keeps its contract) is one `async fn` here, generic over a [`TestRuntime`], against the
//! in-memory backend. Each runtime driver instantiates the whole suite with [`worker_suite!`],
//! which expands to one `#[test]` per behaviour:
//!
//! ```text
//! // drivers/tokio/tests/behaviour.rs
//! #[derive(Clone)]
//! struct PausedTokio(TokioRuntime);
//! impl leasehold_worker_suite::TestRuntime for PausedTokio {
//!     type Runtime = TokioRuntime;
//!     fn runtime(&self) -> TokioRuntime { self.0.clone() }
//!     fn is_virtual(&self) -> bool { true }
//! }
//! fn block_on_paused<F: Future>(f: F) -> F::Output { /* current-thread, start_paused */ }
//! leasehold_worker_suite::worker_suite!(PausedTokio(TokioRuntime::current()), block_on_paused);
//! ```
//!
//! Give each test its own runtime (tokio: a runtime per test; smol: an executor per test,
//! driven by the test thread): tests run in parallel, and a stall on a shared executor thread
//! (a handler panic printing a backtrace takes long in a debug build) would delay other tests'
//! heartbeats past their lease time.
//!
//! The tests assert counts, orders and maxima, never wall-clock durations. Where time itself is
//! the behaviour (re-poll cadence, backoff), the bounds are checked only on a virtual clock
//! ([`TestRuntime::is_virtual`], e.g. tokio's paused time), where they are exact; on a real clock
//! those tests check the counts and the order. Waits for something that must happen are bounded
//! generously ([`support::PATIENCE`]) and fail with what was awaited.
#![forbid(unsafe_code)]

use std::future::Future;
use std::time::{Duration, Instant};

use leasehold_worker::Runtime;

pub mod capture;
mod compat;
mod duplicates;
mod failures;
mod flow;
mod observe;
mod shutdown;
pub mod support;

pub use compat::*;
pub use duplicates::*;
pub use failures::*;
pub use flow::*;
pub use observe::*;
pub use shutdown::*;

/// What a behaviour needs from the runtime under test.
pub trait TestRuntime: Clone + Send + Sync + 'static {
    /// The runtime workers are built on.
    type Runtime: Runtime;

    /// A handle to build workers with (they spawn their tasks on it).
    fn runtime(&self) -> Self::Runtime;

    /// Whether the runtime's clock is virtual (advances only when every task waits, like tokio's
    /// paused time). Time bounds are asserted only then; the memory stream's clock is real-time
    /// (fetches may block) only when this is `false`.
    fn is_virtual(&self) -> bool;

    /// The runtime's clock: the same one the worker and the memory stream read.
    fn now(&self) -> Instant {
        self.runtime().now()
    }

    /// Completes after `duration` of the runtime's time.
    fn sleep(&self, duration: Duration) -> impl Future<Output = ()> + Send + 'static {
        let runtime = self.runtime();
        let deadline = runtime.now() + duration;
        async move { runtime.sleep_until(deadline).await }
    }

    /// A clock for the memory stream that reads the runtime's time (see [`support::SuiteClock`]).
    fn clock(&self) -> support::SuiteClock {
        support::SuiteClock::new(self)
    }
}

/// The longest a behaviour may take, in the runtime's time, before it counts as hung.
pub const BEHAVIOUR_LIMIT: Duration = Duration::from_secs(60);

/// Runs one behaviour, failing it if it has not finished after [`BEHAVIOUR_LIMIT`] of the
/// runtime's time: a worker that never returns from `shutdown`, say, fails the test instead of
/// hanging the run (on a virtual clock the limit passes at once when everything is stuck).
pub async fn bounded<T, F, Fut>(rt: T, behaviour: F)
where
    T: TestRuntime,
    F: FnOnce(T) -> Fut,
    Fut: Future<Output = ()>,
{
    let limit = rt.sleep(BEHAVIOUR_LIMIT);
    let body = behaviour(rt);
    match futures::future::select(std::pin::pin!(body), std::pin::pin!(limit)).await {
        futures::future::Either::Left(((), _)) => {}
        futures::future::Either::Right(((), _)) => {
            panic!("the behaviour did not finish within {BEHAVIOUR_LIMIT:?}: something hangs")
        }
    }
}

/// Expands to one `#[test]` per behaviour of the suite.
///
/// `$make` is an expression giving the [`TestRuntime`]; it is evaluated inside the test's
/// future, so it may read the ambient runtime (e.g. `tokio::runtime::Handle::current()`).
/// `$block_on` is a function (a path) running a future to completion on the runtime under
/// test, such as `smol::block_on`.
#[macro_export]
macro_rules! worker_suite {
    ($make:expr, $block_on:path $(,)?) => {
        $crate::worker_suite!(@tests ($make) ($block_on) [
            slow_stream_does_not_block_fast_stream,
            concurrency_limit_is_reached_and_never_exceeded,
            prefetched_messages_wait_within_the_concurrency_limit,
            default_concurrency_runs_one_at_a_time,
            pending_message_is_repolled_serially_without_holding_a_slot,
            pending_on_one_stream_does_not_block_another,
            identical_payloads_are_distinct_messages,
            redelivery_while_held_does_not_start_a_second_run,
            long_handlers_are_not_run_twice_across_workers,
            failures_back_off_then_dead_letter,
            undecodable_payload_is_dead_lettered_at_once,
            lost_lease_cancels_the_handler_and_drops_its_result,
            failing_renews_expire_the_lease_and_cancel_the_handler,
            a_done_within_the_cancel_grace_after_expiry_is_acked,
            max_processing_time_cancels_a_hung_handler_and_retries,
            a_handler_panicking_while_dropped_fails_its_attempt_and_the_worker_goes_on,
            a_fatal_backend_error_halts_its_stream_and_shows_in_health,
            a_worker_whose_every_stream_halts_is_stopped,
            metrics_and_logs_account_for_every_message,
            a_takeover_is_counted_and_logged_with_the_lease_margin,
            the_happy_path_logs_nothing_above_debug,
            an_outage_is_counted_in_full_but_logged_sparingly,
            a_snapshot_shows_what_runs_and_what_halted,
            shutdown_waits_for_running_releases_waiting_and_loses_nothing,
            shutdown_lets_go_of_the_handler,
            consume_on_empty_stream_returns_false,
            consume_true_acks,
            consume_false_keeps_the_message_for_the_next_consume,
            consume_error_or_panic_releases_the_message,
        ]);
    };
    (@tests ($make:expr) ($block_on:path) [$($name:ident),* $(,)?]) => {
        $(
            #[test]
            fn $name() {
                $block_on(async {
                    let runtime = $make;
                    $crate::bounded(runtime, $crate::$name).await;
                })
            }
        )*
    };
}
