//! The Redis [`Publisher`]: appends to a stream, at once or when due, once per deduplication
//! key. It needs no consumer group and no consumer name.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use leasehold_core::{
    BackendError, BackendResult, DelayedSummary, Due, MessageId, Outgoing, Published, Publisher,
};
use redis::Value;

use crate::backend::create_group;
use crate::config::PublisherConfig;
use crate::conn::Connection;
use crate::error::error;
use crate::error::ConnectError;
use crate::keys::{tenure_key, DelayedKeys};
use crate::scripts::{DELAYED_SUMMARY, PUBLISH};

/// Publishes to one Redis stream, implementing [`Publisher`].
///
/// - A batch of plain messages (no due time, no deduplication key) is one pipelined round trip
///   of `XADD`s — on one server. On a Redis Cluster every batch is the script below: a slot
///   migration can move the stream between two commands of a pipeline, whose rest then fails
///   with `ASK` after the first ones were appended (a retry would append those twice), while a
///   script runs whole or not at all, so the cluster client can follow its `ASK` / `MOVED` and
///   retry its `TRYAGAIN` safely.
/// - A batch with any due time or deduplication key is one `EVALSHA` of a script that publishes
///   every message of it, in order, atomically. Due times are computed in the script on the
///   server's clock: a message due later waits in the sorted set `{stream}:delayed` and its id
///   is `delayed:<n>` (it gets an entry id when a consumer's fetch moves it into the stream);
///   one due already is appended at once. A deduplication key is held in
///   `{stream}:dedupe:<key>` for its time to live, holding the id its first publish returned.
///
/// Cheap to clone: clones share one multiplexed connection (which reconnects by itself).
#[derive(Clone)]
pub struct RedisPublisher {
    inner: Arc<Inner>,
}

struct Inner {
    config: PublisherConfig,
    keys: DelayedKeys,
    commands: Connection,
}

/// Leaves the URL out: it may hold a password.
impl std::fmt::Debug for RedisPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisPublisher")
            .field("stream", &self.inner.config.stream)
            .field("field", &self.inner.config.field)
            .field("max_len", &self.inner.config.max_len)
            .finish_non_exhaustive()
    }
}

impl RedisPublisher {
    /// Connects, loads the publish script (see `Connection::load_scripts`), and creates the
    /// consumer groups [`PublisherConfig::groups`] declares, where missing. Nothing else is
    /// created until the first publish.
    ///
    /// # Errors
    ///
    /// [`ConnectError::Config`] when the configuration cannot work (nothing is sent), and
    /// [`ConnectError::Redis`] when Redis cannot be reached or refuses the credentials.
    pub async fn connect(config: PublisherConfig) -> Result<Self, ConnectError> {
        config.validate()?;
        let timeout = config.command_timeout;
        config.servers.check_credentials(timeout).await?;
        let commands = config.servers.connect(timeout, Some(timeout)).await?;
        commands.load_scripts(&[("publish", &PUBLISH)]).await?;
        let publisher = Self::from_parts(config, commands)?;
        let inner = &publisher.inner;
        for group in &inner.config.groups {
            let tenure = tenure_key(&inner.config.stream, group)?;
            create_group(
                &inner.commands,
                &inner.config.stream,
                &inner.keys.wake,
                &tenure,
                group,
            )
            .await?;
        }
        Ok(publisher)
    }

    /// A publisher of `config` over `commands` (shared by the shards of a sharded queue).
    pub(crate) fn from_parts(
        config: PublisherConfig,
        commands: Connection,
    ) -> Result<Self, ConnectError> {
        Ok(Self {
            inner: Arc::new(Inner {
                keys: DelayedKeys::of(&config.stream)?,
                config,
                commands,
            }),
        })
    }

    /// Publishes one message; see [`Publisher::publish_batch`].
    ///
    /// # Errors
    ///
    /// As [`Publisher::publish_batch`].
    pub async fn publish(&self, message: Outgoing<Bytes>) -> BackendResult<Published> {
        let mut published = self.publish_batch(vec![message]).await?;
        published
            .pop()
            .ok_or_else(|| BackendError::fatal("publish: no result"))
    }

    /// The stream's key.
    pub fn stream_key(&self) -> &str {
        &self.inner.config.stream
    }

    /// The sorted set holding the stream's delayed messages (`{stream}:delayed`).
    pub fn delayed_key(&self) -> &str {
        &self.inner.keys.delayed
    }

    /// Plain messages: one pipeline of `XADD`s.
    async fn append(&self, batch: Vec<Outgoing<Bytes>>) -> BackendResult<Vec<Published>> {
        let config = &self.inner.config;
        let mut pipe = redis::pipe();
        for message in &batch {
            pipe.add_command(config.xadd(&message.payload));
        }
        if let Some(wait) = config.wait {
            pipe.add_command(wait.cmd());
        }
        let mut replies = self
            .inner
            .commands
            .pipeline_at(&pipe, config.stream.as_bytes())
            .await
            .map_err(|e| error("publish", e))?;
        if let Some(wait) = config.wait {
            let acked = replies.pop().unwrap_or(Value::Nil);
            acked
                .extract_error()
                .and_then(|acked| wait.check(&acked))
                .map_err(|e| error("publish", e))?;
        }
        let ids: Vec<String> = replies
            .into_iter()
            .map(|reply| {
                reply
                    .extract_error()
                    .and_then(|id| redis::from_redis_value(id).map_err(Into::into))
            })
            .collect::<Result<_, redis::RedisError>>()
            .map_err(|e| error("publish", e))?;
        Ok(ids
            .into_iter()
            .map(|id| Published::new(id.into(), false))
            .collect())
    }

