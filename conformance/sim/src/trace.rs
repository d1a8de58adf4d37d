//! The event trace: a ring of the last events, formatted only when a seed fails (or when a
//! replay asks to print everything as it happens).

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use leasehold_core::{CancelReason, ErrorKind, RenewResult, SettleResult};

/// Which backend call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OpKind {
    Fetch,
    Renew,
    Ack,
    Release,
    DeadLetter,
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OpKind::Fetch => "fetch",
            OpKind::Renew => "renew",
            OpKind::Ack => "ack",
            OpKind::Release => "release",
            OpKind::DeadLetter => "dead-letter",
        })
    }
}

/// How a call was sabotaged, if at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    None,
    /// Fails with this kind of error without touching the store.
    FailFast(ErrorKind),
    /// Touches the store, then the answer is lost (the driver times out).
    LoseAnswer,
    /// Request and/or answer take up to 1.5 × the claim timeout.
    Slow,
    /// The request reaches the store twice (a retrying network); the first answer comes back.
    Duplicate,
}

/// A message of a list, with the fence it was named with.
pub(crate) type MsgFence = (u32, u64);

#[derive(Debug, Clone)]
pub(crate) enum Event {
    Publish {
        m: u32,
        behaviour: String,
        /// What the publish answered.
        id: String,
        /// Its due time, if it was published with one.
        due: Option<Duration>,
        /// Published with a deduplication key.
        keyed: bool,
    },
    PublishAgain {
        m: u32,
        id: String,
        duplicate: bool,
    },
    Call {
        r: u16,
        call: u32,
        op: OpKind,
        msgs: Box<[MsgFence]>,
        fault: Fault,
        exec_in: Duration,
    },
    Blocked {
        r: u16,
        call: u32,
    },
    Fetched {
        r: u16,
        call: u32,
        got: Box<[MsgFence]>,
    },
    Renewed {
        r: u16,
        call: u32,
        results: Box<[(u32, u64, RenewResult)]>,
    },
    Settled {
        r: u16,
        call: u32,
        op: OpKind,
        results: Box<[(u32, u64, SettleResult)]>,
    },
    Answered {
        r: u16,
        call: u32,
        op: OpKind,
    },
    Run {
        r: u16,
        m: u32,
        fence: u64,
        n: u32,
        overlaps_paused: bool,
    },
    Cancelled {
        r: u16,
        m: u32,
        reason: CancelReason,
    },
    Outcome {
        r: u16,
        m: u32,
        outcome: String,
        cancelled: bool,
    },
    Dropped {
        r: u16,
        m: u32,
    },
    Crash {
        r: u16,
        restart_in: Duration,
    },
    Halted {
        r: u16,
        restart_in: Duration,
    },
    Restart {
        r: u16,
        consumer: u32,
    },
    Deploy {
        r: u16,
    },
    Redeployed {
        r: u16,
        restart_in: Duration,
    },
    Pause {
        r: u16,
        until: Duration,
    },
    Resume {
        r: u16,
    },
    Stall {
        r: u16,
        until: Duration,
    },
    Link {
        r: u16,
        until: Duration,
    },
    Broken {
        r: u16,
        what: String,
    },
    FaultsStop,
    Quiet {
        bound: Duration,
    },
    Completed,
    Shutdown,
    Reported {
        r: u16,
    },
    Outage {
        down: bool,
        until: Duration,
    },
    OutageEnd,
    ExpiredInTransit {
        r: u16,
        call: u32,
        n: u32,
        after: Duration,
    },
}

