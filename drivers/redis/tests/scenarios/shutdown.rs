//! What a graceful shutdown hands back: messages waiting for a re-poll are released at once, so
//! a peer need not wait out a claim timeout to get them, while a running handler finishes within
//! the grace and is acked.

use std::time::Duration;

use leasehold_worker::{Delivery, Outcome};

use super::support::{
    array, builder, config, entries, sleep, Env, Invocations, TestRt, CLAIM, GROUP, STREAM,
};

/// At shutdown, messages waiting for a re-poll (`Pending`) are released with no delay: a peer's
/// raw `XAUTOCLAIM` with min-idle = claim timeout gets them right away. A running handler
/// finishes within the grace and is acked.
pub async fn shutdown_hands_waiting_messages_back_at_once<T: TestRt>(rt: T) {
    let env = Env::start(rt).await;
    let mut waiting = Vec::new();
    for message in 1..=3 {
        waiting.push(env.publish(message).await);
    }
    env.publish(4).await;
    let invocations = Invocations::default();
    let (recorder, runtime) = (invocations.clone(), env.runtime());
    let config = config()
        .concurrency(4)
        .repoll_interval(Duration::from_secs(30));
    let worker = builder(env.runtime(), config)
        .stream(STREAM, env.backend("a").await, move |d: Delivery<u64>| {
            recorder.record("a", &d);
            let running = *d.message() == 4;
            let pause = sleep(&runtime, Duration::from_millis(300));
            async move {
                if running {
                    pause.await;
                    Outcome::Done
                } else {
                    Outcome::Pending
                }
            }
        })
        .start()
        .expect("valid worker");
    env.wait_stats(&worker, "three messages wait for a re-poll", |s| {
        s.pending == 3 && s.invocations == 4
    })
    .await;
    let report = worker.shutdown(Duration::from_secs(2)).await;
    assert_eq!((report.released, report.acked), (3, 1), "{report:?}");

    let claim = CLAIM.as_millis().to_string();
    let reply = env
        .cmd(&[
            "XAUTOCLAIM",
            STREAM,
            GROUP,
            "peer",
            &claim,
            "0-0",
            "COUNT",
            "10",
        ])
        .await;
    let mut claimed: Vec<String> = entries(&array(&reply)[1])
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    claimed.sort();
    waiting.sort();
    assert_eq!(
        claimed, waiting,
        "the peer got every waiting message at once"
    );
    let pending = env.pending().await;
    assert!(
        pending.iter().all(|e| e.owner == "peer" && e.count == 2),
        "{pending:?}"
    );
    assert_eq!(pending.len(), 3, "the finished one was acked");
    assert_eq!(invocations.len(), 4);
}
