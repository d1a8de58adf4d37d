//! # leasehold-core: the sans-IO lease engine
//!
//! A worker consumes a stream: it fetches messages, runs a handler for each, and acks the ones
//! that are done. Each message it holds is *leased*: a batched, owner-checked heartbeat renews
//! every lease well inside the claim timeout, so no other replica takes a message whose handler
//! is still running, however long it runs; a crashed worker stops renewing and its leases lapse,
//! so another replica takes over. Work that is not finished yet ([`Outcome::Pending`]) keeps its
//! lease and is re-invoked after `repoll_interval`, not after the claim timeout.
//!
//! [`LeaseEngine`] decides all of that and does none of it. It never reads a clock, sleeps,
//! spawns or does I/O: the caller passes `now` (a monotonic [`Instant`](std::time::Instant)) and
//! events in through `handle_*` methods, drains [`Effect`]s with
//! [`poll_effect`](LeaseEngine::poll_effect), and calls
//! [`handle_timeout`](LeaseEngine::handle_timeout) when [`poll_timeout`](LeaseEngine::poll_timeout)
//! has passed. The same inputs always give the same effects (retry jitter comes from
//! [`Config::seed`]), so it can be tested on explicit instants, far faster than real time, and
//! embedded in any executor.
//!
//! What it guarantees, whatever the order of inputs:
//! 1. running invocations ≤ `concurrency`, held leases ≤ `max_leases`, and no fetch while full
//!    (slots and `prefetch` room; an adaptive prefetch, the default, is decided from the
//!    instants of the inputs alone: see [`Config::prefetch`]);
//! 2. at most one invocation per message at a time, also when a held message is delivered again;
//! 3. an ack only after `Done`, never for a lease known lost (a renew or a settle answered
//!    `Lost`: a takeover); a `Done` whose lease expired locally (the backend was unreachable)
//!    keeps its fenced ack as a *late ack*, no longer held, retried with backoff until the
//!    backend confirms it (the work is not redone) or refuses it (taken over: only then is the
//!    result discarded), at most `max_leases` of them (beyond, it is let go of as expired).
//!    That holds for a `Done` reported before the expiry, and for one its cancelled invocation
//!    returns within the cancel grace after it ([`Stats::acked_after_expiry`]);
//! 4. every held lease is in a renew at least every `heartbeat_interval`, one round at a time (an
//!    unanswered round delays the next), except while its release is in flight;
//! 5. a lease without a successful renew for `claim_timeout - margin` (from the renew's *send*
//!    time) is dropped: its invocation is cancelled, and its result is void unless it is a
//!    `Done` acked late (guarantee 3); no fetch lets the backend block longer than
//!    `heartbeat_interval`, so no delivery expires on its way;
//! 6. after [`Effect::Drained`] no lease is held and no late ack is pending: each was
//!    confirmed, refused (reported lost) or given up after the shutdown deadline (counted in
//!    [`Stats::abandoned`] and [`Stats::abandoned_acks`]);
//! 7. `poll_timeout` is in the future whenever nothing can happen now;
//! 8. every event costs O(1) amortized (O(log n) at worst), a heartbeat O(n) once.
//!
//! A stream unassigned with [`handle_assignment`](LeaseEngine::handle_assignment) (a shard of a
//! sharded queue that other workers fetch from, see [`Membership`]) is never fetched from, and
//! its held leases are served by these rules to the end.
//!
//! ## Driving it by hand
//!
//! A driver is a loop: feed inputs, execute effects, sleep until the timeout. Here the "backend"
//! is a vector, handlers run inline, and time is simulated, so the whole story runs instantly:
//!
//! ```
//! use std::collections::VecDeque;
//! use std::time::{Duration, Instant};
//! use leasehold_core::*;
//!
//! let config = Config::default().concurrency(2);
//! let mut now = Instant::now();
//! let mut engine = LeaseEngine::<String>::new(&config, now)?;
//!
//! // A toy backend: a queue of (id, payload); a message's first delivery has fence 1.
//! let mut queue: VecDeque<(u64, String)> =
//!     (1..=5).map(|i| (i, format!("job {i}"))).collect();
//! let mut acked = Vec::new();
//!
//! 'drive: loop {
//!     while let Some(effect) = engine.poll_effect() {
//!         match effect {
//!             Effect::Fetch { stream, max, .. } => {
//!                 let n = max.min(queue.len());
//!                 let batch = queue
//!                     .drain(..n)
//!                     .map(|(id, payload)| Fetched::new(id.into(), payload, 1, Fence(1)));
//!                 engine.handle_fetched(now, stream, batch.collect());
//!             }
//!             Effect::Run(invocation) => {
//!                 // The handler. "job 3" is not finished on its first invocation.
//!                 let outcome = if invocation.payload == "job 3" && invocation.attempt == 1 {
//!                     Outcome::Pending
//!                 } else {
//!                     Outcome::Done
//!                 };
//!                 engine.handle_outcome(now, invocation.id, outcome);
//!             }
//!             Effect::Renew { batch, leases, .. } => {
//!                 let kept = leases.into_iter().map(|id| (id, RenewResult::Kept));
//!                 engine.handle_renewed(now, batch, kept);
//!             }
//!             Effect::Ack { batch, leases, lease_refs, .. } => {
//!                 acked.extend(lease_refs.iter().map(|lease_ref| lease_ref.id.to_string()));
//!                 engine.handle_acked(now, batch, leases.into_iter().map(|id| (id, SettleResult::Ok)));
//!                 if acked.len() == 5 {
//!                     // All done: shut down; running handlers would get the grace period.
//!                     engine.handle_shutdown(now, now + engine.settings().shutdown_grace);
//!                 }
//!             }
//!             Effect::LeaseValid { .. } => {} // a handler's lease_valid() would learn of it
//!             Effect::Drained => break 'drive,
//!             other => unreachable!("no failures in this story: {other:?}"),
//!         }
//!     }
//!     // Sleep until the next timer (a real driver would await it, or an input).
//!     now = engine.poll_timeout().expect("a timer is pending while work remains");
//!     engine.handle_timeout(now);
//! }
//! // "job 3" was re-invoked after `repoll_interval` (1 s) and finished last.
//! assert_eq!(acked, ["1", "2", "4", "5", "3"]);
//! assert_eq!(engine.stats().invocations, 6);
//! assert_eq!(engine.held(), 0);
//! # Ok::<(), ConfigError>(())
//! ```
//!
//! Real drivers (tokio, smol) execute effects concurrently: fetches, renews and handlers run as
//! separate tasks and report back through the same `handle_*` methods.
//!
//! The story above never fails. [`examples/every_effect.rs`][every_effect] drives the engine
//! through all twelve effects the same way, on explicit instants: a handler error (`Failed`,
//! then `Release`), a message failing its last allowed delivery (`DeadLetter`), a renew
//! answered `Lost` while the handler runs (`Lost`, then `Cancel`), a confirmed lease
//! (`LeaseValid`), a fatal fetch error (`Halt`), fetches that wait, and shutdown with one
//! waiting (`Drained`). A test runs it and fails if any effect is not reached.
//!
//! [every_effect]: https://docs.rs/crate/leasehold-core/latest/source/examples/every_effect.rs
//!
//! ## Shutdown with a fetch outstanding
//!
//! After [`handle_shutdown`](LeaseEngine::handle_shutdown) the engine asks for no more fetches,
//! but [`Effect::Drained`] is held back while a fetch it asked for earlier is unanswered, past
//! the shutdown deadline and with no lease held. A driver that stops waiting for a fetch (drops
//! the backend call) must still answer it: with
//! [`handle_fetched`](LeaseEngine::handle_fetched) and what the call got (nothing, when it was
//! dropped: a dropped fetch takes nothing, by the [`Backend::fetch`] contract), or with
//! [`handle_fetch_failed`](LeaseEngine::handle_fetch_failed) and [`ErrorKind::Transient`] (a
//! fatal kind would also report the stream halted). Messages that arrive during shutdown are
//! released at once, never run; ones that arrive after their lease's local validity are let go
//! as expired, and lapse on the backend after the claim timeout.
//!
//! ## Cancelling work that cannot be dropped
//!
//! [`Effect::Cancel`] asks an invocation to stop. The engine never ends an invocation by
//! itself: it counts as running, its slot taken (and `Drained` waiting for it), until its
//! outcome is reported with [`handle_outcome`](LeaseEngine::handle_outcome). The worker drops a
//! cancelled handler's future after [`cancel_grace`](Settings::cancel_grace). An executor that
//! cannot drop work (a thread pool, a blocking handler) signals the handler cooperatively (a
//! flag or channel it checks) and reports the outcome when the handler ends, however late;
//! reporting early would free a slot whose thread is still busy. The grace is what it has:
//! after a local expiry the lease may lapse on the backend `expiry_margin` later, and the
//! config keeps `cancel_grace` below that, so a handler that stops within the grace stops before
//! a peer can take its message; one that runs on may run beside the peer's, so its side effects
//! should be fenced (see [`Fence`]). What the outcome comes to depends on the cancel's
//! [`CancelReason`]:
//!
//! - `LeaseLost`: discarded; another consumer holds the message.
//! - `LeaseExpired`: a `Done` reported within `cancel_grace` of the expiry (and within
//!   `max_processing_time`) is acked late, fenced, so the backend refuses it if the message was
//!   taken over meanwhile ([`Stats::acked_after_expiry`]); anything else, or a later `Done`, is
//!   discarded, and the message runs again after the claim timeout.
//! - `MaxProcessingTime`: a failed attempt, whatever the outcome (released with backoff, or
//!   dead-lettered on its last delivery).
//! - `Shutdown`: released at once (delay 0), whatever the outcome.
#![forbid(unsafe_code)]

