//! Throwaway Redis Clusters: several cluster-enabled [`RedisServer`]s on free loopback ports,
//! joined into one cluster.

use std::ffi::OsString;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::{
    free_port, kill_and_reap, tail_lines, wait_exit, Builder, Error, RedisServer, Reply, POLL,
    START_ATTEMPTS, TAIL_LINES,
};

/// The number of hash slots of a Redis Cluster.
const SLOTS: u16 = 16384;
/// `redis-cli --cluster create`'s output, in the first node's directory.
const CREATE_LOG: &str = "cluster-create.log";

/// How a [`ClusterBuilder`] joins its nodes into a cluster.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Join {
    /// `redis-cli --cluster create` when `redis-cli` runs and there are at least 3 masters (it
    /// refuses fewer), else [`Join::Commands`].
    #[default]
    Auto,
    /// `redis-cli --cluster create … --cluster-yes`; [`Error::CliNotInstalled`] without it.
    RedisCli,
    /// `CLUSTER SET-CONFIG-EPOCH`, `ADDSLOTSRANGE`, `MEET` and `REPLICATE`, sent by the harness.
    Commands,
}

/// Options for a [`RedisCluster`]; see [`RedisCluster::builder`].
#[derive(Clone, Debug)]
#[must_use = "a ClusterBuilder does nothing until start() is called"]
pub struct ClusterBuilder {
    masters: usize,
    replicas: usize,
    node: Builder,
    cli: Option<PathBuf>,
    join: Join,
    ready_timeout: Duration,
}

impl Default for ClusterBuilder {
    fn default() -> Self {
        ClusterBuilder {
            masters: 3,
            replicas: 0,
            node: Builder::default(),
            cli: None,
            join: Join::Auto,
            ready_timeout: Duration::from_secs(30),
        }
    }
}

impl ClusterBuilder {
    /// How many masters share the 16384 slots, in near-equal ranges (default 3).
    pub fn masters(mut self, masters: usize) -> Self {
        self.masters = masters;
        self
    }

    /// How many replicas each master gets (default 0).
    pub fn replicas(mut self, per_master: usize) -> Self {
        self.replicas = per_master;
        self
    }

    /// Runs this `redis-server` instead of `$LEASEHOLD_REDIS_SERVER` or the one on `PATH`.
    pub fn binary(mut self, path: impl Into<PathBuf>) -> Self {
        self.node = self.node.binary(path);
        self
    }

    /// Runs this `redis-cli`. Default: the one beside the `redis-server` binary when that is
    /// given as a path, else `redis-cli` from `PATH`.
    pub fn cli(mut self, path: impl Into<PathBuf>) -> Self {
        self.cli = Some(path.into());
        self
    }

    /// How the nodes are joined (default [`Join::Auto`]).
    pub fn join(mut self, join: Join) -> Self {
        self.join = join;
        self
    }

    /// Appends command-line arguments to every node's (after the cluster's own, so they can
    /// override them), e.g. `["--cluster-node-timeout", "2000"]`.
    pub fn args<I, A>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = A>,
        A: Into<OsString>,
    {
        self.node = self.node.args(args);
        self
    }

    /// How long each node may take to answer `PING` (default 10 s).
    pub fn startup_timeout(mut self, timeout: Duration) -> Self {
        self.node = self.node.startup_timeout(timeout);
        self
    }

    /// How long the joined cluster may take to be ready (default 30 s): every node reports
    /// `cluster_state:ok` with all slots and all nodes known, every node lists as many masters
    /// and replicas as there are, and every replica is in sync.
    pub fn ready_timeout(mut self, timeout: Duration) -> Self {
        self.ready_timeout = timeout;
        self
    }

