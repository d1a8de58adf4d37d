//! An idle worker starts the handler of a message it just fetched before it sends its next
//! waiting fetch: that fetch's first poll (on Redis: sending the read, arming its timer) must
//! not stand between a delivery and its handler.

use std::time::Duration;

use leasehold_memory::{MemoryStream, StreamConfig};
use leasehold_tokio::{Config, Delivery, Raw};
use leasehold_worker_suite::support::{probe, Seen};
use tokio::sync::mpsc;

#[test]
fn an_idle_worker_starts_the_handler_before_its_next_waiting_fetch() {
    const MESSAGES: usize = 20;
    // One runtime thread: what runs next there is the scheduler's choice alone.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(async {
        let stream = MemoryStream::new(StreamConfig::default()).expect("valid stream config");
        let (backend, taps) = probe(&stream, "w1");
        let (done, mut handled) = mpsc::unbounded_channel();
        let handler_taps = taps.clone();
        let worker = leasehold_tokio::worker()
            .config(Config::default().concurrency(4))
            .stream_with_codec("steps", backend, Raw, move |_: Delivery<Vec<u8>>| {
                handler_taps.mark("handler");
                let done = done.clone();
                async move {
                    let _ = done.send(());
                }
            })
            .start()
            .expect("valid worker");
        // The first message starts the stream's handler task; the others find it idle.
        for _ in 0..=MESSAGES {
            stream.publish(b"m".to_vec());
            handled.recv().await.expect("the handler ran");
        }
        worker.shutdown(Duration::from_secs(5)).await;
        let seen = taps.seen();
        let next: Vec<Seen> = seen
            .iter()
            .enumerate()
            .filter(|(_, step)| **step == Seen::Delivered)
            .skip(1)
            .map(|(at, _)| seen.get(at + 1).copied().expect("a step after a delivery"))
            .collect();
        assert_eq!(next.len(), MESSAGES, "one delivery per message: {seen:?}");
        assert!(
            next.iter().all(|step| *step == Seen::Mark("handler")),
            "what came right after each delivery: {next:?} (all of it: {seen:?})"
        );
    });
}
