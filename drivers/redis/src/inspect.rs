//! [`RedisInspector`]: the inspector SPI over Redis streams — `XINFO`, `XPENDING`, `XRANGE` to
//! read, one script per dead letter to requeue it, `XDEL` to purge — on its own connection
//! (no consumer group or consumer is created).

use std::collections::HashMap;
use std::sync::LazyLock;
use std::time::{Duration, SystemTime};

use leasehold_core::{
    group_streams, queue_overview, ConsumerOverview, DeadLetterEntry, Discovered, GroupOverview,
    InspectError, Inspector, Listing, MessageId, NotDead, Overview, Page, PendingEntry,
    PendingQuery, Purged, QueueOverview, Requeued, Selection, Shards,
};
use redis::streams::{
    StreamInfoConsumersReply, StreamInfoGroupsReply, StreamPendingCountReply, StreamPendingReply,
    StreamRangeReply,
};
use redis::{Script, Value};

use crate::conn::{Connection, Servers};
use crate::error::error;
use crate::error::ConnectError;
use crate::keys::{stored_prefix, DelayedKeys};
use crate::publisher::delayed_summary;

static REQUEUE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("lua/requeue.lua")));

/// Dead letters a requeue, a purge or a listing handles per round trip.
const CHUNK: usize = 100;

/// Reads streams and acts on their dead letters. Cheap to clone.
#[derive(Clone)]
pub struct RedisInspector {
    conn: Connection,
    field: String,
    dead_keys: HashMap<String, String>,
}

impl std::fmt::Debug for RedisInspector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisInspector")
            .field("field", &self.field)
            .finish_non_exhaustive()
    }
}

impl RedisInspector {
    /// Connects to `servers`: a URL, or [`Servers::cluster`] (each stream's commands go to the
    /// master serving its slot, and [`streams`](Self::streams) walks every master) /
    /// [`Servers::sentinel`] (the connection follows a failover), as
    /// [`RedisConfig::new`](crate::RedisConfig::new) takes them.
    ///
    /// # Errors
    ///
    /// A URL that does not parse, a server that refuses the credentials, one that cannot be
    /// reached, or (behind Sentinel) no master found through the sentinels.
    pub async fn connect(servers: impl Into<Servers>) -> Result<Self, ConnectError> {
        let servers: Servers = servers.into();
        let timeout = Duration::from_secs(5);
        servers.validate()?;
        servers.check_credentials(timeout).await?;
        let conn = servers.connect(timeout, Some(timeout)).await?;
        Ok(Self {
            conn,
            field: "data".into(),
            dead_keys: HashMap::new(),
        })
    }

    /// The entries' payload field, as the workers' [`RedisConfig::field`](crate::RedisConfig)
    /// (default `data`): what a dead letter's payload is read from.
    #[must_use]
    pub fn field(mut self, field: impl Into<String>) -> Self {
        self.field = field.into();
        self
    }

    /// The dead-letter stream of `stream`, where its workers were configured with one of their
    /// own (default: `{stream}:dead`, in the stream's hash slot).
    #[must_use]
    pub fn dead_letter_stream(mut self, stream: impl Into<String>, key: impl Into<String>) -> Self {
        self.dead_keys.insert(stream.into(), key.into());
        self
    }

    /// The streams of this database, dead-letter and wake-up streams left out, sorted by name (at most
    /// `limit`): what a dashboard shows when it is not told which. One `SCAN … TYPE stream`
    /// walk of the keyspace, 1000 keys per round trip, so call it seldom on a large database;
    /// on a Redis Cluster, one walk of each master's.
    ///
    /// # Errors
    ///
    /// Redis failed or is older than 6.0 (no `TYPE` filter on `SCAN`).
    pub async fn streams(&self, limit: usize) -> Result<Vec<String>, InspectError> {
        let mut found = std::collections::BTreeSet::new();
        let nodes = self
            .conn
            .key_holders()
            .await
            .map_err(|e| InspectError::Backend(error("CLUSTER SLOTS", e)))?;
        for node in &nodes {
            let mut cursor = 0u64;
            loop {
                let (next, keys): (u64, Vec<String>) = self
                    .conn
                    .query_on(
                        node,
                        redis::cmd("SCAN")
                            .arg(cursor)
                            .arg("COUNT")
                            .arg(1000)
                            .arg("TYPE")
                            .arg("stream"),
                    )
                    .await
                    .map_err(|e| InspectError::Backend(error("SCAN", e)))?;
                found.extend(keys);
                cursor = next;
                if cursor == 0 {
                    break;
                }
            }
        }
        // Each stream's dead letters, and the wake-up stream of its delayed messages.
        let theirs: std::collections::HashSet<String> = found
            .iter()
            .flat_map(|stream| [self.dead_key(stream), DelayedKeys::stored(stream).wake])
            .collect();
        Ok(found
            .into_iter()
            .filter(|key| !theirs.contains(key))
            .take(limit)
            .collect())
    }

