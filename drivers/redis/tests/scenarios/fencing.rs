//! After a takeover the old owner is fenced off: its renews are answered `Lost` (it never steals
//! the entry back) and its handler is cancelled, and an ack that races the takeover is refused
//! and leaves the new owner's pending entry intact. Otherwise a worker that was merely slow
//! could take back, or delete, a message that another consumer now holds.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_core::{RenewResult, SettleResult};
use leasehold_redis::RedisBackend;
use leasehold_worker::{CancelReason, Delivery, Outcome};

use super::support::{
    builder, command, config, sleep, spy, Env, Invocations, Reasons, TestRt, CLAIM, GROUP,
    HEARTBEAT, STREAM,
};

/// A raw `XCLAIM` by a peer takes a message over while the worker's handler runs. The worker's
/// next renew is answered `Lost` (it does not steal the entry back), the handler's cancellation
/// signal fires with `LeaseLost`, its result is discarded, and the entry stays the peer's.
pub async fn takeover_is_not_stolen_back_and_cancels_the_handler<T: TestRt>(rt: T) {
    let env = Env::start(rt).await;
    let id = env.publish(1).await;
    let (backend, spy) = spy(env.backend("a").await);
    let (invocations, reasons) = (Invocations::default(), Reasons::default());
    let (recorder, observed) = (invocations.clone(), reasons.clone());
    let worker = builder(env.runtime(), config())
        .stream(STREAM, backend, move |d: Delivery<u64>| {
            recorder.record("a", &d);
            let observed = observed.clone();
            async move {
                observed.push(d.cancelled().await);
                // Whatever it returns now must be discarded, never acked.
                Outcome::Done
            }
        })
        .start()
        .expect("valid worker");
    env.wait_until("a started the message", || invocations.len() == 1)
        .await;
    env.xclaim("peer", &id).await;

    // The peer is alive: it renews the entry (XCLAIM … JUSTID keeps the count), so nobody may
    // reclaim it. Over a claim timeout and more of a's heartbeats, the entry stays the peer's.
    let until = Instant::now() + CLAIM + HEARTBEAT * 2;
    while Instant::now() < until {
        env.sleep(Duration::from_millis(150)).await;
        let pending = env.pending().await;
        assert_eq!(pending.len(), 1, "{pending:?}");
        assert_eq!(
            (
                pending[0].id.as_str(),
                pending[0].owner.as_str(),
                pending[0].count
            ),
            (id.as_str(), "peer", 2),
            "the entry stays the peer's"
        );
        env.cmd(&["XCLAIM", STREAM, GROUP, "peer", "0", &id, "JUSTID"])
            .await;
    }
    let stats = env
        .wait_stats(&worker, "a learns of the loss", |s| {
            s.lost == 1 && s.cancelled == 1
        })
        .await;
    env.wait_until("a's handler sees the loss", || !reasons.all().is_empty())
        .await;
    assert_eq!(
        reasons.all(),
        [CancelReason::LeaseLost],
        "a's handler saw the loss"
    );
    let renews = spy.renews();
    let lost_at = renews
        .iter()
        .position(|(rid, result)| *rid == id && *result == RenewResult::Lost)
        .unwrap_or_else(|| panic!("no renew of {id} was answered Lost: {renews:?}"));
    assert!(
        renews[lost_at + 1..].iter().all(|(rid, _)| *rid != id),
        "a renewed {id} after it was lost: {renews:?}"
    );
    assert!(spy.acks().is_empty(), "a acked: {:?}", spy.acks());
    assert_eq!(env.xlen(STREAM).await, 1);
    assert_eq!(
        (
            stats.invocations,
            stats.lost,
            stats.cancelled,
            stats.acked,
            stats.released
        ),
        (1, 1, 1, 0, 0),
        "{stats:?}"
    );
    let report = worker.shutdown(Duration::from_secs(2)).await;
    assert_eq!((report.acked, report.released), (0, 0), "{report:?}");
    let pending = env.pending().await;
    assert_eq!((pending[0].owner.as_str(), pending[0].count), ("peer", 2));
}

