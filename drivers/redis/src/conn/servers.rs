//! Where Redis runs (one server, a cluster, a master behind Sentinel), and connecting to it:
//! URLs checked, credentials tried at once, connections that reconnect quickly.

use std::time::Duration;

use leasehold_core::ErrorKind;
use redis::aio::ConnectionManagerConfig;
use redis::{AsyncConnectionConfig, RedisResult};

#[cfg(feature = "sentinel")]
use super::sentinel::{Follower, SentinelSpec};
use super::{Connection, Link};
use crate::error::{error, ConnectError, RedisConfigError};

/// First pause between reconnection attempts of a single-server connection.
const RECONNECT_MIN_DELAY: Duration = Duration::from_millis(10);
/// Longest pause between reconnection attempts (redis-rs adds up to as much again as jitter):
/// a server back from a restart is found within about 100 ms. Commands sent while the
/// connection is down wait for the next attempt, so a long pause (redis-rs's default backoff
/// reaches seconds) would hold every renew and ack, and the first fetch, for that long after
/// the server answers again. A refused connection costs next to nothing to try.
const RECONNECT_MAX_DELAY: Duration = Duration::from_millis(50);
/// Attempts in one reconnection (about a second at the pauses above). Commands waiting for it
/// then fail, as transient errors, and the next command starts another: none waits for a
/// server that stays away longer than that.
const RECONNECT_RETRIES: usize = 16;

/// A client for `url`; a URL that does not parse is a configuration error (whose text never
/// repeats the URL: it may hold a password).
fn client(url: &str) -> Result<redis::Client, RedisConfigError> {
    redis::Client::open(url).map_err(|e| RedisConfigError::Url(e.to_string()))
}

/// Where Redis runs: one server, (with the `cluster` feature) a Redis Cluster known by some of
/// its nodes, or (with the `sentinel` feature) a master known by name to Redis Sentinel. Its
/// `Debug` leaves the URLs out: they may hold passwords.
#[derive(Clone, PartialEq, Eq)]
pub struct Servers(Where);

#[derive(Clone, PartialEq, Eq)]
enum Where {
    One(String),
    #[cfg(feature = "cluster")]
    Cluster(Vec<String>),
    #[cfg(feature = "sentinel")]
    Sentinel(SentinelSpec),
}

impl std::fmt::Debug for Servers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Where::One(_) => f.write_str("Servers::One"),
            #[cfg(feature = "cluster")]
            Where::Cluster(nodes) => write!(f, "Servers::Cluster({} nodes)", nodes.len()),
            #[cfg(feature = "sentinel")]
            Where::Sentinel(spec) => write!(
                f,
                "Servers::Sentinel({:?}, {} sentinels)",
                spec.master,
                spec.sentinels.len()
            ),
        }
    }
}

/// A URL names one server.
impl From<&str> for Servers {
    fn from(url: &str) -> Self {
        Self::one(url)
    }
}

/// A URL names one server.
impl From<String> for Servers {
    fn from(url: String) -> Self {
        Self::one(url)
    }
}

/// A URL names one server.
impl From<&String> for Servers {
    fn from(url: &String) -> Self {
        Self::one(url.as_str())
    }
}

impl From<&Servers> for Servers {
    fn from(servers: &Servers) -> Self {
        servers.clone()
    }
}

impl Servers {
    /// One server at `url` (`redis://[user:password@]host:port/db`, or `rediss://` with the
    /// `tls` feature).
    pub fn one(url: impl Into<String>) -> Self {
        Self(Where::One(url.into()))
    }

    /// A Redis Cluster, known by the URLs of some of its nodes (any one that answers will do:
    /// the client learns the others from it). Database 0 only, as Redis Cluster has no other.
    #[cfg(feature = "cluster")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
    pub fn cluster<I, S>(nodes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self(Where::Cluster(nodes.into_iter().map(Into::into).collect()))
    }

