//! Failovers the harness drives on real `redis-server`s: `SENTINEL FAILOVER` on a Sentinel
//! topology, and a manual `CLUSTER FAILOVER` on a 3-master cluster with a replica each (joined
//! by `redis-cli`), each waited for until the topology agrees on the new master.

use std::time::{Duration, Instant};

use leasehold_redis_harness::{Join, RedisCluster, RedisSentinel, Reply};

#[test]
fn sentinel_fails_over_to_the_replica_and_keeps_the_data() {
    let topology = RedisSentinel::start().unwrap();
    assert_eq!(topology.sentinel_urls().len(), 3);
    let master = topology.master().unwrap();
    assert_eq!(master.port(), topology.servers()[0].port());
    master.command(["SET", "greeting", "hello"]).unwrap();
    // On the replica before the failover (a WAIT here would be on a connection of its own,
    // which wrote nothing: it would answer at once).
    topology.wait_replicated(Duration::from_secs(10)).unwrap();
    let started = Instant::now();
    let promoted = topology.failover(Duration::from_secs(30)).unwrap();
    eprintln!(
        "SENTINEL FAILOVER seen by every sentinel in {:?}",
        started.elapsed()
    );
    assert_eq!(promoted.port(), topology.servers()[1].port());
    assert_eq!(topology.master().unwrap().port(), promoted.port());
    assert_eq!(
        promoted.command(["GET", "greeting"]).unwrap().as_str(),
        Some("hello")
    );
    // The old master is left as it is: a sentinel turns it into a replica only at its next
    // look at it (every 10 s), which this test does not wait for.
}

#[test]
fn cluster_failover_promotes_the_replica_of_a_slot() {
    let cluster = RedisCluster::builder()
        .masters(3)
        .replicas(1)
        .join(Join::RedisCli)
        .args(["--cluster-node-timeout", "2000"])
        .start()
        .unwrap();
    assert_eq!(cluster.nodes().len(), 6);
    let slot = 12182; // "foo"
    let master = cluster.owner(slot).unwrap();
    master.command(["SET", "foo", "bar"]).unwrap();
    let replica = cluster.replica_of(master).unwrap().port();
    let started = Instant::now();
    let promoted = cluster.failover(slot, Duration::from_secs(30)).unwrap();
    eprintln!(
        "CLUSTER FAILOVER seen by every node in {:?}",
        started.elapsed()
    );
    assert_eq!(promoted.port(), replica);
    assert_eq!(cluster.owner(slot).unwrap().port(), replica);
    assert_eq!(
        promoted.command(["GET", "foo"]).unwrap().as_str(),
        Some("bar")
    );
    let moved = master.command(["SET", "foo", "x"]).unwrap();
    assert_eq!(
        moved,
        Reply::Error(format!("MOVED {slot} 127.0.0.1:{replica}"))
    );
}
