//! An idle worker starts the handler of a message it just fetched before it sends its next
//! waiting fetch: that fetch's first poll (on Redis: sending the read, arming its timer) must
//! not stand between a delivery and its handler.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold_memory::{Bytes, MemoryBackend, MemoryStream, StreamConfig};
use leasehold_tokio::core::{
    Backend, BackendResult, DeadLetterReason, Fetched, LeaseRef, MessageId, RenewResult,
    SettleResult,
};
use leasehold_tokio::{Config, Delivery, Raw};
use tokio::sync::mpsc;

/// What happened, in order: a fetch allowed to wait was first polled, a fetch delivered, a
/// handler started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Waits,
    Delivered,
    Handler,
}

type Log = Arc<Mutex<Vec<Step>>>;

/// A memory consumer that logs its fetches.
struct Logged {
    inner: MemoryBackend,
    log: Log,
}

impl Backend for Logged {
    type Payload = Bytes;

    fn claim_timeout(&self) -> Option<Duration> {
        self.inner.claim_timeout()
    }
    async fn publish(&self, payload: Bytes) -> BackendResult<MessageId> {
        self.inner.publish(payload).await
    }
    async fn fetch(&self, max: usize, wait: Duration) -> BackendResult<Vec<Fetched<Bytes>>> {
        if !wait.is_zero() {
            self.log.lock().unwrap().push(Step::Waits);
        }
        let fetched = self.inner.fetch(max, wait).await?;
        if !fetched.is_empty() {
            self.log.lock().unwrap().push(Step::Delivered);
        }
        Ok(fetched)
    }
    async fn renew(&self, leases: &[LeaseRef]) -> BackendResult<Vec<RenewResult>> {
        self.inner.renew(leases).await
    }
    async fn ack(&self, leases: &[LeaseRef]) -> BackendResult<Vec<SettleResult>> {
        self.inner.ack(leases).await
    }
    async fn release(&self, lease: &LeaseRef, delay: Duration) -> BackendResult<SettleResult> {
        self.inner.release(lease, delay).await
    }
    async fn dead_letter(
        &self,
        lease: &LeaseRef,
        reason: &DeadLetterReason,
    ) -> BackendResult<SettleResult> {
        self.inner.dead_letter(lease, reason).await
    }
    async fn stream_len(&self) -> BackendResult<u64> {
        self.inner.stream_len().await
    }
    async fn pending(&self) -> BackendResult<u64> {
        self.inner.pending().await
    }
}

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
        let log = Log::default();
        let (done, mut handled) = mpsc::unbounded_channel();
        let handler_log = log.clone();
        let worker = leasehold_tokio::worker()
            .config(Config::default().concurrency(4))
            .stream_with_codec(
                "steps",
                Logged {
                    inner: stream.consumer("w1").expect("a consumer"),
                    log: log.clone(),
                },
                Raw,
                move |_: Delivery<Vec<u8>>| {
                    handler_log.lock().unwrap().push(Step::Handler);
                    let done = done.clone();
                    async move {
                        let _ = done.send(());
                    }
                },
            )
            .start()
            .expect("valid worker");
        // The first message starts the stream's handler task; the others find it idle.
        for _ in 0..=MESSAGES {
            stream.publish(b"m".to_vec());
            handled.recv().await.expect("the handler ran");
        }
        worker.shutdown(Duration::from_secs(5)).await;
        let log = log.lock().unwrap().clone();
        let after: Vec<Step> = log
            .iter()
            .enumerate()
            .filter(|(_, step)| **step == Step::Delivered)
            .skip(1)
            .map(|(at, _)| log.get(at + 1).copied().expect("a step after a delivery"))
            .collect();
        assert_eq!(after.len(), MESSAGES, "one delivery per message: {log:?}");
        assert!(
            after.iter().all(|step| *step == Step::Handler),
            "what came right after each delivery: {after:?} (the whole log: {log:?})"
        );
    });
}
