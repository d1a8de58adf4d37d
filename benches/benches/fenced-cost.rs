//! The Redis backend's fenced ack, renew and release against the plain commands they guard:
//! Redis time per id from `INFO commandstats`, on a throwaway redis-server (see
//! `leasehold_benches::e2e::fenced`).
//!
//! Run: `cargo bench -p leasehold-benches --bench fenced-cost -- [--rounds 7] [--json] …`.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use leasehold_benches::e2e::{self, args::FencedArgs};

fn main() -> ExitCode {
    e2e::main::<FencedArgs>()
}
