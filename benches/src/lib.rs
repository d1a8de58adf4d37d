//! Shared pieces of the leasehold benchmarks: a hand driver that holds `n` leases in a
//! [`LeaseEngine`](leasehold_core::LeaseEngine) and runs lifecycles and heartbeats on explicit, advancing instants
//! ([`fixture`]), the table printed from criterion's results ([`report`]), and the end-to-end
//! benchmarks of a whole worker on the memory and Redis backends ([`e2e`]).
//!
//! Run everything with `cargo bench -p leasehold-benches`; see `benches/README.md`.
#![forbid(unsafe_code)]

pub mod e2e;
pub mod fixture;
pub mod report;
pub mod seed;
