//! Pickup latency on an idle worker on Redis against a raw blocking `XREADGROUP` consumer, on a
//! throwaway redis-server (see `leasehold_benches::e2e::pickup`).
//!
//! Run: `cargo bench -p leasehold-benches --bench pickup -- [--rounds 5] [--json] …`.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use leasehold_benches::e2e::{self, args::PickupArgs};

fn main() -> ExitCode {
    e2e::main::<PickupArgs>()
}
