//! # leasehold-sim: the deterministic multi-replica simulator
//!
//! N replicas, each **the real worker** (`leasehold-worker`'s driver, its engine, its handler
//! task pool) on a node of a deterministic, single-threaded [`World`] on **virtual time**,
//! consume ONE shared stream: the real `leasehold-memory` backend, or a model of it with a
//! deliberate flaw. Some of its messages are **delayed** (not deliverable before their due
//! time) and some carry a **deduplication key** and are published twice. Every choice — which ready task is polled first, every delay, every fault,
//! every handler's behaviour — is drawn from seeded generators ([`rng::Rng`], splitmix64), so a
//! seed replays exactly:
//!
//! ```text
//! cargo run -p leasehold-sim --release -- --seeds 1000       # a batch, with a summary table
//! cargo run -p leasehold-sim --release -- --seed 12345 --print   # replay one, every event
//! ```
//!
//! ## The model
//!
//! **The world** ([`runtime`]) polls every task of every replica on one thread; time moves only
//! when nothing is ready, to the next timer or scheduled event. A **replica** is one node: the
//! worker started on it with `WorkerBuilder::new(world.runtime(node))`, over a consumer of the
//! shared store of its own (a fresh consumer name per incarnation).
//!
//! **Publishing.** Each message is published once at a random instant before
//! [`SimConfig::publish_until`], straight into the store (no network, no faults). A share of
//! them ([`SimConfig::delayed_share`], 30 %) has a due time: one in eight of those is due
//! already (a delay of zero, or a wall-clock time in the past: the Unix epoch, so the outcome
//! never depends on when the run happens), the rest are delayed from a millisecond up to
//! [`SimConfig::delay_max`] (three claim timeouts) — spread over milliseconds, up to a third of
//! it, and beyond. A delayed message waits outside the stream (its publish answers a
//! `delayed:<n>` id) until a fetch at or after its due time moves it in; its entry id is
//! learnt at its first delivery, from its payload. A share ([`SimConfig::dedupe_share`], 20 %)
//! carries a deduplication key whose time to live outlasts the run, and half of those are
//! published a second time, up to two claim timeouts later: that publish must enqueue nothing
//! and answer the first one's id. The draws come from a generator of their own.
//!
//! **A backend call** (the driver's fetch, renew, ack, release, dead-letter) crosses a simulated
//! network (`src/backend.rs`): its request travels on a network node that is never paused or
//! killed, reaches the store after a request delay, executes there atomically at that instant
//! and answers after an answer delay (1–20 ms each when fault-free); the driver bounds each
//! call with its `call_timeout`, as in production. A fetch that finds nothing blocks in the
//! store like the memory backend does on a real clock: it looks again on a publish, a release,
//! the next lapse or the next due time of a delayed message, until its `wait` is over; one its
//! driver dropped takes nothing. A fetch's answer says how long after its execution the next
//! delayed message is due, as a Redis fetch's does, and the driver fetches again then. While
//! faults are on, a call may **fail fast** with a transient error or now and then a fatal one
//! (the store is not touched), **lose its answer** (the store is changed, the driver times out),
//! be **slow** (request and/or answer delayed up to 1.5 × the claim timeout, so it may execute
//! after its sender gave up, after a peer reclaimed the message, or arrive reordered with other
//! replicas' calls), or **reach the store twice**. Requests already sent when their replica
//! crashes still reach the store.
//!
//! **A handler** follows the behaviour its message drew when published ([`Behaviour`]: quick,
//! slow past the claim timeout, fail N times — error, panic as the driver reports it, `Retry`
//! with or without delay —, fail always, `Pending` k times then `Done`, hang until cancelled,
//! reject), on its replica's virtual time. Invocations are counted per message across replicas.
//! On a cancellation a handler reacts within the cancel grace — half the time with `Done`,
//! which the driver must discard — and a hanging one is dropped when the grace is over.
//!
//! **Faults**, until [`SimConfig::faults_until`] (each kind a Poisson process per replica):
//! replica **crash** (its node is killed: worker, handlers and calls in flight are dropped; its
//! leases lapse in the store; a new worker with a new consumer restarts it after 0.5 s – 2 ×
//! claim timeout); **stop-the-world pause** of 0.05 – 3 × the claim timeout (the node is not
//! polled; answers and handler outcomes wait, and are taken in the world's order at resume),
//! at random instants and right after a heartbeat went out; **clock stall** of up to 2 × the
//! claim timeout (the replica runs on, but its clock stands still, then jumps); **degraded
//! link** for a quarter to two claim timeouts (80 % of the replica's calls faulty); **graceful
//! restart**, a rolling deploy (the worker is shut down with its grace while faults go on;
//! once it reports, a fresh incarnation starts); faulty calls as above. A worker a fatal error
//! stopped (its health says so) is restarted within a claim
//! timeout, as an operator would. Faults then stop; *quiet* is the instant the last fault's
//! effect is over. The run continues until every message is acked or dead-lettered, then every
//! replica's worker is shut down and must report.
//!
//! Three fault profiles ([`Profile`]): `broad` spreads every kind of fault; `lease-edge` aims at
//! the lease boundary (most heartbeats followed by a pause of half to one claim timeout, every
//! faulty call a request landing half to one claim timeout late); `store-outage` adds to the
//! broad faults **store outages**: the whole store unavailable for a twentieth of a claim
//! timeout up to 1.5 × it, then back, either *down* (a call reaching it fails with a transient
//! error, a fetch blocked in it ends with one; publishes wait for it) or *paused* (a call
//! reaching it waits until it is back, then executes, as under `CLIENT PAUSE`), with the
//! drivers' call timeout at twice the claim timeout so that late fetch answers reach the
//! engines rather than being given up on.
//!
//! ## The checks (a failing seed is a [`Failure`])
//!
//! - **Single live runner** ([`Check::SingleRunner`]). An invocation is live from its handler's
//!   start until it returns, is dropped, or its cancellation fires. At every start, no other
//!   live invocation of the message may exist unless the replica holding the older lease
//!   (lower fence) is paused or its clock stalled (that invocation is then *superseded*: a
//!   paused runner was taken over, or a stalled starter acts on a lease it cannot know has
//!   lapsed), nor any unended one on the same
//!   replica (serial per message); after every step, no two live invocations of one message on
//!   replicas that are neither; once a paused or stalled replica wakes and reacts, no
//!   superseded invocation of it may still be live; and every lease the driver asks to ack must
//!   follow a `Done` that was not superseded, nor cancelled except for its lease's local expiry
//!   (such a `Done`, within its time limit, is acked late and fenced), nor past its time limit.
//! - **Fencing** ([`Check::Fencing`]). The checker keeps its own log of deliveries (owner and
//!   fence of the latest delivery of each message, from the store's fetch results, with fences
//!   strictly increasing). Every ack, dead-letter or release the store accepts must come from
//!   that owner with that fence, for a message not yet removed.
//! - **Nothing lost** ([`Check::NothingLost`]). An accepted ack needs a `Done` of the message
//!   on that consumer (uncancelled, or cancelled for its lease's local expiry), an accepted dead-letter a failure, a rejection or a time-out
//!   there; no removed message is ever delivered again; at the end the store is empty (no
//!   delayed message waits either), each message was removed exactly once, and the
//!   dead-letter stream holds exactly the dead-lettered ones.
//! - **Liveness** ([`Check::Liveness`]). All work completes within the bound below after quiet;
//!   a run that cannot finish (nothing left to happen, or more than [`SimConfig::max_events`]
//!   steps) fails too.
//! - **No leak** ([`Check::NoLeak`]). Within the drain bound every worker reports its shutdown;
//!   none reports a halted stream at the end (a deploy may meet a fatal fault); at its report
//!   none of its handlers still runs, none starts after it, and it claims no more acks,
//!   releases and dead letters than the store accepted from it; at the end the store's pending
//!   list is empty.
//! - **Engine contract** ([`Check::Engine`]): no busy loop (a node polled over and over without
//!   the clock moving); every driver gave its engine only inputs it asked for (its
//!   `Stats::unexpected` is 0); a worker stops, or a stream halts, only on a fatal error the
//!   simulator injected, and names that error.
//! - **Due time** ([`Check::DueTime`]). No delayed message is delivered by the store, nor any
//!   invocation of it started, before its due time (virtual time; the publish instant plus its
//!   delay). Once due, a delayed message is held to every other check: it must be processed
//!   and removed like any message, within the liveness bound.
//! - **No expiry in transit** ([`Check::InTransit`]). A fetch whose deliveries reach the
//!   driver a lease's validity (claim timeout less the expiry margin) or more after it was
//!   sent brought leases the engine must discard, to be reclaimed a claim timeout later. Each
//!   must be forced by a fault: the call was slow, its replica was paused or its clock stalled
//!   meanwhile, or the store was paused until at least a lease's validity after the send (less
//!   a fault-free round trip). A store that was *down* forces none: a client that queues calls
//!   while it reconnects and sends them late ([`BrokenDriver::QueuesWhileDown`]) is caught.
//! - **Deduplication** ([`Check::Dedupe`]). A first publish is never answered as a duplicate;
//!   a second publish with a live key is, with the first publish's id; and no message enters
//!   the stream twice (two entry ids delivering one message's payload). The end checks then
//!   find each message removed exactly once, and no delayed message left.
//!
//! ## The liveness bound
//!
//! After quiet, no replica crashes, pauses or stalls, every call is answered within `rtt` = 2 ×
//! the fault-free latency, and nothing fails but handlers. Let `slots` = replicas ×
//! concurrency, `D` = `max_deliveries` + 1, and for each message `m`: `P(m)` the number of
//! `Pending` answers its behaviour can still give, `H(m)` the longest one invocation can hold a
//! slot (its run time; for a hang `max_processing_time` + `cancel_grace`), `H_max` = max `H`.
//!
//! - *Deliveries.* A message is delivered at most `D` more times: each delivery ends in an ack,
//!   a dead-letter, a release after a failed attempt (the delivery count rises with each, and
//!   the message is dead-lettered at `max_deliveries`), or — once, for a lease left behind by a
//!   fault — a lapse. No lease is lost after quiet (renews succeed, nothing pauses).
//! - *busy(m)* = `(D + P(m)) · H(m)`: its invocations' slot time (each delivery starts one, each
//!   `Pending` one more).
//! - *gap(m)*: its time outside a slot: one lapse of a stale lease (`claim_timeout`), per
//!   delivery the next fetch (up to `poll_interval` plus a fetch blocking up to its wait, so 2 ×
//!   `poll_interval`), three calls (`3·rtt`: the fetch, the settle call, and the ack call ahead
//!   of it on its stream), an orphan's wind-down (`cancel_grace`) and the release delay (at most
//!   `claim_timeout`: the store caps it there), with `prefetch` a wait for a slot on its replica
//!   (behind at most `max_leases` held leases: `ceil(max_leases / concurrency) · H_max`), and
//!   per `Pending` the re-poll interval plus waiting for a slot on its replica (`H_max`) and
//!   `rtt`.
//! - At any instant after quiet either every slot is busy — total slot work `Σ busy(m)` drains at
//!   `slots` per second — or some slot is free, and then every unfinished message is making
//!   progress on its own `busy + gap` budget (running, or waiting on a timer, a call or the next
//!   fetch, which a free slot's replica issues within a poll interval). So all work completes
//!   within
//!
//!   `bound = fetch_backoff_max + rtt + Σ_m busy(m) / slots + max_m (busy(m) + gap(m))`
//!
//!   after quiet (`fetch_backoff_max`: a fetch backoff left over from faults), or after the
//!   last message may first be delivered (its publish instant plus its delay), if that is
//!   later: from then on every message is in the stream and the argument above holds. It is
//!   loose on purpose — it must hold for every seed — and [`SeedReport::completed_after_quiet`] reports
//!   what was used; the summary prints the largest fraction seen.
//!
//! ## Broken components (the checks can fail)
//!
//! [`StoreKind::Model`] with a [`Flaw`] runs the same scenarios against a store whose renew
//! steals messages back (a heartbeat that is a plain, unconditional `XCLAIM`, the classic hole of
//! Redis Streams consumers), whose ack ignores the owner, which enqueues delayed messages at
//! once, or which forgets deduplication keys. [`SimConfig::broken`] breaks the
//! driver at its boundary with the store ([`BrokenDriver`]): it acks results the engine
//! discarded, drops a renew result, reports lost leases as kept, or answers a shutdown's
//! releases without making them.
//! `tests/broken.rs` asserts the checks catch each, within a stated number of seeds.
#![forbid(unsafe_code)]

