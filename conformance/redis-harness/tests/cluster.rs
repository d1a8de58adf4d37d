//! The cluster harness against real `redis-server`s: a 3-master cluster joined by `redis-cli`,
//! one with replicas joined by the harness's own commands, keys landing on the node that owns
//! their slot, cleanup on drop, and the errors a test author would meet.

use leasehold_redis_harness::{Error, Join, RedisCluster, Reply};

fn slot_of(cluster: &RedisCluster, key: &str) -> u16 {
    let reply = cluster.nodes()[0]
        .command(["CLUSTER", "KEYSLOT", key])
        .unwrap();
    u16::try_from(reply.as_int().unwrap()).unwrap()
}

/// `n` keys whose slots are served by `n` different masters.
fn keys_on_distinct_masters(cluster: &RedisCluster) -> Vec<(String, u16, u16)> {
    let mut found: Vec<(String, u16, u16)> = Vec::new();
    for i in 0.. {
        let key = format!("key:{i}");
        let slot = slot_of(cluster, &key);
        let port = cluster.owner(slot).unwrap().port();
        if found.iter().all(|(_, _, p)| *p != port) {
            found.push((key, slot, port));
        }
        if found.len() == cluster.masters().len() {
            return found;
        }
    }
    unreachable!()
}

#[test]
fn three_masters_share_the_slots_and_redirect_to_each_other() {
    let cluster = RedisCluster::builder()
        .masters(3)
        .join(Join::RedisCli)
        .start()
        .unwrap();
    assert_eq!(cluster.nodes().len(), 3);
    assert_eq!(cluster.masters().len(), 3);
    assert!(cluster.replicas().is_empty());
    assert_eq!(cluster.urls().len(), 3);
    for node in cluster.nodes() {
        let info = node.command(["CLUSTER", "INFO"]).unwrap();
        let info = info.as_str().unwrap();
        assert!(info.contains("cluster_state:ok"), "{info}");
        assert!(info.contains("cluster_size:3"), "{info}");
    }

    let keys = keys_on_distinct_masters(&cluster);
    for (key, slot, port) in &keys {
        let owner = cluster.owner(*slot).unwrap();
        assert_eq!(owner.port(), *port);
        assert_eq!(
            owner.command(["SET", key.as_str(), "v"]).unwrap(),
            Reply::Simple("OK".into())
        );
        // Every other node sends the client to the owner.
        for node in cluster.nodes().iter().filter(|n| n.port() != *port) {
            let reply = node.command(["GET", key.as_str()]).unwrap();
            assert_eq!(
                reply,
                Reply::Error(format!("MOVED {slot} 127.0.0.1:{port}")),
                "{key} asked of port {}",
                node.port()
            );
        }
    }
    // Keys of two slots in one command: refused, even on a node owning one of them.
    let (a, b) = (&keys[0].0, &keys[1].0);
    let owner = cluster.owner(keys[0].1).unwrap();
    let reply = owner.command(["MGET", a.as_str(), b.as_str()]).unwrap();
    assert!(
        matches!(&reply, Reply::Error(e) if e.starts_with("CROSSSLOT")),
        "{reply:?}"
    );

    let dirs: Vec<_> = cluster
        .nodes()
        .iter()
        .map(|n| n.dir().to_path_buf())
        .collect();
    drop(cluster);
    for dir in dirs {
        assert!(!dir.exists(), "{} still exists", dir.display());
    }
}

#[test]
fn replicas_follow_their_masters_when_joined_by_commands() {
    let cluster = RedisCluster::builder()
        .masters(2)
        .replicas(1)
        .join(Join::Commands)
        .start()
        .unwrap();
    assert_eq!(cluster.nodes().len(), 4);
    assert_eq!(cluster.replicas().len(), 2);
    for replica in cluster.replicas() {
        let info = replica.command(["INFO", "replication"]).unwrap();
        let info = info.as_str().unwrap();
        assert!(info.contains("role:slave"), "{info}");
        assert!(info.contains("master_link_status:up"), "{info}");
    }
    let slot = slot_of(&cluster, "greeting");
    let owner = cluster.owner(slot).unwrap();
    assert!(cluster.masters().iter().any(|m| m.port() == owner.port()));
    owner.command(["SET", "greeting", "hello"]).unwrap();
    // Its replica has it once replicated, and redirects writes. (A WAIT would not say when:
    // sent on a connection of its own, which wrote nothing, it answers at once.)
    let owner_id = owner.command(["CLUSTER", "MYID"]).unwrap();
    let replica = cluster
        .replicas()
        .iter()
        .find(|r| {
            let nodes = r.command(["CLUSTER", "NODES"]).unwrap();
            let nodes = nodes.as_str().unwrap().to_owned();
            nodes
                .lines()
                .any(|l| l.contains("myself") && l.contains(owner_id.as_str().unwrap()))
        })
        .expect("the owner has a replica");
    let moved = replica.command(["SET", "greeting", "x"]).unwrap();
    assert_eq!(
        moved,
        Reply::Error(format!("MOVED {slot} 127.0.0.1:{}", owner.port()))
    );
    // A replica serves reads of its master's slots to a client that says READONLY; the
    // harness's one-command connections cannot, so read the count of keys it holds.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while replica.command(["DBSIZE"]).unwrap() != Reply::Integer(1) {
        assert!(
            std::time::Instant::now() < deadline,
            "the key never reached the replica"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    cluster.stop().unwrap();
    assert!(cluster.nodes().iter().all(|n| !n.is_running()));
}

#[test]
fn a_cluster_needs_a_master() {
    let err = RedisCluster::start(0).unwrap_err();
    assert!(matches!(err, Error::ClusterSetup { .. }), "{err:?}");
    assert!(err.to_string().contains("at least one master"), "{err}");
}

#[test]
fn missing_redis_cli_says_how_to_install_it() {
    let err = RedisCluster::builder()
        .cli("/nonexistent/redis-cli")
        .join(Join::RedisCli)
        .start()
        .unwrap_err();
    assert!(matches!(err, Error::CliNotInstalled { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("/nonexistent/redis-cli"), "{msg}");
    assert!(
        msg.contains("apt-get install -y redis-server redis-tools"),
        "{msg}"
    );
}

#[test]
fn missing_redis_server_says_how_to_install_it() {
    let err = RedisCluster::builder()
        .binary("/nonexistent/redis-server")
        .start()
        .unwrap_err();
    assert!(matches!(err, Error::NotInstalled { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("apt-get install -y redis-server redis-tools"),
        "{err}"
    );
}
