//! Waking fetches that wait for work, independent of any executor: an `event-listener` event
//! (notified on publish and release) raced against an `async-io` timer (the wait's end or the
//! next lease lapse). Neither builds under `--cfg loom`, so there this is compiled out and a
//! fetch never waits; the loom tests exercise the synchronous store.

use std::time::Instant;

/// Whether fetches can wait in this build (not under loom).
pub(crate) const CAN_WAIT: bool = cfg!(not(loom));

#[cfg(not(loom))]
pub(crate) use imp::{wait, Listener, Wakeup};
#[cfg(loom)]
pub(crate) use stub::{wait, Listener, Wakeup};

#[cfg(not(loom))]
mod imp {
    use super::Instant;

    pub(crate) type Listener = event_listener::EventListener;

    /// Notifies every waiting fetch to look again.
    pub(crate) struct Wakeup(event_listener::Event);

    impl Wakeup {
        pub(crate) fn new() -> Self {
            Self(event_listener::Event::new())
        }

        /// Register *before* checking for work, so a notification in between is not missed.
        pub(crate) fn listen(&self) -> Listener {
            self.0.listen()
        }

        pub(crate) fn notify_all(&self) {
            self.0.notify(usize::MAX);
        }
    }

    /// Returns when `listener` is notified or `until` has passed (never, if `None`).
    pub(crate) async fn wait(listener: Listener, until: Option<Instant>) {
        let timer = until.map_or_else(async_io::Timer::never, async_io::Timer::at);
        futures_lite::future::or(listener, async {
            let _: Instant = timer.await;
        })
        .await;
    }
}

#[cfg(loom)]
mod stub {
    use super::Instant;

    pub(crate) struct Listener;

    pub(crate) struct Wakeup;

    impl Wakeup {
        pub(crate) fn new() -> Self {
            Self
        }

        pub(crate) fn listen(&self) -> Listener {
            Listener
        }

        pub(crate) fn notify_all(&self) {}
    }

    pub(crate) async fn wait(_: Listener, _: Option<Instant>) {}
}
