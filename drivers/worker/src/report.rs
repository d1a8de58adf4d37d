//! What a worker reports when it has shut down.

use leasehold_core::Stats;

/// What shutdown did, from the worker's counters, and the streams a fatal error halted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShutdownReport {
    /// Messages acked over the worker's life.
    pub acked: u64,
    /// Of `acked`: messages whose handler returned `Done` within the cancel grace after its
    /// lease expired locally (the backend was unreachable), acked late and fenced: nobody had
    /// taken them over, so they did not run again. Their leases count in `lost` too.
    pub acked_after_expiry: u64,
    /// Leases released back (failed attempts, and waiting messages handed back at shutdown).
    pub released: u64,
    /// Invocations cancelled (lease lost, max processing time, shutdown grace over).
    pub cancelled: u64,
    /// Messages dead-lettered.
    pub dead_lettered: u64,
    /// Leases lost or expired.
    pub lost: u64,
    /// Leases given up because the backend kept failing past the deadline, or failed fatally
    /// (they lapse on the backend after the claim timeout and are delivered again).
    pub abandoned: u64,
    /// Of `abandoned`: messages whose handler returned `Done` but whose ack the backend never
    /// confirmed before the deadline (it was unreachable, or refused the call fatally). Their
    /// work may run again after the claim timeout.
    pub unconfirmed_acks: u64,
    /// Streams whose intake a fatal backend error stopped, in the order they stopped.
    pub halted: Vec<HaltedStream>,
}

/// A stream a fatal backend error halted, and that error.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HaltedStream {
    /// The stream's name.
    pub stream: String,
    /// The call that failed and why (never a payload or a credential).
    pub error: String,
}

impl ShutdownReport {
    pub(crate) fn new(stats: Stats, halted: Vec<HaltedStream>) -> Self {
        Self {
            acked: stats.acked,
            acked_after_expiry: stats.acked_after_expiry,
            released: stats.released,
            cancelled: stats.cancelled,
            dead_lettered: stats.dead_lettered,
            lost: stats.lost + stats.expired,
            abandoned: stats.abandoned,
            unconfirmed_acks: stats.abandoned_acks,
            halted,
        }
    }

    /// One line for the log: INFO for a clean shutdown, WARN when leases were given up or
    /// streams halted (those need an operator's look).
    pub(crate) fn log(&self) {
        let Self {
            acked,
            acked_after_expiry,
            released,
            cancelled,
            dead_lettered,
            lost,
            abandoned,
            unconfirmed_acks,
            halted,
        } = self;
        let halted = halted.len();
        if *abandoned > 0 || halted > 0 {
            tracing::warn!(
                acked,
                acked_after_expiry,
                released,
                cancelled,
                dead_lettered,
                lost,
                abandoned,
                unconfirmed_acks,
                halted,
                "worker shut down; leases it gave up lapse after the claim timeout"
            );
        } else {
            tracing::info!(
                acked,
                acked_after_expiry,
                released,
                cancelled,
                dead_lettered,
                lost,
                "worker shut down"
            );
        }
    }
}

/// What a worker is doing right now, from [`Worker::snapshot`](crate::Worker::snapshot).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Snapshot {
    /// Its streams, in the order they were added.
    pub streams: Vec<StreamSnapshot>,
    /// Lifetime counters of its engine.
    pub stats: Stats,
}

/// One stream of a [`Snapshot`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamSnapshot {
    /// The stream's name.
    pub stream: String,
    /// Invocations running, including cancelled ones that have not returned yet.
    pub running: usize,
    /// Leases held: running, prefetched, waiting for a re-poll, or being settled.
    pub held: usize,
    /// Held leases without a running invocation: prefetched and waiting for a slot, waiting
    /// for a re-poll, or being settled.
    pub waiting: usize,
    /// The fatal error that halted its intake, if one did.
    pub halted: Option<String>,
    /// Whether the worker fetches from it: always, except for the shards of a sharded queue
    /// assigned to other workers (their leases held here are still served).
    pub fetching: bool,
}

impl Snapshot {
    /// Invocations running on every stream.
    pub fn running(&self) -> usize {
        self.streams.iter().map(|s| s.running).sum()
    }

    /// Leases held on every stream.
    pub fn held(&self) -> usize {
        self.streams.iter().map(|s| s.held).sum()
    }
}
