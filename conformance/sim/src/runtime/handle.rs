//! What tasks and the store see of the world: a node's runtime handle, its sleeps, the store's
//! clock, and the output of a task the simulation spawned.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Instant;

use leasehold_worker::{BoxFuture, Runtime};

use super::executor::Shared;
use super::NodeId;

/// A node's runtime: what the real driver spawns on, sleeps on and reads the time from.
///
/// Cheap to clone; every clone is the same node. Spawning on it once its node is dead drops
/// the future at once.
#[derive(Clone)]
pub struct SimRuntime {
    pub(super) shared: Arc<Shared>,
    pub(super) node: NodeId,
}

impl SimRuntime {
    /// The node this handle spawns on.
    pub fn node(&self) -> NodeId {
        self.node
    }
}

impl fmt::Debug for SimRuntime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimRuntime")
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

impl Runtime for SimRuntime {
    fn spawn(&self, future: BoxFuture) {
        self.shared.spawn(self.node, future);
    }

    fn sleep_until(&self, deadline: Instant) -> impl Future<Output = ()> + Send + 'static {
        Sleep {
            shared: self.shared.clone(),
            node: self.node,
            deadline,
            timer: None,
            done: false,
        }
    }

    fn now(&self) -> Instant {
        self.shared.lock().node_now(self.node)
    }
}

/// A sleep on a node's clock. Its timer is set at its first poll (if the deadline is still
/// ahead on the node's clock) and removed when it is dropped.
struct Sleep {
    shared: Arc<Shared>,
    node: NodeId,
    deadline: Instant,
    timer: Option<u64>,
    done: bool,
}

impl Future for Sleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(());
        }
        let mut state = this.shared.lock();
        let Some(timer) = this.timer else {
            if this.deadline <= state.node_now(this.node) {
                this.done = true;
                return Poll::Ready(());
            }
            // A dead node's timers never fire: its sleeps stay pending.
            if state.node(this.node).alive {
                this.timer = Some(state.set_timer(this.node, this.deadline, cx.waker().clone()));
            }
            return Poll::Pending;
        };
        // Gone: its node was killed.
        let Some(entry) = state.timers.get_mut(&timer) else {
            return Poll::Pending;
        };
        if entry.fired {
            state.timers.remove(&timer);
            this.timer = None;
            this.done = true;
            return Poll::Ready(());
        }
        let stale = match &entry.waker {
            Some(waker) if waker.will_wake(cx.waker()) => None,
            _ => entry.waker.replace(cx.waker().clone()),
        };
        drop(state);
        drop(stale);
        Poll::Pending
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        if let Some(timer) = self.timer.take() {
            let waker = self.shared.lock().cancel_timer(timer);
            drop(waker);
        }
    }
}

/// The store's clock: the world's virtual time, not any node's (a stalled node's clock lags,
/// the store's does not, like a Redis server's). Not real-time, so a `MemoryStream` on it
/// never blocks a fetch.
#[derive(Clone)]
pub struct SimClock {
    pub(super) shared: Arc<Shared>,
}

impl fmt::Debug for SimClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimClock").finish_non_exhaustive()
    }
}

impl leasehold_memory::Clock for SimClock {
    fn now(&self) -> Instant {
        self.shared.lock().now
    }

    fn is_real_time(&self) -> bool {
        false
    }
}

/// The output of a task spawned with [`World::spawn`](super::World::spawn), once it finished.
pub struct JoinHandle<T> {
    pub(super) slot: Arc<Mutex<Output<T>>>,
}

pub(super) enum Output<T> {
    Running,
    Done(T),
    Taken,
}

impl<T> JoinHandle<T> {
    fn slot(&self) -> std::sync::MutexGuard<'_, Output<T>> {
        self.slot.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the task finished.
    pub fn is_finished(&self) -> bool {
        !matches!(*self.slot(), Output::Running)
    }

    /// The task's output, once it finished (`None` before, and after it was taken). A task
    /// whose node died never finishes.
    pub fn try_take(&mut self) -> Option<T> {
        let mut slot = self.slot();
        match std::mem::replace(&mut *slot, Output::Taken) {
            Output::Done(output) => Some(output),
            other => {
                *slot = other;
                None
            }
        }
    }
}

impl<T> fmt::Debug for JoinHandle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JoinHandle")
            .field("finished", &self.is_finished())
            .finish_non_exhaustive()
    }
}
