//! A one-shot flag that wakes every waiter: the "this command was cancelled" signal.

use std::sync::atomic::{AtomicBool, Ordering};

use event_listener::{listener, Event};

#[derive(Debug, Default)]
pub(crate) struct Signal {
    fired: AtomicBool,
    event: Event,
}

impl Signal {
    pub(crate) fn fire(&self) {
        if !self.fired.swap(true, Ordering::AcqRel) {
            self.event.notify(usize::MAX);
        }
    }

    pub(crate) fn is_fired(&self) -> bool {
        self.fired.load(Ordering::Acquire)
    }

    pub(crate) async fn fired(&self) {
        loop {
            if self.is_fired() {
                return;
            }
            listener!(self.event => listener);
            // Checked again after registering, so a fire in between is not missed.
            if self.is_fired() {
                return;
            }
            listener.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiter_wakes_on_fire_and_later_waiters_return_at_once() {
        let signal = std::sync::Arc::new(Signal::default());
        let waiter = {
            let signal = signal.clone();
            std::thread::spawn(move || futures::executor::block_on(signal.fired()))
        };
        signal.fire();
        waiter.join().unwrap();
        futures::executor::block_on(signal.fired());
        assert!(signal.is_fired());
    }
}
