//! The conformance suite against the Redis backend, on a throwaway `redis-server` per test
//! (real time: a 2 s claim timeout, and `advance` sleeps), and the worker-level properties with
//! a real `leasehold-tokio` worker over it; then the backend and publisher suites again with
//! `wait_replicas(1, …)` on, over a master and its replica (module `wait_replicas`), and both
//! suites with fences vouched for by tenure (module `tenure`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use leasehold_conformance::{
    backend_suite, backend_worker_suite, groups_suite, publisher_suite, BackendFactory,
    DeadLetterInfo, GroupsFactory, PublisherFactory,
};
use leasehold_redis::{FenceCheck, PublisherConfig, RedisBackend, RedisConfig, RedisPublisher};
use leasehold_redis_harness::RedisServer;

mod support;
use support::dead_letter;

/// `wait_replicas`' bound in the replicated suites. Generous: a replica on loopback
/// acknowledges within milliseconds, but the tests run side by side on a loaded machine, and
/// a shortfall fails the call.
const WAIT: Duration = Duration::from_secs(2);

struct RedisFactory {
    /// The server, or the master of the replicated suites.
    server: RedisServer,
    /// In the replicated suites: the replica (held so it runs as long as the master); every
    /// write then waits for it.
    replica: Option<RedisServer>,
    streams: AtomicUsize,
    /// The dead-letter key of the stream opened last, for [`BackendFactory::dead_letters`].
    dead_key: Mutex<Option<String>>,
    /// The stream opened last, for [`PublisherFactory::publisher`].
    stream: Mutex<Option<String>>,
    /// How the backends check fences.
    fence_check: FenceCheck,
}

impl RedisFactory {
    fn new() -> Self {
        let server = RedisServer::start().unwrap_or_else(need);
        Self::over(server, None)
    }

    /// A master and its replica, the replica counted online by the master.
    fn replicated() -> Self {
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
        Self::over(master, Some(replica))
    }

    fn over(server: RedisServer, replica: Option<RedisServer>) -> Self {
        Self {
            server,
            replica,
            streams: AtomicUsize::new(0),
            dead_key: Mutex::default(),
            stream: Mutex::default(),
            fence_check: FenceCheck::PerLease,
        }
    }

    /// Backends that vouch for fences by tenure: every takeover in the suites is a backend's
    /// own reclaim, which is what that needs.
    fn by_tenure(mut self) -> Self {
        self.fence_check = FenceCheck::Tenure;
        self
    }
}

impl BackendFactory for RedisFactory {
    type Backend = RedisBackend;

    /// 2 s: the properties look at the backend at fractions of it (half, a quarter past) on
    /// real time, so it is also how long a stall of the test process may be without turning a
    /// "not yet" into a "too late".
    fn claim_timeout(&self) -> Duration {
        Duration::from_secs(2)
    }

    async fn open(&self, claim_timeout: Duration, replicas: usize) -> Vec<RedisBackend> {
        self.open_groups(claim_timeout, &vec!["workers"; replicas])
            .await
    }

    async fn advance(&self, d: Duration) {
        tokio::time::sleep(d).await;
    }

    /// `XRANGE` of the dead-letter stream; each entry's fields `id`, `reason`, `deliveries`.
    async fn dead_letters(&self) -> Option<Vec<DeadLetterInfo>> {
        let key = self.dead_key.lock().expect("not poisoned").clone()?;
        let reply = self
            .server
            .command(["XRANGE", key.as_str(), "-", "+"])
            .expect("XRANGE of the dead-letter stream");
        let entries = reply
            .as_array()
            .unwrap_or_else(|| panic!("XRANGE answered {reply:?}"));
        Some(entries.iter().map(dead_letter).collect())
    }
}

impl RedisFactory {
    /// Consumer `consumer` of `group` on `stream`.
    async fn consumer(
        &self,
        stream: &str,
        group: &str,
        consumer: String,
        claim_timeout: Duration,
    ) -> RedisBackend {
        let mut config = RedisConfig::new(self.server.url(), stream, group)
            .consumer(consumer)
            .claim_timeout(claim_timeout)
            .fence_check(self.fence_check);
        if self.replica.is_some() {
            config = config.wait_replicas(1, WAIT);
        }
        RedisBackend::connect(config).await.expect("connect")
    }
}

impl GroupsFactory for RedisFactory {
    async fn open_groups(&self, claim_timeout: Duration, groups: &[&str]) -> Vec<RedisBackend> {
        let stream = format!("jobs-{}", self.streams.fetch_add(1, Ordering::Relaxed));
        let mut handles = Vec::with_capacity(groups.len());
        for (i, group) in groups.iter().enumerate() {
            let name = format!("replica-{i}");
            handles.push(self.consumer(&stream, group, name, claim_timeout).await);
        }
        if let Some(first) = handles.first() {
            *self.dead_key.lock().expect("not poisoned") = Some(first.dead_letter_key().to_owned());
        }
        *self.stream.lock().expect("not poisoned") = Some(stream);
        handles
    }

    async fn join(&self, claim_timeout: Duration, group: &str) -> RedisBackend {
        let stream = self.stream.lock().expect("not poisoned").clone();
        let stream = stream.expect("a stream was opened");
        self.consumer(&stream, group, "late".into(), claim_timeout)
            .await
    }
}

backend_suite!(RedisFactory::new());
groups_suite!(RedisFactory::new());
backend_worker_suite!(RedisFactory::new());

/// A publisher on the consumers' stream: no group, no consumer name.
impl PublisherFactory for RedisFactory {
    type Publisher = RedisPublisher;

    async fn publisher(&self) -> RedisPublisher {
        let stream = self.stream.lock().expect("not poisoned").clone();
        let stream = stream.expect("a stream was opened");
        let mut config = PublisherConfig::new(self.server.url(), stream);
        if self.replica.is_some() {
            config = config.wait_replicas(1, WAIT);
        }
        RedisPublisher::connect(config)
            .await
            .expect("connect the publisher")
    }
}

mod publisher {
    use super::*;
    publisher_suite!(RedisFactory::new());
}

/// `wait_replicas(1, …)` on, on a throwaway master and its replica per test: every write (the
/// fetch script and the scriptless read, renew, ack, release, dead-letter, publish) goes with
/// its `WAIT` in one pipeline, and every property holds as it does without.
mod wait_replicas {
    use super::*;
    backend_suite!(RedisFactory::replicated());

    mod publisher {
        use super::*;
        publisher_suite!(RedisFactory::replicated());
    }
}

/// Fences vouched for by tenure: every property holds as it does when each lease is checked.
mod tenure {
    use super::*;
    backend_suite!(RedisFactory::new().by_tenure());
    backend_worker_suite!(RedisFactory::new().by_tenure());
    groups_suite!(RedisFactory::new().by_tenure());
}

fn need(e: leasehold_redis_harness::Error) -> RedisServer {
    panic!("the Redis conformance tests need redis-server: {e}")
}
