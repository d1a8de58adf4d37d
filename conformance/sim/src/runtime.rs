//! # A deterministic, single-threaded runtime on virtual time
//!
//! A [`World`] runs the real driver (`leasehold-worker`) the way a simulation needs it: every
//! task of every replica is polled on the calling thread, time is virtual and moves only when
//! the world is stepped, and every choice the world makes comes from one seeded generator, so a
//! seed gives the same run, poll for poll, on every platform.
//!
//! ## Nodes
//!
//! A **node** ([`NodeId`]) is one replica incarnation: everything one worker process spawns.
//! [`World::runtime`] gives a node's [`SimRuntime`], the `leasehold_worker::Runtime` the worker
//! is built on: its `spawn` registers a task tagged with the node, its `sleep_until` sets a timer
//! on the node's clock, its `now` reads the node's clock. A crashed replica's successor is a new
//! node, so nothing of the old incarnation can leak into it.
//!
//! ## What is polled when
//!
//! [`World::step`] first polls ready tasks (spawned, or woken since their last poll) of nodes
//! that are alive and not paused, one at a time, until none is ready; tasks may spawn tasks and
//! wake each other meanwhile, and those are polled in the same round. Which ready task goes next
//! is drawn from the generator, so interleavings vary with the seed but replay exactly. Then, if
//! one of the simulation's own events ([`World::schedule`]) is due, it is handed back
//! ([`Step::Event`]) for the caller to act on. Otherwise the clock moves to the earliest of: the
//! next timer of a node that is alive, not paused and not stalled; the next event; the end of a
//! stall. Timers due then fire, the tasks they woke are polled until none is ready, and the step
//! returns [`Step::Advanced`]. With nothing left that could move, it returns [`Step::Idle`].
//! Virtual time moves only there, so between two steps the caller sees a quiet, frozen world —
//! every task has reacted to the present instant — that it can inspect and change (publish,
//! pause, kill).
//!
//! Timers fire late by a seeded 0 ..= [`WorldConfig::max_timer_lateness`] (2 ms by default) and
//! never early, like a real timer; a sleep until an instant that has passed completes on its
//! first poll. At one instant, tasks woken by timers run before the events due then are handed
//! back, and events come back in the order they were scheduled.
//!
//! ## Faults
//!
//! - [`World::pause`]: the node's tasks are not polled. Its clock runs on; wakes and timers that
//!   come due meanwhile are remembered and take effect at [`World::resume`]: due timers fire at
//!   once, and the woken tasks run in the next step. A stop-the-world GC pause, a frozen VM.
//! - [`World::kill`]: every task of the node is dropped, in spawn order, and later spawns on its
//!   runtime handles drop their future at once; its timers are gone. A crashed process.
//! - [`World::stall_clock`]: the node's `now()` freezes for that long of world time while its
//!   tasks still run; its timers do not fire. When the stall ends its clock jumps to the world's
//!   time and the timers due by then fire. A clock that lags, then catches up.
//!
//! The store's clock ([`World::clock`], a `leasehold_memory::Clock`) is the world's, never a
//! node's: a stalled node's leases lapse on the store's time, as on a Redis server.
//!
//! ## Determinism
//!
//! The world's only randomness is the [`Rng`] it is given: the pick among ready tasks and each
//! timer's lateness are drawn from it, in an order fixed by the run itself. Every collection
//! that is iterated is ordered (tasks, timers and events are kept by id or by instant, ids count
//! up and are never reused; the ready set is a set, so the order tasks were woken in does not
//! matter). The system clock is never read: instants are the caller's base plus virtual time,
//! and traces show them relative to the base.
//!
//! ## Guarding against busy loops
//!
//! A task that keeps itself ready would hold the clock still forever. After
//! [`WorldConfig::busy_poll_limit`] polls without the clock moving, [`World::step`] returns a
//! [`BusyLoop`] naming the node polled most, so the simulation fails the seed instead of hanging.
//!
//! The world's state sits behind one mutex that is never held while a future is polled or
//! dropped or a waker is woken (a drop may spawn, a wake may come from anywhere), so the
//! handles are `Send + Sync` as the driver requires, although everything runs on one thread.

mod executor;
mod handle;
mod trace;

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::task::{Context, Waker};
use std::time::{Duration, Instant};

use executor::{Shared, State};
use handle::Output;
pub use handle::{JoinHandle, SimClock, SimRuntime};
pub use trace::{TraceEvent, Traced};

use crate::rng::Rng;

/// A node of the world: one replica incarnation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(u32);

impl NodeId {
    /// Its position among the world's nodes, in creation order from 0.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "n{}", self.0)
    }
}

/// The world's tunables.
#[derive(Debug, Clone)]
pub struct WorldConfig {
    /// Timers fire up to this long after their deadline (drawn per timer), never before.
    pub max_timer_lateness: Duration,
    /// Polls without the clock moving after which a step reports a [`BusyLoop`].
    pub busy_poll_limit: u64,
    /// Trace events kept, the latest ones (0: no trace).
    pub trace_len: usize,
}

