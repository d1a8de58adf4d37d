//! What the checker reports: the broken rule, where, and the recent history.

use std::fmt;

/// The guarantee a problem breaks: one of those listed in `leasehold-core`'s crate docs (shown
/// as "invariant N" with the number it has there), the reference model, or determinism.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Rule {
    /// Guarantee 1: running ≤ concurrency, held ≤ max_leases, no fetch while full.
    Capacity,
    /// Guarantee 2: at most one running invocation per message.
    Serial,
    /// Guarantee 3: an ack only after `Done`, never for a lost lease, nor for an expired one
    /// unless its `Done` came first (a late ack).
    AckAfterDone,
    /// Guarantee 4: every held, renewable lease is renewed at least every heartbeat interval.
    Heartbeat,
    /// Guarantee 5: a lease not renewed for `claim_timeout - margin` is dropped: cancelled,
    /// never acted on again.
    Expiry,
    /// Guarantee 6: `Drained` once, after shutdown, with nothing held or running.
    Drain,
    /// Guarantee 7: `poll_timeout` is `None` or after `now`.
    NoBusyLoop,
    /// The engine disagrees with the reference model (state, counts, expected effects, timers).
    Model,
    /// The same scenario gave different effects on a second run.
    Determinism,
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Rule::Capacity => "invariant 1 (capacity, backpressure)",
            Rule::Serial => "invariant 2 (one invocation per message)",
            Rule::AckAfterDone => "invariant 3 (ack only after Done, fenced)",
            Rule::Heartbeat => "invariant 4 (heartbeat cadence)",
            Rule::Expiry => "invariant 5 (local expiry)",
            Rule::Drain => "invariant 6 (drain)",
            Rule::NoBusyLoop => "invariant 7 (no busy loop)",
            Rule::Model => "reference model",
            Rule::Determinism => "determinism",
        })
    }
}

/// One thing found wrong after a step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The guarantee it breaks.
    pub rule: Rule,
    /// What exactly, with lease, message and times.
    pub detail: String,
}

/// The checker's verdict on a failed step: every problem found, and the recent history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Index of the scenario step (0-based) during which the problems appeared.
    pub step: usize,
    /// The input being applied (a step, or a timeout fired within one).
    pub input: String,
    /// What is wrong (at least one).
    pub problems: Vec<Problem>,
    /// The last inputs and the effects each produced, oldest first.
    pub history: String,
}

impl Violation {
    /// Whether one of the problems breaks `rule`.
    pub fn breaks(&self, rule: Rule) -> bool {
        self.problems.iter().any(|p| p.rule == rule)
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "violation at step {} ({}):", self.step, self.input)?;
        for problem in &self.problems {
            writeln!(f, "  - {}: {}", problem.rule, problem.detail)?;
        }
        write!(f, "recent history (oldest first):\n{}", self.history)
    }
}

impl std::error::Error for Violation {}