    /// Starts the nodes (masters first, then replicas), joins them, and waits until the
    /// cluster is ready.
    pub fn start(self) -> Result<RedisCluster, Error> {
        if self.masters == 0 {
            return Err(Error::ClusterSetup {
                reason: "a cluster needs at least one master".into(),
            });
        }
        let cli = self.cli_binary();
        let use_cli = match self.join {
            Join::Commands => false,
            Join::RedisCli => {
                cli_version(&cli)?;
                true
            }
            Join::Auto => self.masters >= 3 && cli_version(&cli).is_ok(),
        };
        let total = self.masters * (1 + self.replicas);
        let started: Vec<Result<(RedisServer, u16), Error>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..total)
                .map(|_| scope.spawn(|| self.start_node()))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("starting a node panicked"))
                .collect()
        });
        let mut nodes = Vec::with_capacity(total);
        let mut bus_ports = Vec::with_capacity(total);
        for node in started {
            let (server, bus) = node?;
            nodes.push(server);
            bus_ports.push(bus);
        }
        let cluster = RedisCluster {
            nodes,
            bus_ports,
            masters: self.masters,
        };
        if use_cli {
            cluster.create_with_cli(&cli, self.replicas, self.ready_timeout)?;
        } else {
            cluster.create_with_commands(self.ready_timeout)?;
        }
        cluster.wait_ready(self.ready_timeout)?;
        Ok(cluster)
    }

    /// One cluster-enabled node, with its cluster bus on a port of its own (`--cluster-port`,
    /// Redis 7+), so the server's port may be any free one (the default bus port is the
    /// server's + 10000, which may be taken or above 65535).
    fn start_node(&self) -> Result<(RedisServer, u16), Error> {
        let mut last = None;
        for _ in 0..START_ATTEMPTS {
            let bus = free_port().map_err(Error::Setup)?;
            let mut node = self.node.clone();
            let theirs = std::mem::take(&mut node.args);
            let bus_arg = bus.to_string();
            node = node
                .args(["--cluster-enabled", "yes", "--cluster-port", &bus_arg])
                .args(["--cluster-config-file", "nodes.conf"])
                // A replica's first sync: at once, not after waiting 5 s for more replicas.
                .args(["--repl-diskless-sync-delay", "0"])
                .args(theirs);
            match node.start() {
                Ok(server) => return Ok((server, bus)),
                // Someone took the server's or the bus's port: try others.
                Err(e @ Error::PortInUse { .. }) => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or(Error::ClusterSetup {
            reason: "no free ports".into(),
        }))
    }

    fn cli_binary(&self) -> PathBuf {
        if let Some(cli) = &self.cli {
            return cli.clone();
        }
        let server = self.node.server_binary();
        match server.parent() {
            Some(dir) if !dir.as_os_str().is_empty() && dir.join("redis-cli").is_file() => {
                dir.join("redis-cli")
            }
            _ => PathBuf::from("redis-cli"),
        }
    }
}

/// Whether `cli` runs: its `--version`, or why not.
fn cli_version(cli: &Path) -> Result<String, Error> {
    let output = Command::new(cli)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .map_err(|source| Error::CliNotInstalled {
            binary: cli.to_path_buf(),
            source,
        })?;
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// A Redis Cluster owned by a test: `masters` masters sharing the slots and their replicas, each
/// a [`RedisServer`] on a free loopback port. Dropping it kills every node and deletes their
/// directories.
///
/// ```
/// use leasehold_redis_harness::{RedisCluster, Reply};
///
/// # fn main() -> Result<(), leasehold_redis_harness::Error> {
/// let cluster = RedisCluster::start(3)?;
/// let owner = cluster.owner(12182)?; // the slot of "foo"
/// assert_eq!(owner.command(["SET", "foo", "bar"])?, Reply::Simple("OK".into()));
/// let seeds = cluster.urls(); // hand them to a cluster client
/// assert_eq!(seeds.len(), 3);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct RedisCluster {
    /// Masters first, then replicas.
    nodes: Vec<RedisServer>,
    bus_ports: Vec<u16>,
    masters: usize,
}

impl RedisCluster {
    /// Starts `masters` masters without replicas; see [`ClusterBuilder::start`].
    pub fn start(masters: usize) -> Result<RedisCluster, Error> {
        ClusterBuilder::default().masters(masters).start()
    }

    /// Options: masters, replicas, binaries, extra arguments, how to join, timeouts.
    pub fn builder() -> ClusterBuilder {
        ClusterBuilder::default()
    }

