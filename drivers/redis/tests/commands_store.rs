//! The command-queue scenarios on Redis (tokio). Each test starts its own `redis-server` on a
//! free port and fails, never skips, if it cannot.

// The command queue's scenarios are leasehold-commands' own, written once for every store:
// included from there, run here on the Redis store.
#[path = "../../commands/tests/common/mod.rs"]
mod common;

use common::Fixture;
use leasehold_core::ErrorKind;
use leasehold_redis::{RedisCommandStore, RedisStoreConfig};
use leasehold_redis_harness::RedisServer;

const QUEUE: &str = "cmds";

struct Redis {
    server: RedisServer,
}

impl Fixture for Redis {
    type Store = RedisCommandStore;

    async fn store(&self) -> RedisCommandStore {
        RedisCommandStore::connect(RedisStoreConfig::new(self.server.url(), QUEUE))
            .await
            .expect("connect the command store")
    }

    async fn pending(&self) -> usize {
        let client = redis::Client::open(self.server.url()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let summary: redis::Value = redis::cmd("XPENDING")
            .arg(format!("leasehold:{{{QUEUE}}}:stream"))
            .arg("commands")
            .query_async(&mut conn)
            .await
            .unwrap();
        match summary {
            redis::Value::Array(fields) => match fields.first() {
                Some(redis::Value::Int(n)) => usize::try_from(*n).unwrap(),
                other => panic!("XPENDING count: {other:?}"),
            },
            other => panic!("XPENDING: {other:?}"),
        }
    }
}

fn fixture() -> Redis {
    let server = RedisServer::start().unwrap_or_else(|e| panic!("cannot start redis-server: {e}"));
    Redis { server }
}

scenarios!(fixture());

/// The queue over 3 shards on one server: the scenarios that read the stream, and the sharded
/// one.
mod sharded {
    use super::common::{self, Fixture, ShardedFixture};
    use crate::scenarios;
    use leasehold_redis::{RedisCommandStore, RedisStoreConfig};
    use leasehold_redis_harness::RedisServer;

    const SHARDS: u32 = 3;

    struct Sharded {
        server: RedisServer,
    }

    impl Sharded {
        fn config(&self) -> RedisStoreConfig {
            RedisStoreConfig::new(self.server.url(), super::QUEUE)
                .shards(SHARDS)
                .expect("3 shards of a valid name")
        }

        fn int(&self, args: &[&str]) -> usize {
            let reply = self.server.command(args).expect("redis answers");
            let n = reply
                .as_int()
                .or_else(|| reply.as_array()?.first()?.as_int());
            usize::try_from(n.unwrap_or_else(|| panic!("{args:?}: {reply:?}"))).unwrap()
        }
    }

    impl Fixture for Sharded {
        type Store = RedisCommandStore;

        async fn store(&self) -> RedisCommandStore {
            RedisCommandStore::connect(self.config())
                .await
                .expect("connect the sharded command store")
        }

        async fn pending(&self) -> usize {
            (0..SHARDS)
                .map(|i| {
                    let stream = format!("leasehold:{{{}:{i}}}:stream", super::QUEUE);
                    self.int(&["XPENDING", &stream, "commands"])
                })
                .sum()
        }
    }

    impl ShardedFixture for Sharded {
        fn shard_count(&self) -> u16 {
            SHARDS as u16
        }

        fn shard_of(&self, id: &str) -> u16 {
            leasehold_core::Shards::new(super::QUEUE, SHARDS)
                .unwrap()
                .for_key(id.as_bytes())
        }

        async fn shard_lengths(&self) -> Vec<usize> {
            (0..SHARDS)
                .map(|i| {
                    self.int(&[
                        "XLEN",
                        &format!("leasehold:{{{}:{i}}}:stream", super::QUEUE),
                    ])
                })
                .collect()
        }
    }

    fn fixture() -> Sharded {
        let server =
            RedisServer::start().unwrap_or_else(|e| panic!("cannot start redis-server: {e}"));
        Sharded { server }
    }

    scenarios!(
        fixture();
        sharded_commands_run_cancel_and_retry_across_shards,
        succeeds_with_a_typed_result,
        cancel_reaches_running_commands,
        crash_failover_resumes_with_check_status,
        commands_are_listed_by_status_as_they_move,
        racing_retries_rerun_once,
    );

