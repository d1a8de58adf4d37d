//! One logical queue over 1, 3 and 6 masters of a Redis Cluster the bench starts itself (see
//! `leasehold_benches::e2e::scale`).
//!
//! Run: `cargo bench -p leasehold-benches --bench scale -- [--masters 1,3,6]
//! [--shards-per-master 4] [--rounds 3] [--json] …`.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use leasehold_benches::e2e::{self, scale::ScaleArgs};

fn main() -> ExitCode {
    e2e::main::<ScaleArgs>()
}
