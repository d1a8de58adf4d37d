//! The worker scenario suite: worker-level tests against a real, throwaway `redis-server`,
//! written once and run on every runtime driver. Each scenario is an `async fn` generic over a
//! [`TestRt`](support::TestRt), the runtime under test; `worker_tokio.rs` and `worker_smol.rs`
//! instantiate them all with [`all_scenarios!`]: one `#[test]` per scenario, named after it.
//!
//! Timings are short (claim timeout 1 s, heartbeat 300 ms, poll 50 ms) so that takeovers happen
//! within a test. The tests assert counts, orders and states (what Redis recorded: `XPENDING`,
//! `XLEN`, the dead-letter stream), never wall-clock durations; waiting for a condition polls
//! with a bounded deadline ([`PATIENCE`](support::PATIENCE)) and fails saying what it waited for.
//!
//! - [`support`]: the runtime under test, the timings, the server, workers, waiting loops.
//! - [`takeover`]: a renewed lease is never taken back; a lapsed one is, by a peer.
//! - [`fencing`]: a worker whose message was taken over can neither renew nor ack it.
//! - [`failures`]: retries with a delay, a time limit, dead letters for poison messages.
//! - [`faults`]: Redis failing under the worker: `NOGROUP`, killed connections, a restart.
//! - [`shutdown`]: what a graceful shutdown hands back.
//! - [`consume`]: the one-message-at-a-time `consume`.
//! - [`fan_out`]: two consumer groups on one stream, each handling every message.

pub mod support;

pub mod consume;
pub mod failures;
pub mod fan_out;
pub mod faults;
pub mod fencing;
pub mod shutdown;
pub mod takeover;

/// Expands to one `#[test]` per scenario, named after it, each on a runtime made by `$make`
/// (evaluated inside the test's future) and driven by `$block_on`; scenarios are listed by
/// module.
macro_rules! scenarios {
    ($make:expr, $block_on:path; $($module:ident: [$($name:ident),* $(,)?]),* $(,)?) => {
        $($(
            #[test]
            fn $name() {
                $block_on(async {
                    let rt = $make;
                    $crate::scenarios::$module::$name(rt).await;
                })
            }
        )*)*
    };
}
pub(crate) use scenarios;

/// Every scenario, by module, for [`scenarios!`].
macro_rules! all_scenarios {
    ($make:expr, $block_on:path) => {
        $crate::scenarios::scenarios!($make, $block_on;
            fan_out: [every_group_handles_every_message_through_a_crash],
            takeover: [
                live_work_is_not_reclaimed_with_one_worker,
                live_work_is_not_reclaimed_with_two_workers,
                crashed_worker_fails_over_to_a_peer,
                stale_entries_are_all_reclaimed_while_new_ones_flow,
            ],
            fencing: [
                takeover_is_not_stolen_back_and_cancels_the_handler,
                late_ack_after_takeover_leaves_the_new_owner_entry,
            ],
            failures: [
                retry_with_delay_is_retaken_by_another_consumer,
                max_processing_time_cancels_and_retries,
                poison_message_is_dead_lettered_while_others_flow,
            ],
            faults: [
                destroyed_group_is_recreated,
                killed_connections_reconnect,
                redis_restart_with_aof_loses_nothing,
                a_key_of_the_wrong_type_halts_the_stream,
            ],
            shutdown: [
                shutdown_hands_waiting_messages_back_at_once,
            ],
            consume: [
                consume_on_empty_stream_returns_false,
                consume_true_acks,
                consume_false_keeps_the_message_for_the_next_consume,
                consume_error_or_panic_releases_the_message,
            ],
        );
    };
}
pub(crate) use all_scenarios;
