//! Duplicate execution: a message is never run twice at once, whatever the backend delivers.

use std::collections::HashMap;

use leasehold_worker::Delivery;

use crate::support::{
    base_config, builder, memory_stream, probe, publish, settle, wait_until, Gate, Recorder,
    LONG_CLAIM,
};
use crate::TestRuntime;

/// A message delivered again while this worker holds it (its lease lapsed on the backend, and
/// the worker's own fetch reclaimed it) adopts the new delivery and is not run a second time;
/// the one invocation's result is acked with the new delivery's fence.
pub async fn redelivery_while_held_does_not_start_a_second_run<T: TestRuntime>(rt: T) {
    let clock = rt.clock();
    let stream = memory_stream(&clock, LONG_CLAIM);
    let id = publish(&stream, "held");
    let (rec, gate) = (Recorder::new(&rt), Gate::new());
    let handler = {
        let (rec, gate) = (rec.clone(), gate.clone());
        move |d: Delivery<String>| {
            let (rec, gate) = (rec.clone(), gate.clone());
            async move {
                let guard = rec.enter(&d);
                gate.wait().await;
                guard.returned();
            }
        }
    };
    let (backend, taps) = probe(&stream, "w1");
    // Concurrency 2: a slot stays free, so the worker keeps fetching while the message runs.
    let worker = builder(&rt, base_config().concurrency(2))
        .stream("jobs", backend, handler)
        .start()
        .expect("valid worker");

    wait_until(&rt, "the handler to start", || rec.running("held") == 1).await;
    // The backend's clock runs ahead: the lease lapses there, the worker still counts it valid.
    clock.jump(LONG_CLAIM);
    wait_until(&rt, "the worker's own fetch to reclaim the message", || {
        stream
            .pending_info(&id)
            .is_some_and(|info| info.owner == "w1" && info.delivery_count == 2)
    })
    .await;
    settle(&rt).await;
    assert_eq!(rec.started("held"), 1, "the redelivery started nothing");
    let stats = worker.stats().await.expect("running");
    assert_eq!(
        stats.redelivered, 1,
        "the new delivery was adopted: {stats:?}"
    );

    gate.open();
    wait_until(&rt, "the message to be acked", || stream.is_empty()).await;
    let report = worker.shutdown(LONG_CLAIM).await;
    assert_eq!(
        rec.started("held"),
        1,
        "one invocation in all: {:?}",
        rec.invocations()
    );
    assert_eq!(rec.max_same_message(), 1);
    let fences: Vec<u64> = taps.acks_of(&id).iter().map(|l| l.fence.0).collect();
    assert_eq!(fences, [2], "acked once, with the adopted delivery's fence");
    assert_eq!((report.acked, report.lost), (1, 0));
}

/// Two workers on one stream, handlers running twice the claim timeout: heartbeats keep every
/// lease, so each message runs exactly once and never on both workers at once. (On real time a
/// stall of the executor longer than 0.9 × claim − heartbeat would let a lease lapse: a 1 s
/// claim tolerates about 0.57 s.)
pub async fn long_handlers_are_not_run_twice_across_workers<T: TestRuntime>(rt: T) {
    let claim = std::time::Duration::from_secs(1);
    let stream = memory_stream(&rt.clock(), claim);
    for i in 0..6 {
        publish(&stream, &format!("long-{i}"));
    }
    let rec = Recorder::new(&rt);
    let handler = {
        let (rec, rt) = (rec.clone(), rt.clone());
        move |d: Delivery<String>| {
            let (rec, rt) = (rec.clone(), rt.clone());
            async move {
                let guard = rec.enter(&d);
                rt.sleep(claim * 2).await;
                guard.returned();
            }
        }
    };
    let config = base_config().claim_timeout(claim).concurrency(3);
    let workers: Vec<_> = ["w1", "w2"]
        .into_iter()
        .map(|name| {
            builder(&rt, config.clone())
                .stream("jobs", probe(&stream, name).0, handler.clone())
                .start()
                .expect("valid worker")
        })
        .collect();

    wait_until(&rt, "every message to be acked", || stream.is_empty()).await;
    let mut stats = Vec::new();
    for worker in &workers {
        stats.push(worker.stats().await.expect("running"));
    }
    let mut acked = 0;
    for worker in workers {
        acked += worker.shutdown(claim).await.acked;
    }
    let mut per_message: HashMap<String, usize> = HashMap::new();
    for invocation in rec.invocations() {
        *per_message.entry(invocation.message).or_default() += 1;
    }
    assert_eq!(per_message.len(), 6);
    assert!(
        per_message.values().all(|&n| n == 1),
        "each message ran exactly once: {per_message:?}\nworker stats: {stats:?}\nruns: {:#?}",
        rec.invocations()
    );
    assert_eq!(rec.max_same_message(), 1);
    for s in &stats {
        assert_eq!(
            (s.lost, s.expired, s.redelivered),
            (0, 0, 0),
            "no lease lapsed: {s:?}"
        );
    }
    assert_eq!(acked, 6);
}
