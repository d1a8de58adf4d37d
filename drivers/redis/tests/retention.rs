//! What a stream keeps of consumed entries, on a throwaway `redis-server` per test: by default
//! what some group still needs (so a group's lag stays known behind a long job), deleting on
//! ack only for a stream one group reads, and a capped history. Fan-out over several groups is
//! checked by the conformance suite's group properties.

use std::time::Duration;

use bytes::Bytes;
use leasehold_core::{Backend, Fetched, Inspector, LeaseRef, Outgoing, SettleResult};
use leasehold_redis::{
    ConnectError, PublisherConfig, RedisBackend, RedisConfig, RedisInspector, RedisPublisher,
    Retention,
};
use leasehold_redis_harness::RedisServer;

fn server() -> RedisServer {
    RedisServer::start().unwrap_or_else(|e| panic!("these tests need redis-server: {e}"))
}

async fn consumer(server: &RedisServer, group: &str, retention: Retention) -> RedisBackend {
    let config = RedisConfig::new(server.url(), "jobs", group)
        .claim_timeout(Duration::from_secs(5))
        .retention(retention);
    RedisBackend::connect(config).await.expect("connect")
}

fn lease_refs(batch: &[Fetched<Bytes>]) -> Vec<LeaseRef> {
    batch.iter().map(LeaseRef::from).collect()
}

async fn publish(b: &RedisBackend, n: usize) {
    for _ in 0..n {
        b.publish(Bytes::from_static(b"x")).await.expect("publish");
    }
}

async fn ack(b: &RedisBackend, batch: &[Fetched<Bytes>]) {
    let acked = b.ack(&lease_refs(batch)).await.expect("ack");
    assert!(acked.iter().all(|r| *r == SettleResult::Ok), "{acked:?}");
}

/// A long job holds the oldest entry while later ones are acked, then more are published: the
/// acked entries stay behind it (no tombstone), so the group's lag is a number for the
/// inspector, and they go once the long job is acked.
#[tokio::test]
async fn lag_stays_known_behind_a_long_job() {
    let server = server();
    let worker = consumer(&server, "workers", Retention::default()).await;
    publish(&worker, 10).await;
    let batch = worker.fetch(10, Duration::ZERO).await.unwrap();
    ack(&worker, &batch[1..]).await;
    publish(&worker, 4).await;
    assert_eq!(worker.stream_len().await.unwrap(), 14);
    let inspector = RedisInspector::connect(&server.url()).await.unwrap();
    let overview = inspector.overview("jobs").await.unwrap();
    let [group] = overview.groups.as_slice() else {
        panic!("one group: {overview:?}")
    };
    assert_eq!((group.pending, group.lag), (1, Some(4)), "{overview:?}");
    ack(&worker, &batch[..1]).await;
    assert_eq!(worker.stream_len().await.unwrap(), 4);
    let rest = worker.fetch(10, Duration::ZERO).await.unwrap();
    ack(&worker, &rest).await;
    assert_eq!(worker.stream_len().await.unwrap(), 0);
    let overview = inspector.overview("jobs").await.unwrap();
    assert_eq!(overview.groups[0].lag, Some(0), "{overview:?}");
}

/// Deleting on ack is refused on a stream another group reads.
#[tokio::test]
async fn delete_on_ack_is_refused_on_a_shared_stream() {
    let server = server();
    consumer(&server, "billing", Retention::default()).await;
    let config = RedisConfig::new(server.url(), "jobs", "emails").retention(Retention::DeleteOnAck);
    match RedisBackend::connect(config).await {
        Err(ConnectError::SharedStream { group, others, .. }) => {
            assert_eq!((group.as_str(), others), ("emails", vec!["billing".into()]));
        }
        Err(other) => panic!("refused for another reason: {other}"),
        Ok(_) => panic!("deleting on ack was accepted on a stream another group reads"),
    }
}