    /// A sharded queue's keys are named after its shards, and a command's keys all live in
    /// the shard its id routes to; the store's routing is the shared one.
    #[tokio::test]
    async fn a_commands_keys_live_in_its_shard() {
        use leasehold_commands::{Command, CommandQueue};
        use leasehold_tokio::TokioRuntime;

        let fixture = fixture();
        let store = fixture.store().await;
        assert_eq!(
            store.stream_keys(),
            [
                "leasehold:{cmds:0}:stream",
                "leasehold:{cmds:1}:stream",
                "leasehold:{cmds:2}:stream"
            ]
        );
        let queue = CommandQueue::new(TokioRuntime::current(), store.clone());
        for id in ["a", "b", "c", "d", "e", "f"] {
            queue
                .submit(Command::new("k", 1).unwrap().with_id(id))
                .await
                .unwrap();
            let shard = fixture.shard_of(id);
            assert_eq!(store.shard_of(id), shard);
            let key = format!("leasehold:{{cmds:{shard}}}:state:{id}");
            assert_eq!(store.state_key(id), key);
            assert_eq!(fixture.int(&["EXISTS", &key]), 1, "{key}");
            let index = store.shard_status_key(shard, leasehold_commands::Status::Submitted);
            let index = index.expect("a shard of the queue");
            let rank = fixture
                .server
                .command(["ZRANK", index.as_str(), id])
                .unwrap();
            assert!(rank.as_int().is_some(), "{id} in {index}: {rank:?}");
        }
        assert_eq!(
            store.shard_status_key(3, leasehold_commands::Status::Failed),
            None
        );
        assert!(
            fixture
                .server
                .command(["EXISTS", "leasehold:{cmds}:stream"])
                .unwrap()
                .as_int()
                == Some(0),
            "no unsharded keys"
        );
    }
}

/// 1 000 RUNNING commands on one replica, on real time: each is checked again and again, never
/// before `status_interval` has passed since its last check. How even the cadence is (gaps,
/// checks per interval, bunching) is printed, not asserted: on a loaded machine checks come
/// late, which is no fault. leasehold-commands' `tests/cadence.rs` asserts the cadence exactly on paused time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_running_commands_are_checked_about_once_per_interval() {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use leasehold_commands::{Command, CommandContext, CommandHandler, HandlerError, Step};

    const COMMANDS: usize = 1000;
    const INTERVAL: Duration = Duration::from_secs(1);
    const BUCKETS: u32 = 10;
    /// Checks each command must get.
    const CHECKS: usize = 4;
    /// Long, so that a stalled test process cannot let a lease lapse: a redelivered command is
    /// checked at once, which would read as an early check.
    const CLAIM: Duration = Duration::from_secs(30);

    type Log = Arc<Mutex<HashMap<usize, Vec<Instant>>>>;
    struct Watched(Log);
    impl CommandHandler for Watched {
        type Params = usize;
        type Output = ();
        async fn execute(&self, _: CommandContext, _: usize) -> Result<Step<()>, HandlerError> {
            Ok(Step::Running)
        }
        async fn check_status(
            &self,
            _: CommandContext,
            n: usize,
        ) -> Result<Step<()>, HandlerError> {
            self.0
                .lock()
                .unwrap()
                .entry(n)
                .or_default()
                .push(Instant::now());
            Ok(Step::Running)
        }
    }

    let fixture = fixture();
    let queue = common::queue(&fixture).await;
    let log = Log::default();
    let worker = common::builder_with_claim::<Redis>(&queue, CLAIM)
        .status_interval(INTERVAL)
        .handler("watched", Watched(log.clone()))
        .start()
        .await
        .unwrap();
    for n in 0..COMMANDS {
        queue
            .submit(Command::new("watched", n).unwrap())
            .await
            .unwrap();
    }
    common::eventually("all RUNNING", || worker.stats().executed == COMMANDS as u64).await;
    common::eventually("every command checked again and again", || {
        let log = log.lock().unwrap();
        log.len() == COMMANDS && log.values().all(|times| times.len() >= CHECKS)
    })
    .await;
    let stats = worker.stats();
    worker.shutdown(Duration::from_secs(2)).await;