mod backend;
pub mod behaviour;
mod bound;
mod checker;
mod handler;
pub mod rng;
pub mod runtime;
mod sim;
pub mod store;
mod trace;

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use leasehold_core::RetryPolicy;

pub use behaviour::Behaviour;
pub use checker::BrokenDriver;
pub use runtime::{NodeId, SimClock, SimRuntime, Step, World, WorldConfig};
pub use store::{Flaw, StoreKind};

/// Everything a simulation run is made of. Per seed, the engine's concurrency (1 ..=
/// [`max_concurrency`](Self::max_concurrency)), `max_leases` (concurrency + 0..=3), heartbeat
/// (claim timeout / 4, / 3 or × 2/5), renew batch size (2, 3 or 1000) and prefetch (0, 1 or 3,
/// or, one seed in four, unset: adaptive within `max_leases`) are drawn too.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Replicas consuming the stream.
    pub replicas: usize,
    /// Messages published per seed.
    pub messages: usize,
    /// The store they share.
    pub store: StoreKind,
    /// Largest engine concurrency drawn.
    pub max_concurrency: usize,
    /// The claim timeout, of the engines and the store.
    pub claim_timeout: Duration,
    /// The engines' poll interval.
    pub poll_interval: Duration,
    /// The engines' re-poll interval for `Pending` work.
    pub repoll_interval: Duration,
    /// The engines' bound on one invocation.
    pub max_processing_time: Duration,
    /// The engines' backoff after failed attempts.
    pub retry: RetryPolicy,
    /// Deliveries after which a failing message is dead-lettered.
    pub max_deliveries: u32,
    /// The engines' shutdown grace.
    pub shutdown_grace: Duration,
    /// The engines' cap on the fetch backoff.
    pub fetch_backoff_max: Duration,
    /// The drivers' bound on one backend call.
    pub call_timeout: Duration,
    /// How long a cancelled handler may take to stop before the driver drops it (the engines'
    /// `cancel_grace`: shorter than their expiry margin).
    pub cancel_grace: Duration,
    /// Largest one-way latency of a fault-free call.
    pub latency: Duration,
    /// Longest run of a quick handler (and of failing, pending and rejecting invocations).
    pub quick_max: Duration,
    /// Longest run of a slow handler (kept below `max_processing_time`).
    pub slow_max: Duration,
    /// Messages are published at random instants before this.
    pub publish_until: Duration,
    /// Share of messages published with a due time: already due (a delay of zero or a time in
    /// the past) for one in eight of them, else a delay from a millisecond up to
    /// [`delay_max`](Self::delay_max).
    pub delayed_share: f64,
    /// The longest delay of a delayed message.
    pub delay_max: Duration,
    /// Share of messages published with a deduplication key (whose time to live outlasts the
    /// run); half of them are published a second time, which must enqueue nothing.
    pub dedupe_share: f64,
    /// Faults are injected before this instant only.
    pub faults_until: Duration,
    /// Mean time between crashes of one replica.
    pub crash_mean: Duration,
    /// Mean time between pauses of one replica.
    pub pause_mean: Duration,
    /// Probability that a call sent while faults are on is faulty.
    pub call_fault: f64,
    /// Mean time between link faults of one replica (periods of a degraded connection).
    pub link_mean: Duration,
    /// Probability that a call over a degraded link is faulty.
    pub link_fault: f64,
    /// Probability that a replica pauses right after sending a heartbeat (faults on).
    pub pause_after_renew: f64,
    /// Longest such pause (they last from half the claim timeout up to this).
    pub pause_after_renew_max: Duration,
    /// Share of faulty calls that are slow (the rest fail fast or lose their answer).
    pub slow_share: f64,
    /// Share of slow calls whose request reaches the store half to one claim timeout late.
    pub slow_request_edge: f64,
    /// The fault profile these fault knobs came from (for the replay command).
    pub profile: Profile,
    /// Events kept for the trace of a failure.
    pub trace_len: usize,
    /// A run with more events fails (a busy loop or livelock).
    pub max_events: u64,
    /// Multiplies the liveness bound. Only for showing that the liveness check can fail.
    pub bound_scale: f64,
    /// Mean time between clock stalls of one replica.
    pub stall_mean: Duration,
    /// Mean time between graceful restarts (deploys) of one replica.
    pub deploy_mean: Duration,
    /// Share of failing-fast calls whose error is fatal (it stops the replica's worker, which
    /// is then restarted).
    pub fatal_share: f64,
    /// Share of the faulty calls that are neither slow nor failing that reach the store twice.
    pub duplicate_share: f64,
    /// Breaks the driver at its boundary with the store, to show the checks catch it.
    pub broken: Option<BrokenDriver>,
    /// Mean time between outages of the store (`None`: none): it is unreachable, or paused,
    /// for a while, then back (see [`Profile::StoreOutage`]).
    pub outage_mean: Option<Duration>,
    /// Longest outage (they last from a twentieth of the claim timeout up to this).
    pub outage_max: Duration,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            replicas: 3,
            messages: 12,
            store: StoreKind::Memory,
            max_concurrency: 3,
            claim_timeout: Duration::from_secs(10),
            poll_interval: Duration::from_secs(1),
            repoll_interval: Duration::from_millis(500),
            max_processing_time: Duration::from_secs(30),
            retry: RetryPolicy {
                initial: Duration::from_millis(500),
                multiplier: 2.0,
                max: Duration::from_secs(8),
                jitter: 0.2,
            },
            max_deliveries: 5,
            shutdown_grace: Duration::from_secs(5),
            fetch_backoff_max: Duration::from_secs(5),
            call_timeout: Duration::from_secs(5),
            cancel_grace: Duration::from_millis(500),
            latency: Duration::from_millis(20),
            quick_max: Duration::from_millis(200),
            slow_max: Duration::from_secs(25),
            publish_until: Duration::from_secs(60),
            delayed_share: 0.3,
            delay_max: Duration::from_secs(30),
            dedupe_share: 0.2,
            faults_until: Duration::from_secs(90),
            crash_mean: Duration::from_secs(60),
            pause_mean: Duration::from_secs(45),
            call_fault: 0.25,
            link_mean: Duration::from_secs(40),
            link_fault: 0.8,
            pause_after_renew: 0.1,
            pause_after_renew_max: Duration::from_secs(15),
            slow_share: 0.45,
            slow_request_edge: 0.4,
            profile: Profile::Broad,
            trace_len: 50,
            max_events: 3_000_000,
            bound_scale: 1.0,
            stall_mean: Duration::from_secs(60),
            deploy_mean: Duration::from_secs(90),
            fatal_share: 0.05,
            duplicate_share: 0.2,
            broken: None,
            outage_mean: None,
            outage_max: Duration::from_secs(15),
        }
    }
}

