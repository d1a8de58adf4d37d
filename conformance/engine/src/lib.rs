//! Reference model and invariant checker for the [`LeaseEngine`](leasehold_core::LeaseEngine).
//!
//! A [`Scenario`] is a small configuration ([`Setup`]) and a list of [`Step`]s: time passing,
//! fetch answers (new messages, more than asked, redeliveries of held messages with a new
//! fence, duplicates, nothing, failure), invocation outcomes (`Done`, `Pending`, `Retry` with or
//! without delay, `Reject`, `Failed`, also for cancelled and already reported invocations),
//! per-lease renew answers (kept, lost, left out) or whole-chunk failures, ack / release /
//! dead-letter answers (ok, lost, failed, stale), shutdown with a deadline, and inputs carrying
//! an older `now`. Any byte string decodes into one ([`Scenario::from_bytes`]), which is how
//! the fuzz target and the proptest generate them.
//!
//! A [`Harness`] plays driver and backend for one engine and, after every input, checks the
//! eight invariants of DESIGN §3 and a reference model of its own (see [`Rule`] for what each
//! check covers), returning a [`Violation`] that names the rule, the step and the recent
//! history. [`check`] also runs the scenario a second time and compares the effects
//! (determinism).
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
