//! What the world records, for a failing seed's last events and for replay digests.

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use super::NodeId;

/// One thing the world did, at a virtual instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceEvent {
    /// World time, since the world's base instant.
    pub at: Duration,
    /// The node it concerns.
    pub node: NodeId,
    /// What happened.
    pub what: Traced,
}

/// The kinds of [`TraceEvent`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Traced {
    /// A task was registered.
    Spawn {
        /// Its id (ids count up across the world, never reused).
        task: u64,
    },
    /// A spawn on a dead node: the future was dropped at once.
    SpawnRefused,
    /// A task was polled.
    Poll {
        /// Its id.
        task: u64,
        /// Whether it completed.
        done: bool,
    },
    /// A sleep registered a timer.
    TimerSet {
        /// The timer's id.
        timer: u64,
        /// The instant asked for, since the world's base.
        deadline: Duration,
        /// When it is due to fire, since the world's base (the deadline plus a seeded delay).
        fire_at: Duration,
    },
    /// A timer fired.
    TimerFired {
        /// The timer's id.
        timer: u64,
        /// How long after its deadline (on the world's clock).
        late: Duration,
    },
    /// The node was paused.
    Pause,
    /// The node was resumed.
    Resume,
    /// The node was killed.
    Kill {
        /// Tasks dropped.
        tasks: usize,
    },
    /// The node's clock froze.
    Stall {
        /// For how long, from now.
        duration: Duration,
    },
    /// The node's clock caught up with the world's.
    StallEnd,
}

impl fmt::Display for TraceEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:>5}.{:06}s {} ",
            self.at.as_secs(),
            self.at.subsec_micros(),
            self.node
        )?;
        match &self.what {
            Traced::Spawn { task } => write!(f, "spawn t{task}"),
            Traced::SpawnRefused => write!(f, "spawn refused (node dead)"),
            Traced::Poll { task, done } => {
                write!(f, "poll t{task}{}", if *done { " (done)" } else { "" })
            }
            Traced::TimerSet {
                timer,
                deadline,
                fire_at,
            } => write!(
                f,
                "timer {timer} set for {deadline:?} (fires at {fire_at:?})"
            ),
            Traced::TimerFired { timer, late } => write!(f, "timer {timer} fired, {late:?} late"),
            Traced::Pause => write!(f, "pause"),
            Traced::Resume => write!(f, "resume"),
            Traced::Kill { tasks } => write!(f, "kill ({tasks} tasks dropped)"),
            Traced::Stall { duration } => write!(f, "clock stalls for {duration:?}"),
            Traced::StallEnd => write!(f, "clock catches up"),
        }
    }
}

/// The last `capacity` events (none kept when it is 0).
#[derive(Debug, Default)]
pub(super) struct Trace {
    capacity: usize,
    events: VecDeque<TraceEvent>,
}

impl Trace {
    pub(super) fn new(capacity: usize) -> Self {
        Self {
            capacity,
            events: VecDeque::new(),
        }
    }

    pub(super) fn record(&mut self, at: Duration, node: NodeId, what: Traced) {
        if self.capacity == 0 {
            return;
        }
        if self.events.len() == self.capacity {
            self.events.pop_front();
        }
        self.events.push_back(TraceEvent { at, node, what });
    }

    pub(super) fn events(&self) -> Vec<TraceEvent> {
        self.events.iter().cloned().collect()
    }
}
