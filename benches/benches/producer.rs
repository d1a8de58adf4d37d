//! The producer on Redis: `publish_batch` and `publish` against raw `XADD`, consuming due
//! delayed messages against plain ones, and due-time accuracy on an idle worker, on a
//! throwaway redis-server (see `leasehold_benches::e2e::producer`).
//!
//! Run: `cargo bench -p leasehold-benches --bench producer -- [--rows 1,2] [--json] …`.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use leasehold_benches::e2e::{self, args::ProducerArgs};

fn main() -> ExitCode {
    e2e::main::<ProducerArgs>()
}
