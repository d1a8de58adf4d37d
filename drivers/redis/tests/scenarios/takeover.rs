//! When a message may be taken over, and when not. A lease whose heartbeats keep coming is
//! never reclaimed, however long its handler runs, neither by its own worker's fetches nor by a
//! peer's; a lease whose worker died (no release: its heartbeats just stop) is taken over by a
//! peer once the claim timeout has passed; and a backlog of such stale entries is reclaimed
//! without holding up new messages. Together: no message runs twice while its worker lives, and
//! none is lost when it dies.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use leasehold_core::Backend;
use leasehold_redis::RedisBackend;
use leasehold_worker::Delivery;

use super::support::{
    array, assert_no_loss, builder, command, config, entries, settled_stats, sleep, spawn, Env,
    InvocationRecord, Invocations, Isolated, TestRt, CLAIM, DEAD, GROUP, HEARTBEAT, PATIENCE, STEP,
    STREAM,
};

// ----- live work is not reclaimed ----------------------------------------------------------------

/// A handler running 3× the claim timeout runs exactly once: its heartbeats keep Redis's idle
/// time of the entry below the claim timeout the whole time, and the worker's own fetches
/// (which reclaim anything idle that long) never take it back.
pub async fn live_work_is_not_reclaimed_with_one_worker<T: TestRt>(rt: T) {
    let env = Env::start(rt).await;
    let id = env.publish(1).await;
    let invocations = Invocations::default();
    let (recorder, runtime) = (invocations.clone(), env.runtime());
    let worker = builder(env.runtime(), config().concurrency(4))
        .stream(STREAM, env.backend("a").await, move |d: Delivery<u64>| {
            recorder.record("a", &d);
            sleep(&runtime, CLAIM * 3)
        })
        .start()
        .expect("valid worker");
    env.wait_until("the handler started", || invocations.len() == 1)
        .await;
    // While it runs, Redis sees a lease that is renewed: owned by a, delivered once, never
    // idle for a claim timeout.
    let mut samples = 0;
    while invocations.len() == 1 && env.xlen(STREAM).await == 1 {
        let pending = env.pending().await;
        if let [entry] = pending.as_slice() {
            assert_eq!((entry.owner.as_str(), entry.count), ("a", 1), "{entry:?}");
            assert!(
                entry.idle_ms < CLAIM.as_millis() as i64,
                "a live lease lapsed on Redis: {entry:?}"
            );
            samples += 1;
        }
        env.sleep(Duration::from_millis(150)).await;
    }
    assert!(samples >= 5, "the handler ran for only {samples} samples");
    env.wait_drained("the message is acked").await;
    assert_eq!(
        invocations.all(),
        [InvocationRecord {
            worker: "a",
            id,
            message: 1,
            delivery_count: 1
        }]
    );
    let stats = settled_stats(&env.runtime(), &worker, |s| s.acked >= 1).await;
    assert_no_loss(&stats, "a");
    assert_eq!(
        (stats.invocations, stats.acked, stats.redelivered),
        (1, 1, 0)
    );
    worker.shutdown(Duration::from_secs(2)).await;
}

/// Two workers on one stream, each holding one message 3× the claim timeout while the other
/// keeps fetching (and so keeps trying to reclaim): each message runs exactly once.
pub async fn live_work_is_not_reclaimed_with_two_workers<T: TestRt>(rt: T) {
    let env = Env::start(rt).await;
    let ids = [env.publish(1).await, env.publish(2).await];
    let invocations = Invocations::default();
    let mut workers = Vec::new();
    for name in ["a", "b"] {
        let (recorder, runtime) = (invocations.clone(), env.runtime());
        workers.push(
            builder(env.runtime(), config())
                .stream(STREAM, env.backend(name).await, move |d: Delivery<u64>| {
                    recorder.record(name, &d);
                    sleep(&runtime, CLAIM * 3)
                })
                .start()
                .expect("valid worker"),
        );
    }
    env.wait_until("both messages started", || invocations.len() == 2)
        .await;
    env.wait_drained("both messages are acked").await;
    let mut seen: Vec<_> = invocations
        .all()
        .into_iter()
        .map(|r| (r.id, r.delivery_count))
        .collect();
    seen.sort();
    let mut expected: Vec<_> = ids.iter().map(|id| (id.clone(), 1)).collect();
    expected.sort();
    assert_eq!(
        seen, expected,
        "each message ran once, on its first delivery"
    );
    let mut acked = 0;
    for (worker, name) in workers.into_iter().zip(["a", "b"]) {
        let stats = worker.stats().await.expect("running");
        assert_no_loss(&stats, name);
        assert_eq!(stats.redelivered, 0, "{name}: {stats:?}");
        // The shutdown report includes ack answers still on their way when the stream drained.
        acked += worker.shutdown(Duration::from_secs(2)).await.acked;
    }
    assert_eq!(acked, 2);
}

