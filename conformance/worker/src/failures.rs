//! Failures: retries with backoff, dead letters, lost and expired leases, hung handlers.

use std::time::Duration;

use leasehold_memory::Bytes;
use leasehold_worker::core::{ErrorKind, LeaseRef};
use leasehold_worker::{CancelReason, Delivery, Health, Outcome};

use crate::support::{
    base_config, builder, memory_stream, probe, publish, settle, wait_until, Ended, Mark, Recorder,
    LONG_CLAIM, POLL, RETRY_INITIAL, SHORT_CLAIM,
};
use crate::TestRuntime;

/// A handler that panics or fails every time is retried with exponential backoff (the delivery
/// count rising each time) and dead-lettered after `max_deliveries`, with the count and the
/// last error; other messages keep flowing meanwhile.
pub async fn failures_back_off_then_dead_letter<T: TestRuntime>(rt: T) {
    const MAX_DELIVERIES: u32 = 3;
    let stream = memory_stream(&rt.clock(), LONG_CLAIM);
    let panics = publish(&stream, "panics");
    let errors = publish(&stream, "errors");
    for i in 0..4 {
        publish(&stream, &format!("ok-{i}"));
    }
    let rec = Recorder::new(&rt);
    let handler = {
        let rec = rec.clone();
        move |d: Delivery<String>| {
            let guard = rec.enter(&d);
            async move {
                guard.returned();
                match d.message().as_str() {
                    "panics" => panic!("boom (a deliberate test panic)"),
                    "errors" => Err("nope".to_string()),
                    _ => Ok(()),
                }
            }
        }
    };
    let config = base_config().max_deliveries(MAX_DELIVERIES);
    let worker = builder(&rt, config)
        .stream("jobs", probe(&stream, "w1").0, handler)
        .start()
        .expect("valid worker");

    wait_until(&rt, "both failing messages to be dead-lettered", || {
        stream.dead_letters().len() == 2 && stream.is_empty()
    })
    .await;
    let report = worker.shutdown(LONG_CLAIM).await;
    assert_eq!((report.acked, report.dead_lettered), (4, 2));

    let dead = stream.dead_letters();
    for (id, message, error) in [(&panics, "panics", "boom"), (&errors, "errors", "nope")] {
        let invocations = rec.invocations_of(message);
        let counts: Vec<u32> = invocations.iter().map(|r| r.delivery_count).collect();
        assert_eq!(
            counts,
            [1, 2, 3],
            "{message}: one invocation per delivery, up to the cap"
        );
        let letter = dead
            .iter()
            .find(|l| l.original_id == *id)
            .unwrap_or_else(|| panic!("{message} is dead-lettered: {dead:?}"));
        assert_eq!(letter.delivery_count, MAX_DELIVERIES);
        assert!(
            letter.reason.contains("failed 3 deliveries") && letter.reason.contains(error),
            "{message}: the reason names the count and the last error: {:?}",
            letter.reason
        );
        assert_eq!(letter.consumer, "w1");
        if rt.is_virtual() {
            for (k, pair) in invocations.windows(2).enumerate() {
                let backoff = RETRY_INITIAL * 2u32.pow(k as u32);
                let (ended, _) = pair[0].ended.expect("ended");
                let gap = pair[1].started - ended;
                assert!(
                    gap >= backoff && gap < backoff + POLL * 3,
                    "{message}: retry {} came {gap:?} after the failure; backoff is {backoff:?}",
                    k + 1
                );
            }
        }
    }
    // The other messages flowed while the failing ones backed off.
    let (invocations, marks) = (rec.invocations(), rec.marks());
    for i in 0..4 {
        assert_eq!(rec.started(&format!("ok-{i}")), 1);
    }
    let first_ok_end = marks
        .iter()
        .position(|m| matches!(m, Mark::End(i) if invocations[*i].message.starts_with("ok-")))
        .expect("ok messages ran");
    let last_failure_start = marks
        .iter()
        .rposition(|m| matches!(m, Mark::Start(i) if !invocations[*i].message.starts_with("ok-")))
        .expect("failures ran");
    assert!(
        first_ok_end < last_failure_start,
        "other messages completed between the retries: {marks:?}"
    );
}

