//! # leasehold: at-least-once consumers with per-message heartbeat leases
//!
//! A worker consumes a stream with a consumer group. Handlers run concurrently (bounded), never
//! on the poll loop. Every message a worker holds has a lease that a batched, owner-checked
//! heartbeat renews well inside the claim timeout, so a live worker is never re-run elsewhere
//! however long its handler takes, while a crashed worker's leases lapse and another replica
//! takes over. Work that is not finished yet returns [`Outcome::Pending`]: it keeps its lease
//! and is invoked again after `repoll_interval`. Every lease operation is fenced: a worker that
//! lost a lease can neither renew it back nor ack it.
//!
//! ```
//! use std::time::Duration;
//!
//! use leasehold::memory::{MemoryStream, StreamConfig};
//! use leasehold::{Config, Delivery, Outcome};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize)]
//! struct Resize {
//!     image: u64,
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // A stream in this process; `leasehold::redis::RedisBackend` is the same on Redis.
//! let stream = MemoryStream::new(StreamConfig::new(Duration::from_secs(60)))?;
//! stream.publish(serde_json::to_vec(&Resize { image: 42 })?);
//!
//! let worker = leasehold::tokio::worker()
//!     .config(Config::default().concurrency(8)) // the claim timeout comes from the stream
//!     .stream("images", stream.consumer("worker-1")?, |delivery: Delivery<Resize>| async move {
//!         if !delivery.lease_valid() {
//!             return Outcome::retry(); // lost it while stalled: commit nothing
//!         }
//!         let image = delivery.message().image;
//!         println!("resizing image {image} (attempt {})", delivery.attempt());
//!         Outcome::Done // or Pending (invoke again later), retry(), reject(why)
//!     })
//!     .start()?;
//!
//! while !stream.is_empty() {
//!     tokio::time::sleep(Duration::from_millis(10)).await;
//! }
//! let report = worker.shutdown(Duration::from_secs(30)).await;
//! assert_eq!(report.acked, 1);
//! # Ok(())
//! # }
//! ```
//!
//! ## What is here
//!
//! | path | feature | what |
//! |---|---|---|
//! | [`Config`], [`Delivery`], [`Outcome`], [`Worker`], ... | always | the worker API, on any runtime |
//! | [`Producer`], [`PublishOptions`] | always | typed publishing: batches, delays, deduplication |
//! | [`tokio::worker`], [`tokio::shutdown_signal`] | `tokio` (default) | a worker builder on tokio; Ctrl-C or `SIGTERM` to stop it on |
//! | [`smol::worker`] | `smol` | a worker builder on smol |
//! | [`memory`] | `memory` (default) | the in-process backend, with the lease semantics of Redis Streams |
//! | [`redis`] | `redis` | the Redis Streams backend |
//! | [`commands`] | `commands` | the command queue: submit, track and cancel long-running commands (its Redis store with `redis` too) |
//! | `tls` | `tls` | `rediss://` URLs |
//! | `Servers::cluster` | `cluster` | Redis Cluster |
//! | `Servers::sentinel` | `sentinel` | Redis Sentinel: the master found through the sentinels, followed through a failover |
//! | [`core`] | always | the sans-IO engine and the backend SPI, to embed the engine or write a backend |
//!
//! The focused crates this one gathers (`leasehold-core`, `leasehold-worker`,
//! `leasehold-tokio`, `leasehold-smol`, `leasehold-memory`, `leasehold-redis`,
//! `leasehold-commands`) are there for those who embed the engine or write a backend; an
//! application needs only this one.
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub use leasehold_core::{
    CancelReason, Config, ConfigError, DeadLetterReason, DelayedSummary, Fence, MembershipConfig,
    MembershipError, MessageId, Published, RetryPolicy, Settings, ShardError, Shards, Stats,
};
pub use leasehold_worker::{
    consume, Cancellation, Codec, CodecError, Decode, Delivery, Encode, HaltedStream, Health,
    IntoAck, IntoOutcome, Json, Outcome, Placed, Producer, PublishError, PublishOptions, Raw,
    Runtime, ShardCountError, ShardedProducer, ShutdownReport, Snapshot, StreamSnapshot, Worker,
    WorkerBuilder, WorkerError,
};

/// The names of the metrics workers record through the [`metrics`](https://docs.rs/metrics)
/// facade (install a recorder, e.g. a Prometheus exporter, before starting workers).
pub mod meters {
    pub use leasehold_worker::meters::*;
}

/// The sans-IO lease engine and the backend SPI ([`core::Backend`]): for embedding the engine
/// in another executor, or writing a backend of your own.
pub mod core {
    pub use leasehold_core::*;
}

#[cfg(feature = "tokio")]
mod signal;

/// Workers on tokio, and [`shutdown_signal`](tokio::shutdown_signal) to stop them on Ctrl-C or
/// `SIGTERM`.
#[cfg(feature = "tokio")]
pub mod tokio {
    pub use crate::signal::{shutdown_signal, Signal};
    pub use leasehold_tokio::{worker, TokioRuntime};
}

/// Workers on smol.
#[cfg(feature = "smol")]
pub mod smol {
    pub use leasehold_smol::{worker, SmolRuntime};
}

/// The in-process backend: one stream and consumer group shared by workers in this process,
/// with the lease semantics of Redis Streams.
#[cfg(feature = "memory")]
pub mod memory {
    pub use leasehold_memory::{
        Bytes, Clock, DeadLetter, ManualClock, MemoryBackend, MemoryError, MemoryInspector,
        MemoryQueue, MemoryStream, PendingInfo, StreamConfig, SystemClock,
    };
}

/// The Redis Streams backend: fenced, owner-checked leases in Lua scripts.
///
/// An entry is removed only once every consumer group of its stream has delivered and acked
/// it ([`Retention`](redis::Retention), default `Consumed`), so several services may each read
/// one stream with their own group. A group sees what the stream holds when it is created and
/// all published after: create it before publishing what it must see, or keep a history with
/// `Retention::keep`.
#[cfg(feature = "redis")]
pub mod redis {
    pub use leasehold_redis::{
        members_key, ConnectError, PublisherConfig, RedisBackend, RedisConfig, RedisConfigError,
        RedisInspector, RedisPublisher, Retention, Servers, WaitReplicas,
    };
}

/// The command queue: commands that start quickly and finish later, followed to completion.
/// With `redis` too, its Redis store (`RedisCommandStore`, `RedisStoreConfig`) is here beside
/// the in-process one.
#[cfg(feature = "commands")]
pub mod commands {
    pub use leasehold_commands::*;
    #[cfg(feature = "redis")]
    pub use leasehold_redis::{RedisCommandStore, RedisStoreConfig};
}

/// The web dashboard: streams, lease health, dead letters and command queues, live, with
/// requeue, purge, cancel and retry.
#[cfg(feature = "dashboard")]
pub mod dashboard {
    pub use leasehold_dashboard::*;
}

/// The README's code blocks, compiled as doc tests so they cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeExamples;

/// The guide's code blocks, compiled as doc tests so they cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../GUIDE.md")]
pub struct GuideExamples;
