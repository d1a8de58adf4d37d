//! Sharded queues as the inspector sees them, on a throwaway `redis-server` and on a 3-master
//! Redis Cluster (feature `cluster`): streams named `{queue:i}` are grouped under their queue,
//! and a queue's overview totals its shards.

use std::time::Duration;

use bytes::Bytes;
use leasehold_core::{
    Backend, DeadLetterReason, Discovered, Due, Inspector, LeaseRef, Outgoing, Publisher,
    QueueOverview, SettleResult, Shards,
};
use leasehold_redis::{
    PublisherConfig, RedisBackend, RedisConfig, RedisInspector, RedisPublisher, Servers,
};
use leasehold_redis_harness::RedisServer;

const CLAIM: Duration = Duration::from_secs(30);

/// Fills the shards of `orders` (3 shards) on `servers`: shard i gets 2(i+1) messages; shard 0
/// has 1 fetched, shard 2 has 2 fetched and a delayed message, shard 1 one dead letter. Also a
/// plain stream `plain` and a one-shard queue `{other:0}`.
async fn fill(servers: &Servers) {
    let orders = Shards::new("orders", 3).unwrap();
    for (i, stream) in orders.streams().enumerate() {
        let config = RedisConfig::new(servers.clone(), &stream, "workers")
            .consumer("w")
            .claim_timeout(CLAIM);
        let backend = RedisBackend::connect(config).await.expect("connect");
        for n in 0..2 * (i + 1) {
            backend
                .publish(Bytes::from(format!("{stream}-{n}")))
                .await
                .unwrap();
        }
        match i {
            0 => assert_eq!(backend.fetch(1, Duration::ZERO).await.unwrap().len(), 1),
            1 => {
                let fetched = backend.fetch(1, Duration::ZERO).await.unwrap();
                let lease = LeaseRef::from(&fetched[0]);
                let reason = DeadLetterReason::Rejected("bad input".into());
                let dead = backend.dead_letter(&lease, &reason).await.unwrap();
                assert_eq!(dead, SettleResult::Ok);
            }
            _ => {
                assert_eq!(backend.fetch(2, Duration::ZERO).await.unwrap().len(), 2);
                let publisher =
                    RedisPublisher::connect(PublisherConfig::new(servers.clone(), &stream))
                        .await
                        .expect("connect the publisher");
                let mut later = Outgoing::new(Bytes::from_static(b"later"));
                later.due = Some(Due::After(Duration::from_secs(600)));
                publisher.publish_batch(vec![later]).await.unwrap();
            }
        }
    }
    for stream in ["plain", "{other:0}"] {
        let config = RedisConfig::new(servers.clone(), stream, "workers").consumer("w");
        let backend = RedisBackend::connect(config).await.expect("connect");
        backend.publish(Bytes::from_static(b"x")).await.unwrap();
    }
}

/// What `fill` left, read through `inspector`.
async fn check(inspector: &RedisInspector) {
    let found = inspector.discover(100).await.unwrap();
    let names: Vec<&str> = found.iter().map(Discovered::name).collect();
    assert_eq!(names, ["orders", "other", "plain"]);
    let Discovered::Queue { shards, .. } = &found[0] else {
        panic!("orders is a queue: {found:?}")
    };
    assert_eq!(
        shards,
        &[
            (0, "{orders:0}".into()),
            (1, "{orders:1}".into()),
            (2, "{orders:2}".into())
        ]
    );
    assert_eq!(found[2], Discovered::Stream("plain".into()));
    assert_eq!(inspector.discover(1).await.unwrap().len(), 1);

    let queue = inspector.queue("orders").await.unwrap().expect("a queue");
    assert_eq!(queue.queue, "orders");
    // 2 + 4 + 6 published, 1 dead-lettered (deleted from its shard).
    assert_eq!(queue.length, 11);
    assert_eq!(queue.pending, 3);
    assert_eq!(queue.lag, Some(11 - 3));
    assert_eq!(queue.dead_letters, 1);
    assert_eq!(queue.delayed.len, 1);
    assert!(queue
        .delayed
        .next_due
        .is_some_and(|d| d > Duration::from_secs(500)));
    assert!(queue.oldest_pending_age.is_some());
    assert_eq!(queue.groups.len(), 1);
    let group = &queue.groups[0];
    assert_eq!(
        (
            group.name.as_str(),
            group.pending,
            group.consumers,
            group.shards
        ),
        ("workers", 3, 1, 3)
    );
    let lengths: Vec<(u16, u64)> = queue.shards.iter().map(|(i, o)| (*i, o.length)).collect();
    assert_eq!(lengths, [(0, 2), (1, 3), (2, 6)]);
    // The totals are those of the shards' own overviews.
    let mut own = Vec::new();
    for i in 0..3u16 {
        own.push((
            i,
            inspector
                .overview(&format!("{{orders:{i}}}"))
                .await
                .unwrap(),
        ));
    }
    let mut expected = QueueOverview::from_shards("orders", own);
    // Ages and due times move on between the two reads.
    expected.oldest_pending_age = queue.oldest_pending_age;
    expected.delayed.next_due = queue.delayed.next_due;
    let strip = |mut q: QueueOverview| {
        for (_, o) in &mut q.shards {
            o.delayed.next_due = None;
            for g in &mut o.groups {
                g.oldest_pending_age = None;
                for c in &mut g.consumers {
                    c.idle = Duration::ZERO;
                }
            }
        }
        for g in &mut q.groups {
            g.oldest_pending_age = None;
        }
        q
    };
    assert_eq!(strip(queue), strip(expected));

    assert_eq!(
        inspector.queue("plain").await.unwrap(),
        None,
        "a stream, not a queue"
    );
    assert_eq!(inspector.queue("nope").await.unwrap(), None);
    // With the count known: no walk, and a shard not created yet is left out.
    let four = inspector
        .shards_overview(&Shards::new("orders", 4).unwrap())
        .await
        .unwrap();
    assert_eq!((four.shards.len(), four.length, four.pending), (3, 11, 3));
}

#[tokio::test]
async fn a_sharded_queue_is_one_queue_with_its_shards() {
    let server =
        RedisServer::start().unwrap_or_else(|e| panic!("these tests need redis-server: {e}"));
    fill(&Servers::one(server.url())).await;
    let inspector = RedisInspector::connect(&server.url())
        .await
        .expect("connect");
    check(&inspector).await;
}

/// `key`'s hash slot, as the cluster computes it (`CLUSTER KEYSLOT` on a running node).
#[cfg(feature = "cluster")]
#[cfg(feature = "cluster")]
#[tokio::test]
async fn a_sharded_queue_over_cluster_masters_is_one_queue() {
    use leasehold_redis_harness::RedisCluster;

    let cluster =
        RedisCluster::start(3).unwrap_or_else(|e| panic!("cannot start a Redis Cluster: {e}"));
    let owners: std::collections::BTreeSet<u16> = Shards::new("orders", 3)
        .unwrap()
        .streams()
        .map(|s| {
            cluster
                .owner(cluster.key_slot(&s).expect("CLUSTER KEYSLOT"))
                .unwrap()
                .port()
        })
        .collect();
    assert!(owners.len() > 1, "the shards live on several masters");
    let servers = Servers::cluster([cluster.masters()[0].url()]);
    fill(&servers).await;
    let inspector = RedisInspector::connect(&servers).await.expect("connect");
    check(&inspector).await;
}
