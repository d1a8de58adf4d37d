//! The Redis Streams [`Backend`]: fenced Lua scripts over a multiplexed connection, and a
//! dedicated connection for the blocking wait. Its rooms follow a call's way to the wire:
//!
//! - `fetch`: reading new entries, the fetch script (promotions, reclaims), what a look learned;
//! - `wait`: the wait of an idle consumer on its dedicated connection;
//! - `late`: fetches answered late, and fetches that meet a server gone away;
//! - `fenced`: renew, ack, release and dead-letter, checked per lease or vouched for by tenure;
//! - `reply`: what Redis answers, parsed.
//!
//!
//! A fetch that meets a server gone away waits for it within its wait instead of failing, and
//! a fetch answered too late for its deliveries' leases hands them over with the next fetch,
//! renewed (see `late`): after a restart or a pause, workers resume as soon as the server
//! answers, and no delivery arrives with its lease spent.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use leasehold_core::{
    Backend, BackendResult, DeadLetterReason, FetchAnswer, LeaseRef, MessageId, RenewResult,
    SettleResult, Undeliverable,
};
use redis::{RedisError, Script, Value};

use crate::config::{unique_consumer_name, RedisConfig};
use crate::conn::{Connection, Unreachable};
use crate::error::ConnectError;
use crate::error::{error, is_nogroup};
use crate::keys::DelayedKeys;
use crate::replicas::evalsha_cmd;
use crate::retention::Retention;
use crate::scripts::{ACK, CREATE_GROUP, DEAD_LETTER, FETCH, PROMOTE, RELEASE, RENEW};

mod fenced;
mod fetch;
mod late;
mod reply;
mod wait;

use fetch::DelayedState;
use reply::{as_u64, EntryId};
pub(crate) use wait::Blocking;

/// Most ids per script call, and most delayed messages one fetch promotes: keeps each script
/// short so Redis stays responsive.
pub(super) const SCRIPT_BATCH: usize = 1000;

/// One consumer of a Redis stream's consumer group, implementing [`Backend`].
///
/// Clone-free sharing: the driver holds it in an `Arc`; every call clones a connection handle.
pub struct RedisBackend {
    config: RedisConfig,
    consumer: String,
    dead_key: String,
    delayed_keys: DelayedKeys,
    /// The group's tenure hash (see the module docs).
    tenure_key: String,
    /// This consumer's tenure as the last script reply told it (0: none yet): new entries a
    /// read without a script delivers were delivered under it, or a later one.
    tenure: AtomicU64,
    /// Scripts, publishes, acks and renews: multiplexed, never blocked.
    commands: Connection,
    /// Only the blocking reads, so a waiting fetch never delays a heartbeat (on a cluster: a
    /// cluster connection of its own, so it blocks none of the command connection's links to
    /// the nodes). A wait takes it out and puts it back when it ends; a wait dropped midway
    /// drops it (see the module docs), and the next opens another.
    blocking: Mutex<Option<Blocking>>,
    /// Whether the worker fetches from this stream (`Backend::set_fetching`): while it does
    /// not, no blocking connection is kept. A shard of a sharded queue assigned to other
    /// workers so costs no connection of its own.
    fetching: AtomicBool,
    /// The reclaim cursor, carried between fetches so lapsed entries are reclaimed in turn.
    cursor: Mutex<String>,
    /// Reclaims and new entries take turns going first.
    reclaim_turn: AtomicBool,
    /// The last fetch saw entries idle long enough to be reclaimed: the next one runs the
    /// fetch script, which shares the fetch between reclaims and new entries.
    reclaims_seen: AtomicBool,
    /// The last fetch saw a delayed message due: the next one's pipeline promotes first.
    due_seen: AtomicBool,
    /// Deliveries of a fetch answered late, handed over by the next (see `late`).
    held: late::Held,
    /// An outage the fetches wait out (see `conn::recover`).
    outage: Unreachable,
    /// What the last promotion of delayed messages learned.
    delayed: Mutex<DelayedState>,
    last_reap: Mutex<Option<Instant>>,
    /// Entries without the payload field that the current fetch dead-lettered, until its
    /// answer carries them (`FetchAnswer::undeliverable`).
    undeliverable: Mutex<Vec<Undeliverable>>,
    /// The retention's script arguments (see `Retention::args`).
    retention: [String; 3],
    /// Deleting on ack found another group on the stream: from then on, only what every group
    /// consumed is trimmed.
    shared: AtomicBool,
}