// ----- crash failover ----------------------------------------------------------------------------

/// A worker whose runtime dies mid-handler (no graceful shutdown: its heartbeats just stop) —
/// a peer takes the message over once the claim timeout has passed and completes it.
pub async fn crashed_worker_fails_over_to_a_peer<T: TestRt>(rt: T) {
    let env = Env::start(rt).await;
    let id = env.publish(7).await;
    let isolated = env.rt.isolated();
    let invocations = Invocations::default();
    let config_a = env.config("a");
    let backend_a = isolated
        .run(async move { RedisBackend::connect(config_a).await })
        .await
        .expect("connect a");
    let recorder = invocations.clone();
    let victim = builder(isolated.runtime(), config())
        .stream(STREAM, backend_a, move |d: Delivery<u64>| {
            recorder.record("a", &d);
            // Works until the process dies.
            futures::future::pending::<()>()
        })
        .start()
        .expect("valid worker");
    env.wait_until("a started the message", || invocations.len() == 1)
        .await;
    // Let a few heartbeats pass, so the crash hits a lease that is being renewed.
    env.sleep(HEARTBEAT * 2).await;
    let before = env.pending().await;
    assert_eq!(before.len(), 1, "{before:?}");
    assert_eq!((before[0].owner.as_str(), before[0].count), ("a", 1));
    isolated.kill();
    // A crash, not a hand-back: the entry is still a's, not released (a release would have set
    // its idle time to the claim timeout at once).
    let after = env.pending().await;
    assert_eq!(after.len(), 1, "{after:?}");
    assert_eq!((after[0].owner.as_str(), after[0].count), ("a", 1));
    assert!(
        after[0].idle_ms < CLAIM.as_millis() as i64,
        "the dying worker released the message: {after:?}"
    );

    let recorder = invocations.clone();
    let peer = builder(env.runtime(), config())
        .stream(STREAM, env.backend("b").await, move |d: Delivery<u64>| {
            recorder.record("b", &d);
            async {}
        })
        .start()
        .expect("valid worker");
    env.wait_drained("the peer completes the message").await;
    assert_eq!(
        invocations.all(),
        [
            InvocationRecord {
                worker: "a",
                id: id.clone(),
                message: 7,
                delivery_count: 1
            },
            InvocationRecord {
                worker: "b",
                id,
                message: 7,
                delivery_count: 2
            },
        ]
    );
    let stats = settled_stats(&env.runtime(), &peer, |s| s.acked >= 1).await;
    assert_eq!((stats.invocations, stats.acked), (1, 1), "{stats:?}");
    assert_eq!(env.xlen(DEAD).await, 0);
    peer.shutdown(Duration::from_secs(2)).await;
    // Only now: the dead worker's handle must not have asked for a graceful shutdown earlier.
    drop(victim);
}

// ----- reclaim round-robin -----------------------------------------------------------------------

