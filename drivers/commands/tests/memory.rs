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
