//! Throwaway Redis Sentinel topologies: a master, its replicas and several sentinels, each a
//! [`RedisServer`] on a free loopback port.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::{Builder, Error, RedisServer, Reply, POLL};

/// Options for a [`RedisSentinel`]; see [`RedisSentinel::builder`].
#[derive(Clone, Debug)]
#[must_use = "a SentinelBuilder does nothing until start() is called"]
pub struct SentinelBuilder {
    replicas: usize,
    sentinels: usize,
    master_name: String,
    down_after: Duration,
    failover_timeout: Duration,
    node: Builder,
    ready_timeout: Duration,
}

impl Default for SentinelBuilder {
    fn default() -> Self {
        SentinelBuilder {
            replicas: 1,
            sentinels: 3,
            master_name: "leasehold".into(),
            down_after: Duration::from_millis(1000),
            failover_timeout: Duration::from_secs(10),
            node: Builder::default(),
            ready_timeout: Duration::from_secs(30),
        }
    }
}

impl SentinelBuilder {
    /// How many replicas the master gets (default 1; at least 1, or there is nothing to fail
    /// over to).
    pub fn replicas(mut self, replicas: usize) -> Self {
        self.replicas = replicas;
        self
    }

    /// How many sentinels monitor the master (default 3); the quorum is a majority of them.
    pub fn sentinels(mut self, sentinels: usize) -> Self {
        self.sentinels = sentinels;
        self
    }

    /// The master's name in Sentinel (default `leasehold`).
    pub fn master_name(mut self, name: impl Into<String>) -> Self {
        self.master_name = name.into();
        self
    }

    /// `sentinel down-after-milliseconds` (default 1 s): how long the master may not answer
    /// before a sentinel deems it down and a failover may start on its own.
    pub fn down_after(mut self, after: Duration) -> Self {
        self.down_after = after;
        self
    }

    /// `sentinel failover-timeout` (default 10 s).
    pub fn failover_timeout(mut self, timeout: Duration) -> Self {
        self.failover_timeout = timeout;
        self
    }

    /// Runs this `redis-server` (for the data servers and the sentinels) instead of
    /// `$LEASEHOLD_REDIS_SERVER` or the one on `PATH`.
    pub fn binary(mut self, path: impl Into<PathBuf>) -> Self {
        self.node = self.node.binary(path);
        self
    }

    /// How long the topology may take to be ready (default 30 s).
    pub fn ready_timeout(mut self, timeout: Duration) -> Self {
        self.ready_timeout = timeout;
        self
    }

    /// Starts the master, then its replicas and waits until they are in sync, then the
    /// sentinels (so each sees the replicas in its first look at the master, not 10 s later),
    /// and waits until every sentinel names the master and knows every replica.
    pub fn start(self) -> Result<RedisSentinel, Error> {
        if self.replicas == 0 || self.sentinels == 0 {
            return Err(setup("a Sentinel topology needs a replica and a sentinel"));
        }
        let master = self
            .node
            .clone()
            .args(["--repl-diskless-sync-delay", "0"])
            .start()?;
        let master_port = master.port().to_string();
        let replicas: Vec<Result<RedisServer, Error>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..self.replicas)
                .map(|_| {
                    scope.spawn(|| {
                        self.node
                            .clone()
                            .args(["--replicaof", "127.0.0.1", &master_port])
                            .args(["--repl-diskless-sync-delay", "0"])
                            .start()
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("starting a replica panicked"))
                .collect()
        });
        let mut servers = vec![master];
        for replica in replicas {
            servers.push(replica?);
        }
        let deadline = Instant::now() + self.ready_timeout;
        wait_until(
            deadline,
            self.ready_timeout,
            "the replicas' first sync",
            || {
                for replica in &servers[1..] {
                    let info = info(replica, "replication")?;
                    if !info.lines().any(|l| l.trim() == "master_link_status:up") {
                        return Ok(Some(format!("port {}: {info}", replica.port())));
                    }
                }
                Ok(None)
            },
        )?;
        let quorum = self.sentinels / 2 + 1;
        let config = format!(
            "sentinel monitor {name} 127.0.0.1 {master_port} {quorum}\n\
             sentinel down-after-milliseconds {name} {down}\n\
             sentinel failover-timeout {name} {failover}\n\
             sentinel parallel-syncs {name} 1\n",
            name = self.master_name,
            down = self.down_after.as_millis(),
            failover = self.failover_timeout.as_millis(),
        );
        let sentinels: Vec<Result<RedisServer, Error>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..self.sentinels)
                .map(|_| {
                    let mut node = self.node.clone();
                    node.sentinel_config = Some(config.clone());
                    scope.spawn(move || node.start())
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("starting a sentinel panicked"))
                .collect()
        });
        let mut started = Vec::new();
        for sentinel in sentinels {
            started.push(sentinel?);
        }
        let topology = RedisSentinel {
            master_name: self.master_name,
            servers,
            sentinels: started,
        };
        let master_port = topology.servers[0].port();
        topology.wait_for(
            deadline,
            self.ready_timeout,
            "every sentinel naming the master and knowing its replicas",
            master_port,
        )?;
        Ok(topology)
    }
}