impl std::fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBackend")
            .field("stream", &self.config.target.stream)
            .field("group", &self.config.group)
            .field("consumer", &self.consumer)
            .finish_non_exhaustive()
    }
}

impl RedisBackend {
    /// Connects, and creates the stream and group if they do not exist (the group starts at
    /// the stream's beginning, so existing entries are consumed as they are).
    ///
    /// # Errors
    ///
    /// [`ConnectError::Config`] when the configuration cannot work (nothing is sent), and
    /// [`ConnectError::Redis`] when Redis cannot be reached, refuses the credentials, or
    /// fails to create the group.
    pub async fn connect(config: RedisConfig) -> Result<Self, ConnectError> {
        config.validate()?;
        let servers = &config.target.servers;
        let timeout = config.target.command_timeout;
        servers.check_credentials(timeout).await?;
        let commands = servers.connect(timeout, Some(timeout)).await?;
        let blocking = Blocking::open(servers, timeout, commands.moves())
            .await
            .map_err(|e| error("connect", e))?;
        Self::set_up(config, commands, Some(blocking)).await
    }

    /// The backend of `config` over the command connection `commands` (shared by the shards of
    /// a sharded queue), its blocking connection open already or opened at the first wait;
    /// creates the stream and group if missing. The config is validated.
    pub(crate) async fn set_up(
        config: RedisConfig,
        commands: Connection,
        blocking: Option<Blocking>,
    ) -> Result<Self, ConnectError> {
        let backend = Self {
            consumer: config.consumer.clone().unwrap_or_else(unique_consumer_name),
            dead_key: config.dead_letter_key()?,
            delayed_keys: DelayedKeys::of(&config.target.stream)?,
            tenure_key: config.tenure_key()?,
            tenure: AtomicU64::new(0),
            retention: config.retention.args(),
            shared: AtomicBool::new(false),
            config,
            commands,
            blocking: Mutex::new(blocking),
            fetching: AtomicBool::new(true),
            cursor: Mutex::new("0-0".into()),
            reclaim_turn: AtomicBool::new(true),
            reclaims_seen: AtomicBool::new(true),
            due_seen: AtomicBool::new(false),
            held: late::Held::default(),
            outage: Unreachable::default(),
            delayed: Mutex::new(DelayedState::default()),
            last_reap: Mutex::new(None),
            undeliverable: Mutex::new(Vec::new()),
        };
        backend.ensure_group().await?;
        if backend.config.retention == Retention::DeleteOnAck {
            backend.refuse_shared_stream().await?;
        }
        // The fast path also sends the promote script by hash in a pipeline.
        backend
            .commands
            .load_scripts(&[
                ("promote", &PROMOTE),
                ("fetch", &FETCH),
                ("ack", &ACK),
                ("renew", &RENEW),
                ("release", &RELEASE),
                ("dead-letter", &DEAD_LETTER),
            ])
            .await?;
        Ok(backend)
    }

    /// The command connection (shared by the shards of a sharded queue).
    pub(crate) fn command_connection(&self) -> &Connection {
        &self.commands
    }

    /// This worker's consumer name.
    pub fn consumer_name(&self) -> &str {
        &self.consumer
    }

    /// The stream's key.
    pub fn stream_key(&self) -> &str {
        &self.config.target.stream
    }

    /// The dead-letter stream's key.
    pub fn dead_letter_key(&self) -> &str {
        &self.dead_key
    }

