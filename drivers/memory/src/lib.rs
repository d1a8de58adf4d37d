//! # leasehold-memory: an in-process stream with the lease semantics of Redis Streams
//!
//! A [`MemoryStream`] is one stream with one consumer group, shared by any number of workers in
//! one process; each worker gets a [`MemoryBackend`] (a named consumer) that implements
//! [`leasehold_core::Backend`]. It behaves like the Redis backend, so tests, demos and the
//! simulator exercise the semantics production runs on:
//!
//! - **Ids** are `"0-{n}"`, `n` = 1, 2, 3, … in the order messages enter the stream (the Redis
//!   entry-id format with a zero millisecond part, deterministic across runs). They come from a counter, never from the
//!   payload: two equal payloads are two messages.
//! - **Pending list**: each delivered, unacknowledged message has an owner, a delivery count
//!   and an idle time (time since its last delivery or renew), like Redis's `XPENDING`.
//! - **Fetch** first reclaims messages idle for at least the claim timeout (like `XAUTOCLAIM`:
//!   the owner becomes the caller, the delivery count goes up by one), those lapsed longest
//!   first, so every lapsed message is reached in turn (one taken again goes behind all the
//!   others) and a fetch costs what it takes, not what has lapsed; then it delivers
//!   new messages (like `XREADGROUP … >`: delivery count 1). When both kinds are available each
//!   gets half of `max`, the odd slot alternating between them, and a share one kind cannot use
//!   goes to the other, so neither starves the other. Never more than `max`.
//! - **Fence = delivery count**, as on Redis: every takeover increments it, a renew does not.
//!   Renew, ack, release and dead-letter act only if the caller owns the message **and** the
//!   lease's fence equals its delivery count; otherwise the answer is `Lost` and nothing
//!   changes. So a late heartbeat cannot steal a message back and a stale ack cannot delete the
//!   new owner's delivery. Results come per lease, in order.
//! - **Ack** removes the message from the pending list and the stream (`XACK` + `XDEL`):
//!   a memory stream has exactly one consumer group, so no other group can still need it
//!   (fan-out over several groups is a Redis feature; see `leasehold-redis`'s `Retention`).
//!   **Release** with a delay keeps owner and count but makes the message claimable by anyone
//!   once the delay has passed (`XCLAIM … IDLE claim_timeout - delay`); delays are therefore
//!   capped at the claim timeout. **Dead-letter** appends the message, its id, the reason and
//!   its delivery count to an inspectable dead-letter stream ([`MemoryStream::dead_letters`])
//!   and acks it, in one step. Dead-letter ids are `"0-{n}"` from a counter of their own.
//! - **Inspection**: a [`MemoryInspector`] is the [`Inspector`](leasehold_core::Inspector) of
//!   the streams it is given by name: overview, pending entries and dead letters page by page,
//!   requeue and purge of dead letters, with the Redis inspector's semantics.
//! - **Delayed messages** ([`MemoryStream`] is a [`Publisher`](leasehold_core::Publisher)): a
//!   message published with a due time waits outside the stream, with id `"delayed:{n}"`
//!   (`n` = 1, 2, … from a counter of its own, the form the Redis backend uses), and is not
//!   counted by [`len`](MemoryStream::len). `Due::After(d)` is due `d` after the publish on the
//!   stream's clock; `Due::At(t)` becomes the delay from the system's wall clock to `t` at the
//!   publish (a time in the past: at once, like a message without due time). Every fetch first
//!   moves the messages due by then into the stream, in due order (publish order among equal
//!   due times), each with the next entry id like a publish: from then on they are new
//!   entries like any other, and a first delivery has delivery count 1. After each fetch,
//!   [`MemoryBackend`]'s fetch answer says how long until the next one is due
//!   ([`FetchAnswer::next_due`](leasehold_core::FetchAnswer::next_due)), so the worker
//!   fetches again then.
//! - **Deduplication**: while a key is within its time to live (from its first publish, on
//!   the stream's clock) a publish with it enqueues nothing and answers the first message's id
//!   with `duplicate: true`; after it, the key publishes again. Expired keys are dropped, oldest
//!   first, as later publishes come, so they do not pile up.
//! - **Sharded queues**: a [`MemoryQueue`] is a stream per shard on one clock, and a
//!   membership table its consumers heartbeat in ([`leasehold_core::Members`]: live = heard of
//!   within the ttl on the queue's clock), so several workers share its shards as on Redis.
//! - **Time** comes from an injectable [`Clock`]: [`SystemClock`] by default, [`ManualClock`]
//!   for deterministic tests and simulations.
//! - **Waiting**: when there is nothing to fetch, `fetch(max, wait)` waits up to `wait` for a
//!   publish, a release, a lease to lapse or a delayed message to be due. It waits on an `event-listener` notification and an
//!   `async-io` timer, both independent of any executor, so the backend runs under tokio, smol or
//!   a plain `block_on`. On a clock that is not real-time (such as [`ManualClock`]) it returns
//!   at once, since real waiting would not advance virtual time.
//!
//! Every operation is one short critical section on a mutex, so operations of several
//! consumers are atomic with respect to each other; a batch of publishes is one too. The
//! `*_now` methods of [`MemoryBackend`] and [`MemoryStream`] offer the same operations
//! synchronously.
//!
//! ## Example
//!
//! ```
//! use std::time::Duration;
//! use leasehold_core::{Backend, LeaseRef, RenewResult, SettleResult};
//! use leasehold_memory::{MemoryStream, StreamConfig};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Any executor will do: tokio, smol, or this minimal one.
//! futures_lite::future::block_on(async {
//!     let stream = MemoryStream::new(StreamConfig::new(Duration::from_secs(30)))?;
//!     let worker = stream.consumer("worker-1")?;
//!
//!     let id = worker.publish("resize image 42".into()).await?;
//!     let batch = worker.fetch(10, Duration::from_millis(100)).await?;
//!     assert_eq!(batch.len(), 1);
//!     let message = &batch[0];
//!     assert_eq!((&message.id, message.delivery_count), (&id, 1));
//!
//!     // The heartbeat: renew keeps the lease however long the handler runs.
//!     let lease_ref = LeaseRef::from(message);
//!     assert_eq!(worker.renew(&[lease_ref.clone()]).await?, [RenewResult::Kept]);
//!
//!     // Done: ack removes the message.
//!     assert_eq!(worker.ack(&[lease_ref]).await?, [SettleResult::Ok]);
//!     assert_eq!(worker.stream_len().await?, 0);
//!     Ok(())
//! })
//! # }
//! ```
//!
//! Delayed and deduplicated, on a manual clock:
//!
//! ```
//! use std::time::Duration;
//! use leasehold_core::{Backend, Dedupe, Due, Outgoing};
//! use leasehold_memory::{ManualClock, MemoryStream, StreamConfig};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let clock = ManualClock::new();
//! let stream = MemoryStream::with_clock(StreamConfig::new(Duration::from_secs(30)), clock.clone())?;
//! let worker = stream.consumer("worker-1")?;
//! let remind = || {
//!     Outgoing::new("remind order 7".into())
//!         .with_due(Due::After(Duration::from_secs(60)))
//!         .with_dedupe(Dedupe::new("remind-7", Duration::from_secs(3600)))
//! };
//! let first = stream.publish_with_now(remind())?;
//! assert_eq!(first.id.as_str(), "delayed:1");
//! // A retried publish within the key's ttl enqueues nothing.
//! let again = stream.publish_with_now(remind())?;
//! assert!(again.duplicate && again.id == first.id);
//!
//! let empty = worker.fetch_now(10);
//! assert!(empty.is_empty());
//! assert_eq!(empty.next_due, Some(Duration::from_secs(60)));
//! clock.advance(Duration::from_secs(60));
//! let due = worker.fetch_now(10);
//! assert_eq!((due[0].id.as_str(), due[0].delivery_count), ("0-1", 1));
//! # Ok(())
//! # }
//! ```
#![forbid(unsafe_code)]

mod backend;
mod clock;
mod config;
mod id;
mod inspect;
mod inspector;
mod publish;
mod queue;
mod store;
mod stream;
mod sync;
mod wakeup;

pub use backend::MemoryBackend;
pub use clock::{Clock, ManualClock, SystemClock};
pub use config::{MemoryError, StreamConfig};
pub use inspect::{DeadLetter, PendingInfo};
pub use inspector::MemoryInspector;
pub use queue::MemoryQueue;
pub use stream::MemoryStream;

/// The payload type of this backend: cloning it bumps a reference count, no copy.
pub use bytes::Bytes;
