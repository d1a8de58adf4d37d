//! The command worker: a stream worker whose one handler is the command dispatcher, plus a
//! task that turns cancel announcements into cancel signals.

use std::collections::HashMap;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use futures::future::{self, Either};
use futures::StreamExt;
use leasehold_core::{Config, ConfigError};
use leasehold_worker::{Json, Runtime, ShutdownReport, Worker, WorkerBuilder, WorkerError};

use crate::dispatch::{CommandStats, Dispatcher, Entry};
use crate::handler::{CommandHandler, ErasedHandler, Typed};
use crate::signal::Signal;
use crate::store::{CancelFeed, CommandStore, StoreError};

/// Wait before subscribing to cancels again after the feed failed or ended.
const RESUBSCRIBE: Duration = Duration::from_secs(1);

/// Why a command worker could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CommandWorkerError {
    /// The engine configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The stream worker refused to start.
    #[error(transparent)]
    Worker(#[from] WorkerError),
    /// The store could not provide a stream consumer.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// No handler was registered.
    #[error("a command worker needs at least one handler: call .handler(kind, handler)")]
    NoHandlers,
    /// A knob is out of range.
    #[error("{0}")]
    Option(&'static str),
}

/// Builds a [`CommandWorker`]: handlers per command type, and the knobs.
pub struct CommandWorkerBuilder<R: Runtime, S: CommandStore> {
    runtime: R,
    store: Arc<S>,
    config: Config,
    status_interval: Duration,
    status_spread: f64,
    max_attempts: u32,
    handlers: HashMap<String, Arc<dyn ErasedHandler>>,
}

impl<R: Runtime, S: CommandStore> CommandWorkerBuilder<R, S> {
    /// A worker on `runtime` serving the queue in `store`. Defaults: concurrency 16,
    /// `status_interval` 5 s spread over the whole interval, 5 attempts.
    pub fn new(runtime: R, store: S) -> Self {
        Self::from_shared(runtime, Arc::new(store))
    }

    pub(crate) fn from_shared(runtime: R, store: Arc<S>) -> Self {
        Self {
            runtime,
            store,
            config: Config::default().concurrency(16),
            status_interval: Duration::from_secs(5),
            status_spread: 1.0,
            max_attempts: 5,
            handlers: HashMap::new(),
        }
    }

    /// The stream worker's engine config (concurrency, claim timeout, retry backoff, ...).
    /// `max_leases` bounds the commands one replica holds, RUNNING ones included (default
    /// 1 000); raise it for replicas that follow many long-running commands.
    /// Its `repoll_interval` and `repoll_spread` are replaced by [`status_interval`] and
    /// [`status_spread`]; its `max_deliveries` is ignored: commands give up after
    /// [`max_attempts`] handler failures, and a store outage is retried until it is over.
    ///
    /// [`status_interval`]: Self::status_interval
    /// [`status_spread`]: Self::status_spread
    /// [`max_attempts`]: Self::max_attempts
    #[must_use]
    pub fn config(mut self, config: Config) -> Self {
        self.config = config;
        self
    }

    /// How often a RUNNING command is checked, on the replica that holds it (default 5 s).
    #[must_use]
    pub fn status_interval(mut self, interval: Duration) -> Self {
        self.status_interval = interval;
        self
    }

    /// Fraction (0..=1) of `status_interval` by which a command's first check may come early,
    /// at random, so commands started together are checked spread over the interval rather
    /// than all at one instant (default 1: spread over the whole interval).
    #[must_use]
    pub fn status_spread(mut self, spread: f64) -> Self {
        self.status_spread = spread;
        self
    }

    /// Handler errors and panics after which a command is FAILED (default 5).
    #[must_use]
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts;
        self
    }

    /// Runs commands of type `kind` with `handler` (a later registration of `kind` replaces it).
    #[must_use]
    pub fn handler<H: CommandHandler>(mut self, kind: impl Into<String>, handler: H) -> Self {
        self.handlers
            .insert(kind.into(), Arc::new(Typed(Arc::new(handler))));
        self
    }

    /// Validates everything, connects a stream consumer, and starts the worker.
    pub async fn start(self) -> Result<CommandWorker<S>, CommandWorkerError> {
        if self.handlers.is_empty() {
            return Err(CommandWorkerError::NoHandlers);
        }
        if self.max_attempts == 0 {
            return Err(CommandWorkerError::Option(
                "max_attempts must be at least 1",
            ));
        }
        if self.status_interval.is_zero() {
            return Err(CommandWorkerError::Option(
                "status_interval must be greater than zero",
            ));
        }
        if !(0.0..=1.0).contains(&self.status_spread) {
            return Err(CommandWorkerError::Option(
                "status_spread must be between 0 and 1",
            ));
        }
        let config = self
            .config
            .repoll_interval(self.status_interval)
            .repoll_spread(self.status_spread)
            .max_deliveries(u32::MAX);
        let settings = config.validate()?;
        // One stream per shard, all on this worker's one budget.
        let consumers = self.store.consumers(settings.claim_timeout).await?;
        let dispatcher = Arc::new(Dispatcher::new(
            Arc::clone(&self.store),
            self.handlers,
            self.max_attempts,
        ));
        let mut builder = WorkerBuilder::new(self.runtime.clone()).config(config);
        for (name, backend) in consumers {
            let handle = Arc::clone(&dispatcher);
            builder = builder.stream_with_codec(
                name,
                backend,
                Json::<Entry>::default(),
                move |delivery| {
                    let dispatcher = Arc::clone(&handle);
                    async move { dispatcher.handle(delivery).await }
                },
            );
        }
        let worker = builder.start()?;
        // Subscribed before start returns, so a cancel made after it is heard; if the store
        // cannot subscribe now, the watcher keeps trying (and status checks catch cancels).
        let feed = match self.store.cancels().await {
            Ok(feed) => Some(feed),
            Err(error) => {
                tracing::warn!("cannot subscribe to cancels: {error}; retrying");
                None
            }
        };
        let stop = Arc::new(Signal::default());
        self.runtime.spawn(Box::pin(watch_cancels(
            self.runtime.clone(),
            Arc::clone(&dispatcher),
            feed,
            Arc::clone(&stop),
        )));
        Ok(CommandWorker {
            worker: Some(worker),
            dispatcher,
            stop,
        })
    }
}

