//! The command-store properties on the memory and Redis stores, and proof that they catch a
//! store whose compare-and-set ignores versions.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use leasehold_commands::{
    CancelFeed, CommandState, CommandStore, MemoryCommandStore, StoreError, Submit,
};
use leasehold_conformance::commands::CommandStoreFactory;
use leasehold_memory::{MemoryBackend, MemoryStream, StreamConfig};
use leasehold_redis::{RedisCommandStore, RedisStoreConfig};
use leasehold_redis_harness::RedisServer;

const CLAIM: Duration = Duration::from_secs(1);

struct Memory;

impl CommandStoreFactory for Memory {
    type Store = MemoryCommandStore;

    async fn open(&self) -> MemoryCommandStore {
        MemoryCommandStore::new(MemoryStream::new(StreamConfig::new(CLAIM)).expect("stream"))
    }
}

mod memory {
    leasehold_conformance::command_store_suite!(super::Memory);
}

/// One server per test; a fresh queue name per `open`.
struct Redis {
    server: RedisServer,
    queues: AtomicUsize,
}

impl Redis {
    fn new() -> Self {
        Self {
            server: RedisServer::start().unwrap_or_else(|e| panic!("needs redis-server: {e}")),
            queues: AtomicUsize::new(0),
        }
    }
}

impl CommandStoreFactory for Redis {
    type Store = RedisCommandStore;

    async fn open(&self) -> RedisCommandStore {
        let queue = format!("q{}", self.queues.fetch_add(1, Ordering::Relaxed));
        RedisCommandStore::connect(RedisStoreConfig::new(self.server.url(), queue))
            .await
            .expect("connect")
    }
}

mod redis {
    leasehold_conformance::command_store_suite!(super::Redis::new());
}

/// A memory store whose compare-and-set writes whatever it is given: the lost update.
#[derive(Clone)]
struct LastWriterWins(MemoryCommandStore);

impl CommandStore for LastWriterWins {
    type Backend = MemoryBackend;
    type Payload = leasehold_memory::Bytes;

    async fn submit(&self, state: &CommandState, entry: &[u8]) -> Result<Submit, StoreError> {
        self.0.submit(state, entry).await
    }

    async fn load(&self, id: &str) -> Result<Option<CommandState>, StoreError> {
        self.0.load(id).await
    }

    async fn compare_and_set(&self, state: &CommandState) -> Result<bool, StoreError> {
        // Writes over whatever version is stored.
        let Some(current) = self.0.load(&state.id).await? else {
            return Ok(false);
        };
        let mut forced = state.clone();
        forced.version = current.version + 1;
        self.0.compare_and_set(&forced).await
    }

    async fn announce_cancel(&self, id: &str) -> Result<(), StoreError> {
        self.0.announce_cancel(id).await
    }

    async fn cancels(&self) -> Result<CancelFeed, StoreError> {
        self.0.cancels().await
    }

    async fn consumer(&self, claim_timeout: Duration) -> Result<MemoryBackend, StoreError> {
        self.0.consumer(claim_timeout).await
    }
}

struct Broken;

impl CommandStoreFactory for Broken {
    type Store = LastWriterWins;

    async fn open(&self) -> LastWriterWins {
        LastWriterWins(Memory.open().await)
    }
}

#[tokio::test]
#[should_panic(expected = "property `store_compare_and_set_is_a_true_cas` violated")]
async fn a_last_writer_wins_store_is_caught() {
    leasehold_conformance::commands::store_compare_and_set_is_a_true_cas(&Broken).await;
}
