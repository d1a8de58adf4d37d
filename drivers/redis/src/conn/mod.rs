//! Where Redis runs — one server, or a Redis Cluster — and the connections to it.
//!
//! Everything above this module talks to a [`Connection`], which implements redis-rs's
//! [`ConnectionLike`] by delegating to a single server's `ConnectionManager` or to a cluster
//! connection: commands, pipelines and scripts are written once. On a cluster, redis-rs routes
//! each command by its first key (a script by its first key, a pipeline by its commands' one
//! slot), follows `MOVED` and `ASK`, and refreshes its slot map when a slot moved. Behind
//! Redis Sentinel (feature `sentinel`) the connection asks the sentinels for the master, and
//! asks again after a connection error or a `READONLY` reply (a demoted master), so it follows
//! a failover: the failed call is a transient error, which the worker retries.

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};

mod recover;
#[cfg(feature = "sentinel")]
mod sentinel;

pub(crate) use recover::{waits_for_the_server, Unreachable};
#[cfg(feature = "sentinel")]
use sentinel::Follower;

mod servers;

pub use servers::Servers;

/// A connection to one server or to a Redis Cluster (see [`Servers::connect`]): cheap to clone
/// (clones share it), and a [`ConnectionLike`], so redis-rs commands, pipelines and scripts run
/// on it as they are.
#[derive(Clone)]
pub(crate) struct Connection(Link);

#[derive(Clone)]
enum Link {
    One(ConnectionManager),
    /// One server, without reconnection: for blocking reads.
    Plain(redis::aio::MultiplexedConnection),
    #[cfg(feature = "cluster")]
    Cluster(redis::cluster_async::ClusterConnection),
    /// The master Sentinel names, asked for again after a failure.
    #[cfg(feature = "sentinel")]
    Sentinel(Follower),
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.0 {
            Link::One(_) | Link::Plain(_) => "Connection::One",
            #[cfg(feature = "cluster")]
            Link::Cluster(_) => "Connection::Cluster",
            #[cfg(feature = "sentinel")]
            Link::Sentinel(_) => "Connection::Sentinel",
        })
    }
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match &mut self.0 {
            Link::One(con) => Box::pin(async move {
                let value = con
                    .req_packed_command(cmd)
                    .await
                    .map_err(redirect_is_fatal)?;
                refuse_redirect(&value)?;
                Ok(value)
            }),
            Link::Plain(con) => Box::pin(async move {
                let value = con
                    .req_packed_command(cmd)
                    .await
                    .map_err(redirect_is_fatal)?;
                refuse_redirect(&value)?;
                Ok(value)
            }),
            #[cfg(feature = "cluster")]
            Link::Cluster(con) => con.req_packed_command(cmd),
            #[cfg(feature = "sentinel")]
            Link::Sentinel(follower) => Box::pin(async move {
                let (generation, mut con) = follower.get().await?;
                let value = con.req_packed_command(cmd).await;
                follower.check(generation, value.as_ref().map(std::slice::from_ref));
                let value = value.map_err(redirect_is_fatal)?;
                refuse_redirect(&value)?;
                Ok(value)
            }),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match &mut self.0 {
            Link::One(con) => Box::pin(async move {
                let values = con
                    .req_packed_commands(pipeline, offset, count)
                    .await
                    .map_err(redirect_is_fatal)?;
                values.iter().try_for_each(refuse_redirect)?;
                Ok(values)
            }),
            Link::Plain(con) => Box::pin(async move {
                let values = con
                    .req_packed_commands(pipeline, offset, count)
                    .await
                    .map_err(redirect_is_fatal)?;
                values.iter().try_for_each(refuse_redirect)?;
                Ok(values)
            }),
            #[cfg(feature = "cluster")]
            Link::Cluster(con) => con.req_packed_commands(pipeline, offset, count),
            #[cfg(feature = "sentinel")]
            Link::Sentinel(follower) => Box::pin(async move {
                let (generation, mut con) = follower.get().await?;
                let values = con.req_packed_commands(pipeline, offset, count).await;
                follower.check(generation, values.as_deref());
                let values = values.map_err(redirect_is_fatal)?;
                values.iter().try_for_each(refuse_redirect)?;
                Ok(values)
            }),
        }
    }

    fn get_db(&self) -> i64 {
        match &self.0 {
            Link::One(con) => con.get_db(),
            Link::Plain(con) => con.get_db(),
            #[cfg(feature = "cluster")]
            Link::Cluster(con) => con.get_db(),
            #[cfg(feature = "sentinel")]
            Link::Sentinel(follower) => follower.db(),
        }
    }
}

/// A single-server connection cannot follow `MOVED` / `ASK`: the server is a Redis Cluster
/// node, and no retry on it can succeed. Said so, as a fatal error.
fn redirect_is_fatal(e: redis::RedisError) -> redis::RedisError {
    match e.code() {
        Some(code @ ("MOVED" | "ASK")) => not_a_cluster_client(code, e.detail().unwrap_or("")),
        _ => e,
    }
}

/// A reply that is a `MOVED` / `ASK` redirection, as [`redirect_is_fatal`] says it.
fn refuse_redirect(value: &Value) -> RedisResult<()> {
    match value {
        Value::ServerError(e) if matches!(e.code(), "MOVED" | "ASK") => {
            Err(not_a_cluster_client(e.code(), e.details().unwrap_or("")))
        }
        _ => Ok(()),
    }
}