/// A payload the codec cannot decode is dead-lettered on its first delivery, without invoking
/// the handler and without retries; the next message is processed.
pub async fn undecodable_payload_is_dead_lettered_at_once<T: TestRuntime>(rt: T) {
    let stream = memory_stream(&rt.clock(), LONG_CLAIM);
    let garbage = stream.publish(Bytes::from_static(b"\xffnot json"));
    publish(&stream, "fine");
    let rec = Recorder::new(&rt);
    let handler = {
        let rec = rec.clone();
        move |d: Delivery<String>| {
            let guard = rec.enter(&d);
            async move { guard.returned() }
        }
    };
    let worker = builder(&rt, base_config())
        .stream("jobs", probe(&stream, "w1").0, handler)
        .start()
        .expect("valid worker");

    wait_until(&rt, "the stream to drain", || stream.is_empty()).await;
    let report = worker.shutdown(LONG_CLAIM).await;
    let dead = stream.dead_letters();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0].original_id, garbage);
    assert_eq!(dead[0].delivery_count, 1, "no retry can fix a payload");
    assert!(
        dead[0].reason.starts_with("rejected") && dead[0].reason.contains("decode"),
        "{:?}",
        dead[0].reason
    );
    let ran: Vec<String> = rec.invocations().into_iter().map(|r| r.message).collect();
    assert_eq!(ran, ["fine"]);
    assert_eq!((report.acked, report.dead_lettered), (1, 1));
}

/// A lease the backend reports lost (another consumer took the message) cancels the running
/// handler with `LeaseLost`; its result is never acked, and the new owner still holds the
/// message and can ack it.
pub async fn lost_lease_cancels_the_handler_and_drops_its_result<T: TestRuntime>(rt: T) {
    let clock = rt.clock();
    let stream = memory_stream(&clock, SHORT_CLAIM);
    let id = publish(&stream, "victim");
    let thief = stream.consumer("thief").expect("fresh name");
    let rec = Recorder::new(&rt);
    let handler = {
        let rec = rec.clone();
        move |d: Delivery<String>| {
            let rec = rec.clone();
            async move {
                let guard = rec.enter(&d);
                let reason = d.cancelled().await;
                rec.cancelled(&guard, reason);
                guard.returned();
                // The result a stale worker must not act on.
                Outcome::Done
            }
        }
    };
    let (backend, taps) = probe(&stream, "w1");
    // Concurrency 1: the worker does not fetch while the message runs, so only the thief can
    // take it over.
    let worker = builder(&rt, base_config().claim_timeout(SHORT_CLAIM))
        .stream("jobs", backend, handler)
        .start()
        .expect("valid worker");

    wait_until(&rt, "the handler to start", || rec.running("victim") == 1).await;
    // The lease lapses on the backend (its clock runs ahead) and another consumer takes it.
    clock.jump(SHORT_CLAIM);
    let stolen = thief.fetch_now(1);
    assert_eq!(stolen.len(), 1, "the lapsed message is reclaimable");
    assert_eq!((&stolen[0].id, stolen[0].delivery_count), (&id, 2));
    let lease_ref = LeaseRef::new(id.clone(), stolen[0].fence);
    // The thief keeps its lease alive while the worker's next heartbeat learns of the loss.
    let keep = || {
        let kept = thief.renew_now(std::slice::from_ref(&lease_ref));
        assert_eq!(
            kept,
            [leasehold_worker::core::RenewResult::Kept],
            "the thief keeps it"
        );
    };
    wait_until(&rt, "the handler to be cancelled and return", || {
        keep();
        rec.invocations_of("victim")[0].ended.is_some()
    })
    .await;
    settle(&rt).await;
    keep();

    let invocations = rec.invocations_of("victim");
    assert_eq!(
        invocations.len(),
        1,
        "the worker does not run it again: {invocations:?}"
    );
    let cancelled = invocations[0].cancelled.map(|(_, reason)| reason);
    assert_eq!(cancelled, Some(CancelReason::LeaseLost));
    assert!(
        taps.acks_of(&id).is_empty(),
        "the cancelled invocation's Done was not acked: {:?}",
        taps.acks()
    );
    let info = stream.pending_info(&id).expect("still pending");
    assert_eq!((info.owner.as_str(), info.delivery_count), ("thief", 2));
    assert_eq!(
        thief.ack_now(&[lease_ref]),
        [leasehold_worker::core::SettleResult::Ok]
    );
    assert!(stream.is_empty());
    let report = worker.shutdown(LONG_CLAIM).await;
    assert_eq!((report.acked, report.lost, report.cancelled), (0, 1, 1));
}

