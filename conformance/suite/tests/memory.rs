//! The conformance suite against the in-memory backend: the backend properties on a manual clock
//! (virtual time), a complete, small example of a [`BackendFactory`]; the worker-level ones on
//! the system clock (real time, a 1 s claim timeout), since a real worker runs over it.

use std::time::Duration;

use leasehold_conformance::{backend_suite, worker_suite, BackendFactory};
use leasehold_memory::{ManualClock, MemoryBackend, MemoryStream, StreamConfig};

/// Fresh streams on one manual clock; `advance` moves it, so the suite runs in no real time.
struct MemoryFactory {
    clock: ManualClock,
}

impl MemoryFactory {
    fn new() -> Self {
        Self {
            clock: ManualClock::new(),
        }
    }
}

impl BackendFactory for MemoryFactory {
    type Backend = MemoryBackend;

    fn claim_timeout(&self) -> Duration {
        Duration::from_secs(30)
    }

    async fn open(&self, claim_timeout: Duration, replicas: usize) -> Vec<MemoryBackend> {
        let stream = MemoryStream::with_clock(StreamConfig::new(claim_timeout), self.clock.clone())
            .expect("stream config");
        (0..replicas)
            .map(|i| stream.consumer(&format!("replica-{i}")).expect("consumer"))
            .collect()
    }

    async fn advance(&self, d: Duration) {
        self.clock.advance(d);
    }
}

backend_suite!(MemoryFactory::new());

/// Fresh streams on the system clock; `advance` sleeps. For the worker-level properties.
struct RealTimeMemoryFactory;

impl BackendFactory for RealTimeMemoryFactory {
    type Backend = MemoryBackend;

    fn claim_timeout(&self) -> Duration {
        Duration::from_secs(1)
    }

    async fn open(&self, claim_timeout: Duration, replicas: usize) -> Vec<MemoryBackend> {
        let stream = MemoryStream::new(StreamConfig::new(claim_timeout)).expect("stream config");
        (0..replicas)
            .map(|i| stream.consumer(&format!("replica-{i}")).expect("consumer"))
            .collect()
    }

    async fn advance(&self, d: Duration) {
        tokio::time::sleep(d).await;
    }
}

worker_suite!(RealTimeMemoryFactory);