/// A fault profile: how the fault knobs of [`SimConfig`] are set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// Every kind of fault, spread widely (the default).
    Broad,
    /// Faults aimed at the lease boundary: most heartbeats are followed by a pause of half to
    /// one claim timeout, and every faulty call is a request reaching the store half to one
    /// claim timeout late. This is where a heartbeat can land after a peer's takeover while its
    /// sender cannot act, the one window the classic steal-back bug needs against this engine.
    LeaseEdge,
    /// The broad faults, and now and then the whole store unavailable for a while (up to 1.5 ×
    /// the claim timeout), then back: half the time it is down (calls reaching it fail, a
    /// fetch blocked in it ends with an error), half the time paused (calls reaching it wait
    /// until it is back, then execute, as under `CLIENT PAUSE`). The drivers' call timeout is
    /// twice the claim timeout here, so late fetch answers reach the engines instead of being
    /// given up on.
    StoreOutage,
}

impl Profile {
    /// The command-line name (`--profile NAME`).
    pub fn name(self) -> &'static str {
        match self {
            Profile::Broad => "broad",
            Profile::LeaseEdge => "lease-edge",
            Profile::StoreOutage => "store-outage",
        }
    }

    /// Parses a command-line name.
    pub fn parse(name: &str) -> Option<Self> {
        [Profile::Broad, Profile::LeaseEdge, Profile::StoreOutage]
            .into_iter()
            .find(|p| p.name() == name)
    }
}

