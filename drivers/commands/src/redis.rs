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
//!
//! A queue of `n > 1` shards ([`RedisStoreConfig::shards`]) has these keys once per shard `i`,
//! under the shard's own hash tag `{q:i}` ([`Shards::stream`]): `leasehold:{q:i}:stream`,
//! `leasehold:{q:i}:state:<id>`, `leasehold:{q:i}:status:<STATUS>`. Command `id` lives wholly
//! in shard [`Shards::for_key`]`(id)`: its state, its index entries and its stream entries, so
//! each script still touches one slot, and on a Redis Cluster the shards spread over the
//! masters. One shard is the layout above, key for key. Cancels share the one channel (pub/sub
//! reaches every node of a cluster).

use std::time::Duration;

use futures::StreamExt;
use leasehold_core::{ShardError, Shards, MAX_DURATION};
use leasehold_redis::{
    backend_error as redis_error, evalsha_cmd, key_slot, ConnectError, Connection, RedisBackend,
    RedisConfig, RedisConfigError, Servers, WaitReplicas,
};
use redis::Script;

use crate::state::{CommandState, Status};
use crate::store::{
    merge_listings, CancelFeed, CommandStore, Cursor, Listing, Page, StatusCounts, StoreError,
    Submit,
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
    shards: u16,
    group: String,
    ttl: Duration,
    command_timeout: Duration,
    wait: Option<(u32, Duration)>,
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

    /// The configuration of `stream`'s consumers: the queue's servers, group, command timeout
    /// and `wait_replicas`.
    fn stream_config(&self, stream: &str) -> RedisConfig {
        let config = RedisConfig::new(self.servers.clone(), stream, &self.group)
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
        for tag in self.tags() {
            // The stream's own keys (dead letters, delayed messages), as its consumers derive
            // them, the servers and `wait_replicas`.
            self.stream_config(&stream_key(&tag)).validate()?;
            // The store's keys, which its scripts touch with the stream.
            let status_keys = STATUSES.map(|status| status_key(&tag, status));
            let keys = std::iter::once(("state hash", state_key(&tag, "")))
                .chain(status_keys.into_iter().map(|key| ("status index", key)));
            in_stream_slot(&tag, keys)?;
        }
        Ok(())
    }

    /// The routing of command ids to shards.
    fn routing(&self) -> Shards {
        // Validated: a queue name without braces, a count in range.
        Shards::new(self.queue.clone(), u32::from(self.shards.max(1)))
            .unwrap_or_else(|_| Shards::new("commands", 1).expect("a valid name"))
    }

    /// Every shard's hash tag, shard 0 first: `{q}` for one shard, `{q:i}` for several.
    fn tags(&self) -> Vec<String> {
        if self.shards <= 1 {
            return vec![format!("{{{}}}", self.queue)];
        }
        self.routing().streams().collect()
    }
}

/// The stream of the shard tagged `tag` (`{q}` or `{q:i}`).
fn stream_key(tag: &str) -> String {
    format!("leasehold:{tag}:stream")
}

/// The hash holding command `id`'s state (with `id` empty: the prefix of them all).
fn state_key(tag: &str, id: &str) -> String {
    format!("leasehold:{tag}:state:{id}")
}

/// The index of the commands in `status`.
fn status_key(tag: &str, status: Status) -> String {
    format!("leasehold:{tag}:status:{status}")
}

