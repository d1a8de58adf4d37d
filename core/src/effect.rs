//! What the engine asks its driver to do.

use std::time::{Duration, Instant};

use crate::backend::LeaseRef;
use crate::types::{
    AckId, CancelReason, DeadLetterReason, InvocationId, LeaseId, LossReason, RenewId, StreamId,
};

/// An effect for the driver to execute, drained with
/// [`LeaseEngine::poll_effect`](crate::LeaseEngine::poll_effect).
///
/// Each effect carries everything its execution needs: the stream to call, the backend's
/// [`LeaseRef`]s (message id and fence), the payload of an invocation. A driver never looks a
/// lease up and never regroups: it makes the call the effect names and reports the call's result
/// through the matching `handle_*` method, or its failure (with the
/// [`ErrorKind`](crate::ErrorKind)) through the matching `handle_*_failed`. Every effect except
/// `Cancel`, `LeaseValid`, the notices `Failed` and `Lost`, `Halt` and `Drained` expects exactly
/// one such report; a driver that gives up on a call (a timeout) reports it as failed.
///
/// Exhaustive on purpose: a driver must execute every effect, so a new one should fail its
/// build rather than be skipped by a wildcard arm.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect<P> {
    /// Fetch up to `max` messages from `stream`, new or reclaimable ones. The backend may block
    /// up to `wait` for new entries (zero: return at once), and must not take entries later:
    /// their leases count from the fetch's send time, and `wait` (never more than
    /// [`Settings::max_fetch_wait`](crate::Settings::max_fetch_wait)) leaves them most of it. Answer with
    /// [`handle_fetched`](crate::LeaseEngine::handle_fetched) or
    /// [`handle_fetch_failed`](crate::LeaseEngine::handle_fetch_failed).
    Fetch {
        /// The stream to fetch from.
        stream: StreamId,
        /// The most messages the engine can take: free slots, plus `prefetch` room, at most
        /// `fetch_batch_size`.
        max: usize,
        /// How long the backend may wait for new entries: at most `poll_interval` and
        /// `heartbeat_interval`, and never past a delayed message's due time or a re-poll.
        wait: Duration,
    },
    /// Start a handler invocation. Answer with
    /// [`handle_outcome`](crate::LeaseEngine::handle_outcome), also when it was cancelled.
    Run(Invocation<P>),
    /// Signal the invocation to stop; drop it if it does not finish within
    /// [`cancel_grace`](crate::Settings::cancel_grace). Its outcome must still be reported, so
    /// its slot is freed, and is discarded, except a `Done` after
    /// [`CancelReason::LeaseExpired`]: the engine may still send its ack, fenced (see
    /// [`handle_outcome`](crate::LeaseEngine::handle_outcome)). A driver reports such a `Done`
    /// as it is.
    Cancel {
        /// The invocation to stop.
        invocation: InvocationId,
        /// Why.
        reason: CancelReason,
    },
    /// A running invocation's lease was confirmed again (a renew or a redelivery): it now
    /// counts as valid until `until`, which the handler's `lease_valid()` should answer
    /// against.
    LeaseValid {
        /// The invocation whose lease it is.
        invocation: InvocationId,
        /// The lease's new local expiry.
        until: Instant,
    },
    /// Renew these leases of `stream` in one owner-checked, fenced call. Answer with
    /// [`handle_renewed`](crate::LeaseEngine::handle_renewed) (a result per lease) or
    /// [`handle_renew_failed`](crate::LeaseEngine::handle_renew_failed).
    Renew {
        /// Matches the answer to this call.
        batch: RenewId,
        /// The stream whose backend to call.
        stream: StreamId,
        /// The leases, in the order of `lease_refs`.
        leases: Vec<LeaseId>,
        /// What the backend needs for each lease.
        lease_refs: Vec<LeaseRef>,
    },
    /// Acknowledge these finished leases of `stream` in one owner-checked, fenced call. At most
    /// one is in flight per stream: acks that come due meanwhile wait for its answer and go out
    /// together. Answer with [`handle_acked`](crate::LeaseEngine::handle_acked) or
    /// [`handle_ack_failed`](crate::LeaseEngine::handle_ack_failed).
    Ack {
        /// Matches the answer to this call.
        batch: AckId,
        /// The stream whose backend to call.
        stream: StreamId,
        /// The leases, in the order of `lease_refs`.
        leases: Vec<LeaseId>,
        /// What the backend needs for each lease.
        lease_refs: Vec<LeaseRef>,
    },
    /// Give the lease back; others may take it once `delay` has passed (zero: at once).
    /// Answer with [`handle_released`](crate::LeaseEngine::handle_released).
    Release {
        /// The stream whose backend to call.
        stream: StreamId,
        /// The lease to release.
        lease: LeaseId,
        /// What the backend needs for it.
        lease_ref: LeaseRef,
        /// When others may take it.
        delay: Duration,
    },
    /// Move the message to the dead-letter stream and ack it, atomically. Answer with
    /// [`handle_dead_lettered`](crate::LeaseEngine::handle_dead_lettered).
    DeadLetter {
        /// The stream whose backend to call.
        stream: StreamId,
        /// The lease of the message.
        lease: LeaseId,
        /// What the backend needs for it.
        lease_ref: LeaseRef,
        /// Why, to be stored with the dead letter.
        reason: DeadLetterReason,
    },
    /// An invocation failed (an error, a panic, a `Retry`, past `max_processing_time`) and its
    /// message is handed back, to be delivered again after `retry_in` (a `Release` follows).
    /// On its last allowed delivery a `DeadLetter` follows instead, with the error in its
    /// reason. Nothing to execute: it is there to be logged.
    Failed {
        /// The stream the message came from.
        stream: StreamId,
        /// The message and the fence of its delivery.
        lease_ref: LeaseRef,
        /// How often the backend has delivered it.
        delivery_count: u32,
        /// What went wrong.
        error: String,
        /// When it may be delivered again.
        retry_in: Duration,
    },
    /// The engine let go of a held lease without settling it ([`LossReason`]); a running
    /// invocation of it is cancelled by a `Cancel` that follows. Nothing to execute: it is
    /// there to be counted and logged.
    Lost {
        /// The stream the message came from.
        stream: StreamId,
        /// The message and the fence of the delivery that was lost.
        lease_ref: LeaseRef,
        /// Why.
        reason: LossReason,
        /// How much local validity the lease still had at that moment (zero once expired): a
        /// takeover with a large margin means the backend's clock or another consumer did not
        /// honour the lease.
        margin: Duration,
    },
    /// A fatal backend error (retrying cannot help) stopped the intake of `stream`: nothing
    /// more is fetched from it. Its held leases are still settled, or given up when their own
    /// calls fail fatally. Emitted once per stream, and not after `Drained` (a renew answered
    /// after shutdown completed halts silently); surface it to the application.
    Halt {
        /// The stream that stopped.
        stream: StreamId,
    },
    /// Shutdown is complete: no lease is held and no invocation runs. Emitted once.
    Drained,
}

