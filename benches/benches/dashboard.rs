//! What the dashboard costs Redis and how fast it answers, at 2 000 and at 100 000 pending
//! entries (200 and 10 000 dead letters): every read is one page, so both must stay flat.
//!
//! Run: `cargo bench -p leasehold-benches --bench dashboard -- [--rounds 5] [--small 2000]
//! [--large 100000] [--samples 20] [--json]`. Two throwaway redis-servers, one per size, each
//! behind a dashboard on a loopback port; rounds interleave the sizes. Per size it prints the
//! median over rounds (and the range of the rounds' medians) of:
//! - the sampler's refresh round (the stream's overview: what one refresh costs, whoever is
//!   looking): its time, Redis commands and Redis CPU (`INFO commandstats` deltas);
//! - a GET of the overview page (rendered from the snapshot: no Redis);
//! - a GET of the stream page (consumers + 50 leases) and of the dead-letter page (50), each at
//!   a position of its listing no sample used before (so no page comes from the page cache).
#![forbid(unsafe_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use leasehold_core::{Inspector, Page, PendingQuery};
use leasehold_dashboard::{Dashboard, Options, RedisSource};
use leasehold_redis::RedisInspector;
use leasehold_redis_harness::RedisServer;

struct Args {
    rounds: usize,
    small: usize,
    large: usize,
    samples: usize,
    json: bool,
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        rounds: 5,
        small: 2_000,
        large: 100_000,
        samples: 20,
        json: false,
    };
    // `cargo test --benches` runs this without `--bench`: one small round, as a smoke test.
    if !std::env::args().any(|a| a == "--bench") {
        (args.rounds, args.small, args.large, args.samples) = (1, 200, 2_000, 2);
    }
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = |name: &str| -> Result<usize, String> {
            it.next()
                .and_then(|v| v.parse().ok())
                .filter(|&n| n > 0)
                .ok_or_else(|| format!("{name} takes a positive number"))
        };
        match flag.as_str() {
            "--rounds" => args.rounds = value("--rounds")?,
            "--small" => args.small = value("--small")?,
            "--large" => args.large = value("--large")?,
            "--samples" => args.samples = value("--samples")?,
            "--json" => args.json = true,
            "--bench" => {}
            other => {
                return Err(format!(
                    "unknown flag {other:?} (--rounds, --small, --large, --samples, --json)"
                ))
            }
        }
    }
    Ok(args)
}

/// Total calls and microseconds of every command Redis ran, from `INFO commandstats`.
fn redis_work(server: &RedisServer) -> (u64, u64) {
    let reply = server.command(["INFO", "commandstats"]).expect("INFO");
    let text = reply.as_str().unwrap_or_default().to_owned();
    let field = |rest: &str, name: &str| -> u64 {
        rest.split(',')
            .find_map(|kv| kv.strip_prefix(name))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    text.lines()
        .filter_map(|line| line.strip_prefix("cmdstat_")?.split_once(':'))
        // The INFO calls that take these snapshots are no dashboard work.
        .filter(|(name, _)| *name != "info")
        .fold((0, 0), |(calls, usec), (_, rest)| {
            (calls + field(rest, "calls="), usec + field(rest, "usec="))
        })
}

/// One GET; panics unless it answers 200.
fn get(addr: SocketAddr, path: &str) {
    let mut stream = TcpStream::connect(addr).expect("connect");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .expect("send");
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).expect("receive");
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "{path}: {}",
        String::from_utf8_lossy(&answer[..answer.len().min(300)])
    );
}

