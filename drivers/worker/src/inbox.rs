//! The driver's inbox: every task the driver spawned (handlers, backend calls) and the worker
//! handle post their events here, and the driver takes them all at once.
//!
//! A mutex-guarded `Vec` and one waker instead of a channel: posting costs no allocation (the
//! vector's capacity is reused: the driver swaps in its own empty one), and the driver takes a
//! whole burst in one lock, so a thousand handlers finishing together cost one wake-up, one
//! lock, and one pass through the engine.

use std::sync::{Mutex, MutexGuard};
use std::task::{Context, Poll};

use futures::task::AtomicWaker;

pub(crate) struct Inbox<T> {
    queue: Mutex<Queue<T>>,
    waker: AtomicWaker,
}

struct Queue<T> {
    items: Vec<T>,
    /// The driver is gone: nothing posted will be read.
    closed: bool,
}

impl<T> Inbox<T> {
    pub(crate) fn new() -> Self {
        Self {
            queue: Mutex::new(Queue {
                items: Vec::new(),
                closed: false,
            }),
            waker: AtomicWaker::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Queue<T>> {
        // Nothing panics while holding the lock; a poisoned queue is still consistent.
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Posts an event and wakes the driver; gives it back if the driver is gone.
    pub(crate) fn send(&self, item: T) -> Result<(), T> {
        {
            let mut queue = self.lock();
            if queue.closed {
                return Err(item);
            }
            queue.items.push(item);
        }
        self.waker.wake();
        Ok(())
    }

    /// Moves everything posted so far into `into` (expected empty, its capacity is kept for
    /// the next swap); whether there was anything.
    pub(crate) fn try_take(&self, into: &mut Vec<T>) -> bool {
        let mut queue = self.lock();
        if queue.items.is_empty() {
            return false;
        }
        std::mem::swap(&mut queue.items, into);
        true
    }

    /// Appends everything posted so far to `into`.
    pub(crate) fn take_more(&self, into: &mut Vec<T>) {
        into.append(&mut self.lock().items);
    }

    /// [`try_take`](Self::try_take), registering `cx` to be woken by the next post if there
    /// was nothing.
    pub(crate) fn poll_take(&self, cx: &mut Context<'_>, into: &mut Vec<T>) -> Poll<()> {
        if self.try_take(into) {
            return Poll::Ready(());
        }
        self.waker.register(cx.waker());
        // A post between the check and the registration woke no one: look again.
        if self.try_take(into) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }

    /// Refuses every later post and returns what was posted and not taken (the caller drops
    /// it outside the lock, which answers the waiting repliers).
    pub(crate) fn close(&self) -> Vec<T> {
        let mut queue = self.lock();
        queue.closed = true;
        std::mem::take(&mut queue.items)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use futures::task::noop_waker_ref;

    use super::*;

    #[test]
    fn takes_bursts_in_order_and_refuses_posts_once_closed() {
        let inbox = Inbox::new();
        let mut taken = Vec::new();
        let mut cx = Context::from_waker(noop_waker_ref());
        assert!(inbox.poll_take(&mut cx, &mut taken).is_pending());
        for i in 0..5 {
            inbox.send(i).unwrap();
        }
        assert!(inbox.poll_take(&mut cx, &mut taken).is_ready());
        assert_eq!(taken, [0, 1, 2, 3, 4]);
        taken.clear();
        assert!(!inbox.try_take(&mut taken));
        inbox.send(5).unwrap();
        assert_eq!(inbox.close(), [5]);
        assert_eq!(inbox.send(6), Err(6));
        assert!(!inbox.try_take(&mut taken));
    }

    #[test]
    fn a_post_wakes_the_registered_waiter() {
        struct Flag(std::sync::atomic::AtomicBool);
        impl futures::task::ArcWake for Flag {
            fn wake_by_ref(arc_self: &Arc<Self>) {
                arc_self.0.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let flag = Arc::new(Flag(false.into()));
        let waker = futures::task::waker(flag.clone());
        let inbox = Inbox::new();
        let mut taken = Vec::new();
        assert!(inbox
            .poll_take(&mut Context::from_waker(&waker), &mut taken)
            .is_pending());
        assert!(!flag.0.load(std::sync::atomic::Ordering::SeqCst));
        inbox.send("event").unwrap();
        assert!(flag.0.load(std::sync::atomic::Ordering::SeqCst));
    }
}
