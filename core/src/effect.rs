//! What the engine asks its driver to do.

use std::time::Duration;

use crate::types::{CancelReason, DeadLetterReason, InvocationId, LeaseId, RenewId, StreamId};

/// An effect for the driver to execute, drained with
/// [`LeaseEngine::poll_effect`](crate::LeaseEngine::poll_effect).
///
/// Effects name leases by [`LeaseId`]; the driver reads the message id, fence and payload with
/// [`LeaseEngine::lease`](crate::LeaseEngine::lease) when it executes them (right after polling).
/// Every effect except `Cancel` and `Drained` expects exactly one result back through the
/// matching `handle_*` method; a driver that gives up on a call reports it as failed.
///
/// Exhaustive on purpose: a driver must execute every effect, so a new one should fail its
/// build rather than be skipped by a wildcard arm.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Fetch up to `max` messages from `stream`, new or reclaimable ones. The backend may block
    /// up to `wait` for new entries (zero: return at once). Answer with
    /// [`handle_fetched`](crate::LeaseEngine::handle_fetched) or
    /// [`handle_fetch_failed`](crate::LeaseEngine::handle_fetch_failed).
    Fetch {
        /// The stream to fetch from.
        stream: StreamId,
        /// The most messages the engine can take: free slots, plus `prefetch` room, at most
        /// `fetch_batch_size`.
        max: usize,
        /// How long the backend may wait for new entries.
        wait: Duration,
    },
    /// Start a handler invocation for the lease's message. Answer with
    /// [`handle_outcome`](crate::LeaseEngine::handle_outcome), also when it was cancelled.
    Run {
        /// The invocation to report the outcome of.
        invocation: InvocationId,
        /// The lease it runs under.
        lease: LeaseId,
    },
    /// Signal the invocation to stop; drop it if it does not finish within
    /// [`cancel_grace`](crate::Settings::cancel_grace). Its outcome is discarded, but must still
    /// be reported so its slot is freed.
    Cancel {
        /// The invocation to stop.
        invocation: InvocationId,
        /// Why.
        reason: CancelReason,
    },
    /// Renew these leases in one owner-checked, fenced batch. Answer with
    /// [`handle_renewed`](crate::LeaseEngine::handle_renewed) (a result per lease) or
    /// [`handle_renew_failed`](crate::LeaseEngine::handle_renew_failed).
    Renew {
        /// Matches the result to this batch.
        batch: RenewId,
        /// The leases to renew.
        leases: Vec<LeaseId>,
    },
    /// Acknowledge these finished leases (owner-checked, fenced). Answer with
    /// [`handle_acked`](crate::LeaseEngine::handle_acked).
    Ack {
        /// The leases to ack.
        leases: Vec<LeaseId>,
    },
    /// Give the lease back; others may take it once `delay` has passed (zero: at once).
    /// Answer with [`handle_released`](crate::LeaseEngine::handle_released).
    Release {
        /// The lease to release.
        lease: LeaseId,
        /// When others may take it.
        delay: Duration,
    },
    /// Move the message to the dead-letter stream and ack it, atomically. Answer with
    /// [`handle_dead_lettered`](crate::LeaseEngine::handle_dead_lettered).
    DeadLetter {
        /// The lease of the message.
        lease: LeaseId,
        /// Why, to be stored with the dead letter.
        reason: DeadLetterReason,
    },
    /// Shutdown is complete: no lease is held and no invocation runs. Emitted once.
    Drained,
}

/// Counters of what the engine did, for metrics and the shutdown report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Messages delivered by fetches (including duplicates and overflow).
    pub delivered: u64,
    /// Deliveries of a message already held: the new fence was adopted, nothing started.
    pub redelivered: u64,
    /// Deliveries beyond what was asked for, handed straight back.
    pub overflow: u64,
    /// Handler invocations started.
    pub invocations: u64,
    /// Invocations that returned `Pending` and were scheduled for a re-run.
    pub pending: u64,
    /// Failed attempts (retry, error, panic, max processing time).
    pub failures: u64,
    /// Messages acked.
    pub acked: u64,
    /// Leases released back to the backend.
    pub released: u64,
    /// Messages dead-lettered.
    pub dead_lettered: u64,
    /// Invocations cancelled.
    pub cancelled: u64,
    /// Leases a backend reported lost.
    pub lost: u64,
    /// Leases expired locally for lack of a successful renew.
    pub expired: u64,
    /// Leases given up after the shutdown deadline because the backend kept failing; they
    /// lapse on the backend after the claim timeout.
    pub abandoned: u64,
}
