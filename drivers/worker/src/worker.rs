//! The worker API: a builder over the engine config, typed handlers, shutdown with a report.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::channel::oneshot;
use leasehold_core::{Backend, Config, ConfigError, LeaseEngine, Stats};
use serde::de::DeserializeOwned;

use crate::codec::{Codec, Json};
use crate::delivery::{Delivery, IntoOutcome};
use crate::dispatch::{Env, MakeDispatch};
use crate::driver::{Driver, DriverOptions, Event, Stream};
use crate::inbox::Inbox;
use crate::runtime::Runtime;

/// Why a worker could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkerError {
    /// The engine configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// No stream was added.
    #[error("a worker needs at least one stream: call .stream(..) on the builder")]
    NoStreams,
    /// Two streams share a name.
    #[error("stream {0:?} was added twice")]
    DuplicateStream(String),
    /// More streams than one engine can serve.
    #[error("a worker serves at most 65535 streams")]
    TooManyStreams,
    /// A driver option is out of range.
    #[error("{0}")]
    Option(&'static str),
    /// A backend lets others take leases after a different idle time than the engine assumes.
    #[error(
        "stream {stream:?}: the backend's claim timeout is {backend:?} but the worker's config \
         says {config:?}; set both to the same value"
    )]
    ClaimTimeoutMismatch {
        /// The stream's name.
        stream: String,
        /// The backend's claim timeout.
        backend: Duration,
        /// The engine config's claim timeout.
        config: Duration,
    },
}

/// What shutdown did, from the worker's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Messages acked over the worker's life.
    pub acked: u64,
    /// Leases released back (failed attempts, and waiting messages handed back at shutdown).
    pub released: u64,
    /// Invocations cancelled (lease lost, max processing time, shutdown grace over).
    pub cancelled: u64,
    /// Messages dead-lettered.
    pub dead_lettered: u64,
    /// Leases lost or expired.
    pub lost: u64,
    /// Leases given up after the deadline because the backend kept failing (they lapse on the
    /// backend after the claim timeout).
    pub abandoned: u64,
}

impl From<Stats> for ShutdownReport {
    fn from(stats: Stats) -> Self {
        Self {
            acked: stats.acked,
            released: stats.released,
            cancelled: stats.cancelled,
            dead_lettered: stats.dead_lettered,
            lost: stats.lost + stats.expired,
            abandoned: stats.abandoned,
        }
    }
}

/// A stream added to the builder: its dispatcher is made at `start`, when the inbox exists.
struct Added<R, B: Backend> {
    name: Arc<str>,
    backend: Arc<B>,
    make: MakeDispatch<R, B::Payload>,
}

/// Builds a [`Worker`]: engine config, driver options, and one entry per stream.
pub struct WorkerBuilder<R: Runtime, B: Backend> {
    runtime: R,
    config: Config,
    options: DriverOptions,
    streams: Vec<Added<R, B>>,
}

