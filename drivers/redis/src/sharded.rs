//! Sharded queues on Redis: a backend (and a publisher) per shard over one command connection,
//! and the queue's membership, a sorted set.
//!
//! | key | type | holds |
//! |---|---|---|
//! | `{queue:i}` (and its `{queue:i}:…` keys) | stream | shard `i`, a stream like any other |
//! | `{queue}:members` | sorted set | the live workers: member = consumer name, score = the server's `TIME` (Unix ms) of its last heartbeat; expires after twice the member ttl without one |
//!
//! Each shard's keys share the shard's slot, and the shards' slots spread over a cluster's
//! masters; the membership set is a key of its own, touched by one script at a time.

use std::sync::LazyLock;
use std::time::Duration;

use leasehold_core::{BackendResult, Members, Shards};
use redis::Script;

use crate::backend::RedisBackend;
use crate::config::{unique_consumer_name, PublisherConfig, RedisConfig};
use crate::error::error;
use crate::error::ConnectError;
use crate::publisher::RedisPublisher;

static MEMBERS: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("lua/members.lua")));

/// The membership key of sharded queue `queue`: `{queue}:members`, a sorted set of consumer
/// names scored by the Redis server's clock (Unix ms) at their last heartbeat.
pub fn members_key(queue: &str) -> String {
    format!("{{{queue}}}:members")
}

impl RedisBackend {
    /// A backend for every shard of `shards`, in shard order, for
    /// `WorkerBuilder::sharded`: `config` with its stream replaced by each shard's, all of
    /// one consumer (the config's name, or one unique name for all).
    ///
    /// Connections: the shards share **one** command connection (scripts, renews, acks,
    /// membership; on a cluster, one link per master), and each opens its blocking connection
    /// only when it first waits for new entries, and closes it while its shard is assigned to
    /// other workers. A worker so holds 1 + (shards it fetches from) connections (on a
    /// cluster, each of those a link per master), not two per shard.
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect), for the first shard that fails.
    pub async fn connect_shards(
        config: RedisConfig,
        shards: &Shards,
    ) -> Result<Vec<Self>, ConnectError> {
        let consumer = config.consumer.clone().unwrap_or_else(unique_consumer_name);
        let configs: Vec<RedisConfig> = shards
            .streams()
            .map(|stream| {
                let mut shard = config.clone().consumer(consumer.clone());
                shard.target.stream = stream;
                shard
            })
            .collect();
        for shard in &configs {
            shard.validate()?;
        }
        let servers = &config.target.servers;
        let timeout = config.target.command_timeout;
        servers.check_credentials(timeout).await?;
        let commands = servers.connect(timeout, Some(timeout)).await?;
        let mut backends = Vec::with_capacity(configs.len());
        for shard in configs {
            backends.push(Self::set_up(shard, commands.clone(), None).await?);
        }
        Ok(backends)
    }
}

impl RedisPublisher {
    /// A publisher for every shard of `shards`, in shard order, for `ShardedProducer`:
    /// `config` with its stream replaced by each shard's, over one shared connection.
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect).
    pub async fn connect_shards(
        config: PublisherConfig,
        shards: &Shards,
    ) -> Result<Vec<Self>, ConnectError> {
        let configs: Vec<PublisherConfig> = shards
            .streams()
            .map(|stream| {
                let mut shard = config.clone();
                shard.stream = stream;
                shard
            })
            .collect();
        for shard in &configs {
            shard.validate()?;
        }
        let timeout = config.command_timeout;
        config.servers.check_credentials(timeout).await?;
        let commands = config.servers.connect(timeout, Some(timeout)).await?;
        configs
            .into_iter()
            .map(|shard| Self::from_parts(shard, commands.clone()))
            .collect()
    }
}

/// The membership of the sharded queue this backend's stream is a shard of, in
/// [`members_key`]: one script per heartbeat (`ZADD` at the server's `TIME`, forget the
/// silent, answer the live).
impl Members for RedisBackend {
    fn member(&self) -> &str {
        self.consumer_name()
    }

    fn shard(&self) -> Option<(&str, u16)> {
        Shards::parse(self.stream_key())
    }

    async fn heartbeat(&self, queue: &str, ttl: Duration) -> BackendResult<Vec<String>> {
        let mut invocation = MEMBERS.prepare_invoke();
        invocation
            .key(members_key(queue))
            .arg(self.consumer_name())
            .arg(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1));
        invocation
            .invoke_async(&mut self.command_connection().clone())
            .await
            .map_err(|e| error("membership heartbeat", e))
    }

    async fn leave(&self, queue: &str) -> BackendResult<()> {
        redis::cmd("ZREM")
            .arg(members_key(queue))
            .arg(self.consumer_name())
            .query_async::<()>(&mut self.command_connection().clone())
            .await
            .map_err(|e| error("leave the membership", e))
    }
}
