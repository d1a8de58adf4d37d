//! Dispatch: streams, concurrency, `Pending` re-polls, distinct messages.

use std::collections::HashSet;

use leasehold_worker::{Delivery, Outcome};

use crate::support::{
    base_config, builder, probe, publish, wait_until, Gate, Mark, Recorder, LONG_CLAIM, POLL,
    REPOLL,
};
use crate::support::{memory_stream, settle};
use crate::TestRuntime;

/// A slow handler on one stream does not block a fast stream served by the same worker.
///
/// One worker, two streams, concurrency 2. The slow stream's only message blocks on a gate; the
/// fast stream's ten messages, published once it runs, must all be acked while it still runs.
pub async fn slow_stream_does_not_block_fast_stream<T: TestRuntime>(rt: T) {
    let clock = rt.clock();
    let slow = memory_stream(&clock, LONG_CLAIM);
    let fast = memory_stream(&clock, LONG_CLAIM);
    publish(&slow, "slow");
    let (rec, gate) = (Recorder::new(&rt), Gate::new());
    let slow_handler = {
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
    let fast_handler = {
        let rec = rec.clone();
        move |d: Delivery<String>| {
            let guard = rec.enter(&d);
            async move { guard.returned() }
        }
    };
    let worker = builder(&rt, base_config().concurrency(2))
        .stream("slow", probe(&slow, "w1").0, slow_handler)
        .stream("fast", probe(&fast, "w1").0, fast_handler)
        .start()
        .expect("valid worker");

    wait_until(&rt, "the slow handler to start", || {
        rec.running("slow") == 1
    })
    .await;
    for i in 0..10 {
        publish(&fast, &format!("fast-{i}"));
    }
    wait_until(&rt, "every fast message to be acked", || fast.is_empty()).await;
    assert_eq!(
        rec.running("slow"),
        1,
        "the slow handler is still running while the fast stream drained"
    );
    for i in 0..10 {
        assert_eq!(rec.started(&format!("fast-{i}")), 1, "fast-{i} ran once");
    }

    gate.open();
    wait_until(&rt, "the slow message to be acked", || slow.is_empty()).await;
    let report = worker.shutdown(LONG_CLAIM).await;
    assert_eq!(report.acked, 11);
    assert_eq!(rec.max_running(), 2);
}

/// Concurrency N: exactly N handlers run at once at the peak, never more, and nothing is
/// fetched beyond the free invocation slots (backpressure).
pub async fn concurrency_limit_is_reached_and_never_exceeded<T: TestRuntime>(rt: T) {
    const N: usize = 4;
    const MESSAGES: usize = 3 * N + 1;
    let stream = memory_stream(&rt.clock(), LONG_CLAIM);
    for i in 0..MESSAGES {
        publish(&stream, &format!("m{i}"));
    }
    let (rec, gate) = (Recorder::new(&rt), Gate::new());
    let handler = {
        let (rec, gate, rt) = (rec.clone(), gate.clone(), rt.clone());
        move |d: Delivery<String>| {
            let (rec, gate, rt) = (rec.clone(), gate.clone(), rt.clone());
            async move {
                let guard = rec.enter(&d);
                gate.wait().await;
                // Hold the slot a little, so later rounds overlap too.
                rt.sleep(POLL).await;
                guard.returned();
            }
        }
    };
    let worker = builder(&rt, base_config().concurrency(N))
        .stream("jobs", probe(&stream, "w1").0, handler)
        .start()
        .expect("valid worker");

    wait_until(&rt, "N handlers to run at once", || {
        rec.running_total() == N
    })
    .await;
    settle(&rt).await;
    assert_eq!(rec.running_total(), N, "no handler beyond the limit starts");
    assert_eq!(
        stream.pending_len(),
        N,
        "only as many messages are leased as can run: nothing waits in a buffer"
    );

    gate.open();
    wait_until(&rt, "every message to be acked", || stream.is_empty()).await;
    let report = worker.shutdown(LONG_CLAIM).await;
    assert_eq!(rec.max_running(), N, "the peak is exactly the limit");
    assert_eq!(rec.invocations().len(), MESSAGES, "each message ran once");
    assert_eq!(report.acked, MESSAGES as u64);
}

/// With `prefetch`, that many messages beyond the busy slots are leased and wait in the worker
/// (no fetch round trip when a slot frees), yet no more than N handlers ever run at once and
/// each message runs once.
pub async fn prefetched_messages_wait_within_the_concurrency_limit<T: TestRuntime>(rt: T) {
    const N: usize = 2;
    const PREFETCH: usize = 3;
    const MESSAGES: usize = 3 * (N + PREFETCH);
    let stream = memory_stream(&rt.clock(), LONG_CLAIM);
    for i in 0..MESSAGES {
        publish(&stream, &format!("m{i}"));
    }
    let (rec, gate) = (Recorder::new(&rt), Gate::new());
    let handler = {
        let (rec, gate, rt) = (rec.clone(), gate.clone(), rt.clone());
        move |d: Delivery<String>| {
            let (rec, gate, rt) = (rec.clone(), gate.clone(), rt.clone());
            async move {
                let guard = rec.enter(&d);
                gate.wait().await;
                rt.sleep(POLL).await;
                guard.returned();
            }
        }
    };
    let worker = builder(&rt, base_config().concurrency(N).prefetch(PREFETCH))
        .stream("jobs", probe(&stream, "w1").0, handler)
        .start()
        .expect("valid worker");

    wait_until(&rt, "N handlers to run at once", || {
        rec.running_total() == N
    })
    .await;
    settle(&rt).await;
    assert_eq!(
        rec.running_total(),
        N,
        "prefetched messages do not run early"
    );
    assert_eq!(
        stream.pending_len(),
        N + PREFETCH,
        "the running messages and the prefetched ones are leased"
    );

    gate.open();
    wait_until(&rt, "every message to be acked", || stream.is_empty()).await;
    let report = worker.shutdown(LONG_CLAIM).await;
    assert_eq!(rec.max_running(), N, "the peak is exactly the limit");
    assert_eq!(rec.invocations().len(), MESSAGES, "each message ran once");
    assert_eq!(report.acked, MESSAGES as u64);
}

/// The default concurrency (1) runs handlers strictly one at a time: each ends before the next
/// starts.
pub async fn default_concurrency_runs_one_at_a_time<T: TestRuntime>(rt: T) {
    let stream = memory_stream(&rt.clock(), LONG_CLAIM);
    for i in 0..5 {
        publish(&stream, &format!("m{i}"));
    }
    let rec = Recorder::new(&rt);
    let handler = {
        let (rec, rt) = (rec.clone(), rt.clone());
        move |d: Delivery<String>| {
            let (rec, rt) = (rec.clone(), rt.clone());
            async move {
                let guard = rec.enter(&d);
                rt.sleep(POLL).await;
                guard.returned();
            }
        }
    };
    let worker = builder(&rt, base_config())
        .stream("jobs", probe(&stream, "w1").0, handler)
        .start()
        .expect("valid worker");

    wait_until(&rt, "every message to be acked", || stream.is_empty()).await;
    let report = worker.shutdown(LONG_CLAIM).await;
    assert_eq!(report.acked, 5);
    assert_eq!(rec.max_running(), 1);
    let marks = rec.marks();
    assert_eq!(marks.len(), 10);
    for (i, pair) in marks.chunks(2).enumerate() {
        assert_eq!(
            pair,
            [Mark::Start(i), Mark::End(i)],
            "invocation {i} ends before the next starts: {marks:?}"
        );
    }
}

/// A `Pending` message is re-invoked after `repoll_interval`, strictly serially, keeping its
/// lease (same delivery), and does not hold the invocation slot while it waits: at concurrency 1
/// other messages run between its invocations.
pub async fn pending_message_is_repolled_serially_without_holding_a_slot<T: TestRuntime>(rt: T) {
    const INVOCATIONS: u32 = 4;
    let stream = memory_stream(&rt.clock(), LONG_CLAIM);
    let waiting_id = publish(&stream, "waiting");
    // Enough other work that the slot is busy when a re-poll falls due.
    for i in 0..6 {
        publish(&stream, &format!("other-{i}"));
    }
    let rec = Recorder::new(&rt);
    let handler = {
        let (rec, rt) = (rec.clone(), rt.clone());
        move |d: Delivery<String>| {
            let (rec, rt) = (rec.clone(), rt.clone());
            async move {
                let guard = rec.enter(&d);
                // Each invocation takes a moment, so overlapping ones would be seen.
                let waiting = d.message() == "waiting";
                rt.sleep(if waiting { REPOLL / 5 } else { REPOLL * 3 / 10 })
                    .await;
                let outcome = if waiting && d.attempt() < INVOCATIONS {
                    Outcome::Pending
                } else {
                    Outcome::Done
                };
                guard.returned();
                outcome
            }
        }
    };
    let worker = builder(&rt, base_config())
        .stream("jobs", probe(&stream, "w1").0, handler)
        .start()
        .expect("valid worker");

    wait_until(&rt, "every message to be acked", || stream.is_empty()).await;
    let report = worker.shutdown(LONG_CLAIM).await;
    assert_eq!(report.acked, 7);
    assert_eq!(report.released, 0, "a Pending message keeps its lease");

    let invocations = rec.invocations();
    let waiting: Vec<usize> = (0..invocations.len())
        .filter(|&i| invocations[i].message == "waiting")
        .collect();
    let attempts: Vec<u32> = waiting.iter().map(|&i| invocations[i].attempt).collect();
    assert_eq!(attempts, [1, 2, 3, 4], "re-invoked until Done, counting up");
    assert!(
        waiting.iter().all(|&i| invocations[i].delivery_count == 1),
        "re-invocations reuse the same delivery (never released and refetched)"
    );
    assert_eq!(
        rec.max_same_message(),
        1,
        "never two invocations of it at once"
    );
    assert_eq!(rec.max_running(), 1);

    // Between its first and second invocation, another message ran in the freed slot.
    let marks = rec.marks();
    let at = |mark: Mark| marks.iter().position(|m| *m == mark).expect("recorded");
    let (first_end, second_start) = (at(Mark::End(waiting[0])), at(Mark::Start(waiting[1])));
    let between = marks[first_end..second_start]
        .iter()
        .any(|m| matches!(m, Mark::Start(i) if invocations[*i].message.starts_with("other-")));
    assert!(
        between,
        "another message ran while {waiting_id} waited for its re-poll: {marks:?}"
    );

    if rt.is_virtual() {
        for pair in waiting.windows(2) {
            let (ended, _) = invocations[pair[0]].ended.expect("ended");
            let gap = invocations[pair[1]].started - ended;
            assert!(
                gap >= REPOLL && gap < REPOLL * 2,
                "re-invoked {gap:?} after the previous invocation; repoll_interval is {REPOLL:?}"
            );
        }
    }
}

/// A `Pending` message on one stream does not block another stream: at concurrency 1 the
/// other stream's messages run while it waits for its re-polls.
pub async fn pending_on_one_stream_does_not_block_another<T: TestRuntime>(rt: T) {
    const INVOCATIONS: u32 = 3;
    let clock = rt.clock();
    let (slow, fast) = (
        memory_stream(&clock, LONG_CLAIM),
        memory_stream(&clock, LONG_CLAIM),
    );
    publish(&slow, "waiting");
    let rec = Recorder::new(&rt);
    let handler = {
        let (rec, rt) = (rec.clone(), rt.clone());
        move |d: Delivery<String>| {
            let (rec, rt) = (rec.clone(), rt.clone());
            async move {
                let guard = rec.enter(&d);
                let waiting = d.message() == "waiting";
                rt.sleep(REPOLL * 3 / 10).await;
                guard.returned();
                if waiting && d.attempt() < INVOCATIONS {
                    Outcome::Pending
                } else {
                    Outcome::Done
                }
            }
        }
    };
    let worker = builder(&rt, base_config())
        .stream("waits", probe(&slow, "w1").0, handler.clone())
        .stream("flows", probe(&fast, "w1").0, handler)
        .start()
        .expect("valid worker");

    wait_until(&rt, "the first invocation to return Pending", || {
        rec.invocations_of("waiting")
            .first()
            .is_some_and(|invocation| invocation.ended.is_some())
    })
    .await;
    for i in 0..4 {
        publish(&fast, &format!("flow-{i}"));
    }
    wait_until(&rt, "both streams to drain", || {
        slow.is_empty() && fast.is_empty()
    })
    .await;
    let report = worker.shutdown(LONG_CLAIM).await;
    assert_eq!(report.acked, 5);
    assert_eq!(rec.max_running(), 1);
    let (invocations, marks) = (rec.invocations(), rec.marks());
    let waiting: Vec<usize> = (0..invocations.len())
        .filter(|&i| invocations[i].message == "waiting")
        .collect();
    assert_eq!(waiting.len(), INVOCATIONS as usize);
    let last_start = marks
        .iter()
        .position(|m| *m == Mark::Start(*waiting.last().expect("ran")))
        .expect("recorded");
    let flowed = marks[..last_start]
        .iter()
        .filter(|m| matches!(m, Mark::End(i) if invocations[*i].message.starts_with("flow-")))
        .count();
    assert!(
        flowed > 0,
        "the other stream's messages ran while the Pending one waited: {marks:?}"
    );
}

/// Two messages with identical payloads are two messages: both are processed, once each.
pub async fn identical_payloads_are_distinct_messages<T: TestRuntime>(rt: T) {
    let stream = memory_stream(&rt.clock(), LONG_CLAIM);
    let ids: HashSet<_> = (0..3).map(|_| publish(&stream, "same")).collect();
    assert_eq!(ids.len(), 3, "the stream gives each publish its own id");
    let rec = Recorder::new(&rt);
    let handler = {
        let rec = rec.clone();
        move |d: Delivery<String>| {
            let guard = rec.enter(&d);
            async move { guard.returned() }
        }
    };
    let worker = builder(&rt, base_config().concurrency(2))
        .stream("jobs", probe(&stream, "w1").0, handler)
        .start()
        .expect("valid worker");

    wait_until(&rt, "every message to be acked", || stream.is_empty()).await;
    let report = worker.shutdown(LONG_CLAIM).await;
    let invocations = rec.invocations_of("same");
    assert_eq!(invocations.len(), 3, "each copy ran once: {invocations:?}");
    let ran: HashSet<_> = invocations
        .into_iter()
        .map(|invocation| invocation.id)
        .collect();
    assert_eq!(ran, ids);
    assert_eq!(report.acked, 3);
}
