//! Simulated handlers: each message gets a behaviour when it is published; each invocation of
//! it (counted across all replicas, so a crash or takeover does not reset it) follows it.

use std::fmt;
use std::time::Duration;

use leasehold_core::Outcome;

use crate::rng::Rng;
use crate::SimConfig;

/// What a message's handler does, invocation after invocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behaviour {
    /// `Done` after a few milliseconds.
    Quick,
    /// `Done` after a long time: between half and [`SimConfig::slow_max`] (past the claim
    /// timeout, so only heartbeats keep it leased).
    Slow,
    /// The first `times` invocations fail (an error, a panic caught by the driver, or `Retry`
    /// with or without an explicit delay), then `Done`.
    FailThenDone {
        /// Failing invocations before it succeeds.
        times: u32,
    },
    /// Every invocation fails: the message ends in the dead-letter stream.
    FailAlways,
    /// `Pending` (not finished yet) for the first `times` invocations, then `Done`.
    PendingThenDone {
        /// `Pending` answers before `Done`.
        times: u32,
    },
    /// The first `times` invocations hang until cancelled (here: by `max_processing_time`),
    /// ignoring the signal, so the driver drops them after its cancel grace; then `Done`.
    HangThenDone {
        /// Hanging invocations before it succeeds.
        times: u32,
    },
    /// `Reject`: dead-lettered at once.
    Reject,
}

impl fmt::Display for Behaviour {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Behaviour::Quick => f.write_str("quick"),
            Behaviour::Slow => f.write_str("slow"),
            Behaviour::FailThenDone { times } => write!(f, "fail×{times}"),
            Behaviour::FailAlways => f.write_str("fail-always"),
            Behaviour::PendingThenDone { times } => write!(f, "pending×{times}"),
            Behaviour::HangThenDone { times } => write!(f, "hang×{times}"),
            Behaviour::Reject => f.write_str("reject"),
        }
    }
}

/// What one invocation will do: finish with `outcome` after `after`, or hang (`None`).
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The outcome and how long the handler takes to produce it; `None`: it hangs.
    pub finish: Option<(Duration, Outcome)>,
}

impl Behaviour {
    /// Draws a behaviour (the mix is documented in the crate docs).
    pub fn draw(rng: &mut Rng) -> Self {
        match rng.below(100) {
            0..=39 => Behaviour::Quick,
            40..=51 => Behaviour::Slow,
            52..=66 => Behaviour::FailThenDone {
                times: rng.range(1, 3) as u32,
            },
            67..=70 => Behaviour::FailAlways,
            71..=85 => Behaviour::PendingThenDone {
                times: rng.range(1, 4) as u32,
            },
            86..=93 => Behaviour::HangThenDone {
                times: rng.range(1, 2) as u32,
            },
            _ => Behaviour::Reject,
        }
    }

    /// How often this handler can answer `Pending` in total.
    pub fn max_pending(self) -> u32 {
        match self {
            Behaviour::PendingThenDone { times } => times,
            _ => 0,
        }
    }

    /// The longest one invocation can occupy an invocation slot: its run time, or for a hang
    /// `max_processing_time` plus the driver's cancel grace.
    pub fn max_invocation(self, cfg: &SimConfig) -> Duration {
        let quick = cfg.quick_max;
        match self {
            Behaviour::Quick
            | Behaviour::FailThenDone { .. }
            | Behaviour::FailAlways
            | Behaviour::PendingThenDone { .. }
            | Behaviour::Reject => quick,
            Behaviour::Slow => cfg.slow_max,
            Behaviour::HangThenDone { .. } => cfg.max_processing_time + cfg.cancel_grace,
        }
    }

    /// The plan of invocation number `n` (1-based, across all replicas).
    pub fn plan(self, n: u32, cfg: &SimConfig, rng: &mut Rng) -> Plan {
        let quick = rng.duration(Duration::from_millis(1), cfg.quick_max);
        let done = |after| Plan {
            finish: Some((after, Outcome::Done)),
        };
        match self {
            Behaviour::Quick => done(quick),
            Behaviour::Slow => done(rng.duration(cfg.slow_max / 2, cfg.slow_max)),
            Behaviour::FailThenDone { times } if n <= times => Plan {
                finish: Some((quick, failure(cfg, rng))),
            },
            Behaviour::FailAlways => Plan {
                finish: Some((quick, failure(cfg, rng))),
            },
            Behaviour::PendingThenDone { times } if n <= times => Plan {
                finish: Some((quick, Outcome::Pending)),
            },
            Behaviour::HangThenDone { times } if n <= times => Plan { finish: None },
            Behaviour::Reject => Plan {
                finish: Some((
                    quick,
                    Outcome::Reject {
                        reason: "cannot decode".into(),
                    },
                )),
            },
            Behaviour::FailThenDone { .. }
            | Behaviour::PendingThenDone { .. }
            | Behaviour::HangThenDone { .. } => done(quick),
        }
    }
}

fn failure(cfg: &SimConfig, rng: &mut Rng) -> Outcome {
    match rng.below(4) {
        0 => Outcome::Failed {
            error: "handler error".into(),
        },
        // What the driver reports for a panic it caught.
        1 => Outcome::Failed {
            error: "handler panicked: boom".into(),
        },
        2 => Outcome::Retry { delay: None },
        _ => Outcome::Retry {
            delay: Some(rng.duration(Duration::from_millis(100), cfg.claim_timeout / 2)),
        },
    }
}
