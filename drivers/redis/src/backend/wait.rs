//! The wait of an idle consumer, on its dedicated connection.
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

use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use leasehold_core::{BackendError, BackendResult, Fetched};
use redis::{RedisError, Value};

use super::reply::{parse_entries, parse_streams};
use super::{millis, RedisBackend};
use crate::conn::{node_changed, Connection, Servers};
use crate::error::{error, is_nogroup, unblocked, Unblocked};

impl RedisBackend {
    /// Waits (on the dedicated connection) until the stream has an entry after `last`, the
    /// wake stream one after `wake` (a publisher delayed a message due earlier than all
    /// others), or `wait` passes. It consumes nothing.
    pub(super) async fn wait_for_new(
        &self,
        last: &str,
        wake: &str,
        wait: Duration,
    ) -> BackendResult<()> {
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
    pub(super) async fn wait_consuming(&self, max: usize, wait: Duration) -> BackendResult<Woken> {
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
    pub(super) async fn unblocked(&self, why: Unblocked, e: &RedisError) -> BackendResult<()> {
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
    pub(super) async fn ack_wake(&self, ids: impl Iterator<Item = String>) {
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
    pub(super) async fn block_on(
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
    pub(super) async fn unblock(&self, id: i64) -> bool {
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
}

/// The dedicated connection for waits, and its id on the server for `CLIENT UNBLOCK` (`None`
/// when `CLIENT ID` failed, the user may not unblock, or on a cluster).
pub(crate) struct Blocking {
    pub(super) con: Connection,
    pub(super) id: Option<i64>,
    /// The command connection's [`Connection::moves`] when this one was opened.
    pub(super) moves: u64,
}

impl Blocking {
    /// A connection without a response timeout (a wait lasts as long as it asks; the driver
    /// bounds the call) and without reconnection: one that fails is dropped and the next wait
    /// opens another. On a cluster, a cluster connection of its own, which routes each read to
    /// the master serving the stream (and follows it when the slot moves); its waits end by
    /// the server's timeout, as `CLIENT UNBLOCK` would have to reach that master by its own
    /// client id there.
    pub(super) async fn open(
        servers: &Servers,
        timeout: Duration,
        moves: u64,
    ) -> Result<Self, RedisError> {
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
pub(super) enum Woken {
    /// With new entries, now leased to this consumer.
    Took(Vec<Fetched<Bytes>>),
    /// With nothing: its time ran out.
    TimedOut,
    /// With nothing to hand over yet: a wake-up (a message delayed sooner than all others),
    /// only entries without the payload field, or a group recreated. The script runs next.
    Again,
}