    /// Messages with due times or deduplication keys: one run of the publish script.
    async fn publish_script(&self, batch: Vec<Outgoing<Bytes>>) -> BackendResult<Vec<Published>> {
        let Inner {
            config,
            keys,
            commands,
        } = &*self.inner;
        let dedupe_keys: Vec<String> = batch
            .iter()
            .filter_map(|message| message.dedupe.as_ref())
            .map(|dedupe| format!("{}{}", keys.dedupe, dedupe.key))
            .collect();
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(PUBLISH.get_hash())
            .arg(4 + dedupe_keys.len())
            .arg(&config.stream)
            .arg(&keys.delayed)
            .arg(&keys.seq)
            .arg(&keys.wake)
            .arg(&dedupe_keys)
            .arg(&config.field)
            .arg(config.max_len_arg());
        for message in &batch {
            let due = match message.due {
                None => String::new(),
                Some(Due::After(delay)) => format!("+{}", millis_up(delay)),
                Some(Due::At(at)) => {
                    let since_epoch = at.duration_since(SystemTime::UNIX_EPOCH);
                    format!("@{}", since_epoch.map_or(0, millis_up))
                }
            };
            let ttl = message
                .dedupe
                .as_ref()
                .map(|dedupe| millis_up(dedupe.ttl).to_string())
                .unwrap_or_default();
            cmd.arg(due).arg(ttl).arg(message.payload.as_ref());
        }
        let reply: Value = commands
            .write(&cmd, config.stream.as_bytes(), Some(&PUBLISH), config.wait)
            .await
            .map_err(|e| error("publish", e))?;
        parse_published(reply)
            .filter(|published| published.len() == batch.len())
            .ok_or_else(|| BackendError::fatal("publish: unexpected reply from the script"))
    }
}

impl Publisher for RedisPublisher {
    type Payload = Bytes;

    async fn publish_batch(&self, batch: Vec<Outgoing<Bytes>>) -> BackendResult<Vec<Published>> {
        let now = SystemTime::now();
        for (i, message) in batch.iter().enumerate() {
            message.check(now).map_err(|e| {
                BackendError::fatal(format!("publish: message {i} refused, nothing sent: {e}"))
                    .with_source(e)
            })?;
        }
        if batch.is_empty() {
            Ok(Vec::new())
        } else if !self.inner.config.servers.is_cluster()
            && batch.iter().all(|m| m.due.is_none() && m.dedupe.is_none())
        {
            self.append(batch).await
        } else {
            self.publish_script(batch).await
        }
    }

    /// One small script: `ZCARD` and the earliest due time against the server's clock.
    async fn delayed(&self) -> BackendResult<DelayedSummary> {
        delayed_summary(&mut self.inner.commands.clone(), &self.inner.keys.delayed).await
    }
}

/// Whole milliseconds, rounded up: a delay is never cut short, a ttl never below 1 ms.
fn millis_up(duration: Duration) -> u128 {
    duration.as_micros().div_ceil(1000)
}

/// `{id, 1 if a duplicate else 0, ...}`.
fn parse_published(reply: Value) -> Option<Vec<Published>> {
    let Value::Array(flat) = reply else {
        return None;
    };
    let mut out = Vec::with_capacity(flat.len() / 2);
    let mut flat = flat.into_iter();
    while let Some(id) = flat.next() {
        let id = match id {
            Value::BulkString(bytes) => String::from_utf8(bytes).ok()?,
            Value::SimpleString(id) => id,
            _ => return None,
        };
        let Value::Int(duplicate) = flat.next()? else {
            return None;
        };
        out.push(Published::new(MessageId::from(id), duplicate == 1));
    }
    Some(out)
}

/// How many messages wait in the delayed set `key`, and when the next is due by the server's
/// clock: one script call.
pub(crate) async fn delayed_summary(
    con: &mut impl redis::aio::ConnectionLike,
    key: &str,
) -> BackendResult<DelayedSummary> {
    let (len, due): (u64, i64) = DELAYED_SUMMARY
        .key(key)
        .invoke_async(con)
        .await
        .map_err(|e| error("delayed", e))?;
    Ok(DelayedSummary::new(
        len,
        u64::try_from(due).ok().map(Duration::from_millis),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn millis_round_up() {
        assert_eq!(millis_up(Duration::ZERO), 0);
        assert_eq!(millis_up(Duration::from_micros(1)), 1);
        assert_eq!(millis_up(Duration::from_millis(1500)), 1500);
        assert_eq!(millis_up(Duration::from_micros(1_500_001)), 1501);
    }
}
