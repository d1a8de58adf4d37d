//! The memory backend end to end: a worker with a no-op handler against a tokio mpsc +
//! task-per-message baseline, rounds interleaved (see `leasehold_benches::e2e::memory`).
//!
//! Run: `cargo bench -p leasehold-benches --bench e2e-memory -- [--rounds 5] [--json] …`.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use leasehold_benches::e2e::{self, args::MemoryArgs};

fn main() -> ExitCode {
    e2e::main::<MemoryArgs>()
}