    /// The master named `master_name` in Redis Sentinel, found by asking the sentinels at
    /// `sentinel_urls` (any one that answers will do). Connections go to the master it names
    /// and ask again after a connection error or a `READONLY` reply, so they follow a
    /// failover. The connections to the master use database 0 without credentials (see
    /// [`Servers::sentinel_with_master_auth`]).
    #[cfg(feature = "sentinel")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sentinel")))]
    pub fn sentinel<I, S>(sentinel_urls: I, master_name: impl Into<String>) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self(Where::Sentinel(SentinelSpec {
            sentinels: sentinel_urls.into_iter().map(Into::into).collect(),
            master: master_name.into(),
            master_auth: None,
        }))
    }

    /// As [`Servers::sentinel`], the connections to the master (and to whichever replica a
    /// failover promotes) using the database, user and password of `master_url`, whose host
    /// and port are ignored (e.g. `redis://:secret@master/2`). The sentinels' own credentials
    /// go in their URLs.
    #[cfg(feature = "sentinel")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sentinel")))]
    pub fn sentinel_with_master_auth<I, S>(
        sentinel_urls: I,
        master_name: impl Into<String>,
        master_url: impl Into<String>,
    ) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self(Where::Sentinel(SentinelSpec {
            sentinels: sentinel_urls.into_iter().map(Into::into).collect(),
            master: master_name.into(),
            master_auth: Some(master_url.into()),
        }))
    }

    /// Whether this is a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        #[cfg(feature = "cluster")]
        if matches!(self.0, Where::Cluster(_)) {
            return true;
        }
        false
    }

    /// Whether this is a master found through Redis Sentinel.
    pub fn is_sentinel(&self) -> bool {
        #[cfg(feature = "sentinel")]
        if matches!(self.0, Where::Sentinel(_)) {
            return true;
        }
        false
    }

    /// Fails on an empty URL or an empty list of nodes (the URLs are parsed at connect).
    pub(crate) fn validate(&self) -> Result<(), RedisConfigError> {
        match &self.0 {
            Where::One(url) if url.is_empty() => Err(RedisConfigError::Empty("url")),
            Where::One(_) => Ok(()),
            #[cfg(feature = "cluster")]
            Where::Cluster(nodes) if nodes.is_empty() || nodes.iter().any(String::is_empty) => {
                Err(RedisConfigError::Empty("cluster node url"))
            }
            #[cfg(feature = "cluster")]
            Where::Cluster(_) => Ok(()),
            #[cfg(feature = "sentinel")]
            Where::Sentinel(spec) => spec.validate(),
        }
    }

    /// The URLs: the server's, or those of the cluster's nodes given.
    fn urls(&self) -> Vec<&str> {
        match &self.0 {
            Where::One(url) => vec![url.as_str()],
            #[cfg(feature = "cluster")]
            Where::Cluster(nodes) => nodes.iter().map(String::as_str).collect(),
            #[cfg(feature = "sentinel")]
            Where::Sentinel(spec) => spec.sentinels.iter().map(String::as_str).collect(),
        }
    }

    /// Opens one plain connection to each server (each node given of a cluster, each sentinel
    /// and then the master it names) in turn: a
    /// wrong password, an unknown user or a bad TLS setup is a fatal error here, at once, where
    /// the reconnecting connections would retry it for seconds. Transient failures (a server
    /// not up yet) pass: the connections' retries handle them.
    ///
    /// # Errors
    ///
    /// A URL that does not parse, or the first fatal error.
    pub(crate) async fn check_credentials(&self, timeout: Duration) -> Result<(), ConnectError> {
        for url in self.urls() {
            let client = client(url)?;
            let probe = client
                .get_multiplexed_async_connection_with_config(
                    &AsyncConnectionConfig::new()
                        .set_connection_timeout(Some(timeout))
                        .set_response_timeout(Some(timeout)),
                )
                .await;
            if let Err(e) = probe {
                let e = error("connect", e);
                if e.kind() == ErrorKind::Fatal {
                    return Err(e.into());
                }
            }
        }
        #[cfg(feature = "sentinel")]
        if let Where::Sentinel(spec) = &self.0 {
            let probe = match spec.master_client(timeout).await {
                Ok(client) => client
                    .get_multiplexed_async_connection_with_config(
                        &AsyncConnectionConfig::new()
                            .set_connection_timeout(Some(timeout))
                            .set_response_timeout(Some(timeout)),
                    )
                    .await
                    .map(drop),
                Err(e) => Err(e),
            };
            if let Err(e) = probe {
                let e = error("connect to the master", e);
                if e.kind() == ErrorKind::Fatal {
                    return Err(e.into());
                }
            }
        }
        Ok(())
    }

    /// A connection that reconnects by itself (attempts 10 ms to 100 ms apart; see
    /// [`RECONNECT_MAX_DELAY`]), connected
    /// within `timeout`, each response bounded by `response_timeout` (`None`: unbounded, for
    /// blocking reads). On a cluster it is one connection per node the client talks to, and
    /// a command redirected by `MOVED` / `ASK` or refused with `TRYAGAIN` is tried again a
    /// few times, within `response_timeout` in all.
    ///
    /// # Errors
    ///
    /// A URL that does not parse, or no server reached within `timeout`.
    pub(crate) async fn connect(
        &self,
        timeout: Duration,
        response_timeout: Option<Duration>,
    ) -> Result<Connection, ConnectError> {
        match &self.0 {
            Where::One(url) => {
                let client = client(url)?;
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(timeout))
                    .set_min_delay(RECONNECT_MIN_DELAY)
                    .set_exponent_base(2.0)
                    .set_max_delay(RECONNECT_MAX_DELAY)
                    .set_number_of_retries(RECONNECT_RETRIES)
                    .set_response_timeout(response_timeout);
                let manager = client
                    .get_connection_manager_with_config(config)
                    .await
                    .map_err(|e| error("connect", e))?;
                Ok(Connection(Link::One(manager)))
            }
            #[cfg(feature = "cluster")]
            Where::Cluster(nodes) => {
                let mut builder = redis::cluster::ClusterClient::builder(nodes.clone())
                    .connection_timeout(timeout)
                    // Redirections and `TRYAGAIN` are retried soon: a slot that moved is
                    // usually served again within milliseconds.
                    .retries(8)
                    .min_retry_wait(10)
                    .max_retry_wait(500);
                if let Some(response_timeout) = response_timeout {
                    builder = builder.response_timeout(response_timeout);
                }
                let client = builder
                    .build()
                    .map_err(|e| RedisConfigError::Url(e.to_string()))?;
                let cluster = client
                    .get_async_connection()
                    .await
                    .map_err(|e| error("connect to the cluster", e))?;
                Ok(Connection(Link::Cluster(cluster)))
            }
            #[cfg(feature = "sentinel")]
            Where::Sentinel(spec) => {
                spec.master_auth()?;
                let follower = Follower::new(spec.clone(), timeout, response_timeout);
                // The first connection now, so that `connect` fails when no master is found.
                follower
                    .get()
                    .await
                    .map_err(|e| error("connect to the master", e))?;
                Ok(Connection(Link::Sentinel(follower)))
            }
        }
    }

    /// A connection for blocking reads: no response timeout and no reconnection (one that
    /// failed is dropped; open another). On a cluster, a cluster connection of its own.
    pub(crate) async fn connect_plain(&self, timeout: Duration) -> RedisResult<Connection> {
        match &self.0 {
            Where::One(url) => {
                let config = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(timeout))
                    .set_response_timeout(None);
                let con = redis::Client::open(url.as_str())?
                    .get_multiplexed_async_connection_with_config(&config)
                    .await?;
                Ok(Connection(Link::Plain(con)))
            }
            #[cfg(feature = "cluster")]
            Where::Cluster(nodes) => {
                let client = redis::cluster::ClusterClient::builder(nodes.clone())
                    .connection_timeout(timeout)
                    .retries(8)
                    .min_retry_wait(10)
                    .max_retry_wait(500)
                    .build()?;
                Ok(Connection(Link::Cluster(
                    client.get_async_connection().await?,
                )))
            }
            // The master as the sentinels name it now; a wait that fails drops this
            // connection, and the next one asks them again.
            #[cfg(feature = "sentinel")]
            Where::Sentinel(spec) => {
                let config = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(timeout))
                    .set_response_timeout(None);
                let con = spec
                    .master_client(timeout)
                    .await?
                    .get_multiplexed_async_connection_with_config(&config)
                    .await?;
                Ok(Connection(Link::Plain(con)))
            }
        }
    }

    /// A pub/sub connection. On a cluster, to the first node given that answers: a classic
    /// `PUBLISH` reaches every node of a cluster, so any one hears every message. Behind
    /// Sentinel, to the master the sentinels name now (a `PUBLISH` on the master reaches its
    /// replicas' subscribers too, but not the other way round).
    ///
    /// # Errors
    ///
    /// A URL that does not parse, or no server reached.
    #[cfg(feature = "commands")]
    pub(crate) async fn pubsub(&self) -> leasehold_core::BackendResult<redis::aio::PubSub> {
        #[cfg(feature = "sentinel")]
        if let Where::Sentinel(spec) = &self.0 {
            let client = spec
                .master_client(Duration::from_secs(5))
                .await
                .map_err(|e| error("subscribe", e))?;
            return client
                .get_async_pubsub()
                .await
                .map_err(|e| error("subscribe", e));
        }
        let mut last = None;
        for url in self.urls() {
            let client = client(url).map_err(ConnectError::from)?;
            match client.get_async_pubsub().await {
                Ok(pubsub) => return Ok(pubsub),
                Err(e) => last = Some(error("subscribe", e)),
            }
        }
        Err(last.unwrap_or_else(|| leasehold_core::BackendError::fatal("subscribe: no server")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "sentinel")]
    #[test]
    fn sentinel_servers_are_validated_without_connecting() {
        let ok = Servers::sentinel(["redis://127.0.0.1:26379"], "mymaster");
        assert_eq!(ok.validate(), Ok(()));
        assert!(ok.is_sentinel() && !ok.is_cluster());
        assert_eq!(
            Servers::sentinel(Vec::<String>::new(), "m").validate(),
            Err(RedisConfigError::Empty("sentinel url"))
        );
        assert_eq!(
            Servers::sentinel(["redis://x"], "").validate(),
            Err(RedisConfigError::Empty("sentinel master name"))
        );
        assert!(matches!(
            Servers::sentinel_with_master_auth(["redis://x"], "m", "not a url").validate(),
            Err(RedisConfigError::Url(_))
        ));
        let auth = Servers::sentinel_with_master_auth(["redis://x"], "m", "redis://:pw@h/3");
        assert_eq!(auth.validate(), Ok(()));
        let debug = format!("{:?}", Servers::sentinel(["redis://:secret@x"], "m"));
        assert!(!debug.contains("secret"), "{debug}");
    }
}
