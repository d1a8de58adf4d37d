//! The conformance suite against the Redis backend with `wait_replicas(1, …)` on, on a
//! throwaway master and its replica per test: every write (the fetch script and the scriptless
//! read, renew, ack, release, dead-letter, publish) goes with its `WAIT` in one pipeline, and
//! every property holds as it does without; and the publisher's properties, the same way.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use leasehold_conformance::{
    backend_suite, publisher_suite, BackendFactory, DeadLetterInfo, PublisherFactory,
};
use leasehold_redis::{PublisherConfig, RedisBackend, RedisConfig, RedisPublisher};
use leasehold_redis_harness::RedisServer;

mod support;
use support::dead_letter;

/// Generous: a replica on loopback acknowledges within milliseconds, but the tests run side by
/// side on a loaded machine, and a shortfall fails the call.
const WAIT: Duration = Duration::from_secs(2);

struct Replicated {
    master: RedisServer,
    /// Held so it runs as long as the master.
    _replica: RedisServer,
    streams: AtomicUsize,
    dead_key: Mutex<Option<String>>,
    stream: Mutex<Option<String>>,
}

impl Replicated {
    fn new() -> Self {
        let need = |e| panic!("these tests need redis-server (apt-get install redis-server): {e}");
        // A replica's first sync at once, not after waiting 5 s for more replicas.
        let master = RedisServer::builder()
            .args(["--repl-diskless-sync-delay", "0"])
            .start()
            .unwrap_or_else(need);
        let port = master.port().to_string();
        let replica = RedisServer::builder()
            .args(["--replicaof", "127.0.0.1", &port])
            .start()
            .unwrap_or_else(need);
        master
            .await_replicas_online(1, Duration::from_secs(15))
            .unwrap_or_else(|e| panic!("the replica never came online: {e}"));
        Self {
            master,
            _replica: replica,
            streams: AtomicUsize::new(0),
            dead_key: Mutex::default(),
            stream: Mutex::default(),
        }
    }
}

impl BackendFactory for Replicated {
    type Backend = RedisBackend;

    fn claim_timeout(&self) -> Duration {
        Duration::from_secs(2)
    }

    async fn open(&self, claim_timeout: Duration, replicas: usize) -> Vec<RedisBackend> {
        let stream = format!("jobs-{}", self.streams.fetch_add(1, Ordering::Relaxed));
        let mut handles = Vec::with_capacity(replicas);
        for i in 0..replicas {
            let config = RedisConfig::new(self.master.url(), stream.as_str(), "workers")
                .consumer(format!("replica-{i}"))
                .claim_timeout(claim_timeout)
                .wait_replicas(1, WAIT);
            handles.push(RedisBackend::connect(config).await.expect("connect"));
        }
        if let Some(first) = handles.first() {
            *self.dead_key.lock().expect("not poisoned") = Some(first.dead_letter_key().to_owned());
        }
        *self.stream.lock().expect("not poisoned") = Some(stream);
        handles
    }

    async fn advance(&self, d: Duration) {
        tokio::time::sleep(d).await;
    }

    async fn dead_letters(&self) -> Option<Vec<DeadLetterInfo>> {
        let key = self.dead_key.lock().expect("not poisoned").clone()?;
        let reply = self
            .master
            .command(["XRANGE", key.as_str(), "-", "+"])
            .expect("XRANGE of the dead-letter stream");
        let entries = reply
            .as_array()
            .unwrap_or_else(|| panic!("XRANGE answered {reply:?}"));
        Some(entries.iter().map(dead_letter).collect())
    }
}

impl PublisherFactory for Replicated {
    type Publisher = RedisPublisher;

    async fn publisher(&self) -> RedisPublisher {
        let stream = self.stream.lock().expect("not poisoned").clone();
        let stream = stream.expect("a stream was opened");
        RedisPublisher::connect(
            PublisherConfig::new(self.master.url(), stream).wait_replicas(1, WAIT),
        )
        .await
        .expect("connect the publisher")
    }
}

backend_suite!(Replicated::new());

mod publisher {
    use super::*;
    publisher_suite!(Replicated::new());
}