/// One handler invocation to start, with everything the handler is given. A driver carries it
/// whole to the handler, its payload split off with [`into_parts`](Self::into_parts).
#[derive(Debug, Clone, PartialEq)]
pub struct Invocation<P> {
    /// Identifies it, to report its outcome.
    pub id: InvocationId,
    /// The stream the message came from.
    pub stream: StreamId,
    /// The message's id and the fence of the delivery it runs under.
    pub lease_ref: LeaseRef,
    /// How often the backend has delivered the message.
    pub delivery_count: u32,
    /// Which invocation of this delivery it is (1 for the first).
    pub attempt: u32,
    /// Until when the lease counts as valid locally (later `LeaseValid` effects move it).
    pub valid_until: Instant,
    /// The message's payload.
    pub payload: P,
}

impl<P> Invocation<P> {
    /// Splits off the payload, which goes to the handler, from what the driver keeps while the
    /// invocation runs: the rest moves on as one value instead of being copied field by field.
    pub fn into_parts(self) -> (Invocation<()>, P) {
        let Self {
            id,
            stream,
            lease_ref,
            delivery_count,
            attempt,
            valid_until,
            payload,
        } = self;
        let invocation = Invocation {
            id,
            stream,
            lease_ref,
            delivery_count,
            attempt,
            valid_until,
            payload: (),
        };
        (invocation, payload)
    }
}

/// What one stream occupies right now, from [`LeaseEngine::load`](crate::LeaseEngine::load).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamLoad {
    /// Leases held: running, waiting for a slot or a re-poll, or being settled.
    pub held: usize,
    /// Invocations running, including cancelled ones that have not reported yet.
    pub running: usize,
    /// Held leases without a running invocation: prefetched and waiting for a slot, waiting
    /// for a re-poll, or being settled.
    pub waiting: usize,
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
    /// Invocations that returned `Pending` and were scheduled to be invoked again.
    pub pending: u64,
    /// Failed attempts (retry, error, panic, max processing time).
    pub failures: u64,
    /// Messages acked.
    pub acked: u64,
    /// Of `acked`: acks the backend confirmed after the lease had expired locally (it was
    /// unreachable past the claim timeout, but nobody took the message over): work not redone.
    pub acked_late: u64,
    /// Of `acked_late`: acks of invocations still running when their lease expired locally.
    /// Cancelled then (and counted in `expired`), they returned `Done` within the cancel grace,
    /// and the backend confirmed the fenced ack: nobody had taken the message over, so it does
    /// not run again.
    pub acked_after_expiry: u64,
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
    /// Leases given up: after the shutdown deadline because the backend kept failing, or at
    /// once when a call for them failed fatally. They lapse on the backend after the claim
    /// timeout.
    pub abandoned: u64,
    /// Of `abandoned`: leases whose handler returned `Done` but whose ack the backend never
    /// confirmed (the shutdown deadline passed while it failed, or it failed fatally). The
    /// message runs again after the claim timeout, unless the last ack did land unanswered.
    pub abandoned_acks: u64,
    /// Streams whose intake a fatal backend error stopped.
    pub halted: u64,
    /// Answers about leases the engine let go of meanwhile, or sent with a fence that a
    /// redelivery replaced since: expected when answers race with expiry and redeliveries, and
    /// ignored.
    pub stale: u64,
    /// Inputs the engine never asked for, or had already been given (an outcome reported
    /// twice, an answer for a call that is not in flight): a defect of the driver, ignored.
    /// A correct driver keeps it at zero.
    pub unexpected: u64,
}
