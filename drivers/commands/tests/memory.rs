//! The command-queue scenarios on the in-memory store (tokio).

mod common;

use common::{Fixture, CLAIM};
use leasehold_commands::MemoryCommandStore;
use leasehold_memory::{MemoryStream, StreamConfig};

struct Memory(MemoryCommandStore);

impl Fixture for Memory {
    type Store = MemoryCommandStore;

    async fn store(&self) -> MemoryCommandStore {
        self.0.clone()
    }

    async fn pending(&self) -> usize {
        self.0.stream().pending_len()
    }
}

fn fixture() -> Memory {
    let stream = MemoryStream::new(StreamConfig::new(CLAIM)).expect("valid stream config");
    Memory(MemoryCommandStore::new(stream))
}

macro_rules! scenarios {
    ($($name:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            common::$name(fixture()).await;
        }
    )*};
}

scenarios!(
    succeeds_with_a_typed_result,
    failures_keep_their_error,
    unknown_types_and_bad_params_fail_at_once,
    cancel_before_pickup_and_after_the_end,
    long_running_commands_are_polled_until_done,
    several_types_and_a_batch_complete,
    submit_is_idempotent,
    cancel_during_execute_stays_cancelled,
    cancel_reaches_running_commands,
    shutdown_hands_running_commands_over,
    crash_failover_resumes_with_check_status,
);
