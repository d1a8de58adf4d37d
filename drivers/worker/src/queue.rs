//! The queue a stream's handler tasks take their invocations from. A push wakes one idle task
//! (or hands its waker to the pusher, to wake once it has done everything else), and a woken
//! task that takes an invocation while more are queued wakes the next one before it runs its
//! own: idle tasks are woken as a chain, one at a time.
//!
//! Why not a channel that wakes a waiting receiver per message: a fetch of a hundred messages
//! then wakes a hundred idle tasks from the driver's thread, the runtime spreads them over its
//! threads, and each outcome reaches the driver as a wake from another thread. With a chain,
//! handlers that finish at once run back to back on few tasks and one thread, and handlers
//! that wait still all start, one task switch apart. One mutex, no allocation per invocation.
//!
//! Why the driver wakes the task itself, at the end of its pass: tokio runs the task woken last
//! on a thread next, and cannot hand it to another thread meanwhile. Woken first, a handler
//! would wait for everything else the pass does (the calls it sends, the tasks it spawns
//! displace it), about 20 µs between an idle worker's fetch and its handler's start.
//!
//! Invariant (checked by the tests): whenever invocations are queued, either a woken task is on
//! its way to the queue or no task is idle; busy tasks come back to the queue before they idle.
//! Extra wake-ups are harmless; a lost one would strand an invocation.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::task::{Context, Poll, Waker};

use crate::sync::{Arc, Mutex, MutexGuard};

pub(crate) struct InvocationQueue<I> {
    state: Mutex<State<I>>,
}

struct State<I> {
    queued: VecDeque<I>,
    /// The tasks waiting for an invocation, by id; the one that idled last is woken first.
    idle: Vec<(u64, Waker)>,
    /// The idle task woken for an invocation that has not looked at the queue yet: at most one
    /// at a time (the chain).
    woken: Option<u64>,
    /// The id of the next taker.
    next: u64,
    /// No more invocations will come: once those queued are taken, takers get `None`.
    closed: bool,
}

impl<I> State<I> {
    /// Takes an idle task's waker to wake (outside the lock) if invocations are queued and no
    /// woken task is on its way yet.
    fn wake_one(&mut self) -> Option<Waker> {
        if self.woken.is_some() || self.queued.is_empty() {
            return None;
        }
        let (id, waker) = self.idle.pop()?;
        self.woken = Some(id);
        Some(waker)
    }

    /// Drops a task's idle entry, if it is still there.
    fn forget(&mut self, id: u64) {
        if let Some(at) = self.idle.iter().rposition(|(idle, _)| *idle == id) {
            self.idle.swap_remove(at);
        }
    }
}

/// One task's end of an [`InvocationQueue`].
pub(crate) struct Taker<I> {
    queue: Arc<InvocationQueue<I>>,
    id: u64,
    /// Whether it registered as idle and has not looked at the queue since.
    idle: bool,
}

