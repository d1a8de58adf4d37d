//! Where a command queue lives on Redis, and the checks that its keys can work together.

use std::time::Duration;

use leasehold_commands::DEFAULT_TTL;
use leasehold_core::{ShardError, Shards, MAX_DURATION};

use super::STATUSES;
use crate::config::RedisConfig;
use crate::conn::Servers;
use crate::error::RedisConfigError;
use crate::keys::{self, command_state_key, command_status_key, command_stream_key};
use crate::replicas::WaitReplicas;

/// Where a [`RedisCommandStore`](crate::RedisCommandStore) lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisStoreConfig {
    pub(super) servers: Servers,
    pub(super) queue: String,
    shards: u16,
    group: String,
    pub(super) ttl: Duration,
    pub(super) command_timeout: Duration,
    wait: Option<WaitReplicas>,
}

impl RedisStoreConfig {
    /// Queue `queue` on `servers`: a URL (`redis://[user:password@]host:port/db`), or
    /// [`Servers::cluster`] (all of a queue's keys share one hash slot, so each queue lives on
    /// one master) / [`Servers::sentinel`] (the connections follow a failover). Defaults:
    /// consumer group `commands`, state TTL 7 days, 5 s command timeout.
    pub fn new(servers: impl Into<Servers>, queue: impl Into<String>) -> Self {
        Self {
            servers: servers.into(),
            queue: queue.into(),
            shards: 1,
            group: "commands".into(),
            ttl: DEFAULT_TTL,
            command_timeout: Duration::from_secs(5),
            wait: None,
        }
    }

    /// Spreads the queue over `count` shards (default 1), each with its own stream, states and
    /// status indexes under its own hash tag, so that on a Redis Cluster they spread over the
    /// masters; command `id` lives in shard [`Shards::for_key`]`(id)`. Every client and worker
    /// of a queue must use the same count (a command is looked for in its shard only).
    ///
    /// # Errors
    ///
    /// A count outside `1..=`[`MAX_SHARDS`](leasehold_core::MAX_SHARDS), or a queue name that
    /// cannot be sharded (empty, or with a brace).
    pub fn shards(mut self, count: u32) -> Result<Self, ShardError> {
        self.shards = Shards::new(self.queue.clone(), count)?.count();
        Ok(self)
    }

    /// The queue's shards (one for an unsharded queue).
    pub fn shard_count(&self) -> u16 {
        self.shards
    }

    /// How long a state is kept after its last write (refreshed by every write).
    #[must_use]
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// The stream's consumer group (all workers of one queue share it).
    #[must_use]
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.group = group.into();
        self
    }

    /// Bound on one Redis command's response.
    #[must_use]
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout;
        self
    }

    /// Every state write (submit, compare-and-set, requeue) waits until at least `replicas`
    /// replicas acknowledged it, up to `timeout`, and fails (transient) when fewer did; the
    /// queue's workers' stream writes do too (see [`RedisConfig::wait_replicas`]). Off by
    /// default: without it, a failover can roll a command's state back to an earlier one
    /// (a result, a cancel, or the submit itself lost). A submit that failed so was written
    /// on the master all the same: submitting again is safe (idempotent by id).
    #[must_use]
    pub fn wait_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.wait = Some(WaitReplicas::new(replicas, timeout));
        self
    }

    pub(super) fn waiting(&self) -> Option<WaitReplicas> {
        self.wait
    }

    /// The configuration of `stream`'s consumers: the queue's servers, group, command timeout
    /// and `wait_replicas`.
    pub(super) fn stream_config(&self, stream: &str) -> RedisConfig {
        let config = RedisConfig::new(self.servers.clone(), stream, &self.group)
            .command_timeout(self.command_timeout);
        match self.wait {
            Some(wait) => config.wait_replicas(wait.replicas(), wait.timeout()),
            None => config,
        }
    }

    pub(super) fn validate(&self) -> Result<(), RedisConfigError> {
        if self.queue.is_empty() {
            return Err(RedisConfigError::Empty("queue"));
        }
        if self.queue.contains(['{', '}']) {
            return Err(RedisConfigError::BraceInTag {
                what: "queue",
                name: self.queue.clone(),
            });
        }
        if self.group.is_empty() {
            return Err(RedisConfigError::Empty("group"));
        }
        if self.ttl < Duration::from_millis(1) || self.ttl > MAX_DURATION {
            return Err(RedisConfigError::Ttl(self.ttl));
        }
        if self.command_timeout.is_zero() {
            return Err(RedisConfigError::ZeroCommandTimeout);
        }
        for tag in self.tags() {
            // The stream's own keys (dead letters, delayed messages), as its consumers derive
            // them, the servers and `wait_replicas`.
            self.stream_config(&command_stream_key(&tag)).validate()?;
            // The store's keys, which its scripts touch with the stream.
            let status_keys = STATUSES.map(|status| command_status_key(&tag, status));
            let keys = std::iter::once(("state hash", command_state_key(&tag, "")))
                .chain(status_keys.into_iter().map(|key| ("status index", key)));
            in_stream_slot(&tag, keys)?;
        }
        Ok(())
    }

    /// The routing of command ids to shards.
    pub(super) fn routing(&self) -> Shards {
        // Validated: a queue name without braces, a count in range.
        Shards::new(self.queue.clone(), u32::from(self.shards.max(1)))
            .unwrap_or_else(|_| Shards::new("commands", 1).expect("a valid name"))
    }

    /// Every shard's hash tag, shard 0 first: `{q}` for one shard, `{q:i}` for several.
    pub(super) fn tags(&self) -> Vec<String> {
        if self.shards <= 1 {
            return vec![format!("{{{}}}", self.queue)];
        }
        self.routing().streams().collect()
    }
}

