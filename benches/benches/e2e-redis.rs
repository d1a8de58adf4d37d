//! The Redis backend end to end: a worker against a hand-written `XREADGROUP`/`XACK` loop on a
//! throwaway redis-server, plus heartbeat cost and RSS (see `leasehold_benches::e2e::redis`).
//!
//! Run: `cargo bench -p leasehold-benches --bench e2e-redis -- [--prefetch 0,3000] [--json] …`.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use leasehold_benches::e2e::{self, args::RedisArgs};

fn main() -> ExitCode {
    e2e::main::<RedisArgs>()
}