impl Default for WorldConfig {
    fn default() -> Self {
        Self {
            max_timer_lateness: Duration::from_millis(2),
            busy_poll_limit: 200_000,
            trace_len: 0,
        }
    }
}

/// What one [`World::step`] came to.
#[derive(Debug, PartialEq, Eq)]
#[must_use]
pub enum Step<E> {
    /// A scheduled event came due (at [`World::now`]): the caller acts on it.
    Event(E),
    /// No task was ready and no event due: the clock moved to this instant, the timers and
    /// stalls due by then fired and ended, and the tasks they woke ran until none was ready.
    Advanced(Instant),
    /// Nothing can move: no task is ready on a running node, no timer is set on one, no stall
    /// is ongoing and no event is scheduled. Resuming a paused node may change that.
    Idle,
}

/// Too many polls without the clock moving: some task keeps itself ready.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BusyLoop {
    /// The node whose tasks were polled most meanwhile.
    pub node: NodeId,
    /// How many times they were.
    pub polls: u64,
    /// World time, since the base.
    pub at: Duration,
}

impl fmt::Display for BusyLoop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "busy loop: tasks of {} were polled {} times at {:?} without the clock moving",
            self.node, self.polls, self.at
        )
    }
}

impl std::error::Error for BusyLoop {}

/// The simulated world: one virtual clock, its nodes, and the executor polling their tasks.
/// `E` is the type of the simulation's own events.
///
/// Not `Clone`: the simulation owns it; tasks reach it only through their [`SimRuntime`].
pub struct World<E> {
    shared: Arc<Shared>,
    /// The simulation's events, by (instant, order scheduled).
    events: BTreeMap<(Instant, u64), E>,
    next_event: u64,
}

impl<E> World<E> {
    /// A world whose clock starts at `base`, drawing every choice from `rng`.
    pub fn new(base: Instant, rng: Rng) -> Self {
        Self::with_config(base, rng, WorldConfig::default())
    }

    /// A world with the given tunables.
    pub fn with_config(base: Instant, rng: Rng, config: WorldConfig) -> Self {
        Self {
            shared: Shared::new(State::new(base, rng, config)),
            events: BTreeMap::new(),
            next_event: 0,
        }
    }

    /// A new node, alive and running.
    pub fn new_node(&mut self) -> NodeId {
        self.shared.lock().new_node()
    }

    /// The runtime handle of `node`, to build a worker on.
    ///
    /// # Panics
    /// If `node` is not a node of this world.
    pub fn runtime(&self, node: NodeId) -> SimRuntime {
        self.shared.lock().node(node);
        SimRuntime {
            shared: self.shared.clone(),
            node,
        }
    }

    /// The store's clock: the world's time.
    pub fn clock(&self) -> SimClock {
        SimClock {
            shared: self.shared.clone(),
        }
    }

    /// Runs `future` as a task of `node`; its output lands in the handle. For the simulation's
    /// own async calls (a worker's shutdown, its stats), which need the world to be stepped.
    pub fn spawn<T, F>(&self, node: NodeId, future: F) -> JoinHandle<T>
    where
        T: Send + 'static,
        F: Future<Output = T> + Send + 'static,
    {
        let slot = Arc::new(Mutex::new(Output::Running));
        let output = slot.clone();
        self.shared.spawn(
            node,
            Box::pin(async move {
                let value = future.await;
                *output.lock().unwrap_or_else(|e| e.into_inner()) = Output::Done(value);
            }),
        );
        JoinHandle { slot }
    }

    /// The world's time.
    pub fn now(&self) -> Instant {
        self.shared.lock().now
    }

    /// World time since the base.
    pub fn elapsed(&self) -> Duration {
        let state = self.shared.lock();
        state.now - state.base
    }

    /// `node`'s clock: the world's, or where it froze while stalled.
    pub fn node_now(&self, node: NodeId) -> Instant {
        self.shared.lock().node_now(node)
    }

    /// Hands `event` back from [`step`](Self::step) at `at` (at once if `at` has passed).
    pub fn schedule(&mut self, at: Instant, event: E) {
        let at = at.max(self.now());
        self.events.insert((at, self.next_event), event);
        self.next_event += 1;
    }

    /// Events scheduled and not handed back yet.
    pub fn scheduled(&self) -> usize {
        self.events.len()
    }

    /// Polls ready tasks until none is; then hands back a due event, or moves the clock to the
    /// next instant something happens and polls the tasks that woke then until none is ready
    /// (see the module docs). Either way the world it returns is quiet: nothing ready is left
    /// unpolled on a running node.
    ///
    /// # Errors
    /// A [`BusyLoop`] when too many polls happened without the clock moving; the count starts
    /// over, so the world can still be stepped (or inspected) after it.
    ///
    /// # Panics
    /// A panic in a task propagates out of the step that polled it.
    pub fn step(&mut self) -> Result<Step<E>, BusyLoop> {
        // Bound first: a guard living through the wake would deadlock with the waker.
        let wakers = self.shared.lock().settle();
        wake(wakers);
        self.poll_ready()?;
        let now = self.now();
        if let Some(entry) = self.events.first_entry() {
            if entry.key().0 <= now {
                return Ok(Step::Event(entry.remove()));
            }
        }
        let next_event = self.events.keys().next().map(|&(at, _)| at);
        let mut state = self.shared.lock();
        let Some(next) = state.next_instant().into_iter().chain(next_event).min() else {
            return Ok(Step::Idle);
        };
        let wakers = state.advance(next);
        let now = state.now;
        drop(state);
        wake(wakers);
        self.poll_ready()?;
        Ok(Step::Advanced(now))
    }

