//! Redis failing under a running worker: the group destroyed (`NOGROUP`), every connection
//! killed (`CLIENT KILL`), the server killed and restarted from its AOF. The worker recovers on
//! its own and loses no message; only one under way at a restart may run again (at-least-once).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use leasehold_redis::RedisBackend;
use leasehold_redis_harness::{RedisServer, Reply};
use leasehold_worker::{Config, Delivery, Health, Runtime, Worker};

use super::support::{
    array, assert_no_loss, builder, config, sleep, Env, Invocations, TestRt, CLAIM, GROUP, STREAM,
};

/// A fast worker of messages that records them: the shape of the fault scenarios.
fn recording_worker<R: Runtime>(
    runtime: R,
    backend: RedisBackend,
    invocations: &Invocations,
    config: Config,
    slow: Option<(u64, Duration)>,
) -> Worker<Bytes> {
    let (recorder, rt) = (invocations.clone(), runtime.clone());
    builder(runtime, config)
        .stream(STREAM, backend, move |d: Delivery<u64>| {
            recorder.record("a", &d);
            let pause = match slow {
                Some((message, pause)) if *d.message() == message => pause,
                _ => Duration::from_millis(10),
            };
            sleep(&rt, pause)
        })
        .start()
        .expect("valid worker")
}

/// The group is destroyed mid-run (`XGROUP DESTROY`): the worker's next fetch gets `NOGROUP`,
/// recreates the group, and processes the messages published afterwards.
pub async fn destroyed_group_is_recreated<T: TestRt>(rt: T) {
    let env = Env::start(rt).await;
    env.publish(1).await;
    let invocations = Invocations::default();
    let worker = recording_worker(
        env.runtime(),
        env.backend("a").await,
        &invocations,
        config(),
        None,
    );
    env.wait_drained("the first message is acked").await;
    let destroyed = env.cmd(&["XGROUP", "DESTROY", STREAM, GROUP]).await;
    assert_eq!(destroyed, Reply::Integer(1));
    for message in 2..=5 {
        env.publish(message).await;
    }
    env.wait_until("the later messages ran", || {
        invocations.messages().len() == 5
    })
    .await;
    env.wait_drained("the later messages are acked").await;
    let groups = env.cmd(&["XINFO", "GROUPS", STREAM]).await;
    assert_eq!(
        array(&groups).len(),
        1,
        "the group was recreated: {groups:?}"
    );
    let all = invocations.all();
    assert_eq!(all.len(), 5, "each message ran once: {all:?}");
    assert!(all.iter().all(|r| r.delivery_count == 1), "{all:?}");
    worker.shutdown(Duration::from_secs(2)).await;
}

/// `CLIENT KILL TYPE normal` drops every connection of the worker (commands and the blocking
/// read), twice, while a long handler runs: the worker reconnects, keeps that lease (it runs
/// once) and processes everything published after each kill.
pub async fn killed_connections_reconnect<T: TestRt>(rt: T) {
    let env = Env::start(rt).await;
    env.publish(0).await;
    let invocations = Invocations::default();
    let worker = recording_worker(
        env.runtime(),
        env.backend("a").await,
        &invocations,
        config().concurrency(2),
        Some((0, CLAIM * 2)),
    );
    env.wait_until("the long message started", || invocations.len() == 1)
        .await;
    let mut next = 1;
    for round in 0..2 {
        // Both connections are open: the command one, and the wait's (opened again by the
        // first wait after a kill).
        env.wait_blocked("the worker waits for new entries").await;
        let killed = env.cmd(&["CLIENT", "KILL", "TYPE", "normal"]).await;
        assert!(
            matches!(killed, Reply::Integer(n) if n >= 2),
            "round {round}: the worker's connections were not killed: {killed:?}"
        );
        for _ in 0..3 {
            env.publish(next).await;
            next += 1;
        }
        env.wait_until("the messages after the kill ran", || {
            invocations.messages().len() == next as usize
        })
        .await;
    }
    env.wait_drained("everything is acked").await;
    let all = invocations.all();
    assert_eq!(all.len(), next as usize, "each message ran once: {all:?}");
    assert!(all.iter().all(|r| r.delivery_count == 1), "{all:?}");
    let stats = worker.stats().await.expect("running");
    assert_no_loss(&stats, "a");
    worker.shutdown(Duration::from_secs(2)).await;
}

