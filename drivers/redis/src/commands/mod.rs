//! The command queue's Redis store (feature `commands`): [`leasehold_commands`]'
//! [`CommandStore`](leasehold_commands::CommandStore) as a state hash per command and the
//! queue's stream, under one hash tag.
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

mod config;
mod store;

use leasehold_commands::{CommandState, Cursor, Listing, Page, Status, StoreError};
use leasehold_core::Shards;
use redis::Script;

pub use config::RedisStoreConfig;

use crate::conn::Connection;
use crate::error::{error as redis_error, ConnectError};
use crate::keys::{
    command_cancels_channel, command_state_key, command_status_key, command_stream_key,
};
use crate::replicas::evalsha_cmd;
use crate::scripts::{COMMAND_CAS, COMMAND_LIST, COMMAND_SUBMIT};

/// The stream entry's field (the stream backend's default).
const FIELD: &str = "data";
/// Index entries one listing call looks at beyond its page (expired ones it skips).
const LIST_BUDGET: usize = 1000;
/// The statuses in the order the scripts take their index keys (`lua/commands/index.lua`).
const STATUSES: [Status; 5] = Status::ALL;

/// A command store on Redis: atomic submit and compare-and-set in Lua, stream consumed by
/// [`RedisBackend`](crate::RedisBackend)s, cancels announced over pub/sub.
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
        conn.load_scripts(&[
            ("submit", &COMMAND_SUBMIT),
            ("compare-and-set", &COMMAND_CAS),
        ])
        .await?;
        let tags = config.tags();
        Ok(Self {
            streams: tags.iter().map(|tag| command_stream_key(tag)).collect(),
            tags,
            routing: config.routing(),
            channel: command_cancels_channel(&config.queue),
            config,
            conn,
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
        command_state_key(self.tag_of(id), id)
    }

    /// The key of the index of the commands in `status` (a sorted set of ids); of a sharded
    /// queue, shard 0's (see [`shard_status_key`](Self::shard_status_key)).
    pub fn status_key(&self, status: Status) -> String {
        command_status_key(&self.tags[0], status)
    }

    /// The key of shard `shard`'s index of the commands in `status`, if there is such a shard.
    pub fn shard_status_key(&self, shard: u16, status: Status) -> Option<String> {
        let tag = self.tags.get(usize::from(shard))?;
        Some(command_status_key(tag, status))
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
        let mut keys = vec![command_state_key(tag, id), self.streams[shard].clone()];
        keys.extend(STATUSES.map(|status| command_status_key(tag, status)));
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
        let (mut cmd, stream) = self.writing(&COMMAND_CAS, &state.id);
        cmd.arg(state.version - 1)
            .arg(state.version)
            .arg(to_json(state))
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
            .write(&COMMAND_CAS, &cmd, stream)
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
        let (more, score, id, states): (i64, String, String, Vec<String>) = COMMAND_LIST
            .key(command_status_key(tag, status))
            .arg(command_state_key(tag, ""))
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

/// The `state` field of a command's hash.
fn to_json(state: &CommandState) -> String {
    serde_json::to_string(state).expect("a CommandState always serializes")
}

fn decode(json: &str) -> Result<CommandState, StoreError> {
    serde_json::from_str(json)
        .map_err(|e| StoreError::fatal("a stored state is not valid JSON").with_source(e))
}