    /// Polls ready tasks of running nodes, in seeded order, until none is ready.
    fn poll_ready(&mut self) -> Result<(), BusyLoop> {
        loop {
            let Some(mut taken) = self.shared.lock().take_ready()? else {
                return Ok(());
            };
            let waker = taken.waker.clone();
            let done = taken
                .future
                .as_mut()
                .poll(&mut Context::from_waker(&waker))
                .is_ready();
            let finished = self.shared.lock().put_back(taken, done);
            drop(finished);
        }
    }

    /// Stops polling `node`'s tasks until [`resume`](Self::resume); its clock runs on.
    pub fn pause(&mut self, node: NodeId) {
        let mut state = self.shared.lock();
        let target = state.node_mut(node);
        if target.alive && !target.paused {
            target.paused = true;
            state.record(node, Traced::Pause);
        }
    }

    /// Lets `node` run again: its due timers fire now, its woken tasks run in the next step.
    pub fn resume(&mut self, node: NodeId) {
        let mut state = self.shared.lock();
        let target = state.node_mut(node);
        if !target.paused {
            return;
        }
        target.paused = false;
        state.record(node, Traced::Resume);
        state.overdue_now(node);
        let wakers = state.settle();
        drop(state);
        wake(wakers);
    }

    /// Drops every task of `node` (in spawn order) and its timers; later spawns on its runtime
    /// handles drop their future at once. The node stays dead.
    pub fn kill(&mut self, node: NodeId) {
        let (futures, wakers) = self.shared.lock().kill(node);
        // One at a time, unlocked: a drop may spawn or wake.
        for future in futures {
            drop(future);
        }
        drop(wakers);
    }

    /// Freezes `node`'s clock for `duration` of world time (its tasks still run, its timers do
    /// not fire); then its clock jumps to the world's and its due timers fire. A stall during a
    /// stall extends it; the clock stays where it first froze.
    pub fn stall_clock(&mut self, node: NodeId, duration: Duration) {
        let mut state = self.shared.lock();
        let now = state.now;
        let target = state.node_mut(node);
        if !target.alive || duration.is_zero() {
            return;
        }
        target.stall = Some(match target.stall {
            Some((frozen, until)) => (frozen, until.max(now + duration)),
            None => (now, now + duration),
        });
        state.record(node, Traced::Stall { duration });
    }

    /// Whether `node` is alive (not killed).
    pub fn is_alive(&self, node: NodeId) -> bool {
        self.shared.lock().node(node).alive
    }

    /// Whether `node` is paused.
    pub fn is_paused(&self, node: NodeId) -> bool {
        self.shared.lock().node(node).paused
    }

    /// Whether `node`'s clock is stalled.
    pub fn is_stalled(&self, node: NodeId) -> bool {
        self.shared.lock().node(node).stall.is_some()
    }

    /// Tasks of `node` not finished (0 once it is dead).
    pub fn tasks(&self, node: NodeId) -> usize {
        self.shared.lock().node(node).tasks
    }

    /// Tasks of every node not finished.
    pub fn tasks_alive(&self) -> usize {
        self.shared.lock().tasks_alive()
    }

    /// Polls so far, of every task.
    pub fn polls(&self) -> u64 {
        self.shared.lock().polls
    }

    /// Polls so far of `node`'s tasks.
    pub fn node_polls(&self, node: NodeId) -> u64 {
        self.shared.lock().node(node).polls
    }

    /// The last [`WorldConfig::trace_len`] things the world did, oldest first.
    pub fn trace(&self) -> Vec<TraceEvent> {
        self.shared.lock().trace.events()
    }
}

impl<E> fmt::Debug for World<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.shared.lock();
        f.debug_struct("World")
            .field("elapsed", &(state.now - state.base))
            .field("nodes", &state.nodes.len())
            .field("tasks", &state.tasks_alive())
            .field("polls", &state.polls)
            .field("events", &self.events.len())
            .finish_non_exhaustive()
    }
}

impl<E> Drop for World<E> {
    /// Drops every task, so the runtime handles they hold (and the world's state with them)
    /// are freed too.
    fn drop(&mut self) {
        let (futures, wakers) = self.shared.lock().clear();
        for future in futures {
            drop(future);
        }
        drop(wakers);
    }
}

/// Wakes outside the lock: a waker may lock the world.
fn wake(wakers: Vec<Waker>) {
    wakers.into_iter().for_each(Waker::wake);
}
