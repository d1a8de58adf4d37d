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

scenarios!(fixture());

#[tokio::test]
async fn bad_worker_options_are_clear_errors() {
    use std::time::Duration;

    use leasehold_commands::CommandWorkerError;
    use leasehold_core::Config;

    let queue = common::queue(&fixture()).await;
    let polled = || common::Polled(common::Calls::default());
    let error = |result: Result<_, CommandWorkerError>| result.unwrap_err().to_string();
    let no_handlers = queue.worker().start().await;
    assert!(error(no_handlers).contains("at least one handler"));
    let cases = [
        (queue.worker().max_attempts(0), "max_attempts"),
        (
            queue.worker().status_interval(Duration::ZERO),
            "status_interval",
        ),
        (queue.worker().status_spread(1.5), "status_spread"),
        (
            queue.worker().config(Config::default().concurrency(0)),
            "concurrency",
        ),
        (
            queue
                .worker()
                .config(Config::default().claim_timeout(Duration::from_secs(7))),
            "claim timeout",
        ),
    ];
    for (builder, what) in cases {
        let message = error(builder.handler("polled", polled()).start().await);
        assert!(message.contains(what), "{what}: {message}");
    }
}
