//! The Redis backend's lease semantics against a real, throwaway `redis-server`.

use std::time::Duration;

use bytes::Bytes;
use leasehold_core::{
    Backend, DeadLetterReason, Fence, Fetched, LeaseRef, RenewResult, SettleResult,
};
use leasehold_redis::{RedisBackend, RedisConfig, Retention};
use leasehold_redis_harness::RedisServer;

/// Short, so takeovers happen within a test; renews in the tests come every ~third of it, so a
/// stall would have to last a whole claim timeout to disturb them.
const CLAIM: Duration = Duration::from_secs(1);

fn server() -> RedisServer {
    RedisServer::start().unwrap_or_else(|e| panic!("these tests need redis-server: {e}"))
}

async fn consumer(server: &RedisServer, name: &str) -> RedisBackend {
    consumer_keeping(server, name, Retention::default()).await
}

async fn consumer_keeping(server: &RedisServer, name: &str, retention: Retention) -> RedisBackend {
    let config = RedisConfig::new(server.url(), "jobs", "workers")
        .consumer(name)
        .claim_timeout(CLAIM)
        .retention(retention);
    RedisBackend::connect(config).await.expect("connect")
}

fn lease_ref(message: &Fetched<Bytes>) -> LeaseRef {
    LeaseRef::from(message)
}