/// A master, its replicas and the sentinels monitoring them, owned by a test. Dropping it kills
/// every process and deletes their directories.
///
/// ```
/// use leasehold_redis_harness::RedisSentinel;
///
/// # fn main() -> Result<(), leasehold_redis_harness::Error> {
/// let topology = RedisSentinel::start()?;
/// let urls = topology.sentinel_urls(); // with topology.master_name(), for a Sentinel client
/// assert_eq!(urls.len(), 3);
/// let before = topology.master()?.port();
/// let after = topology.failover(std::time::Duration::from_secs(30))?.port();
/// assert_ne!(before, after);
/// assert_eq!(topology.master()?.port(), after);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct RedisSentinel {
    master_name: String,
    /// The data servers: the master as started, then its replicas.
    servers: Vec<RedisServer>,
    sentinels: Vec<RedisServer>,
}

impl RedisSentinel {
    /// One master, one replica, three sentinels; see [`SentinelBuilder::start`].
    pub fn start() -> Result<RedisSentinel, Error> {
        SentinelBuilder::default().start()
    }

    /// Options: replicas, sentinels, name, timings, binary.
    pub fn builder() -> SentinelBuilder {
        SentinelBuilder::default()
    }

    /// The master's name in Sentinel.
    pub fn master_name(&self) -> &str {
        &self.master_name
    }