    /// Runs the write `cmd` on the command connection, followed by `WAIT` when
    /// `wait_replicas` is on (see [`Connection::write`]).
    async fn write<T: redis::FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
        script: Option<&Script>,
    ) -> Result<T, RedisError> {
        self.commands
            .write(
                cmd,
                self.config.target.stream.as_bytes(),
                script,
                self.config.target.wait,
            )
            .await
    }

    /// Creates the stream and group if missing, and the group of the same name on the wake
    /// stream, which a consuming wait blocks on too (from its end: only wake-ups from then on
    /// matter). A group made anew starts the tenures afresh (`create_group.lua`).
    async fn ensure_group(&self) -> BackendResult<()> {
        create_group(
            &self.commands,
            &self.config.target.stream,
            &self.delayed_keys.wake,
            &self.tenure_key,
            &self.config.group,
        )
        .await
    }

    /// Deleting on ack would take other groups' entries: refused when the stream has any.
    async fn refuse_shared_stream(&self) -> Result<(), ConnectError> {
        let groups: Vec<HashMap<String, Value>> = redis::cmd("XINFO")
            .arg("GROUPS")
            .arg(&self.config.target.stream)
            .query_async(&mut self.commands.clone())
            .await
            .map_err(|e| error("list the stream's groups", e))?;
        let others: Vec<String> = groups
            .iter()
            .filter_map(|group| match group.get("name") {
                Some(Value::BulkString(name)) => Some(String::from_utf8_lossy(name).into_owned()),
                _ => None,
            })
            .filter(|name| *name != self.config.group)
            .collect();
        if others.is_empty() {
            return Ok(());
        }
        Err(ConnectError::SharedStream {
            stream: self.config.target.stream.clone(),
            group: self.config.group.clone(),
            others,
        })
    }

    /// The retention's script arguments in effect.
    fn retention(&self) -> [&str; 3] {
        if self.shared.load(Ordering::Relaxed) {
            return ["c", "", ""];
        }
        let [mode, len, age] = &self.retention;
        [mode, len, age]
    }
}

impl Backend for RedisBackend {
    type Payload = Bytes;

    fn claim_timeout(&self) -> Option<Duration> {
        Some(self.config.claim_timeout)
    }

    /// Not fetched from: the idle blocking connection is closed (one waiting now is closed
    /// when its wait ends); the next wait opens another.
    fn set_fetching(&self, fetching: bool) {
        self.fetching.store(fetching, Ordering::Relaxed);
        if !fetching {
            drop(
                self.blocking
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take(),
            );
        }
    }

    /// An entry id `ms-seq` starts with the Redis server's clock at the append, in
    /// milliseconds since the Unix epoch.
    fn enqueued_at(&self, id: &MessageId) -> Option<SystemTime> {
        let EntryId(ms, _) = EntryId::parse(id.as_str())?;
        (ms > 0).then(|| SystemTime::UNIX_EPOCH + Duration::from_millis(ms))
    }

    async fn publish(&self, payload: Bytes) -> BackendResult<MessageId> {
        let id: String = self
            .write(&self.config.target.xadd(&payload), None)
            .await
            .map_err(|e| error("publish", e))?;
        Ok(id.into())
    }

    /// Waits for a server that went away rather than fail (see `conn::recover`), and holds
    /// back deliveries answered too late to run (see `late`). The next due time is as the last
    /// promotion or look at the delayed set found it, on the server's clock, less the time
    /// since.
    async fn fetch(&self, max: usize, wait: Duration) -> BackendResult<FetchAnswer<Bytes>> {
        let messages = self.fetch_recovering(max, wait).await?;
        let undeliverable =
            std::mem::take(&mut *self.undeliverable.lock().unwrap_or_else(|e| e.into_inner()));
        Ok(FetchAnswer::new(messages)
            .with_next_due(self.delayed_state().next_due(Instant::now()))
            .with_undeliverable(undeliverable))
    }

