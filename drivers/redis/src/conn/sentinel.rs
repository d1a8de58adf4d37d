//! A master found through Redis Sentinel, and a connection that follows it through failovers.

use std::time::Duration;

use redis::{AsyncConnectionConfig, RedisResult, Value};

use super::node_changed;
use crate::error::RedisConfigError;

/// A master known to Redis Sentinel: the sentinels' URLs, the master's name there, and the URL
/// whose database and credentials the connections to the master use.
#[derive(Clone, PartialEq, Eq)]
pub(super) struct SentinelSpec {
    pub(super) sentinels: Vec<String>,
    pub(super) master: String,
    pub(super) master_auth: Option<String>,
}

fn value_says_node_changed(value: &Value) -> bool {
    matches!(value, Value::ServerError(e) if matches!(e.code(), "READONLY" | "MASTERDOWN"))
}

/// Runs `future` for at most `timeout`, as an I/O timeout error after that.
async fn within<T>(
    timeout: Duration,
    what: &'static str,
    future: impl std::future::Future<Output = RedisResult<T>>,
) -> RedisResult<T> {
    let timer = async {
        async_io::Timer::after(timeout).await;
        Err(redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            what,
        )))
    };
    futures_lite::future::or(future, timer).await
}

impl SentinelSpec {
    pub(super) fn validate(&self) -> Result<(), RedisConfigError> {
        if self.sentinels.is_empty() || self.sentinels.iter().any(String::is_empty) {
            return Err(RedisConfigError::Empty("sentinel url"));
        }
        if self.master.is_empty() {
            return Err(RedisConfigError::Empty("sentinel master name"));
        }
        if self.master_auth.as_deref() == Some("") {
            return Err(RedisConfigError::Empty("sentinel master url"));
        }
        self.master_auth().map(drop)
    }

    /// The database and credentials of the connections to the master.
    pub(super) fn master_auth(&self) -> Result<redis::RedisConnectionInfo, RedisConfigError> {
        use redis::IntoConnectionInfo;
        match &self.master_auth {
            None => Ok(redis::RedisConnectionInfo::default()),
            Some(url) => url
                .as_str()
                .into_connection_info()
                .map(|info| info.redis_settings().clone())
                .map_err(|e| RedisConfigError::Url(e.to_string())),
        }
    }

    /// A client for the master the sentinels name now (one that itself answers `ROLE` as a
    /// master), asked within `timeout`.
    pub(super) async fn master_client(&self, timeout: Duration) -> RedisResult<redis::Client> {
        use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
        let auth = self.master_auth().map_err(|e| {
            redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "bad sentinel master url",
                e.to_string(),
            ))
        })?;
        let node = SentinelNodeConnectionInfo::default().set_redis_connection_info(auth);
        let mut client = SentinelClient::build(
            self.sentinels.clone(),
            self.master.clone(),
            Some(node),
            SentinelServerType::Master,
        )?;
        within(
            timeout,
            "no master found through the sentinels in time",
            client.async_get_client(),
        )
        .await
    }
}

/// A connection to the master Sentinel names, shared by its clones: opened on first use, and
/// opened again (the sentinels asked again) on the next use after [`node_changed`] said the
/// node is gone or demoted. The call that met the failure fails (transient); the engine
/// retries it, on the new master.
///
/// A failover does not always reach the old master: after `SENTINEL FAILOVER`, or a network
/// partition, it stays up as a master — taking writes that are lost — until a sentinel's
/// next look at it (every 10 s) turns it into a replica. So the first call at least
/// [`RECHECK`] after the last look also asks a sentinel where the master is (one
/// `SENTINEL GET-MASTER-ADDR-BY-NAME`, on a connection kept for it, given up after
/// [`LOOK_TIMEOUT`]), and moves to the master it names: a connection leaves a demoted master
/// within about a second.
#[derive(Clone)]
pub(super) struct Follower(std::sync::Arc<FollowerState>);

