//! The Redis Streams [`Backend`]: fenced Lua scripts over a multiplexed connection, and a
//! dedicated connection for the blocking wait.
//!
//! # The wait of an idle consumer
//!
//! A fetch that finds nothing waits on the dedicated connection, and in one of two ways:
//!
//! - **consuming** (the usual case): `XREADGROUP … BLOCK t STREAMS stream wake > >`. A new entry
//!   is delivered by the wait itself (delivery count 1, so fence 1, as the fenced scripts
//!   expect), so picking it up costs no second round trip. `XREADGROUP` blocks only on streams
//!   of its group, so the wake stream (a publisher appends to it when it delays a message due
//!   before all others) has a consumer group of the same name: a wake-up reaches **one** of the
//!   group's waiting consumers, not all. That is enough: the one woken learns the new due time
//!   and promotes the message when it is due, and the promoted entry then wakes whichever
//!   consumer waits on the stream. It acknowledges the wake entry at once. Were that consumer to
//!   go away before the due time, the message would wait for the next fetch of any other one,
//!   at most a poll interval.
//! - **not consuming**, while a delayed message is due before the wait would end:
//!   `XREAD … BLOCK` after the group's last-delivered id and the wake stream's last id, ended by
//!   a local timer at the due time, after which the fetch script promotes and reads. Taking an
//!   entry here would need the script anyway, and a read that consumes nothing can be dropped at
//!   the due time whatever the server is doing.
//!
//! Redis times out a blocked command only `hz` times a second (every 100 ms by default), so a
//! local timer ends every wait on time: for a consuming read it sends `CLIENT UNBLOCK <id>
//! TIMEOUT` on the command connection and still reads the reply, which holds whatever the read
//! took before the unblock. A consuming read is never dropped by the backend itself. Should the
//! caller drop a fetch mid-wait (shutdown, a call timeout), its connection goes with it: closing
//! the socket ends the read on the server, so it takes nothing later (only an entry it took in
//! the instant before stays pending with this consumer, until reclaimed after the claim timeout,
//! as `Backend::fetch` allows). The next wait opens a new connection. Without the permission for
//! `CLIENT UNBLOCK` (an ACL user without `@admin`), a wait ends by the server's timeout instead,
//! up to 1/`hz` late.
//!
//! # Outages
//!
//! A fetch that meets a server gone away waits for it within its wait instead of failing, and
//! a fetch answered too late for its deliveries' leases hands them over with the next fetch,
//! renewed (see `late`): after a restart or a pause, workers resume as soon as the server
//! answers, and no delivery arrives with its lease spent.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use leasehold_core::{
    Backend, BackendError, BackendResult, DeadLetterReason, ErrorKind, Fence, Fetched, LeaseRef,
    MessageId, RenewResult, SettleResult, Tenure, Undeliverable,
};
use redis::{AsyncConnectionConfig, RedisError, Script, Value};

use crate::config::{
    unique_consumer_name, ConnectError, DelayedKeys, FenceCheck, RedisConfig, RedisConfigError,
};
use crate::conn::{node_changed, Connection, Servers, Unreachable};
use crate::error::{error, is_nogroup, unblocked, Unblocked};
use crate::replicas::evalsha_cmd;
use crate::retention::Retention;

mod late;

/// A script made of shared Lua helpers followed by its own file.
macro_rules! script {
    ($($file:literal),+) => {
        LazyLock::new(|| Script::new(concat!($(include_str!($file)),+)))
    };
}

static FETCH: LazyLock<Script> = script!(
    "lua/ids.lua",
    "lua/retention.lua",
    "lua/tenure.lua",
    "lua/last_delivered.lua",
    "lua/delayed.lua",
    "lua/fetch.lua"
);
/// The publisher's: a batch with due times or deduplication keys, and the delayed summary.
pub(crate) static PUBLISH: LazyLock<Script> = script!("lua/delayed.lua", "lua/publish.lua");
pub(crate) static DELAYED_SUMMARY: LazyLock<Script> =
    script!("lua/delayed.lua", "lua/delayed_summary.lua");
/// The fast path's promotion, once its probe saw a delayed message due.
static PROMOTE: LazyLock<Script> = script!("lua/delayed.lua", "lua/promote.lua");
/// Batch scripts share the fence check: by tenure, else one `XPENDING`.
static RENEW: LazyLock<Script> = script!(
    "lua/ids.lua",
    "lua/tenure.lua",
    "lua/fenced_batch.lua",
    "lua/renew.lua"
);
static ACK: LazyLock<Script> = script!(
    "lua/ids.lua",
    "lua/retention.lua",
    "lua/tenure.lua",
    "lua/fenced_batch.lua",
    "lua/ack.lua"
);
static RELEASE: LazyLock<Script> = script!("lua/tenure.lua", "lua/release.lua");
static DEAD_LETTER: LazyLock<Script> =
    script!("lua/ids.lua", "lua/retention.lua", "lua/dead_letter.lua");
static REAP: LazyLock<Script> = script!("lua/reap_consumers.lua");
static CREATE_GROUP: LazyLock<Script> = script!("lua/create_group.lua");

/// How long a fetch that may wait trusts what the last look at the stream learned (nothing
/// reclaimable, the next due time) and waits without looking again.
const LOOK_AGAIN: Duration = Duration::from_millis(100);

/// Most ids per script call, and most delayed messages one fetch promotes: keeps each script
/// short so Redis stays responsive.
const SCRIPT_BATCH: usize = 1000;

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
    /// Entries without the payload field that fetches dead-lettered, until the worker takes
    /// them (see `Backend::take_undeliverable`).
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

/// A client for `url`; a URL that does not parse is a configuration error (whose text never
/// repeats the URL: it may hold a password).
pub fn client(url: &str) -> Result<redis::Client, RedisConfigError> {
    redis::Client::open(url).map_err(|e| RedisConfigError::Url(e.to_string()))
}

