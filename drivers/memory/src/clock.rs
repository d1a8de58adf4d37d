//! The store's time source: the system clock, or a manual clock for tests and simulations.

use std::fmt;
use std::time::{Duration, Instant};

use crate::sync::{lock, Arc, Mutex};

/// A monotonic time source for the store: idle times, claim timeouts and release delays are
/// measured on it (the role the Redis server's clock plays for Redis Streams).
pub trait Clock: Send + Sync + 'static {
    /// The current instant. Must never go backwards.
    fn now(&self) -> Instant;

    /// Whether [`now`](Clock::now) follows [`Instant::now`], so that a fetch may block on a real
    /// timer until a lease lapses or its `wait` is over. A virtual clock returns `false`: a
    /// fetch then never blocks, because waiting in real time would not advance virtual time.
    /// The default is `false`.
    fn is_real_time(&self) -> bool {
        false
    }
}

/// The system's monotonic clock ([`Instant::now`]): the default.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn is_real_time(&self) -> bool {
        true
    }
}

/// A clock that moves only when told to, for deterministic tests and simulators.
///
/// Clones share one time: keep a clone to [`advance`](ManualClock::advance) the clock a
/// [`MemoryStream`](crate::MemoryStream) reads. It is not real-time, so a fetch on a stream using
/// it never blocks: it returns what is available at once, possibly nothing.
#[derive(Clone)]
pub struct ManualClock {
    now: Arc<Mutex<Instant>>,
}

impl ManualClock {
    /// A manual clock starting at the current system instant.
    pub fn new() -> Self {
        Self::starting_at(Instant::now())
    }

    /// A manual clock starting at `start`.
    pub fn starting_at(start: Instant) -> Self {
        Self {
            now: Arc::new(Mutex::new(start)),
        }
    }

    /// Moves the clock forward by `by`.
    ///
    /// # Panics
    ///
    /// If the resulting instant is not representable (centuries ahead).
    pub fn advance(&self, by: Duration) {
        let mut now = lock(&self.now);
        *now = now
            .checked_add(by)
            .expect("ManualClock advanced beyond the representable range of Instant");
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        *lock(&self.now)
    }
}

impl fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManualClock")
            .field("now", &self.now())
            .finish()
    }
}
