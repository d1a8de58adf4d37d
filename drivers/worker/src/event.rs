//! What reaches the driver: results of the tasks it spawned, and the worker handle's requests.

use std::time::Duration;

use futures::channel::oneshot;
use leasehold_core::{
    BackendResult, Fetched, InvocationId, LeaseId, Outcome, RenewId, RenewResult, SettleResult,
    Stats, StreamId,
};

use crate::report::ShutdownReport;

/// Everything posted to the driver's inbox.
pub(crate) enum Event<P> {
    Fetched(StreamId, BackendResult<Vec<Fetched<P>>>),
    Outcome(InvocationId, Outcome),
    Renewed(RenewId, BackendResult<Vec<(LeaseId, RenewResult)>>),
    /// The leases of an ack call, and the backend's answer per lease (`None`: the call
    /// failed).
    Acked(StreamId, Vec<LeaseId>, Option<Vec<SettleResult>>),
    Released(LeaseId, SettleResult),
    DeadLettered(LeaseId, SettleResult),
    Shutdown(Duration, Option<oneshot::Sender<ShutdownReport>>),
    Stats(oneshot::Sender<Stats>),
}