    /// The sentinels' URLs: what a Sentinel client takes, with [`master_name`](Self::master_name).
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(RedisServer::url).collect()
    }

    /// The data servers: the one started as master, then the replicas (a failover changes
    /// roles: see [`master`](Self::master)).
    pub fn servers(&self) -> &[RedisServer] {
        &self.servers
    }

    /// The sentinels.
    pub fn sentinels(&self) -> &[RedisServer] {
        &self.sentinels
    }

    /// The data server the first running sentinel names as the master.
    pub fn master(&self) -> Result<&RedisServer, Error> {
        let sentinel = self
            .sentinels
            .iter()
            .find(|s| s.is_running())
            .ok_or_else(|| setup("no sentinel is running"))?;
        let port = self.named_master(sentinel)?;
        self.server(port)
    }

    /// Sends `SENTINEL FAILOVER` to a sentinel and waits up to `timeout` until every running
    /// sentinel names another master and that server answers `ROLE` as a master. Returns the
    /// new master.
    ///
    /// The old master is not told: it answers as a master, and takes writes that are lost,
    /// until a sentinel's next look at it (every 10 s) turns it into a replica of the new one.
    /// A client that does not ask the sentinels again meanwhile keeps writing to it.
    pub fn failover(&self, timeout: Duration) -> Result<&RedisServer, Error> {
        let deadline = Instant::now() + timeout;
        let old = self.master()?.port();
        let sentinel = self
            .sentinels
            .iter()
            .find(|s| s.is_running())
            .ok_or_else(|| setup("no sentinel is running"))?;
        match sentinel.command(["SENTINEL", "FAILOVER", &self.master_name])? {
            Reply::Simple(ok) if ok == "OK" => {}
            other => return Err(setup(format!("SENTINEL FAILOVER replied {other:?}"))),
        }
        self.wait_promoted(old, deadline, timeout)
    }

    /// Kills the master (`SIGKILL`, a crash) once every sentinel knows the others (they must
    /// agree it is down: a quorum, then a leader, which needs them to know each other), and
    /// waits up to `timeout` until every running sentinel names a replica promoted in its
    /// place and it answers `ROLE` as a master (about `down-after-milliseconds` plus an
    /// election). Returns the new master; the old one stays down.
    pub fn crash_master(&self, timeout: Duration) -> Result<&RedisServer, Error> {
        let deadline = Instant::now() + timeout;
        let others = self.sentinels.len() - 1;
        wait_until(
            deadline,
            timeout,
            "the sentinels knowing each other",
            || {
                for sentinel in &self.sentinels {
                    let known = sentinel.command(["SENTINEL", "SENTINELS", &self.master_name])?;
                    let known = known.as_array().map_or(0, <[Reply]>::len);
                    if known < others {
                        return Ok(Some(format!(
                            "sentinel port {} knows {known} of {others} others",
                            sentinel.port()
                        )));
                    }
                }
                Ok(None)
            },
        )?;
        let master = self.master()?;
        let old = master.port();
        master.kill()?;
        self.wait_promoted(old, deadline, timeout)
    }

    /// Waits until a sentinel names another master than `old`, then until every running
    /// sentinel names it and it answers `ROLE` as a master.
    fn wait_promoted(
        &self,
        old: u16,
        deadline: Instant,
        timeout: Duration,
    ) -> Result<&RedisServer, Error> {
        let sentinel = self
            .sentinels
            .iter()
            .find(|s| s.is_running())
            .ok_or_else(|| setup("no sentinel is running"))?;
        let mut new = None;
        wait_until(deadline, timeout, "a sentinel naming a new master", || {
            let port = self.named_master(sentinel)?;
            if port == old {
                return Ok(Some(format!("still port {port}")));
            }
            new = Some(port);
            Ok(None)
        })?;
        let new = new.unwrap_or(old);
        wait_until(
            deadline,
            timeout,
            "the promotion seen by every sentinel",
            || {
                let role = self.server(new)?.command(["ROLE"])?;
                let role = role
                    .as_array()
                    .and_then(|r| r.first())
                    .and_then(Reply::as_str);
                if role != Some("master") {
                    return Ok(Some(format!("port {new}: ROLE {role:?}")));
                }
                for sentinel in self.sentinels.iter().filter(|s| s.is_running()) {
                    let named = self.named_master(sentinel)?;
                    if named != new {
                        return Ok(Some(format!(
                            "sentinel port {} names port {named}",
                            sentinel.port()
                        )));
                    }
                }
                Ok(None)
            },
        )?;
        self.server(new)
    }

    /// Waits up to `timeout` until every replica of the master has every write the master had
    /// when this was called (by `INFO replication` offsets): what a failover then promotes
    /// holds it, whichever replica the sentinels pick.
    pub fn wait_replicated(&self, timeout: Duration) -> Result<(), Error> {
        let master = self.master()?;
        let offset = |info: &str, key: &str| -> Option<i64> {
            info.lines()
                .find_map(|l| l.trim().strip_prefix(key))
                .and_then(|v| v.parse().ok())
        };
        let target = offset(&info(master, "replication")?, "master_repl_offset:")
            .ok_or_else(|| setup("INFO replication without master_repl_offset"))?;
        let replicas: Vec<&RedisServer> = self
            .servers
            .iter()
            .filter(|s| s.port() != master.port() && s.is_running())
            .collect();
        wait_until(
            Instant::now() + timeout,
            timeout,
            "every replica catching up",
            || {
                for replica in &replicas {
                    let info = info(replica, "replication")?;
                    let done = offset(&info, "slave_repl_offset:").is_some_and(|o| o >= target);
                    if !done {
                        return Ok(Some(format!("port {}: {info}", replica.port())));
                    }
                }
                Ok(None)
            },
        )
    }

    /// Waits up to `timeout` until every running sentinel names the same master, every other
    /// running data server (the old master too, after a failover) replicates from it with its
    /// link up, and every sentinel knows each of them as a replica in good standing.
    pub fn wait_converged(&self, timeout: Duration) -> Result<(), Error> {
        let master = self.master()?.port();
        self.wait_for(
            Instant::now() + timeout,
            timeout,
            "every server following the master",
            master,
        )
    }

    /// Waits until every running sentinel names `master`, knows every other running data
    /// server as a replica in good standing, and those replicate from it with their link up.
    fn wait_for(
        &self,
        deadline: Instant,
        timeout: Duration,
        what: &str,
        master: u16,
    ) -> Result<(), Error> {
        let replicas: Vec<&RedisServer> = self
            .servers
            .iter()
            .filter(|s| s.port() != master && s.is_running())
            .collect();
        wait_until(deadline, timeout, what, || {
            let master_server = self.server(master)?;
            let role = master_server.command(["ROLE"])?;
            let is_master = role
                .as_array()
                .and_then(|r| r.first())
                .and_then(Reply::as_str)
                == Some("master");
            if !is_master {
                return Ok(Some(format!("port {master}: ROLE {role:?}")));
            }
            for replica in &replicas {
                let info = info(replica, "replication")?;
                let following = info
                    .lines()
                    .any(|l| l.trim() == format!("master_port:{master}"));
                let up = info.lines().any(|l| l.trim() == "master_link_status:up");
                if !(following && up) {
                    return Ok(Some(format!("replica port {}: {info}", replica.port())));
                }
            }
            for sentinel in self.sentinels.iter().filter(|s| s.is_running()) {
                let named = self.named_master(sentinel)?;
                if named != master {
                    return Ok(Some(format!(
                        "sentinel port {} names port {named}",
                        sentinel.port()
                    )));
                }
                let known = sentinel.command(["SENTINEL", "REPLICAS", &self.master_name])?;
                let good = known
                    .as_array()
                    .unwrap_or_default()
                    .iter()
                    .filter_map(|r| {
                        let fields = r.as_array()?;
                        let field = |name: &str| {
                            fields
                                .chunks(2)
                                .find(|kv| kv[0].as_str() == Some(name))
                                .and_then(|kv| kv.get(1)?.as_str())
                        };
                        let flags = field("flags")?;
                        let port: u16 = field("port")?.parse().ok()?;
                        (flags == "slave" && field("master-link-status") == Some("ok"))
                            .then_some(port)
                    })
                    .collect::<Vec<_>>();
                if let Some(missing) = replicas.iter().find(|r| !good.contains(&r.port())) {
                    return Ok(Some(format!(
                        "sentinel port {} does not know replica port {} in good standing: \
                         {known:?}",
                        sentinel.port(),
                        missing.port()
                    )));
                }
            }
            Ok(None)
        })
    }

    /// The port `sentinel` names for the master.
    fn named_master(&self, sentinel: &RedisServer) -> Result<u16, Error> {
        let reply = sentinel.command(["SENTINEL", "GET-MASTER-ADDR-BY-NAME", &self.master_name])?;
        reply
            .as_array()
            .and_then(|a| a.get(1))
            .and_then(Reply::as_str)
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| {
                setup(format!(
                    "SENTINEL GET-MASTER-ADDR-BY-NAME replied {reply:?}"
                ))
            })
    }

    /// The data server on `port`.
    fn server(&self, port: u16) -> Result<&RedisServer, Error> {
        self.servers
            .iter()
            .find(|s| s.port() == port)
            .ok_or_else(|| setup(format!("the master is on port {port}, not one of ours")))
    }
}

/// `INFO section` of `server`, as text.
fn info(server: &RedisServer, section: &str) -> Result<String, Error> {
    let reply = server.command(["INFO", section])?;
    Ok(reply.as_str().unwrap_or_default().to_owned())
}

/// Calls `check` until it answers `None` (ready), failing at `deadline` with what it said last.
pub(crate) fn wait_until(
    deadline: Instant,
    timeout: Duration,
    what: &str,
    mut check: impl FnMut() -> Result<Option<String>, Error>,
) -> Result<(), Error> {
    loop {
        let Some(state) = check()? else {
            return Ok(());
        };
        if Instant::now() >= deadline {
            return Err(Error::TopologyTimeout {
                what: what.to_owned(),
                timeout,
                state,
            });
        }
        std::thread::sleep(POLL);
    }
}

fn setup(reason: impl Into<String>) -> Error {
    Error::Sentinel {
        reason: reason.into(),
    }
}