fn list(f: &mut fmt::Formatter<'_>, msgs: &[MsgFence]) -> fmt::Result {
    f.write_str("[")?;
    for (i, (m, fence)) in msgs.iter().enumerate() {
        if i > 0 {
            f.write_str(" ")?;
        }
        write!(f, "m{m}@{fence}")?;
    }
    f.write_str("]")
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::Publish {
                m,
                behaviour,
                id,
                due,
                keyed,
            } => {
                write!(f, "publish m{m} ({behaviour}) as {id}")?;
                if let Some(due) = due {
                    write!(f, ", due at {}", secs(*due).trim_start())?;
                }
                if *keyed {
                    f.write_str(", with a deduplication key")?;
                }
                Ok(())
            }
            Event::PublishAgain { m, id, duplicate } => {
                write!(f, "publish m{m} again with its key: answered {id}")?;
                f.write_str(if *duplicate {
                    " (a duplicate)"
                } else {
                    " (NOT a duplicate)"
                })
            }
            Event::Call {
                r,
                call,
                op,
                msgs,
                fault,
                exec_in,
            } => {
                write!(f, "r{r} calls {op}#{call} ")?;
                list(f, msgs)?;
                match fault {
                    Fault::None => Ok(()),
                    Fault::FailFast(kind) => write!(f, " FAULT: fails ({kind:?}) before the store"),
                    Fault::LoseAnswer => write!(f, " FAULT: answer lost (store in {exec_in:?})"),
                    Fault::Slow => write!(f, " FAULT: slow (store in {exec_in:?})"),
                    Fault::Duplicate => write!(f, " FAULT: reaches the store twice"),
                }
            }
            Event::Blocked { r, call } => write!(f, "store: fetch#{call} of r{r} blocks"),
            Event::Fetched { r, call, got } => {
                write!(f, "store: fetch#{call} of r{r} takes ")?;
                list(f, got)
            }
            Event::Renewed { r, call, results } => {
                write!(f, "store: renew#{call} of r{r}:")?;
                for (m, fence, res) in results.iter() {
                    write!(f, " m{m}@{fence}={res:?}")?;
                }
                Ok(())
            }
            Event::Settled {
                r,
                call,
                op,
                results,
            } => {
                write!(f, "store: {op}#{call} of r{r}:")?;
                for (m, fence, res) in results.iter() {
                    write!(f, " m{m}@{fence}={res:?}")?;
                }
                Ok(())
            }
            Event::Answered { r, call, op } => write!(f, "r{r} gets the answer of {op}#{call}"),
            Event::Run {
                r,
                m,
                fence,
                n,
                overlaps_paused,
            } => {
                write!(f, "r{r} RUN m{m}@{fence} (invocation {n})")?;
                if *overlaps_paused {
                    f.write_str(" while a paused or stalled replica still runs it")?;
                }
                Ok(())
            }
            Event::Cancelled { r, m, reason } => {
                write!(f, "r{r} handler of m{m} sees CANCEL ({reason:?})")
            }
            Event::Outcome {
                r,
                m,
                outcome,
                cancelled,
            } => {
                write!(f, "r{r} m{m} -> {outcome}")?;
                if *cancelled {
                    f.write_str(" (after cancel: discarded)")?;
                }
                Ok(())
            }
            Event::Dropped { r, m } => write!(f, "r{r} handler of m{m} DROPPED by the driver"),
            Event::Crash { r, restart_in } => {
                write!(f, "r{r} CRASHES (restart in {restart_in:?})")
            }
            Event::Halted { r, restart_in } => write!(
                f,
                "r{r} HALTED by a fatal error: its worker is stopped (restart in {restart_in:?})"
            ),
            Event::Restart { r, consumer } => write!(f, "r{r} restarts as consumer c{consumer}"),
            Event::Deploy { r } => write!(f, "r{r} SHUTS DOWN gracefully (a deploy)"),
            Event::Redeployed { r, restart_in } => {
                write!(f, "r{r} reported its shutdown (restart in {restart_in:?})")
            }
            Event::Pause { r, until } => write!(f, "r{r} PAUSED until {}", secs(*until)),
            Event::Resume { r } => write!(f, "r{r} RESUMES"),
            Event::Stall { r, until } => {
                write!(f, "r{r} CLOCK STALLS until {}", secs(*until))
            }
            Event::Link { r, until } => {
                write!(f, "r{r} LINK DEGRADED until {}", secs(*until))
            }
            Event::Broken { r, what } => write!(f, "r{r} BROKEN DRIVER: {what}"),
            Event::FaultsStop => f.write_str("faults stop"),
            Event::Quiet { bound } => write!(
                f,
                "quiet: no fault effect left; all work must complete within {bound:?}"
            ),
            Event::Completed => f.write_str("all work completed: shutting down"),
            Event::Shutdown => f.write_str("shutdown of every replica"),
            Event::Reported { r } => write!(f, "r{r} shut down (its report is in)"),
            Event::Outage { down, until } => write!(
                f,
                "STORE {} until {}",
                if *down { "DOWN" } else { "PAUSED" },
                secs(*until)
            ),
            Event::OutageEnd => f.write_str("store back"),
            Event::ExpiredInTransit { r, call, n, after } => write!(
                f,
                "r{r} gets fetch#{call}'s {n} deliveries {after:?} after sending it: expired in \
                 transit"
            ),
        }
    }
}

/// Formats a virtual instant as seconds since the start.
pub(crate) fn secs(at: Duration) -> String {
    format!("{:>10.6}s", at.as_secs_f64())
}

/// The last `capacity` events.
#[derive(Debug)]
pub(crate) struct Trace {
    ring: VecDeque<(Duration, Event)>,
    capacity: usize,
    print: bool,
    /// FNV-1a over every event's full text, when asked for (determinism and comparison tests).
    pub(crate) digest: Option<u64>,
}

impl Trace {
    pub(crate) fn new(capacity: usize, print: bool, digest: bool) -> Self {
        Self {
            ring: VecDeque::with_capacity(capacity.min(4096)),
            capacity,
            print,
            digest: digest.then_some(0xcbf2_9ce4_8422_2325),
        }
    }

    pub(crate) fn push(&mut self, at: Duration, event: Event) {
        if let Some(hash) = self.digest.as_mut() {
            for byte in format!("{at:?} {event:?}\n").bytes() {
                *hash = (*hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
            }
        }
        if self.print {
            println!("{}  {event}", secs(at));
        }
        if self.capacity == 0 {
            return;
        }
        if self.ring.len() == self.capacity {
            self.ring.pop_front();
        }
        self.ring.push_back((at, event));
    }

    pub(crate) fn lines(&self) -> Vec<String> {
        self.ring
            .iter()
            .map(|(at, event)| format!("{}  {event}", secs(*at)))
            .collect()
    }
}