/// Opens one plain connection to `client`'s server: a wrong password, an unknown user or a
/// bad TLS setup is a fatal error here, at once, where a connection manager would retry it for
/// seconds. A transient failure (the server not up yet) passes: the manager's retries handle it.
pub async fn check_credentials(client: &redis::Client, timeout: Duration) -> BackendResult<()> {
    let probe = client
        .get_multiplexed_async_connection_with_config(
            &AsyncConnectionConfig::new()
                .set_connection_timeout(Some(timeout))
                .set_response_timeout(Some(timeout)),
        )
        .await;
    match probe {
        Err(e) => {
            let e = error("connect", e);
            if e.kind() == ErrorKind::Fatal {
                Err(e)
            } else {
                Ok(())
            }
        }
        Ok(_) => Ok(()),
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

    /// One run of the fetch script, never blocking: the entries it took, whether anything was
    /// reclaimable, and (when it took nothing) the group's last-delivered id, to wait after.
    async fn fetch_once(&self, max: usize) -> BackendResult<ScriptFetch> {
        // Reclaims and new entries take turns going first; the first takes at most half (all,
        // when max is 1) and the other the rest, so a backlog of either never starves the other.
        let reclaim_first = self.reclaim_turn.fetch_xor(true, Ordering::Relaxed);
        let share = if max == 1 { 1 } else { max / 2 };
        let cursor = self
            .cursor
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let min_idle = millis(self.config.claim_timeout);
        let stream = &self.config.target.stream;
        let mut cmd = evalsha_cmd(
            &FETCH,
            &[
                stream,
                &self.dead_key,
                &self.delayed_keys.delayed,
                &self.delayed_keys.wake,
                &self.tenure_key,
            ],
        );
        cmd.arg(&self.config.group)
            .arg(&self.consumer)
            .arg(min_idle)
            .arg(&cursor)
            .arg(share)
            .arg(max)
            .arg(&self.config.target.field)
            .arg(if reclaim_first { "1" } else { "0" })
            .arg(self.config.target.max_len_arg())
            .arg(SCRIPT_BATCH)
            .arg(&self.retention()[..]);
        let reply: Value = match self.write(&cmd, Some(&FETCH)).await {
            Err(e) if is_nogroup(&e) => {
                tracing::warn!(%stream, "consumer group vanished; recreating");
                self.ensure_group().await?;
                self.write(&cmd, Some(&FETCH))
                    .await
                    .map_err(|e| error("fetch", e))?
            }
            other => other.map_err(|e| error("fetch", e))?,
        };
        let mut fetched = parse_fetch(reply)
            .ok_or_else(|| BackendError::fatal("unexpected reply from the fetch script"))?;
        self.learn_tenure(fetched.tenure);
        for id in std::mem::take(&mut fetched.undeliverable) {
            self.undeliverable(id);
        }
        *self.cursor.lock().unwrap_or_else(|e| e.into_inner()) =
            std::mem::take(&mut fetched.cursor);
        self.set_delayed(fetched.next_due, fetched.wake_id.take());
        self.due_seen
            .store(fetched.next_due == Some(Duration::ZERO), Ordering::Relaxed);
        // While anything is reclaimable the next fetch runs the script again, to share it.
        self.reclaims_seen
            .store(fetched.reclaimable, Ordering::Relaxed);
        Ok(fetched)
    }

    /// New entries only, in one round trip and without a script (a script's reply goes
    /// through Lua tables twice, which cost more than the read itself; and even a script that
    /// finds nothing to do costs several times a plain command): `ZRANGE … 0 0 WITHSCORES` of
    /// the delayed set and `TIME` (when is the next delayed message due?), `XPENDING … IDLE`
    /// (is anything reclaimable?) and `XREADGROUP … >`, pipelined. Entries without the
    /// payload field are dead-lettered and left out, as the fetch script does. Once a fetch
    /// saw a delayed message due, the probe's place goes to the promote script, so this read
    /// takes the promoted messages (each promoted exactly once: the script moves and removes
    /// them in one step). The second value says the next fetch must run the fetch script:
    /// something is reclaimable.
    async fn read_new(&self, max: usize) -> BackendResult<(Vec<Fetched<Bytes>>, bool)> {
        let tenure = self.known_tenure();
        let promote = self.due_seen.load(Ordering::Relaxed);
        let mut pipe = redis::pipe();
        if promote {
            // EVALSHA built as one command, its error kept apart (`ignore_errors`): should the
            // server not know the script, the read still counts and the next fetch loads it.
            pipe.cmd("EVALSHA")
                .arg(PROMOTE.get_hash())
                .arg(2)
                .arg(&self.config.target.stream)
                .arg(&self.delayed_keys.delayed)
                .arg(&self.config.target.field)
                .arg(self.config.target.max_len_arg())
                .arg(SCRIPT_BATCH)
                .cmd("ECHO")
                .arg("");
        } else {
            pipe.cmd("ZRANGE")
                .arg(&self.delayed_keys.delayed)
                .arg(0)
                .arg(0)
                .arg("WITHSCORES")
                .cmd("TIME");
        }
        pipe.cmd("XPENDING")
            .arg(&self.config.target.stream)
            .arg(&self.config.group)
            .arg("IDLE")
            .arg(millis(self.config.claim_timeout))
            .arg("-")
            .arg("+")
            .arg(1)
            .cmd("XREADGROUP")
            .arg("GROUP")
            .arg(&self.config.group)
            .arg(&self.consumer)
            .arg("COUNT")
            .arg(max)
            .arg("STREAMS")
            .arg(&self.config.target.stream)
            .arg(">");
        let wait = self.config.target.wait;
        if let Some(wait) = wait {
            pipe.add_command(wait.cmd());
        }
        let mut replies = self
            .commands
            .pipeline_at(&pipe, self.config.target.stream.as_bytes())
            .await
            .map_err(|e| error("fetch", e))?;
        if let Some(wait) = wait {
            // Entries this read took but replicas may not hold stay pending with this
            // consumer, unseen by the engine, and are reclaimed after the claim timeout.
            let acked = replies.pop().unwrap_or(Value::Nil);
            acked
                .extract_error()
                .and_then(|acked| wait.check(&acked))
                .map_err(|e| error("fetch", e))?;
        }
        let replies: Vec<redis::RedisResult<Value>> =
            replies.into_iter().map(Value::extract_error).collect();
        let [first, second, idle, read]: [redis::RedisResult<Value>; 4] = replies
            .try_into()
            .map_err(|_| BackendError::fatal("fetch: wrong number of replies"))?;
        let idle = idle.map_err(|e| error("fetch", e))?;
        let read = read.map_err(|e| error("fetch", e))?;
        let next_due = match (promote, first) {
            (true, Ok(Value::Int(ms))) => Some(u64::try_from(ms).ok().map(Duration::from_millis)),
            // A restarted server forgot the script: load it; the next fetch promotes.
            (true, Err(e)) if e.code() == Some("NOSCRIPT") => {
                PROMOTE
                    .load_async(&mut self.commands.clone())
                    .await
                    .map_err(|e| error("load the promote script", e))?;
                Some(Some(Duration::ZERO))
            }
            (true, Err(e)) => return Err(error("promote", e)),
            (true, Ok(_)) => None,
            (false, first) => parse_probe(
                first.map_err(|e| error("fetch", e))?,
                second.map_err(|e| error("fetch", e))?,
            ),
        };
        let next_due = next_due
            .ok_or_else(|| BackendError::fatal("unexpected reply from the delayed-set probe"))?;
        self.set_delayed(next_due, None);
        self.due_seen
            .store(next_due == Some(Duration::ZERO), Ordering::Relaxed);
        let reclaimable = matches!(&idle, Value::Array(rows) if !rows.is_empty());
        let read = parse_streams(read)
            .and_then(|mut streams| match streams.pop() {
                None => Some(Vec::new()),
                Some((_, entries)) => parse_entries(entries, self.config.target.field.as_bytes()),
            })
            .ok_or_else(|| BackendError::fatal("unexpected reply from XREADGROUP"))?;
        let fetched = self.deliver_read(read, tenure).await;
        Ok((fetched, reclaimable))
    }

    /// New entries an `XREADGROUP … >` sent under `tenure` delivered (delivery count 1, so
    /// fence 1), as deliveries; those without the payload field are dead-lettered and left
    /// out, as the fetch script does.
    async fn deliver_read(
        &self,
        read: Vec<(String, Option<Bytes>)>,
        tenure: Tenure,
    ) -> Vec<Fetched<Bytes>> {
        let mut fetched = Vec::with_capacity(read.len());
        for (id, payload) in read {
            match payload {
                Some(payload) => fetched.push(Fetched {
                    id: id.into(),
                    payload,
                    delivery_count: 1,
                    fence: Fence(1),
                    tenure,
                }),
                None => {
                    let lease = LeaseRef {
                        id: id.into(),
                        fence: Fence(1),
                        tenure,
                    };
                    // Never deliverable. Should this fail, the entry stays pending with us
                    // and the fetch script dead-letters it when it is reclaimed.
                    let reason = self.no_field();
                    match self.dead_letter_as(&lease, &reason).await {
                        Ok(SettleResult::Ok) => self.undeliverable(lease.id.to_string()),
                        Ok(_) => {}
                        Err(e) => {
                            tracing::warn!(id = %lease.id, %e, "dead-lettering an entry failed")
                        }
                    }
                }
            }
        }
        fetched
    }

    /// One fetch as `Backend::fetch` describes it, failing when the server cannot be reached.
    async fn fetch_within(&self, max: usize, wait: Duration) -> BackendResult<Vec<Fetched<Bytes>>> {
        self.reap_consumers().await;
        // While nothing is reclaimable, new entries come without a script (due delayed
        // messages are promoted in the same pipeline, once a fetch saw them due; the engine
        // fetches again at once after a short fetch, and when something is due, as `next_due`
        // is then zero). When that read finds reclaimable entries, the next fetch runs the
        // script, and so does every fetch while the script sees reclaimable entries (it shares
        // each fetch between reclaims and new entries) or to learn where to wait for a delayed
        // message due before the wait ends. Entries in
        // hand are returned at once, never held across another call that could fail or be
        // dropped.
        let deadline = Instant::now().checked_add(wait);
        // Whether the next step is the script. Not after a read that found nothing
        // reclaimable: with no delayed message due before the wait ends, the wait begins at once.
        let mut script = true;
        if self.fresh_enough(wait) {
            // What the last look learned still holds: straight to the wait, which takes what
            // is there at once (`XREADGROUP … BLOCK` blocks only when nothing is new).
            script = false;
        } else if !self.reclaims_seen.load(Ordering::Relaxed) {
            match self.read_new(max).await {
                Ok((read, reclaimable)) => {
                    self.reclaims_seen.store(reclaimable, Ordering::Relaxed);
                    if !read.is_empty() {
                        return Ok(read);
                    }
                    script = reclaimable;
                }
                // The script reports errors, and recreates a vanished group.
                Err(e) => {
                    tracing::debug!(%e, "fetch without a script failed; trying the script");
                }
            }
        }
        // Then wait for new entries until `wait` passes (see the module docs): consuming them,
        // unless a delayed message is due before the wait ends; then without consuming until
        // it is due, and the script promotes and reads. Again after a wake-up that brought
        // nothing to take (a publisher delayed a message due earlier: the next wait learns it).
        let mut last = None;
        loop {
            if script {
                let fetched = self.fetch_once(max).await?;
                if !fetched.entries.is_empty() {
                    return Ok(fetched.entries);
                }
                let Some(delivered) = fetched.last_delivered else {
                    return Ok(fetched.entries);
                };
                last = Some(delivered);
            }
            let now = Instant::now();
            let left = deadline.map_or(wait, |at| at.saturating_duration_since(now));
            let delayed = self.delayed_state();
            let (next_due, wake_id) = (delayed.next_due(now), delayed.wake_id);
            match (next_due, &last) {
                // The script just ran: more are due than it promoted, or the wait is over.
                (Some(due), Some(_)) if due.is_zero() || left.is_zero() => return Ok(Vec::new()),
                (Some(due), Some(last)) if due <= left => {
                    self.wait_for_new(last, &wake_id, due).await?;
                    script = true;
                }
                // Due before the wait ends: the script promotes, and tells where to wait.
                (Some(due), None) if due <= left => script = true,
                _ if left.is_zero() => return Ok(Vec::new()),
                _ => match self.wait_consuming(max, left).await? {
                    Woken::Took(entries) => return Ok(entries),
                    Woken::TimedOut => return Ok(Vec::new()),
                    Woken::Again => script = true,
                },
            }
        }
    }

    /// Waits (on the dedicated connection) until the stream has an entry after `last`, the
    /// wake stream one after `wake` (a publisher delayed a message due earlier than all
    /// others), or `wait` passes. It consumes nothing.
    async fn wait_for_new(&self, last: &str, wake: &str, wait: Duration) -> BackendResult<()> {
        let mut cmd = redis::cmd("XREAD");
        cmd.arg("COUNT")
            .arg(1)
            .arg("BLOCK")
            .arg(millis(wait).max(1))
            .arg("STREAMS")
            .arg(&self.config.target.stream)
            .arg(&self.delayed_keys.wake)
            .arg(last)
            .arg(wake);
        self.block_on(&cmd, wait, false)
            .await
            .map_err(|e| error("wait for entries", e))?;
        Ok(())
    }

    /// Waits up to `wait` for new entries, taking up to `max` of them as it wakes (one round
    /// trip: see the module docs), or for a wake-up on the wake stream, which it acknowledges.
    async fn wait_consuming(&self, max: usize, wait: Duration) -> BackendResult<Woken> {
        let tenure = self.known_tenure();
        let (stream, wake) = (&self.config.target.stream, &self.delayed_keys.wake);
        let mut cmd = redis::cmd("XREADGROUP");
        cmd.arg("GROUP")
            .arg(&self.config.group)
            .arg(&self.consumer)
            .arg("COUNT")
            .arg(max)
            .arg("BLOCK")
            .arg(millis(wait).max(1))
            .arg("STREAMS")
            .arg(stream)
            .arg(wake)
            .arg(">")
            .arg(">");
        let reply = match self.block_on(&cmd, wait, true).await {
            // A group was deleted: recreated, and the script reads again.
            Err(e) if is_nogroup(&e) => {
                tracing::warn!(%stream, "consumer group vanished; recreating");
                self.ensure_group().await?;
                return Ok(Woken::Again);
            }
            Err(e) => match unblocked(&e) {
                Some(why) => {
                    self.unblocked(why, &e).await?;
                    return Ok(Woken::Again);
                }
                None => return Err(error("wait for entries", e)),
            },
            Ok(reply) => reply,
        };
        let unexpected = || BackendError::fatal("unexpected reply from a waiting XREADGROUP");
        let mut read = Vec::new();
        let mut woken = false;
        for (key, entries) in parse_streams(reply).ok_or_else(unexpected)? {
            let entries = parse_entries(entries, self.config.target.field.as_bytes())
                .ok_or_else(unexpected)?;
            if key.as_slice() == wake.as_bytes() {
                woken |= !entries.is_empty();
                self.ack_wake(entries.into_iter().map(|(id, _)| id)).await;
            } else {
                read = entries;
            }
        }
        let took = read.len();
        let fetched = self.deliver_read(read, tenure).await;
        Ok(if !fetched.is_empty() {
            Woken::Took(fetched)
        } else if woken || took > 0 {
            Woken::Again
        } else {
            Woken::TimedOut
        })
    }

    /// The server ended a consuming wait with `UNBLOCKED`: says why, at the level it deserves,
    /// and recreates the stream and its group if they are gone. The script reads next.
    async fn unblocked(&self, why: Unblocked, e: &RedisError) -> BackendResult<()> {
        let stream = &self.config.target.stream;
        match why {
            Unblocked::KeyGone => {
                // Deleted, or moved with its slot: the command connection follows a cluster's
                // redirections, so it finds the stream on its new node.
                let exists: bool = redis::cmd("EXISTS")
                    .arg(stream)
                    .query_async(&mut self.commands.clone())
                    .await
                    .map_err(|e| error("look for the stream", e))?;
                if exists && self.config.target.servers.is_cluster() {
                    tracing::info!(
                        %stream,
                        "the stream moved to another cluster node (a slot migration); waiting there"
                    );
                } else if exists {
                    tracing::warn!(
                        %stream,
                        "the stream was deleted while a fetch waited on it, and created again"
                    );
                    self.ensure_group().await?;
                } else {
                    tracing::warn!(
                        %stream,
                        "the stream was deleted while a fetch waited on it; recreating it and \
                         its consumer group"
                    );
                    self.ensure_group().await?;
                }
            }
            Unblocked::Demoted => tracing::info!(
                %stream,
                "the server stopped being a master (a failover demoted it); waiting on the new \
                 master"
            ),
            Unblocked::ByClient => tracing::info!(
                %stream,
                "a client ended a fetch's wait (CLIENT UNBLOCK … ERROR); looking again"
            ),
            Unblocked::Other => tracing::warn!(
                %stream,
                %e,
                "the server ended a fetch's wait for a reason this version does not know; \
                 looking again"
            ),
        }
        Ok(())
    }

    /// Acknowledges wake-ups this consumer took, so the wake group's pending list stays empty.
    /// Should that fail, they stay pending there, harmless, until its consumer is removed.
    async fn ack_wake(&self, ids: impl Iterator<Item = String>) {
        let mut cmd = redis::cmd("XACK");
        cmd.arg(&self.delayed_keys.wake).arg(&self.config.group);
        let mut any = false;
        for id in ids {
            cmd.arg(id);
            any = true;
        }
        if !any {
            return;
        }
        if let Err(e) = cmd.query_async::<Value>(&mut self.commands.clone()).await {
            tracing::debug!(%e, "acknowledging a wake-up failed");
        }
    }

    /// Sends the blocking `cmd` (whose `BLOCK` is `wait`) on the dedicated connection and
    /// waits for its reply, no longer than `wait`: then `CLIENT UNBLOCK … TIMEOUT` ends it on
    /// the server, which answers at once with what it had (nothing, or what it took just
    /// before), where the server's own timeout would come up to 1/`hz` late. Its reply is always
    /// read, so a consuming read is never abandoned here. When `consuming` and the read took
    /// anything, `wait_replicas` waits for the replicas on the same connection, after it. The
    /// connection goes back for the next wait unless it failed or its server is no master
    /// any more; dropping this future drops it, which ends the read on the server.
    async fn block_on(
        &self,
        cmd: &redis::Cmd,
        wait: Duration,
        consuming: bool,
    ) -> Result<Value, RedisError> {
        let taken = self
            .blocking
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        // Behind Sentinel, the command connection moves to a new master first (it asks the
        // sentinels now and then): one opened before that may still be on a demoted master
        // that takes no new entries, so it is opened anew, on the master named now.
        let moves = self.commands.moves();
        let mut blocking = match taken {
            Some(blocking) if blocking.moves == moves => blocking,
            _ => {
                Blocking::open(
                    &self.config.target.servers,
                    self.config.target.command_timeout,
                    moves,
                )
                .await?
            }
        };
        let reply = {
            let id = blocking.id;
            let mut read = std::pin::pin!(cmd.query_async::<Value>(&mut blocking.con));
            let timer = async {
                async_io::Timer::after(wait).await;
                None
            };
            match futures_lite::future::or(async { Some(read.as_mut().await) }, timer).await {
                Some(reply) => reply,
                None => {
                    if let Some(id) = id {
                        if !self.unblock(id).await {
                            blocking.id = None;
                        }
                    }
                    read.await
                }
            }
        };
        let reply = match (reply, self.config.target.wait) {
            (Ok(reply), Some(replicas)) if consuming && reply != Value::Nil => blocking
                .con
                .wait_for_replicas(replicas, self.config.target.stream.as_bytes())
                .await
                .map(|()| reply),
            (reply, _) => reply,
        };
        // A reply, or an error the server answered on a master: the connection is fine (and
        // kept while the stream is fetched from).
        let fine = reply
            .as_ref()
            .map_or_else(|e| e.code().is_some() && !node_changed(e), |_| true);
        if fine {
            // Read under the lock `set_fetching` takes after its store: either this sees it
            // stopped, or `set_fetching` finds the connection here and closes it.
            let mut slot = self.blocking.lock().unwrap_or_else(|e| e.into_inner());
            if self.fetching.load(Ordering::Relaxed) {
                *slot = Some(blocking);
            }
        }
        reply
    }

    /// Ends the blocked command of client `id` as if it had timed out; false when this user may
    /// not (`CLIENT UNBLOCK` needs `@admin`): its waits then end by the server's timeout.
    async fn unblock(&self, id: i64) -> bool {
        let unblocked: Result<i64, _> = redis::cmd("CLIENT")
            .arg("UNBLOCK")
            .arg(id)
            .arg("TIMEOUT")
            .query_async(&mut self.commands.clone())
            .await;
        match unblocked {
            Ok(_) => true,
            Err(e) if e.code() == Some("NOPERM") => {
                tracing::info!(
                    %e,
                    "CLIENT UNBLOCK refused: waits end by the server's timeout, up to 1/hz late"
                );
                false
            }
            Err(e) => {
                tracing::debug!(%e, "ending a wait on time failed");
                true
            }
        }
    }

    /// Whether a fetch that may wait `wait` can begin its consuming wait without a look first:
    /// a read or the script looked less than [`LOOK_AGAIN`] ago, found nothing reclaimable and
    /// nothing due before the wait would end. So a busy idle worker (one message at a time,
    /// each answer short of `max`) costs one round trip per message in its fetches, the wait,
    /// where a look before every wait would add one; lapsed entries are noticed at most
    /// [`LOOK_AGAIN`] later, a negligible part of a claim timeout. A message delayed sooner than
    /// all others still ends the wait (the wake stream).
    fn fresh_enough(&self, wait: Duration) -> bool {
        if wait.is_zero()
            || self.reclaims_seen.load(Ordering::Relaxed)
            || self.due_seen.load(Ordering::Relaxed)
        {
            return false;
        }
        let now = Instant::now();
        let delayed = self.delayed_state();
        delayed
            .learned_at
            .is_some_and(|at| now.saturating_duration_since(at) < LOOK_AGAIN)
            && delayed.next_due(now).is_none_or(|due| due > wait)
    }

    /// The tenure a fenced script may vouch for leases delivered under `tenures` with:
    /// theirs when they share one and the configuration trusts tenures, else none (the
    /// script checks each lease).
    fn vouching(&self, tenures: impl IntoIterator<Item = Tenure>) -> Tenure {
        if self.config.fence_check != FenceCheck::Tenure {
            return Tenure::NONE;
        }
        let mut tenures = tenures.into_iter();
        let first = tenures.next().unwrap_or(Tenure::NONE);
        if tenures.all(|tenure| tenure == first) {
            first
        } else {
            Tenure::NONE
        }
    }

    /// This consumer's tenure as last learned ([`Tenure::NONE`] before any script replied).
    fn known_tenure(&self) -> Tenure {
        Tenure(self.tenure.load(Ordering::Relaxed))
    }

    /// A script replied with this consumer's tenure. Tenures only grow, so the largest is the
    /// latest (replies may arrive out of order).
    fn learn_tenure(&self, tenure: Tenure) {
        self.tenure.fetch_max(tenure.0, Ordering::Relaxed);
    }

    /// What a promotion learned; the wake id comes only with a fetch script that took nothing.
    fn set_delayed(&self, next_due: Option<Duration>, wake_id: Option<String>) {
        let now = Instant::now();
        let mut state = self.delayed.lock().unwrap_or_else(|e| e.into_inner());
        // A due time too far to represent is as good as none for the next hour's waits.
        state.due_at = next_due.and_then(|due| now.checked_add(due));
        state.learned_at = Some(now);
        if let Some(wake_id) = wake_id {
            state.wake_id = wake_id;
        }
    }

    fn delayed_state(&self) -> DelayedState {
        self.delayed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Why an entry without the payload field can never be delivered.
    fn no_field(&self) -> String {
        format!("entry has no field \"{}\"", self.config.target.field)
    }

    /// A fetch dead-lettered entry `id` (it has no payload field), for the worker to count.
    fn undeliverable(&self, id: String) {
        let reason = self.no_field();
        self.undeliverable
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Undeliverable {
                id: id.into(),
                reason,
            });
    }

    /// Now and then, removes consumers of dead workers that hold nothing.
    async fn reap_consumers(&self) {
        let Some(idle) = self.config.reap_idle_consumers else {
            return;
        };
        let now = Instant::now();
        {
            let mut last = self.last_reap.lock().unwrap_or_else(|e| e.into_inner());
            let every = (idle / 2).clamp(Duration::from_secs(1), Duration::from_secs(600));
            if last.is_some_and(|at| now.duration_since(at) < every) {
                return;
            }
            *last = Some(now);
        }
        let reaped: Result<i64, _> = REAP
            .key(&self.config.target.stream)
            .key(&self.delayed_keys.wake)
            .key(&self.tenure_key)
            .arg(&self.config.group)
            .arg(millis(idle))
            .arg(&self.consumer)
            .invoke_async(&mut self.commands.clone())
            .await;
        match reaped {
            Ok(0) => {}
            Ok(n) => {
                tracing::info!(stream = %self.config.target.stream, n, "removed idle consumers")
            }
            Err(e) => tracing::debug!(%e, "reaping idle consumers failed"),
        }
    }

    /// Runs a fenced per-id script over `leases` in batches of ids sorted ascending, each with
    /// its id span (the script's one ranged `XPENDING`); a vanished group means every lease is
    /// lost, and so is a lease whose id is no stream id.
    ///
    /// The fences go as runs (fence, how many leases in a row have it), the ids one argument
    /// each, then the script's own `tail`; the script answers with the consumer's tenure, its
    /// flags (bit 0: deleting on ack found another group) and the positions of the leases it
    /// found lost (usually none), so neither side makes a value per lease that only says
    /// "kept". A batch whose leases were all delivered under one tenure names it: while that is
    /// still the consumer's tenure, the script reads no fence back.
    async fn fenced(
        &self,
        script: &Script,
        what: &str,
        leases: &[LeaseRef],
        tail: &[&str],
    ) -> BackendResult<Vec<bool>> {
        let mut results = vec![false; leases.len()];
        // Only ids as Redis writes them (the script compares them as strings): any other
        // spelling names no entry, so that lease is not held.
        let mut order: Vec<(StreamId, usize)> = leases
            .iter()
            .enumerate()
            .filter_map(|(i, lease)| Some((StreamId::parse_canonical(lease.id.as_str())?, i)))
            .collect();
        order.sort_unstable();
        for chunk in order.chunks(SCRIPT_BATCH) {
            let (Some((low, _)), Some((high, _))) = (chunk.first(), chunk.last()) else {
                continue;
            };
            let runs = fence_runs(chunk.iter().map(|&(_, i)| leases[i].fence.0));
            let tenure = self.vouching(chunk.iter().map(|&(_, i)| leases[i].tenure));
            // EVALSHA built as one command: its arguments go into one buffer (a script
            // invocation would allocate each of them, then copy them).
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(script.get_hash())
                .arg(2)
                .arg(&self.config.target.stream)
                .arg(&self.tenure_key)
                .arg(&self.config.group)
                .arg(&self.consumer)
                .arg(tenure.0)
                .arg(low.to_string())
                .arg(high.to_string())
                .arg(runs.len());
            for &(fence, len) in &runs {
                cmd.arg(fence).arg(len);
            }
            for &(_, i) in chunk {
                cmd.arg(leases[i].id.as_str());
            }
            cmd.arg(tail);
            match self.write::<Vec<u64>>(&cmd, Some(script)).await {
                Ok(reply) => {
                    let [tenure, flags, lost @ ..] = &reply[..] else {
                        return Err(BackendError::fatal(format!("{what}: a short reply")));
                    };
                    self.learn_tenure(Tenure(*tenure));
                    if flags & 1 == 1 && !self.shared.swap(true, Ordering::Relaxed) {
                        tracing::warn!(
                            stream = %self.config.target.stream,
                            group = %self.config.group,
                            "another consumer group reads this stream: no longer deleting \
                             entries on ack (they would be lost to it); removing only what \
                             every group consumed, as Retention::Consumed does"
                        );
                    }
                    let mut kept = vec![true; chunk.len()];
                    for &position in lost {
                        // 1-based positions in the batch as sent.
                        let Some(slot) = usize::try_from(position)
                            .ok()
                            .and_then(|p| p.checked_sub(1))
                            .and_then(|p| kept.get_mut(p))
                        else {
                            return Err(BackendError::fatal(format!(
                                "{what}: the script named lease {position} of {}",
                                chunk.len()
                            )));
                        };
                        *slot = false;
                    }
                    for (&(_, i), kept) in chunk.iter().zip(kept) {
                        results[i] = kept;
                    }
                }
                Err(e) if is_nogroup(&e) => {}
                Err(e) => return Err(error(what, e)),
            }
        }
        Ok(results)
    }

    /// Dead-letters `lease` with `reason`, trimming as the retention says.
    async fn dead_letter_as(&self, lease: &LeaseRef, reason: &str) -> BackendResult<SettleResult> {
        let [mode, len, age] = self.retention();
        self.fenced_one(
            &DEAD_LETTER,
            "dead-letter",
            lease,
            &[reason, mode, len, age],
        )
        .await
    }

    async fn fenced_one(
        &self,
        script: &Script,
        what: &str,
        lease: &LeaseRef,
        extra: &[&str],
    ) -> BackendResult<SettleResult> {
        let mut cmd = evalsha_cmd(script, &[&self.config.target.stream, &self.dead_key]);
        cmd.arg(&self.config.group)
            .arg(&self.consumer)
            .arg(lease.id.as_str())
            .arg(lease.fence.0);
        for arg in extra {
            cmd.arg(arg);
        }
        match self.write::<i64>(&cmd, Some(script)).await {
            Ok(1) => Ok(SettleResult::Ok),
            Ok(_) => Ok(SettleResult::Lost),
            Err(e) if is_nogroup(&e) => Ok(SettleResult::Lost),
            Err(e) => Err(error(what, e)),
        }
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
        let StreamId(ms, _) = StreamId::parse(id.as_str())?;
        (ms > 0).then(|| SystemTime::UNIX_EPOCH + Duration::from_millis(ms))
    }

    fn take_undeliverable(&self) -> Vec<Undeliverable> {
        std::mem::take(&mut *self.undeliverable.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// As the last promotion or look at the delayed set found it, on the server's clock, less
    /// the time since.
    fn next_due(&self) -> Option<Duration> {
        self.delayed_state().next_due(Instant::now())
    }

    async fn publish(&self, payload: Bytes) -> BackendResult<MessageId> {
        let id: String = self
            .write(&self.config.target.xadd(&payload), None)
            .await
            .map_err(|e| error("publish", e))?;
        Ok(id.into())
    }

    /// Waits for a server that went away rather than fail (see `conn::recover`), and holds
    /// back deliveries answered too late to run (see `late`).
    async fn fetch(&self, max: usize, wait: Duration) -> BackendResult<Vec<Fetched<Bytes>>> {
        self.fetch_recovering(max, wait).await
    }

    async fn renew(&self, leases: &[LeaseRef]) -> BackendResult<Vec<RenewResult>> {
        let kept = self.fenced(&RENEW, "renew", leases, &["JUSTID"]).await?;
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

    async fn ack(&self, leases: &[LeaseRef]) -> BackendResult<Vec<SettleResult>> {
        let acked = self.fenced(&ACK, "ack", leases, &self.retention()).await?;
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
    async fn release(&self, lease: &LeaseRef, delay: Duration) -> BackendResult<SettleResult> {
        let idle = self.config.claim_timeout.saturating_sub(delay);
        let mut cmd = evalsha_cmd(&RELEASE, &[&self.config.target.stream, &self.tenure_key]);
        cmd.arg(&self.config.group)
            .arg(&self.consumer)
            .arg(lease.id.as_str())
            .arg(lease.fence.0)
            .arg(millis(idle))
            .arg(self.vouching([lease.tenure]).0);
        match self.write::<i64>(&cmd, Some(&RELEASE)).await {
            Ok(1) => Ok(SettleResult::Ok),
            Ok(_) => Ok(SettleResult::Lost),
            Err(e) if is_nogroup(&e) => Ok(SettleResult::Lost),
            Err(e) => Err(error("release", e)),
        }
    }

    async fn dead_letter(
        &self,
        lease: &LeaseRef,
        reason: &DeadLetterReason,
    ) -> BackendResult<SettleResult> {
        self.dead_letter_as(lease, &reason.to_string()).await
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

/// A stream entry id `ms-seq`, ordered as Redis orders them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct StreamId(u64, u64);

impl StreamId {
    /// Both parts decimal digits; `None` for anything Redis would not accept as an entry id.
    fn parse(id: &str) -> Option<Self> {
        let (ms, seq) = Self::halves(id)?;
        Some(Self(decimal(ms)?, decimal(seq)?))
    }

    /// [`parse`](Self::parse), for an id spelled exactly as Redis writes it: no leading zeros.
    fn parse_canonical(id: &str) -> Option<Self> {
        let (ms, seq) = Self::halves(id)?;
        let canonical = |s: &[u8]| s.len() == 1 || s.first() != Some(&b'0');
        if !(canonical(ms) && canonical(seq)) {
            return None;
        }
        Some(Self(decimal(ms)?, decimal(seq)?))
    }

    /// The bytes before and after the first `-`.
    fn halves(id: &str) -> Option<(&[u8], &[u8])> {
        let bytes = id.as_bytes();
        let dash = bytes.iter().position(|&b| b == b'-')?;
        Some((&bytes[..dash], &bytes[dash + 1..]))
    }
}

/// One or more ASCII digits as a `u64` (`None` when empty, anything else, or too large): one
/// pass, where a digit check and then `str::parse` take two (ids are parsed once per message
/// on the way in and again per lease in every fenced call).
fn decimal(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    // Up to 19 digits cannot overflow: no checked arithmetic per digit then.
    if digits.len() <= 19 {
        let mut n = 0u64;
        for &b in digits {
            let digit = b.wrapping_sub(b'0');
            if digit > 9 {
                return None;
            }
            n = n * 10 + u64::from(digit);
        }
        return Some(n);
    }
    digits.iter().try_fold(0u64, |n, &b| {
        let digit = b.wrapping_sub(b'0');
        if digit > 9 {
            return None;
        }
        n.checked_mul(10)?.checked_add(u64::from(digit))
    })
}

impl std::fmt::Display for StreamId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.0, self.1)
    }
}

/// Consecutive equal fences as (fence, how many), in order.
fn fence_runs(fences: impl IntoIterator<Item = u64>) -> Vec<(u64, usize)> {
    let mut runs: Vec<(u64, usize)> = Vec::new();
    for fence in fences {
        match runs.last_mut() {
            Some((last, len)) if *last == fence => *len += 1,
            _ => runs.push((fence, 1)),
        }
    }
    runs
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn as_u64(value: &Value) -> Option<u64> {
    match value {
        Value::Int(n) => u64::try_from(*n).ok(),
        Value::BulkString(bytes) => std::str::from_utf8(bytes).ok()?.parse().ok(),
        _ => None,
    }
}

fn as_string(value: Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes).ok(),
        Value::SimpleString(s) => Some(s),
        _ => None,
    }
}

/// Each stream of an `XREAD`/`XREADGROUP` reply as (key, its entries), in order (RESP2 arrays
/// or RESP3 maps; none when the reply is nil: nothing came).
fn parse_streams(reply: Value) -> Option<Vec<(Vec<u8>, Value)>> {
    let key = |key: Value| match key {
        Value::BulkString(key) => Some(key),
        Value::SimpleString(key) => Some(key.into_bytes()),
        _ => None,
    };
    match reply {
        Value::Nil => Some(Vec::new()),
        Value::Array(streams) => streams
            .into_iter()
            .map(|stream| {
                let Value::Array(pair) = stream else {
                    return None;
                };
                let mut pair = pair.into_iter();
                Some((key(pair.next()?)?, pair.next()?))
            })
            .collect(),
        Value::Map(streams) => streams
            .into_iter()
            .map(|(name, entries)| Some((key(name)?, entries)))
            .collect(),
        _ => None,
    }
}

/// `(id, payload)` of each of one stream's entries in a read's reply; the payload is `None` if
/// the entry lacks `field`.
fn parse_entries(entries: Value, field: &[u8]) -> Option<Vec<(String, Option<Bytes>)>> {
    let Value::Array(entries) = entries else {
        return None;
    };
    let mut out = Vec::with_capacity(entries.len());
    for entry in entries {
        let Value::Array(parts) = entry else {
            return None;
        };
        let mut parts = parts.into_iter();
        let id = as_string(parts.next()?)?;
        let payload = match parts.next()? {
            Value::Array(fields) => {
                let mut fields = fields.into_iter();
                let mut payload = None;
                while let (Some(name), Some(value)) = (fields.next(), fields.next()) {
                    if matches!(&name, Value::BulkString(name) if name.as_slice() == field) {
                        if let Value::BulkString(value) = value {
                            payload = Some(Bytes::from(value));
                        }
                        break;
                    }
                }
                payload
            }
            Value::Map(fields) => {
                fields
                    .into_iter()
                    .find_map(|(name, value)| match (name, value) {
                        (Value::BulkString(name), Value::BulkString(value))
                            if name.as_slice() == field =>
                        {
                            Some(Bytes::from(value))
                        }
                        _ => None,
                    })
            }
            _ => None,
        };
        out.push((id, payload));
    }
    Some(out)
}

/// The dedicated connection for waits, and its id on the server for `CLIENT UNBLOCK` (`None`
/// when `CLIENT ID` failed, the user may not unblock, or on a cluster).
pub(crate) struct Blocking {
    con: Connection,
    id: Option<i64>,
    /// The command connection's [`Connection::moves`] when this one was opened.
    moves: u64,
}

impl Blocking {
    /// A connection without a response timeout (a wait lasts as long as it asks; the driver
    /// bounds the call) and without reconnection: one that fails is dropped and the next wait
    /// opens another. On a cluster, a cluster connection of its own, which routes each read to
    /// the master serving the stream (and follows it when the slot moves); its waits end by
    /// the server's timeout, as `CLIENT UNBLOCK` would have to reach that master by its own
    /// client id there.
    async fn open(servers: &Servers, timeout: Duration, moves: u64) -> Result<Self, RedisError> {
        let mut con = servers.connect_plain(timeout).await?;
        let id = if servers.is_cluster() {
            None
        } else {
            redis::cmd("CLIENT")
                .arg("ID")
                .query_async(&mut con)
                .await
                .ok()
        };
        Ok(Self { con, id, moves })
    }
}

/// How a consuming wait ended.
enum Woken {
    /// With new entries, now leased to this consumer.
    Took(Vec<Fetched<Bytes>>),
    /// With nothing: its time ran out.
    TimedOut,
    /// With nothing to hand over yet: a wake-up (a message delayed sooner than all others),
    /// only entries without the payload field, or a group recreated. The script runs next.
    Again,
}

/// What the promotions of delayed messages learned.
#[derive(Debug, Clone, PartialEq, Eq)]
struct DelayedState {
    /// When the next delayed message is due, on the local clock (the server's due time less
    /// its `TIME`, from when the answer came; at that instant: one is, more than a promotion
    /// moves at once); `None` when none is delayed.
    due_at: Option<Instant>,
    /// When a read or the script last looked (`None`: never).
    learned_at: Option<Instant>,
    /// The wake stream's last id (`0-0` when it has none), as the last fetch script that took
    /// nothing saw it: a wait blocks for entries after it.
    wake_id: String,
}

impl DelayedState {
    /// How long from `now` until the next delayed message is due (zero if it is).
    fn next_due(&self, now: Instant) -> Option<Duration> {
        self.due_at.map(|at| at.saturating_duration_since(now))
    }
}

impl Default for DelayedState {
    fn default() -> Self {
        Self {
            due_at: None,
            learned_at: None,
            wake_id: "0-0".into(),
        }
    }
}

/// How long until the earliest delayed message is due (zero if it is), from
/// `ZRANGE delayed 0 0 WITHSCORES` (RESP2: member, score; RESP3: one pair) and `TIME`; `None`
/// inside when nothing is delayed.
fn parse_probe(earliest: Value, time: Value) -> Option<Option<Duration>> {
    let Value::Array(items) = earliest else {
        return None;
    };
    let mut items = items.into_iter();
    let score = match items.next() {
        None => return Some(None),
        Some(Value::Array(pair)) => pair.into_iter().nth(1)?,
        Some(_) => items.next()?,
    };
    let due_ms = match score {
        Value::Double(score) => score,
        Value::BulkString(bytes) => std::str::from_utf8(&bytes).ok()?.parse().ok()?,
        _ => return None,
    };
    let Value::Array(time) = time else {
        return None;
    };
    let (secs, micros) = (as_u64(time.first()?)?, as_u64(time.get(1)?)?);
    let now_ms = secs.saturating_mul(1000).saturating_add(micros / 1000);
    // A score is a whole number of ms the publish script wrote; the cast saturates.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let due_ms = due_ms.max(0.0) as u64;
    Some(Some(Duration::from_millis(due_ms.saturating_sub(now_ms))))
}

/// The fetch script's `ms until the next delayed message is due, -1 if none`.
fn parse_due(reply: &Value) -> Option<Option<Duration>> {
    match reply {
        Value::Int(-1) => Some(None),
        due => as_u64(due).map(|ms| Some(Duration::from_millis(ms))),
    }
}

/// What one run of the fetch script returned.
struct ScriptFetch {
    /// Where the next reclaim goes on: this entry (`0-0`: the first lapsed one).
    cursor: String,
    entries: Vec<Fetched<Bytes>>,
    /// Entries without the payload field that the script dead-lettered.
    undeliverable: Vec<String>,
    /// Some entry was idle long enough to be reclaimed when the script started.
    reclaimable: bool,
    /// The group's last-delivered id, when the script took nothing: where to wait for more.
    last_delivered: Option<String>,
    /// How long until the next delayed message is due, as its promotion found.
    next_due: Option<Duration>,
    /// The wake stream's last id, when the script took nothing.
    wake_id: Option<String>,
    /// This consumer's tenure, under which the entries were delivered.
    tenure: Tenure,
}

/// `{cursor, {id, count, payload, ...}, last-delivered-id or nil, 1 if reclaimable else 0,
/// {undeliverable id, ...}, ms until the next delayed message is due or -1,
/// wake stream's last id or nil, tenure}`.
fn parse_fetch(reply: Value) -> Option<ScriptFetch> {
    let Value::Array(parts) = reply else {
        return None;
    };
    let mut parts = parts.into_iter();
    let cursor = as_string(parts.next()?)?;
    let Value::Array(flat) = parts.next()? else {
        return None;
    };
    let last = as_string(parts.next()?);
    let reclaimable = as_u64(&parts.next()?)? == 1;
    let Value::Array(undeliverable) = parts.next()? else {
        return None;
    };
    let undeliverable = undeliverable
        .into_iter()
        .map(as_string)
        .collect::<Option<Vec<_>>>()?;
    let next_due = parse_due(&parts.next()?)?;
    let wake_id = parts.next().and_then(as_string);
    let tenure = Tenure(as_u64(&parts.next()?)?);
    let mut entries = Vec::with_capacity(flat.len() / 3);
    let mut flat = flat.into_iter();
    while let (Some(id), Some(count), Some(payload)) = (flat.next(), flat.next(), flat.next()) {
        let count = as_u64(&count)?;
        let Value::BulkString(payload) = payload else {
            return None;
        };
        entries.push(Fetched {
            id: as_string(id)?.into(),
            payload: Bytes::from(payload),
            delivery_count: u32::try_from(count).unwrap_or(u32::MAX),
            fence: Fence(count),
            tenure,
        });
    }
    Some(ScriptFetch {
        cursor,
        entries,
        undeliverable,
        reclaimable,
        last_delivered: last,
        next_due,
        wake_id,
        tenure,
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use redis::Value;

    use super::{fence_runs, parse_probe, StreamId};

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn the_probe_reads_the_next_due_time_in_resp2_and_resp3() {
        let time = || Value::Array(vec![bulk("1700000000"), bulk("250999")]);
        assert_eq!(parse_probe(Value::Array(vec![]), time()), Some(None));
        let resp2 = Value::Array(vec![bulk("0000000000000001:x"), bulk("1700000001000")]);
        assert_eq!(
            parse_probe(resp2, time()),
            Some(Some(Duration::from_millis(750)))
        );
        let resp3 = Value::Array(vec![Value::Array(vec![
            bulk("0000000000000001:x"),
            Value::Double(1_699_999_000_000.0),
        ])]);
        assert_eq!(parse_probe(resp3, time()), Some(Some(Duration::ZERO)));
        assert_eq!(parse_probe(Value::Nil, time()), None);
        assert_eq!(
            parse_probe(Value::Array(vec![bulk("m"), bulk("1")]), Value::Nil),
            None
        );
    }

    #[test]
    fn fences_go_as_runs_in_order() {
        assert_eq!(fence_runs([]), []);
        assert_eq!(fence_runs([1, 1, 1]), [(1, 3)]);
        assert_eq!(
            fence_runs([1, 1, 3, 1, 2, 2]),
            [(1, 2), (3, 1), (1, 1), (2, 2)]
        );
    }

    #[test]
    fn stream_ids_parse_strictly_and_order_numerically() {
        assert_eq!(
            StreamId::parse("1700000000000-7"),
            Some(StreamId(1_700_000_000_000, 7))
        );
        for bad in [
            "",
            "-",
            "1-",
            "-1",
            "1",
            "1-2-3",
            "a-1",
            "1-+2",
            "1 -2",
            "99999999999999999999-0",
            "18446744073709551616-0",
            "0-18446744073709551616",
        ] {
            assert_eq!(StreamId::parse(bad), None, "{bad:?}");
        }
        assert_eq!(StreamId::parse("007-01"), Some(StreamId(7, 1)));
        assert_eq!(
            StreamId::parse("18446744073709551615-3"),
            Some(StreamId(u64::MAX, 3))
        );
        let mut ids = ["10-0", "9-5", "9-10", "0-1"].map(|s| StreamId::parse(s).unwrap());
        ids.sort_unstable();
        assert_eq!(ids.map(|id| id.to_string()), ["0-1", "9-5", "9-10", "10-0"]);
    }

    /// The fenced scripts compare ids as Redis spells them: another spelling of the same id
    /// is sent to no script (its lease is not held).
    #[test]
    fn only_canonical_ids_go_to_the_fenced_scripts() {
        for good in ["0-0", "0-1", "10-0", "1700000000000-17"] {
            let id = StreamId::parse_canonical(good).expect(good);
            assert_eq!(id.to_string(), good);
        }
        for bad in ["01-1", "1-01", "00-0", "0-00", "1-", "x-1"] {
            assert_eq!(StreamId::parse_canonical(bad), None, "{bad:?}");
        }
    }
}
