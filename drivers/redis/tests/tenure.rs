//! Fences vouched for by tenure (`FenceCheck::Tenure`), against a real, throwaway
//! `redis-server`: a batch delivered under the consumer's tenure of now reads no fence back, and
//! anything that can take a lease away ends that tenure first.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use leasehold_core::{Backend, Fetched, LeaseRef, RenewResult, SettleResult};
use leasehold_redis::{FenceCheck, RedisBackend, RedisConfig};
use leasehold_redis_harness::RedisServer;

const CLAIM: Duration = Duration::from_secs(1);

fn server() -> RedisServer {
    RedisServer::start().unwrap_or_else(|e| panic!("these tests need redis-server: {e}"))
}

async fn consumer(server: &RedisServer, name: &str, check: FenceCheck) -> RedisBackend {
    let config = RedisConfig::new(server.url(), "jobs", "workers")
        .consumer(name)
        .claim_timeout(CLAIM)
        .fence_check(check);
    RedisBackend::connect(config).await.expect("connect")
}

fn lease_refs(batch: &[Fetched<Bytes>]) -> Vec<LeaseRef> {
    batch.iter().map(LeaseRef::from).collect()
}

fn command(server: &RedisServer, args: &[&str]) -> leasehold_redis_harness::Reply {
    server.command(args.iter().copied()).expect("a command")
}

/// Commands the server ran since the last `CONFIG RESETSTAT`, by name.
fn calls(server: &RedisServer) -> BTreeMap<String, u64> {
    let info = command(server, &["INFO", "commandstats"]);
    let info = info.as_str().expect("INFO answers text");
    info.lines()
        .filter_map(|line| {
            let (name, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = stats.strip_prefix("calls=")?.split(',').next()?;
            Some((name.to_string(), calls.parse().ok()?))
        })
        .collect()
}

/// Fetches 60 fresh messages (the first fetch runs the script, the next reads without one),
/// then renews and acks them all, counting the `XPENDING`s of each.
async fn xpendings_per_renew_and_ack(check: FenceCheck) -> (u64, u64) {
    let server = server();
    let a = consumer(&server, "a", check).await;
    for i in 0..60 {
        a.publish(Bytes::from(format!("m{i}"))).await.unwrap();
    }
    let mut batch = a.fetch(20, Duration::ZERO).await.unwrap().messages;
    batch.extend(a.fetch(40, Duration::ZERO).await.unwrap());
    assert_eq!(batch.len(), 60);
    let held = lease_refs(&batch);
    let xpending = || calls(&server).get("xpending").copied().unwrap_or(0);
    command(&server, &["CONFIG", "RESETSTAT"]);
    assert_eq!(a.renew(&held).await.unwrap(), vec![RenewResult::Kept; 60]);
    let renew = xpending();
    command(&server, &["CONFIG", "RESETSTAT"]);
    assert_eq!(a.ack(&held).await.unwrap(), vec![SettleResult::Ok; 60]);
    let ack = xpending();
    assert_eq!(a.pending().await.unwrap(), 0);
    assert_eq!(a.stream_len().await.unwrap(), 0);
    (renew, ack)
}

#[tokio::test]
async fn a_batch_under_the_current_tenure_reads_no_fence_back() {
    // Per lease: one ranged XPENDING per renew and per ack (the trim that follows the ack
    // reads a group's oldest pending entry only while it has some: here it has none left).
    assert_eq!(
        xpendings_per_renew_and_ack(FenceCheck::PerLease).await,
        (1, 1)
    );
    assert_eq!(
        xpendings_per_renew_and_ack(FenceCheck::Tenure).await,
        (0, 0)
    );
}

#[tokio::test]
async fn a_takeover_ends_the_tenure_of_the_consumer_it_was_taken_from() {
    let server = server();
    let a = consumer(&server, "a", FenceCheck::Tenure).await;
    let b = consumer(&server, "b", FenceCheck::Tenure).await;
    a.publish(Bytes::from_static(b"taken")).await.unwrap();
    a.publish(Bytes::from_static(b"kept")).await.unwrap();
    let batch = a.fetch(2, Duration::ZERO).await.unwrap();
    let (taken, kept) = (LeaseRef::from(&batch[0]), LeaseRef::from(&batch[1]));
    assert_eq!(taken.tenure, kept.tenure, "one fetch, one tenure");
    // Only the second lease is renewed; the first lapses and b takes it.
    tokio::time::sleep(CLAIM / 2).await;
    assert_eq!(
        a.renew(std::slice::from_ref(&kept)).await.unwrap(),
        [RenewResult::Kept]
    );
    tokio::time::sleep(CLAIM / 2 + Duration::from_millis(100)).await;
    let took = b.fetch(1, Duration::ZERO).await.unwrap();
    assert_eq!(took.len(), 1);
    assert_eq!((&took[0].id, took[0].fence.0), (&taken.id, 2));

    // a's leases still carry the tenure b ended: each is checked, and only the taken one is lost.
    assert_eq!(
        a.renew(std::slice::from_ref(&taken)).await.unwrap(),
        [RenewResult::Lost]
    );
    assert_eq!(
        a.release(&taken, Duration::ZERO).await.unwrap(),
        SettleResult::Lost
    );
    assert_eq!(
        a.ack(&[taken.clone(), kept]).await.unwrap(),
        [SettleResult::Lost, SettleResult::Ok]
    );
    let owner = command(&server, &["XPENDING", "jobs", "workers", "-", "+", "10"]);
    assert_eq!(
        owner.as_array().map(<[_]>::len),
        Some(1),
        "b's delivery is still pending: {owner:?}"
    );
    assert_eq!(
        b.ack(&[LeaseRef::from(&took[0])]).await.unwrap(),
        [SettleResult::Ok]
    );
}

#[tokio::test]
async fn a_group_made_anew_vouches_for_nothing_from_before() {
    let server = server();
    let a = consumer(&server, "a", FenceCheck::Tenure).await;
    a.publish(Bytes::from_static(b"x")).await.unwrap();
    let old = a.fetch(1, Duration::ZERO).await.unwrap().messages.remove(0);
    // The group goes; a worker connecting makes it anew, from the stream's start, and is
    // delivered the same entry with the same delivery count (1) as a was.
    command(&server, &["XGROUP", "DESTROY", "jobs", "workers"]);
    let b = consumer(&server, "b", FenceCheck::Tenure).await;
    let new = b.fetch(1, Duration::ZERO).await.unwrap().messages.remove(0);
    assert_eq!((&new.id, new.fence), (&old.id, old.fence));

    // a's lease names its tenure from before: checked, and refused.
    assert_eq!(
        a.ack(&[LeaseRef::from(&old)]).await.unwrap(),
        [SettleResult::Lost]
    );
    assert_eq!(
        b.ack(&[LeaseRef::from(&new)]).await.unwrap(),
        [SettleResult::Ok]
    );
}
