//! What reaches the driver: results of the tasks it spawned, and the worker handle's requests.

use std::time::{Duration, Instant};

use futures::channel::oneshot;
use leasehold_core::{
    AckId, BackendResult, FetchAnswer, InvocationId, LeaseId, Outcome, RenewId, RenewResult,
    SettleResult, StreamId,
};

use crate::meters::Dead;
use crate::report::{ShutdownReport, Snapshot};

/// Everything posted to the driver's inbox. A call's result comes with what the engine needs
/// to take it back (the effect's batch or lease) and the stream, to say where a failure was;
/// calls whose time is measured carry the instant they were sent.
pub(crate) enum Event<P> {
    Fetched(StreamId, Instant, BackendResult<FetchAnswer<P>>),
    Outcome(InvocationId, Outcome),
    Renewed(
        RenewId,
        StreamId,
        Instant,
        Vec<LeaseId>,
        BackendResult<Vec<RenewResult>>,
    ),
    Acked(
        AckId,
        StreamId,
        Vec<LeaseId>,
        BackendResult<Vec<SettleResult>>,
    ),
    Released(LeaseId, StreamId, BackendResult<SettleResult>),
    DeadLettered(LeaseId, StreamId, Dead, BackendResult<SettleResult>),
    Shutdown(Duration, Option<oneshot::Sender<ShutdownReport>>),
    Snapshot(oneshot::Sender<Snapshot>),
    /// A membership heartbeat's answer: the sharded queue's live members.
    Members(BackendResult<Vec<String>>),
}