impl<I> InvocationQueue<I> {
    pub(crate) fn new() -> Self {
        Self {
            state: Mutex::new(State {
                queued: VecDeque::new(),
                idle: Vec::new(),
                woken: None,
                next: 0,
                closed: false,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<I>> {
        // Nothing panics while holding the lock; a poisoned queue is still consistent.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues an invocation; wakes an idle task unless one is already on its way.
    #[cfg(test)]
    pub(crate) fn push(&self, invocation: I) {
        if let Some(waker) = self.push_unwoken(invocation) {
            waker.wake();
        }
    }

    /// Queues an invocation and returns the idle task to wake for it, if none is on its way yet;
    /// the caller must wake it (it counts as on its way), and may wait until it has done what
    /// else it was doing: a runtime that runs the task woken last first then starts it next.
    #[must_use = "the task taken to be woken must be woken, or the invocation may wait forever"]
    pub(crate) fn push_unwoken(&self, invocation: I) -> Option<Waker> {
        let mut state = self.lock();
        state.queued.push_back(invocation);
        state.wake_one()
    }

    /// No more invocations will come: wakes every idle task. The invocations still queued are
    /// handed out, then takers get `None`.
    pub(crate) fn close(&self) {
        let idle = {
            let mut state = self.lock();
            state.closed = true;
            std::mem::take(&mut state.idle)
        };
        for (_, waker) in idle {
            waker.wake();
        }
    }
}

impl<I> Taker<I> {
    /// An end for a new task to take invocations from `queue` with.
    pub(crate) fn new(queue: &Arc<InvocationQueue<I>>) -> Self {
        let id = {
            let mut state = queue.lock();
            state.next += 1;
            state.next
        };
        Self {
            queue: queue.clone(),
            id,
            idle: false,
        }
    }

    /// The next invocation; `None` once the queue is closed and empty.
    pub(crate) async fn take(&mut self) -> Option<I> {
        poll_fn(|cx| self.poll_take(cx)).await
    }

    /// Takes the next invocation, or registers `cx` to be woken when one may be there.
    pub(crate) fn poll_take(&mut self, cx: &mut Context<'_>) -> Poll<Option<I>> {
        let mut state = self.queue.lock();
        if state.woken == Some(self.id) {
            // Its entry was taken to wake it: the next push or take may wake another.
            state.woken = None;
            self.idle = false;
        }
        let Some(invocation) = state.queued.pop_front() else {
            if state.closed {
                return Poll::Ready(None);
            }
            if self.idle {
                // Polled again while idle: keep the entry's waker current.
                if let Some((_, waker)) = state.idle.iter_mut().find(|(id, _)| *id == self.id) {
                    waker.clone_from(cx.waker());
                }
            } else {
                state.idle.push((self.id, cx.waker().clone()));
                self.idle = true;
            }
            return Poll::Pending;
        };
        if self.idle {
            state.forget(self.id);
            self.idle = false;
        }
        // The chain: more invocations queued, wake the next idle task before running this one.
        let wake = state.wake_one();
        drop(state);
        if let Some(waker) = wake {
            waker.wake();
        }
        Poll::Ready(Some(invocation))
    }
}

impl<I> Drop for Taker<I> {
    /// A task that ends (its runtime dropped it) hands its wake-up on, so no invocation is
    /// stranded.
    fn drop(&mut self) {
        let wake = {
            let mut state = self.queue.lock();
            if state.woken == Some(self.id) {
                state.woken = None;
                state.wake_one()
            } else {
                if self.idle {
                    state.forget(self.id);
                }
                None
            }
        };
        if let Some(waker) = wake {
            waker.wake();
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use futures::task::{waker, ArcWake};

    use super::*;

    /// Counts its wake-ups.
    struct Count(AtomicUsize);

    impl ArcWake for Count {
        fn wake_by_ref(arc_self: &Arc<Self>) {
            arc_self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A task: its taker and how often it was woken.
    struct Task {
        taker: Taker<u32>,
        wakes: Arc<Count>,
    }

    impl Task {
        fn new(queue: &Arc<InvocationQueue<u32>>) -> Self {
            Self {
                taker: Taker::new(queue),
                wakes: Arc::new(Count(AtomicUsize::new(0))),
            }
        }

        fn poll(&mut self) -> Poll<Option<u32>> {
            let waker = waker(self.wakes.clone());
            self.taker.poll_take(&mut Context::from_waker(&waker))
        }

        fn wakes(&self) -> usize {
            self.wakes.0.load(Ordering::SeqCst)
        }
    }

    /// `N` tasks that found nothing and idle, in the order they idled.
    fn idle_tasks<const N: usize>(queue: &Arc<InvocationQueue<u32>>) -> [Task; N] {
        std::array::from_fn(|_| {
            let mut task = Task::new(queue);
            assert!(task.poll().is_pending());
            task
        })
    }

    /// How often each task was woken.
    fn wakes(tasks: &[Task]) -> Vec<usize> {
        tasks.iter().map(Task::wakes).collect()
    }

    /// Whenever invocations are queued, a woken task is on its way or no task is idle.
    fn assert_invariant(queue: &InvocationQueue<u32>) {
        let state = queue.lock();
        assert!(
            state.queued.is_empty() || state.woken.is_some() || state.idle.is_empty(),
            "{} invocations queued, {} tasks idle and none woken",
            state.queued.len(),
            state.idle.len(),
        );
    }

    #[test]
    fn hands_out_invocations_in_order() {
        let queue = Arc::new(InvocationQueue::new());
        let mut task = Task::new(&queue);
        for invocation in 0..3 {
            queue.push(invocation);
        }
        assert_eq!(task.poll(), Poll::Ready(Some(0)));
        assert_eq!(task.poll(), Poll::Ready(Some(1)));
        assert_eq!(task.poll(), Poll::Ready(Some(2)));
        assert!(task.poll().is_pending());
    }

    #[test]
    fn a_push_wakes_one_idle_task_and_the_woken_wakes_the_next() {
        let queue = Arc::new(InvocationQueue::new());
        let mut tasks = idle_tasks::<3>(&queue);
        queue.push(1);
        queue.push(2);
        assert_invariant(&queue);
        // One woken (the last to idle), though two invocations are queued.
        assert_eq!(wakes(&tasks), [0, 0, 1]);
        // It takes an invocation and, one more being queued, wakes the next.
        assert_eq!(tasks[2].poll(), Poll::Ready(Some(1)));
        assert_invariant(&queue);
        assert_eq!(wakes(&tasks), [0, 1, 1]);
        // That one takes the last: nobody else is woken.
        assert_eq!(tasks[1].poll(), Poll::Ready(Some(2)));
        assert_invariant(&queue);
        assert_eq!(wakes(&tasks), [0, 1, 1]);
        // Back from its invocation, a task idles again and is the next woken.
        assert!(tasks[2].poll().is_pending());
        queue.push(3);
        assert_eq!(tasks[2].wakes(), 2);
        assert_eq!(tasks[2].poll(), Poll::Ready(Some(3)));
        assert_eq!(tasks[0].wakes(), 0);
    }

    #[test]
    fn a_woken_task_that_finds_nothing_lets_the_next_push_wake_again() {
        let queue = Arc::new(InvocationQueue::new());
        let mut idle = Task::new(&queue);
        let mut busy = Task::new(&queue);
        assert!(idle.poll().is_pending());
        queue.push(1);
        assert_eq!(idle.wakes(), 1);
        // A task back from its invocation takes it first.
        assert_eq!(busy.poll(), Poll::Ready(Some(1)));
        assert!(busy.poll().is_pending());
        // The woken task finds nothing and idles again, still first in line.
        assert!(idle.poll().is_pending());
        queue.push(2);
        assert_eq!((idle.wakes(), busy.wakes()), (2, 0));
        assert_eq!(idle.poll(), Poll::Ready(Some(2)));
    }

    #[test]
    fn a_task_polled_while_idle_takes_an_invocation_and_leaves_the_idle_list() {
        let queue = Arc::new(InvocationQueue::new());
        let [mut first, mut second] = idle_tasks(&queue);
        assert!(first.poll().is_pending());
        queue.push(1);
        // `second` was woken; `first`, polled anyway, takes the invocation and leaves the list.
        assert_eq!((first.wakes(), second.wakes()), (0, 1));
        assert_eq!(first.poll(), Poll::Ready(Some(1)));
        assert_eq!(queue.lock().idle.len(), 0);
        assert!(second.poll().is_pending());
        queue.push(2);
        assert_eq!(second.wakes(), 2);
    }

    #[test]
    fn a_woken_task_dropped_hands_its_wake_up_on() {
        let queue = Arc::new(InvocationQueue::new());
        let [mut kept, dropped] = idle_tasks(&queue);
        queue.push(1);
        assert_eq!((kept.wakes(), dropped.wakes()), (0, 1));
        drop(dropped);
        assert_eq!(kept.wakes(), 1);
        assert_eq!(kept.poll(), Poll::Ready(Some(1)));
    }

    #[test]
    fn close_wakes_every_idle_task_and_hands_out_what_is_left() {
        let queue = Arc::new(InvocationQueue::new());
        let mut tasks = idle_tasks::<3>(&queue);
        queue.push(1);
        queue.push(2);
        queue.close();
        assert_eq!(wakes(&tasks), [1, 1, 1]);
        assert_eq!(tasks[0].poll(), Poll::Ready(Some(1)));
        assert_eq!(tasks[1].poll(), Poll::Ready(Some(2)));
        for task in &mut tasks {
            assert_eq!(task.poll(), Poll::Ready(None));
        }
    }
}

/// Loom: a push racing idle tasks registering, taking and handing the wake-up on never
/// strands an invocation (a lost wake-up leaves a task blocked, which loom reports as a
/// deadlock).
///
/// Run: `RUSTFLAGS="--cfg loom" cargo test -p leasehold-worker --lib --release loom`
#[cfg(all(test, loom))]
mod loom_tests {
    use loom::future::block_on;
    use loom::thread;

    use super::*;

    /// Every interleaving with up to 4 preemptions (`LOOM_MAX_PREEMPTIONS` overrides): the
    /// unbounded search of two tasks takes minutes and found nothing more.
    fn model(f: impl Fn() + Send + Sync + 'static) {
        let mut builder = loom::model::Builder::new();
        builder.preemption_bound.get_or_insert(4);
        builder.check(f);
    }

    /// `tasks` tasks each take one invocation, then end; the pushes race them.
    fn each_takes_one(tasks: usize) {
        model(move || {
            let queue = Arc::new(InvocationQueue::new());
            let handles: Vec<_> = (0..tasks)
                .map(|_| {
                    let mut taker = Taker::new(&queue);
                    thread::spawn(move || block_on(taker.take()))
                })
                .collect();
            for invocation in 0..tasks {
                queue.push(invocation);
            }
            let mut taken: Vec<usize> = handles
                .into_iter()
                .map(|handle| handle.join().unwrap().expect("not closed"))
                .collect();
            taken.sort_unstable();
            assert_eq!(taken, (0..tasks).collect::<Vec<_>>());
        });
    }

    #[test]
    fn a_push_racing_an_idle_task_is_not_lost() {
        each_takes_one(1);
    }

    #[test]
    fn pushes_racing_two_idle_tasks_wake_both_through_the_chain() {
        each_takes_one(2);
    }

    #[test]
    fn a_task_back_from_its_invocation_races_the_next_push() {
        model(|| {
            let queue = Arc::new(InvocationQueue::new());
            let mut taker = Taker::new(&queue);
            let task = thread::spawn(move || {
                let first = block_on(taker.take());
                let second = block_on(taker.take());
                (first, second)
            });
            queue.push(1);
            queue.push(2);
            assert_eq!(task.join().unwrap(), (Some(1), Some(2)));
        });
    }
}