impl SimConfig {
    /// The default configuration with the fault knobs of `profile`.
    pub fn with_profile(profile: Profile) -> Self {
        let cfg = Self::default();
        match profile {
            Profile::Broad => cfg,
            Profile::LeaseEdge => Self {
                pause_after_renew: 0.6,
                pause_after_renew_max: cfg.claim_timeout,
                slow_share: 1.0,
                slow_request_edge: 1.0,
                profile,
                ..cfg
            },
            Profile::StoreOutage => Self {
                outage_mean: Some(Duration::from_secs(25)),
                outage_max: cfg.claim_timeout * 3 / 2,
                call_timeout: cfg.claim_timeout * 2,
                profile,
                ..cfg
            },
        }
    }

    /// The command that replays `seed` with this configuration (its command-line knobs).
    pub fn replay_command(&self, seed: u64) -> String {
        let mut cmd = format!(
            "cargo run -p leasehold-sim --release -- --seed {seed} --replicas {} --messages {} \
             --backend {} --profile {}",
            self.replicas,
            self.messages,
            self.store.name(),
            self.profile.name()
        );
        let default = SimConfig::with_profile(self.profile);
        if self.faults_until != default.faults_until {
            cmd.push_str(&format!(
                " --faults-until {}",
                self.faults_until.as_secs_f64()
            ));
        }
        if let Some(broken) = self.broken {
            cmd.push_str(&format!(" --broken {}", broken.name()));
        }
        if self.bound_scale != 1.0 {
            cmd.push_str(&format!(" --bound-scale {}", self.bound_scale));
        }
        cmd
    }
}