async fn redis(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// (owner, delivery count) of an entry in the group's pending list.
async fn pending_of(server: &RedisServer, id: &str) -> Option<(String, u64)> {
    let rows: Vec<(String, String, u64, u64)> = redis::cmd("XPENDING")
        .arg("jobs")
        .arg("workers")
        .arg(id)
        .arg(id)
        .arg(1)
        .query_async(&mut redis(server).await)
        .await
        .unwrap();
    rows.into_iter()
        .next()
        .map(|(_, owner, _, count)| (owner, count))
}

#[tokio::test]
async fn publish_fetch_renew_ack_round_trip() {
    let server = server();
    let a = consumer(&server, "a").await;
    let id = a.publish(Bytes::from_static(b"hello")).await.unwrap();
    a.publish(Bytes::from_static(b"hello")).await.unwrap();
    let batch = a.fetch(10, Duration::ZERO).await.unwrap();
    assert_eq!(batch.len(), 2, "equal payloads are two messages");
    assert_eq!((&batch[0].id, batch[0].delivery_count), (&id, 1));
    assert_eq!(batch[0].payload, Bytes::from_static(b"hello"));
    let leases: Vec<_> = batch.iter().map(lease_ref).collect();
    assert_eq!(a.renew(&leases).await.unwrap(), [RenewResult::Kept; 2]);
    assert_eq!(a.pending().await.unwrap(), 2);
    assert_eq!(a.ack(&leases).await.unwrap(), [SettleResult::Ok; 2]);
    assert_eq!(
        a.stream_len().await.unwrap(),
        0,
        "acked entries are deleted"
    );
    assert_eq!(a.pending().await.unwrap(), 0);
}

#[tokio::test]
async fn renew_keeps_a_lease_past_the_claim_timeout_and_reclaim_bumps_the_fence() {
    let server = server();
    let (a, b) = (consumer(&server, "a").await, consumer(&server, "b").await);
    a.publish(Bytes::from_static(b"x")).await.unwrap();
    let first = a.fetch(1, Duration::ZERO).await.unwrap().messages.remove(0);
    for _ in 0..5 {
        tokio::time::sleep(CLAIM / 3).await;
        assert_eq!(
            a.renew(&[lease_ref(&first)]).await.unwrap(),
            [RenewResult::Kept]
        );
        assert!(
            b.fetch(1, Duration::ZERO).await.unwrap().is_empty(),
            "live lease taken"
        );
    }
    tokio::time::sleep(CLAIM + Duration::from_millis(50)).await;
    let mut taken = Vec::new();
    for _ in 0..2 {
        // max 1 alternates between reclaiming and new entries.
        taken.extend(b.fetch(1, Duration::ZERO).await.unwrap());
    }
    assert_eq!(taken.len(), 1);
    assert_eq!(taken[0].id, first.id);
    assert_eq!((taken[0].delivery_count, taken[0].fence.0), (2, 2));
    assert_eq!(
        pending_of(&server, first.id.as_str()).await,
        Some(("b".into(), 2))
    );
}

#[tokio::test]
async fn no_steal_back_and_no_stale_ack_after_a_takeover() {
    let server = server();
    let (a, b) = (consumer(&server, "a").await, consumer(&server, "b").await);
    a.publish(Bytes::from_static(b"x")).await.unwrap();
    let first = a.fetch(1, Duration::ZERO).await.unwrap().messages.remove(0);
    // A raw XCLAIM by "b" (a renew with no owner check, the classic steal-back) takes it over.
    let _: redis::Value = redis::cmd("XCLAIM")
        .arg("jobs")
        .arg("workers")
        .arg("b")
        .arg(0)
        .arg(first.id.as_str())
        .query_async(&mut redis(&server).await)
        .await
        .unwrap();
    assert_eq!(
        pending_of(&server, first.id.as_str()).await,
        Some(("b".into(), 2))
    );
    // a's late heartbeat and late ack are refused and change nothing.
    assert_eq!(
        a.renew(&[lease_ref(&first)]).await.unwrap(),
        [RenewResult::Lost]
    );
    assert_eq!(
        a.ack(&[lease_ref(&first)]).await.unwrap(),
        [SettleResult::Lost]
    );
    assert_eq!(
        a.release(&lease_ref(&first), Duration::ZERO).await.unwrap(),
        SettleResult::Lost
    );
    let reason = DeadLetterReason::Rejected("x".into());
    assert_eq!(
        a.dead_letter(&lease_ref(&first), &reason).await.unwrap(),
        SettleResult::Lost
    );
    assert_eq!(
        pending_of(&server, first.id.as_str()).await,
        Some(("b".into(), 2))
    );
    assert_eq!(b.stream_len().await.unwrap(), 1);
    // The same consumer with a stale fence is refused too.
    let stale = LeaseRef::new(first.id.clone(), first.fence);
    assert_eq!(b.renew(&[stale]).await.unwrap(), [RenewResult::Lost]);
}

#[tokio::test]
async fn mixed_batches_answer_per_lease() {
    let server = server();
    let (a, b) = (consumer(&server, "a").await, consumer(&server, "b").await);
    for _ in 0..3 {
        a.publish(Bytes::from_static(b"x")).await.unwrap();
    }
    let mine = a.fetch(2, Duration::ZERO).await.unwrap();
    let theirs = b.fetch(1, Duration::ZERO).await.unwrap();
    let batch = [
        lease_ref(&mine[0]),
        lease_ref(&theirs[0]),
        lease_ref(&mine[1]),
    ];
    assert_eq!(
        a.renew(&batch).await.unwrap(),
        [RenewResult::Kept, RenewResult::Lost, RenewResult::Kept]
    );
    assert_eq!(
        a.ack(&batch).await.unwrap(),
        [SettleResult::Ok, SettleResult::Lost, SettleResult::Ok]
    );
    assert_eq!(b.pending().await.unwrap(), 1);
}

/// A batch that names only some of the entries this consumer holds inside its id span (the
/// script walks the consumer's pending entries and the batch side by side, skipping the ones
/// not named), and one id named twice with two fences: each lease is answered on its own, and
/// only the named entries are renewed or acked.
#[tokio::test]
async fn a_batch_skips_held_entries_it_does_not_name() {
    let server = server();
    let a = consumer(&server, "a").await;
    for _ in 0..6 {
        a.publish(Bytes::from_static(b"x")).await.unwrap();
    }
    let m = a.fetch(6, Duration::ZERO).await.unwrap();
    let stale = LeaseRef::new(m[3].id.clone(), Fence(2));
    let batch = [lease_ref(&m[4]), lease_ref(&m[1]), stale, lease_ref(&m[3])];
    use RenewResult::{Kept, Lost};
    assert_eq!(a.renew(&batch).await.unwrap(), [Kept, Kept, Lost, Kept]);
    use SettleResult::{Lost as Gone, Ok as Acked};
    assert_eq!(a.ack(&batch).await.unwrap(), [Acked, Acked, Gone, Acked]);
    for (i, message) in m.iter().enumerate() {
        let expected = [0, 2, 5].contains(&i).then(|| ("a".to_string(), 1));
        assert_eq!(
            pending_of(&server, message.id.as_str()).await,
            expected,
            "m[{i}]"
        );
    }
    // The skipped ones are still held with their fence.
    assert_eq!(
        a.ack(&[lease_ref(&m[5]), lease_ref(&m[0]), lease_ref(&m[2])])
            .await
            .unwrap(),
        [Acked; 3]
    );
    assert!(stream_ids(&server).await.is_empty());
}

/// One batch mixing every case, out of order, with fences that differ within it: leases owned
/// with their fence (fence 1, and fence 2 after this consumer's own reclaim), the same entry
/// with its old fence, an entry another consumer holds, one never delivered and an id that is
/// no stream id. Renew and ack answer each lease on its own, act on exactly the held ones, and
/// leave the others as they were.
#[tokio::test]
async fn a_batch_of_owned_foreign_stale_and_unknown_leases_is_answered_per_lease() {
    let server = server();
    let (a, b) = (consumer(&server, "a").await, consumer(&server, "b").await);
    for _ in 0..5 {
        a.publish(Bytes::from_static(b"x")).await.unwrap();
    }
    let m = a.fetch(3, Duration::ZERO).await.unwrap();
    let theirs = b.fetch(1, Duration::ZERO).await.unwrap().messages.remove(0);
    let undelivered = stream_ids(&server).await[4].clone();
    // a takes m[1] again (as its own reclaim would): its delivery count, the fence, goes to 2.
    let _: redis::Value = redis::cmd("XCLAIM")
        .arg("jobs")
        .arg("workers")
        .arg("a")
        .arg(0)
        .arg(m[1].id.as_str())
        .query_async(&mut redis(&server).await)
        .await
        .unwrap();
    assert_eq!(
        pending_of(&server, m[1].id.as_str()).await,
        Some(("a".into(), 2))
    );
    let reclaimed = LeaseRef::new(m[1].id.clone(), Fence(2));
    let batch = [
        lease_ref(&m[2]),
        lease_ref(&theirs),
        lease_ref(&m[1]), // the fence before the reclaim: stale
        LeaseRef::new(undelivered.clone().into(), Fence(1)),
        lease_ref(&m[0]),
        LeaseRef::new("not-an-id".into(), Fence(1)),
        reclaimed,
    ];
    use RenewResult::{Kept, Lost};
    assert_eq!(
        a.renew(&batch).await.unwrap(),
        [Kept, Lost, Lost, Lost, Kept, Lost, Kept]
    );
    assert_eq!(
        pending_of(&server, theirs.id.as_str()).await,
        Some(("b".into(), 1))
    );
    assert_eq!(
        pending_of(&server, m[1].id.as_str()).await,
        Some(("a".into(), 2))
    );
    assert_eq!(pending_of(&server, &undelivered).await, None);
    // b's own lease, in a batch of a's, is lost to b as a's are.
    assert_eq!(
        b.renew(&[lease_ref(&m[0]), lease_ref(&theirs)])
            .await
            .unwrap(),
        [Lost, Kept]
    );
    use SettleResult::{Lost as Gone, Ok as Acked};
    assert_eq!(
        a.ack(&batch).await.unwrap(),
        [Acked, Gone, Gone, Gone, Acked, Gone, Acked]
    );
    for message in &m {
        assert_eq!(pending_of(&server, message.id.as_str()).await, None);
    }
    assert_eq!(
        pending_of(&server, theirs.id.as_str()).await,
        Some(("b".into(), 1))
    );
    assert_eq!(
        stream_ids(&server).await,
        [theirs.id.to_string(), undelivered]
    );
    // Acked once, gone: the same batch again has nothing left to ack.
    assert_eq!(a.ack(&batch).await.unwrap(), [Gone; 7]);
    assert_eq!(
        b.ack(&[lease_ref(&theirs)]).await.unwrap(),
        [SettleResult::Ok]
    );
}

/// Ids of the entries left in the stream, in order.
async fn stream_ids(server: &RedisServer) -> Vec<String> {
    type Entry = (String, Vec<(String, Vec<u8>)>);
    let entries: Vec<Entry> = redis::cmd("XRANGE")
        .arg("jobs")
        .arg("-")
        .arg("+")
        .query_async(&mut redis(server).await)
        .await
        .unwrap();
    entries.into_iter().map(|(id, _)| id).collect()
}

/// Deleting on ack, an ack deletes exactly the acked entries: whether they are the oldest
/// (removed by one trim) or sit between entries still pending, sent in any order; never an
/// entry whose fence is stale, that another consumer holds, or that was never delivered.
#[tokio::test]
async fn acks_delete_exactly_the_acked_entries() {
    let server = server();
    let (a, b) = (
        consumer_keeping(&server, "a", Retention::DeleteOnAck).await,
        consumer_keeping(&server, "b", Retention::DeleteOnAck).await,
    );
    for _ in 0..8 {
        a.publish(Bytes::from_static(b"x")).await.unwrap();
    }
    let m = a.fetch(6, Duration::ZERO).await.unwrap();
    let theirs = b.fetch(1, Duration::ZERO).await.unwrap();
    let undelivered = stream_ids(&server).await[7].clone();
    let ids = |picks: &[usize]| {
        picks
            .iter()
            .map(|&i| m[i].id.to_string())
            .collect::<Vec<_>>()
    };
    // Entry 0 stays pending: only 1 and 3 go; the order of the batch does not matter.
    let stale = LeaseRef::new(m[2].id.clone(), Fence(m[2].fence.0 + 1));
    assert_eq!(
        a.ack(&[lease_ref(&m[3]), stale, lease_ref(&m[1])])
            .await
            .unwrap(),
        [SettleResult::Ok, SettleResult::Lost, SettleResult::Ok]
    );
    let mut left = ids(&[0, 2, 4, 5]);
    left.extend([theirs[0].id.to_string(), undelivered.clone()]);
    assert_eq!(stream_ids(&server).await, left);
    // 0 and 2 are the oldest, 5 is past the pending 4.
    assert_eq!(
        a.ack(&[
            lease_ref(&m[5]),
            lease_ref(&m[2]),
            lease_ref(&m[0]),
            lease_ref(&theirs[0])
        ])
        .await
        .unwrap(),
        [
            SettleResult::Ok,
            SettleResult::Ok,
            SettleResult::Ok,
            SettleResult::Lost
        ]
    );
    assert_eq!(
        stream_ids(&server).await,
        [
            m[4].id.to_string(),
            theirs[0].id.to_string(),
            undelivered.clone()
        ]
    );
    assert_eq!(b.pending().await.unwrap(), 2);
    // Nothing pending afterwards: what was delivered goes, the undelivered entry stays.
    assert_eq!(
        a.ack(&[lease_ref(&m[4])]).await.unwrap(),
        [SettleResult::Ok]
    );
    assert_eq!(
        b.ack(&[lease_ref(&theirs[0])]).await.unwrap(),
        [SettleResult::Ok]
    );
    assert_eq!(stream_ids(&server).await, [undelivered]);
    let last = a.fetch(10, Duration::ZERO).await.unwrap();
    assert_eq!(
        a.ack(&[lease_ref(&last[0])]).await.unwrap(),
        [SettleResult::Ok]
    );
    assert_eq!(a.stream_len().await.unwrap(), 0);
    assert_eq!(a.pending().await.unwrap(), 0);
}

/// Idle time (ms) Redis records for an entry of the group.
async fn idle_of(server: &RedisServer, id: &str) -> u64 {
    let rows: Vec<(String, String, u64, u64)> = redis::cmd("XPENDING")
        .arg("jobs")
        .arg("workers")
        .arg(id)
        .arg(id)
        .arg(1)
        .query_async(&mut redis(server).await)
        .await
        .unwrap();
    rows[0].2
}

#[tokio::test]
async fn release_with_delay_sets_the_idle_time_to_claim_timeout_minus_delay() {
    let server = server();
    let config = |name: &str| {
        RedisConfig::new(server.url(), "jobs", "workers")
            .consumer(name)
            .claim_timeout(Duration::from_secs(60))
    };
    let a = RedisBackend::connect(config("a")).await.unwrap();
    let b = RedisBackend::connect(config("b")).await.unwrap();
    a.publish(Bytes::from_static(b"x")).await.unwrap();
    let first = a.fetch(1, Duration::ZERO).await.unwrap().messages.remove(0);
    assert_eq!(
        a.release(&lease_ref(&first), Duration::from_secs(20))
            .await
            .unwrap(),
        SettleResult::Ok
    );
    // Claimable once idle reaches 60 s, i.e. in 20 s: nobody gets it now.
    let idle = idle_of(&server, first.id.as_str()).await;
    assert!((40_000..60_000).contains(&idle), "idle {idle} ms");
    for _ in 0..2 {
        assert!(b.fetch(1, Duration::ZERO).await.unwrap().is_empty());
    }
    // Still a's (owner and fence unchanged): a zero delay hands it over at once.
    assert_eq!(
        a.release(&lease_ref(&first), Duration::ZERO).await.unwrap(),
        SettleResult::Ok
    );
    let mut got = Vec::new();
    for _ in 0..2 {
        got.extend(b.fetch(1, Duration::ZERO).await.unwrap());
    }
    assert_eq!(got.len(), 1);
    assert_eq!((&got[0].id, got[0].delivery_count), (&first.id, 2));
}

#[tokio::test]
async fn a_short_release_delay_passes_and_the_message_is_retaken() {
    let server = server();
    let (a, b) = (consumer(&server, "a").await, consumer(&server, "b").await);
    a.publish(Bytes::from_static(b"x")).await.unwrap();
    let first = a.fetch(1, Duration::ZERO).await.unwrap().messages.remove(0);
    let delay = Duration::from_millis(200);
    assert_eq!(
        a.release(&lease_ref(&first), delay).await.unwrap(),
        SettleResult::Ok
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let got = loop {
        let batch = b.fetch(1, Duration::ZERO).await.unwrap();
        if let Some(message) = batch.into_iter().next() {
            break message;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never became claimable"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!((&got.id, got.delivery_count), (&first.id, 2));
}

#[tokio::test]
async fn dead_letters_keep_reason_count_and_payload() {
    let server = server();
    let a = consumer(&server, "a").await;
    a.publish(Bytes::from_static(b"poison")).await.unwrap();
    let first = a.fetch(1, Duration::ZERO).await.unwrap().messages.remove(0);
    let reason = DeadLetterReason::MaxDeliveries {
        deliveries: 1,
        last_error: "boom".into(),
    };
    assert_eq!(
        a.dead_letter(&lease_ref(&first), &reason).await.unwrap(),
        SettleResult::Ok
    );
    assert_eq!(a.stream_len().await.unwrap(), 0);
    let dead: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
        .arg(a.dead_letter_key())
        .arg("-")
        .arg("+")
        .query_async(&mut redis(&server).await)
        .await
        .unwrap();
    assert_eq!(a.dead_letter_key(), "{jobs}:dead");
    let fields: std::collections::HashMap<_, _> = dead[0].1.iter().cloned().collect();
    assert_eq!(fields["id"], first.id.as_str());
    assert_eq!(fields["deliveries"], "1");
    assert_eq!(fields["data"], "poison");
    assert!(fields["reason"].contains("boom"));
}

#[tokio::test]
async fn entries_without_the_payload_field_are_dead_lettered_not_delivered() {
    let server = server();
    let a = consumer(&server, "a").await;
    let stray: String = redis::cmd("XADD")
        .arg("jobs")
        .arg("*")
        .arg("other")
        .arg("x")
        .query_async(&mut redis(&server).await)
        .await
        .unwrap();
    a.publish(Bytes::from_static(b"ok")).await.unwrap();
    let batch = a.fetch(10, Duration::ZERO).await.unwrap();
    assert_eq!(batch.len(), 1);
    assert_eq!(batch[0].payload, Bytes::from_static(b"ok"));
    let dead_letters = || async {
        redis::cmd("XLEN")
            .arg(a.dead_letter_key())
            .query_async::<u64>(&mut redis(&server).await)
            .await
            .unwrap()
    };
    assert_eq!(dead_letters().await, 1);
    // The worker learns of it from the fetch's answer, to count it with its own dead
    // letters; once.
    let told = &batch.undeliverable;
    assert_eq!(told.len(), 1, "{told:?}");
    assert_eq!(told[0].id.as_str(), stray);
    assert_eq!(told[0].reason, "entry has no field \"data\"");
    assert!(a
        .fetch(10, Duration::ZERO)
        .await
        .unwrap()
        .undeliverable
        .is_empty());
    // Later fetches read new entries without the fetch script (nothing is reclaimable): the
    // same holds there.
    let stray: String = redis::cmd("XADD")
        .arg("jobs")
        .arg("*")
        .arg("other")
        .arg("y")
        .query_async(&mut redis(&server).await)
        .await
        .unwrap();
    a.publish(Bytes::from_static(b"ok 2")).await.unwrap();
    let batch = a.fetch(10, Duration::ZERO).await.unwrap();
    assert_eq!(batch.len(), 1);
    assert_eq!(
        (batch[0].payload.clone(), batch[0].delivery_count),
        (Bytes::from_static(b"ok 2"), 1)
    );
    assert_eq!(dead_letters().await, 2);
    let told = &batch.undeliverable;
    assert_eq!(told.len(), 1, "{told:?}");
    assert_eq!(told[0].id.as_str(), stray);
    assert_eq!(a.pending().await.unwrap(), 2, "the two good entries");
}

#[tokio::test]
async fn a_waiting_fetch_wakes_on_publish() {
    let server = server();
    let a = consumer(&server, "a").await;
    let publisher = consumer(&server, "p").await;
    let fetch = a.fetch(10, Duration::from_secs(30));
    let publish = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        publisher
            .publish(Bytes::from_static(b"late"))
            .await
            .unwrap()
    };
    let (batch, id) = tokio::join!(fetch, publish);
    let batch = batch.unwrap();
    assert_eq!(batch.len(), 1);
    assert_eq!(batch[0].id, id);
}

/// `INFO commandstats` as (command, calls), commands the server ran since the last reset.
async fn command_calls(server: &RedisServer) -> std::collections::BTreeMap<String, u64> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut redis(server).await)
        .await
        .unwrap();
    info.lines()
        .filter_map(|line| {
            let (name, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = stats.strip_prefix("calls=")?.split(',').next()?;
            Some((name.to_string(), calls.parse().ok()?))
        })
        .filter(|&(_, calls)| calls > 0)
        .collect()
}

async fn reset_stats(server: &RedisServer) {
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut redis(server).await)
        .await
        .unwrap();
}

/// Until some client waits blocked in `cmd` (`xread`, `xreadgroup`).
async fn wait_blocked_in(server: &RedisServer, cmd: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let wanted = format!(" cmd={cmd} ");
    loop {
        let clients: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query_async(&mut redis(server).await)
            .await
            .unwrap();
        let blocked = clients
            .lines()
            .any(|line| line.contains(" flags=b ") && line.contains(&wanted));
        if blocked {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no client blocked in {cmd}: {clients}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Until no client waits blocked in anything.
async fn wait_none_blocked(server: &RedisServer) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let clients: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query_async(&mut redis(server).await)
            .await
            .unwrap();
        if !clients.lines().any(|line| line.contains(" flags=b ")) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "a client stays blocked: {clients}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn an_idle_fetch_takes_a_new_entry_in_its_wait_with_no_second_round_trip() {
    let server = server();
    let a = std::sync::Arc::new(consumer(&server, "a").await);
    // The first fetch runs the script (nothing is known yet); from then on an empty stream
    // costs at most one pipelined read before the wait.
    assert!(a.fetch(10, Duration::ZERO).await.unwrap().is_empty());
    reset_stats(&server).await;
    let waiting = {
        let a = std::sync::Arc::clone(&a);
        tokio::spawn(async move { a.fetch(10, Duration::from_secs(60)).await })
    };
    wait_blocked_in(&server, "xreadgroup").await;
    let before = command_calls(&server).await;
    assert_eq!(
        before.get("evalsha"),
        None,
        "no script before the wait: {before:?}"
    );
    // The wait, after a scriptless read unless the last look is recent enough to trust.
    assert!(
        matches!(before.get("xreadgroup"), Some(1 | 2)),
        "{before:?}"
    );
    assert_eq!(before.get("xread"), None, "the wait consumes: {before:?}");
    reset_stats(&server).await;
    let id: String = redis::cmd("XADD")
        .arg("jobs")
        .arg("*")
        .arg("data")
        .arg("picked")
        .query_async(&mut redis(&server).await)
        .await
        .unwrap();
    let got = tokio::time::timeout(Duration::from_secs(20), waiting)
        .await
        .expect("the wait returned the new entry")
        .unwrap()
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].id.as_str(), id);
    assert_eq!(got[0].payload, Bytes::from_static(b"picked"));
    assert_eq!((got[0].delivery_count, got[0].fence), (1, Fence(1)));
    // After the publish the server ran nothing for the worker: the blocked XREADGROUP (counted
    // when it blocked) delivered the entry.
    let after = command_calls(&server).await;
    let names: Vec<&str> = after
        .keys()
        .map(String::as_str)
        .filter(|&name| name != "config|resetstat")
        .collect();
    assert_eq!(names, ["xadd"], "{after:?}");
    // The delivery is the wait's, fenced like any new one: renew and ack accept fence 1.
    assert_eq!(pending_of(&server, &id).await, Some(("a".into(), 1)));
    assert_eq!(
        a.renew(&[lease_ref(&got[0])]).await.unwrap(),
        [RenewResult::Kept]
    );
    assert_eq!(
        a.ack(&[lease_ref(&got[0])]).await.unwrap(),
        [SettleResult::Ok]
    );
}

#[tokio::test]
async fn a_dropped_waiting_fetch_takes_nothing_published_after_it() {
    let server = server();
    let a = std::sync::Arc::new(consumer(&server, "a").await);
    let b = consumer(&server, "b").await;
    let waiting = {
        let a = std::sync::Arc::clone(&a);
        tokio::spawn(async move { a.fetch(10, Duration::from_secs(60)).await })
    };
    wait_blocked_in(&server, "xreadgroup").await;
    // What a worker's shutdown or call timeout does: drop the fetch mid-wait.
    waiting.abort();
    assert!(waiting.await.unwrap_err().is_cancelled());
    wait_none_blocked(&server).await;
    let id = b.publish(Bytes::from_static(b"after")).await.unwrap();
    let got = b.fetch(10, Duration::ZERO).await.unwrap();
    assert_eq!(got.len(), 1, "the dropped wait left it to others");
    assert_eq!((&got[0].id, got[0].delivery_count), (&id, 1));
    // The next wait of `a` opens its connection again and takes what comes.
    let again = {
        let a = std::sync::Arc::clone(&a);
        tokio::spawn(async move { a.fetch(10, Duration::from_secs(60)).await })
    };
    wait_blocked_in(&server, "xreadgroup").await;
    let id = b.publish(Bytes::from_static(b"later")).await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(20), again)
        .await
        .expect("the new wait returned the entry")
        .unwrap()
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].id, id);
}

