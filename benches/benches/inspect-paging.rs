//! Paging the inspector over a large pending list and dead-letter stream: the time of a page
//! must not grow with its position (no call scans from the start). On a throwaway
//! redis-server, and on a memory stream for comparison.
//!
//! Run: `cargo bench -p leasehold-benches --bench inspect-paging -- [--entries 100000]
//! [--limit 100] [--rounds 3]`. Prints, per listing, the median time of the pages around each
//! position (first, 10 %, 50 %, 90 %, last; ten pages either side, pooled over the rounds), and
//! the last position's time as a ratio of the first's (flat: about 1).
#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::time::{Duration, Instant};

use leasehold_core::{Inspector, Listing, Page, PendingQuery};
use leasehold_memory::{MemoryInspector, MemoryStream, StreamConfig};
use leasehold_redis::RedisInspector;
use leasehold_redis_harness::RedisServer;

/// Page positions reported, as fractions of the listing.
const POSITIONS: [(&str, f64); 5] = [
    ("first", 0.0),
    ("10 %", 0.1),
    ("50 %", 0.5),
    ("90 %", 0.9),
    ("last", 1.0),
];

struct Args {
    entries: usize,
    limit: usize,
    rounds: usize,
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        entries: 100_000,
        limit: 100,
        rounds: 3,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = |name: &str| -> Result<usize, String> {
            it.next()
                .and_then(|v| v.parse().ok())
                .filter(|&n| n > 0)
                .ok_or_else(|| format!("{name} takes a positive number"))
        };
        match flag.as_str() {
            "--entries" => args.entries = value("--entries")?,
            "--limit" => args.limit = value("--limit")?,
            "--rounds" => args.rounds = value("--rounds")?,
            // cargo bench passes --bench; anything else is a mistake.
            "--bench" => {}
            other => {
                return Err(format!(
                    "unknown flag {other:?} (--entries, --limit, --rounds)"
                ))
            }
        }
    }
    Ok(args)
}

/// Walks a listing page by page; returns the time of each page.
async fn walk<T>(
    limit: usize,
    mut page: impl AsyncFnMut(Page) -> Listing<T>,
    expected: usize,
) -> Vec<Duration> {
    let mut times = Vec::new();
    let mut next = Some(Page::first(limit));
    let mut seen = 0;
    while let Some(p) = next {
        let started = Instant::now();
        let listing = page(p).await;
        let took = started.elapsed();
        // The closing page that only finds the end is no page of entries.
        if !listing.entries.is_empty() {
            times.push(took);
        }
        seen += listing.entries.len();
        next = listing.next;
    }
    assert_eq!(seen, expected, "the walk saw every entry once");
    times
}

/// Pages either side of a position that its figure takes the median of.
const WINDOW: usize = 10;

/// The time at each reported position: the median of the pages around it, pooled over the
/// rounds.
fn positions(rounds: &[Vec<Duration>]) -> Vec<Duration> {
    POSITIONS
        .iter()
        .map(|(_, at)| {
            let mut around: Vec<Duration> = rounds
                .iter()
                .flat_map(|times| {
                    let i = ((times.len() - 1) as f64 * at).round() as usize;
                    let (from, to) = (i.saturating_sub(WINDOW), (i + WINDOW + 1).min(times.len()));
                    times[from..to].iter().copied()
                })
                .collect();
            around.sort();
            around[around.len() / 2]
        })
        .collect()
}

fn row(name: &str, rounds: &[Vec<Duration>]) {
    let at = positions(rounds);
    let cells: Vec<String> = at
        .iter()
        .map(|d| format!("{:.2}", d.as_secs_f64() * 1e3))
        .collect();
    let ratio = at[at.len() - 1].as_secs_f64() / at[0].as_secs_f64();
    println!("| {name} | {} | {ratio:.2} |", cells.join(" | "));
}

fn fill_memory(n: usize) -> (MemoryStream, Vec<leasehold_memory::MemoryBackend>) {
    let stream = MemoryStream::new(StreamConfig::new(Duration::from_secs(3600))).expect("config");
    let consumers: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|name| stream.consumer(name).expect("consumer"))
        .collect();
    for i in 0..n {
        stream.publish(format!("{{\"n\":{i}}}"));
    }
    for consumer in &consumers {
        consumer.fetch_now(n.div_ceil(3));
    }
    (stream, consumers)
}

async fn run(args: &Args) -> Result<(), String> {
    let server = RedisServer::start().map_err(|e| format!("redis-server: {e}"))?;
    leasehold_benches::seed::pending_and_dead(&server.url(), args.entries, 1)
        .await
        .map_err(|e| format!("filling Redis: {e}"))?;
    let redis = RedisInspector::connect(&server.url())
        .await
        .map_err(|e| e.to_string())?;
    let (stream, _consumers) = fill_memory(args.entries);
    let memory = MemoryInspector::new().with_stream("jobs", &stream);

    let (n, limit) = (args.entries, args.limit);
    let mut redis_pending = Vec::new();
    let mut redis_dead = Vec::new();
    let mut memory_pending = Vec::new();
    // Interleaved rounds: each listing once per round.
    for _ in 0..args.rounds {
        let query = PendingQuery::new;
        redis_pending.push(
            walk(
                limit,
                async |p| redis.pending("jobs", None, &query(p)).await.expect("page"),
                n,
            )
            .await,
        );
        redis_dead.push(
            walk(
                limit,
                async |p| redis.dead_letters("jobs", &p, false).await.expect("page"),
                n,
            )
            .await,
        );
        memory_pending.push(
            walk(
                limit,
                async |p| memory.pending("jobs", None, &query(p)).await.expect("page"),
                n,
            )
            .await,
        );
    }
    println!(
        "Pages of {limit} over {n} entries: median ms per page around each position, {} rounds\n",
        args.rounds
    );
    let header: Vec<&str> = POSITIONS.iter().map(|(name, _)| *name).collect();
    println!("| listing | {} | last / first |", header.join(" | "));
    println!("|---|{}---|", "---:|".repeat(POSITIONS.len()));
    row("Redis pending", &redis_pending);
    row("Redis dead letters", &redis_dead);
    row("memory pending", &memory_pending);
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match runtime.block_on(run(&args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
