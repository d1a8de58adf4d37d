//! # leasehold-commands: a durable command queue on leasehold
//!
//! For work that *starts* quickly and *finishes* later: "provision a VM", "submit a batch job
//! and follow it to completion". A client [`submit`](CommandQueue::submit)s a command; a
//! [`CommandWorker`] picks it up and calls its handler's `execute`, which starts the work and
//! returns at once; the worker then calls `check_status` every `status_interval` until the work
//! ends. Statuses go SUBMITTED → RUNNING → SUCCEEDED | FAILED | CANCELLED; an operator can
//! list commands by status, cancel them, and retry FAILED ones ([below](#operating-a-queue)).
//!
//! What it is built to get right:
//! - **Nothing blocks dispatch, and live work is never re-run**: a RUNNING command keeps its
//!   stream lease (heartbeat-renewed) between checks and frees its invocation slot; another
//!   replica takes it over only if this one dies, and then *resumes* with `check_status`
//!   (never `execute` twice for a RUNNING command).
//! - **Observers see transitions within `status_interval`** (seconds), not the claim timeout;
//!   checks of many commands are spread over the interval.
//! - **Submit is atomic and idempotent**: state and stream entry are written together (one Lua
//!   script on Redis); submitting an existing id returns its state and enqueues nothing.
//! - **State writes are compare-and-set** on a version: a cancel is never overwritten by a late
//!   result or a RUNNING mark; a result that lost to a cancel is dropped (and counted), and
//!   the handler's `on_cancel` runs to stop the external work.
//! - **Cancel reaches the running handler** ([`CommandContext::stopped`]), and the command's
//!   lease is acked once it is CANCELLED.
//! - **Failures back off**: an error or panic is retried with the engine's jittered backoff and
//!   FAILED after `max_attempts`; an unknown type or undecodable params are FAILED at once.
//! - States expire after a TTL (default 7 days) refreshed on each write; Redis keys share a
//!   hash tag, so the queue works on Redis Cluster.
//!
//! - **Sharded by command id**, if asked (`RedisStoreConfig::shards`,
//!   `MemoryCommandStore::sharded`): a queue of `n` shards has a stream, states and status
//!   indexes per shard, each shard under its own hash tag (so on Redis Cluster they spread over
//!   the masters), and every key of one command lives in the shard of its id
//!   ([`Shards::for_key`](leasehold_core::Shards::for_key)), so submit, compare-and-set, cancel
//!   and retry stay one atomic script. A worker consumes every shard on one budget; listings
//!   and counts cover all shards. One shard is the unsharded layout, key for key.
//!
//! Stores: `MemoryCommandStore` (in process, feature `memory`, on by default) here, and
//! `RedisCommandStore` in `leasehold-redis` (its feature `commands`), which holds everything
//! that speaks Redis; a store of your own implements [`CommandStore`].
//!
//! ```
//! use std::time::Duration;
//! use leasehold_commands::{
//!     Command, CommandContext, CommandHandler, CommandQueue, HandlerError, MemoryCommandStore,
//!     Status, Step,
//! };
//! use leasehold_memory::{MemoryStream, StreamConfig};
//! use leasehold_tokio::TokioRuntime;
//!
//! /// "Provisions" a VM: the cloud is ready after a few status checks.
//! struct Provision;
//!
//! impl CommandHandler for Provision {
//!     type Params = String; // the VM's name
//!     type Output = String; // its address
//!
//!     async fn execute(&self, ctx: CommandContext, name: String) -> Result<Step<String>, HandlerError> {
//!         // Start the work, keyed by ctx.id() so a repeated execute is harmless; remember
//!         // what check_status needs.
//!         Ok(Step::running_with(format!("op-{}", ctx.id()))?)
//!     }
//!
//!     async fn check_status(&self, ctx: CommandContext, name: String) -> Result<Step<String>, HandlerError> {
//!         let operation: String = ctx.checkpoint()?.expect("execute stored it");
//!         assert!(operation.starts_with("op-"));
//!         Ok(Step::Succeeded(format!("{name}.internal:22")))
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = MemoryCommandStore::new(MemoryStream::new(StreamConfig::default())?);
//! let queue = CommandQueue::new(TokioRuntime::current(), store);
//! let worker = queue
//!     .worker()
//!     .handler("provision_vm", Provision)
//!     .status_interval(Duration::from_millis(20))
//!     .start()
//!     .await?;
//!
//! let submitted = queue.submit(Command::new("provision_vm", "web-1")?.with_id("vm-1")).await?;
//! let done = queue.wait(submitted.id(), Duration::from_secs(10)).await?;
//! assert_eq!(done.status, Status::Succeeded);
//! assert_eq!(queue.result::<String>("vm-1").await?.as_deref(), Some("web-1.internal:22"));
//! // Idempotent: the same id again enqueues nothing.
//! assert!(!queue.submit(Command::new("provision_vm", "web-1")?.with_id("vm-1")).await?.created);
//! worker.shutdown(Duration::from_secs(1)).await;
//! # Ok(())
//! # }
//! ```
//!
//! ## Operating a queue
//!
//! What an operator (or a command line on top of this API) sees and does:
//! - **List by status**: [`commands(status, page)`](CommandQueue::commands) reads one page
//!   of the commands in a status, oldest in it first, from an index per status that every
//!   state write moves the command between (in the same compare-and-set, the same Lua script
//!   on Redis: no key scan, and a command is never listed under a status it left). Page on
//!   with [`Listing::next_page`]; a [`Cursor`] also reads and prints as text (`<millis>:<id>`).
//!   Expired states drop out.
//! - **Show one**: [`command(id)`](CommandQueue::command) is the whole [`CommandState`]:
//!   status, parameters, result or error, timestamps, retries, and its latest
//!   [`attempts`](CommandState::attempts) (each with start, end, [`AttemptOutcome`] and error;
//!   at most [`MAX_ATTEMPTS_KEPT`]). States, pages and listings are serde-serializable.
//! - **Cancel**: [`cancel_command(id)`](CommandQueue::cancel_command) answers the CANCELLED
//!   state, or [`QueueError::NotFound`] / [`QueueError::AlreadyOver`] (with the status) for an
//!   unknown or finished command, which it leaves untouched.
//! - **Retry**: [`retry(id)`](CommandQueue::retry) puts a FAILED command back to SUBMITTED with
//!   a fresh attempt budget and enqueues it again, in one compare-and-set with its entry: a
//!   retry is never lost nor doubled, and of racing retries exactly one wins. Any other status
//!   is refused with [`QueueError::NotFailed`].
//!
//! ```
//! use std::time::Duration;
//! use leasehold_commands::{
//!     Command, CommandContext, CommandHandler, CommandQueue, HandlerError, MemoryCommandStore,
//!     Page, Status, Step,
//! };
//! use leasehold_memory::{MemoryStream, StreamConfig};
//! use leasehold_tokio::TokioRuntime;
//!
//! /// Fails until an operator retries it (say, once the quota was raised).
//! struct Deploy;
//!
//! impl CommandHandler for Deploy {
//!     type Params = String;
//!     type Output = ();
//!
//!     async fn execute(&self, ctx: CommandContext, _: String) -> Result<Step<()>, HandlerError> {
//!         Ok(match ctx.retries() {
//!             0 => Step::Failed("quota exceeded".into()),
//!             _ => Step::Succeeded(()),
//!         })
//!     }
//!
//!     async fn check_status(&self, _: CommandContext, _: String) -> Result<Step<()>, HandlerError> {
//!         Ok(Step::Running)
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let queue = CommandQueue::new(
//!     TokioRuntime::current(),
//!     MemoryCommandStore::new(MemoryStream::new(StreamConfig::default())?),
//! );
//! let worker = queue.worker().handler("deploy", Deploy).start().await?;
//! for app in ["web", "api"] {
//!     let id = queue.submit(Command::new("deploy", app)?.with_id(app)).await?.state.id;
//!     queue.wait(&id, Duration::from_secs(10)).await?;
//! }
//!
//! // Every FAILED command, a page at a time.
//! let mut failed = Vec::new();
//! let mut page = Page::first(50);
//! loop {
//!     let listing = queue.commands(Status::Failed, page).await?;
//!     failed.extend(listing.states.iter().cloned());
//!     match listing.next_page(50) {
//!         Some(next) => page = next,
//!         None => break,
//!     }
//! }
//! assert_eq!(failed.len(), 2);
//! assert_eq!(failed[0].attempts[0].error.as_deref(), Some("quota exceeded"));
//!
//! // Retry one: it runs again and succeeds; a second retry of it is refused.
//! let retried = queue.retry("web").await?;
//! assert_eq!((retried.status, retried.retries), (Status::Submitted, 1));
//! assert_eq!(queue.wait("web", Duration::from_secs(10)).await?.status, Status::Succeeded);
//! assert!(queue.retry("web").await.is_err());
//! let web = queue.command("web").await?.expect("kept for the TTL");
//! assert_eq!(web.attempts.len(), 2);
//! worker.shutdown(Duration::from_secs(1)).await;
//! # Ok(())
//! # }
//! ```
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod dispatch;
mod handler;
#[cfg(feature = "memory")]
mod memory;
pub mod meters;
mod queue;
mod signal;
mod state;
mod store;
mod worker;

use std::time::Duration;

pub use dispatch::CommandStats;
pub use handler::{CommandContext, CommandHandler, HandlerError, Step, StopReason};
#[cfg(feature = "memory")]
pub use memory::MemoryCommandStore;
pub use queue::{CommandQueue, QueueError, Submitted};
pub use state::{
    Attempt, AttemptOutcome, Command, CommandError, CommandState, Status, StatusError,
    MAX_ATTEMPTS_KEPT,
};
pub use store::{
    merge_listings, CancelFeed, CommandStore, Cursor, CursorError, Listing, Page, StatusCounts,
    StoreError, Submit,
};
pub use worker::{CommandWorker, CommandWorkerBuilder, CommandWorkerError};

/// How long a command's state is kept after its last write, unless configured: 7 days.
pub const DEFAULT_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

impl<S: CommandStore, R: leasehold_worker::Runtime> CommandQueue<S, R> {
    /// A worker builder for this queue, sharing its store and runtime.
    pub fn worker(&self) -> CommandWorkerBuilder<R, S> {
        CommandWorkerBuilder::from_shared(self.runtime().clone(), self.shared_store())
    }
}
