//! End to end on tokio's paused clock: publish, process, Pending re-poll, shutdown.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_memory::{Clock, MemoryStream, StreamConfig};
use leasehold_tokio::{Config, Delivery, Outcome};

/// The stream reads tokio's (virtual) clock, like the worker does.
struct TokioClock;

impl Clock for TokioClock {
    fn now(&self) -> Instant {
        tokio::time::Instant::now().into_std()
    }
}

#[tokio::test(start_paused = true)]
async fn messages_are_processed_and_pending_ones_repolled() {
    let stream = MemoryStream::with_clock(StreamConfig::new(Duration::from_secs(30)), TokioClock)
        .expect("valid stream config");
    for i in 0..10u32 {
        stream.publish(serde_json::to_vec(&i).unwrap());
    }
    let runs = Arc::new(AtomicU32::new(0));
    let counter = runs.clone();
    let worker = leasehold_tokio::worker()
        .config(
            Config::default()
                .concurrency(4)
                .claim_timeout(Duration::from_secs(30)),
        )
        .stream(
            "jobs",
            stream.consumer("w1").unwrap(),
            move |d: Delivery<u32>| {
                let counter = counter.clone();
                async move {
                    counter.fetch_add(1, Ordering::SeqCst);
                    if *d.message() == 7 && d.attempt() < 3 {
                        Outcome::Pending
                    } else {
                        Outcome::Done
                    }
                }
            },
        )
        .start()
        .expect("valid worker");
    for _ in 0..100 {
        if stream.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(stream.is_empty(), "all acked, {} left", stream.len());
    assert_eq!(runs.load(Ordering::SeqCst), 12, "message 7 ran 3 times");
    let report = worker.shutdown(Duration::from_secs(5)).await;
    assert_eq!(report.acked, 10);
    assert_eq!(stream.pending_len(), 0);
}