    let log = log.lock().unwrap().clone();
    let gaps: Vec<Duration> = log
        .values()
        .flat_map(|times| times.windows(2).map(|pair| pair[1] - pair[0]))
        .collect();
    let shortest_gap = *gaps.iter().min().unwrap();
    let worst_gap = *gaps.iter().max().unwrap();
    // Checks per tenth of an interval, over the intervals after every command's first check.
    let from = log.values().map(|times| times[0]).max().unwrap();
    let windows = u32::try_from(CHECKS).unwrap() - 2;
    let mut buckets = vec![0u32; (BUCKETS * windows) as usize];
    for t in log.values().flatten().filter(|&&t| t >= from) {
        let offset = (*t - from).as_nanos() * u128::from(BUCKETS) / INTERVAL.as_nanos();
        if let Some(bucket) = buckets.get_mut(offset as usize) {
            *bucket += 1;
        }
    }
    let per_window: Vec<u32> = buckets
        .chunks(BUCKETS as usize)
        .map(|w| w.iter().sum())
        .collect();
    let busiest = *buckets.iter().max().unwrap();
    println!(
        "Redis, 1000 RUNNING: checks per {INTERVAL:?} window {per_window:?}; gaps between a \
         command's checks {shortest_gap:?}..{worst_gap:?}; busiest tenth {busiest} (even: 100)"
    );
    assert_eq!(
        stats.executed, COMMANDS as u64,
        "each command executed once: {stats:?}"
    );
    assert!(
        shortest_gap >= INTERVAL * 9 / 10,
        "checked early: gap {shortest_gap:?}"
    );
}

/// Keys share the queue's hash tag; the TTL is set on submit and refreshed by every write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_hash_tagged_and_the_ttl_is_refreshed_by_writes() {
    use std::time::Duration;

    use leasehold_commands::{Command, CommandQueue, CommandStore};
    use leasehold_tokio::TokioRuntime;

    let fixture = fixture();
    let ttl = Duration::from_secs(100);
    let store =
        RedisCommandStore::connect(RedisStoreConfig::new(fixture.server.url(), QUEUE).ttl(ttl))
            .await
            .unwrap();
    assert_eq!(store.stream_key(), "leasehold:{cmds}:stream");
    assert_eq!(store.state_key("x"), "leasehold:{cmds}:state:x");
    let queue = CommandQueue::new(TokioRuntime::current(), store.clone());
    let submitted = queue
        .submit(Command::new("k", 1).unwrap().with_id("x"))
        .await
        .unwrap();
    let pttl = |server: &RedisServer| {
        server
            .command(["PTTL", "leasehold:{cmds}:state:x"])
            .unwrap()
            .as_int()
            .unwrap()
    };
    assert!((99_000..=100_000).contains(&pttl(&fixture.server)));
    fixture
        .server
        .command(["PEXPIRE", "leasehold:{cmds}:state:x", "5000"])
        .unwrap();
    assert!(store
        .compare_and_set(&{
            let mut next = submitted.state.clone();
            next.version += 1;
            next
        })
        .await
        .unwrap());
    assert!(
        (99_000..=100_000).contains(&pttl(&fixture.server)),
        "refreshed"
    );
    let len = fixture
        .server
        .command(["XLEN", "leasehold:{cmds}:stream"])
        .unwrap();
    assert_eq!(len.as_int(), Some(1));
    // Invalid queue names are clear errors.
    let bad = RedisCommandStore::connect(RedisStoreConfig::new(fixture.server.url(), "a{b}")).await;
    assert!(bad.unwrap_err().to_string().contains("braces"));
}

