//! The command queue behind Redis Sentinel (a master, two replicas, three sentinels, started by
//! the harness; tokio), with `wait_replicas(1, …)`: two of the common scenarios, and a
//! `SENTINEL FAILOVER` while commands are submitted and run (nothing every replica held before
//! it is lost; what an acknowledged submit during it can lose is counted and printed). Fails, never skips, without
//! `redis-server` (`apt-get install redis-server`).

// The command queue's scenarios are leasehold-commands' own, written once for every store:
// included from there, run here on the Redis store.
#[path = "../../commands/tests/common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{builder, queue, Calls, Double, Fixture, PATIENCE};
use leasehold_commands::{Command, CommandStore, QueueError, Status};
use leasehold_redis::{RedisCommandStore, RedisStoreConfig, Servers};
use leasehold_redis_harness::RedisSentinel;

const QUEUE: &str = "cmds";

struct Sentinel {
    topology: Arc<RedisSentinel>,
}

impl Fixture for Sentinel {
    type Store = RedisCommandStore;

    async fn store(&self) -> RedisCommandStore {
        let servers = Servers::sentinel(self.topology.sentinel_urls(), self.topology.master_name());
        let config = RedisStoreConfig::new(servers, QUEUE)
            // Generous: a replica acknowledges within milliseconds, but the tests run side by
            // side on a loaded machine; a shortfall is a failed submit here.
            .wait_replicas(1, Duration::from_secs(2));
        RedisCommandStore::connect(config)
            .await
            .expect("connect the command store through the sentinels")
    }

    async fn pending(&self) -> usize {
        let master = self.topology.master().expect("a master");
        let reply = master
            .command(["XPENDING", "leasehold:{cmds}:stream", "commands"])
            .expect("XPENDING on the master");
        let count = reply.as_array().and_then(|fields| fields.first()?.as_int());
        usize::try_from(count.unwrap_or_else(|| panic!("XPENDING: {reply:?}"))).unwrap()
    }
}

/// Two replicas: the one not promoted follows the new master as soon as the sentinels
/// reconfigure it, so `wait_replicas(1, …)` is met again within a second of a failover (with
/// one, only once the old master is demoted, 10–20 s later).
fn fixture() -> Sentinel {
    let topology = RedisSentinel::builder()
        .replicas(2)
        .start()
        .unwrap_or_else(|e| {
            panic!("these tests need redis-server (apt-get install redis-server): {e}")
        });
    Sentinel {
        topology: Arc::new(topology),
    }
}

scenarios!(
    fixture();
    succeeds_with_a_typed_result,
    submit_is_idempotent,
);

fn double(n: u64) -> Command {
    Command::new("double", n)
        .unwrap()
        .with_id(format!("double-{n}"))
}

/// Submits `commands`, each again until it is accepted (a submit is idempotent by id).
async fn submit_all(queue: &common::Queue<Sentinel>, commands: std::ops::Range<u64>) -> u32 {
    let mut retried = 0;
    for n in commands {
        let deadline = Instant::now() + PATIENCE;
        while let Err(e) = queue.submit(double(n)).await {
            assert!(Instant::now() < deadline, "submitting kept failing: {e}");
            retried += 1;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    retried
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_submitted_and_run_through_a_sentinel_failover_all_succeed() {
    let fixture = fixture();
    let queue = queue(&fixture).await;
    let calls = Calls::default();
    let worker = builder::<Sentinel>(&queue)
        .handler("double", Double(calls.clone()))
        .start()
        .await
        .unwrap();
    assert_eq!(submit_all(&queue, 0..60).await, 0);
    for n in 0..60 {
        let state = queue.wait(&format!("double-{n}"), PATIENCE).await.unwrap();
        assert_eq!(state.status, Status::Succeeded);
    }
    // What the master holds now, every replica holds: so whichever the sentinels promote.
    // (`wait_replicas(1, …)` waits for one of the two, which need not be the one promoted.)
    let topology = Arc::clone(&fixture.topology);
    tokio::task::spawn_blocking(move || topology.wait_replicated(PATIENCE))
        .await
        .unwrap()
        .expect("the replicas catch up");
    // The failover, while more commands are submitted and run.
    let topology = Arc::clone(&fixture.topology);
    let old = topology.master().unwrap().port();
    let failover = tokio::task::spawn_blocking(move || {
        topology.failover(PATIENCE).map(|master| master.port())
    });
    let mut retried = submit_all(&queue, 60..120).await;
    let new = failover.await.unwrap().expect("SENTINEL FAILOVER");
    assert_ne!(new, old);
    retried += submit_all(&queue, 120..160).await;
    // The states written before the failover are all there, as they were: not rolled back.
    let store = fixture.store().await;
    for n in 0..60 {
        let state = store.load(&format!("double-{n}")).await.unwrap();
        assert_eq!(
            state.map(|s| s.status),
            Some(Status::Succeeded),
            "double-{n}"
        );
    }
    // A submit acknowledged during the failover can be lost: after `SENTINEL FAILOVER` the
    // old master takes writes until the store's connection moves (within a second), and the
    // replica not promoted acknowledges them until the sentinels point it at the new master,
    // which then replaces its data. Those are counted, submitted again, and must succeed.
    let mut lost = Vec::new();
    for n in 60..160 {
        let id = format!("double-{n}");
        match queue.wait(&id, PATIENCE).await {
            Ok(state) => assert_eq!(state.status, Status::Succeeded, "{id}"),
            Err(QueueError::NotFound(_)) => lost.push(n),
            Err(e) => panic!("{id}: {e}"),
        }
    }
    for &n in &lost {
        submit_all(&queue, n..n + 1).await;
    }
    for n in 0..160 {
        let id = format!("double-{n}");
        let state = queue.wait(&id, PATIENCE).await.unwrap();
        assert_eq!(state.status, Status::Succeeded, "{id}");
        assert_eq!(queue.result::<u64>(&id).await.unwrap(), Some(2 * n), "{id}");
    }
    common::wait_pending_zero(&fixture).await;
    let executed = calls.total("execute");
    eprintln!(
        "command store through SENTINEL FAILOVER: 160 commands succeeded; {retried} submits \
         failed and were retried; {} acknowledged during the failover were lost and submitted \
         again; {executed} executions ({} more than once)",
        lost.len(),
        executed.saturating_sub(160 + u32::try_from(lost.len()).unwrap())
    );
    assert!(
        lost.len() < 100,
        "every submit during the failover was lost"
    );
    worker.shutdown(Duration::from_secs(2)).await;
}