/// Fails unless every key is in the cluster slot of the stream tagged `tag`. They all carry
/// the hash tag, so this holds for any queue name without braces; checked all the same, as a
/// script over keys of two slots fails on Redis Cluster (`CROSSSLOT`).
fn in_stream_slot(
    tag: &str,
    keys: impl IntoIterator<Item = (&'static str, String)>,
) -> Result<(), RedisConfigError> {
    let stream = stream_key(tag);
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
    /// Every shard's hash tag, shard 0 first.
    tags: Vec<String>,
    /// Every shard's stream key, shard 0 first.
    streams: Vec<String>,
    routing: Shards,
    channel: String,
    submit: Script,
    cas: Script,
    list: Script,
}

impl std::fmt::Debug for RedisCommandStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisCommandStore")
            .field("queue", &self.config.queue)
            .field("shards", &self.tags.len())
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
        let (submit, cas) = (Script::new(SUBMIT), Script::new(CAS));
        conn.load_scripts(&[("submit", &submit), ("compare-and-set", &cas)])
            .await?;
        let tags = config.tags();
        Ok(Self {
            streams: tags.iter().map(|tag| stream_key(tag)).collect(),
            tags,
            routing: config.routing(),
            channel: format!("leasehold:{{{}}}:cancels", config.queue),
            config,
            conn,
            submit,
            cas,
            list: Script::new(LIST),
        })
    }

    /// The stream's key (of a sharded queue: shard 0's; see [`stream_keys`](Self::stream_keys)).
    pub fn stream_key(&self) -> &str {
        &self.streams[0]
    }

    /// Every shard's stream key, shard 0 first (one for an unsharded queue).
    pub fn stream_keys(&self) -> &[String] {
        &self.streams
    }

    /// The shard command `id` lives in: its state, index entries and stream entries.
    pub fn shard_of(&self, id: &str) -> u16 {
        self.routing.for_key(id.as_bytes())
    }

    /// The key of command `id`'s state hash (in its shard).
    pub fn state_key(&self, id: &str) -> String {
        state_key(self.tag_of(id), id)
    }

    /// The key of the index of the commands in `status` (a sorted set of ids); of a sharded
    /// queue, shard 0's (see [`shard_status_key`](Self::shard_status_key)).
    pub fn status_key(&self, status: Status) -> String {
        status_key(&self.tags[0], status)
    }

    /// The key of shard `shard`'s index of the commands in `status`, if there is such a shard.
    pub fn shard_status_key(&self, shard: u16, status: Status) -> Option<String> {
        let tag = self.tags.get(usize::from(shard))?;
        Some(status_key(tag, status))
    }

    fn tag_of(&self, id: &str) -> &str {
        &self.tags[usize::from(self.shard_of(id))]
    }

    fn ttl_ms(&self) -> u64 {
        u64::try_from(self.config.ttl.as_millis()).unwrap_or(u64::MAX)
    }

    /// A state-writing script's `EVALSHA` with its keys, all in the shard of `id`: the state
    /// hash, the stream, the status indexes; and that shard's stream, which its `WAIT` is
    /// routed by.
    fn writing(&self, script: &Script, id: &str) -> (redis::Cmd, &str) {
        let shard = usize::from(self.shard_of(id));
        let tag = &self.tags[shard];
        let mut keys = vec![state_key(tag, id), self.streams[shard].clone()];
        keys.extend(STATUSES.map(|status| status_key(tag, status)));
        (evalsha_cmd(script, &keys), &self.streams[shard])
    }

    /// Runs a state-writing script on `stream`'s shard, followed by `WAIT` when
    /// `wait_replicas` is on.
    async fn write<T: redis::FromRedisValue>(
        &self,
        script: &Script,
        cmd: &redis::Cmd,
        stream: &str,
    ) -> redis::RedisResult<T> {
        self.conn
            .write(cmd, stream.as_bytes(), Some(script), self.config.waiting())
            .await
    }

    /// Compare-and-set, enqueueing `entry` too if there is one.
    async fn cas(&self, state: &CommandState, entry: Option<&[u8]>) -> Result<bool, StoreError> {
        let (mut cmd, stream) = self.writing(&self.cas, &state.id);
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
            .write(&self.cas, &cmd, stream)
            .await
            .map_err(|e| redis_error(what, e))?;
        Ok(written == 1)
    }

    /// One page of `status` in the shard tagged `tag`.
    async fn list_shard(
        &self,
        tag: &str,
        status: Status,
        page: &Page,
    ) -> Result<Listing, StoreError> {
        let limit = page.effective_limit();
        let (at, after) = match &page.after {
            Some(cursor) => (cursor.at.to_string(), cursor.id.as_str()),
            None => (String::new(), ""),
        };
        let (more, score, id, states): (i64, String, String, Vec<String>) = self
            .list
            .key(status_key(tag, status))
            .arg(state_key(tag, ""))
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
        let (mut cmd, stream) = self.writing(&self.submit, &state.id);
        cmd.arg(state.version)
            .arg(state.to_json())
            .arg(self.ttl_ms())
            .arg(FIELD)
            .arg(entry)
            .arg(&state.id)
            .arg(state.status.to_string())
            .arg(state.status_changed_at)
            .arg(state_key(self.tag_of(&state.id), ""));
        let (created, existing): (i64, Option<String>) = self
            .write(&self.submit, &cmd, stream)
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
        let mut all = [0; 5];
        // One pipeline per shard: on a cluster, a pipeline's keys must share a slot.
        for tag in &self.tags {
            let mut pipe = redis::pipe();
            for status in Status::ALL {
                pipe.zcard(status_key(tag, status));
            }
            let counts: Vec<u64> = pipe
                .query_async(&mut self.conn.clone())
                .await
                .map_err(|e| redis_error("counts", e))?;
            for (slot, count) in all.iter_mut().zip(counts) {
                *slot += count;
            }
        }
        Ok(StatusCounts::new(all))
    }

    async fn list(&self, status: Status, page: &Page) -> Result<Listing, StoreError> {
        if let [tag] = self.tags.as_slice() {
            return self.list_shard(tag, status, page).await;
        }
        let pages = self
            .tags
            .iter()
            .map(|tag| self.list_shard(tag, status, page));
        let listings = futures::future::try_join_all(pages).await?;
        Ok(merge_listings(listings, page))
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
        if self.streams.len() > 1 {
            return Err(StoreError::fatal(format!(
                "command queue {:?} has {} shards: a worker consumes each \
                 (CommandStore::consumers)",
                self.config.queue,
                self.streams.len()
            )));
        }
        self.shard_consumer(0, claim_timeout).await
    }

    async fn consumers(
        &self,
        claim_timeout: Duration,
    ) -> Result<Vec<(String, RedisBackend)>, StoreError> {
        if self.streams.len() == 1 {
            let backend = self.shard_consumer(0, claim_timeout).await?;
            return Ok(vec![(self.config.queue.clone(), backend)]);
        }
        let mut consumers = Vec::with_capacity(self.streams.len());
        for (shard, name) in self.routing.streams().enumerate() {
            let backend = self.shard_consumer(shard, claim_timeout).await?;
            consumers.push((name, backend));
        }
        Ok(consumers)
    }
}

