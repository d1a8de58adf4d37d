//! What a worker reports when it has shut down.

use leasehold_core::Stats;

/// What shutdown did, from the worker's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShutdownReport {
    /// Messages acked over the worker's life.
    pub acked: u64,
    /// Leases released back (failed attempts, and waiting messages handed back at shutdown).
    pub released: u64,
    /// Invocations cancelled (lease lost, max processing time, shutdown grace over).
    pub cancelled: u64,
    /// Messages dead-lettered.
    pub dead_lettered: u64,
    /// Leases lost or expired.
    pub lost: u64,
    /// Leases given up after the deadline because the backend kept failing (they lapse on the
    /// backend after the claim timeout).
    pub abandoned: u64,
}

impl From<Stats> for ShutdownReport {
    fn from(stats: Stats) -> Self {
        Self {
            acked: stats.acked,
            released: stats.released,
            cancelled: stats.cancelled,
            dead_lettered: stats.dead_lettered,
            lost: stats.lost + stats.expired,
            abandoned: stats.abandoned,
        }
    }
}