/// The guarantee a failing seed breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Check {
    /// Two replicas ran one message at once (none paused), a paused runner was not cancelled at
    /// resume, or a discarded result was acked.
    SingleRunner,
    /// The store accepted an ack, release or dead-letter from someone other than the current
    /// delivery's owner and fence.
    Fencing,
    /// A message was removed without its work done, delivered after removal, or not accounted
    /// for at the end.
    NothingLost,
    /// Work did not complete within the bound after quiet.
    Liveness,
    /// After shutdown, something is still held, running or pending.
    NoLeak,
    /// The engine broke its contract with the driver (busy loop, unknown lease).
    Engine,
    /// A delayed message was delivered or invoked before its due time.
    DueTime,
    /// A publish with a live deduplication key enqueued the message again.
    Dedupe,
    /// A fetch's deliveries reached the engine with their leases spent (answered a lease's
    /// validity or more after the fetch was sent) without a fault that forces it: a slow call,
    /// its replica paused or stalled meanwhile, or a store outage long enough on its own.
    InTransit,
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Check::SingleRunner => "single live runner",
            Check::Fencing => "fencing",
            Check::NothingLost => "nothing lost",
            Check::Liveness => "liveness",
            Check::NoLeak => "no leak",
            Check::Engine => "engine contract",
            Check::DueTime => "due time",
            Check::Dedupe => "deduplication",
            Check::InTransit => "no expiry in transit",
        })
    }
}

