//! A worker's health, shared by its driver (which sets it) and its handle (which reads and
//! awaits it), so a service can wire it to a readiness probe.

use std::sync::Mutex;

use event_listener::Event;

/// How a worker is doing.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Health {
    /// Every stream is being consumed.
    Running,
    /// Some streams stopped (a fatal backend error halted their intake); the others go on.
    Degraded(String),
    /// Nothing is consumed any more: the worker shut down, its task ended, or a fatal error
    /// halted every stream.
    Stopped(String),
}

impl Health {
    /// Whether the worker consumes nothing any more.
    pub fn is_stopped(&self) -> bool {
        matches!(self, Health::Stopped(_))
    }
}

/// The current health and a way to wait for it to change.
#[derive(Debug)]
pub(crate) struct HealthCell {
    state: Mutex<Health>,
    changed: Event,
}

impl HealthCell {
    pub(crate) fn new() -> Self {
        Self {
            state: Mutex::new(Health::Running),
            changed: Event::new(),
        }
    }

    pub(crate) fn get(&self) -> Health {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Moves to `health`, unless the worker already stopped (a stop is final).
    pub(crate) fn set(&self, health: Health) {
        {
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            if state.is_stopped() {
                return;
            }
            *state = health;
        }
        self.changed.notify(usize::MAX);
    }

    /// Completes once the worker has stopped, with why.
    pub(crate) async fn stopped(&self) -> Health {
        loop {
            let listener = self.changed.listen();
            let health = self.get();
            if health.is_stopped() {
                return health;
            }
            listener.await;
        }
    }
}
