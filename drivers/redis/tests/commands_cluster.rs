//! The command-queue scenarios on a 3-master Redis Cluster started by the harness (tokio): the
//! store is given one master only, and the queue's keys (one hash tag) live on another
//! master, so every call is routed there and `MOVED` would show if it were not.

// The command queue's scenarios are leasehold-commands' own, written once for every store:
// included from there, run here on the Redis store.
#[path = "../../commands/tests/common/mod.rs"]
mod common;

use common::Fixture;
use leasehold_redis::{RedisCommandStore, RedisStoreConfig, Servers};
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
            .owner(
                self.cluster
                    .key_slot(&self.stream())
                    .expect("CLUSTER KEYSLOT"),
            )
            .expect("the slot is served")
    }
}

impl Fixture for Cluster {
    type Store = RedisCommandStore;

    async fn store(&self) -> RedisCommandStore {
        // The first master only: the client discovers the others from it.
        let first = self.cluster.masters()[0].url();
        let config = RedisStoreConfig::new(Servers::cluster([first]), &self.queue);
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
            let slot = cluster
                .key_slot(&format!("leasehold:{{{queue}}}:stream"))
                .expect("CLUSTER KEYSLOT");
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

/// The queue over 6 shards on the 3 masters, named so that every master serves some shard:
/// every call of a command is routed to its shard's master.
mod sharded {
    use std::collections::BTreeSet;

    use super::common::{self, Fixture, ShardedFixture};
    use crate::scenarios;
    use leasehold_core::Shards;
    use leasehold_redis::{RedisCommandStore, RedisStoreConfig, Servers};
    use leasehold_redis_harness::{RedisCluster, RedisServer};

    const SHARDS: u32 = 6;

    struct Sharded {
        cluster: RedisCluster,
        shards: Shards,
    }

    impl Sharded {
        fn stream(&self, shard: u16) -> String {
            format!("leasehold:{}:stream", self.shards.stream(shard))
        }

        fn owner(&self, shard: u16) -> &RedisServer {
            self.cluster
                .owner(
                    self.cluster
                        .key_slot(&self.stream(shard))
                        .expect("CLUSTER KEYSLOT"),
                )
                .expect("the slot is served")
        }

        fn int(&self, shard: u16, args: &[&str]) -> usize {
            let reply = self.owner(shard).command(args).expect("redis answers");
            let n = reply
                .as_int()
                .or_else(|| reply.as_array()?.first()?.as_int());
            usize::try_from(n.unwrap_or_else(|| panic!("{args:?}: {reply:?}"))).unwrap()
        }
    }

    impl Fixture for Sharded {
        type Store = RedisCommandStore;

        async fn store(&self) -> RedisCommandStore {
            let first = self.cluster.masters()[0].url();
            let config = RedisStoreConfig::new(Servers::cluster([first]), self.shards.queue())
                .shards(SHARDS)
                .expect("6 shards of a valid name");
            RedisCommandStore::connect(config)
                .await
                .expect("connect the sharded command store to the cluster")
        }

        async fn pending(&self) -> usize {
            (0..self.shards.count())
                .map(|i| self.int(i, &["XPENDING", &self.stream(i), "commands"]))
                .sum()
        }
    }

    impl ShardedFixture for Sharded {
        fn shard_count(&self) -> u16 {
            self.shards.count()
        }

        fn shard_of(&self, id: &str) -> u16 {
            self.shards.for_key(id.as_bytes())
        }

        async fn shard_lengths(&self) -> Vec<usize> {
            (0..self.shards.count())
                .map(|i| self.int(i, &["XLEN", &self.stream(i)]))
                .collect()
        }
    }

    fn fixture() -> Sharded {
        let cluster =
            RedisCluster::start(3).unwrap_or_else(|e| panic!("cannot start a Redis Cluster: {e}"));
        let shards = (0..)
            .map(|i| Shards::new(format!("cmds{i}"), SHARDS).expect("a valid name"))
            .find(|shards| {
                let owners: BTreeSet<u16> = shards
                    .streams()
                    .map(|tag| {
                        let slot = cluster
                            .key_slot(&format!("leasehold:{tag}:stream"))
                            .expect("CLUSTER KEYSLOT");
                        cluster.owner(slot).expect("the slot is served").port()
                    })
                    .collect();
                owners.len() == 3
            })
            .expect("some name spreads its shards over every master");
        Sharded { cluster, shards }
    }

    scenarios!(
        fixture();
        sharded_commands_run_cancel_and_retry_across_shards,
        cancel_reaches_running_commands,
        crash_failover_resumes_with_check_status,
        commands_are_listed_by_status_as_they_move,
    );
}
