//! `status_interval` cadence on tokio's paused clock (the memory stream reads the same clock),
//! so the figures are exact and the test takes milliseconds of real time.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use leasehold_commands::{
    Command, CommandContext, CommandHandler, CommandQueue, HandlerError, MemoryCommandStore,
    Status, Step,
};
use leasehold_core::Config;
use leasehold_memory::{Clock, MemoryStream, StreamConfig};
use leasehold_tokio::TokioRuntime;

struct TokioClock;

impl Clock for TokioClock {
    fn now(&self) -> Instant {
        tokio::time::Instant::now().into_std()
    }
}

/// Every `check_status` call: which command, when (virtual time).
#[derive(Clone, Default)]
struct Checks(Arc<Mutex<Vec<(usize, Instant)>>>);

/// Never finishes; records each check.
struct Watched(Checks);

impl CommandHandler for Watched {
    type Params = usize;
    type Output = ();

    async fn execute(&self, _: CommandContext, _: usize) -> Result<Step<()>, HandlerError> {
        Ok(Step::Running)
    }

    async fn check_status(&self, _: CommandContext, n: usize) -> Result<Step<()>, HandlerError> {
        let now = tokio::time::Instant::now().into_std();
        self.0 .0.lock().unwrap().push((n, now));
        Ok(Step::Running)
    }
}

const CLAIM: Duration = Duration::from_secs(60);

fn queue() -> CommandQueue<MemoryCommandStore, TokioRuntime> {
    let stream = MemoryStream::with_clock(StreamConfig::new(CLAIM), TokioClock).unwrap();
    CommandQueue::new(TokioRuntime::current(), MemoryCommandStore::new(stream))
}

fn config() -> Config {
    Config::default()
        .concurrency(64)
        .max_leases(2000)
        .claim_timeout(CLAIM)
        .poll_interval(Duration::from_millis(100))
}

#[tokio::test(start_paused = true)]
async fn a_running_command_is_checked_every_status_interval() {
    const INTERVAL: Duration = Duration::from_secs(5);
    let queue = queue();
    let checks = Checks::default();
    let worker = queue
        .worker()
        .config(config())
        .status_interval(INTERVAL)
        .status_spread(0.0)
        .handler("watched", Watched(checks.clone()))
        .start()
        .await
        .unwrap();
    queue
        .submit(Command::new("watched", 0usize).unwrap())
        .await
        .unwrap();
    tokio::time::sleep(INTERVAL * 20 + INTERVAL / 2).await;
    let times: Vec<Instant> = checks.0.lock().unwrap().iter().map(|(_, t)| *t).collect();
    assert_eq!(times.len(), 20, "one check per interval: {times:?}");
    let worst = times
        .windows(2)
        .map(|pair| {
            let gap = pair[1] - pair[0];
            gap.abs_diff(INTERVAL)
        })
        .max()
        .unwrap();
    println!("cadence: 20 checks, worst gap error {worst:?} of a {INTERVAL:?} interval");
    assert!(worst <= INTERVAL / 100, "worst gap error {worst:?}");
    let stats = worker.stats();
    assert_eq!((stats.executed, stats.checked), (1, 20));
    worker.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn a_thousand_running_commands_are_checked_once_per_interval_spread_out() {
    const COMMANDS: usize = 1000;
    const INTERVAL: Duration = Duration::from_secs(10);
    const WINDOWS: u32 = 5;
    const BUCKETS: u32 = 10;
    let queue = queue();
    let checks = Checks::default();
    let worker = queue
        .worker()
        .config(config())
        .status_interval(INTERVAL)
        .handler("watched", Watched(checks.clone()))
        .start()
        .await
        .unwrap();
    let mut ids = Vec::new();
    for n in 0..COMMANDS {
        let submitted = queue
            .submit(Command::new("watched", n).unwrap())
            .await
            .unwrap();
        ids.push(submitted.state.id);
    }
    // Every command executed (RUNNING) before the measured windows begin.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(worker.stats().executed, COMMANDS as u64);
    let start = tokio::time::Instant::now().into_std() + INTERVAL;
    tokio::time::sleep(INTERVAL * (WINDOWS + 1)).await;

    let checks = checks.0.lock().unwrap().clone();
    let mut worst_bucket = 0;
    let mut per_window = Vec::new();
    for w in 0..WINDOWS {
        let from = start + INTERVAL * w;
        let mut seen = vec![0u32; COMMANDS];
        let mut buckets = vec![0u32; BUCKETS as usize];
        for &(n, at) in &checks {
            if at >= from && at < from + INTERVAL {
                seen[n] += 1;
                let offset = (at - from).as_nanos() * u128::from(BUCKETS) / INTERVAL.as_nanos();
                buckets[offset as usize] += 1;
            }
        }
        let missed = seen.iter().filter(|&&s| s == 0).count();
        let twice = seen.iter().filter(|&&s| s > 1).count();
        assert_eq!(
            (missed, twice),
            (0, 0),
            "window {w}: missed / checked twice"
        );
        per_window.push(seen.iter().sum::<u32>());
        worst_bucket = worst_bucket.max(*buckets.iter().max().unwrap());
    }
    let even = COMMANDS as u32 / BUCKETS;
    println!(
        "1000 RUNNING: checks per {INTERVAL:?} window {per_window:?}; busiest tenth of an \
         interval {worst_bucket} checks (even spread: {even})"
    );
    assert!(
        worst_bucket <= 2 * even,
        "checks bunch up: {worst_bucket} in one tenth of the interval"
    );
    let report = worker.shutdown(Duration::from_secs(1)).await;
    // Shutdown hands the commands back, still RUNNING, for the next replica to resume.
    assert_eq!(report.released, COMMANDS as u64, "every lease handed back");
    for id in &ids {
        let state = queue.state(id).await.unwrap().unwrap();
        assert_eq!(state.status, Status::Running, "{id}");
    }
}