impl RedisCommandStore {
    /// A consumer of shard `shard`'s stream.
    async fn shard_consumer(
        &self,
        shard: usize,
        claim_timeout: Duration,
    ) -> Result<RedisBackend, StoreError> {
        let config = self
            .config
            .stream_config(&self.streams[shard])
            .claim_timeout(claim_timeout);
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
            stream_key("{jobs}"),
            format!("{}:dead", stream_key("{jobs}")),
            state_key("{jobs}", "any{id}"),
            status_key("{jobs}", Status::Failed),
        ] {
            assert_eq!(key_slot(key.as_bytes()), slot, "{key}");
        }
        assert_eq!(config.tags(), ["{jobs}"], "one shard: the unsharded layout");
        assert_eq!(stream_key("{jobs}"), "leasehold:{jobs}:stream");
        assert_eq!(state_key("{jobs}", "7"), "leasehold:{jobs}:state:7");
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
            let slot = key_slot(stream_key(tag).as_bytes());
            assert_eq!(slot, key_slot(tag.trim_matches(['{', '}']).as_bytes()));
            for key in [state_key(tag, "x"), status_key(tag, Status::Running)] {
                assert_eq!(key_slot(key.as_bytes()), slot, "{key}");
            }
        }
        assert_eq!(stream_key(&tags[2]), "leasehold:{jobs:2}:stream");
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
