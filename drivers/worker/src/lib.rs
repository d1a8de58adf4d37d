//! # leasehold-worker: the driver loop and the worker API, written once
//!
//! This crate runs [`leasehold_core::LeaseEngine`] for real: one driver task owns the engine,
//! executes its effects as concurrent tasks (handlers, fetches, renews, acks each on their own,
//! so a slow renew never delays dispatch and a slow handler never delays a renew), feeds the
//! results back, and sleeps until the engine's next timeout. It is generic over a [`Runtime`]
//! (spawn, sleep, now) and a [`Backend`](leasehold_core::Backend); `leasehold-tokio` and
//! `leasehold-smol` plug in their runtime.
//!
//! Handlers are `async fn(Delivery<M>) -> Outcome` (or `()`, or a `Result` of either). They run
//! concurrently up to `concurrency`, get a [`Cancellation`] they can await, and can ask
//! [`Delivery::lease_valid`] right before a side effect. A panic is caught and counts as a
//! failed attempt. A cancelled handler is dropped if it does not stop within the cancel grace,
//! and its result is discarded, except a `Done` within the grace after its lease expired
//! locally: its ack is sent, fenced, and succeeds only if nobody took the message over.
#![forbid(unsafe_code)]

mod cancel;
// Also built under loom, where only its own loom tests use it.
#[cfg_attr(loom, allow(dead_code))]
mod queue;
mod sync;

pub use cancel::Cancellation;
pub use leasehold_core as core;
pub use leasehold_core::{CancelReason, Config, Outcome, RetryPolicy};

// Under `--cfg loom` only the completion race and the invocation queue are built: the rest needs
// a real async stack.
#[cfg(not(loom))]
mod codec;
#[cfg(not(loom))]
mod consume;
#[cfg(not(loom))]
mod delivery;
#[cfg(not(loom))]
mod dispatch;
#[cfg(not(loom))]
mod driver;
#[cfg(not(loom))]
mod event;
#[cfg(not(loom))]
mod health;
#[cfg(not(loom))]
mod inbox;
#[cfg(not(loom))]
pub mod meters;
#[cfg(not(loom))]
mod producer;
#[cfg(not(loom))]
mod report;
#[cfg(not(loom))]
mod runtime;
#[cfg(not(loom))]
mod sharded;
#[cfg(not(loom))]
mod sharded_producer;
#[cfg(not(loom))]
mod worker;

#[cfg(not(loom))]
pub use codec::{Codec, CodecError, Decode, Encode, Json, Raw};
#[cfg(not(loom))]
pub use consume::{consume, IntoAck};
#[cfg(not(loom))]
pub use delivery::{Delivery, IntoOutcome};
#[cfg(not(loom))]
pub use dispatch::panic_message;
#[cfg(not(loom))]
pub use health::Health;
#[cfg(not(loom))]
pub use producer::{Producer, PublishError, PublishOptions};
#[cfg(not(loom))]
pub use report::{HaltedStream, ShutdownReport, Snapshot, StreamSnapshot};
#[cfg(not(loom))]
pub use runtime::{BoxFuture, Runtime};
#[cfg(not(loom))]
pub use sharded_producer::{Placed, ShardCountError, ShardedProducer};
#[cfg(not(loom))]
pub use worker::{Worker, WorkerBuilder, WorkerError};
