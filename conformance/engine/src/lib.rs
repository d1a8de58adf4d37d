//! Reference model and invariant checker for the [`LeaseEngine`](leasehold_core::LeaseEngine).
//!
//! A [`Scenario`] is a small configuration ([`Setup`]) and a list of [`Step`]s: time passing,
//! fetch answers (new messages, more than asked, redeliveries of held messages with a new
//! fence, duplicates, nothing, failure), invocation outcomes (`Done`, `Pending`, `Retry` with or
//! without delay, `Reject`, `Failed`, also for cancelled and already reported invocations),
//! per-lease renew answers (kept, lost, left out) or whole-chunk failures, ack / release /
//! dead-letter answers (ok, lost, failed, stale), shutdown with a deadline, inputs carrying
//! an older `now`, and a busy driver (time passing with no timeout fired, so the next input
//! finds timers overdue). Any byte string decodes into one ([`Scenario::from_bytes`]), which is how
//! the fuzz target and the proptest generate them.
//!
//! A [`Harness`] plays driver and backend for one engine and, after every input, checks the
//! guarantees listed in the crate docs of `leasehold-core` (as invariants 1 to 7, numbered as
//! there) and a reference model of its own (see [`Rule`] for what each check covers), returning
//! a [`Violation`] that names the rule, the step and the recent history. [`check`] also runs the
//! scenario a second time and compares the effects (determinism).
//!
//! # What is checked
//!
//! *Now* is the engine's clock: the latest `now` given to it (an input may carry an older one).
//! *Running* counts `Run` effects whose outcome was not reported yet, cancelled ones included.
//! A lease's *confirmation* is the send time of the fetch that (re)delivered it or of the last
//! renew answered `Kept` for it (unless a redelivery came after that renew was sent);
//! *TTL* is `claim_timeout - expiry_margin`. The numbers are those of the guarantees in
//! `leasehold-core`'s crate docs.
//!
//! 1. **Capacity** ([`Rule::Capacity`]). At every `Run`: running ≤ `concurrency`. At every
//!    `Fetch` and after every input: running + the `max` of every outstanding fetch ≤
//!    `concurrency + prefetch` (no fetch while no slot or prefetch room is free), and held
//!    leases + outstanding `max` ≤ `max_leases`. Deliveries within a fetch's `max` run in that
//!    input while slots are free; the rest wait, ready, and a ready lease must start as soon
//!    as running + (outstanding `max` − `prefetch`) < `concurrency`. Overflow deliveries (beyond the fetch's `max`, unasked, or during shutdown)
//!    are excluded from the held count: the model requires their `Release { delay: 0 }` in the
//!    same input and never lets them run.
//! 2. **Serial** ([`Rule::Serial`]). At every `Run`, no other running invocation of the same
//!    (source, message id), including the cancelled invocation of a lost or expired lease that
//!    has not reported yet; a redelivery of a held message must start nothing (any `Run` the
//!    model did not predict is reported too). After every input, at most one per message.
//! 3. **Ack after Done** ([`Rule::AckAfterDone`]). Every lease of an `Ack` is held, its latest
//!    invocation returned `Done` without being cancelled, and it is not expired (confirmation
//!    + TTL > now); never one reported lost. One `Ack` per input at most (batching).
//! 4. **Heartbeat** ([`Rule::Heartbeat`]). A lease's *baseline* is the send time of the last
//!    `Renew` naming it, or of the last fetch that (re)delivered it. After every input in which
//!    no renew chunk is outstanding, every renewable lease (held, no release in flight) has
//!    baseline + `heartbeat_interval` > now, and `poll_timeout` is no later than that. The only
//!    slack: while a chunk of the previous round is unanswered nothing is required (the engine
//!    keeps one round in flight). A round names every renewable lease exactly once, in chunks
//!    of at most `renew_batch_size`.
//! 5. **Expiry** ([`Rule::Expiry`]). When confirmation + TTL ≤ now, or a renew answers `Lost`
//!    (for a lease not redelivered since the renew was sent and with no settle in flight), the
//!    lease is dropped in that very input: its running invocation gets a `Cancel` with
//!    `LeaseExpired` / `LeaseLost`, `valid_until` is `None`, and no `Run`, `Renew`, `Ack`,
//!    `Release` or `DeadLetter` names it again; its late outcome settles nothing. A fetch
//!    answered TTL after it was sent delivers nothing. For held leases, `valid_until` equals
//!    confirmation + TTL exactly, and `poll_timeout` is no later than the earliest of them.
//! 6. **Drain** ([`Rule::Drain`]). `Drained` only after shutdown, once, with nothing held,
//!    running or being fetched, and no effect after it; it must come as soon as that holds.
//! 7. **No busy loop** ([`Rule::NoBusyLoop`]). After every input, each `handle_timeout`
//!    included, `poll_timeout` is `None` or after now.
//! 8. **Cost**: not checkable per step, and the engine exposes no view of its timer
//!    bookkeeping, so it is skipped here (the benches measure it).
//!
//! The reference model ([`Rule::Model`]) also predicts every `Run` of a new delivery, every
//! `Cancel` (lost, expired, max processing time at exactly start + limit, shutdown deadline),
//! every `Ack` / `Release` / `DeadLetter` with what it carries (zero or the explicit delay,
//! a backoff within the policy's range, dead-letter at `max_deliveries` with its reason), re-runs
//! after `repoll_interval`, settle retries after `poll_interval` and re-sends after a `Lost`
//! for a stale fence; it checks that the engine's `held`, `running`, fences and delivery counts
//! agree with it, that `poll_timeout` is no later than any timer it knows of, that a due re-run
//! waits only while no slot is free, and that nothing is fetched after shutdown.
//!
//! ```
//! use leasehold_engine_check::{check, Finish, Item, Jump, Scenario, Setup, Step};
//!
//! let scenario = Scenario {
//!     setup: Setup::default(),
//!     steps: vec![
//!         Step::Fetched { pick: 0, items: vec![Item::Fresh { count: 0 }] },
//!         Step::Finish { pick: 0, outcome: Finish::Done },
//!         Step::Acked { pick: 0, answers: vec![] },
//!         Step::Wait(Jump::Long(255)),
//!     ],
//! };
//! check(&scenario).expect("the engine keeps its invariants");
//! ```
#![forbid(unsafe_code)]

mod checks;
mod harness;
mod model;
mod observe;
mod scenario;
mod violation;

pub use harness::{check, run, Harness};
pub use scenario::{
    Finish, Item, Jump, RenewAnswer, Scenario, SettleAnswer, Setup, Step, MAX_ANSWERS, MAX_ITEMS,
    MAX_STEPS, POOL,
};
pub use violation::{Problem, Rule, Violation};

#[cfg(test)]
mod tests;
