//! Throwaway `redis-server` processes for tests.
//!
//! [`RedisServer::start`] runs `redis-server` on a free loopback port (never 6379) with a fresh
//! temporary directory, persistence off, and its log in that directory, and returns once the
//! server answers `PING`. A test can then [`kill`](RedisServer::kill) it (`SIGKILL`, like a
//! crash), [`stop`](RedisServer::stop) it cleanly, and [`restart`](RedisServer::restart) it on the
//! same port and directory — with [`Builder::aof`] on, everything acknowledged before a kill
//! survives the restart. Dropping the handle kills the process and deletes the directory.
//!
//! If `redis-server` is not installed, [`RedisServer::start`] fails with [`Error::NotInstalled`],
//! whose message says how to install it: tests that need Redis fail loudly, never skip.
//!
//! ```
//! use leasehold_redis_harness::{RedisServer, Reply};
//!
//! # fn main() -> Result<(), leasehold_redis_harness::Error> {
//! let server = RedisServer::builder().aof(true).start()?;
//! let url = server.url(); // "redis://127.0.0.1:PORT/": hand it to the client under test
//! assert!(url.starts_with("redis://127.0.0.1:"));
//!
//! server.command(["SET", "greeting", "hello"])?;
//! server.kill()?; // a crash: no clean shutdown
//! assert!(!server.is_running());
//! server.restart()?; // same port, same directory: the AOF is replayed
//! assert_eq!(server.url(), url);
//! let value = server.command(["GET", "greeting"])?;
//! assert_eq!(value.as_str(), Some("hello"));
//!
//! server.stop()?; // SHUTDOWN NOSAVE, then wait for the process to exit
//! # Ok(())
//! # }
//! ```
//!
//! The handle is `Send + Sync` (the process sits behind a mutex), so it can be shared in an
//! `Arc` with a task that kills or restarts the server while a worker runs.
//!
//! A process is only reaped by [`Drop`] (or `kill`/`stop`): if the test binary itself is killed
//! with `SIGKILL` or aborts, the server outlives it.
//!
//! ## Sentinel
//!
//! [`RedisSentinel::start`] runs a master, its replicas (`--replicaof`) and several sentinels
//! (`redis-server sentinel.conf --sentinel`, a generated configuration monitoring the master
//! with short `down-after-milliseconds` and `failover-timeout`), each a [`RedisServer`] on a
//! free loopback port, and returns once every sentinel names the master and knows every
//! replica. [`RedisSentinel::failover`] sends `SENTINEL FAILOVER` and waits until every
//! sentinel names the promoted replica and it answers as a master;
//! [`RedisSentinel::crash_master`] kills the master instead and waits until the sentinels have
//! agreed it is down and promoted a replica; [`RedisSentinel::wait_replicated`] waits until
//! every replica holds what the master holds;
//! [`RedisSentinel::wait_converged`] waits until every other server replicates from it too. The
//! old master, still up, keeps answering as a master until a sentinel's next look at it (every
//! 10 s) turns it into a replica: that takes 10–20 s, which a test need not wait for.
//!
//! ## Clusters
//!
//! [`RedisCluster::start`] runs several such servers with `--cluster-enabled yes` (each with its
//! cluster bus on a free port of its own, `--cluster-port`, so Redis 7 or later), joins them
//! with `redis-cli --cluster create … --cluster-yes` (or, without `redis-cli` or with fewer than
//! three masters, with `CLUSTER ADDSLOTSRANGE` / `MEET` / `REPLICATE` sent by the harness; see
//! [`Join`]), and returns once every node reports `cluster_state:ok` with every slot and every
//! node known, every node agrees on which nodes are masters and which replicas (see
//! [`RedisCluster::failover`]), and every replica is in sync. [`RedisCluster::owner`] names the node serving a
//! slot; dropping the cluster kills every node and deletes their directories. It honours
//! `LEASEHOLD_REDIS_SERVER` too, and looks for `redis-cli` beside that binary first. Built with
//! [`ClusterBuilder::replicas`], [`RedisCluster::failover`] promotes a master's replica with
//! `CLUSTER FAILOVER`, sent to that replica, and waits until every node sees it serve the
//! slots.

mod cluster;
mod error;
mod resp;
mod sentinel;

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

pub use cluster::{ClusterBuilder, Join, RedisCluster};
pub use error::Error;
pub use resp::Reply;
pub use sentinel::{RedisSentinel, SentinelBuilder};

/// Environment variable naming the `redis-server` binary to run (default: `redis-server` from
/// `PATH`). [`Builder::binary`] takes precedence.
pub const BINARY_ENV: &str = "LEASEHOLD_REDIS_SERVER";

