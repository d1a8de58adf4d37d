//! The store SPI: where command states live, next to the stream that carries the commands.

use std::future::Future;
use std::pin::Pin;

use futures::Stream;
use leasehold_core::Backend;

use crate::state::CommandState;

/// A store call that failed: the backend SPI's error, transient (worth retrying: the worker
/// retries with backoff) or fatal (configuration, authentication, corrupt data).
pub type StoreError = leasehold_core::BackendError;

/// What an atomic submit did.
#[derive(Debug, Clone, PartialEq)]
pub enum Submit {
    /// The state was written and the command enqueued, together.
    Created,
    /// A command with this id exists: nothing was written or enqueued; here is its state.
    Exists(Box<CommandState>),
}

/// A stream of command ids that were just cancelled (a hint: missing one is harmless).
pub type CancelFeed = Pin<Box<dyn Stream<Item = String> + Send>>;

/// Where a command queue keeps its states and its stream.
///
/// Implementations must make [`submit`](Self::submit) atomic (state and stream entry written
/// together, or neither) and [`compare_and_set`](Self::compare_and_set) a true compare-and-set
/// on the version, and must refresh the state's TTL on every write.
pub trait CommandStore: Send + Sync + 'static {
    /// The queue's name: the `queue` label of the command metrics, and the stream name of
    /// its workers (in their logs and metrics). Default: `commands`.
    fn queue(&self) -> &str {
        "commands"
    }

    /// The stream backend a worker consumes the queue's entries with.
    type Backend: Backend<Payload = Self::Payload>;
    /// The backend's payload type.
    type Payload: AsRef<[u8]> + Clone + Send + Sync + 'static;

    /// Writes `state` (version 1) and enqueues `entry` for it, unless `state.id` exists.
    fn submit(
        &self,
        state: &CommandState,
        entry: &[u8],
    ) -> impl Future<Output = Result<Submit, StoreError>> + Send;

    /// The state of command `id`, if it exists (and has not expired).
    fn load(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<CommandState>, StoreError>> + Send;

    /// Writes `state` if the stored version is `state.version - 1`; returns whether it did. A
    /// missing (expired) state is a conflict.
    fn compare_and_set(
        &self,
        state: &CommandState,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Tells every worker that command `id` was just cancelled (best effort).
    fn announce_cancel(&self, id: &str) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// A feed of [`announce_cancel`](Self::announce_cancel)ed ids. It may end (a dropped
    /// connection); the worker then subscribes again.
    fn cancels(&self) -> impl Future<Output = Result<CancelFeed, StoreError>> + Send;

    /// A stream consumer for one worker, whose claim timeout is `claim_timeout`.
    fn consumer(
        &self,
        claim_timeout: std::time::Duration,
    ) -> impl Future<Output = Result<Self::Backend, StoreError>> + Send;
}
