//! The Redis store: a state hash per command and the queue's stream, under one hash tag.
//!
//! Keys, for queue `q`: the stream `leasehold:{q}:stream` (consumer group `commands`), its dead
//! letters `leasehold:{q}:stream:dead`, one hash `leasehold:{q}:state:<id>` per command with
//! fields `v` (version), `status` and `state` (JSON), and one sorted set per status,
//! `leasehold:{q}:status:<STATUS>` (e.g. `leasehold:{q}:status:FAILED`), whose members are the
//! ids of the commands in it, scored by when they entered it (`status_changed_at`).
//!
//! Every state write is one script that also moves the id between the status indexes (submit
//! and requeue also add the stream entry), so an index never disagrees with the states but for
//! states that expired: a listing skips and removes those, and each submit drops the oldest
//! expired entries of every index. All keys share the hash tag `{q}`, so the scripts also run
//! on Redis Cluster (the listing reads the state hashes of the ids it pages through: same tag,
//! same slot). Cancels are announced on the channel `leasehold:{q}:cancels`.

use std::time::Duration;

use futures::StreamExt;
use leasehold_core::MAX_DURATION;
use leasehold_redis::{
    backend_error as redis_error, evalsha_cmd, key_slot, ConnectError, Connection, RedisBackend,
    RedisConfig, RedisConfigError, Servers, WaitReplicas,
};
use redis::Script;

use crate::state::{CommandState, Status};
use crate::store::{
    CancelFeed, CommandStore, Cursor, Listing, Page, StatusCounts, StoreError, Submit,
};
use crate::DEFAULT_TTL;

const SUBMIT: &str = concat!(
    include_str!("lua/index.lua"),
    include_str!("lua/submit.lua")
);
const CAS: &str = concat!(include_str!("lua/index.lua"), include_str!("lua/cas.lua"));
const LIST: &str = include_str!("lua/list.lua");
/// The stream entry's field (the stream backend's default).
const FIELD: &str = "data";
/// Index entries one listing call looks at beyond its page (expired ones it skips).
const LIST_BUDGET: usize = 1000;
/// The statuses in the order the scripts take their index keys (`lua/index.lua`).
const STATUSES: [Status; 5] = Status::ALL;

/// Where a [`RedisCommandStore`] lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisStoreConfig {
    servers: Servers,
    queue: String,
    group: String,
    ttl: Duration,
    command_timeout: Duration,
    wait: Option<(u32, Duration)>,
}

impl RedisStoreConfig {
    /// Queue `queue` on the Redis at `url` (`redis://[user:password@]host:port/db`). Defaults:
    /// consumer group `commands`, state TTL 7 days, 5 s command timeout.
    pub fn new(url: impl Into<String>, queue: impl Into<String>) -> Self {
        Self::with_servers(Servers::one(url), queue)
    }