/// The port a machine-wide Redis usually listens on; never handed out.
const DEFAULT_REDIS_PORT: u16 = 6379;
/// Fresh ports tried by `start` when the chosen one turns out to be taken.
const START_ATTEMPTS: usize = 20;
/// How long `stop` waits for the process to exit after `SHUTDOWN`.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// Timeout of each connect/read/write of the harness's own connections.
const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// Timeout of each connect/read/write of a readiness probe (a port squatter that accepts but
/// never answers must not eat the startup timeout).
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);
/// Pause between readiness probes.
const POLL: Duration = Duration::from_millis(10);
/// Lines of each log file included in errors.
const TAIL_LINES: usize = 30;

const LOG_FILE: &str = "redis.log";
const SENTINEL_CONFIG_FILE: &str = "sentinel.conf";
const OUTPUT_FILE: &str = "redis-output.log";

/// Options for a [`RedisServer`]; see [`RedisServer::builder`].
#[derive(Clone, Debug)]
#[must_use = "a Builder does nothing until start() is called"]
pub struct Builder {
    binary: Option<PathBuf>,
    aof: bool,
    password: Option<String>,
    args: Vec<OsString>,
    startup_timeout: Duration,
    /// Run as a sentinel (`redis-server sentinel.conf --sentinel`), with this configuration
    /// written to `sentinel.conf` in the server's directory before its first start (Sentinel
    /// rewrites the file as it learns the topology, so a restart keeps what it learnt).
    sentinel_config: Option<String>,
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            binary: None,
            aof: false,
            password: None,
            args: Vec::new(),
            startup_timeout: Duration::from_secs(10),
            sentinel_config: None,
        }
    }
}

impl Builder {
    /// Runs this binary instead of `$LEASEHOLD_REDIS_SERVER` or `redis-server` from `PATH`.
    pub fn binary(mut self, path: impl Into<PathBuf>) -> Self {
        self.binary = Some(path.into());
        self
    }

    /// Turns the append-only file on, fsynced on every write (`appendfsync always`), so whatever
    /// the server acknowledged survives [`RedisServer::kill`] + [`RedisServer::restart`].
    /// Default: off (and RDB snapshots are always off).
    pub fn aof(mut self, on: bool) -> Self {
        self.aof = on;
        self
    }

    /// Requires this password (`requirepass`, the `default` user). [`RedisServer::url`] then
    /// carries it, and the harness's own connections authenticate with it.
    pub fn password(mut self, password: impl Into<String>) -> Self {
        self.password = Some(password.into());
        self
    }

    /// Appends one command-line argument (after the harness's own, so it can override them),
    /// e.g. `.arg("--maxmemory").arg("10mb")`. Use [`Builder::password`] rather than
    /// `--requirepass`, or the readiness check cannot authenticate.
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Appends several command-line arguments; see [`Builder::arg`].
    pub fn args<I, A>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = A>,
        A: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// How long `start` and `restart` wait for the server to answer `PING` (default 10 s).
    pub fn startup_timeout(mut self, timeout: Duration) -> Self {
        self.startup_timeout = timeout;
        self
    }

    /// The binary `start` runs: [`Builder::binary`], else `$LEASEHOLD_REDIS_SERVER`, else
    /// `redis-server` from `PATH`.
    fn server_binary(&self) -> PathBuf {
        match self.binary.clone() {
            Some(binary) => binary,
            None => std::env::var_os(BINARY_ENV)
                .filter(|v| !v.is_empty())
                .map_or_else(|| PathBuf::from("redis-server"), PathBuf::from),
        }
    }

    /// Starts the server on a free loopback port and waits until it answers `PING`.
    pub fn start(self) -> Result<RedisServer, Error> {
        let binary = self.server_binary();
        let dir = tempfile::Builder::new()
            .prefix("leasehold-redis-")
            .tempdir()
            .map_err(Error::Setup)?;
        let mut server = RedisServer {
            binary,
            options: self,
            port: 0,
            child: Mutex::new(None),
            dir,
        };
        let mut last_error = None;
        for _ in 0..START_ATTEMPTS {
            server.port = free_port().map_err(Error::Setup)?;
            match server.launch() {
                Ok(child) => {
                    *server.lock() = Some(child);
                    return Ok(server);
                }
                // Someone took the port between our probe and the server's bind: try another.
                Err(e @ Error::PortInUse { .. }) => last_error = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last_error.unwrap_or(Error::NotRunning { port: server.port }))
    }
}

/// A `redis-server` process owned by a test, on `127.0.0.1:`[`port`](RedisServer::port) with
/// its data in [`dir`](RedisServer::dir). Dropping it kills the process and deletes the
/// directory.
#[derive(Debug)]
pub struct RedisServer {
    binary: PathBuf,
    options: Builder,
    port: u16,
    /// `None` once killed or stopped (until `restart`).
    child: Mutex<Option<Child>>,
    /// Declared last: removed after the process is gone.
    dir: tempfile::TempDir,
}

impl RedisServer {
    /// Starts a server with the defaults (no persistence); see [`Builder::start`].
    pub fn start() -> Result<RedisServer, Error> {
        Builder::default().start()
    }

