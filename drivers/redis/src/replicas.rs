//! `wait_replicas`: a write counts only once enough replicas hold it.
//!
//! Redis replicates asynchronously: a master acknowledges a write before any replica has it,
//! and a failover promotes a replica that may lack the last writes. `WAIT n timeout`, sent on
//! the connection that wrote, right after the write (in the same pipeline, so no extra round
//! trip is spent sending it), answers how many replicas acknowledged every write of that
//! connection so far, once `n` did or `timeout` passed. Fewer than `n` is an error here, a
//! transient one: the write itself has happened on the master and stays there, but it may be
//! lost by a failover, so the operation is reported failed and the engine retries or gives
//! the lease up, as after any failed write.

use std::time::Duration;

use redis::{Cmd, FromRedisValue, Script, Value};

use leasehold_core::BackendResult;

use crate::conn::Connection;
use crate::error::error;
use crate::error::RedisConfigError;

/// How many replicas must acknowledge each write, and how long to wait for them; see
/// [`RedisConfig::wait_replicas`](crate::RedisConfig::wait_replicas).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitReplicas {
    replicas: u32,
    timeout: Duration,
}

impl WaitReplicas {
    /// At least `replicas` replicas within `timeout` ([`validate`](Self::validate) checks it).
    pub fn new(replicas: u32, timeout: Duration) -> Self {
        Self { replicas, timeout }
    }

    /// How many replicas must acknowledge a write.
    pub fn replicas(&self) -> u32 {
        self.replicas
    }

    /// How long a write waits for them.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// At least one replica, and a timeout of at least 1 ms and below `command_timeout` (the
    /// bound on the whole reply, `WAIT` included: at or above it, a shortfall would surface as
    /// a timeout instead of saying how many replicas answered).
    ///
    /// # Errors
    ///
    /// [`RedisConfigError::WaitReplicas`] saying which bound is broken.
    pub fn validate(&self, command_timeout: Duration) -> Result<(), RedisConfigError> {
        let bad = |reason: &'static str| RedisConfigError::WaitReplicas {
            replicas: self.replicas,
            timeout: self.timeout,
            reason,
        };
        if self.replicas == 0 {
            return Err(bad("at least one replica must be waited for"));
        }
        if self.timeout < Duration::from_millis(1) {
            return Err(bad("the timeout must be at least 1 ms"));
        }
        if self.timeout >= command_timeout {
            return Err(bad("the timeout must be below command_timeout"));
        }
        Ok(())
    }

    /// The `WAIT` command.
    pub(crate) fn cmd(&self) -> Cmd {
        let mut cmd = redis::cmd("WAIT");
        cmd.arg(self.replicas)
            .arg(u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX));
        cmd
    }

    /// `acked`, `WAIT`'s reply, as an error unless it counts enough replicas.
    pub(crate) fn check(&self, acked: &Value) -> redis::RedisResult<()> {
        match acked {
            Value::Int(n) if *n >= i64::from(self.replicas) => Ok(()),
            Value::Int(n) => Err(redis::make_extension_error(
                "NOREPLICAS".into(),
                Some(format!(
                    "the write was acknowledged by {n} of the {} replicas asked for within \
                     {:?}; a failover now could lose it",
                    self.replicas, self.timeout
                )),
            )),
            other => Err(redis::RedisError::from((
                redis::ErrorKind::Parse,
                "unexpected reply to WAIT",
                format!("{other:?}"),
            ))),
        }
    }
}

/// An `EVALSHA` of `script` over `keys`; append the script's arguments to it.
pub(crate) fn evalsha_cmd<K: redis::ToRedisArgs>(script: &Script, keys: &[K]) -> Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.get_hash()).arg(keys.len()).arg(keys);
    cmd
}

impl Connection {
    /// Runs the write `cmd` and, with `wait`, `WAIT` right after it on the same connection,
    /// in one pipeline (on a Redis Cluster routed to the master serving `key`'s slot, where
    /// the write goes: a keyless `WAIT` alone would be sent to every master). When `cmd` is an
    /// `EVALSHA` of `script` that the server does not know (`NOSCRIPT`: nothing ran), the
    /// script is loaded and the call made again.
    ///
    /// # Errors
    ///
    /// The write's error, or a transient `NOREPLICAS` error when fewer replicas than asked for
    /// acknowledged it in time (the write has happened on the master all the same).
    pub(crate) async fn write<T: FromRedisValue>(
        &self,
        cmd: &Cmd,
        key: &[u8],
        script: Option<&Script>,
        wait: Option<WaitReplicas>,
    ) -> redis::RedisResult<T> {
        let value = match self.write_once(cmd, key, wait).await {
            Err(e) if e.code() == Some("NOSCRIPT") && script.is_some() => {
                if let Some(script) = script {
                    script.load_async(&mut self.clone()).await?;
                }
                self.write_once(cmd, key, wait).await?
            }
            other => other?,
        };
        redis::from_redis_value(value).map_err(Into::into)
    }

    /// Loads `scripts` (each with its name, for the error), so that no write meets
    /// `NOSCRIPT`: such a write runs nothing, yet with `wait_replicas` its `WAIT` in the same
    /// pipeline still blocks, on Redis 7.0 until the replica's next once-a-second
    /// acknowledgement. Every connecting type calls it once, at connect.
    pub(crate) async fn load_scripts(&self, scripts: &[(&str, &Script)]) -> BackendResult<()> {
        for (name, script) in scripts {
            script
                .load_async(&mut self.clone())
                .await
                .map_err(|e| error(&format!("load the {name} script"), e))?;
        }
        Ok(())
    }

    /// `WAIT` alone, for the writes this connection made (on a cluster, on its link to the
    /// master serving `key`'s slot: sent as a plain command, a keyless `WAIT` would go to
    /// every master).
    pub(crate) async fn wait_for_replicas(
        &self,
        wait: WaitReplicas,
        key: &[u8],
    ) -> redis::RedisResult<()> {
        let mut pipe = redis::pipe();
        pipe.add_command(wait.cmd());
        let acked = self
            .pipeline_at(&pipe, key)
            .await?
            .pop()
            .unwrap_or(Value::Nil);
        wait.check(&acked.extract_error()?)
    }

    async fn write_once(
        &self,
        cmd: &Cmd,
        key: &[u8],
        wait: Option<WaitReplicas>,
    ) -> redis::RedisResult<Value> {
        let Some(wait) = wait else {
            return cmd.query_async(&mut self.clone()).await;
        };
        let mut pipe = redis::pipe();
        pipe.add_command(cmd.clone()).add_command(wait.cmd());
        let values = self.pipeline_at(&pipe, key).await?;
        let [reply, acked]: [Value; 2] = values.try_into().map_err(|_| {
            redis::RedisError::from((
                redis::ErrorKind::Parse,
                "a write and its WAIT: wrong number of replies",
            ))
        })?;
        let reply = reply.extract_error()?;
        wait.check(&acked.extract_error()?)?;
        Ok(reply)
    }
}
