//! One stream, two consumer groups (fan-out) declared by its producer, each group's workers
//! running at once: every group handles every message, whatever the other group acks, and a
//! crash in one group delays only that group; the stream empties once both are done.

use std::time::{Duration, Instant};

use leasehold_redis::RedisBackend;
use leasehold_worker::Delivery;

use super::support::*;

/// Messages published before the workers start, and while they run.
const BEFORE: u64 = 20;
const DURING: u64 = 20;

/// `billing` handles every message at once while `emails`' first worker takes one and crashes
/// holding it: `billing`'s acks remove nothing `emails` still needs, a second `emails` worker
/// takes the crashed one's message over after the claim timeout, and both groups handle all 40.
pub async fn every_group_handles_every_message_through_a_crash<T: TestRt>(rt: T) {
    let env = Env::start(rt).await;
    // Declared before the first publish: `emails` keeps every entry, though its first worker
    // connects after `billing` may have acked them all.
    env.declare_groups(&["billing", "emails"]).await;
    for m in 0..BEFORE {
        env.publish(m).await;
    }
    let invocations = Invocations::default();
    let recorder = invocations.clone();
    let billing = builder(env.runtime(), config())
        .stream(
            STREAM,
            env.member("billing", "b").await,
            move |d: Delivery<u64>| {
                recorder.record("billing", &d);
                async {}
            },
        )
        .start()
        .expect("valid worker");
    let isolated = env.rt.isolated();
    let config_doomed = env.member_config("emails", "doomed");
    let doomed_backend = isolated
        .run(async move { RedisBackend::connect(config_doomed).await })
        .await
        .expect("connect the doomed emails worker");
    let recorder = invocations.clone();
    let doomed = builder(isolated.runtime(), config())
        .stream(STREAM, doomed_backend, move |d: Delivery<u64>| {
            recorder.record("doomed", &d);
            // Works until the process dies.
            futures::future::pending::<()>()
        })
        .start()
        .expect("valid worker");
    env.wait_until("the doomed emails worker started a message", || {
        invocations.all().iter().any(|r| r.worker == "doomed")
    })
    .await;
    for m in BEFORE..BEFORE + DURING {
        env.publish(m).await;
    }
    env.wait_until("billing handled every message", || {
        handled(&invocations, &["billing"]) == all()
    })
    .await;
    isolated.kill();
    let recorder = invocations.clone();
    let emails = builder(env.runtime(), config())
        .stream(
            STREAM,
            env.member("emails", "e").await,
            move |d: Delivery<u64>| {
                recorder.record("emails", &d);
                async {}
            },
        )
        .start()
        .expect("valid worker");
    env.wait_until("emails handled every message", || {
        handled(&invocations, &["emails"]) == all()
    })
    .await;
    let taken_over: Vec<InvocationRecord> = invocations
        .all()
        .into_iter()
        .filter(|r| r.worker == "doomed")
        .collect();
    let [first] = taken_over.as_slice() else {
        panic!("the doomed worker started {taken_over:?}")
    };
    assert!(
        invocations
            .of(first.message)
            .iter()
            .any(|r| r.worker == "emails" && r.delivery_count == 2),
        "the crashed worker's message was not taken over: {:?}",
        invocations.of(first.message)
    );
    // Both groups done: nothing is kept.
    let deadline = Instant::now() + PATIENCE;
    while env.xlen(STREAM).await > 0 {
        assert!(
            Instant::now() < deadline,
            "the stream kept {} entries both groups consumed",
            env.xlen(STREAM).await
        );
        env.sleep(STEP).await;
    }
    billing.shutdown(Duration::from_secs(2)).await;
    emails.shutdown(Duration::from_secs(2)).await;
    drop(doomed);
}

fn all() -> std::collections::HashSet<u64> {
    (0..BEFORE + DURING).collect()
}

/// Messages the named workers handled.
fn handled(invocations: &Invocations, workers: &[&str]) -> std::collections::HashSet<u64> {
    invocations
        .all()
        .into_iter()
        .filter(|r| workers.contains(&r.worker))
        .map(|r| r.message)
        .collect()
}