pub mod backend;
mod config;
mod effect;
mod engine;
mod hooked;
mod inspect;
mod lease;
pub mod membership;
mod publish;
pub mod shard;
mod timers;
mod types;

pub use backend::{
    Backend, BackendError, BackendResult, ErrorKind, FetchAnswer, LeaseRef, Undeliverable,
};
pub use config::{
    Config, ConfigError, RetryPolicy, Settings, ADAPTIVE_PREFETCH_BATCHES, DEFAULT_CLAIM_TIMEOUT,
    MAX_COUNT, MAX_DURATION, MIN_CLAIM_TIMEOUT,
};
pub use effect::{Effect, Invocation, Stats, StreamLoad};
pub use engine::LeaseEngine;
pub use hooked::{Call, Hooked, Hooks};
pub use inspect::{
    group_streams, queue_overview, ConsumerOverview, DeadLetterEntry, Discovered, GroupOverview,
    InspectError, Inspector, Listing, NotDead, Overview, Page, PendingEntry, PendingQuery, Purged,
    QueueGroupOverview, QueueOverview, Requeued, Selection,
};
pub use lease::Lease;
pub use membership::{Members, Membership, MembershipConfig, MembershipError, MembershipSettings};
pub use publish::{
    Dedupe, DelayedSummary, Due, Outgoing, PublishRejected, Published, Publisher, MAX_DELAY,
};
pub use shard::{ShardError, Shards, MAX_SHARDS};
pub use types::{
    AckId, CancelReason, DeadLetterReason, Fence, Fetched, InvocationId, LeaseId, LossReason,
    MessageId, Outcome, RenewId, RenewResult, SettleResult, StreamId, Tenure,
};