    /// Options: AOF, password, extra arguments, binary, startup timeout.
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// `redis://127.0.0.1:PORT/` (with `:PASSWORD@` when [`Builder::password`] was set).
    pub fn url(&self) -> String {
        match &self.options.password {
            Some(pw) => format!("redis://:{}@127.0.0.1:{}/", percent_encode(pw), self.port),
            None => format!("redis://127.0.0.1:{}/", self.port),
        }
    }

    /// The loopback port; it stays the same across [`restart`](RedisServer::restart).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, self.port))
    }

    /// The server's working directory (AOF files, `redis.log`, `redis-output.log`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The process id while the server runs.
    pub fn pid(&self) -> Option<u32> {
        let mut child = self.lock();
        reap(&mut child);
        child.as_ref().map(Child::id)
    }

    /// Whether the process is still alive (it may have been killed, stopped, or have crashed).
    pub fn is_running(&self) -> bool {
        let mut child = self.lock();
        reap(&mut child);
        child.is_some()
    }

    /// Kills the process with `SIGKILL` — a crash, no shutdown work — and reaps it. A no-op if it
    /// is not running.
    pub fn kill(&self) -> Result<(), Error> {
        let mut child = self.lock();
        match child.take() {
            Some(mut c) => kill_and_reap(&mut c).map_err(|source| self.io(source)),
            None => Ok(()),
        }
    }

    /// Shuts the server down cleanly (`SHUTDOWN NOSAVE`; the AOF, when on, is flushed) and waits
    /// for the process to exit. A no-op if it is not running. If the server refuses or does not
    /// exit within 10 s it is killed and [`Error::Unclean`] returned.
    pub fn stop(&self) -> Result<(), Error> {
        let mut guard = self.lock();
        reap(&mut guard);
        let Some(mut child) = guard.take() else {
            return Ok(());
        };
        let refused = match self.connect() {
            Ok(mut conn) => match conn.send(["SHUTDOWN", "NOSAVE"]).and_then(|()| conn.read()) {
                Ok(Reply::Error(e)) => Some(format!("SHUTDOWN replied {e}")),
                // Success closes the connection without a reply.
                Ok(_) | Err(_) => None,
            },
            Err(e) => Some(format!("could not send SHUTDOWN: {e}")),
        };
        let reason = match refused {
            Some(reason) => Some(reason),
            None => match wait_exit(&mut child, STOP_TIMEOUT) {
                Ok(true) => None,
                Ok(false) => Some(format!("still running {STOP_TIMEOUT:?} after SHUTDOWN")),
                Err(e) => Some(format!("waiting for exit: {e}")),
            },
        };
        match reason {
            None => Ok(()),
            Some(reason) => {
                kill_and_reap(&mut child).map_err(|source| self.io(source))?;
                Err(Error::Unclean {
                    port: self.port,
                    reason,
                })
            }
        }
    }