    /// Queue `queue` on a Redis Cluster known by some of its nodes' URLs (see
    /// [`Servers::cluster`]); defaults as [`RedisStoreConfig::new`]. All of a queue's keys share
    /// one hash slot, so each queue lives on one master.
    #[cfg(feature = "cluster")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
    pub fn cluster<I, S>(nodes: I, queue: impl Into<String>) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::with_servers(Servers::cluster(nodes), queue)
    }

    /// Queue `queue` on the master named `master_name` in Redis Sentinel, found through the
    /// sentinels at `sentinel_urls` (see [`Servers::sentinel`]); defaults as
    /// [`RedisStoreConfig::new`]. The connections follow a failover.
    #[cfg(feature = "sentinel")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sentinel")))]
    pub fn sentinel<I, S>(
        sentinel_urls: I,
        master_name: impl Into<String>,
        queue: impl Into<String>,
    ) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::with_servers(Servers::sentinel(sentinel_urls, master_name), queue)
    }

    /// Queue `queue` on `servers`; defaults as [`RedisStoreConfig::new`].
    pub fn with_servers(servers: Servers, queue: impl Into<String>) -> Self {
        Self {
            servers,
            queue: queue.into(),
            group: "commands".into(),
            ttl: DEFAULT_TTL,
            command_timeout: Duration::from_secs(5),
            wait: None,
        }
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
    /// queue's workers' stream writes do too (see
    /// [`RedisConfig::wait_replicas`](leasehold_redis::RedisConfig::wait_replicas)). Off by
    /// default: without it, a failover can roll a command's state back to an earlier one
    /// (a result, a cancel, or the submit itself lost). A submit that failed so was written
    /// on the master all the same: submitting again is safe (idempotent by id).
    #[must_use]
    pub fn wait_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.wait = Some((replicas, timeout));
        self
    }

    fn waiting(&self) -> Option<WaitReplicas> {
        self.wait
            .map(|(replicas, timeout)| WaitReplicas::new(replicas, timeout))
    }

    /// The stream consumers' configuration: the queue's servers, stream and group.
    fn stream_config(&self) -> RedisConfig {
        let config =
            RedisConfig::with_servers(self.servers.clone(), stream_key(&self.queue), &self.group)
                .command_timeout(self.command_timeout);
        match self.wait {
            Some((replicas, timeout)) => config.wait_replicas(replicas, timeout),
            None => config,
        }
    }

    fn validate(&self) -> Result<(), RedisConfigError> {
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
        // The stream's own keys (dead letters, delayed messages), as its consumers derive them,
        // the servers and `wait_replicas`.
        self.stream_config().validate()?;
        // The store's keys, which its scripts touch with the stream.
        let status_keys = STATUSES.map(|status| status_key(&self.queue, status));
        let keys = std::iter::once(("state hash", state_key(&self.queue, "")))
            .chain(status_keys.into_iter().map(|key| ("status index", key)));
        in_stream_slot(&self.queue, keys)
    }
}

/// The queue's stream.
fn stream_key(queue: &str) -> String {
    format!("leasehold:{{{queue}}}:stream")
}

/// The hash holding command `id`'s state (with `id` empty: the prefix of them all).
fn state_key(queue: &str, id: &str) -> String {
    format!("leasehold:{{{queue}}}:state:{id}")
}

/// The index of the commands in `status`.
fn status_key(queue: &str, status: Status) -> String {
    format!("leasehold:{{{queue}}}:status:{status}")
}

/// Fails unless every key is in the cluster slot of `queue`'s stream. They all carry the hash
/// tag `{queue}`, so this holds for any queue name without braces; checked all the same, as a
/// script over keys of two slots fails on Redis Cluster (`CROSSSLOT`).
fn in_stream_slot(
    queue: &str,
    keys: impl IntoIterator<Item = (&'static str, String)>,
) -> Result<(), RedisConfigError> {
    let stream = stream_key(queue);
    let stream_slot = key_slot(stream.as_bytes());
    for (what, key) in keys {
        let slot = key_slot(key.as_bytes());
        if slot != stream_slot {
            return Err(RedisConfigError::CrossSlot {
                what,
                key,
                key_slot: slot,
                stream,
                stream_slot,
            });
        }
    }
    Ok(())
}

/// A command store on Redis: atomic submit and compare-and-set in Lua, stream consumed by
/// [`RedisBackend`]s, cancels announced over pub/sub.
#[derive(Clone)]
pub struct RedisCommandStore {
    config: RedisStoreConfig,
    conn: Connection,
    stream: String,
    channel: String,
    submit: Script,
    cas: Script,
    list: Script,
}

impl std::fmt::Debug for RedisCommandStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisCommandStore")
            .field("queue", &self.config.queue)
            .finish_non_exhaustive()
    }
}

impl RedisCommandStore {
    /// Connects (reconnecting on its own after a dropped connection).
    ///
    /// # Errors
    ///
    /// [`ConnectError::Config`] when the configuration cannot work (nothing is sent), and
    /// [`ConnectError::Redis`] when Redis cannot be reached or refuses the credentials.
    pub async fn connect(config: RedisStoreConfig) -> Result<Self, ConnectError> {
        config.validate()?;
        let timeout = config.command_timeout;
        // Fails at once on a wrong password or a bad TLS setup, as the backend does.
        config.servers.check_credentials(timeout).await?;
        let conn = config.servers.connect(timeout, Some(timeout)).await?;
        Ok(Self {
            stream: stream_key(&config.queue),
            channel: format!("leasehold:{{{}}}:cancels", config.queue),
            config,
            conn,
            submit: Script::new(SUBMIT),
            cas: Script::new(CAS),
            list: Script::new(LIST),
        })
    }

