//! `leasehold inspect`, `leasehold pending`, `leasehold dead …`: a stream, who holds what, and
//! its dead letters.

use std::time::Duration;

use clap::{Args, Subcommand};
use leasehold::core::{
    InspectError, Inspector, MessageId, Page, PendingQuery, QueueOverview, Selection,
};
use serde_json::json;

use super::output::{ago, epoch_millis, fields, millis, payload_text, since, table, Report};
use super::{block_on, confirm, connect, OpsError, RedisArgs};
use crate::args::parse_duration;

/// Flags of `leasehold inspect`.
#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The stream, or a sharded queue (streams `{queue:0}`, `{queue:1}`, …): its totals and
    /// shards.
    pub stream: String,
    /// Where it is.
    #[command(flatten)]
    pub redis: RedisArgs,
}

/// Flags of `leasehold pending`.
#[derive(Debug, Args)]
pub struct PendingArgs {
    /// The stream.
    pub stream: String,
    /// The consumer group (default: the stream's only one).
    #[arg(long)]
    pub group: Option<String>,
    /// Only entries held by this consumer.
    #[arg(long)]
    pub consumer: Option<String>,
    /// Only entries not renewed for this long (e.g. 5m).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub older_than: Option<Duration>,
    /// Entries per page.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub limit: u32,
    /// Start after this id (the last id of the previous page).
    #[arg(long, value_name = "ID")]
    pub after: Option<String>,
    /// Where it is.
    #[command(flatten)]
    pub redis: RedisArgs,
}

/// Flags of `leasehold dead`.
#[derive(Debug, Args)]
pub struct DeadArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: DeadCommand,
}

/// The subcommands of `leasehold dead`.
#[derive(Debug, Subcommand)]
pub enum DeadCommand {
    /// A page of the dead letters: id, reason, delivery count, when.
    List {
        /// The stream.
        stream: String,
        /// Entries per page.
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=10_000))]
        limit: u32,
        /// Start after this id (the last id of the previous page).
        #[arg(long, value_name = "ID")]
        after: Option<String>,
        /// Where it is.
        #[command(flatten)]
        redis: RedisArgs,
    },
    /// One dead letter with its payload (pretty JSON when it is JSON, hex when it is binary).
    Show {
        /// The stream.
        stream: String,
        /// The dead letter's id.
        id: String,
        /// Where it is.
        #[command(flatten)]
        redis: RedisArgs,
    },
    /// Puts dead letters back into the stream as fresh messages (delivery count 1).
    Requeue {
        /// The stream.
        stream: String,
        /// The dead letters' ids.
        ids: Vec<String>,
        /// Every dead letter.
        #[arg(long, conflicts_with = "ids")]
        all: bool,
        /// Do not ask.
        #[arg(long)]
        yes: bool,
        /// Where it is.
        #[command(flatten)]
        redis: RedisArgs,
    },
    /// Deletes dead letters.
    Purge {
        /// The stream.
        stream: String,
        /// The dead letters' ids.
        ids: Vec<String>,
        /// Every dead letter.
        #[arg(long, conflicts_with_all = ["ids", "older_than"])]
        all: bool,
        /// Those dead-lettered at least this long ago (e.g. 7d).
        #[arg(long, value_parser = parse_duration, value_name = "DURATION", conflicts_with = "ids")]
        older_than: Option<Duration>,
        /// Do not ask.
        #[arg(long)]
        yes: bool,
        /// Where it is.
        #[command(flatten)]
        redis: RedisArgs,
    },
}

impl DeadCommand {
    /// The connection flags.
    pub fn redis(&self) -> &RedisArgs {
        match self {
            Self::List { redis, .. }
            | Self::Show { redis, .. }
            | Self::Requeue { redis, .. }
            | Self::Purge { redis, .. } => redis,
        }
    }
}

fn page(limit: u32, after: Option<&String>) -> Page {
    Page::first(limit as usize).with_after(after.map(|id| MessageId::from(id.as_str())))
}