    /// Starts the server again on the same port and directory (so an AOF written before a
    /// [`kill`](RedisServer::kill) or [`stop`](RedisServer::stop) is loaded) and waits until it
    /// answers `PING`. If it is still running it is stopped cleanly first. While the port is
    /// briefly held by another process it retries until the startup timeout, then fails with
    /// [`Error::PortInUse`].
    pub fn restart(&self) -> Result<(), Error> {
        self.stop()?;
        let deadline = Instant::now() + self.options.startup_timeout;
        loop {
            match self.launch() {
                Ok(child) => {
                    *self.lock() = Some(child);
                    return Ok(());
                }
                Err(Error::PortInUse { .. }) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Sends one command on a fresh connection (authenticated if a password is set) and returns
    /// the reply; an error reply is `Ok(Reply::Error(..))`. Handy for test setup and inspection
    /// (`SET`, `XPENDING`, `CLIENT KILL`, `XGROUP DESTROY`, …) without an async runtime.
    pub fn command<I, A>(&self, args: I) -> Result<Reply, Error>
    where
        I: IntoIterator<Item = A>,
        A: AsRef<[u8]>,
    {
        if !self.is_running() {
            return Err(Error::NotRunning { port: self.port });
        }
        let mut conn = self.connect().map_err(|source| self.io(source))?;
        conn.call(args).map_err(|source| self.io(source))
    }

    /// Waits until this master counts `n` replicas online. A replica reports
    /// `master_link_status:up` as soon as its first sync loads, but its master takes it as
    /// online (and only then counts it for `WAIT`, and asks it for acknowledgements) once it
    /// sent its first `REPLCONF ACK`, which it does on its once-a-second timer: a `WAIT` sent
    /// in between blocks up to a second.
    pub fn await_replicas_online(&self, n: usize, timeout: Duration) -> Result<(), Error> {
        let deadline = Instant::now() + timeout;
        loop {
            let info = self.command(["INFO", "replication"])?;
            let state = info.as_str().unwrap_or_default().to_owned();
            let online = state
                .lines()
                .filter(|l| l.starts_with("slave") && l.contains("state=online"))
                .count();
            if online >= n {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(Error::TopologyTimeout {
                    what: format!("{n} replica(s) online at the master on port {}", self.port),
                    timeout,
                    state,
                });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The last lines of the server log and of its stdout/stderr.
    pub fn log_tail(&self) -> String {
        let mut out = String::new();
        for name in [LOG_FILE, OUTPUT_FILE] {
            let tail = tail_lines(&self.dir().join(name), TAIL_LINES);
            if !tail.is_empty() {
                out.push_str(&format!("--- {name}\n{tail}"));
            }
        }
        if out.is_empty() {
            out.push_str("(no log output)\n");
        }
        out
    }

    fn lock(&self) -> MutexGuard<'_, Option<Child>> {
        // A panic while holding the lock leaves the Option consistent: ignore poisoning.
        self.child.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn io(&self, source: io::Error) -> Error {
        Error::Io {
            port: self.port,
            source,
        }
    }

    /// A connection, authenticated when a password is set.
    fn connect(&self) -> io::Result<resp::Conn> {
        self.connect_with(IO_TIMEOUT)
    }

    fn connect_with(&self, timeout: Duration) -> io::Result<resp::Conn> {
        let mut conn = resp::Conn::connect(self.addr(), timeout)?;
        if let Some(pw) = &self.options.password {
            if let Reply::Error(e) = conn.call(["AUTH", pw.as_str()])? {
                return Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    format!("AUTH: {e}"),
                ));
            }
        }
        Ok(conn)
    }

    /// Spawns the process on `self.port` and waits until it answers `PING` — and is the one
    /// answering: a server of someone else's that grabbed the port must not pass for ours.
    fn launch(&self) -> Result<Child, Error> {
        let dir = self.dir();
        let output = OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(OUTPUT_FILE))
            .map_err(Error::Setup)?;
        let output_err = output.try_clone().map_err(Error::Setup)?;
        // Where this launch's output starts: the files are appended to across restarts.
        let log_start = file_len(&dir.join(LOG_FILE));
        let output_start = file_len(&dir.join(OUTPUT_FILE));
        let mut cmd = Command::new(&self.binary);
        if let Some(config) = &self.options.sentinel_config {
            let path = dir.join(SENTINEL_CONFIG_FILE);
            if !path.exists() {
                std::fs::write(&path, config).map_err(Error::Setup)?;
            }
            // The configuration file comes first, as redis-server takes it.
            cmd.arg(path).arg("--sentinel");
        }
        cmd.arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1", "--daemonize", "no", "--save", ""])
            .arg("--dir")
            .arg(dir)
            .arg("--logfile")
            .arg(dir.join(LOG_FILE));
        if self.options.aof {
            cmd.args(["--appendonly", "yes", "--appendfsync", "always"]);
        } else {
            cmd.args(["--appendonly", "no"]);
        }
        if let Some(pw) = &self.options.password {
            cmd.arg("--requirepass").arg(pw);
        }
        cmd.args(&self.options.args)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(output)
            .stderr(output_err);
        let mut child = cmd.spawn().map_err(|source| match source.kind() {
            io::ErrorKind::NotFound | io::ErrorKind::PermissionDenied => Error::NotInstalled {
                binary: self.binary.clone(),
                source,
            },
            _ => Error::Spawn {
                binary: self.binary.clone(),
                source,
            },
        })?;

        let timeout = self.options.startup_timeout;
        let deadline = Instant::now() + timeout;
        loop {
            match child.try_wait() {
                Ok(Some(status)) => {
                    let mut output = read_from(&dir.join(LOG_FILE), log_start);
                    output.push_str(&read_from(&dir.join(OUTPUT_FILE), output_start));
                    let log_tail = self.log_tail();
                    return Err(if output.contains("Address already in use") {
                        Error::PortInUse {
                            port: self.port,
                            log_tail,
                        }
                    } else {
                        Error::Exited {
                            port: self.port,
                            status,
                            log_tail,
                        }
                    });
                }
                Ok(None) if Instant::now() >= deadline => {
                    let _ = kill_and_reap(&mut child);
                    return Err(Error::Timeout {
                        port: self.port,
                        timeout,
                        log_tail: self.log_tail(),
                    });
                }
                Ok(None) => {}
                Err(source) => {
                    let _ = kill_and_reap(&mut child);
                    return Err(self.io(source));
                }
            }
            if self.answering_pid() == Some(child.id()) {
                return Ok(child);
            }
            std::thread::sleep(POLL);
        }
    }

    /// The pid of the server answering `PING` on our port, if one does.
    fn answering_pid(&self) -> Option<u32> {
        let mut conn = self.connect_with(PROBE_TIMEOUT).ok()?;
        // `-LOADING` while an AOF is replayed: not ready yet.
        if conn.call(["PING"]).ok()? != Reply::Simple("PONG".into()) {
            return None;
        }
        let info = conn.call(["INFO", "server"]).ok()?;
        info.as_str()?
            .lines()
            .find_map(|line| line.strip_prefix("process_id:"))
            .and_then(|pid| pid.trim().parse().ok())
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.lock().take() {
            let _ = kill_and_reap(&mut child);
        }
        // `self.dir` (TempDir) then removes the directory, ignoring errors.
    }
}

/// A loopback port that was free a moment ago (bind port 0, read it, release it).
fn free_port() -> io::Result<u16> {
    loop {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        let port = listener.local_addr()?.port();
        if port != DEFAULT_REDIS_PORT {
            return Ok(port);
        }
    }
}

/// Forgets a child that has exited (and reaps it).
fn reap(child: &mut Option<Child>) {
    if let Some(c) = child {
        if !matches!(c.try_wait(), Ok(None)) {
            *child = None;
        }
    }
}

fn kill_and_reap(child: &mut Child) -> io::Result<()> {
    match child.kill() {
        // InvalidInput: it had already exited.
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::InvalidInput => {}
        Err(e) => return Err(e),
    }
    child.wait().map(drop)
}

/// Waits up to `timeout` for the child to exit; `true` if it did.
fn wait_exit(child: &mut Child, timeout: Duration) -> io::Result<bool> {
    let deadline = Instant::now() + timeout;
    loop {
        if child.try_wait()?.is_some() {
            return Ok(true);
        }
        if Instant::now() >= deadline {
            return Ok(false);
        }
        std::thread::sleep(POLL);
    }
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

/// A file's content from byte `start` on (lossy UTF-8); empty if unreadable.
fn read_from(path: &Path, start: u64) -> String {
    let mut bytes = Vec::new();
    if let Ok(mut file) = File::open(path) {
        if file.seek(SeekFrom::Start(start)).is_ok() {
            let _ = file.read_to_end(&mut bytes);
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The last `n` lines of a file (read from at most its last 64 KiB); empty if unreadable.
fn tail_lines(path: &Path, n: usize) -> String {
    const MAX: u64 = 64 * 1024;
    let Ok(mut file) = File::open(path) else {
        return String::new();
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    if file.seek(SeekFrom::Start(len.saturating_sub(MAX))).is_err() {
        return String::new();
    }
    let mut bytes = Vec::new();
    if file.read_to_end(&mut bytes).is_err() {
        return String::new();
    }
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.lines().collect();
    let mut out = lines[lines.len().saturating_sub(n)..].join("\n");
    if !out.is_empty() {
        out.push('\n');
    }
    out
}

/// Percent-encodes everything but RFC 3986 unreserved characters (for the password in a URL).
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_encodes_reserved_characters() {
        assert_eq!(percent_encode("a-b_c.d~9"), "a-b_c.d~9");
        assert_eq!(percent_encode("p@ss:w/rd%"), "p%40ss%3Aw%2Frd%25");
    }

    #[test]
    fn free_ports_are_never_the_default_redis_port() {
        for _ in 0..100 {
            assert_ne!(free_port().unwrap(), DEFAULT_REDIS_PORT);
        }
    }

    #[test]
    fn tail_keeps_the_last_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let text: String = (0..100).map(|i| format!("line {i}\n")).collect();
        std::fs::write(&path, text).unwrap();
        assert_eq!(tail_lines(&path, 2), "line 98\nline 99\n");
        assert_eq!(tail_lines(&dir.path().join("missing"), 2), "");
    }
}