#[tokio::test]
async fn a_vanished_group_is_recreated_and_its_leases_are_lost() {
    let server = server();
    let a = consumer(&server, "a").await;
    a.publish(Bytes::from_static(b"x")).await.unwrap();
    let first = a.fetch(1, Duration::ZERO).await.unwrap().messages.remove(0);
    let _: redis::Value = redis::cmd("XGROUP")
        .arg("DESTROY")
        .arg("jobs")
        .arg("workers")
        .query_async(&mut redis(&server).await)
        .await
        .unwrap();
    assert_eq!(
        a.renew(&[lease_ref(&first)]).await.unwrap(),
        [RenewResult::Lost]
    );
    // The next fetch recreates the group from the start: the unacked entry comes back.
    let again = a.fetch(1, Duration::ZERO).await.unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].id, first.id);
}

/// A stream deleted while a fetch waits on it (Redis ends that read with `UNBLOCKED`) is created
/// again with its group, as after `NOGROUP`, and the fetch goes on waiting: it takes what is
/// published next instead of failing.
#[tokio::test]
async fn a_stream_deleted_under_a_waiting_fetch_is_recreated_and_the_wait_goes_on() {
    let server = server();
    let a = std::sync::Arc::new(consumer(&server, "a").await);
    let waiting = tokio::spawn({
        let a = a.clone();
        async move { a.fetch(1, Duration::from_secs(10)).await }
    });
    wait_blocked_in(&server, "xreadgroup").await;
    let _: redis::Value = redis::cmd("DEL")
        .arg("jobs")
        .query_async(&mut redis(&server).await)
        .await
        .unwrap();
    // Recreated: the wait blocks on the stream again.
    wait_blocked_in(&server, "xreadgroup").await;
    let published = a.publish(Bytes::from_static(b"after")).await.unwrap();
    let fetched = waiting.await.unwrap().expect("the fetch carries on");
    assert_eq!(fetched.len(), 1);
    assert_eq!(fetched[0].id, published);
}