    /// Every node: the masters, then the replicas.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// The nodes started as masters (a failover may have changed roles since).
    pub fn masters(&self) -> &[RedisServer] {
        &self.nodes[..self.masters]
    }

    /// The nodes started as replicas.
    pub fn replicas(&self) -> &[RedisServer] {
        &self.nodes[self.masters..]
    }

    /// Every node's URL: the seeds a cluster client takes.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// `key`'s hash slot, as the cluster computes it (`CLUSTER KEYSLOT` on the first running
    /// node).
    pub fn key_slot(&self, key: &str) -> Result<u16, Error> {
        let asked = self
            .nodes
            .iter()
            .find(|node| node.is_running())
            .ok_or_else(|| setup("no node is running"))?;
        let reply = asked.command(["CLUSTER", "KEYSLOT", key])?;
        reply
            .as_int()
            .and_then(|slot| u16::try_from(slot).ok())
            .ok_or_else(|| setup(format!("CLUSTER KEYSLOT {key:?} replied {reply:?}")))
    }

    /// The master serving `slot`, as the first running node's `CLUSTER SLOTS` says.
    pub fn owner(&self, slot: u16) -> Result<&RedisServer, Error> {
        let asked = self
            .nodes
            .iter()
            .find(|node| node.is_running())
            .ok_or_else(|| setup("no node is running"))?;
        let reply = asked.command(["CLUSTER", "SLOTS"])?;
        let ranges = reply
            .as_array()
            .ok_or_else(|| setup(format!("CLUSTER SLOTS replied {reply:?}")))?;
        for range in ranges {
            let parsed = range.as_array().and_then(|r| {
                let start = r.first()?.as_int()?;
                let end = r.get(1)?.as_int()?;
                let port = r.get(2)?.as_array()?.get(1)?.as_int()?;
                Some((start, end, port))
            });
            let Some((start, end, port)) = parsed else {
                return Err(setup(format!("CLUSTER SLOTS replied {reply:?}")));
            };
            if (start..=end).contains(&i64::from(slot)) {
                return self
                    .nodes
                    .iter()
                    .find(|node| i64::from(node.port()) == port)
                    .ok_or_else(|| setup(format!("slot {slot} is on port {port}, not ours")));
            }
        }
        Err(setup(format!("slot {slot} is not served")))
    }

    /// The master serving `slot` as `node` sees it (from its `CLUSTER SLOTS`), by port.
    fn owner_seen_by(&self, node: &RedisServer, slot: u16) -> Result<Option<i64>, Error> {
        let reply = node.command(["CLUSTER", "SLOTS"])?;
        let Some(ranges) = reply.as_array() else {
            return Ok(None);
        };
        Ok(ranges.iter().find_map(|range| {
            let r = range.as_array()?;
            let (start, end) = (r.first()?.as_int()?, r.get(1)?.as_int()?);
            let port = r.get(2)?.as_array()?.get(1)?.as_int()?;
            (start..=end).contains(&i64::from(slot)).then_some(port)
        }))
    }

    /// A replica of `master` (by `INFO replication`: it follows `master`'s port with its link
    /// up).
    pub fn replica_of(&self, master: &RedisServer) -> Result<&RedisServer, Error> {
        let wanted = format!("master_port:{}", master.port());
        for node in self.nodes.iter().filter(|n| n.is_running()) {
            let info = node.command(["INFO", "replication"])?;
            let info = info.as_str().unwrap_or_default();
            let lines: Vec<&str> = info.lines().map(str::trim).collect();
            if lines.contains(&"role:slave")
                && lines.contains(&wanted.as_str())
                && lines.contains(&"master_link_status:up")
            {
                return Ok(node);
            }
        }
        Err(setup(format!(
            "no replica of port {} is in sync",
            master.port()
        )))
    }