/// `leasehold inspect <stream>`.
pub fn run_inspect(args: &InspectArgs) -> Result<Report, OpsError> {
    block_on(async {
        let inspector = connect(&args.redis).await?;
        let o = match inspector.overview(&args.stream).await {
            Ok(o) => o,
            // Not a stream: perhaps a sharded queue of that name.
            Err(InspectError::NoSuchStream(name)) => {
                return match inspector.queue(&args.stream).await? {
                    Some(queue) => Ok(queue_report(&queue)),
                    None => Err(InspectError::NoSuchStream(name).into()),
                };
            }
            Err(error) => return Err(error.into()),
        };
        let mut text = fields(&[
            ("stream", o.stream.clone()),
            ("length", o.length.to_string()),
            ("dead letters", o.dead_letters.to_string()),
            (
                "delayed",
                match o.delayed.next_due {
                    Some(next) => format!("{}, the next due in {}", o.delayed.len, ago(next)),
                    None => "0".into(),
                },
            ),
            ("groups", o.groups.len().to_string()),
        ]);
        for g in &o.groups {
            text.push('\n');
            text.push_str(&fields(&[
                ("group", g.name.clone()),
                ("lag", g.lag.map_or("unknown".into(), |n| n.to_string())),
                ("pending", g.pending.to_string()),
                (
                    "oldest pending",
                    g.oldest_pending_age
                        .map_or("-".into(), |d| format!("appended {} ago", ago(d))),
                ),
            ]));
            text.push_str(&table(
                &["consumer", "pending", "idle"],
                g.consumers
                    .iter()
                    .map(|c| vec![c.name.clone(), c.pending.to_string(), ago(c.idle)]),
            ));
            text.push('\n');
        }
        let groups: Vec<_> = o
            .groups
            .iter()
            .map(|g| {
                json!({
                    "name": g.name,
                    "lag": g.lag,
                    "pending": g.pending,
                    "oldest_pending_age_ms": g.oldest_pending_age.map(millis),
                    "consumers": g.consumers.iter().map(|c| json!({
                        "name": c.name, "pending": c.pending, "idle_ms": millis(c.idle),
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        let json = json!({
            "stream": o.stream, "length": o.length, "dead_letters": o.dead_letters,
            "delayed": o.delayed.len, "next_due_ms": o.delayed.next_due.map(millis),
            "groups": groups,
        });
        Ok(Report::ok(text, json))
    })?
}

fn delayed_text(len: u64, next_due: Option<Duration>) -> String {
    match next_due {
        Some(next) => format!("{len}, the next due in {}", ago(next)),
        None => len.to_string(),
    }
}

fn lag_text(lag: Option<u64>) -> String {
    lag.map_or("unknown".into(), |n| n.to_string())
}

/// `leasehold inspect <queue>` of a sharded queue: its totals, its groups over the shards, and
/// a row per shard.
fn queue_report(q: &QueueOverview) -> Report {
    let mut text = fields(&[
        ("queue", q.queue.clone()),
        ("shards", q.shards.len().to_string()),
        ("length", q.length.to_string()),
        ("pending", q.pending.to_string()),
        ("lag", lag_text(q.lag)),
        ("dead letters", q.dead_letters.to_string()),
        ("delayed", delayed_text(q.delayed.len, q.delayed.next_due)),
        (
            "oldest pending",
            q.oldest_pending_age
                .map_or("-".into(), |d| format!("appended {} ago", ago(d))),
        ),
    ]);
    text.push('\n');
    text.push_str(&table(
        &["group", "shards", "lag", "pending", "consumers"],
        q.groups.iter().map(|g| {
            vec![
                g.name.clone(),
                g.shards.to_string(),
                lag_text(g.lag),
                g.pending.to_string(),
                g.consumers.to_string(),
            ]
        }),
    ));
    text.push_str("\n\n");
    text.push_str(&table(
        &[
            "shard",
            "stream",
            "length",
            "pending",
            "lag",
            "dead letters",
            "delayed",
        ],
        q.shards.iter().map(|(i, o)| {
            let pending: u64 = o.groups.iter().map(|g| g.pending).sum();
            let lag = o
                .groups
                .iter()
                .try_fold(0u64, |sum, g| g.lag.map(|lag| sum + lag));
            vec![
                i.to_string(),
                o.stream.clone(),
                o.length.to_string(),
                pending.to_string(),
                lag_text(lag),
                o.dead_letters.to_string(),
                o.delayed.len.to_string(),
            ]
        }),
    ));
    let json = json!({
        "queue": q.queue,
        "length": q.length,
        "pending": q.pending,
        "lag": q.lag,
        "dead_letters": q.dead_letters,
        "delayed": q.delayed.len,
        "next_due_ms": q.delayed.next_due.map(millis),
        "oldest_pending_age_ms": q.oldest_pending_age.map(millis),
        "groups": q.groups.iter().map(|g| json!({
            "name": g.name, "shards": g.shards, "lag": g.lag, "pending": g.pending,
            "consumers": g.consumers,
            "oldest_pending_age_ms": g.oldest_pending_age.map(millis),
        })).collect::<Vec<_>>(),
        "shards": q.shards.iter().map(|(i, o)| json!({
            "shard": i,
            "stream": o.stream,
            "length": o.length,
            "dead_letters": o.dead_letters,
            "delayed": o.delayed.len,
            "groups": o.groups.iter().map(|g| json!({
                "name": g.name, "lag": g.lag, "pending": g.pending,
                "oldest_pending_age_ms": g.oldest_pending_age.map(millis),
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    });
    Report::ok(text, json)
}

/// `leasehold pending <stream>`.
pub fn run_pending(args: &PendingArgs) -> Result<Report, OpsError> {
    block_on(async {
        let inspector = connect(&args.redis).await?;
        let query = PendingQuery::new(page(args.limit, args.after.as_ref()))
            .with_consumer(args.consumer.clone())
            .with_min_idle(args.older_than);
        let listing = inspector
            .pending(&args.stream, args.group.as_deref(), &query)
            .await?;
        let mut text = table(
            &["id", "owner", "idle", "deliveries"],
            listing.entries.iter().map(|e| {
                vec![
                    e.id.to_string(),
                    e.owner.clone(),
                    ago(e.idle),
                    e.delivery_count.to_string(),
                ]
            }),
        );
        let next = listing.next.as_ref().and_then(|p| p.after.as_ref());
        if let Some(after) = next {
            text.push_str(&format!("\nmore: --after {after}"));
        }
        let json = json!({
            "entries": listing.entries.iter().map(|e| json!({
                "id": e.id.as_str(), "owner": e.owner, "idle_ms": millis(e.idle),
                "delivery_count": e.delivery_count,
            })).collect::<Vec<_>>(),
            "next_after": next.map(MessageId::as_str),
        });
        Ok(Report::ok(text, json))
    })?
}

/// `leasehold dead …`.
pub fn run_dead(command: &DeadCommand) -> Result<Report, OpsError> {
    block_on(async {
        let inspector = connect(command.redis()).await?;
        match command {
            DeadCommand::List {
                stream,
                limit,
                after,
                ..
            } => {
                let listing = inspector
                    .dead_letters(stream, &page(*limit, after.as_ref()), false)
                    .await?;
                let mut text = table(
                    &["id", "original id", "reason", "deliveries", "dead-lettered"],
                    listing.entries.iter().map(|e| {
                        vec![
                            e.id.to_string(),
                            e.original_id.to_string(),
                            e.reason.clone(),
                            e.delivery_count.to_string(),
                            since(e.at),
                        ]
                    }),
                );
                let next = listing.next.as_ref().and_then(|p| p.after.as_ref());
                if let Some(after) = next {
                    text.push_str(&format!("\nmore: --after {after}"));
                }
                let json = json!({
                    "entries": listing.entries.iter().map(|e| json!({
                        "id": e.id.as_str(), "original_id": e.original_id.as_str(),
                        "reason": e.reason, "delivery_count": e.delivery_count,
                        "at_ms": epoch_millis(e.at),
                    })).collect::<Vec<_>>(),
                    "next_after": next.map(MessageId::as_str),
                });
                Ok(Report::ok(text, json))
            }
            DeadCommand::Show { stream, id, .. } => {
                let id = MessageId::from(id.as_str());
                let Some(e) = inspector.dead_letter(stream, &id).await? else {
                    return Err(OpsError::Usage(format!(
                        "{id} is not a dead letter of {stream:?}"
                    )));
                };
                let payload = e.payload.as_deref().unwrap_or_default();
                let text = fields(&[
                    ("id", e.id.to_string()),
                    ("original id", e.original_id.to_string()),
                    ("reason", e.reason.clone()),
                    ("deliveries", e.delivery_count.to_string()),
                    ("dead-lettered", since(e.at)),
                    ("payload", format!("{} bytes", payload.len())),
                ]) + &payload_text(payload);
                let json = json!({
                    "id": e.id.as_str(), "original_id": e.original_id.as_str(),
                    "reason": e.reason, "delivery_count": e.delivery_count,
                    "at_ms": epoch_millis(e.at),
                    "payload": String::from_utf8_lossy(payload),
                });
                Ok(Report::ok(text, json))
            }
            DeadCommand::Requeue {
                stream,
                ids,
                all,
                yes,
                ..
            } => {
                let which = selection(ids, *all, None)?;
                confirm(&format!("requeue {} of {stream:?}", describe(&which)), *yes)?;
                let done = inspector.requeue(stream, &which).await?;
                let mut text = table(
                    &["dead letter", "requeued as"],
                    done.moved
                        .iter()
                        .map(|(from, to)| vec![from.to_string(), to.to_string()]),
                );
                text.push_str(&format!("\nrequeued {}", done.moved.len()));
                if !done.gone.is_empty() {
                    text.push_str(&gone(&done.gone));
                }
                let json = json!({
                    "requeued": done.moved.iter().map(|(from, to)| json!({
                        "dead_letter": from.as_str(), "id": to.as_str(),
                    })).collect::<Vec<_>>(),
                    "gone": done.gone.iter().map(MessageId::as_str).collect::<Vec<_>>(),
                });
                Ok(Report {
                    text,
                    json,
                    failed: !done.gone.is_empty(),
                })
            }
            DeadCommand::Purge {
                stream,
                ids,
                all,
                older_than,
                yes,
                ..
            } => {
                let which = selection(ids, *all, *older_than)?;
                confirm(&format!("delete {} of {stream:?}", describe(&which)), *yes)?;
                let done = inspector.purge_dead(stream, &which).await?;
                let mut text = format!("deleted {}", done.deleted.len());
                if !done.gone.is_empty() {
                    text.push_str(&gone(&done.gone));
                }
                let json = json!({
                    "deleted": done.deleted.iter().map(MessageId::as_str).collect::<Vec<_>>(),
                    "gone": done.gone.iter().map(MessageId::as_str).collect::<Vec<_>>(),
                });
                Ok(Report {
                    text,
                    json,
                    failed: !done.gone.is_empty(),
                })
            }
        }
    })?
}

/// What the flags select; nothing selected is a usage error.
fn selection(
    ids: &[String],
    all: bool,
    older_than: Option<Duration>,
) -> Result<Selection, OpsError> {
    match (ids.is_empty(), all, older_than) {
        (false, _, _) => Ok(Selection::Ids(
            ids.iter().map(|id| MessageId::from(id.as_str())).collect(),
        )),
        (true, true, _) => Ok(Selection::All),
        (true, false, Some(age)) => Ok(Selection::OlderThan(age)),
        (true, false, None) => Err(OpsError::Usage(
            "name the dead letters (ids), or pass --all (or --older-than for purge)".into(),
        )),
    }
}

fn describe(which: &Selection) -> String {
    match which {
        Selection::Ids(ids) => format!("{} dead letter(s)", ids.len()),
        Selection::All => "every dead letter".into(),
        Selection::OlderThan(age) => format!("the dead letters older than {}", ago(*age)),
    }
}

/// The ids an action found no dead letters (any more): moved or purged before (a repeat of an
/// interrupted action), or meanwhile.
fn gone(ids: &[MessageId]) -> String {
    let ids: Vec<&str> = ids.iter().map(MessageId::as_str).collect();
    format!(
        "; not dead letters (any more: requeued or purged before, or meanwhile): {}",
        ids.join(", ")
    )
}