/// How often a connection to a master found through Sentinel asks a sentinel whether the
/// master moved: at most once per this, on the first call after it.
const RECHECK: Duration = Duration::from_secs(1);

/// Bound on that look, which delays the call it rides on: a sentinel answers in a round trip,
/// and sentinels that are slow or unreachable must not hold up the writes to a master that
/// works (the look is given up, and tried again a [`RECHECK`] later).
const LOOK_TIMEOUT: Duration = Duration::from_millis(250);

/// The connection in use: its generation, so that a failure seen on an older one does not drop
/// a newer one, and the master's address it goes to.
#[derive(Clone)]
struct Current {
    generation: u64,
    con: redis::aio::MultiplexedConnection,
    address: Option<(String, u16)>,
}

struct FollowerState {
    spec: SentinelSpec,
    db: i64,
    config: AsyncConnectionConfig,
    timeout: Duration,
    current: std::sync::Mutex<Option<Current>>,
    generations: std::sync::atomic::AtomicU64,
    /// When a sentinel was last asked where the master is.
    looked: std::sync::Mutex<std::time::Instant>,
    /// A connection to a sentinel that answered, for those looks.
    sentinel: std::sync::Mutex<Option<redis::aio::MultiplexedConnection>>,
}

impl Follower {
    pub(super) fn new(
        spec: SentinelSpec,
        timeout: Duration,
        response_timeout: Option<Duration>,
    ) -> Self {
        let db = spec.master_auth().map_or(0, |auth| auth.db());
        Self(std::sync::Arc::new(FollowerState {
            spec,
            db,
            config: AsyncConnectionConfig::new()
                .set_connection_timeout(Some(timeout))
                .set_response_timeout(response_timeout),
            timeout,
            current: std::sync::Mutex::new(None),
            generations: std::sync::atomic::AtomicU64::new(0),
            looked: std::sync::Mutex::new(std::time::Instant::now()),
            sentinel: std::sync::Mutex::new(None),
        }))
    }

    /// The database the connections to the master select.
    pub(super) fn db(&self) -> i64 {
        self.0.db
    }