    /// The streams of this database as [`streams`](Self::streams) lists them, the shards of
    /// each sharded queue (streams named `{queue:i}`) grouped under the queue, sorted by name
    /// (at most `limit` streams and queues). One walk of the keyspace, as `streams`.
    ///
    /// # Errors
    ///
    /// As [`streams`](Self::streams).
    pub async fn discover(&self, limit: usize) -> Result<Vec<Discovered>, InspectError> {
        let mut found = group_streams(self.streams(usize::MAX).await?);
        found.truncate(limit);
        Ok(found)
    }

    /// The sharded queue `queue`: its shards' overviews and their totals, or `None` when no
    /// stream is named like one of its shards. Finds the shards with one walk of the keyspace
    /// (as [`streams`](Self::streams)), so a shard not created yet is simply missing; when the
    /// count is known, [`shards_overview`](Self::shards_overview) reads them without the walk.
    ///
    /// # Errors
    ///
    /// Redis failed.
    pub async fn queue(&self, queue: &str) -> Result<Option<QueueOverview>, InspectError> {
        let found = group_streams(self.streams(usize::MAX).await?);
        let Some(shards) = found.into_iter().find_map(|d| match d {
            Discovered::Queue {
                queue: name,
                shards,
            } if name == queue => Some(shards),
            _ => None,
        }) else {
            return Ok(None);
        };
        queue_overview(self, queue, &shards).await.map(Some)
    }

    /// The overview of every shard of `shards` that exists, and their totals.
    ///
    /// # Errors
    ///
    /// Redis failed.
    pub async fn shards_overview(&self, shards: &Shards) -> Result<QueueOverview, InspectError> {
        let all: Vec<(u16, String)> = shards
            .streams()
            .enumerate()
            .map(|(i, s)| (i as u16, s))
            .collect();
        queue_overview(self, shards.queue(), &all).await
    }

    fn dead_key(&self, stream: &str) -> String {
        self.dead_keys
            .get(stream)
            .cloned()
            .unwrap_or_else(|| format!("{}:dead", stored_prefix(stream)))
    }

    async fn query<T: redis::FromRedisValue>(
        &self,
        what: &str,
        cmd: &redis::Cmd,
    ) -> Result<T, InspectError> {
        cmd.query_async(&mut self.conn.clone())
            .await
            .map_err(|e| InspectError::Backend(error(what, e)))
    }

    /// Fails unless `key` is a stream.
    async fn expect_stream(&self, key: &str) -> Result<(), InspectError> {
        let kind: String = self.query("TYPE", redis::cmd("TYPE").arg(key)).await?;
        match kind.as_str() {
            "stream" => Ok(()),
            "none" => Err(InspectError::NoSuchStream(key.into())),
            _ => Err(InspectError::NotAStream {
                key: key.into(),
                kind,
            }),
        }
    }

    /// The length of `key` if it is a stream, 0 if it does not exist.
    async fn len_of(&self, key: &str) -> Result<u64, InspectError> {
        match self.expect_stream(key).await {
            Ok(()) => self.query("XLEN", redis::cmd("XLEN").arg(key)).await,
            Err(InspectError::NoSuchStream(_)) => Ok(0),
            Err(e) => Err(e),
        }
    }