/// Forwards cancel announcements to running handlers until `stop` fires, subscribing again
/// whenever the feed fails or ends.
async fn watch_cancels<R: Runtime, S: CommandStore>(
    runtime: R,
    dispatcher: Arc<Dispatcher<S>>,
    mut feed: Option<CancelFeed>,
    stop: Arc<Signal>,
) {
    loop {
        if let Some(mut live) = feed.take() {
            loop {
                match future::select(live.next(), pin!(stop.fired())).await {
                    Either::Left((Some(id), _)) => dispatcher.signal_cancel(&id),
                    Either::Left((None, _)) => break,
                    Either::Right(_) => return,
                }
            }
        }
        let resume = runtime.now() + RESUBSCRIBE;
        if let Either::Right(_) =
            future::select(pin!(runtime.sleep_until(resume)), pin!(stop.fired())).await
        {
            return;
        }
        let subscribe = pin!(dispatcher.store.cancels());
        match future::select(subscribe, pin!(stop.fired())).await {
            Either::Left((Ok(live), _)) => feed = Some(live),
            Either::Left((Err(error), _)) => {
                tracing::warn!("cannot subscribe to cancels: {error}; retrying");
            }
            Either::Right(_) => return,
        }
    }
}

/// A running command worker. Dropping it starts a graceful shutdown.
#[must_use = "dropping a CommandWorker shuts it down at once; keep it, and call shutdown() to wait"]
pub struct CommandWorker<S: CommandStore> {
    worker: Option<Worker<S::Payload>>,
    dispatcher: Arc<Dispatcher<S>>,
    stop: Arc<Signal>,
}

impl<S: CommandStore> std::fmt::Debug for CommandWorker<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommandWorker")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl<S: CommandStore> CommandWorker<S> {
    /// This worker's counters.
    pub fn stats(&self) -> CommandStats {
        self.dispatcher.stats()
    }

    /// Stops taking commands, hands waiting ones back at once (another replica resumes them
    /// with `check_status`), lets running handlers finish for up to `grace`, and returns once
    /// nothing is held.
    pub async fn shutdown(mut self, grace: Duration) -> ShutdownReport {
        self.stop.fire();
        match self.worker.take() {
            Some(worker) => worker.shutdown(grace).await,
            None => ShutdownReport::default(),
        }
    }

    /// Shuts down like [`shutdown`](Self::shutdown), and returns the final counters too: read
    /// once the last handler has finished, so they count every call it made (counters read
    /// before a shutdown miss the checks made during its grace).
    pub async fn shutdown_with_stats(self, grace: Duration) -> (ShutdownReport, CommandStats) {
        let dispatcher = Arc::clone(&self.dispatcher);
        let report = self.shutdown(grace).await;
        (report, dispatcher.stats())
    }
}

impl<S: CommandStore> Drop for CommandWorker<S> {
    fn drop(&mut self) {
        self.stop.fire();
    }
}
