//! `leasehold commands list|show|cancel|retry <queue>`: a command queue on Redis, by status.

use std::time::{Duration, SystemTime};

use clap::{Args, Subcommand};
use leasehold::commands::{
    CommandQueue, CommandState, Cursor, Page, QueueError, RedisCommandStore, RedisStoreConfig,
    Status,
};
use leasehold::tokio::TokioRuntime;
use serde_json::json;

use super::output::{ago, fields, table, Report};
use super::{block_on, confirm, host_of, OpsError, RedisArgs};

/// The operator subcommands of `leasehold commands` (without one, it runs the demo).
#[derive(Debug, Subcommand)]
pub enum CommandsOp {
    /// A page of the queue's commands in one status, oldest in it first.
    List {
        /// The queue.
        queue: String,
        /// submitted, running, succeeded, failed or cancelled.
        #[arg(long, default_value = "failed")]
        status: Status,
        /// Commands per page.
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=1000))]
        limit: u32,
        /// Start after this cursor (printed under the previous page).
        #[arg(long, value_name = "CURSOR")]
        after: Option<Cursor>,
        /// The queue's shards (as its workers were configured: `RedisStoreConfig::shards`).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1024))]
        shards: u32,
        /// Where it is.
        #[command(flatten)]
        redis: RedisArgs,
    },
    /// One command: status, parameters, result or error, and its attempts.
    Show {
        /// The queue.
        queue: String,
        /// The command's id.
        id: String,
        /// The queue's shards (as its workers were configured: `RedisStoreConfig::shards`).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1024))]
        shards: u32,
        /// Where it is.
        #[command(flatten)]
        redis: RedisArgs,
    },
    /// Cancels a command that has not ended (its running handler is told to stop).
    Cancel(OneCommand),
    /// Runs a FAILED command again, with a fresh attempt budget.
    Retry(OneCommand),
}

/// The command an action is for, and whether to act without asking.
#[derive(Debug, Args)]
pub struct OneCommand {
    /// The queue.
    queue: String,
    /// The command's id.
    id: String,
    /// Do it without asking.
    #[arg(long)]
    yes: bool,
    /// The queue's shards (as its workers were configured: `RedisStoreConfig::shards`).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1024))]
    shards: u32,
    /// Where it is.
    #[command(flatten)]
    redis: RedisArgs,
}

impl CommandsOp {
    /// Where the queue is.
    pub fn redis(&self) -> &RedisArgs {
        match self {
            Self::List { redis, .. }
            | Self::Show { redis, .. }
            | Self::Cancel(OneCommand { redis, .. })
            | Self::Retry(OneCommand { redis, .. }) => redis,
        }
    }
}

type Queue = CommandQueue<RedisCommandStore, TokioRuntime>;

async fn open(redis: &RedisArgs, queue: &str, shards: u32) -> Result<Queue, OpsError> {
    let config = RedisStoreConfig::new(redis.redis.as_str(), queue)
        .shards(shards)
        .map_err(|error| OpsError::Usage(format!("command queue {queue:?}: {error}")))?;
    let store = RedisCommandStore::connect(config).await.map_err(|error| {
        OpsError::Connect(format!(
            "cannot use Redis at {}: {error}; is redis-server running there, and are the \
                 credentials right? (--redis or LEASEHOLD_REDIS_URL)",
            host_of(&redis.redis)
        ))
    })?;
    Ok(CommandQueue::new(TokioRuntime::current(), store))
}

/// A refusal (unknown id, wrong status) is exit code 1 with the reason; the rest is exit 2.
fn refused(error: QueueError) -> Result<Report, OpsError> {
    match error {
        QueueError::Store(error) => Err(OpsError::Usage(format!("the store failed: {error}"))),
        error => Ok(Report {
            text: format!("refused: {error}"),
            json: json!({ "refused": error.to_string() }),
            failed: true,
        }),
    }
}

