//! The conformance suite against the Redis backend, on a throwaway `redis-server` per test
//! (real time: a 1 s claim timeout, and `advance` sleeps), and the worker-level properties with
//! a real `leasehold-tokio` worker over it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use leasehold_conformance::{backend_suite, worker_suite, BackendFactory};
use leasehold_redis::{RedisBackend, RedisConfig};
use leasehold_redis_harness::RedisServer;

struct RedisFactory {
    server: RedisServer,
    streams: AtomicUsize,
}

impl RedisFactory {
    fn new() -> Self {
        let server = RedisServer::start()
            .unwrap_or_else(|e| panic!("the Redis conformance tests need redis-server: {e}"));
        Self {
            server,
            streams: AtomicUsize::new(0),
        }
    }
}

impl BackendFactory for RedisFactory {
    type Backend = RedisBackend;

    fn claim_timeout(&self) -> Duration {
        Duration::from_secs(1)
    }

    async fn open(&self, claim_timeout: Duration, replicas: usize) -> Vec<RedisBackend> {
        let stream = format!("jobs-{}", self.streams.fetch_add(1, Ordering::Relaxed));
        let mut handles = Vec::with_capacity(replicas);
        for i in 0..replicas {
            let config = RedisConfig::new(self.server.url(), stream.as_str(), "workers")
                .consumer(format!("replica-{i}"))
                .claim_timeout(claim_timeout);
            handles.push(RedisBackend::connect(config).await.expect("connect"));
        }
        handles
    }

    async fn advance(&self, d: Duration) {
        tokio::time::sleep(d).await;
    }
}

backend_suite!(RedisFactory::new());
worker_suite!(RedisFactory::new());