    /// The stream's key.
    pub fn stream_key(&self) -> &str {
        &self.stream
    }

    /// The key of command `id`'s state hash.
    pub fn state_key(&self, id: &str) -> String {
        state_key(&self.config.queue, id)
    }

    /// The key of the index of the commands in `status` (a sorted set of ids).
    pub fn status_key(&self, status: Status) -> String {
        status_key(&self.config.queue, status)
    }

    fn state_prefix(&self) -> String {
        self.state_key("")
    }

    fn ttl_ms(&self) -> u64 {
        u64::try_from(self.config.ttl.as_millis()).unwrap_or(u64::MAX)
    }

    /// A state-writing script's `EVALSHA` with its keys: the state hash, the stream, the
    /// status indexes.
    fn writing(&self, script: &Script, id: &str) -> redis::Cmd {
        let mut keys = vec![self.state_key(id), self.stream.clone()];
        keys.extend(STATUSES.map(|status| self.status_key(status)));
        evalsha_cmd(script, &keys)
    }

    /// Runs a state-writing script, followed by `WAIT` when `wait_replicas` is on.
    async fn write<T: redis::FromRedisValue>(
        &self,
        script: &Script,
        cmd: &redis::Cmd,
    ) -> redis::RedisResult<T> {
        self.conn
            .write(
                cmd,
                self.stream.as_bytes(),
                Some(script),
                self.config.waiting(),
            )
            .await
    }

    /// Compare-and-set, enqueueing `entry` too if there is one.
    async fn cas(&self, state: &CommandState, entry: Option<&[u8]>) -> Result<bool, StoreError> {
        let mut cmd = self.writing(&self.cas, &state.id);
        cmd.arg(state.version - 1)
            .arg(state.version)
            .arg(state.to_json())
            .arg(self.ttl_ms())
            .arg(&state.id)
            .arg(state.status.to_string())
            .arg(state.status_changed_at);
        if let Some(entry) = entry {
            cmd.arg(FIELD).arg(entry);
        }
        let what = if entry.is_some() {
            "requeue"
        } else {
            "compare-and-set"
        };
        let written: i64 = self
            .write(&self.cas, &cmd)
            .await
            .map_err(|e| redis_error(what, e))?;
        Ok(written == 1)
    }
}

/// A sorted-set score as Redis prints it: the integer it was written as.
fn parse_score(score: &str) -> Result<u64, StoreError> {
    score
        .parse::<u64>()
        .ok()
        .or_else(|| {
            // Printed as a float (`1e+20`): whole milliseconds all the same.
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            score.parse::<f64>().ok().map(|f| f as u64)
        })
        .ok_or_else(|| StoreError::fatal(format!("a status index score is not a number: {score}")))
}

fn decode(json: &str) -> Result<CommandState, StoreError> {
    serde_json::from_str(json)
        .map_err(|e| StoreError::fatal("a stored state is not valid JSON").with_source(e))
}

impl CommandStore for RedisCommandStore {
    type Backend = RedisBackend;
    type Payload = bytes::Bytes;

    fn queue(&self) -> &str {
        &self.config.queue
    }

    async fn submit(&self, state: &CommandState, entry: &[u8]) -> Result<Submit, StoreError> {
        let mut cmd = self.writing(&self.submit, &state.id);
        cmd.arg(state.version)
            .arg(state.to_json())
            .arg(self.ttl_ms())
            .arg(FIELD)
            .arg(entry)
            .arg(&state.id)
            .arg(state.status.to_string())
            .arg(state.status_changed_at)
            .arg(self.state_prefix());
        let (created, existing): (i64, Option<String>) = self
            .write(&self.submit, &cmd)
            .await
            .map_err(|e| redis_error("submit", e))?;
        match (created, existing) {
            (1, _) => Ok(Submit::Created),
            (_, Some(json)) => Ok(Submit::Exists(Box::new(decode(&json)?))),
            (_, None) => Err(StoreError::fatal("submit script: unexpected reply")),
        }
    }