/// Names of the group's consumers.
async fn consumers(server: &RedisServer) -> Vec<String> {
    let infos: Vec<std::collections::HashMap<String, redis::Value>> = redis::cmd("XINFO")
        .arg("CONSUMERS")
        .arg("jobs")
        .arg("workers")
        .query_async(&mut redis(server).await)
        .await
        .unwrap();
    let mut names: Vec<String> = infos
        .iter()
        .map(|info| redis::from_redis_value(info["name"].clone()).unwrap())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn idle_consumers_without_pending_entries_are_reaped_never_ones_with_pending() {
    let server = server();
    let holder = consumer(&server, "holder").await;
    holder.publish(Bytes::from_static(b"x")).await.unwrap();
    assert_eq!(holder.fetch(1, Duration::ZERO).await.unwrap().len(), 1);
    let _: i64 = redis::cmd("XGROUP")
        .arg("CREATECONSUMER")
        .arg("jobs")
        .arg("workers")
        .arg("ghost")
        .query_async(&mut redis(&server).await)
        .await
        .unwrap();
    assert_eq!(consumers(&server).await, ["ghost", "holder"]);
    tokio::time::sleep(Duration::from_millis(20)).await;
    let config = RedisConfig::new(server.url(), "jobs", "workers")
        .consumer("reaper")
        .claim_timeout(CLAIM)
        .reap_idle_consumers(Some(Duration::from_millis(10)));
    let reaper = RedisBackend::connect(config).await.unwrap();
    reaper.fetch(1, Duration::ZERO).await.unwrap();
    // The ghost (idle, nothing pending) is gone; the holder keeps its pending entry.
    let left = consumers(&server).await;
    assert!(!left.contains(&"ghost".to_string()), "{left:?}");
    assert!(left.contains(&"holder".to_string()), "{left:?}");
    assert_eq!(reaper.pending().await.unwrap(), 1);
}

/// Renews and acks still work after the server forgot its scripts (a restart, a failover).
#[tokio::test]
async fn batch_scripts_are_reloaded_when_the_server_forgot_them() {
    let server = server();
    let a = consumer(&server, "a").await;
    a.publish(Bytes::from_static(b"x")).await.unwrap();
    let batch = a.fetch(1, Duration::ZERO).await.unwrap();
    let leases: Vec<_> = batch.iter().map(lease_ref).collect();
    let flush = || async {
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut redis(&server).await)
            .await
            .unwrap();
    };
    flush().await;
    assert_eq!(a.renew(&leases).await.unwrap(), [RenewResult::Kept]);
    flush().await;
    assert_eq!(a.ack(&leases).await.unwrap(), [SettleResult::Ok]);
    assert_eq!(a.stream_len().await.unwrap(), 0);
}