    async fn groups(&self, stream: &str) -> Result<StreamInfoGroupsReply, InspectError> {
        self.query(
            "XINFO GROUPS",
            redis::cmd("XINFO").arg("GROUPS").arg(stream),
        )
        .await
    }

    /// The group to list: the one named, or the stream's only one.
    async fn group(&self, stream: &str, group: Option<&str>) -> Result<String, InspectError> {
        self.expect_stream(stream).await?;
        let groups: Vec<String> = self
            .groups(stream)
            .await?
            .groups
            .into_iter()
            .map(|g| g.name)
            .collect();
        match group {
            Some(name) if groups.iter().any(|g| g == name) => Ok(name.into()),
            Some(name) => Err(InspectError::NoSuchGroup {
                stream: stream.into(),
                group: name.into(),
                groups,
            }),
            None if groups.len() == 1 => Ok(groups[0].clone()),
            None => Err(InspectError::WhichGroup {
                stream: stream.into(),
                groups,
            }),
        }
    }

    /// The server's clock, in milliseconds since the epoch.
    async fn server_millis(&self) -> Result<u64, InspectError> {
        let (secs, micros): (u64, u64) = self.query("TIME", &redis::cmd("TIME")).await?;
        Ok(secs * 1000 + micros / 1000)
    }

    /// Dead letters of `stream` from `page`, with payloads if asked.
    async fn dead_page(
        &self,
        stream: &str,
        page: &Page,
        payloads: bool,
    ) -> Result<Listing<DeadLetterEntry>, InspectError> {
        page.validate()?;
        let dead = self.dead_key(stream);
        let start = page
            .after
            .as_ref()
            .map_or_else(|| "-".to_owned(), |id| format!("({id}"));
        let reply: StreamRangeReply = self
            .query(
                "XRANGE",
                redis::cmd("XRANGE")
                    .arg(&dead)
                    .arg(start)
                    .arg("+")
                    .arg("COUNT")
                    .arg(page.limit),
            )
            .await?;
        let entries: Vec<DeadLetterEntry> = reply
            .ids
            .into_iter()
            .map(|entry| self.dead_entry(entry, payloads))
            .collect();
        Ok(listing(entries, page.limit, |e| e.id.clone()))
    }

    /// A dead-letter stream entry as the SPI gives it.
    fn dead_entry(&self, entry: redis::streams::StreamId, payloads: bool) -> DeadLetterEntry {
        let text = |name: &str| match entry.map.get(name) {
            Some(Value::BulkString(bytes)) => String::from_utf8_lossy(bytes).into_owned(),
            _ => String::new(),
        };
        let payload = match entry.map.get(&self.field) {
            Some(Value::BulkString(bytes)) if payloads => Some(bytes.clone()),
            _ => None,
        };
        DeadLetterEntry::new(
            entry.id.as_str(),
            text("id"),
            text("reason"),
            text("deliveries").parse().unwrap_or(0),
        )
        .with_at(id_time(&entry.id))
        .with_payload(payload)
    }

    /// The dead-letter ids `which` selects, oldest first. An explicit id that names a live
    /// entry of the stream, or is no entry id at all, refuses the whole action; ids that are no dead letters (any more) go
    /// on, to be reported gone, so repeating an interrupted action finishes it.
    async fn select(
        &self,
        stream: &str,
        which: &Selection,
    ) -> Result<Vec<MessageId>, InspectError> {
        self.expect_stream(stream).await?;
        let dead = self.dead_key(stream);
        let ids = match which {
            Selection::Ids(ids) => {
                let mut wrong = Vec::new();
                for id in ids {
                    if !exists(self, &dead, id).await? {
                        let what = if exists(self, stream, id).await? {
                            NotDead::Live
                        } else {
                            NotDead::Unknown
                        };
                        wrong.push((id.clone(), what));
                    }
                }
                let refused = wrong
                    .iter()
                    .any(|(id, what)| *what == NotDead::Live || !is_stream_id(id.as_str()));
                if refused {
                    return Err(InspectError::NotDeadLetters {
                        stream: stream.into(),
                        ids: wrong,
                    });
                }
                return Ok(ids.clone());
            }
            Selection::All => None,
            Selection::OlderThan(age) => {
                let now = self.server_millis().await?;
                Some(now.saturating_sub(u64::try_from(age.as_millis()).unwrap_or(u64::MAX)))
            }
        };
        // Up to the newest dead letter now: those that arrive meanwhile are not taken.
        let mut page = Page::first(CHUNK);
        let mut out = Vec::new();
        loop {
            let listing = self.dead_page(stream, &page, false).await?;
            for entry in listing.entries {
                if ids.is_some_and(|cutoff| id_millis(entry.id.as_str()) >= cutoff) {
                    return Ok(out);
                }
                out.push(entry.id);
            }
            match listing.next {
                Some(next) => page = next,
                None => return Ok(out),
            }
        }
    }
}

