//! The operator commands: look at a stream on Redis (`inspect`, `pending`, `dead list|show`),
//! act on its dead letters (`dead requeue|purge`), through the inspector API, publish to it
//! (`publish`), and follow a command queue (`commands list|show|cancel|retry`).
//!
//! Every command prints a table for people or, with `--json`, one JSON document for scripts.
//! Exit codes: 0 done, 1 the command ran but found a failure (e.g. some selected entries were
//! gone), 2 bad usage or it could not run (no Redis there, no such stream). Destructive commands
//! ask on a terminal and need `--yes` otherwise.

mod commands;
mod output;
mod publish;
mod streams;

use std::io::{BufRead, IsTerminal, Write};

use clap::Args;
use leasehold::redis::{ConnectError, RedisInspector};

pub use commands::{run_commands, CommandsOp};
pub use output::Report;
pub use publish::{run_publish, PublishArgs};
pub use streams::{
    run_dead, run_inspect, run_pending, DeadArgs, DeadCommand, InspectArgs, PendingArgs,
};

/// Where the Redis is.
#[derive(Debug, Clone, Args)]
pub struct RedisArgs {
    /// The Redis URL (`redis://[user:password@]host:port/db`).
    #[arg(long, env = "LEASEHOLD_REDIS_URL", value_name = "URL")]
    pub redis: String,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Why an operator command could not run.
#[derive(Debug, thiserror::Error)]
pub enum OpsError {
    /// Redis could not be reached or refused.
    #[error("{0}")]
    Connect(String),
    /// The inspector refused or failed.
    #[error(transparent)]
    Inspect(#[from] leasehold::core::InspectError),
    /// The arguments do not fit together, or the operator said no.
    #[error("{0}")]
    Usage(String),
}

/// Connects, turning a failure into a message that names the host and what to check (never
/// the password).
pub(crate) async fn connect(redis: &RedisArgs) -> Result<RedisInspector, OpsError> {
    RedisInspector::connect(&redis.redis)
        .await
        .map_err(|error| {
            let host = host_of(&redis.redis);
            let hint = match &error {
                ConnectError::Config(_) => "check the URL (--redis or LEASEHOLD_REDIS_URL)",
                ConnectError::Redis(_) => {
                    "is redis-server running there, and are the credentials right? (--redis or \
                 LEASEHOLD_REDIS_URL)"
                }
                _ => "check --redis or LEASEHOLD_REDIS_URL",
            };
            OpsError::Connect(format!("cannot use Redis at {host}: {error}; {hint}"))
        })
}

/// `host:port` of a Redis URL, without user or password.
pub fn host_of(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split('/').next().unwrap_or(rest);
    authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host)
        .to_owned()
}

/// Asks "`question` [y/N]" on a terminal; without one, only `--yes` goes ahead.
pub(crate) fn confirm(question: &str, yes: bool) -> Result<(), OpsError> {
    if yes {
        return Ok(());
    }
    if !std::io::stdin().is_terminal() {
        return Err(OpsError::Usage(format!(
            "{question}: refusing without --yes (stdin is not a terminal)"
        )));
    }
    eprint!("{question} [y/N] ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(|e| OpsError::Usage(format!("cannot read the answer: {e}")))?;
    if matches!(answer.trim(), "y" | "Y" | "yes") {
        Ok(())
    } else {
        Err(OpsError::Usage("nothing done".into()))
    }
}

/// Runs an operator command on a small tokio runtime of its own.
pub(crate) fn block_on<T>(future: impl std::future::Future<Output = T>) -> Result<T, OpsError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map(|rt| rt.block_on(future))
        .map_err(|e| OpsError::Usage(format!("cannot start the tokio runtime: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_of_a_url_never_carries_its_password() {
        assert_eq!(host_of("redis://127.0.0.1:6379/0"), "127.0.0.1:6379");
        assert_eq!(host_of("redis://:hunter2@db:7000/"), "db:7000");
        assert_eq!(
            host_of("rediss://user:pw@cache.example:6380"),
            "cache.example:6380"
        );
    }
}
