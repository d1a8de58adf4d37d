//! Handlers that never await still run on several threads of a multi-thread runtime at once,
//! though a stream's idle handler tasks are woken as a chain, from one thread.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_memory::{MemoryStream, StreamConfig};
use leasehold_tokio::{Config, Delivery, Raw};
use tokio::sync::Notify;

/// Handlers running now, the most seen at once, and how many finished.
#[derive(Default)]
struct Seen {
    running: AtomicUsize,
    most: AtomicUsize,
    done: AtomicUsize,
    all_done: Notify,
}

/// Keeps its thread busy for `cpu`, never awaiting.
fn spin(cpu: Duration) {
    let start = Instant::now();
    while start.elapsed() < cpu {
        std::hint::spin_loop();
    }
}

#[test]
fn handlers_that_never_await_run_on_several_threads_at_once() {
    const WARM: usize = 16;
    const BUSY: usize = 128;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(async {
        let stream = MemoryStream::new(StreamConfig::default()).expect("valid stream config");
        let seen = Arc::new(Seen::default());
        let handler_seen = seen.clone();
        let worker = leasehold_tokio::worker()
            .config(Config::default().concurrency(8))
            .stream_with_codec(
                "cpu",
                stream.consumer("w1").expect("a consumer"),
                Raw,
                move |d: Delivery<Vec<u8>>| {
                    let seen = handler_seen.clone();
                    async move {
                        let now = seen.running.fetch_add(1, Ordering::SeqCst) + 1;
                        seen.most.fetch_max(now, Ordering::SeqCst);
                        // The first messages only start the pool's tasks; the rest keep a
                        // thread busy for a millisecond each.
                        if d.message().as_slice() == b"busy" {
                            spin(Duration::from_millis(1));
                        }
                        seen.running.fetch_sub(1, Ordering::SeqCst);
                        if seen.done.fetch_add(1, Ordering::SeqCst) + 1 == WARM + BUSY {
                            seen.all_done.notify_one();
                        }
                    }
                },
            )
            .start()
            .expect("valid worker");
        for _ in 0..WARM {
            stream.publish(b"warm".to_vec());
        }
        while seen.done.load(Ordering::SeqCst) < WARM {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        seen.most.store(0, Ordering::SeqCst);
        for _ in 0..BUSY {
            stream.publish(b"busy".to_vec());
        }
        let all_done = seen.all_done.notified();
        if seen.done.load(Ordering::SeqCst) < WARM + BUSY {
            all_done.await;
        }
        let report = worker.shutdown(Duration::from_secs(5)).await;
        assert_eq!(report.acked, (WARM + BUSY) as u64);
        assert!(
            seen.most.load(Ordering::SeqCst) >= 2,
            "busy handlers never ran two at once on a two-thread runtime"
        );
    });
}
