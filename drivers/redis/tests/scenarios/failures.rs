//! Handlers that do not finish the message: one that asks for a retry after a delay, one that
//! runs past `max_processing_time`, one that always fails. The message comes back as its next
//! delivery (not before the delay, to any consumer; after the overlong invocation is cancelled),
//! and one that keeps failing is dead-lettered with its reason while other messages flow.

use std::time::Duration;

use leasehold_worker::{CancelReason, Delivery, Outcome, RetryPolicy};

use super::support::{
    builder, config, settled_stats, Env, Invocations, Reasons, TestRt, CLAIM, DEAD, STREAM,
};

// ----- release with delay ------------------------------------------------------------------------

/// A handler asks for a retry after `d`: the worker releases the entry with Redis's idle time set
/// to `claim − d` (so nobody may take it before `d` has passed), and another consumer eventually
/// retakes it, as its second delivery. The delay is most of the claim timeout, and the first
/// worker stops at once: it has 900 ms to do so before it could retake the entry itself.
pub async fn retry_with_delay_is_retaken_by_another_consumer<T: TestRt>(rt: T) {
    let delay = Duration::from_millis(900);
    let env = Env::start(rt).await;
    let id = env.publish(1).await;
    let invocations = Invocations::default();
    let recorder = invocations.clone();
    let first = builder(env.runtime(), config())
        .stream(STREAM, env.backend("a").await, move |d: Delivery<u64>| {
            recorder.record("a", &d);
            async move { Outcome::Retry { delay: Some(delay) } }
        })
        .start()
        .expect("valid worker");
    env.wait_stats(&first, "a released the message", |s| s.released == 1)
        .await;
    let report = first.shutdown(Duration::from_secs(2)).await;
    assert_eq!((report.released, report.acked), (1, 0), "{report:?}");
    let pending = env.pending().await;
    assert_eq!(pending.len(), 1, "{pending:?}");
    let entry = &pending[0];
    assert_eq!(
        (entry.id.as_str(), entry.owner.as_str(), entry.count),
        (id.as_str(), "a", 1)
    );
    let floor = (CLAIM - delay).as_millis() as i64;
    assert!(
        (floor..CLAIM.as_millis() as i64).contains(&entry.idle_ms),
        "idle should be about claim − delay = {floor} ms (and not yet claimable): {entry:?}"
    );

    let recorder = invocations.clone();
    let second = builder(env.runtime(), config())
        .stream(STREAM, env.backend("b").await, move |d: Delivery<u64>| {
            recorder.record("b", &d);
            async {}
        })
        .start()
        .expect("valid worker");
    env.wait_drained("b completes the message").await;
    let all = invocations.all();
    assert_eq!(
        all.iter()
            .map(|r| (r.worker, r.id.as_str(), r.delivery_count))
            .collect::<Vec<_>>(),
        [("a", id.as_str(), 1), ("b", id.as_str(), 2)]
    );
    second.shutdown(Duration::from_secs(2)).await;
}

// ----- max processing time -----------------------------------------------------------------------

/// An invocation that runs past `max_processing_time` is cancelled (its handler sees
/// `MaxProcessingTime`), its late result is discarded, and the message is retried as its
/// second delivery.
pub async fn max_processing_time_cancels_and_retries<T: TestRt>(rt: T) {
    let env = Env::start(rt).await;
    let id = env.publish(1).await;
    let (invocations, reasons) = (Invocations::default(), Reasons::default());
    let (recorder, observed) = (invocations.clone(), reasons.clone());
    let config = config().max_processing_time(Duration::from_millis(400));
    let worker = builder(env.runtime(), config)
        .stream(STREAM, env.backend("a").await, move |d: Delivery<u64>| {
            recorder.record("a", &d);
            let observed = observed.clone();
            async move {
                if d.delivery_count() == 1 {
                    observed.push(d.cancelled().await);
                }
                Outcome::Done
            }
        })
        .start()
        .expect("valid worker");
    env.wait_drained("the retry completes the message").await;
    assert_eq!(reasons.all(), [CancelReason::MaxProcessingTime]);
    assert_eq!(
        invocations
            .all()
            .iter()
            .map(|r| (r.id.as_str(), r.delivery_count))
            .collect::<Vec<_>>(),
        [(id.as_str(), 1), (id.as_str(), 2)]
    );
    let stats = worker.stats().await.expect("running");
    assert_eq!(
        (stats.invocations, stats.cancelled, stats.failures),
        (2, 1, 1),
        "{stats:?}"
    );
    // Redis deletes the entry before it answers the ack, so the worker may not have read the
    // answer yet: shutdown waits for it.
    let report = worker.shutdown(Duration::from_secs(2)).await;
    assert_eq!(report.acked, 1, "{report:?}");
}

// ----- poison messages ---------------------------------------------------------------------------

/// A message whose handler always fails is retried with backoff and dead-lettered to
/// `{jobs}:dead` on its `max_deliveries`-th failure, with the reason and delivery count; other
/// messages published meanwhile are processed while it backs off (at concurrency 1).
pub async fn poison_message_is_dead_lettered_while_others_flow<T: TestRt>(rt: T) {
    let env = Env::start(rt).await;
    let poison = env.publish(0).await;
    let invocations = Invocations::default();
    let recorder = invocations.clone();
    let config = config().max_deliveries(3).retry(RetryPolicy {
        initial: Duration::from_millis(300),
        multiplier: 2.0,
        max: Duration::from_millis(900),
        jitter: 0.0,
    });
    let worker = builder(env.runtime(), config)
        .stream(STREAM, env.backend("a").await, move |d: Delivery<u64>| {
            recorder.record("a", &d);
            let message = *d.message();
            async move {
                if message == 0 {
                    Err("poison pill")
                } else {
                    Ok(())
                }
            }
        })
        .start()
        .expect("valid worker");
    env.wait_until("the poison failed once", || invocations.len() == 1)
        .await;
    for message in 1..=10 {
        env.publish(message).await;
    }
    env.wait_until("the poison is dead-lettered", || {
        invocations.of(0).len() == 3
    })
    .await;
    env.wait_drained("everything is acked or dead-lettered")
        .await;

    let all = invocations.all();
    let poison_counts: Vec<_> = invocations.of(0).iter().map(|r| r.delivery_count).collect();
    assert_eq!(
        poison_counts,
        [1, 2, 3],
        "backoff, then dead letter: {all:?}"
    );
    let last_poison = all.iter().rposition(|r| r.message == 0).unwrap();
    for message in 1..=10 {
        let of = invocations.of(message);
        assert_eq!(of.len(), 1, "message {message}: {of:?}");
        assert_eq!(of[0].delivery_count, 1);
    }
    assert!(
        all[..last_poison].iter().filter(|r| r.message != 0).count() == 10,
        "the other messages flowed while the poison backed off: {all:?}"
    );
    let dead = env.range(DEAD).await;
    assert_eq!(dead.len(), 1, "{dead:?}");
    let fields = &dead[0].1;
    assert_eq!(fields["id"], poison);
    assert_eq!(fields["deliveries"], "3");
    assert_eq!(fields["data"], "0");
    assert!(
        fields["reason"].contains("3 deliveries") && fields["reason"].contains("poison pill"),
        "reason: {:?}",
        fields["reason"]
    );
    let stats = settled_stats(&env.runtime(), &worker, |s| s.acked >= 10).await;
    assert_eq!(
        (stats.acked, stats.dead_lettered, stats.failures),
        (10, 1, 3),
        "{stats:?}"
    );
    worker.shutdown(Duration::from_secs(2)).await;
}
