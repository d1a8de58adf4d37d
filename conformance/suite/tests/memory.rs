//! The conformance suite against the in-memory backend: the backend properties on a manual clock
//! (virtual time), a complete, small example of a [`BackendFactory`]; the worker-level ones on
//! the system clock (real time, a 1 s claim timeout), since a real worker runs over it.

use std::sync::Mutex;
use std::time::Duration;

use leasehold_conformance::{
    backend_suite, backend_worker_suite, publisher_suite, BackendFactory, DeadLetterInfo,
    PublisherFactory,
};
use leasehold_memory::{ManualClock, MemoryBackend, MemoryStream, StreamConfig};

/// Fresh streams on one manual clock; `advance` moves it, so the suite runs in no real time.
struct MemoryFactory {
    clock: ManualClock,
    /// The stream opened last, for [`BackendFactory::dead_letters`].
    last: Mutex<Option<MemoryStream>>,
}

impl MemoryFactory {
    fn new() -> Self {
        Self {
            clock: ManualClock::new(),
            last: Mutex::default(),
        }
    }
}

/// The dead letters of the stream opened last, if any.
fn dead_letters_of(last: &Mutex<Option<MemoryStream>>) -> Option<Vec<DeadLetterInfo>> {
    let last = last.lock().expect("not poisoned");
    let stream = last.as_ref()?;
    Some(
        stream
            .dead_letters()
            .into_iter()
            .map(|d| DeadLetterInfo {
                original_id: d.original_id,
                reason: d.reason,
                delivery_count: d.delivery_count,
            })
            .collect(),
    )
}

impl BackendFactory for MemoryFactory {
    type Backend = MemoryBackend;

    fn claim_timeout(&self) -> Duration {
        Duration::from_secs(30)
    }

    async fn open(&self, claim_timeout: Duration, replicas: usize) -> Vec<MemoryBackend> {
        let stream = MemoryStream::with_clock(StreamConfig::new(claim_timeout), self.clock.clone())
            .expect("stream config");
        let handles = (0..replicas)
            .map(|i| stream.consumer(&format!("replica-{i}")).expect("consumer"))
            .collect();
        *self.last.lock().expect("not poisoned") = Some(stream);
        handles
    }

    async fn advance(&self, d: Duration) {
        self.clock.advance(d);
    }

    async fn dead_letters(&self) -> Option<Vec<DeadLetterInfo>> {
        dead_letters_of(&self.last)
    }
}

backend_suite!(MemoryFactory::new());

/// The stream itself publishes (it needs no consumer).
impl PublisherFactory for MemoryFactory {
    type Publisher = MemoryStream;

    async fn publisher(&self) -> MemoryStream {
        let last = self.last.lock().expect("not poisoned");
        last.clone().expect("a stream was opened")
    }
}

mod publisher {
    use super::*;
    publisher_suite!(MemoryFactory::new());

    /// Shadows the `tokio` crate here: the suite macros must not need one by that name.
    mod tokio {}
}

/// The `run_all` entries need no tokio: on a manual clock nothing waits, so any executor
/// runs them.
#[test]
fn run_all_on_another_executor() {
    let factory = MemoryFactory::new();
    futures::executor::block_on(async {
        leasehold_conformance::run_all(&factory).await;
        leasehold_conformance::run_all_publisher(&factory).await;
    });
}

/// Fresh streams on the system clock; `advance` sleeps. For the worker-level properties.
#[derive(Default)]
struct RealTimeMemoryFactory {
    /// The stream opened last, for [`BackendFactory::dead_letters`].
    last: Mutex<Option<MemoryStream>>,
}

impl BackendFactory for RealTimeMemoryFactory {
    type Backend = MemoryBackend;

    fn claim_timeout(&self) -> Duration {
        Duration::from_secs(1)
    }

    async fn open(&self, claim_timeout: Duration, replicas: usize) -> Vec<MemoryBackend> {
        let stream = MemoryStream::new(StreamConfig::new(claim_timeout)).expect("stream config");
        let handles = (0..replicas)
            .map(|i| stream.consumer(&format!("replica-{i}")).expect("consumer"))
            .collect();
        *self.last.lock().expect("not poisoned") = Some(stream);
        handles
    }

    async fn advance(&self, d: Duration) {
        tokio::time::sleep(d).await;
    }

    async fn dead_letters(&self) -> Option<Vec<DeadLetterInfo>> {
        dead_letters_of(&self.last)
    }
}

backend_worker_suite!(RealTimeMemoryFactory::default());
