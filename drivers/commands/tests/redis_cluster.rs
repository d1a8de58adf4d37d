//! The command-queue scenarios on a 3-master Redis Cluster started by the harness (tokio): the
//! store is given one master only, and the queue's keys (one hash tag) live on another
//! master, so every call is routed there and `MOVED` would show if it were not.

mod common;

use common::Fixture;
use leasehold_commands::{RedisCommandStore, RedisStoreConfig};
use leasehold_redis::{key_slot, Servers};
use leasehold_redis_harness::{RedisCluster, RedisServer};

/// A queue named so that its keys' slot is served by the cluster's second master.
struct Cluster {
    cluster: RedisCluster,
    queue: String,
}

impl Cluster {
    fn stream(&self) -> String {
        format!("leasehold:{{{}}}:stream", self.queue)
    }

    fn owner(&self) -> &RedisServer {
        self.cluster
            .owner(key_slot(self.stream().as_bytes()))
            .expect("the slot is served")
    }
}

impl Fixture for Cluster {
    type Store = RedisCommandStore;

    async fn store(&self) -> RedisCommandStore {
        // The first master only: the client discovers the others from it.
        let first = self.cluster.masters()[0].url();
        let config = RedisStoreConfig::with_servers(Servers::cluster([first]), &self.queue);
        RedisCommandStore::connect(config)
            .await
            .expect("connect the command store to the cluster")
    }

    async fn pending(&self) -> usize {
        let reply = self
            .owner()
            .command(["XPENDING", self.stream().as_str(), "commands"])
            .expect("XPENDING on the queue's master");
        let count = reply.as_array().and_then(|fields| fields.first()?.as_int());
        usize::try_from(count.unwrap_or_else(|| panic!("XPENDING: {reply:?}"))).unwrap()
    }
}

fn fixture() -> Cluster {
    let cluster =
        RedisCluster::start(3).unwrap_or_else(|e| panic!("cannot start a Redis Cluster: {e}"));
    let second = cluster.masters()[1].port();
    let queue = (0..)
        .map(|i| format!("cmds{i}"))
        .find(|queue| {
            let slot = key_slot(format!("leasehold:{{{queue}}}:stream").as_bytes());
            cluster.owner(slot).expect("the slot is served").port() == second
        })
        .expect("some name hashes to the second master");
    let fixture = Cluster { cluster, queue };
    assert_ne!(fixture.owner().port(), fixture.cluster.masters()[0].port());
    fixture
}

scenarios!(
    fixture();
    succeeds_with_a_typed_result,
    cancel_before_pickup_and_after_the_end,
    cancel_reaches_running_commands,
    crash_failover_resumes_with_check_status,
    commands_are_listed_by_status_as_they_move,
);