    async fn renew(&self, lease_refs: &[LeaseRef]) -> BackendResult<Vec<RenewResult>> {
        let kept = self
            .fenced(&RENEW, "renew", lease_refs, &["JUSTID"])
            .await?;
        Ok(kept
            .into_iter()
            .map(|kept| {
                if kept {
                    RenewResult::Kept
                } else {
                    RenewResult::Lost
                }
            })
            .collect())
    }

    async fn ack(&self, lease_refs: &[LeaseRef]) -> BackendResult<Vec<SettleResult>> {
        let acked = self
            .fenced(&ACK, "ack", lease_refs, &self.retention())
            .await?;
        Ok(acked
            .into_iter()
            .map(|acked| {
                if acked {
                    SettleResult::Ok
                } else {
                    SettleResult::Lost
                }
            })
            .collect())
    }

    /// Delays are capped at the claim timeout: the entry's idle time is set to
    /// `claim_timeout - delay`, so any consumer's fetch reclaims it once `delay` passed.
    async fn release(&self, lease_ref: &LeaseRef, delay: Duration) -> BackendResult<SettleResult> {
        let idle = self.config.claim_timeout.saturating_sub(delay);
        let mut cmd = evalsha_cmd(&RELEASE, &[&self.config.target.stream, &self.tenure_key]);
        cmd.arg(&self.config.group)
            .arg(&self.consumer)
            .arg(lease_ref.id.as_str())
            .arg(lease_ref.fence.0)
            .arg(millis(idle))
            .arg(self.vouching([lease_ref.tenure]).0);
        match self.write::<i64>(&cmd, Some(&RELEASE)).await {
            Ok(1) => Ok(SettleResult::Ok),
            Ok(_) => Ok(SettleResult::Lost),
            Err(e) if is_nogroup(&e) => Ok(SettleResult::Lost),
            Err(e) => Err(error("release", e)),
        }
    }

    async fn dead_letter(
        &self,
        lease_ref: &LeaseRef,
        reason: &DeadLetterReason,
    ) -> BackendResult<SettleResult> {
        self.dead_letter_as(lease_ref, &reason.to_string()).await
    }

    async fn stream_len(&self) -> BackendResult<u64> {
        redis::cmd("XLEN")
            .arg(&self.config.target.stream)
            .query_async(&mut self.commands.clone())
            .await
            .map_err(|e| error("length", e))
    }

    async fn pending(&self) -> BackendResult<u64> {
        let summary: Result<Value, _> = redis::cmd("XPENDING")
            .arg(&self.config.target.stream)
            .arg(&self.config.group)
            .query_async(&mut self.commands.clone())
            .await;
        match summary {
            Ok(Value::Array(items)) => Ok(items.first().and_then(as_u64).unwrap_or(0)),
            Ok(_) => Ok(0),
            Err(e) if is_nogroup(&e) => Ok(0),
            Err(e) => Err(error("pending", e)),
        }
    }
}

/// Creates `group` on `stream` (and on its wake stream) unless it exists, as
/// `create_group.lua` says. A group made on a stream that had removed entries before never sees
/// those (other groups consumed them, or a trim took them): said as a warning, naming how many.
pub(crate) async fn create_group(
    commands: &Connection,
    stream: &str,
    wake: &str,
    tenure_key: &str,
    group: &str,
) -> BackendResult<()> {
    let removed: i64 = CREATE_GROUP
        .key(stream)
        .key(wake)
        .key(tenure_key)
        .arg(group)
        .invoke_async(&mut commands.clone())
        .await
        .map_err(|e| error("create group", e))?;
    if removed > 0 {
        tracing::warn!(
            %stream,
            %group,
            removed,
            "created the consumer group from the stream's oldest entry; entries removed before \
             it existed (consumed by the other groups, or trimmed) are not delivered to it. \
             Declare the groups a stream feeds before publishing (PublisherConfig::groups), or \
             keep a history with Retention::keep"
        );
    }
    Ok(())
}

pub(super) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
