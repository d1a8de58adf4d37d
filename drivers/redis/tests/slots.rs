//! Redis Cluster hash slots against a real, cluster-enabled `redis-server`: every script of a
//! stream runs on a cluster node (which refuses, with `CROSSSLOT`, a script whose keys are in
//! different slots). That the crate computes slots as `CLUSTER KEYSLOT` does is checked by its
//! own unit tests (`src/slot.rs`), against such a server too.

use std::time::{Duration, Instant};

use bytes::Bytes;
use leasehold_core::{
    Backend, DeadLetterReason, Dedupe, Due, Fetched, LeaseRef, Outgoing, Publisher, SettleResult,
};
use leasehold_redis::{
    ConnectError, PublisherConfig, RedisBackend, RedisConfig, RedisConfigError, RedisPublisher,
};
use leasehold_redis_harness::{RedisServer, Reply};

/// A cluster-enabled server that owns no slots: enough for `CLUSTER KEYSLOT`.
fn cluster_node() -> RedisServer {
    RedisServer::builder()
        .args(["--cluster-enabled", "yes"])
        .start()
        .unwrap_or_else(|e| panic!("these tests need redis-server: {e}"))
}

/// A one-node cluster owning every slot: any key is served, and a script over keys of two
/// slots fails with `CROSSSLOT`, as on a real cluster.
fn one_node_cluster() -> RedisServer {
    let server = cluster_node();
    let added = server
        .command(["CLUSTER", "ADDSLOTSRANGE", "0", "16383"])
        .unwrap();
    assert_eq!(added, Reply::Simple("OK".into()));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let info = server.command(["CLUSTER", "INFO"]).unwrap();
        if info.as_str().unwrap_or("").contains("cluster_state:ok") {
            return server;
        }
        assert!(
            Instant::now() < deadline,
            "cluster_state never ok: {info:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn server_slot(server: &RedisServer, key: &[u8]) -> u16 {
    let reply = server
        .command([b"CLUSTER".as_slice(), b"KEYSLOT".as_slice(), key])
        .unwrap();
    let slot = reply
        .as_int()
        .unwrap_or_else(|| panic!("CLUSTER KEYSLOT {key:?}: {reply:?}"));
    u16::try_from(slot).unwrap()
}

fn lease_ref(message: &Fetched<Bytes>) -> LeaseRef {
    LeaseRef::new(message.id.clone(), message.fence)
}

/// Every script a stream's publisher and consumer run, on a cluster node: a delayed and
/// deduplicated publish, the fetch script, a dead letter.
async fn every_script_runs(server: &RedisServer, stream: &str) {
    let publisher = RedisPublisher::connect(PublisherConfig::new(server.url(), stream))
        .await
        .expect("connect publisher");
    let later = Outgoing::new(Bytes::from_static(b"later"))
        .with_due(Due::After(Duration::from_secs(3600)))
        .with_dedupe(Dedupe::new("once", Duration::from_secs(60)));
    let now = Outgoing::new(Bytes::from_static(b"now"));
    publisher
        .publish_batch(vec![later, now])
        .await
        .unwrap_or_else(|e| panic!("{stream}: publish: {e}"));
    let config = RedisConfig::new(server.url(), stream, "workers").consumer("a");
    let backend = RedisBackend::connect(config).await.expect("connect");
    let fetched = backend
        .fetch(10, Duration::ZERO)
        .await
        .unwrap_or_else(|e| panic!("{stream}: fetch: {e}"));
    assert_eq!(fetched.len(), 1, "{stream}");
    let reason = DeadLetterReason::MaxDeliveries {
        deliveries: 1,
        last_error: "boom".into(),
    };
    let settled = backend
        .dead_letter(&lease_ref(&fetched[0]), &reason)
        .await
        .unwrap_or_else(|e| panic!("{stream}: dead-letter: {e}"));
    assert_eq!(settled, SettleResult::Ok, "{stream}");
    let dead = server.command(["XLEN", backend.dead_letter_key()]).unwrap();
    assert_eq!(dead, Reply::Integer(1), "{stream}");
    assert_eq!(
        server_slot(server, backend.dead_letter_key().as_bytes()),
        server_slot(server, stream.as_bytes()),
        "{stream}"
    );
    let delayed = server.command(["ZCARD", publisher.delayed_key()]).unwrap();
    assert_eq!(delayed, Reply::Integer(1), "{stream}");
}

#[tokio::test]
async fn streams_are_consumable_on_a_cluster_node() {
    let server = one_node_cluster();
    for stream in ["orders", "{app}:orders", "a{b", "x}{a}", "{", "é{ü"] {
        every_script_runs(&server, stream).await;
    }
}

#[tokio::test]
async fn keys_a_cluster_would_refuse_together_are_refused_at_connect() {
    let server = one_node_cluster();
    // What earlier versions derived for `a}b`: Redis refuses a script over both.
    let crossing = server
        .command([
            "EVAL",
            "return redis.call('XLEN', KEYS[2])",
            "2",
            "a}b",
            "{a}b}:dead",
        ])
        .unwrap();
    assert!(
        matches!(&crossing, Reply::Error(e) if e.starts_with("CROSSSLOT")),
        "{crossing:?}"
    );
    for stream in ["a}b", "odd{}name"] {
        let config = RedisConfig::new(server.url(), stream, "workers");
        match RedisBackend::connect(config).await {
            Err(ConnectError::Config(RedisConfigError::UntaggableStream { .. })) => {}
            other => panic!("{stream}: {other:?}"),
        }
        match RedisPublisher::connect(PublisherConfig::new(server.url(), stream)).await {
            Err(ConnectError::Config(RedisConfigError::UntaggableStream { .. })) => {}
            other => panic!("{stream}: {other:?}"),
        }
    }
    let elsewhere = RedisConfig::new(server.url(), "orders", "workers").dead_letter_stream("dead");
    let err = RedisBackend::connect(elsewhere).await.unwrap_err();
    let expected = RedisConfigError::CrossSlot {
        what: "dead_letter_stream",
        key: "dead".into(),
        key_slot: server_slot(&server, b"dead"),
        stream: "orders".into(),
        stream_slot: server_slot(&server, b"orders"),
    };
    assert!(
        matches!(&err, ConnectError::Config(e) if *e == expected),
        "{err:?}"
    );
    // One in the stream's slot is fine.
    let beside =
        RedisConfig::new(server.url(), "orders", "workers").dead_letter_stream("{orders}:failed");
    let backend = RedisBackend::connect(beside).await.expect("connect");
    assert_eq!(backend.dead_letter_key(), "{orders}:failed");
}