/// Redis is killed (SIGKILL) mid-run and restarted on the same port with its AOF: the worker
/// reconnects and every message — published before the crash or after the restart — is
/// processed; none is lost. Duplicates are allowed only for messages that started before the
/// restart (at-least-once).
pub async fn redis_restart_with_aof_loses_nothing<T: TestRt>(rt: T) {
    const BEFORE: u64 = 30;
    const AFTER: u64 = 10;
    let env = Env::start_with(rt, RedisServer::builder().aof(true)).await;
    for message in 0..BEFORE {
        env.publish(message).await;
    }
    let restarted = Arc::new(AtomicBool::new(false));
    let phases: Arc<Mutex<Vec<(u64, bool)>>> = Arc::default();
    let invocations = Invocations::default();
    let (recorder, rt, flag, phase_log) = (
        invocations.clone(),
        env.runtime(),
        restarted.clone(),
        phases.clone(),
    );
    let worker = builder(env.runtime(), config().concurrency(2))
        .stream(STREAM, env.backend("a").await, move |d: Delivery<u64>| {
            recorder.record("a", &d);
            phase_log
                .lock()
                .unwrap()
                .push((*d.message(), flag.load(Ordering::SeqCst)));
            sleep(&rt, Duration::from_millis(30))
        })
        .start()
        .expect("valid worker");
    env.wait_until("a few messages ran", || invocations.len() >= 8)
        .await;
    let server = env.server.clone();
    env.rt
        .unblock(move || server.kill())
        .await
        .expect("kill redis-server");
    env.sleep(Duration::from_millis(300)).await;
    let server = env.server.clone();
    env.rt
        .unblock(move || server.restart())
        .await
        .unwrap_or_else(|e| panic!("restart redis-server: {e}"));
    restarted.store(true, Ordering::SeqCst);
    for message in BEFORE..BEFORE + AFTER {
        env.publish(message).await;
    }
    let total = (BEFORE + AFTER) as usize;
    env.wait_until("every message ran", || {
        invocations.messages().len() == total
    })
    .await;
    env.wait_drained("every message is acked").await;

    let mut by_message: BTreeMap<u64, Vec<bool>> = BTreeMap::new();
    for (message, after_restart) in phases.lock().unwrap().iter() {
        by_message.entry(*message).or_default().push(*after_restart);
    }
    assert_eq!(
        by_message.keys().copied().collect::<Vec<_>>(),
        (0..BEFORE + AFTER).collect::<Vec<_>>(),
        "none lost"
    );
    for (message, phases) in &by_message {
        if phases.len() > 1 {
            assert!(
                !phases[0],
                "message {message} ran {} times, all after the restart",
                phases.len()
            );
        }
    }
    worker.shutdown(Duration::from_secs(2)).await;
}

/// A key of the wrong type where the stream should be (`WRONGTYPE`) cannot be fixed by
/// retrying: the worker halts the stream once, says why in its health and its shutdown report,
/// and stops fetching (it does not retry forever).
pub async fn a_key_of_the_wrong_type_halts_the_stream<T: TestRt>(rt: T) {
    let env = Env::start(rt).await;
    env.publish(1).await;
    let invocations = Invocations::default();
    let worker = recording_worker(
        env.runtime(),
        env.backend("a").await,
        &invocations,
        config(),
        None,
    );
    env.wait_drained("the first message is acked").await;
    assert_eq!(worker.health(), Health::Running);
    env.cmd(&["DEL", STREAM]).await;
    env.cmd(&["SET", STREAM, "not a stream"]).await;
    let health = worker.closed().await;
    let Health::Stopped(reason) = &health else {
        panic!("its only stream halted: stopped, got {health:?}")
    };
    assert!(reason.contains("WRONGTYPE"), "the cause is named: {reason}");
    let calls_before = env.cmd(&["INFO", "commandstats"]).await;
    sleep(&env.runtime(), CLAIM).await;
    let calls_after = env.cmd(&["INFO", "commandstats"]).await;
    let fetches = |info: &Reply| -> u64 {
        let Reply::Bulk(Some(text)) = info else {
            return 0;
        };
        String::from_utf8_lossy(text)
            .lines()
            .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_xreadgroup:"))
            .filter_map(|l| {
                l.split("calls=")
                    .nth(1)?
                    .split(',')
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .sum()
    };
    assert_eq!(
        fetches(&calls_before),
        fetches(&calls_after),
        "no fetch after the halt"
    );
    let report = worker.shutdown(Duration::from_secs(2)).await;
    assert_eq!(report.halted.len(), 1, "{report:?}");
    assert!(report.halted[0].error.contains("WRONGTYPE"), "{report:?}");
}