/// A seed that broke a check: what, when, how to replay it, and the events before it.
#[derive(Debug, Clone)]
pub struct Failure {
    /// The seed.
    pub seed: u64,
    /// The broken check.
    pub check: Check,
    /// The virtual instant of the violation.
    pub at: Duration,
    /// What exactly.
    pub detail: String,
    /// One line that replays it.
    pub replay: String,
    /// The engine settings drawn for the seed.
    pub settings: String,
    /// The last events, oldest first (`r` = replica, `m` = message in publish order, `@` =
    /// fence, `#` = call number, `c` = consumer).
    pub trace: Vec<String>,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "seed {} VIOLATES {} at {:.6}s: {}",
            self.seed,
            self.check,
            self.at.as_secs_f64(),
            self.detail
        )?;
        writeln!(f, "  replay: {}", self.replay)?;
        writeln!(f, "  engine: {}", self.settings)?;
        writeln!(f, "  last {} events:", self.trace.len())?;
        for line in &self.trace {
            writeln!(f, "    {line}")?;
        }
        Ok(())
    }
}

/// What one seed did.
#[derive(Debug, Clone, Default)]
pub struct SeedReport {
    /// The seed.
    pub seed: u64,
    /// Replicas.
    pub replicas: usize,
    /// Engine concurrency drawn for the seed.
    pub concurrency: usize,
    /// Messages published.
    pub messages: usize,
    /// Messages acked.
    pub acked: usize,
    /// Messages dead-lettered.
    pub dead_lettered: usize,
    /// Messages that waited outside the stream until their due time.
    pub delayed: usize,
    /// Repeated publishes the store answered as duplicates (enqueuing nothing).
    pub duplicates: usize,
    /// Handler invocations.
    pub invocations: u64,
    /// Invocations beyond each message's first (retries, re-polls, takeovers).
    pub reinvocations: u64,
    /// Replica crashes.
    pub crashes: u64,
    /// Restarts after a crash.
    pub restarts: u64,
    /// Stop-the-world pauses.
    pub pauses: u64,
    /// Periods of a degraded link.
    pub link_faults: u64,
    /// Calls that failed without touching the store.
    pub failed_calls: u64,
    /// Calls whose answer was lost after the store executed them.
    pub lost_answers: u64,
    /// Slow calls.
    pub slow_calls: u64,
    /// Runs started while a paused replica still ran the message (the allowed overlap).
    pub paused_overlaps: u64,
    /// Virtual time at the end of the run.
    pub virtual_time: Duration,
    /// When the last fault's effect was over.
    pub quiet_at: Duration,
    /// How long after quiet the last message was settled (zero if before).
    pub completed_after_quiet: Duration,
    /// The liveness bound of the seed.
    pub bound: Duration,
    /// Events processed.
    pub events: u64,
    /// Calls that reached the store twice.
    pub duplicated_calls: u64,
    /// Clock stalls.
    pub stalls: u64,
    /// Workers a fatal error stopped (restarted).
    pub halts: u64,
    /// Graceful restarts.
    pub deploys: u64,
    /// Answers the engines counted as stale (raced with an expiry or a redelivery).
    pub stale_inputs: u64,
    /// A hash of the whole event trace (only from [`run_seed_digest`], else 0).
    pub digest: u64,
    /// Store outages (down or paused).
    pub outages: u64,
    /// Deliveries that reached an engine with their leases spent, each forced by a fault.
    pub expired_in_transit: u64,
}

