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

/// The same queue over 4 memory streams: every scenario, and the sharded one.
mod sharded {
    use super::common::{self, Fixture, ShardedFixture, CLAIM};
    use crate::scenarios;
    use leasehold_commands::MemoryCommandStore;
    use leasehold_memory::{MemoryStream, StreamConfig};

    struct Sharded(MemoryCommandStore);

    impl Fixture for Sharded {
        type Store = MemoryCommandStore;

        async fn store(&self) -> MemoryCommandStore {
            self.0.clone()
        }

        async fn pending(&self) -> usize {
            self.0.streams().iter().map(MemoryStream::pending_len).sum()
        }
    }

    impl ShardedFixture for Sharded {
        fn shard_count(&self) -> u16 {
            self.0.streams().len() as u16
        }

        fn shard_of(&self, id: &str) -> u16 {
            self.0.shard_of(id)
        }

        async fn shard_lengths(&self) -> Vec<usize> {
            self.0.streams().iter().map(MemoryStream::len).collect()
        }
    }

    fn fixture() -> Sharded {
        let streams = (0..4).map(|_| MemoryStream::new(StreamConfig::new(CLAIM)).unwrap());
        Sharded(MemoryCommandStore::sharded(streams).expect("4 shards"))
    }

    scenarios!(fixture());
    scenarios!(fixture(); sharded_commands_run_cancel_and_retry_across_shards);

    #[test]
    fn a_sharded_store_needs_one_to_1024_streams() {
        let err = MemoryCommandStore::sharded(Vec::new()).unwrap_err();
        assert!(err.to_string().contains("1 to 1024 shards"), "{err}");
        let one =
            MemoryCommandStore::sharded([MemoryStream::new(StreamConfig::default()).unwrap()]);
        assert_eq!(one.unwrap().streams().len(), 1);
    }

    #[tokio::test]
    async fn a_sharded_store_has_no_single_consumer() {
        use leasehold_commands::CommandStore;
        let err = fixture().0.consumer(CLAIM).await.unwrap_err();
        assert!(err.to_string().contains("4 shards"), "{err}");
        assert_eq!(fixture().0.consumers(CLAIM).await.unwrap().len(), 4);
    }
}

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

/// Expired states drop out of listings (on the stream's clock), and their index entries with
/// them; a write refreshes a state's lease on life, and a resubmitted id is listed once, under
/// its new status.
#[tokio::test]
async fn expired_states_drop_out_of_listings() {
    use std::time::Duration;

    use leasehold_commands::{Command, CommandQueue, Page, Status};
    use leasehold_memory::ManualClock;
    use leasehold_tokio::TokioRuntime;

    let clock = ManualClock::new();
    let stream = MemoryStream::with_clock(StreamConfig::new(CLAIM), clock.clone()).unwrap();
    let store = MemoryCommandStore::new(stream).with_ttl(Duration::from_secs(10));
    let queue = CommandQueue::new(TokioRuntime::current(), store);
    let ids = |status| {
        let queue = queue.clone();
        async move {
            let listing = queue.commands(status, Page::first(100)).await.unwrap();
            assert_eq!(listing.next, None);
            listing.states.into_iter().map(|s| s.id).collect::<Vec<_>>()
        }
    };
    for id in ["a", "b", "c", "d", "e"] {
        queue
            .submit(Command::new("k", ()).unwrap().with_id(id))
            .await
            .unwrap();
    }
    assert!(queue.cancel("a").await.unwrap());
    assert!(queue.cancel("b").await.unwrap());
    clock.advance(Duration::from_secs(6));
    assert!(queue.cancel("c").await.unwrap(), "written at 6 s");
    let counts = queue.counts().await.unwrap();
    assert_eq!(counts.get(Status::Submitted), 2);
    assert_eq!(counts.get(Status::Cancelled), 3);
    assert_eq!(counts.total(), 5);
    assert_eq!(ids(Status::Submitted).await, ["d", "e"]);
    clock.advance(Duration::from_secs(5));
    assert_eq!(
        ids(Status::Submitted).await,
        Vec::<String>::new(),
        "expired"
    );
    assert_eq!(ids(Status::Cancelled).await, ["c"], "a, b expired");
    assert_eq!(
        queue.counts().await.unwrap().get(Status::Cancelled),
        1,
        "a listing drops the expired it meets from the counts"
    );
    assert_eq!(queue.command("a").await.unwrap(), None);
    // The id is free again: listed once, as SUBMITTED.
    queue
        .submit(Command::new("k", ()).unwrap().with_id("a"))
        .await
        .unwrap();
    assert_eq!(ids(Status::Submitted).await, ["a"]);
    assert_eq!(ids(Status::Cancelled).await, ["c"]);
    clock.advance(Duration::from_secs(10));
    for status in Status::ALL {
        assert_eq!(ids(status).await, Vec::<String>::new(), "{status}");
    }
}
