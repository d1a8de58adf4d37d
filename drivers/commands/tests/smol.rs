//! The command queue on smol: the same worker, another runtime (the memory store here; the
//! Redis store in leasehold-redis's `tests/commands_smol.rs`).

mod common;

use common::on_smol::polled_commands_and_a_cancel;
use common::CLAIM;
use leasehold_commands::MemoryCommandStore;
use leasehold_memory::{MemoryStream, StreamConfig};

#[test]
fn memory_store_on_smol() {
    let stream = MemoryStream::new(StreamConfig::new(CLAIM)).unwrap();
    smol::block_on(polled_commands_and_a_cancel(MemoryCommandStore::new(
        stream,
    )));
}