/// 200 entries delivered to a consumer that then vanished are all reclaimed, while new entries
/// — some already there, some published during the reclaim — keep flowing, interleaved with
/// the reclaims. No starvation: 100 entries of a live consumer (renewed throughout) sit ahead
/// of the stale ones in the pending list: a reclaim that restarted its `XAUTOCLAIM` scan
/// (10 × COUNT entries at most) from the start each time would spend it on them.
pub async fn stale_entries_are_all_reclaimed_while_new_ones_flow<T: TestRt>(rt: T) {
    const LIVE: std::ops::Range<u64> = 0..100;
    const STALE: std::ops::Range<u64> = 100..300;
    const NEW_BEFORE: std::ops::Range<u64> = 300..400;
    const NEW_DURING: std::ops::Range<u64> = 400..450;
    let env = Env::start(rt).await;
    let publisher = Arc::new(env.backend("publisher").await);
    let mut live_ids = Vec::new();
    for (range, consumer) in [(LIVE, "live"), (STALE, "ghost")] {
        for message in range.clone() {
            let id = publisher
                .publish(Bytes::from(message.to_string()))
                .await
                .expect("publish");
            if consumer == "live" {
                live_ids.push(id.as_str().to_string());
            }
        }
        let count = range.end - range.start;
        let read = env
            .cmd(&[
                "XREADGROUP",
                "GROUP",
                GROUP,
                consumer,
                "COUNT",
                &count.to_string(),
                "STREAMS",
                STREAM,
                ">",
            ])
            .await;
        assert_eq!(
            entries(&array(&read)[0].as_array().unwrap()[1]).len(),
            count as usize
        );
    }
    // The live consumer renews its entries (XCLAIM … JUSTID keeps their count) until the end.
    let stop = Arc::new(AtomicBool::new(false));
    let keep_alive = {
        let (rt, runtime, server, stop) = (
            env.rt.clone(),
            env.runtime(),
            env.server.clone(),
            stop.clone(),
        );
        let mut args: Vec<String> = ["XCLAIM", STREAM, GROUP, "live", "0"]
            .iter()
            .map(|a| a.to_string())
            .collect();
        args.extend(live_ids.iter().cloned());
        args.push("JUSTID".into());
        spawn(&env.runtime(), async move {
            while !stop.load(Ordering::SeqCst) {
                let (server, sent) = (server.clone(), args.clone());
                let renewed = rt.unblock(move || command(&server, &sent)).await;
                assert_eq!(array(&renewed).len(), args.len() - 6, "{renewed:?}");
                sleep(&runtime, Duration::from_millis(250)).await;
            }
        })
    };
    // The ghost never renews: after a claim timeout its entries are up for grabs.
    env.sleep(CLAIM + Duration::from_millis(100)).await;
    for message in NEW_BEFORE {
        env.publish(message).await;
    }

    let invocations = Invocations::default();
    let (recorder, runtime) = (invocations.clone(), env.runtime());
    let worker = builder(env.runtime(), config().concurrency(4))
        .stream(STREAM, env.backend("a").await, move |d: Delivery<u64>| {
            recorder.record("a", &d);
            sleep(&runtime, Duration::from_millis(5))
        })
        .start()
        .expect("valid worker");
    let runtime = env.runtime();
    let published = spawn(&env.runtime(), async move {
        for message in NEW_DURING {
            publisher
                .publish(Bytes::from(message.to_string()))
                .await
                .expect("publish");
            sleep(&runtime, Duration::from_millis(10)).await;
        }
    });
    published.await.expect("the publisher ran");
    let total = (STALE.start..NEW_DURING.end).count();
    env.wait_until("every stale and new message ran", || {
        invocations.messages().len() == total
    })
    .await;
    // Settled: acked, and the live consumer's entries untouched.
    let deadline = Instant::now() + PATIENCE;
    loop {
        let pending = env.pending().await;
        let live_untouched = pending.len() == live_ids.len()
            && pending
                .iter()
                .zip(&live_ids)
                .all(|(e, id)| e.id == *id && e.owner == "live" && e.count == 1);
        if live_untouched {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "gave up waiting for only the live entries to remain: {pending:?}"
        );
        env.sleep(STEP).await;
    }
    stop.store(true, Ordering::SeqCst);
    keep_alive
        .await
        .expect("the live consumer kept its entries");

    let all = invocations.all();
    assert_eq!(all.len(), total, "each message ran once");
    for invocation in &all {
        assert!(
            !LIVE.contains(&invocation.message),
            "a live entry was taken: {invocation:?}"
        );
        let expected = if STALE.contains(&invocation.message) {
            2
        } else {
            1
        };
        assert_eq!(invocation.delivery_count, expected, "{invocation:?}");
    }
    // Neither kind waited for the other: the first 100 runs hold plenty of both.
    let early_stale = all[..100]
        .iter()
        .filter(|r| STALE.contains(&r.message))
        .count();
    assert!(
        (20..=80).contains(&early_stale),
        "{early_stale} of the first 100 runs were reclaims: {:?}",
        all[..100].iter().map(|r| r.message).collect::<Vec<_>>()
    );
    let last_stale = all
        .iter()
        .rposition(|r| STALE.contains(&r.message))
        .unwrap();
    let first_new_during = all
        .iter()
        .position(|r| NEW_DURING.contains(&r.message))
        .unwrap();
    assert!(
        first_new_during < last_stale,
        "messages published during the reclaim waited for all of it: {:?}",
        all.iter().map(|r| r.message).collect::<Vec<_>>()
    );
    let stats = settled_stats(&env.runtime(), &worker, |s| s.acked >= total as u64).await;
    assert_eq!(stats.acked, total as u64, "{stats:?}");
    worker.shutdown(Duration::from_secs(2)).await;
}