/// Runs one operator subcommand.
pub fn run_commands(op: &CommandsOp) -> Result<Report, OpsError> {
    block_on(async {
        match op {
            CommandsOp::List {
                queue,
                status,
                limit,
                after,
                shards,
                redis,
            } => {
                let q = open(redis, queue, *shards).await?;
                let mut page = Page::first(*limit as usize);
                if let Some(cursor) = after {
                    page = page.starting_after(cursor.clone());
                }
                match q.commands(*status, page).await {
                    Ok(listing) => Ok(list_report(*status, &listing.states, listing.next)),
                    Err(error) => refused(error),
                }
            }
            CommandsOp::Show {
                queue,
                id,
                shards,
                redis,
            } => {
                let q = open(redis, queue, *shards).await?;
                match q.command(id).await {
                    Ok(Some(state)) => Ok(show_report(&state)),
                    Ok(None) => refused(QueueError::NotFound(id.clone())),
                    Err(error) => refused(error),
                }
            }
            CommandsOp::Cancel(c) => {
                confirm(
                    &format!("cancel command {:?} of queue {:?}", c.id, c.queue),
                    c.yes,
                )?;
                let q = open(&c.redis, &c.queue, c.shards).await?;
                match q.cancel_command(&c.id).await {
                    Ok(state) => Ok(done_report("cancelled", &state)),
                    Err(error) => refused(error),
                }
            }
            CommandsOp::Retry(c) => {
                confirm(
                    &format!("retry command {:?} of queue {:?}", c.id, c.queue),
                    c.yes,
                )?;
                let q = open(&c.redis, &c.queue, c.shards).await?;
                match q.retry(&c.id).await {
                    Ok(state) => Ok(done_report("retried", &state)),
                    Err(error) => refused(error),
                }
            }
        }
    })?
}

/// How long ago a time in milliseconds since the Unix epoch was.
fn ago_millis(at: u64) -> String {
    let at = SystemTime::UNIX_EPOCH + Duration::from_millis(at);
    SystemTime::now()
        .duration_since(at)
        .map_or_else(|_| "just now".into(), |d| format!("{} ago", ago(d)))
}

fn list_report(status: Status, states: &[CommandState], next: Option<Cursor>) -> Report {
    let mut text = table(
        &["id", "type", "since", "attempts", "error"],
        states.iter().map(|s| {
            vec![
                s.id.clone(),
                s.kind.clone(),
                ago_millis(s.status_changed_at),
                s.attempts.last().map_or(0, |a| a.number).to_string(),
                s.last_error.clone().unwrap_or_default(),
            ]
        }),
    );
    text.push('\n');
    text.push_str(&match &next {
        Some(cursor) => format!("more: --after {cursor}"),
        None => format!("{} {status} listed, no more", states.len()),
    });
    let json = json!({ "status": status, "commands": states, "next": next });
    Report::ok(text, json)
}

fn show_report(state: &CommandState) -> Report {
    let mut rows = vec![
        ("id", state.id.clone()),
        ("type", state.kind.clone()),
        ("status", state.status.to_string()),
        ("since", ago_millis(state.status_changed_at)),
        ("submitted", ago_millis(state.created_at)),
        ("params", state.params.to_string()),
    ];
    if let Some(result) = &state.result {
        rows.push(("result", result.to_string()));
    }
    if let Some(error) = &state.last_error {
        rows.push(("last error", error.clone()));
    }
    if state.retries > 0 {
        rows.push(("retries", state.retries.to_string()));
    }
    let mut text = fields(&rows);
    text.push_str(&table(
        &["attempt", "started", "ended", "outcome", "error"],
        state.attempts.iter().map(|a| {
            vec![
                a.number.to_string(),
                ago_millis(a.started_at),
                a.ended_at.map_or("-".into(), ago_millis),
                format!("{:?}", a.outcome),
                a.error.clone().unwrap_or_default(),
            ]
        }),
    ));
    Report::ok(text, json!(state))
}

fn done_report(what: &str, state: &CommandState) -> Report {
    Report::ok(
        format!("{what} {}: now {}", state.id, state.status),
        json!({ "done": what, "command": state }),
    )
}