/// Renews that keep failing make the worker consider the lease expired before the backend lets
/// anyone else take it: the handler is cancelled with `LeaseExpired`; one that then gives up
/// (fails) has its message retried.
pub async fn failing_renews_expire_the_lease_and_cancel_the_handler<T: TestRuntime>(rt: T) {
    let stream = memory_stream(&rt.clock(), SHORT_CLAIM);
    let id = publish(&stream, "victim");
    let rec = Recorder::new(&rt);
    let handler = {
        let rec = rec.clone();
        move |d: Delivery<String>| {
            let rec = rec.clone();
            async move {
                let guard = rec.enter(&d);
                if d.delivery_count() == 1 {
                    let reason = d.cancelled().await;
                    rec.cancelled(&guard, reason);
                    guard.returned();
                    return Outcome::Failed {
                        error: "stopped: the lease expired".into(),
                    };
                }
                guard.returned();
                Outcome::Done
            }
        }
    };
    let (backend, taps) = probe(&stream, "w1");
    let worker = builder(&rt, base_config().claim_timeout(SHORT_CLAIM))
        .stream("jobs", backend, handler)
        .start()
        .expect("valid worker");

    wait_until(&rt, "the handler to start", || rec.running("victim") == 1).await;
    taps.fail_renews(true);
    wait_until(&rt, "the handler to be cancelled", || {
        rec.invocations_of("victim")[0].cancelled.is_some()
    })
    .await;
    if rt.is_virtual() {
        let info = stream.pending_info(&id).expect("pending");
        assert_eq!((info.owner.as_str(), info.delivery_count), ("w1", 1));
        assert!(
            info.idle < SHORT_CLAIM,
            "the worker gave up before the backend would let another consumer take it: {info:?}"
        );
    }
    taps.fail_renews(false);
    wait_until(&rt, "the retried message to be acked", || stream.is_empty()).await;
    let report = worker.shutdown(LONG_CLAIM).await;

    let invocations = rec.invocations_of("victim");
    let counts: Vec<u32> = invocations.iter().map(|r| r.delivery_count).collect();
    assert_eq!(
        counts,
        [1, 2],
        "cancelled once, then retried: {invocations:?}"
    );
    let cancelled = invocations[0].cancelled.map(|(_, reason)| reason);
    assert_eq!(cancelled, Some(CancelReason::LeaseExpired));
    let fences: Vec<u64> = taps.acks_of(&id).iter().map(|l| l.fence.0).collect();
    assert_eq!(fences, [2], "only the retry's result was acked");
    assert_eq!((report.acked, report.lost, report.cancelled), (1, 1, 1));
}

/// Renews that keep failing expire the lease locally and cancel the handler, which finishes its
/// work anyway within the cancel grace and returns `Done`: its ack is sent, fenced, and since
/// nobody took the message over the backend accepts it. The message does not run again; the
/// report counts the lease as expired and the ack as one after expiry.
pub async fn a_done_within_the_cancel_grace_after_expiry_is_acked<T: TestRuntime>(rt: T) {
    let stream = memory_stream(&rt.clock(), SHORT_CLAIM);
    let id = publish(&stream, "victim");
    let rec = Recorder::new(&rt);
    let handler = {
        let rec = rec.clone();
        move |d: Delivery<String>| {
            let rec = rec.clone();
            async move {
                let guard = rec.enter(&d);
                let reason = d.cancelled().await;
                rec.cancelled(&guard, reason);
                guard.returned();
            }
        }
    };
    let (backend, taps) = probe(&stream, "w1");
    // A wide margin and grace, so a loaded machine still reports the `Done` within the grace.
    let config = base_config()
        .claim_timeout(SHORT_CLAIM)
        .expiry_margin(Duration::from_millis(400))
        .cancel_grace(Duration::from_millis(300));
    let worker = builder(&rt, config)
        .stream("jobs", backend, handler)
        .start()
        .expect("valid worker");

    wait_until(&rt, "the handler to start", || rec.running("victim") == 1).await;
    taps.fail_renews(true);
    wait_until(&rt, "the message to be acked", || stream.is_empty()).await;
    let report = worker.shutdown(LONG_CLAIM).await;

    let invocations = rec.invocations_of("victim");
    assert_eq!(invocations.len(), 1, "never run again: {invocations:?}");
    let cancelled = invocations[0].cancelled.map(|(_, reason)| reason);
    assert_eq!(cancelled, Some(CancelReason::LeaseExpired));
    let fences: Vec<u64> = taps.acks_of(&id).iter().map(|l| l.fence.0).collect();
    assert_eq!(fences, [1], "acked with the delivery's own fence");
    assert_eq!(
        (
            report.acked,
            report.acked_after_expiry,
            report.lost,
            report.cancelled
        ),
        (1, 1, 1, 1)
    );
}

