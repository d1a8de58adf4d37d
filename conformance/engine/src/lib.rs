//! Reference model and invariant checker for the [`LeaseEngine`](leasehold_core::LeaseEngine).
//!
//! A [`Scenario`] is a small configuration ([`Setup`]) and a list of [`Step`]s: time passing,
//! fetch answers (new messages, more than asked, redeliveries of held messages with a new
//! fence, duplicates, nothing, answers nobody asked for), fetch failures (transient or fatal),
//! invocation outcomes (`Done`, `Pending`, `Retry` with or without delay, `Reject`, `Failed`,
//! also for cancelled and already reported invocations), per-lease renew answers (kept, lost,
//! left out) or whole-chunk failures (transient or fatal), ack answers per lease (ok, lost,
//! failed, left out) or whole-call failures, release / dead-letter answers (ok, lost, failed,
//! call failed transiently or fatally), stale and duplicate answers, shutdown with a deadline,
//! inputs carrying an older `now`, a busy driver (time passing with no timeout fired, so the
//! next input finds timers overdue), and *bursts*: several inputs fed back to back at one clock
//! with the effects drained once after the last, as a worker does when handlers finish together
//! or answers arrive together. Any byte string decodes into one ([`Scenario::from_bytes`]),
//! which is how the fuzz target and the proptest generate them; both (and the corpus replay)
//! also run each scenario with every run of consecutive inputs fed as one burst
//! ([`Scenario::in_bursts`]).
//!
//! A [`Harness`] plays driver and backend for one engine and, after every input (after the last
//! input of a burst), drains the effects and checks the guarantees listed in the crate docs of
//! `leasehold-core` (as invariants 1 to 7, numbered as there) and a reference model of its own
//! (see [`Rule`] for what each check covers), returning a [`Violation`] that names the rule, the
//! step and the recent history. [`check`] also runs the scenario a second time from the same
//! instant and compares the effects (determinism).
//!
//! # What is checked
//!
//! *Now* is the engine's clock: the latest `now` given to it (an input may carry an older one).
//! *Running* counts invocations started and not reported yet, cancelled ones included.
//! A lease's *confirmation* is the send time of the fetch that (re)delivered it or of the last
//! renew answered `Kept` for it, whichever was sent last (a renew answer is stale once a
//! redelivery came after that renew was sent); *TTL* is `claim_timeout - expiry_margin`. The
//! numbers are those of the guarantees in `leasehold-core`'s crate docs.
//!
//! 1. **Capacity** ([`Rule::Capacity`]). After every drain: running ≤ `concurrency`; at every
//!    `Fetch` and after every drain: running + the `max` of every outstanding fetch ≤
//!    `concurrency + prefetch` (no fetch while no slot or prefetch room is free), and held
//!    leases + outstanding `max` ≤ `max_leases`. An adaptive prefetch (the default) is the
//!    model's own computation at each `Fetch` (from the handler times and fetch round trips it
//!    saw, and only once an invocation ended since the last fetch), and its ceiling after a
//!    drain, since it may shrink while a fetch is out. Overflow deliveries (beyond the fetch's `max`,
//!    unasked, or during shutdown) are excluded from the held count: the model requires their
//!    `Release { delay: 0 }` from the same input and never lets them run.
//! 2. **Serial** ([`Rule::Serial`]). No `Run` the model did not predict while another
//!    invocation of the same (stream, message id) is running, including the cancelled
//!    invocation of a lost or expired lease that has not reported yet; a redelivery of a held
//!    message starts nothing. After every drain, at most one running invocation per message.
//! 3. **Ack after Done** ([`Rule::AckAfterDone`]). Every lease of an `Ack` is held, its latest
//!    invocation returned `Done` without being cancelled, and it is not expired (its
//!    confirmation plus TTL is after now); never one reported lost (taken over at a renew or a
//!    settle). The one
//!    exception is a *late ack*: a `Done` whose ack was unconfirmed when the lease expired
//!    locally is no longer held, but its ack (fenced) is sent until the backend answers:
//!    retried after `poll_interval` doubled per consecutive failed `Ack` call of its stream
//!    beyond the first (capped at `fetch_backoff_max`), announced `Lost` and discarded when
//!    refused or when its message is delivered again (a takeover: the delivery is a new
//!    lease); at most `max_leases` of them, beyond which the lease expires as any other.
//!    Leases expiring together go in the order of their latest delivery, so where the room
//!    left is short, the earlier deliveries keep their late acks. A `Done` that the cancelled
//!    invocation of an expired (not lost) lease returns before the cancel grace after the
//!    expiry ends, and before its `max_processing_time`, becomes a late ack too, unless its
//!    message was delivered here again meanwhile or the late acks are at their bound; its
//!    lease was announced expired already, so a refusal or a redelivery announces nothing.
//! 4. **Heartbeat** ([`Rule::Heartbeat`]). A lease's *baseline* is the send time of the last
//!    `Renew` naming it, or of the last fetch that (re)delivered it. After every drain with no
//!    renew chunk outstanding, every renewable lease (held, no release in flight) has baseline +
//!    `heartbeat_interval` > now, and `poll_timeout` is no later than that (while a chunk of the
//!    previous round is unanswered nothing is required: one round at a time). A round names
//!    exactly the leases renewable at the end of one of the drained inputs, each once.
//! 5. **Expiry** ([`Rule::Expiry`]). When confirmation + TTL ≤ now, or a renew answers `Lost`
//!    (for a lease not redelivered since the renew was sent and with no settle in flight), the
//!    lease is dropped in that very input (an expiring `Done` with its ack unconfirmed becomes a
//!    late ack instead, see 3): its running invocation gets a `Cancel` with
//!    `LeaseExpired` / `LeaseLost`, `valid_until` is `None`, and no `Run`, `Renew`, `Ack`,
//!    `Release` or `DeadLetter` names it again; its late outcome settles nothing (except a
//!    `Done` within the cancel grace after an expiry: a late ack, see 3). A fetch
//!    answered TTL after it was sent delivers nothing, and no `Fetch` lets the backend block
//!    longer than `heartbeat_interval` (nor `poll_interval`), so an honest backend's latest
//!    delivery arrives with its lease intact. For held leases, `valid_until` equals
//!    confirmation + TTL exactly, and `poll_timeout` is no later than the earliest of them; a
//!    `LeaseValid` later than the model's is reported here too.
//! 6. **Drain** ([`Rule::Drain`]). `Drained` only after shutdown, once, with nothing held,
//!    running, being fetched or acked late, and no effect after it (not even a `Halt`); it must come in the
//!    input at which that first holds.
//! 7. **No busy loop** ([`Rule::NoBusyLoop`]). After every drain, each `handle_timeout`
//!    included, `poll_timeout` is `None` or after now.
//! 8. **Cost**: not checkable per step, and the engine exposes no view of its timer
//!    bookkeeping, so it is skipped here (the benches measure it).
//!
//! The reference model ([`Rule::Model`]) mirrors every input in the engine's order and
//! predicts, at the input that causes it, every effect but `Fetch`, `Ack` and `Renew`, with what
//! it carries then; the drained effects must be exactly those (a burst is judged input by input,
//! not by the state after it):
//! - `Run` of a new delivery, and of ready leases (prefetched, re-polled, unblocked) in the
//!   order they became ready as soon as a slot is free: its stream, message id, fence, delivery
//!   count, attempt, `valid_until` (confirmation + TTL) and payload;
//! - `Cancel` (lost, expired, max processing time at exactly start + limit, shutdown deadline);
//! - `LeaseValid` for exactly the confirmations that move a running, uncancelled lease (a
//!   `Kept` renew of a newer round, a redelivery by a fetch sent after its last confirmation),
//!   `until` = that confirmation's send time + TTL;
//! - `Release` / `DeadLetter` with their stream, message id and the fence at sending, and what
//!   they carry: zero or the explicit delay, the policy's backoff with the engine's seeded jitter
//!   (the model draws it as the engine does, so backoffs and first re-polls are exact), the
//!   dead-letter reason at `max_deliveries`; settle retries after `poll_interval`, re-sends after
//!   a `Lost` for a replaced fence;
//! - `Halt` once per stream at its first fatal error (fetch, renew chunk, ack call, release or
//!   dead-letter call), after which nothing is fetched from it; a fatal settle call gives its
//!   lease(s) up (abandoned);
//! - the notices: `Lost` for every held lease let go of unsettled (expired, taken over at a
//!   renew, lost at its settle, a delivery that arrived past its lease) with its delivery and
//!   the validity it had left exactly; `Failed` for every failed attempt handed back, with its
//!   error and the delay of the release that follows;
//! - `Drained`.
//!
//! `Ack` and `Fetch` are decided when the effects are polled, after every input: at most one
//! `Ack` in flight per stream (another before its answer is reported), naming every ack due on
//! the stream, each lease's stream and current fence; an answer leaving a lease out counts as
//! failed. The fetches of one drain share the whole budget left after the inputs (free slots
//! and prefetch room not promised to ready or blocked leases or to outstanding fetches, within
//! `max_leases`), each at most `fetch_batch_size`, never from a halted or an unassigned stream, nothing after
//! shutdown. A `Renew` round's chunks name their stream's leases with their stream and fence at
//! the input that sent it, as few per stream as `renew_batch_size` allows. The model also checks
//! that the engine's `held`, `running`, fences, delivery counts, attempts and payloads agree with
//! it, that `poll_timeout` is no later than any timer it knows of, and that every counter of
//! `stats()` equals its own: `stale` (answers about leases let go meanwhile, or whose fence a
//! redelivery replaced since the call) and `unexpected` (answers to calls not in flight or
//! answered already, outcomes of invocations not running, deliveries nobody asked for) included.
//!
//! ```
//! use leasehold_engine_check::{check, Finish, Item, Jump, Scenario, Setup, Step};
//!
//! let scenario = Scenario {
//!     setup: Setup::default(),
//!     steps: vec![
//!         Step::Fetched { pick: 0, items: vec![Item::Fresh { count: 0 }; 2] },
//!         // Both handlers finish together: one Ack for both.
//!         Step::Burst(vec![
//!             Step::Finish { pick: 0, outcome: Finish::Done },
//!             Step::Finish { pick: 0, outcome: Finish::Done },
//!         ]),
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
    Finish, Item, Jump, RenewAnswer, Scenario, SettleAnswer, Setup, Step, FATAL_PICKS, MAX_ANSWERS,
    MAX_BURST, MAX_ITEMS, MAX_STEPS, POOL,
};
pub use violation::{Problem, Rule, Violation};

#[cfg(test)]
mod tests;
