//! The world's shared state: tasks, the ready set, timers and nodes, behind one mutex.
//!
//! The mutex is a leaf: nothing is polled, dropped or woken while it is held (futures and
//! wakers taken out under it are dropped or woken after it is released), so a task, a drop or
//! a waker may come back into the world at any time — spawn, wake, read the clock, set a timer.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::{Wake, Waker};
use std::time::{Duration, Instant};

use leasehold_worker::BoxFuture;

use super::trace::{Trace, Traced};
use super::{BusyLoop, NodeId, WorldConfig};
use crate::rng::Rng;

/// Everything the world and its runtime handles share.
pub(super) struct Shared {
    state: Mutex<State>,
}

impl Shared {
    pub(super) fn new(state: State) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(state),
        })
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing that can panic runs under the lock but the world's own bookkeeping.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers `future` as a ready task of `node`; on a dead node, drops it at once.
    pub(super) fn spawn(self: &Arc<Self>, node: NodeId, future: BoxFuture) {
        let refused = self.lock().spawn(Arc::downgrade(self), node, future);
        drop(refused);
    }
}

/// A node: one replica incarnation.
#[derive(Debug)]
pub(super) struct Node {
    pub(super) alive: bool,
    pub(super) paused: bool,
    /// While the node's clock is stalled: the instant it reads, and when the stall ends.
    pub(super) stall: Option<(Instant, Instant)>,
    pub(super) tasks: usize,
    pub(super) polls: u64,
    /// Polls since the world's clock last moved.
    polls_still: u64,
}

impl Node {
    fn new() -> Self {
        Self {
            alive: true,
            paused: false,
            stall: None,
            tasks: 0,
            polls: 0,
            polls_still: 0,
        }
    }

    /// Its tasks may be polled.
    fn runs(&self) -> bool {
        self.alive && !self.paused
    }

    /// Its timers may fire.
    fn fires(&self) -> bool {
        self.runs() && self.stall.is_none()
    }
}

struct Task {
    node: NodeId,
    /// `None` while it is being polled.
    future: Option<BoxFuture>,
    waker: Waker,
}

pub(super) struct Timer {
    node: NodeId,
    deadline: Instant,
    /// Its key in the due set, with its id.
    fire_at: Instant,
    pub(super) fired: bool,
    pub(super) waker: Option<Waker>,
}

/// Wakes one task: puts it in the ready set, if it still exists.
struct TaskWaker {
    shared: Weak<Shared>,
    task: u64,
}

impl Wake for TaskWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if let Some(shared) = self.shared.upgrade() {
            let mut state = shared.lock();
            if state.tasks.contains_key(&self.task) {
                state.ready.insert(self.task);
            }
        }
    }
}

/// A task taken out to be polled.
pub(super) struct Taken {
    pub(super) task: u64,
    pub(super) future: BoxFuture,
    pub(super) waker: Waker,
}

pub(super) struct State {
    pub(super) base: Instant,
    pub(super) now: Instant,
    pub(super) rng: Rng,
    pub(super) config: WorldConfig,
    pub(super) nodes: Vec<Node>,
    tasks: BTreeMap<u64, Task>,
    /// Woken tasks, by id: a set, so the order tasks were woken in never matters — only the
    /// seeded draw among them does.
    ready: BTreeSet<u64>,
    next_task: u64,
    pub(super) timers: BTreeMap<u64, Timer>,
    /// Timers not fired yet, by (when they are due, id).
    pub(super) due: BTreeSet<(Instant, u64)>,
    next_timer: u64,
    pub(super) polls: u64,
    polls_still: u64,
    pub(super) trace: Trace,
    /// Reused by every pick, so choosing a task allocates nothing.
    scratch: Vec<u64>,
}

impl State {
    pub(super) fn new(base: Instant, rng: Rng, config: WorldConfig) -> Self {
        Self {
            base,
            now: base,
            rng,
            trace: Trace::new(config.trace_len),
            config,
            nodes: Vec::new(),
            tasks: BTreeMap::new(),
            ready: BTreeSet::new(),
            next_task: 0,
            timers: BTreeMap::new(),
            due: BTreeSet::new(),
            next_timer: 0,
            polls: 0,
            polls_still: 0,
            scratch: Vec::new(),
        }
    }

    pub(super) fn new_node(&mut self) -> NodeId {
        let id = NodeId(u32::try_from(self.nodes.len()).expect("fewer than 2^32 nodes"));
        self.nodes.push(Node::new());
        id
    }

    pub(super) fn node(&self, node: NodeId) -> &Node {
        self.nodes
            .get(node.index())
            .unwrap_or_else(|| panic!("{node} is not a node of this world"))
    }

    pub(super) fn node_mut(&mut self, node: NodeId) -> &mut Node {
        self.nodes
            .get_mut(node.index())
            .unwrap_or_else(|| panic!("{node} is not a node of this world"))
    }