/// `max_processing_time` cancels a hung invocation: one that selects on its cancellation
/// returns (its result discarded), one that ignores it is dropped after the cancel grace; both
/// messages are retried (delivery count 2) and acked only then.
pub async fn max_processing_time_cancels_a_hung_handler_and_retries<T: TestRuntime>(rt: T) {
    let max_processing_time = Duration::from_millis(100);
    let stream = memory_stream(&rt.clock(), LONG_CLAIM);
    let hung = publish(&stream, "hung");
    let deaf = publish(&stream, "deaf");
    let rec = Recorder::new(&rt);
    let handler = {
        let rec = rec.clone();
        move |d: Delivery<String>| {
            let rec = rec.clone();
            async move {
                let guard = rec.enter(&d);
                if d.delivery_count() == 1 {
                    if d.message() == "hung" {
                        let reason = d.cancelled().await;
                        rec.cancelled(&guard, reason);
                    } else {
                        std::future::pending::<()>().await;
                    }
                }
                guard.returned();
            }
        }
    };
    let (backend, taps) = probe(&stream, "w1");
    let config = base_config()
        .concurrency(2)
        .max_processing_time(max_processing_time);
    let worker = builder(&rt, config)
        .stream("jobs", backend, handler)
        .start()
        .expect("valid worker");

    wait_until(&rt, "both messages to be retried and acked", || {
        stream.is_empty()
    })
    .await;
    let report = worker.shutdown(LONG_CLAIM).await;

    for (id, message, first_end) in [
        (&hung, "hung", Ended::Returned),
        (&deaf, "deaf", Ended::Dropped),
    ] {
        let invocations = rec.invocations_of(message);
        let counts: Vec<u32> = invocations.iter().map(|r| r.delivery_count).collect();
        assert_eq!(
            counts,
            [1, 2],
            "{message}: cancelled, then retried: {invocations:?}"
        );
        let ends: Vec<Ended> = invocations
            .iter()
            .map(|r| r.ended.expect("ended").1)
            .collect();
        assert_eq!(ends, [first_end, Ended::Returned], "{message}");
        let fences: Vec<u64> = taps.acks_of(id).iter().map(|l| l.fence.0).collect();
        assert_eq!(fences, [2], "{message}: only the retry's result was acked");
    }
    let first = &rec.invocations_of("hung")[0];
    let (cancelled_at, reason) = first.cancelled.expect("hung saw its cancellation");
    assert_eq!(reason, CancelReason::MaxProcessingTime);
    if rt.is_virtual() {
        assert!(
            cancelled_at - first.started >= max_processing_time,
            "not cancelled before max_processing_time"
        );
    }
    assert_eq!((report.acked, report.cancelled), (2, 2));
}

/// A handler future that panics while the driver drops it (it ignored its cancellation past the
/// grace) fails that attempt like any panic: the message is retried, and the task that ran it
/// (at concurrency 1, the stream's only one) goes on with the next message.
pub async fn a_handler_panicking_while_dropped_fails_its_attempt_and_the_worker_goes_on<
    T: TestRuntime,
>(
    rt: T,
) {
    /// Panics when dropped: a handler whose clean-up goes wrong.
    struct PanicsWhenDropped;
    impl Drop for PanicsWhenDropped {
        fn drop(&mut self) {
            panic!("clean-up failed while the handler was dropped");
        }
    }

    let stream = memory_stream(&rt.clock(), LONG_CLAIM);
    let bomb = publish(&stream, "bomb");
    let after = publish(&stream, "after");
    let rec = Recorder::new(&rt);
    let handler = {
        let rec = rec.clone();
        move |d: Delivery<String>| {
            let rec = rec.clone();
            async move {
                let guard = rec.enter(&d);
                if d.message() == "bomb" && d.delivery_count() == 1 {
                    let _armed = PanicsWhenDropped;
                    std::future::pending::<()>().await;
                }
                guard.returned();
            }
        }
    };
    let (backend, taps) = probe(&stream, "w1");
    let config = base_config().max_processing_time(Duration::from_millis(100));
    let worker = builder(&rt, config)
        .stream("jobs", backend, handler)
        .start()
        .expect("valid worker");

    wait_until(&rt, "both messages to be acked", || stream.is_empty()).await;
    let report = worker.shutdown(LONG_CLAIM).await;
    let counts: Vec<u32> = rec
        .invocations_of("bomb")
        .iter()
        .map(|r| r.delivery_count)
        .collect();
    assert_eq!(counts, [1, 2], "dropped with a panic, then retried");
    assert_eq!(rec.invocations_of("after").len(), 1);
    let fences: Vec<u64> = taps.acks_of(&bomb).iter().map(|l| l.fence.0).collect();
    assert_eq!(fences, [2], "only the retry's result was acked");
    assert_eq!(taps.acks_of(&after).len(), 1);
    assert_eq!((report.acked, report.cancelled), (2, 1), "{report:?}");
}