impl SeedReport {
    /// Faults injected: crashes, pauses, stalls, deploys, degraded links and faulty calls.
    pub fn faults(&self) -> u64 {
        self.crashes
            + self.pauses
            + self.link_faults
            + self.failed_calls
            + self.lost_answers
            + self.slow_calls
            + self.duplicated_calls
            + self.stalls
            + self.deploys
            + self.outages
    }
}

/// Runs one seed; `Err` if it breaks a check.
pub fn run_seed(cfg: &SimConfig, seed: u64) -> Result<SeedReport, Box<Failure>> {
    sim::Sim::new(cfg, seed, false, false).run()
}

/// Runs one seed, printing every event as it happens.
pub fn run_seed_printing(cfg: &SimConfig, seed: u64) -> Result<SeedReport, Box<Failure>> {
    sim::Sim::new(cfg, seed, true, false).run()
}

/// Runs one seed and hashes its whole event trace into [`SeedReport::digest`]: equal digests
/// mean equal runs, event for event (slower: every event is formatted).
pub fn run_seed_digest(cfg: &SimConfig, seed: u64) -> Result<SeedReport, Box<Failure>> {
    sim::Sim::new(cfg, seed, false, true).run()
}

/// Totals over many seeds.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Seeds run.
    pub seeds: u64,
    /// Seeds that broke a check, in seed order.
    pub failures: Vec<Failure>,
    /// Totals of the seeds that passed.
    pub totals: SeedReport,
    /// Total virtual time simulated.
    pub virtual_time: Duration,
    /// Largest `completed_after_quiet / bound` seen.
    pub worst_bound_use: f64,
    /// The seed it was seen on.
    pub worst_bound_seed: u64,
}