    /// The node's clock: the world's, or the instant it froze at while stalled.
    pub(super) fn node_now(&self, node: NodeId) -> Instant {
        self.node(node).stall.map_or(self.now, |(frozen, _)| frozen)
    }

    pub(super) fn record(&mut self, node: NodeId, what: Traced) {
        let at = self.now - self.base;
        self.trace.record(at, node, what);
    }

    /// Registers a ready task; gives the future back (to be dropped unlocked) on a dead node.
    fn spawn(
        &mut self,
        shared: Weak<Shared>,
        node: NodeId,
        future: BoxFuture,
    ) -> Option<BoxFuture> {
        if !self.node(node).alive {
            self.record(node, Traced::SpawnRefused);
            return Some(future);
        }
        let task = self.next_task;
        self.next_task += 1;
        let waker = Waker::from(Arc::new(TaskWaker { shared, task }));
        self.tasks.insert(
            task,
            Task {
                node,
                future: Some(future),
                waker,
            },
        );
        self.ready.insert(task);
        self.node_mut(node).tasks += 1;
        self.record(node, Traced::Spawn { task });
        None
    }

    /// Draws one ready task of a running node and takes its future out, or reports a busy loop
    /// once too many polls happened without the clock moving.
    pub(super) fn take_ready(&mut self) -> Result<Option<Taken>, BusyLoop> {
        let mut runnable = std::mem::take(&mut self.scratch);
        runnable.clear();
        for &id in &self.ready {
            if let Some(task) = self.tasks.get(&id) {
                if self.nodes[task.node.index()].runs() {
                    runnable.push(id);
                }
            }
        }
        let picked = match runnable.len() {
            0 => None,
            1 => Some(runnable[0]),
            n => Some(runnable[self.rng.below(n as u64) as usize]),
        };
        self.scratch = runnable;
        let Some(id) = picked else {
            return Ok(None);
        };
        if self.polls_still >= self.config.busy_poll_limit {
            return Err(self.busy_loop());
        }
        self.ready.remove(&id);
        let task = self.tasks.get_mut(&id).expect("picked from the tasks");
        let future = task
            .future
            .take()
            .expect("a task is polled by one caller at a time");
        let (node, waker) = (task.node, task.waker.clone());
        self.polls += 1;
        self.polls_still += 1;
        let node = &mut self.nodes[node.index()];
        node.polls += 1;
        node.polls_still += 1;
        Ok(Some(Taken {
            task: id,
            future,
            waker,
        }))
    }

    /// Blames the node polled most since the clock last moved, and starts a new count.
    fn busy_loop(&mut self) -> BusyLoop {
        let (index, node) = self
            .nodes
            .iter()
            .enumerate()
            .max_by_key(|(i, node)| (node.polls_still, std::cmp::Reverse(*i)))
            .expect("a ready task has a node");
        let report = BusyLoop {
            node: NodeId(index as u32),
            polls: node.polls_still,
            at: self.now - self.base,
        };
        self.reset_still();
        report
    }

    fn reset_still(&mut self) {
        self.polls_still = 0;
        self.nodes.iter_mut().for_each(|node| node.polls_still = 0);
    }

    /// A polled task comes back: kept if pending, removed (its future handed back to be
    /// dropped unlocked) if it completed.
    pub(super) fn put_back(&mut self, taken: Taken, done: bool) -> Option<BoxFuture> {
        let Some(node) = self.tasks.get(&taken.task).map(|task| task.node) else {
            return Some(taken.future);
        };
        self.record(
            node,
            Traced::Poll {
                task: taken.task,
                done,
            },
        );
        if !done {
            let task = self.tasks.get_mut(&taken.task).expect("looked up above");
            task.future = Some(taken.future);
            return None;
        }
        self.tasks.remove(&taken.task);
        self.ready.remove(&taken.task);
        self.node_mut(node).tasks -= 1;
        Some(taken.future)
    }

    /// Registers a timer of `node` for `deadline`, due a seeded 0 ..= `max_timer_lateness`
    /// after it.
    pub(super) fn set_timer(&mut self, node: NodeId, deadline: Instant, waker: Waker) -> u64 {
        let late = self
            .rng
            .duration(Duration::ZERO, self.config.max_timer_lateness);
        let fire_at = deadline + late;
        let timer = self.next_timer;
        self.next_timer += 1;
        self.timers.insert(
            timer,
            Timer {
                node,
                deadline,
                fire_at,
                fired: false,
                waker: Some(waker),
            },
        );
        self.due.insert((fire_at, timer));
        let (deadline, fire_at) = (deadline - self.base, fire_at - self.base);
        self.record(
            node,
            Traced::TimerSet {
                timer,
                deadline,
                fire_at,
            },
        );
        timer
    }