/// The reclaim scan starts at the first lapsed entry, not at the 25 live ones ahead of it
/// (`XAUTOCLAIM … COUNT 1` scans 10 at most, twice a fetch); the cursor is carried between
/// fetches and compared with stream ids as numbers (`1-10` comes after `1-9`), so a lapsed
/// entry behind it waits its turn.
#[tokio::test]
async fn reclaims_go_on_from_the_cursor_in_stream_id_order() {
    let server = server();
    let mut conn = redis(&server).await;
    let (a, b) = (consumer(&server, "a").await, consumer(&server, "b").await);
    let live: Vec<String> = (1..=25).map(|seq| format!("0-{seq}")).collect();
    let lapsing = ["1-9", "1-10", "1-11", "2-0", "10-0"];
    for id in live.iter().map(String::as_str).chain(lapsing) {
        let _: String = redis::cmd("XADD")
            .arg("jobs")
            .arg(id)
            .arg("data")
            .arg(id)
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    let _: redis::Value = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg("workers")
        .arg("ghost")
        .arg("STREAMS")
        .arg("jobs")
        .arg(">")
        .query_async(&mut conn)
        .await
        .unwrap();
    tokio::time::sleep(CLAIM + Duration::from_millis(100)).await;
    let renewed: Vec<String> = redis::cmd("XCLAIM")
        .arg("jobs")
        .arg("workers")
        .arg("live")
        .arg(0)
        .arg(&live)
        .arg("JUSTID")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(renewed, live);
    let ids = |batch: &[Fetched<Bytes>]| batch.iter().map(|m| m.id.to_string()).collect::<Vec<_>>();

    let first = a.fetch(1, Duration::ZERO).await.unwrap();
    assert_eq!(ids(&first), ["1-9"]);
    assert_eq!(
        ids(&b.fetch(2, Duration::ZERO).await.unwrap()),
        ["1-10", "1-11"]
    );
    // 1-9 lapses again, ahead of a's cursor: a goes on past b's live entries to 2-0 first.
    assert_eq!(
        a.release(&lease_ref(&first[0]), Duration::ZERO)
            .await
            .unwrap(),
        SettleResult::Ok
    );
    assert_eq!(ids(&a.fetch(1, Duration::ZERO).await.unwrap()), ["2-0"]);
    assert_eq!(ids(&a.fetch(1, Duration::ZERO).await.unwrap()), ["10-0"]);
    // The scan reached the end; the next one starts over at the first lapsed entry.
    let mut again = Vec::new();
    for _ in 0..3 {
        again.extend(ids(&a.fetch(1, Duration::ZERO).await.unwrap()));
    }
    assert_eq!(again, ["1-9"]);
    assert_eq!(pending_of(&server, "1-9").await, Some(("a".into(), 3)));
}