impl Inspector for RedisInspector {
    async fn overview(&self, stream: &str) -> Result<Overview, InspectError> {
        self.expect_stream(stream).await?;
        let length = self.len_of(stream).await?;
        let now = self.server_millis().await?;
        let mut groups = Vec::new();
        for group in self.groups(stream).await?.groups {
            let consumers: StreamInfoConsumersReply = self
                .query(
                    "XINFO CONSUMERS",
                    redis::cmd("XINFO")
                        .arg("CONSUMERS")
                        .arg(stream)
                        .arg(&group.name),
                )
                .await?;
            let summary: StreamPendingReply = self
                .query(
                    "XPENDING",
                    redis::cmd("XPENDING").arg(stream).arg(&group.name),
                )
                .await?;
            let oldest_pending_age = match summary {
                StreamPendingReply::Data(data) => Some(Duration::from_millis(
                    now.saturating_sub(id_millis(&data.start_id)),
                )),
                _ => None,
            };
            groups.push(
                GroupOverview::new(group.name)
                    .with_lag(group.lag.map(|n| n as u64))
                    .with_pending(group.pending as u64)
                    .with_delivered(group.entries_read.map(|n| n as u64))
                    .with_oldest_pending_age(oldest_pending_age)
                    .with_consumers(
                        consumers
                            .consumers
                            .into_iter()
                            .map(|c| {
                                ConsumerOverview::new(
                                    c.name,
                                    c.pending as u64,
                                    Duration::from_millis(c.idle as u64),
                                )
                            })
                            .collect(),
                    ),
            );
        }
        let dead_letters = self.len_of(&self.dead_key(stream)).await?;
        let delayed = delayed_summary(&mut self.conn.clone(), &DelayedKeys::stored(stream).delayed)
            .await
            .map_err(InspectError::Backend)?;
        Ok(Overview::new(stream)
            .with_length(length)
            .with_groups(groups)
            .with_dead_letters(dead_letters)
            .with_delayed(delayed))
    }

    async fn pending(
        &self,
        stream: &str,
        group: Option<&str>,
        query: &PendingQuery,
    ) -> Result<Listing<PendingEntry>, InspectError> {
        query.page.validate()?;
        let group = self.group(stream, group).await?;
        let mut cmd = redis::cmd("XPENDING");
        cmd.arg(stream).arg(&group);
        if let Some(idle) = query.min_idle {
            cmd.arg("IDLE")
                .arg(u64::try_from(idle.as_millis()).unwrap_or(u64::MAX));
        }
        let start = query
            .page
            .after
            .as_ref()
            .map_or_else(|| "-".to_owned(), |id| format!("({id}"));
        cmd.arg(start).arg("+").arg(query.page.limit);
        if let Some(consumer) = &query.consumer {
            cmd.arg(consumer);
        }
        let reply: StreamPendingCountReply = self.query("XPENDING", &cmd).await?;
        let entries: Vec<PendingEntry> = reply
            .ids
            .into_iter()
            .map(|p| {
                PendingEntry::new(
                    p.id.as_str(),
                    p.consumer,
                    Duration::from_millis(p.last_delivered_ms as u64),
                    u32::try_from(p.times_delivered).unwrap_or(u32::MAX),
                )
            })
            .collect();
        Ok(listing(entries, query.page.limit, |e| e.id.clone()))
    }