/// A fatal backend error (retrying cannot help) halts its stream: nothing more is fetched from
/// it, the worker's health says which stream and why, the other streams go on, and the
/// shutdown report names it. A transient error only backs off: health stays running.
pub async fn a_fatal_backend_error_halts_its_stream_and_shows_in_health<T: TestRuntime>(rt: T) {
    let sick_stream = memory_stream(&rt.clock(), LONG_CLAIM);
    let well_stream = memory_stream(&rt.clock(), LONG_CLAIM);
    let (sick, sick_taps) = probe(&sick_stream, "w1");
    let (well, _) = probe(&well_stream, "w1");
    let rec = Recorder::new(&rt);
    let handler = {
        let rec = rec.clone();
        move |d: Delivery<String>| {
            let guard = rec.enter(&d);
            async move { guard.returned() }
        }
    };
    sick_taps.fail_fetches(Some(ErrorKind::Transient));
    let worker = builder(&rt, base_config().concurrency(2))
        .stream("sick", sick, handler.clone())
        .stream("well", well, handler)
        .start()
        .expect("valid worker");
    publish(&well_stream, "w-1");
    wait_until(&rt, "the well stream to be consumed", || {
        well_stream.is_empty()
    })
    .await;
    settle(&rt).await;
    assert_eq!(
        worker.health(),
        Health::Running,
        "a transient error only backs off"
    );

    sick_taps.fail_fetches(Some(ErrorKind::Fatal));
    wait_until(&rt, "the fatal error to halt the sick stream", || {
        worker.health() != Health::Running
    })
    .await;
    let Health::Degraded(reason) = worker.health() else {
        panic!(
            "one of two streams halted: degraded, got {:?}",
            worker.health()
        )
    };
    assert!(
        reason.contains("sick") && reason.contains("NOPERM"),
        "the reason names the stream and the cause: {reason}"
    );
    // The halted stream is never fetched again, even once the backend would answer; the other
    // stream goes on.
    sick_taps.fail_fetches(None);
    publish(&sick_stream, "s-1");
    publish(&well_stream, "w-2");
    wait_until(&rt, "the well stream to go on", || well_stream.is_empty()).await;
    settle(&rt).await;
    assert_eq!(
        sick_stream.len(),
        1,
        "nothing fetched from the halted stream"
    );
    assert_eq!(rec.started("s-1"), 0);
    let stats = worker.stats().await.expect("running");
    assert_eq!((stats.halted, stats.unexpected), (1, 0));

    let report = worker.shutdown(LONG_CLAIM).await;
    assert_eq!(report.halted.len(), 1, "{report:?}");
    assert_eq!(report.halted[0].stream, "sick");
    assert!(report.halted[0].error.contains("fetch"), "{report:?}");
    assert_eq!(report.acked, 2);
}

/// When a fatal error halts every stream, the worker consumes nothing more: its health is
/// stopped and `closed()` completes, so a service can restart it or fail its readiness probe.
pub async fn a_worker_whose_every_stream_halts_is_stopped<T: TestRuntime>(rt: T) {
    let stream = memory_stream(&rt.clock(), LONG_CLAIM);
    let (probe, taps) = probe(&stream, "w1");
    taps.fail_fetches(Some(ErrorKind::Fatal));
    let worker = builder(&rt, base_config())
        .stream("only", probe, |_: Delivery<String>| async {})
        .start()
        .expect("valid worker");
    let health = worker.closed().await;
    let Health::Stopped(reason) = health else {
        panic!("stopped, got {health:?}")
    };
    assert!(reason.contains("only"), "{reason}");
    assert!(worker.health().is_stopped());
    let report = worker.shutdown(LONG_CLAIM).await;
    assert_eq!(report.halted.len(), 1);
}
