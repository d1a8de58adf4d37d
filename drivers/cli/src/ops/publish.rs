//! `leasehold publish`: messages onto a stream on Redis, at once, delayed, or deduplicated.

use std::io::BufRead;
use std::time::Duration;

use clap::Args;
use leasehold::redis::{PublisherConfig, RedisPublisher};
use leasehold::{Producer, PublishOptions, Raw};
use serde_json::json;

use super::output::Report;
use super::{block_on, host_of, OpsError, RedisArgs};
use crate::args::parse_duration;

/// Messages per round trip when they come from standard input.
const BATCH: usize = 1000;

/// Flags of `leasehold publish`.
#[derive(Debug, Args)]
pub struct PublishArgs {
    /// The stream.
    #[arg(long)]
    pub stream: String,
    /// Not deliverable before this long has passed on the Redis server's clock (e.g. 30s, 2h).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub delay: Option<Duration>,
    /// Deduplication key: while a message published with it is within `--ttl`, publishing
    /// again enqueues nothing and prints the first message's id. One message only.
    #[arg(long, requires = "ttl", value_name = "KEY")]
    pub dedupe: Option<String>,
    /// How long the deduplication key is remembered (e.g. 1h).
    #[arg(long, requires = "dedupe", value_parser = parse_duration, value_name = "DURATION")]
    pub ttl: Option<Duration>,
    /// The entry field holding the payload (the workers' `RedisConfig::field`).
    #[arg(long, default_value = "data")]
    pub field: String,
    /// The message, as JSON. Without it, JSON lines from standard input, one message each.
    pub message: Option<String>,
    /// Where it is.
    #[command(flatten)]
    pub redis: RedisArgs,
}

/// Checks every message is JSON, then publishes them (from standard input in batches of
/// a thousand, one round trip each) and reports their ids in order.
pub fn run_publish(args: &PublishArgs) -> Result<Report, OpsError> {
    let messages = match &args.message {
        Some(message) => vec![json_message(message, None)?],
        None => {
            let stdin = std::io::stdin();
            read_lines(stdin.lock())?
        }
    };
    if messages.is_empty() {
        return Err(OpsError::Usage(
            "no message: give one as an argument, or JSON lines on standard input".into(),
        ));
    }
    if args.dedupe.is_some() && messages.len() > 1 {
        return Err(OpsError::Usage(format!(
            "--dedupe takes one message, got {}: the others would all be duplicates of the first",
            messages.len()
        )));
    }
    let mut options = PublishOptions::new();
    if let Some(delay) = args.delay {
        options = options.delay(delay);
    }
    if let (Some(key), Some(ttl)) = (&args.dedupe, args.ttl) {
        options = options.dedupe(key.clone(), ttl);
    }
    block_on(async {
        let config = PublisherConfig::new(args.redis.redis.as_str(), args.stream.as_str())
            .field(args.field.as_str());
        let publisher = RedisPublisher::connect(config).await.map_err(|error| {
            OpsError::Connect(format!(
                "cannot use Redis at {}: {error}; is redis-server running there, and are the \
                 credentials right? (--redis or LEASEHOLD_REDIS_URL)",
                host_of(&args.redis.redis)
            ))
        })?;
        let producer = Producer::with_codec(publisher, Raw);
        let mut published = Vec::with_capacity(messages.len());
        for chunk in messages.chunks(BATCH) {
            if args.delay.is_none() && args.dedupe.is_none() {
                let ids = producer.publish_batch(chunk).await.map_err(failed)?;
                published.extend(ids.into_iter().map(|id| (id.to_string(), false)));
            } else {
                // Delayed ones one by one: each gets its own due time from the server.
                for message in chunk {
                    let p = producer
                        .publish_with(message, options.clone())
                        .await
                        .map_err(failed)?;
                    published.push((p.id.to_string(), p.duplicate));
                }
            }
        }
        Ok(report(&published))
    })?
}

fn failed(error: leasehold::PublishError) -> OpsError {
    OpsError::Usage(format!("publish failed: {error}"))
}

/// The ids, one per line (a duplicate says so), or as JSON.
fn report(published: &[(String, bool)]) -> Report {
    let text = published
        .iter()
        .map(|(id, duplicate)| match duplicate {
            false => id.clone(),
            true => format!("{id} (duplicate: nothing enqueued)"),
        })
        .collect::<Vec<_>>()
        .join("\n");
    let json = json!(published
        .iter()
        .map(|(id, duplicate)| json!({ "id": id, "duplicate": duplicate }))
        .collect::<Vec<_>>());
    Report::ok(text, json)
}

/// Each non-blank line is one JSON message.
fn read_lines(input: impl BufRead) -> Result<Vec<Vec<u8>>, OpsError> {
    let mut messages = Vec::new();
    for (n, line) in input.lines().enumerate() {
        let line = line.map_err(|e| OpsError::Usage(format!("cannot read standard input: {e}")))?;
        if !line.trim().is_empty() {
            messages.push(json_message(&line, Some(n + 1))?);
        }
    }
    Ok(messages)
}

/// The message's bytes, once it parses as JSON.
fn json_message(text: &str, line: Option<usize>) -> Result<Vec<u8>, OpsError> {
    let text = text.trim();
    serde_json::from_str::<serde_json::Value>(text).map_err(|e| {
        let at = line.map_or(String::new(), |n| format!(" on line {n}"));
        OpsError::Usage(format!("the message{at} is not JSON: {e}"))
    })?;
    Ok(text.as_bytes().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_must_be_json_and_blank_ones_are_skipped() {
        let ok = read_lines(&b"{\"a\":1}\n\n  [2]  \n"[..]).unwrap();
        assert_eq!(ok, [b"{\"a\":1}".to_vec(), b"[2]".to_vec()]);
        let error = read_lines(&b"{\"a\":1}\nnot json\n"[..]).unwrap_err();
        assert!(error.to_string().contains("line 2"), "{error}");
    }
}