/// A peer takes a message over right after one of the worker's heartbeats, and the handler
/// finishes at once — before the next renew could tell the worker. The worker's late ack is
/// refused (`Lost`) and the peer's pending entry stays intact; a worker under the peer's name
/// later completes the message. Worker `a` has a long claim timeout, so its heartbeats are 2 s
/// apart: the takeover and the ack fit between two of them even on a stalling machine.
pub async fn late_ack_after_takeover_leaves_the_new_owner_entry<T: TestRt>(rt: T) {
    const A_CLAIM: Duration = Duration::from_secs(6);
    let env = Env::start(rt).await;
    let id = env.publish(1).await;
    let a = RedisBackend::connect(env.config("a").claim_timeout(A_CLAIM))
        .await
        .expect("connecting consumer a");
    let (backend, spy) = spy(a);
    let invocations = Invocations::default();
    let cancelled_before_done = Arc::new(AtomicBool::new(false));
    let (recorder, runtime, server, rt, log, flag) = (
        invocations.clone(),
        env.runtime(),
        env.server.clone(),
        env.rt.clone(),
        spy.clone(),
        cancelled_before_done.clone(),
    );
    let a_config = config()
        .claim_timeout(A_CLAIM)
        .heartbeat_interval(Duration::from_secs(2));
    let worker = builder(env.runtime(), a_config)
        .stream(STREAM, backend, move |d: Delivery<u64>| {
            recorder.record("a", &d);
            let (runtime, server, rt, log, flag) = (
                runtime.clone(),
                server.clone(),
                rt.clone(),
                log.clone(),
                flag.clone(),
            );
            async move {
                // Right after a heartbeat the next one is 2 s away: plenty of time for the
                // takeover and the ack to happen in between.
                let calls = log.renew_calls();
                while log.renew_calls() == calls {
                    sleep(&runtime, Duration::from_millis(2)).await;
                }
                let args: Vec<String> = [
                    "XCLAIM",
                    STREAM,
                    GROUP,
                    "peer",
                    "0",
                    d.message_id().as_str(),
                ]
                .iter()
                .map(|a| a.to_string())
                .collect();
                rt.unblock(move || command(&server, &args)).await;
                flag.store(d.cancellation().is_cancelled(), Ordering::SeqCst);
                Outcome::Done
            }
        })
        .start()
        .expect("valid worker");
    env.wait_until("a's ack is answered", || !spy.acks().is_empty())
        .await;
    assert!(!cancelled_before_done.load(Ordering::SeqCst));
    assert_eq!(spy.acks(), [(id.clone(), SettleResult::Lost)]);
    let pending = env.pending().await;
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(
        (
            pending[0].id.as_str(),
            pending[0].owner.as_str(),
            pending[0].count
        ),
        (id.as_str(), "peer", 2),
        "the late ack left the peer's entry alone"
    );
    assert_eq!(env.xlen(STREAM).await, 1, "the entry was not deleted");
    let report = worker.shutdown(Duration::from_secs(2)).await;
    assert_eq!((report.acked, report.lost), (0, 1), "{report:?}");

    // Not lost: a worker under the peer's name finishes it once the takeover's lease lapses.
    let recorder = invocations.clone();
    let peer = builder(env.runtime(), config())
        .stream(
            STREAM,
            env.backend("peer").await,
            move |d: Delivery<u64>| {
                recorder.record("peer", &d);
                async {}
            },
        )
        .start()
        .expect("valid worker");
    env.wait_drained("the peer completes the message").await;
    let all = invocations.all();
    assert_eq!(all.len(), 2, "{all:?}");
    assert_eq!((all[1].worker, all[1].delivery_count), ("peer", 3));
    peer.shutdown(Duration::from_secs(2)).await;
}