    /// Promotes a replica of the master serving `slot` with a manual `CLUSTER FAILOVER`, sent to
    /// that replica (the master must be up: it stops taking writes until the replica has
    /// caught up, so nothing acknowledged is lost), and waits up to `timeout` until every
    /// running node's `CLUSTER SLOTS` names the replica for `slot` and the old master
    /// replicates from it with its link up. Returns the new master.
    ///
    /// A manual failover needs the master to list the replica as its own, and the votes of a
    /// majority of masters, over the cluster bus: it completes in well under a second on
    /// loopback, whatever `cluster-node-timeout` is (which bounds only a failover after a
    /// master *failed*), once every node's view of the roles agrees — which
    /// [`ClusterBuilder::start`] waits for. The other nodes learn of the new master from
    /// gossip, so the wait is on each running node's `CLUSTER SLOTS` and `CLUSTER NODES`,
    /// not only on the promoted replica's.
    pub fn failover(&self, slot: u16, timeout: Duration) -> Result<&RedisServer, Error> {
        let deadline = Instant::now() + timeout;
        let master = self.owner(slot)?;
        let replica = self.replica_of(master)?;
        match replica.command(["CLUSTER", "FAILOVER"])? {
            Reply::Simple(ok) if ok == "OK" => {}
            other => {
                return Err(setup(format!(
                    "CLUSTER FAILOVER on port {} replied {other:?}",
                    replica.port()
                )))
            }
        }
        let new = i64::from(replica.port());
        let old = format!("master_port:{}", replica.port());
        loop {
            let mut state = None;
            for node in self.nodes.iter().filter(|n| n.is_running()) {
                let seen = self.owner_seen_by(node, slot)?;
                if seen != Some(new) {
                    state = Some(format!(
                        "port {} sees slot {slot} on {seen:?}, not on {new}",
                        node.port()
                    ));
                    break;
                }
            }
            if state.is_none() {
                state = self.roles_not_agreed()?;
            }
            if state.is_none() {
                let info = master.command(["INFO", "replication"])?;
                let info = info.as_str().unwrap_or_default();
                let lines: Vec<&str> = info.lines().map(str::trim).collect();
                if !(lines.contains(&old.as_str()) && lines.contains(&"master_link_status:up")) {
                    state = Some(format!("old master port {}: {info}", master.port()));
                }
            }
            let Some(state) = state else {
                return Ok(replica);
            };
            if Instant::now() >= deadline {
                return Err(Error::TopologyTimeout {
                    what: format!("CLUSTER FAILOVER of slot {slot} to port {new}"),
                    timeout,
                    state,
                });
            }
            std::thread::sleep(POLL);
        }
    }

    /// Moves `slot` with its keys from the master serving it to `target`, as `redis-cli
    /// --cluster reshard` does: `IMPORTING` / `MIGRATING`, `MIGRATE … KEYS` in batches, then
    /// `SETSLOT … NODE` on every master. It pauses 150 ms inside each open state so that
    /// clients meet `ASK` and `TRYAGAIN` on the way.
    ///
    /// # Errors
    ///
    /// `target` already serves the slot, or a command failed.
    pub fn migrate(&self, slot: u16, target: &RedisServer) -> Result<(), Error> {
        let source = self.owner(slot)?;
        if source.port() == target.port() {
            return Err(setup(format!(
                "slot {slot} is already on port {}",
                target.port()
            )));
        }
        let slot = slot.to_string();
        let (source_id, target_id) = (node_id(source)?, node_id(target)?);
        expect_ok(
            target,
            &["CLUSTER", "SETSLOT", &slot, "IMPORTING", &source_id],
        )?;
        expect_ok(
            source,
            &["CLUSTER", "SETSLOT", &slot, "MIGRATING", &target_id],
        )?;
        std::thread::sleep(Duration::from_millis(150));
        let port = target.port().to_string();
        loop {
            let keys = source.command(["CLUSTER", "GETKEYSINSLOT", &slot, "100"])?;
            let keys: Vec<&str> = keys
                .as_array()
                .map(|keys| keys.iter().filter_map(Reply::as_str).collect())
                .ok_or_else(|| setup(format!("CLUSTER GETKEYSINSLOT replied {keys:?}")))?;
            if keys.is_empty() {
                break;
            }
            let mut args = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
            args.extend(keys);
            expect_ok(source, &args)?;
        }
        std::thread::sleep(Duration::from_millis(150));
        expect_ok(target, &["CLUSTER", "SETSLOT", &slot, "NODE", &target_id])?;
        expect_ok(source, &["CLUSTER", "SETSLOT", &slot, "NODE", &target_id])?;
        for other in self.masters() {
            if other.port() != source.port() && other.port() != target.port() {
                expect_ok(other, &["CLUSTER", "SETSLOT", &slot, "NODE", &target_id])?;
            }
        }
        Ok(())
    }