/// Fails unless every key is in the cluster slot of the stream tagged `tag`. They all carry
/// the hash tag, so this holds for any queue name without braces; checked all the same, as a
/// script over keys of two slots fails on Redis Cluster (`CROSSSLOT`).
fn in_stream_slot(
    tag: &str,
    keys: impl IntoIterator<Item = (&'static str, String)>,
) -> Result<(), RedisConfigError> {
    let stream = command_stream_key(tag);
    keys.into_iter()
        .try_for_each(|(what, key)| keys::in_stream_slot(&stream, what, key).map(drop))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slot::key_slot;
    use leasehold_commands::Status;

    #[test]
    fn every_key_of_a_queue_shares_its_stream_slot() {
        let config = RedisStoreConfig::new("redis://x", "jobs");
        assert_eq!(config.validate(), Ok(()));
        let slot = key_slot(b"leasehold:{jobs}:stream");
        for key in [
            command_stream_key("{jobs}"),
            format!("{}:dead", command_stream_key("{jobs}")),
            command_state_key("{jobs}", "any{id}"),
            command_status_key("{jobs}", Status::Failed),
        ] {
            assert_eq!(key_slot(key.as_bytes()), slot, "{key}");
        }
        assert_eq!(config.tags(), ["{jobs}"], "one shard: the unsharded layout");
        assert_eq!(command_stream_key("{jobs}"), "leasehold:{jobs}:stream");
        assert_eq!(command_state_key("{jobs}", "7"), "leasehold:{jobs}:state:7");
    }

    #[test]
    fn each_shard_has_its_keys_in_its_own_slot() {
        let config = RedisStoreConfig::new("redis://x", "jobs")
            .shards(4)
            .unwrap();
        assert_eq!(config.validate(), Ok(()));
        let tags = config.tags();
        assert_eq!(tags, ["{jobs:0}", "{jobs:1}", "{jobs:2}", "{jobs:3}"]);
        for tag in &tags {
            let slot = key_slot(command_stream_key(tag).as_bytes());
            assert_eq!(slot, key_slot(tag.trim_matches(['{', '}']).as_bytes()));
            for key in [
                command_state_key(tag, "x"),
                command_status_key(tag, Status::Running),
            ] {
                assert_eq!(key_slot(key.as_bytes()), slot, "{key}");
            }
        }
        assert_eq!(command_stream_key(&tags[2]), "leasehold:{jobs:2}:stream");
        assert_eq!(
            RedisStoreConfig::new("redis://x", "jobs")
                .shards(1)
                .unwrap()
                .tags(),
            ["{jobs}"]
        );
    }

    #[test]
    fn bad_shard_counts_and_names_are_errors() {
        let config = || RedisStoreConfig::new("redis://x", "jobs");
        assert_eq!(config().shards(0).unwrap_err(), ShardError::Count(0));
        assert_eq!(config().shards(5000).unwrap_err(), ShardError::Count(5000));
        let braced = RedisStoreConfig::new("redis://x", "a{b}").shards(2);
        assert!(matches!(braced, Err(ShardError::Brace(_))));
        assert_eq!(config().shards(3).unwrap().shard_count(), 3);
    }

    #[test]
    fn keys_in_another_slot_are_named_in_the_error() {
        let err =
            in_stream_slot("{jobs}", [("status index", "elsewhere".to_string())]).unwrap_err();
        assert_eq!(
            err,
            RedisConfigError::CrossSlot {
                what: "status index",
                key: "elsewhere".into(),
                key_slot: key_slot(b"elsewhere"),
                stream: "leasehold:{jobs}:stream".into(),
                stream_slot: key_slot(b"jobs"),
            }
        );
        assert!(err.to_string().contains("\"elsewhere\""), "{err}");
    }
}