    async fn dead_letters(
        &self,
        stream: &str,
        page: &Page,
        payloads: bool,
    ) -> Result<Listing<DeadLetterEntry>, InspectError> {
        self.expect_stream(stream).await?;
        self.dead_page(stream, page, payloads).await
    }

    async fn dead_letter(
        &self,
        stream: &str,
        id: &MessageId,
    ) -> Result<Option<DeadLetterEntry>, InspectError> {
        self.expect_stream(stream).await?;
        if !is_stream_id(id.as_str()) {
            return Ok(None);
        }
        let reply: StreamRangeReply = self
            .query(
                "XRANGE",
                redis::cmd("XRANGE")
                    .arg(self.dead_key(stream))
                    .arg(id.as_str())
                    .arg(id.as_str()),
            )
            .await?;
        Ok(reply
            .ids
            .into_iter()
            .next()
            .map(|e| self.dead_entry(e, true)))
    }

    async fn requeue(&self, stream: &str, which: &Selection) -> Result<Requeued, InspectError> {
        let ids = self.select(stream, which).await?;
        let dead = self.dead_key(stream);
        let mut report = Requeued::default();
        for id in ids {
            let moved: Option<String> = REQUEUE
                .key(stream)
                .key(&dead)
                .arg(id.as_str())
                .invoke_async(&mut self.conn.clone())
                .await
                .map_err(|e| InspectError::Backend(error("requeue", e)))?;
            match moved {
                Some(new_id) => report.moved.push((id, new_id.into())),
                None => report.gone.push(id),
            }
        }
        Ok(report)
    }

    async fn purge_dead(&self, stream: &str, which: &Selection) -> Result<Purged, InspectError> {
        let ids = self.select(stream, which).await?;
        let dead = self.dead_key(stream);
        let mut report = Purged::default();
        for chunk in ids.chunks(CHUNK) {
            let mut pipe = redis::pipe();
            for id in chunk {
                pipe.cmd("XDEL").arg(&dead).arg(id.as_str());
            }
            let deleted: Vec<u64> = pipe
                .query_async(&mut self.conn.clone())
                .await
                .map_err(|e| InspectError::Backend(error("purge", e)))?;
            for (id, n) in chunk.iter().zip(deleted) {
                if n == 1 {
                    report.deleted.push(id.clone());
                } else {
                    report.gone.push(id.clone());
                }
            }
        }
        Ok(report)
    }
}

/// Whether stream `key` holds entry `id` (an id that is no entry id holds nothing).
async fn exists(
    inspector: &RedisInspector,
    key: &str,
    id: &MessageId,
) -> Result<bool, InspectError> {
    if !is_stream_id(id.as_str()) {
        return Ok(false);
    }
    let reply: StreamRangeReply = inspector
        .query(
            "XRANGE",
            redis::cmd("XRANGE")
                .arg(key)
                .arg(id.as_str())
                .arg(id.as_str()),
        )
        .await?;
    Ok(!reply.ids.is_empty())
}

/// A page of `entries` (asked for `limit`): another may follow if it is full.
fn listing<T>(entries: Vec<T>, limit: usize, id: impl Fn(&T) -> MessageId) -> Listing<T> {
    let next = (entries.len() == limit)
        .then(|| entries.last().map(|last| Page::after(id(last), limit)))
        .flatten();
    Listing::new(entries, next)
}

/// Whether `id` has the form of an entry id (`<ms>-<seq>`).
fn is_stream_id(id: &str) -> bool {
    id.split_once('-')
        .is_some_and(|(ms, seq)| ms.parse::<u64>().is_ok() && seq.parse::<u64>().is_ok())
}

/// The milliseconds part of an entry id (0 if it is none).
fn id_millis(id: &str) -> u64 {
    id.split_once('-')
        .and_then(|(ms, _)| ms.parse().ok())
        .unwrap_or(0)
}

/// When the entry with this id was appended (Redis ids carry the server's time).
fn id_time(id: &str) -> Option<SystemTime> {
    let ms = id_millis(id);
    (ms > 0).then(|| SystemTime::UNIX_EPOCH + Duration::from_millis(ms))
}
