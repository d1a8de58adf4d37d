//! `CommandQueue::wait` rides out transient store errors (a restarting server, a dropped
//! connection) until its timeout, and returns a fatal one at once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use leasehold_commands::{
    CancelFeed, Command, CommandQueue, CommandState, CommandStore, MemoryCommandStore, QueueError,
    Status, StoreError, Submit,
};
use leasehold_core::{BackendError, ErrorKind};
use leasehold_memory::{MemoryStream, StreamConfig};
use leasehold_tokio::TokioRuntime;

/// A memory store whose next `failures` loads fail with an error of `kind`.
struct Failing {
    inner: MemoryCommandStore,
    failures: Arc<AtomicUsize>,
    kind: ErrorKind,
}

impl CommandStore for Failing {
    type Backend = <MemoryCommandStore as CommandStore>::Backend;
    type Payload = <MemoryCommandStore as CommandStore>::Payload;

    async fn submit(&self, state: &CommandState, entry: &[u8]) -> Result<Submit, StoreError> {
        self.inner.submit(state, entry).await
    }

    async fn load(&self, id: &str) -> Result<Option<CommandState>, StoreError> {
        let left = self.failures.load(Ordering::SeqCst);
        if left > 0 {
            self.failures.store(left - 1, Ordering::SeqCst);
            return Err(match self.kind {
                ErrorKind::Transient => BackendError::transient("load: broken pipe"),
                _ => BackendError::fatal("load: NOPERM"),
            });
        }
        self.inner.load(id).await
    }

    async fn compare_and_set(&self, state: &CommandState) -> Result<bool, StoreError> {
        self.inner.compare_and_set(state).await
    }

    async fn announce_cancel(&self, id: &str) -> Result<(), StoreError> {
        self.inner.announce_cancel(id).await
    }

    async fn cancels(&self) -> Result<CancelFeed, StoreError> {
        self.inner.cancels().await
    }

    async fn consumer(&self, claim_timeout: Duration) -> Result<Self::Backend, StoreError> {
        self.inner.consumer(claim_timeout).await
    }
}

/// A queue holding one CANCELLED command, `done`, whose store then fails `failures` loads.
async fn cancelled_command(
    kind: ErrorKind,
    failures: usize,
) -> CommandQueue<Failing, TokioRuntime> {
    let stream = MemoryStream::new(StreamConfig::new(Duration::from_secs(30))).expect("config");
    let failing = Arc::new(AtomicUsize::new(0));
    let store = Failing {
        inner: MemoryCommandStore::new(stream),
        failures: failing.clone(),
        kind,
    };
    let queue = CommandQueue::new(TokioRuntime::current(), store);
    let command = Command::new("noop", ()).expect("encodes").with_id("done");
    queue.submit(command).await.expect("submitted");
    assert!(queue.cancel("done").await.expect("cancelled"));
    failing.store(failures, Ordering::SeqCst);
    queue
}

#[tokio::test(start_paused = true)]
async fn wait_retries_transient_store_errors() {
    let queue = cancelled_command(ErrorKind::Transient, 3).await;
    let state = queue
        .wait("done", Duration::from_secs(10))
        .await
        .expect("the transient errors are ridden out");
    assert_eq!(state.status, Status::Cancelled);
}

#[tokio::test(start_paused = true)]
async fn wait_returns_a_transient_error_that_outlasts_its_timeout() {
    let queue = cancelled_command(ErrorKind::Transient, usize::MAX).await;
    match queue.wait("done", Duration::from_secs(1)).await {
        Err(QueueError::Store(error)) => assert!(error.is_transient(), "{error}"),
        other => panic!("expected the store's error after the timeout, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn wait_returns_a_fatal_error_at_once() {
    let queue = cancelled_command(ErrorKind::Fatal, 1).await;
    let start = tokio::time::Instant::now();
    match queue.wait("done", Duration::from_secs(10)).await {
        Err(QueueError::Store(error)) => assert_eq!(error.kind(), ErrorKind::Fatal),
        other => panic!("expected the fatal error, got {other:?}"),
    }
    assert_eq!(
        start.elapsed(),
        Duration::ZERO,
        "no waiting on a fatal error"
    );
}