/// Deleting on ack deletes entries acked behind a pending one, until a second group appears:
/// from then on the stream keeps what that group has not read.
#[tokio::test]
async fn delete_on_ack_stops_when_a_second_group_appears() {
    let server = server();
    let alone = consumer(&server, "billing", Retention::DeleteOnAck).await;
    publish(&alone, 4).await;
    let batch = alone.fetch(4, Duration::ZERO).await.unwrap();
    ack(&alone, &batch[1..2]).await;
    assert_eq!(alone.stream_len().await.unwrap(), 3, "deleted on ack");
    let late = consumer(&server, "emails", Retention::default()).await;
    ack(&alone, &batch[2..]).await;
    ack(&alone, &batch[..1]).await;
    let read = late.fetch(10, Duration::ZERO).await.unwrap();
    let ids = |b: &[Fetched<Bytes>]| b.iter().map(|m| m.id.clone()).collect::<Vec<_>>();
    assert_eq!(
        ids(&read),
        [
            batch[0].id.clone(),
            batch[2].id.clone(),
            batch[3].id.clone()
        ],
        "the group that appeared lost entries to the first group's acks"
    );
    ack(&late, &read).await;
    assert_eq!(alone.stream_len().await.unwrap(), 0);
}

/// A capped history keeps the newest consumed entries, never an entry a group still needs.
#[tokio::test]
async fn a_capped_history_trims_only_consumed_entries() {
    let server = server();
    let history = Retention::keep(Some(3), None);
    let billing = consumer(&server, "billing", history).await;
    publish(&billing, 10).await;
    let batch = billing.fetch(10, Duration::ZERO).await.unwrap();
    ack(&billing, &batch).await;
    assert_eq!(billing.stream_len().await.unwrap(), 3, "the newest 3 kept");
    // A group made now reads the history; while it has not, nothing it needs goes.
    let emails = consumer(&server, "emails", history).await;
    publish(&billing, 5).await;
    let batch = billing.fetch(10, Duration::ZERO).await.unwrap();
    ack(&billing, &batch).await;
    assert_eq!(billing.stream_len().await.unwrap(), 8, "emails needs all 8");
    let read = emails.fetch(100, Duration::ZERO).await.unwrap();
    assert_eq!(read.len(), 8);
    ack(&emails, &read).await;
    assert_eq!(billing.stream_len().await.unwrap(), 3);
    // By age: entries older than the cap go once consumed.
    let aged = consumer(
        &server,
        "aged",
        Retention::keep(None, Some(Duration::from_millis(1))),
    )
    .await;
    let read = aged.fetch(100, Duration::ZERO).await.unwrap();
    assert_eq!(read.len(), 3);
    // Entry ids carry the server's clock in ms: two ms on, every entry is older than 1 ms.
    tokio::time::sleep(Duration::from_millis(2)).await;
    ack(&aged, &read).await;
    assert_eq!(aged.stream_len().await.unwrap(), 0);
}

/// Two services read one stream with their own groups; only `billing` runs while 10 messages
/// are published and acked. `emails`, started afterwards, receives all 10 when the producer
/// declared both groups, and none when nothing did (its worker's connect warns how many).
#[tokio::test]
async fn a_group_the_producer_declared_gets_what_was_published_before_it_started() {
    for (declared, expected) in [(true, 10), (false, 0)] {
        let server = server();
        let mut config = PublisherConfig::new(server.url(), "jobs");
        if declared {
            config = config.groups(["billing", "emails"]);
        }
        let producer = RedisPublisher::connect(config).await.expect("connect");
        let billing = consumer(&server, "billing", Retention::default()).await;
        for n in 0..10 {
            let message = Outgoing::new(Bytes::from(format!("order {n}")));
            producer.publish(message).await.expect("publish");
        }
        let batch = billing.fetch(100, Duration::ZERO).await.unwrap();
        assert_eq!(batch.len(), 10);
        ack(&billing, &batch).await;
        let emails = consumer(&server, "emails", Retention::default()).await;
        let read = emails.fetch(100, Duration::ZERO).await.unwrap();
        assert_eq!(read.len(), expected, "declared: {declared}");
        ack(&emails, &read).await;
        assert_eq!(emails.stream_len().await.unwrap(), 0);
    }
}

/// A declared group's name is checked like a worker's.
#[test]
fn declared_groups_are_validated() {
    let config = PublisherConfig::new("redis://127.0.0.1:1", "jobs").groups(["billing", ""]);
    assert!(config.validate().is_err());
}