    /// A node wakes (a pause or a stall ended): its timers whose deadline has passed are due
    /// now, lateness or not. A process that wakes finds its expired timers expired; lateness
    /// models the scheduling delay of one that runs.
    pub(super) fn overdue_now(&mut self, node: NodeId) {
        let now = self.now;
        let overdue: Vec<u64> = self
            .timers
            .iter()
            .filter(|(_, t)| t.node == node && !t.fired && t.deadline <= now && t.fire_at > now)
            .map(|(&id, _)| id)
            .collect();
        for id in overdue {
            let timer = self.timers.get_mut(&id).expect("listed above");
            self.due.remove(&(timer.fire_at, id));
            timer.fire_at = now;
            self.due.insert((now, id));
        }
    }

    /// Removes a timer (its sleep was dropped); its waker is handed back to be dropped unlocked.
    pub(super) fn cancel_timer(&mut self, timer: u64) -> Option<Waker> {
        let removed = self.timers.remove(&timer)?;
        self.due.remove(&(removed.fire_at, timer));
        removed.waker
    }

    /// Ends the stalls that are over and fires every due timer of a node that may fire them,
    /// in (due instant, id) order; returns the wakers to wake unlocked.
    pub(super) fn settle(&mut self) -> Vec<Waker> {
        let now = self.now;
        for i in 0..self.nodes.len() {
            if matches!(self.nodes[i].stall, Some((_, until)) if until <= now) {
                self.nodes[i].stall = None;
                self.record(NodeId(i as u32), Traced::StallEnd);
                self.overdue_now(NodeId(i as u32));
            }
        }
        let fire: Vec<(Instant, u64)> = self
            .due
            .range(..=(now, u64::MAX))
            .filter(|(_, id)| self.nodes[self.timers[id].node.index()].fires())
            .copied()
            .collect();
        let mut wakers = Vec::with_capacity(fire.len());
        for (at, id) in fire {
            self.due.remove(&(at, id));
            let timer = self.timers.get_mut(&id).expect("a due timer exists");
            timer.fired = true;
            wakers.extend(timer.waker.take());
            let (node, late) = (timer.node, now.saturating_duration_since(timer.deadline));
            self.record(node, Traced::TimerFired { timer: id, late });
        }
        wakers
    }

    /// When something next happens without the simulation's help: the earliest due timer of a
    /// node that may fire it, or the end of a stall.
    pub(super) fn next_instant(&self) -> Option<Instant> {
        let timer = self
            .due
            .iter()
            .find(|(_, id)| self.nodes[self.timers[id].node.index()].fires())
            .map(|&(at, _)| at);
        let stall = self
            .nodes
            .iter()
            .filter_map(|node| node.stall.map(|(_, until)| until))
            .min();
        timer.into_iter().chain(stall).min()
    }

    /// Moves the clock to `to` (never back) and settles; returns the wakers to wake unlocked.
    pub(super) fn advance(&mut self, to: Instant) -> Vec<Waker> {
        if to > self.now {
            self.now = to;
            self.reset_still();
        }
        self.settle()
    }

    /// Marks `node` dead and takes out its tasks (in id order) and its timers' wakers, to be
    /// dropped unlocked.
    pub(super) fn kill(&mut self, node: NodeId) -> (Vec<BoxFuture>, Vec<Waker>) {
        let state = self.node_mut(node);
        state.alive = false;
        state.paused = false;
        state.stall = None;
        state.tasks = 0;
        let ids: Vec<u64> = self
            .tasks
            .iter()
            .filter(|(_, task)| task.node == node)
            .map(|(&id, _)| id)
            .collect();
        let mut futures = Vec::with_capacity(ids.len());
        for id in ids {
            self.ready.remove(&id);
            let task = self.tasks.remove(&id).expect("listed above");
            futures.extend(task.future);
        }
        let timers: Vec<u64> = self
            .timers
            .iter()
            .filter(|(_, timer)| timer.node == node)
            .map(|(&id, _)| id)
            .collect();
        let wakers = timers
            .into_iter()
            .filter_map(|id| self.cancel_timer(id))
            .collect();
        self.record(
            node,
            Traced::Kill {
                tasks: futures.len(),
            },
        );
        (futures, wakers)
    }

    /// Takes out every task and timer (the world is going away), in id order.
    pub(super) fn clear(&mut self) -> (Vec<BoxFuture>, Vec<Waker>) {
        self.nodes.iter_mut().for_each(|node| {
            node.alive = false;
            node.tasks = 0;
        });
        self.ready.clear();
        self.due.clear();
        let futures = std::mem::take(&mut self.tasks)
            .into_values()
            .filter_map(|task| task.future)
            .collect();
        let wakers = std::mem::take(&mut self.timers)
            .into_values()
            .filter_map(|timer| timer.waker)
            .collect();
        (futures, wakers)
    }

    pub(super) fn tasks_alive(&self) -> usize {
        self.tasks.len()
    }
}