/// Redis restarts (AOF on) while commands run: the stores and workers reconnect, every command
/// ends SUCCEEDED, none executed twice, and the cancel feed comes back (a cancel after the
/// restart still reaches a running handler).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_survive_a_redis_restart() {
    use leasehold_commands::{Command, CommandStore, Status, StopReason};

    let fixture = Redis {
        server: RedisServer::builder()
            .aof(true)
            .start()
            .unwrap_or_else(|e| panic!("cannot start redis-server: {e}")),
    };
    let queue = common::queue(&fixture).await;
    let calls = common::Calls::default();
    let stubborn = common::Stubborn {
        calls: calls.clone(),
        ..common::Stubborn::new(false)
    };
    let stops = stubborn.stops.clone();
    let worker = common::builder::<Redis>(&queue)
        .handler("polled", common::Polled(calls.clone()))
        .handler("stubborn", stubborn)
        .start()
        .await
        .unwrap();
    let mut ids = Vec::new();
    for _ in 0..50 {
        let command = Command::new("polled", 20u32).unwrap();
        ids.push(queue.submit(command).await.unwrap().state.id);
    }
    // RUNNING as stored, not only executed: a restart before the write would retry `execute`.
    let start = std::time::Instant::now();
    for id in &ids {
        loop {
            let state = queue.state(id).await.unwrap().expect("submitted");
            if state.status == Status::Running {
                break;
            }
            assert!(
                start.elapsed() < common::PATIENCE,
                "{id} never RUNNING: {state:?}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
    fixture.server.restart().expect("restart redis-server");
    for id in &ids {
        let state = queue.wait(id, common::PATIENCE).await.unwrap();
        assert_eq!(state.status, Status::Succeeded, "{id}");
        assert_eq!(calls.get(id, "execute"), 1, "{id} executed twice");
    }
    // The cancel feed resubscribed: a cancel reaches a handler running now.
    queue
        .submit(Command::new("stubborn", ()).unwrap().with_id("late"))
        .await
        .unwrap();
    common::eventually("execute running", || calls.get("late", "execute") == 1).await;
    assert!(queue.cancel("late").await.unwrap());
    // Announcements are best effort and the feed may still be resubscribing: repeat the
    // announcement (as a missed one would be made up by a status check) until it is heard.
    let start = std::time::Instant::now();
    while stops.lock().unwrap().first() != Some(&StopReason::Cancelled) {
        assert!(
            start.elapsed() < common::PATIENCE,
            "the cancel feed never came back"
        );
        queue.store().announce_cancel("late").await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    common::wait_pending_zero(&fixture).await;
    worker.shutdown(std::time::Duration::from_secs(2)).await;
}

/// A wrong password is a fatal error from `connect` (retrying cannot help), and the right one
/// connects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_is_a_fatal_connect_error() {
    let server = RedisServer::builder()
        .password("s3cret")
        .start()
        .unwrap_or_else(|e| panic!("cannot start redis-server: {e}"));
    let port = server.port();
    let wrong = format!("redis://:nope@127.0.0.1:{port}/");
    let Err(error) = RedisCommandStore::connect(RedisStoreConfig::new(wrong, "q")).await else {
        panic!("a wrong password must not connect");
    };
    assert_eq!(
        error.kind(),
        ErrorKind::Fatal,
        "retrying will not help: {error}"
    );
    let right = format!("redis://:s3cret@127.0.0.1:{port}/");
    RedisCommandStore::connect(RedisStoreConfig::new(right, "q"))
        .await
        .expect("the right password connects");
}

/// Expired states drop out of listings, and the index entries they left are removed: by the
/// listing that meets them, and the oldest by each submit. A listing that meets more expired
/// entries than one call looks at returns what it has and a cursor to go on from.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_states_drop_out_of_listings() {
    use std::time::{Duration, Instant};

    use leasehold_commands::{Command, CommandQueue, Page, Status};
    use leasehold_tokio::TokioRuntime;

    const EXPIRING: usize = 1500;
    type Queue = CommandQueue<RedisCommandStore, TokioRuntime>;
    let fixture = fixture();
    let store = fixture.store().await;
    let queue = CommandQueue::new(TokioRuntime::current(), store.clone());
    let submit = |queue: &Queue, id: String| {
        let queue = queue.clone();
        async move {
            queue
                .submit(Command::new("k", ()).unwrap().with_id(id))
                .await
                .unwrap()
        }
    };
    for i in 0..EXPIRING {
        submit(&queue, format!("old-{i:04}")).await;
    }
    assert!(queue.cancel("old-0000").await.unwrap());
    // One more on a store whose states live 200 ms.
    let brief = CommandQueue::new(
        TokioRuntime::current(),
        RedisCommandStore::connect(
            RedisStoreConfig::new(fixture.server.url(), QUEUE).ttl(Duration::from_millis(200)),
        )
        .await
        .unwrap(),
    );
    submit(&brief, "brief".into()).await;
    let card = |status: Status| {
        fixture
            .server
            .command(["ZCARD", store.status_key(status).as_str()])
            .unwrap()
            .as_int()
            .unwrap()
    };
    // 1 499 old ones (one is CANCELLED) and the brief one.
    assert_eq!(card(Status::Submitted), EXPIRING as i64);
    assert_eq!(card(Status::Cancelled), 1);
    // The others' TTLs run out at once too.
    fixture
        .server
        .command([
            "EVAL",
            "for _, k in ipairs(redis.call('KEYS', ARGV[1])) do redis.call('PEXPIRE', k, 1) end",
            "0",
            "leasehold:{cmds}:state:old-*",
        ])
        .unwrap();
    // Waits for the states to be gone (not for a time).
    let start = Instant::now();
    for id in ["brief", "old-0000", "old-1499"] {
        while queue.command(id).await.unwrap().is_some() {
            assert!(start.elapsed() < common::PATIENCE, "{id} never expired");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    assert_eq!(card(Status::Submitted), EXPIRING as i64, "not met yet");
    let counts = queue.counts().await.unwrap();
    for status in Status::ALL {
        assert_eq!(
            counts.get(status) as i64,
            card(status),
            "{status}: the index's size"
        );
    }

    submit(&queue, "new-1".into()).await;
    submit(&queue, "new-2".into()).await;
    assert_eq!(
        card(Status::Cancelled),
        0,
        "a submit drops the oldest expired"
    );
    let mut page = Page::first(10);
    let (mut listed, mut calls) = (Vec::new(), 0);
    loop {
        let listing = queue.commands(Status::Submitted, page).await.unwrap();
        calls += 1;
        listed.extend(listing.states.iter().map(|s| s.id.clone()));
        match listing.next_page(10) {
            Some(next) => page = next,
            None => break,
        }
    }
    assert_eq!(listed, ["new-1", "new-2"]);
    assert!(
        calls >= 2,
        "one call looked at all {EXPIRING} expired entries"
    );
    assert_eq!(
        card(Status::Submitted),
        2,
        "the expired entries were removed"
    );
    assert_eq!(queue.counts().await.unwrap().get(Status::Submitted), 2);
    let listing = queue
        .commands(Status::Cancelled, Page::default())
        .await
        .unwrap();
    assert!(listing.states.is_empty() && listing.next.is_none());
}

/// The status indexes are sorted sets under the queue's hash tag, moved with each write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_indexes_are_hash_tagged_sorted_sets() {
    use leasehold_commands::{Command, CommandQueue, Status};
    use leasehold_tokio::TokioRuntime;

    let fixture = fixture();
    let store = fixture.store().await;
    assert_eq!(
        store.status_key(Status::Failed),
        "leasehold:{cmds}:status:FAILED"
    );
    let queue = CommandQueue::new(TokioRuntime::current(), store.clone());
    let submitted = queue
        .submit(Command::new("k", 1).unwrap().with_id("x"))
        .await
        .unwrap();
    let score = |status: Status| -> Option<u64> {
        let reply = fixture
            .server
            .command(["ZSCORE", store.status_key(status).as_str(), "x"])
            .unwrap();
        reply.as_str().map(|s| s.parse().unwrap())
    };
    let members = |status: Status| {
        fixture
            .server
            .command(["ZCARD", store.status_key(status).as_str()])
            .unwrap()
            .as_int()
            .unwrap()
    };
    assert_eq!(members(Status::Submitted), 1);
    assert_eq!(
        score(Status::Submitted),
        Some(submitted.state.status_changed_at)
    );
    let cancelled = queue.cancel_command("x").await.unwrap();
    assert_eq!(
        (members(Status::Submitted), members(Status::Cancelled)),
        (0, 1)
    );
    assert_eq!(score(Status::Submitted), None);
    assert_eq!(score(Status::Cancelled), Some(cancelled.status_changed_at));
    assert!(cancelled.status_changed_at >= submitted.state.status_changed_at);
    let status = fixture
        .server
        .command(["HGET", "leasehold:{cmds}:state:x", "status"])
        .unwrap();
    assert_eq!(status.as_str(), Some("CANCELLED"));
}