    async fn load(&self, id: &str) -> Result<Option<CommandState>, StoreError> {
        let json: Option<String> = redis::cmd("HGET")
            .arg(self.state_key(id))
            .arg("state")
            .query_async(&mut self.conn.clone())
            .await
            .map_err(|e| redis_error("load", e))?;
        json.as_deref().map(decode).transpose()
    }

    async fn compare_and_set(&self, state: &CommandState) -> Result<bool, StoreError> {
        self.cas(state, None).await
    }

    async fn requeue(&self, state: &CommandState, entry: &[u8]) -> Result<bool, StoreError> {
        self.cas(state, Some(entry)).await
    }

    async fn counts(&self) -> Result<StatusCounts, StoreError> {
        let mut pipe = redis::pipe();
        for status in Status::ALL {
            pipe.zcard(self.status_key(status));
        }
        let counts: Vec<u64> = pipe
            .query_async(&mut self.conn.clone())
            .await
            .map_err(|e| redis_error("counts", e))?;
        let mut all = [0; 5];
        for (slot, count) in all.iter_mut().zip(counts) {
            *slot = count;
        }
        Ok(StatusCounts::new(all))
    }

    async fn list(&self, status: Status, page: &Page) -> Result<Listing, StoreError> {
        let limit = page.effective_limit();
        let (at, after) = match &page.after {
            Some(cursor) => (cursor.at.to_string(), cursor.id.as_str()),
            None => (String::new(), ""),
        };
        let (more, score, id, states): (i64, String, String, Vec<String>) = self
            .list
            .key(self.status_key(status))
            .arg(self.state_prefix())
            .arg(status.to_string())
            .arg(limit)
            .arg(at)
            .arg(after)
            .arg(limit + 1 + LIST_BUDGET)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| redis_error("list", e))?;
        let states = states
            .iter()
            .map(|json| decode(json))
            .collect::<Result<Vec<_>, _>>()?;
        let next = if more == 1 {
            Some(Cursor {
                at: parse_score(&score)?,
                id,
            })
        } else {
            None
        };
        Ok(Listing { states, next })
    }

    async fn announce_cancel(&self, id: &str) -> Result<(), StoreError> {
        redis::cmd("PUBLISH")
            .arg(&self.channel)
            .arg(id)
            .query_async::<i64>(&mut self.conn.clone())
            .await
            .map(drop)
            .map_err(|e| redis_error("announce cancel", e))
    }

    async fn cancels(&self) -> Result<CancelFeed, StoreError> {
        let mut pubsub = self.config.servers.pubsub().await?;
        pubsub
            .subscribe(&self.channel)
            .await
            .map_err(|e| redis_error("subscribe", e))?;
        Ok(Box::pin(pubsub.into_on_message().filter_map(
            |msg| async move { msg.get_payload::<String>().ok() },
        )))
    }

    async fn consumer(&self, claim_timeout: Duration) -> Result<RedisBackend, StoreError> {
        let config = self.config.stream_config().claim_timeout(claim_timeout);
        Ok(RedisBackend::connect(config).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_of_a_queue_shares_its_stream_slot() {
        let config = RedisStoreConfig::new("redis://x", "jobs");
        assert_eq!(config.validate(), Ok(()));
        let slot = key_slot(b"leasehold:{jobs}:stream");
        for key in [
            stream_key("jobs"),
            format!("{}:dead", stream_key("jobs")),
            state_key("jobs", "any{id}"),
            status_key("jobs", Status::Failed),
        ] {
            assert_eq!(key_slot(key.as_bytes()), slot, "{key}");
        }
        assert_eq!(stream_key("jobs"), "leasehold:{jobs}:stream");
        assert_eq!(state_key("jobs", "7"), "leasehold:{jobs}:state:7");
    }

    #[test]
    fn keys_in_another_slot_are_named_in_the_error() {
        let err = in_stream_slot("jobs", [("status index", "elsewhere".to_string())]).unwrap_err();
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