impl Summary {
    fn add(&mut self, result: Result<SeedReport, Box<Failure>>) {
        self.seeds += 1;
        let report = match result {
            Ok(report) => report,
            Err(failure) => {
                self.failures.push(*failure);
                return;
            }
        };
        let t = &mut self.totals;
        t.messages += report.messages;
        t.acked += report.acked;
        t.dead_lettered += report.dead_lettered;
        t.delayed += report.delayed;
        t.duplicates += report.duplicates;
        t.invocations += report.invocations;
        t.reinvocations += report.reinvocations;
        t.crashes += report.crashes;
        t.restarts += report.restarts;
        t.pauses += report.pauses;
        t.link_faults += report.link_faults;
        t.failed_calls += report.failed_calls;
        t.lost_answers += report.lost_answers;
        t.slow_calls += report.slow_calls;
        t.paused_overlaps += report.paused_overlaps;
        t.events += report.events;
        t.duplicated_calls += report.duplicated_calls;
        t.stalls += report.stalls;
        t.halts += report.halts;
        t.deploys += report.deploys;
        t.stale_inputs += report.stale_inputs;
        t.outages += report.outages;
        t.expired_in_transit += report.expired_in_transit;
        self.virtual_time += report.virtual_time;
        let used = report.completed_after_quiet.as_secs_f64() / report.bound.as_secs_f64();
        if used > self.worst_bound_use {
            self.worst_bound_use = used;
            self.worst_bound_seed = report.seed;
        }
    }
}

/// Runs seeds `first .. first + count` on `threads` threads (each seed is single-threaded and
/// deterministic; threads only share out seeds), stopping early after `stop_after` failures.
pub fn run_seeds(
    cfg: &SimConfig,
    first: u64,
    count: u64,
    threads: usize,
    stop_after: usize,
) -> Summary {
    let next = AtomicU64::new(first);
    let end = first.saturating_add(count);
    let results = Mutex::new(Vec::new());
    let failed = AtomicU64::new(0);
    std::thread::scope(|scope| {
        for _ in 0..threads.max(1) {
            scope.spawn(|| loop {
                if failed.load(Ordering::Relaxed) >= stop_after as u64 {
                    return;
                }
                let seed = next.fetch_add(1, Ordering::Relaxed);
                if seed >= end {
                    return;
                }
                let result = run_seed(cfg, seed);
                if result.is_err() {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
                results.lock().expect("no panics").push((seed, result));
            });
        }
    });
    let mut results = results.into_inner().expect("no panics");
    results.sort_by_key(|(seed, _)| *seed);
    let mut summary = Summary::default();
    for (_, result) in results {
        summary.add(result);
    }
    summary
}