/// One size: its server, inspector, dashboard, and the ids to start pages after.
struct Setup {
    entries: usize,
    server: RedisServer,
    inspector: RedisInspector,
    addr: SocketAddr,
    pending_ids: Vec<String>,
    dead_ids: Vec<String>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

async fn setup(entries: usize) -> Result<Setup, String> {
    let server = RedisServer::start().map_err(|e| format!("redis-server: {e}"))?;
    leasehold_benches::seed::pending_and_dead(&server.url(), entries, 10)
        .await
        .map_err(|e| format!("filling Redis: {e}"))?;
    let inspector = RedisInspector::connect(&server.url())
        .await
        .map_err(|e| e.to_string())?;
    // Every id, to start pages at random positions.
    let mut pending_ids = Vec::new();
    let mut page = Some(Page::first(10_000));
    while let Some(p) = page {
        let query = PendingQuery::new(p);
        let listing = inspector
            .pending("jobs", None, &query)
            .await
            .map_err(|e| e.to_string())?;
        pending_ids.extend(listing.entries.iter().map(|e| e.id.to_string()));
        page = listing.next;
    }
    let mut dead_ids = Vec::new();
    let mut page = Some(Page::first(10_000));
    while let Some(p) = page {
        let listing = inspector
            .dead_letters("jobs", &p, false)
            .await
            .map_err(|e| e.to_string())?;
        dead_ids.extend(listing.entries.iter().map(|e| e.id.to_string()));
        page = listing.next;
    }
    let source = RedisSource::connect(&server.url(), vec!["jobs".into()], vec![])
        .await
        .map_err(|e| e.to_string())?;
    // The sampler rounds once at start, then not within the run: the rounds measured are the
    // bench's own.
    let hour = Duration::from_secs(3600);
    let options = Options {
        bind: "127.0.0.1:0".parse().expect("addr"),
        refresh: hour,
        discover_every: hour,
        history: hour,
        ..Options::default()
    };
    let dashboard = Dashboard::bind(source, options)
        .await
        .map_err(|e| e.to_string())?;
    let addr = dashboard.local_addr();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(dashboard.serve(async {
        let _ = stopped.await;
    }));
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let pending_ids = shuffled(pending_ids, &mut seed);
    let dead_ids = shuffled(dead_ids, &mut seed);
    Ok(Setup {
        entries,
        server,
        inspector,
        addr,
        pending_ids,
        dead_ids,
        _stop: stop,
    })
}

/// The figures of one round of one size: medians over its samples.
#[derive(Debug, Clone, Copy, Default)]
struct Figures {
    round_ms: f64,
    round_commands: f64,
    round_redis_us: f64,
    overview_ms: f64,
    stream_ms: f64,
    stream_commands: f64,
    stream_redis_us: f64,
    dead_ms: f64,
    dead_commands: f64,
    dead_redis_us: f64,
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// `ids` in a deterministic random order (xorshift, Fisher-Yates): pages start at distinct
/// positions, so none comes from the page cache (until the ids run out).
fn shuffled(mut ids: Vec<String>, seed: &mut u64) -> Vec<String> {
    for i in (1..ids.len()).rev() {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        ids.swap(i, (*seed % (i as u64 + 1)) as usize);
    }
    ids
}

/// Times `f` on a blocking thread, with the Redis work it caused.
async fn measured(server: &RedisServer, f: impl FnOnce() + Send + 'static) -> (f64, f64, f64) {
    let before = redis_work(server);
    let start = Instant::now();
    tokio::task::spawn_blocking(f).await.expect("joined");
    let ms = start.elapsed().as_secs_f64() * 1e3;
    let after = redis_work(server);
    (ms, (after.0 - before.0) as f64, (after.1 - before.1) as f64)
}

async fn round(s: &Setup, samples: usize, next: &mut usize) -> Figures {
    let (mut rt, mut rc, mut ru) = (Vec::new(), Vec::new(), Vec::new());
    let (mut ov, mut st, mut sc, mut su, mut dt, mut dc, mut du) = (
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
    );
    for _ in 0..samples {
        let before = redis_work(&s.server);
        let start = Instant::now();
        s.inspector.overview("jobs").await.expect("overview");
        rt.push(start.elapsed().as_secs_f64() * 1e3);
        let after = redis_work(&s.server);
        rc.push((after.0 - before.0) as f64);
        ru.push((after.1 - before.1) as f64);

        let addr = s.addr;
        ov.push(measured(&s.server, move || get(addr, "/")).await.0);
        let after = s.pending_ids[*next % s.pending_ids.len()].clone();
        let (ms, calls, usec) = measured(&s.server, move || {
            get(addr, &format!("/streams/jobs?after={after}"))
        })
        .await;
        st.push(ms);
        sc.push(calls);
        su.push(usec);
        let after = s.dead_ids[*next % s.dead_ids.len()].clone();
        *next += 1;
        let (ms, calls, usec) = measured(&s.server, move || {
            get(addr, &format!("/streams/jobs/dead?after={after}"))
        })
        .await;
        dt.push(ms);
        dc.push(calls);
        du.push(usec);
    }
    Figures {
        round_ms: median(rt),
        round_commands: median(rc),
        round_redis_us: median(ru),
        overview_ms: median(ov),
        stream_ms: median(st),
        stream_commands: median(sc),
        stream_redis_us: median(su),
        dead_ms: median(dt),
        dead_commands: median(dc),
        dead_redis_us: median(du),
    }
}

type Pick = fn(&Figures) -> f64;

const ROWS: [(&str, Pick); 10] = [
    ("refresh round: time, ms", |f| f.round_ms),
    ("refresh round: Redis commands", |f| f.round_commands),
    ("refresh round: Redis CPU, µs", |f| f.round_redis_us),
    ("overview page, ms", |f| f.overview_ms),
    ("stream page (50 leases), ms", |f| f.stream_ms),
    ("stream page: Redis commands", |f| f.stream_commands),
    ("stream page: Redis CPU, µs", |f| f.stream_redis_us),
    ("dead-letter page (50), ms", |f| f.dead_ms),
    ("dead-letter page: Redis commands", |f| f.dead_commands),
    ("dead-letter page: Redis CPU, µs", |f| f.dead_redis_us),
];

async fn run(args: &Args) -> Result<(), String> {
    let small = setup(args.small).await?;
    let large = setup(args.large).await?;
    let (mut by_small, mut by_large) = (Vec::new(), Vec::new());
    let (mut next_small, mut next_large) = (0, 0);
    for _ in 0..args.rounds {
        by_small.push(round(&small, args.samples, &mut next_small).await);
        by_large.push(round(&large, args.samples, &mut next_large).await);
    }
    let summary = |rounds: &[Figures], pick: Pick| {
        let values: Vec<f64> = rounds.iter().map(pick).collect();
        let (lo, hi) = values
            .iter()
            .fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(*v), hi.max(*v)));
        (median(values), lo, hi)
    };
    if args.json {
        let rows: Vec<_> = ROWS
            .iter()
            .map(|(name, pick)| {
                let (s, s_lo, s_hi) = summary(&by_small, *pick);
                let (l, l_lo, l_hi) = summary(&by_large, *pick);
                serde_json::json!({
                    "measure": name,
                    "small": { "median": s, "min": s_lo, "max": s_hi },
                    "large": { "median": l, "min": l_lo, "max": l_hi },
                    "ratio": if s > 0.0 { l / s } else { 1.0 },
                })
            })
            .collect();
        let doc = serde_json::json!({
            "small": { "pending": small.entries, "dead_letters": small.entries / 10 },
            "large": { "pending": large.entries, "dead_letters": large.entries / 10 },
            "rounds": args.rounds, "samples": args.samples, "rows": rows,
        });
        println!("{doc:#}");
        return Ok(());
    }
    println!(
        "The dashboard on Redis: medians of {} interleaved rounds (range of the rounds' medians), \
         {} samples a round\n",
        args.rounds, args.samples
    );
    println!(
        "| measure | {} pending, {} dead | {} pending, {} dead | large / small |",
        small.entries,
        small.entries / 10,
        large.entries,
        large.entries / 10
    );
    println!("|---|---:|---:|---:|");
    for (name, pick) in ROWS {
        let (s, s_lo, s_hi) = summary(&by_small, pick);
        let (l, l_lo, l_hi) = summary(&by_large, pick);
        let ratio = if s > 0.0 { l / s } else { 1.0 };
        println!(
            "| {name} | {s:.2} ({s_lo:.2}–{s_hi:.2}) | {l:.2} ({l_lo:.2}–{l_hi:.2}) | {ratio:.2} |"
        );
    }
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
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
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