    /// Stops every node cleanly; the first error, after trying them all.
    pub fn stop(&self) -> Result<(), Error> {
        let mut first = Ok(());
        for node in &self.nodes {
            if let Err(e) = node.stop() {
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        first
    }

    fn create_with_cli(&self, cli: &Path, replicas: usize, timeout: Duration) -> Result<(), Error> {
        let log_path = self.nodes[0].dir().join(CREATE_LOG);
        let log = File::create(&log_path).map_err(Error::Setup)?;
        let log_err = log.try_clone().map_err(Error::Setup)?;
        let mut child = Command::new(cli)
            .args(["--cluster", "create"])
            .args(self.nodes.iter().map(|n| n.addr().to_string()))
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .map_err(|source| Error::CliNotInstalled {
                binary: cli.to_path_buf(),
                source,
            })?;
        let failed = |reason: String| Error::ClusterSetup {
            reason: format!(
                "`{} --cluster create` {reason}; its output:\n{}",
                cli.display(),
                tail_lines(&log_path, TAIL_LINES)
            ),
        };
        match wait_exit(&mut child, timeout) {
            Ok(true) => {}
            Ok(false) => {
                let _ = kill_and_reap(&mut child);
                return Err(failed(format!("did not finish within {timeout:?}")));
            }
            Err(e) => {
                let _ = kill_and_reap(&mut child);
                return Err(failed(format!("could not be waited for: {e}")));
            }
        }
        let status = child.wait().map_err(Error::Setup)?;
        let output = std::fs::read_to_string(&log_path).unwrap_or_default();
        if status.success() && output.contains("All 16384 slots covered") {
            Ok(())
        } else {
            Err(failed(format!("failed ({status})")))
        }
    }

    fn create_with_commands(&self, timeout: Duration) -> Result<(), Error> {
        // Distinct epochs up front, as redis-cli sets them: no collisions to resolve later.
        for (i, node) in self.nodes.iter().enumerate() {
            expect_ok(node, &["CLUSTER", "SET-CONFIG-EPOCH", &(i + 1).to_string()])?;
        }
        for (i, master) in self.masters().iter().enumerate() {
            let (first, last) = slot_range(i, self.masters);
            expect_ok(
                master,
                &[
                    "CLUSTER",
                    "ADDSLOTSRANGE",
                    &first.to_string(),
                    &last.to_string(),
                ],
            )?;
        }
        let first = &self.nodes[0];
        for (node, bus) in self.nodes.iter().zip(&self.bus_ports).skip(1) {
            let (port, bus) = (node.port().to_string(), bus.to_string());
            expect_ok(first, &["CLUSTER", "MEET", "127.0.0.1", &port, &bus])?;
        }
        let deadline = Instant::now() + timeout;
        for (i, replica) in self.replicas().iter().enumerate() {
            let master = &self.masters()[i % self.masters];
            let id = node_id(master)?;
            // Until gossip has told the replica of its master: `ERR Unknown node`.
            loop {
                let reply = replica.command(["CLUSTER", "REPLICATE", &id])?;
                match reply {
                    Reply::Simple(ok) if ok == "OK" => break,
                    Reply::Error(e) if e.contains("Unknown node") && Instant::now() < deadline => {
                        std::thread::sleep(POLL);
                    }
                    other => {
                        return Err(setup(format!(
                            "CLUSTER REPLICATE on port {} replied {other:?}",
                            replica.port()
                        )))
                    }
                }
            }
        }
        Ok(())
    }

    /// Waits until every node sees the whole cluster healthy and every replica is in sync.
    fn wait_ready(&self, timeout: Duration) -> Result<(), Error> {
        let deadline = Instant::now() + timeout;
        loop {
            let not_ready = self.not_ready()?;
            let Some(state) = not_ready else {
                return Ok(());
            };
            if Instant::now() >= deadline {
                return Err(Error::ClusterTimeout { timeout, state });
            }
            std::thread::sleep(POLL);
        }
    }

    /// What the first node that is not ready says, or `None` when all are.
    fn not_ready(&self) -> Result<Option<String>, Error> {
        let expected = [
            "cluster_state:ok".to_owned(),
            format!("cluster_slots_ok:{SLOTS}"),
            format!("cluster_known_nodes:{}", self.nodes.len()),
            format!("cluster_size:{}", self.masters),
        ];
        for node in &self.nodes {
            let info = node.command(["CLUSTER", "INFO"])?;
            let info = info.as_str().unwrap_or_default();
            let lines: Vec<&str> = info.lines().map(str::trim).collect();
            if !expected.iter().all(|want| lines.contains(&want.as_str())) {
                return Ok(Some(format!("port {}: CLUSTER INFO\n{info}", node.port())));
            }
        }
        if let Some(state) = self.roles_not_agreed()? {
            return Ok(Some(state));
        }
        for replica in self.replicas() {
            let info = replica.command(["INFO", "replication"])?;
            let info = info.as_str().unwrap_or_default();
            if !info.lines().any(|l| l.trim() == "master_link_status:up") {
                return Ok(Some(format!(
                    "replica on port {}: INFO replication\n{info}",
                    replica.port()
                )));
            }
        }
        Ok(None)
    }
}

impl RedisCluster {
    /// What the first running node whose `CLUSTER NODES` does not count as many masters and
    /// replicas as the cluster has says, or `None` when all agree.
    ///
    /// Gossip spreads a replica's role: right after `CLUSTER REPLICATE` (or a failover) a node
    /// may still list it as an empty master. A master that does not list a replica as its own
    /// ignores that replica's `CLUSTER FAILOVER` request (its manual failover times out after
    /// 5 s, undone), and other masters refuse it their votes; so readiness, and a failover,
    /// wait for every node's view.
    fn roles_not_agreed(&self) -> Result<Option<String>, Error> {
        let replicas = self.nodes.len() - self.masters;
        for node in self.nodes.iter().filter(|n| n.is_running()) {
            let reply = node.command(["CLUSTER", "NODES"])?;
            let nodes = reply.as_str().unwrap_or_default();
            let flags = |role: &str| {
                nodes
                    .lines()
                    .filter(|line| {
                        line.split(' ')
                            .nth(2)
                            .is_some_and(|flags| flags.split(',').any(|f| f == role))
                    })
                    .count()
            };
            if flags("master") != self.masters || flags("slave") != replicas {
                return Ok(Some(format!(
                    "port {}: CLUSTER NODES\n{nodes}",
                    node.port()
                )));
            }
        }
        Ok(None)
    }
}

/// The slots of master `i` of `masters`: near-equal consecutive ranges covering them all.
fn slot_range(i: usize, masters: usize) -> (usize, usize) {
    let slots = usize::from(SLOTS);
    (i * slots / masters, (i + 1) * slots / masters - 1)
}

fn expect_ok(node: &RedisServer, args: &[&str]) -> Result<(), Error> {
    match node.command(args)? {
        Reply::Simple(ok) if ok == "OK" => Ok(()),
        other => Err(setup(format!(
            "{} on port {} replied {other:?}",
            args.join(" "),
            node.port()
        ))),
    }
}

/// `CLUSTER MYID` of `node`.
fn node_id(node: &RedisServer) -> Result<String, Error> {
    let id = node.command(["CLUSTER", "MYID"])?;
    id.as_str()
        .map(str::to_owned)
        .ok_or_else(|| setup(format!("CLUSTER MYID replied {id:?}")))
}

fn setup(reason: impl Into<String>) -> Error {
    Error::ClusterSetup {
        reason: reason.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_ranges_cover_every_slot_once() {
        for masters in 1..=7 {
            let mut next = 0;
            for i in 0..masters {
                let (first, last) = slot_range(i, masters);
                assert_eq!(first, next);
                assert!(last >= first);
                next = last + 1;
            }
            assert_eq!(next, usize::from(SLOTS));
        }
    }
}