    /// Connections to a master opened so far: a change means the connection moved.
    pub(super) fn moves(&self) -> u64 {
        self.0
            .generations
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    fn current(&self) -> std::sync::MutexGuard<'_, Option<Current>> {
        self.0.current.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The connection in use, or a new one to the master the sentinels name now.
    pub(super) async fn get(&self) -> RedisResult<(u64, redis::aio::MultiplexedConnection)> {
        let current = self.current().clone();
        if let Some(current) = current {
            if !self.time_to_look() || self.still_master(&current).await {
                return Ok((current.generation, current.con));
            }
            let mut slot = self.current();
            if slot
                .as_ref()
                .is_some_and(|c| c.generation == current.generation)
            {
                tracing::info!(
                    master = %self.0.spec.master,
                    "the sentinels name another master; moving to it"
                );
                *slot = None;
            }
        }
        let client = self.0.spec.master_client(self.0.timeout).await?;
        let address = match client.get_connection_info().addr() {
            redis::ConnectionAddr::Tcp(host, port)
            | redis::ConnectionAddr::TcpTls { host, port, .. } => Some((host.clone(), *port)),
            _ => None,
        };
        let con = client
            .get_multiplexed_async_connection_with_config(&self.0.config)
            .await?;
        let generation = 1 + self
            .0
            .generations
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tracing::info!(master = %self.0.spec.master, "connected to the master named by Sentinel");
        *self.0.looked.lock().unwrap_or_else(|e| e.into_inner()) = std::time::Instant::now();
        // Another call may have connected meanwhile: the newest wins, this one is still used.
        *self.current() = Some(Current {
            generation,
            con: con.clone(),
            address,
        });
        Ok((generation, con))
    }

    /// Whether [`RECHECK`] has passed since the last look; if so, this call looks (the next
    /// ones wait another [`RECHECK`]).
    fn time_to_look(&self) -> bool {
        let now = std::time::Instant::now();
        let mut looked = self.0.looked.lock().unwrap_or_else(|e| e.into_inner());
        if now.saturating_duration_since(*looked) < RECHECK {
            return false;
        }
        *looked = now;
        true
    }

    /// Whether a sentinel still names `current`'s address as the master. Yes when none
    /// answers: the connection's own errors say when its node is gone.
    async fn still_master(&self, current: &Current) -> bool {
        let Some((host, port)) = &current.address else {
            return true;
        };
        match within(
            LOOK_TIMEOUT,
            "no sentinel answered in time",
            self.ask_sentinel(),
        )
        .await
        {
            Ok(Some((named_host, named_port))) => named_host == *host && named_port == *port,
            Ok(None) => true,
            Err(e) => {
                tracing::debug!(%e, "asking a sentinel for the master failed");
                true
            }
        }
    }

    /// `SENTINEL GET-MASTER-ADDR-BY-NAME` on the kept sentinel connection, or on a new one to
    /// the first sentinel that answers.
    async fn ask_sentinel(&self) -> RedisResult<Option<(String, u16)>> {
        let kept = self
            .0
            .sentinel
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut cmd = redis::cmd("SENTINEL");
        cmd.arg("GET-MASTER-ADDR-BY-NAME").arg(&self.0.spec.master);
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.0.timeout))
            .set_response_timeout(Some(self.0.timeout));
        let mut last = None;
        let candidates = kept
            .into_iter()
            .map(Ok)
            .chain(self.0.spec.sentinels.iter().map(|url| Err(url.as_str())));
        for candidate in candidates {
            let mut con = match candidate {
                Ok(con) => con,
                Err(url) => {
                    let opened = match redis::Client::open(url) {
                        Ok(client) => {
                            client
                                .get_multiplexed_async_connection_with_config(&config)
                                .await
                        }
                        Err(e) => Err(e),
                    };
                    match opened {
                        Ok(con) => con,
                        Err(e) => {
                            last = Some(e);
                            continue;
                        }
                    }
                }
            };
            match cmd.query_async::<Option<(String, u16)>>(&mut con).await {
                Ok(address) => {
                    *self.0.sentinel.lock().unwrap_or_else(|e| e.into_inner()) = Some(con);
                    return Ok(address);
                }
                Err(e) => {
                    *self.0.sentinel.lock().unwrap_or_else(|e| e.into_inner()) = None;
                    last = Some(e);
                }
            }
        }
        Err(last.unwrap_or_else(|| {
            redis::RedisError::from((redis::ErrorKind::InvalidClientConfig, "no sentinel"))
        }))
    }

    /// Drops connection `generation` if `result` says the node is gone or no master any more.
    pub(super) fn check(&self, generation: u64, result: Result<&[Value], &redis::RedisError>) {
        let changed = match result {
            Ok(values) => values.iter().any(value_says_node_changed),
            Err(e) => node_changed(e),
        };
        if changed {
            let mut current = self.current();
            if current.as_ref().is_some_and(|c| c.generation == generation) {
                tracing::info!(
                    master = %self.0.spec.master,
                    "the master went away or was demoted; asking the sentinels again"
                );
                *current = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_readonly_reply_in_a_pipeline_is_a_changed_node() {
        let reply = |code: &str| {
            Value::ServerError(
                redis::ServerError::try_from(redis::make_extension_error(
                    code.into(),
                    Some("detail".into()),
                ))
                .expect("a server error"),
            )
        };
        assert!(value_says_node_changed(&reply("READONLY")));
        assert!(value_says_node_changed(&reply("MASTERDOWN")));
        assert!(!value_says_node_changed(&reply("NOGROUP")));
        assert!(!value_says_node_changed(&Value::Okay));
    }
}
