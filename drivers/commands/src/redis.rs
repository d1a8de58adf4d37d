//! The Redis store: a state hash per command and the queue's stream, under one hash tag.
//!
//! Keys, for queue `q`: the stream `leasehold:{q}:stream` (consumer group `commands`), its dead
//! letters `leasehold:{q}:stream:dead`, and one hash `leasehold:{q}:state:<id>` per command with
//! fields `v` (version) and `state` (JSON). All share the hash tag `{q}`, so the submit script,
//! which writes a state and the stream in one go, also runs on Redis Cluster. Cancels are
//! announced on the channel `leasehold:{q}:cancels`.

use std::time::Duration;

use futures::StreamExt;
use leasehold_core::MAX_DURATION;
use leasehold_redis::{
    backend_error as redis_error, check_credentials, ConnectError, RedisBackend, RedisConfig,
    RedisConfigError,
};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::Script;

use crate::state::CommandState;
use crate::store::{CancelFeed, CommandStore, StoreError, Submit};
use crate::DEFAULT_TTL;

const SUBMIT: &str = include_str!("lua/submit.lua");
const CAS: &str = include_str!("lua/cas.lua");
/// The stream entry's field (the stream backend's default).
const FIELD: &str = "data";

/// Where a [`RedisCommandStore`] lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisStoreConfig {
    url: String,
    queue: String,
    group: String,
    ttl: Duration,
    command_timeout: Duration,
}

impl RedisStoreConfig {
    /// Queue `queue` on the Redis at `url` (`redis://[user:password@]host:port/db`). Defaults:
    /// consumer group `commands`, state TTL 7 days, 5 s command timeout.
    pub fn new(url: impl Into<String>, queue: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            queue: queue.into(),
            group: "commands".into(),
            ttl: DEFAULT_TTL,
            command_timeout: Duration::from_secs(5),
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

    fn validate(&self) -> Result<(), RedisConfigError> {
        if self.url.is_empty() {
            return Err(RedisConfigError::Empty("url"));
        }
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
        Ok(())
    }
}

/// A command store on Redis: atomic submit and compare-and-set in Lua, stream consumed by
/// [`RedisBackend`]s, cancels announced over pub/sub.
#[derive(Clone)]
pub struct RedisCommandStore {
    config: RedisStoreConfig,
    client: redis::Client,
    conn: ConnectionManager,
    stream: String,
    channel: String,
    submit: Script,
    cas: Script,
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
        let client = leasehold_redis::client(&config.url)?;
        // Fails at once on a wrong password or a bad TLS setup, as the backend does.
        check_credentials(&client, config.command_timeout).await?;
        let conn = client
            .get_connection_manager_with_config(
                ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(config.command_timeout))
                    .set_response_timeout(Some(config.command_timeout))
                    .set_max_delay(Duration::from_secs(2)),
            )
            .await
            .map_err(|e| redis_error("connect", e))?;
        let prefix = format!("leasehold:{{{}}}", config.queue);
        Ok(Self {
            stream: format!("{prefix}:stream"),
            channel: format!("{prefix}:cancels"),
            config,
            client,
            conn,
            submit: Script::new(SUBMIT),
            cas: Script::new(CAS),
        })
    }

    /// The stream's key.
    pub fn stream_key(&self) -> &str {
        &self.stream
    }

    /// The key of command `id`'s state hash.
    pub fn state_key(&self, id: &str) -> String {
        format!("leasehold:{{{}}}:state:{id}", self.config.queue)
    }

    fn ttl_ms(&self) -> u64 {
        u64::try_from(self.config.ttl.as_millis()).unwrap_or(u64::MAX)
    }
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
        let (created, existing): (i64, Option<String>) = self
            .submit
            .key(self.state_key(&state.id))
            .key(&self.stream)
            .arg(state.version)
            .arg(state.to_json())
            .arg(self.ttl_ms())
            .arg(FIELD)
            .arg(entry)
            .invoke_async(&mut self.conn.clone())
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
        let written: i64 = self
            .cas
            .key(self.state_key(&state.id))
            .arg(state.version - 1)
            .arg(state.version)
            .arg(state.to_json())
            .arg(self.ttl_ms())
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| redis_error("compare-and-set", e))?;
        Ok(written == 1)
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
        let mut pubsub = self
            .client
            .get_async_pubsub()
            .await
            .map_err(|e| redis_error("subscribe", e))?;
        pubsub
            .subscribe(&self.channel)
            .await
            .map_err(|e| redis_error("subscribe", e))?;
        Ok(Box::pin(pubsub.into_on_message().filter_map(
            |msg| async move { msg.get_payload::<String>().ok() },
        )))
    }

    async fn consumer(&self, claim_timeout: Duration) -> Result<RedisBackend, StoreError> {
        let config = RedisConfig::new(&self.config.url, &self.stream, &self.config.group)
            .claim_timeout(claim_timeout)
            .command_timeout(self.config.command_timeout);
        Ok(RedisBackend::connect(config).await?)
    }
}
