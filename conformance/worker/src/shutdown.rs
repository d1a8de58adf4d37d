//! Shutdown: wait for running handlers up to the grace, hand everything else back, lose nothing.

use std::collections::HashSet;
use std::time::Duration;

use futures::future::join;
use leasehold_worker::{CancelReason, Delivery, Outcome};

use crate::support::{
    base_config, builder, memory_stream, probe, publish, wait_for_stats, wait_until, Ended, Gate,
    Recorder, LONG_CLAIM,
};
use crate::TestRuntime;

/// Shutdown hands a waiting (`Pending`) message back at once, lets running handlers finish
/// within the grace (their results are acked), cancels the one still running when the grace
/// is over and hands it back; afterwards every published message is either acked or available
/// to a fresh consumer at once, and the report counts match.
pub async fn shutdown_waits_for_running_releases_waiting_and_loses_nothing<T: TestRuntime>(rt: T) {
    let grace = Duration::from_secs(1);
    let stream = memory_stream(&rt.clock(), LONG_CLAIM);
    let waiting = publish(&stream, "waiting");
    let finishing = [publish(&stream, "finishing"), publish(&stream, "finishing")];
    let stuck = publish(&stream, "stuck");
    let queued: Vec<_> = (0..3).map(|_| publish(&stream, "queued")).collect();
    let (rec, gate) = (Recorder::new(&rt), Gate::new());
    let handler = {
        let (rec, gate) = (rec.clone(), gate.clone());
        move |d: Delivery<String>| {
            let (rec, gate) = (rec.clone(), gate.clone());
            async move {
                let guard = rec.enter(&d);
                let outcome = match d.message().as_str() {
                    "waiting" => Outcome::Pending,
                    "finishing" => {
                        gate.wait().await;
                        Outcome::Done
                    }
                    "stuck" => {
                        let reason = d.cancelled().await;
                        rec.cancelled(&guard, reason);
                        Outcome::Done
                    }
                    _ => Outcome::Done,
                };
                guard.returned();
                outcome
            }
        }
    };
    // Concurrency 3 and a long re-poll: "waiting" waits in the engine while "finishing" ×2 and
    // "stuck" invocation; with nothing fetched ahead (prefetch 0, not the adaptive default), the
    // queued messages are never fetched.
    let config = base_config()
        .concurrency(3)
        .prefetch(0)
        .repoll_interval(Duration::from_secs(10));
    let (backend, taps) = probe(&stream, "w1");
    let worker = builder(&rt, config)
        .stream("jobs", backend, handler)
        .start()
        .expect("valid worker");

    wait_for_stats(&rt, &worker, "the waiting message to be Pending", |s| {
        s.pending == 1
    })
    .await;
    wait_until(&rt, "three handlers to run", || {
        rec.running("finishing") == 2 && rec.running("stuck") == 1
    })
    .await;
    assert_eq!(
        stream.pending_len(),
        4,
        "the queued messages stay in the stream"
    );

    // Shut down; meanwhile watch the waiting message come back, then let the running finish.
    let observe = async {
        wait_until(&rt, "the waiting message to be handed back", || {
            stream
                .pending_info(&waiting)
                .is_some_and(|info| info.idle >= LONG_CLAIM)
        })
        .await;
        let still_running = rec.running("finishing");
        gate.open();
        (rt.now(), still_running)
    };
    let started = rt.now();
    let (report, (released_at, still_running)) = join(worker.shutdown(grace), observe).await;

    assert_eq!(
        still_running, 2,
        "the waiting message was handed back at once, before the running ones finished"
    );
    assert_eq!(
        rec.invocations_of("waiting").len(),
        1,
        "not invoked again during shutdown"
    );
    for invocation in rec.invocations_of("finishing") {
        assert_eq!(invocation.ended.map(|(_, how)| how), Some(Ended::Returned));
    }
    let stuck_run = &rec.invocations_of("stuck")[0];
    let (cancelled_at, reason) = stuck_run.cancelled.expect("stuck was cancelled");
    assert_eq!(reason, CancelReason::Shutdown);
    if rt.is_virtual() {
        assert!(
            released_at - started < grace,
            "the waiting message did not wait for the grace"
        );
        assert!(
            cancelled_at - started >= grace,
            "the running handler was cancelled only when the grace was over"
        );
    }
    assert_eq!(
        (report.acked, report.released, report.cancelled),
        (2, 2, 1),
        "acked: the two finishing; released: waiting and stuck; cancelled: stuck ({report:?})"
    );
    assert_eq!(
        (report.dead_lettered, report.lost, report.abandoned),
        (0, 0, 0)
    );

    // Nothing lost: each message is acked or fetchable by a fresh consumer right now.
    let acked: HashSet<_> = taps.acks().into_iter().map(|l| l.id).collect();
    assert_eq!(acked, finishing.iter().cloned().collect());
    let fresh = stream.consumer("fresh").expect("fresh name");
    let available: HashSet<_> = fresh.fetch_now(100).into_iter().map(|m| m.id).collect();
    let mut expected: HashSet<_> = queued.into_iter().collect();
    expected.extend([waiting, stuck]);
    assert_eq!(
        available, expected,
        "every unfinished message is available again"
    );
}

/// After shutdown the worker lets go of the handler (and whatever it captured): its tasks end
/// instead of waiting for invocations forever.
pub async fn shutdown_lets_go_of_the_handler<T: TestRuntime>(rt: T) {
    let stream = memory_stream(&rt.clock(), LONG_CLAIM);
    for _ in 0..5 {
        publish(&stream, "job");
    }
    let captured = std::sync::Arc::new(());
    let handler = {
        let captured = captured.clone();
        move |_: Delivery<String>| {
            let _captured = &captured;
            async {}
        }
    };
    let (backend, _) = probe(&stream, "w1");
    let worker = builder(&rt, base_config().concurrency(3))
        .stream("jobs", backend, handler)
        .start()
        .expect("valid worker");
    wait_until(&rt, "every message to be acked", || stream.is_empty()).await;
    worker.shutdown(LONG_CLAIM).await;
    wait_until(&rt, "the handler to be dropped", || {
        std::sync::Arc::strong_count(&captured) == 1
    })
    .await;
}