fn not_a_cluster_client(code: &str, detail: &str) -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::InvalidClientConfig,
        "the server is a Redis Cluster node that serves another slot: connect with \
         Servers::cluster (feature `cluster`)",
        format!("{code} {detail}"),
    ))
}

/// One node a whole-keyspace command (`SCAN`) must visit: the server, or a cluster master.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Node {
    /// The one server.
    Only,
    /// A cluster master, by host and port as the cluster announces it.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    Master(String, u16),
}

impl Connection {
    /// The nodes that together hold every key: the server, or every cluster master (from
    /// `CLUSTER SLOTS`: the first node of each slot range serves it).
    pub(crate) async fn key_holders(&self) -> RedisResult<Vec<Node>> {
        match &self.0 {
            #[cfg(feature = "sentinel")]
            Link::Sentinel(_) => Ok(vec![Node::Only]),
            Link::One(_) | Link::Plain(_) => Ok(vec![Node::Only]),
            #[cfg(feature = "cluster")]
            Link::Cluster(con) => {
                let ranges: Vec<Value> = redis::cmd("CLUSTER")
                    .arg("SLOTS")
                    .query_async(&mut con.clone())
                    .await?;
                let mut masters = Vec::new();
                for range in ranges {
                    let master = match range {
                        Value::Array(parts) => parts.into_iter().nth(2),
                        _ => None,
                    };
                    let address = match master {
                        Some(Value::Array(node)) => {
                            let mut node = node.into_iter();
                            let host: Option<String> =
                                node.next().and_then(|h| redis::from_redis_value(h).ok());
                            let port: Option<u16> =
                                node.next().and_then(|p| redis::from_redis_value(p).ok());
                            host.zip(port)
                        }
                        _ => None,
                    };
                    let Some((host, port)) = address else {
                        return Err(redis::RedisError::from((
                            redis::ErrorKind::Parse,
                            "unexpected CLUSTER SLOTS reply",
                        )));
                    };
                    let node = Node::Master(host, port);
                    if !masters.contains(&node) {
                        masters.push(node);
                    }
                }
                Ok(masters)
            }
        }
    }

    /// How many times this connection moved to a master the sentinels named (0 but behind
    /// Sentinel): a connection opened apart from it (the blocking one) and tied to the master
    /// it used then is stale once this has changed.
    pub(crate) fn moves(&self) -> u64 {
        match &self.0 {
            #[cfg(feature = "sentinel")]
            Link::Sentinel(follower) => follower.moves(),
            _ => 0,
        }
    }

    /// The replies to `pipe`, sent on one connection (server errors among them as values): on
    /// a cluster, to the master serving `key`'s slot.
    pub(crate) async fn pipeline_at(&self, pipe: &Pipeline, key: &[u8]) -> RedisResult<Vec<Value>> {
        match &self.0 {
            #[cfg(feature = "cluster")]
            Link::Cluster(con) => {
                use redis::cluster_routing::{Route, SingleNodeRoutingInfo, SlotAddr};
                let route = Route::new(crate::slot::key_slot(key), SlotAddr::Master);
                con.clone()
                    .route_pipeline(
                        pipe.clone(),
                        0,
                        pipe.len(),
                        SingleNodeRoutingInfo::SpecificNode(route),
                    )
                    .await
            }
            _ => {
                let _ = key;
                self.clone().req_packed_commands(pipe, 0, pipe.len()).await
            }
        }
    }

    /// `cmd` on `node` (one of [`key_holders`](Self::key_holders)).
    pub(crate) async fn query_on<T: redis::FromRedisValue>(
        &self,
        node: &Node,
        cmd: &Cmd,
    ) -> RedisResult<T> {
        match (&self.0, node) {
            #[cfg(feature = "cluster")]
            (Link::Cluster(con), Node::Master(host, port)) => {
                use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
                let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                    host: host.clone(),
                    port: *port,
                });
                let value = con.clone().route_command(cmd.clone(), routing).await?;
                redis::from_redis_value(value).map_err(Into::into)
            }
            _ => cmd.query_async(&mut self.clone()).await,
        }
    }
}

/// A reply or an error after which a connection to a master found through Sentinel is dropped
/// and the sentinels asked again: the node is gone or unreachable (a connection error or a
/// timeout), or it is no master any more (`READONLY` to a write, `UNBLOCKED` for a blocked read
/// on a demoted master, `MASTERDOWN` from a replica). Everything else keeps the connection.
pub(crate) fn node_changed(e: &redis::RedisError) -> bool {
    e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.code()
            .is_some_and(|code| matches!(code, "READONLY" | "UNBLOCKED" | "MASTERDOWN"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(code: &str) -> redis::RedisError {
        redis::make_extension_error(code.into(), Some("detail".into()))
    }

    /// What makes a Sentinel connection ask the sentinels again: its node gone, or no master.
    #[test]
    fn a_gone_or_demoted_node_is_a_changed_node() {
        for e in [
            redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "reset",
            )),
            redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "timed out",
            )),
            server("READONLY"),
            server("UNBLOCKED"),
            server("MASTERDOWN"),
        ] {
            assert!(node_changed(&e), "{e}");
        }
        for e in [server("NOGROUP"), server("NOSCRIPT"), server("BUSY")] {
            assert!(!node_changed(&e), "{e}");
        }
    }
}