impl<R: Runtime, B: Backend> WorkerBuilder<R, B>
where
    B::Payload: AsRef<[u8]>,
{
    /// A builder running on `runtime`, with the default [`Config`].
    pub fn new(runtime: R) -> Self {
        Self {
            runtime,
            config: Config::default(),
            options: DriverOptions {
                cancel_grace: Duration::from_secs(1),
                call_timeout: Duration::from_secs(10),
            },
            streams: Vec::new(),
        }
    }

    /// The engine configuration (concurrency, claim timeout, ...), validated by [`start`](Self::start).
    #[must_use]
    pub fn config(mut self, config: Config) -> Self {
        self.config = config;
        self
    }

    /// How long a cancelled handler may run on before its future is dropped (default 1 s).
    #[must_use]
    pub fn cancel_grace(mut self, grace: Duration) -> Self {
        self.options.cancel_grace = grace;
        self
    }

    /// Bound on one backend call; a call that takes longer counts as failed (default 10 s).
    #[must_use]
    pub fn call_timeout(mut self, timeout: Duration) -> Self {
        self.options.call_timeout = timeout;
        self
    }

    /// Serves a stream of JSON messages of type `M` with `handler`.
    ///
    /// Each call of `handler` runs on a handler task of the stream, never on the worker's own
    /// loop. The stream starts these tasks as needed, up to one per invocation in flight at
    /// once (at most the concurrency, plus cancelled ones still winding down), and keeps them,
    /// idle, until the worker stops: handing a message to a waiting task is cheaper than
    /// spawning one.
    #[must_use]
    pub fn stream<M, H, F>(self, name: impl Into<String>, backend: B, handler: H) -> Self
    where
        M: DeserializeOwned + serde::Serialize + Send + 'static,
        H: Fn(Delivery<M>) -> F + Send + Sync + 'static,
        F: Future + Send + 'static,
        F::Output: IntoOutcome,
    {
        self.stream_with_codec(name, backend, Json::<M>::default(), handler)
    }

    /// Serves a stream whose messages `codec` decodes. A payload that does not decode is
    /// dead-lettered at once.
    #[must_use]
    pub fn stream_with_codec<M, C, H, F>(
        mut self,
        name: impl Into<String>,
        backend: B,
        codec: C,
        handler: H,
    ) -> Self
    where
        M: Send + 'static,
        C: Codec<M>,
        H: Fn(Delivery<M>) -> F + Send + Sync + 'static,
        F: Future + Send + 'static,
        F::Output: IntoOutcome,
    {
        self.streams.push(Added {
            name: name.into().into(),
            backend: Arc::new(backend),
            make: crate::dispatch::make(codec, handler),
        });
        self
    }

    /// Validates everything and starts the worker's driver task.
    pub fn start(self) -> Result<Worker<B::Payload>, WorkerError> {
        if self.streams.is_empty() {
            return Err(WorkerError::NoStreams);
        }
        for (i, stream) in self.streams.iter().enumerate() {
            if self.streams[..i].iter().any(|s| s.name == stream.name) {
                return Err(WorkerError::DuplicateStream(stream.name.to_string()));
            }
        }
        if self.options.call_timeout.is_zero() {
            return Err(WorkerError::Option(
                "call_timeout must be greater than zero",
            ));
        }
        let sources = u16::try_from(self.streams.len()).map_err(|_| WorkerError::TooManyStreams)?;
        let engine = LeaseEngine::with_streams(&self.config, sources, self.runtime.now())?;
        let config_timeout = engine.settings().claim_timeout;
        for stream in &self.streams {
            match stream.backend.claim_timeout() {
                Some(backend) if backend != config_timeout => {
                    return Err(WorkerError::ClaimTimeoutMismatch {
                        stream: stream.name.to_string(),
                        backend,
                        config: config_timeout,
                    })
                }
                _ => {}
            }
        }
        let shutdown_grace = engine.settings().shutdown_grace;
        let inbox = Arc::new(Inbox::new());
        let env = Env {
            rt: self.runtime.clone(),
            inbox: inbox.clone(),
            base: self.runtime.now(),
            grace: self.options.cancel_grace,
        };
        let base = env.base;
        let streams = self
            .streams
            .into_iter()
            .map(|added| Stream {
                dispatch: (added.make)(env.clone(), added.name.clone()),
                name: added.name,
                backend: added.backend,
            })
            .collect();
        let driver = Driver::new(
            self.runtime.clone(),
            engine,
            streams,
            inbox.clone(),
            self.options,
            base,
        );
        self.runtime.spawn(Box::pin(driver.run()));
        Ok(Worker {
            inbox,
            shutdown_grace,
            shut_down: false,
        })
    }
}

/// A running worker. Dropping it starts a graceful shutdown with the configured grace.
pub struct Worker<P> {
    inbox: Arc<Inbox<Event<P>>>,
    shutdown_grace: Duration,
    shut_down: bool,
}

impl<P> std::fmt::Debug for Worker<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker").finish_non_exhaustive()
    }
}

impl<P> Worker<P> {
    /// Stops fetching, hands waiting messages back at once, lets running handlers finish for up
    /// to `grace` (then cancels them and hands their messages back), and returns once no lease
    /// is held.
    pub async fn shutdown(mut self, grace: Duration) -> ShutdownReport {
        self.shut_down = true;
        let (reply, report) = oneshot::channel();
        if self
            .inbox
            .send(Event::Shutdown(grace, Some(reply)))
            .is_err()
        {
            return ShutdownReport::default();
        }
        report.await.unwrap_or_default()
    }

    /// A snapshot of the engine's counters (`None` once the worker has stopped).
    pub async fn stats(&self) -> Option<Stats> {
        let (reply, stats) = oneshot::channel();
        self.inbox.send(Event::Stats(reply)).ok()?;
        stats.await.ok()
    }
}

impl<P> Drop for Worker<P> {
    fn drop(&mut self) {
        if !self.shut_down {
            let _ = self.inbox.send(Event::Shutdown(self.shutdown_grace, None));
        }
    }
}
