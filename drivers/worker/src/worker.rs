//! The worker API: a builder over the engine config, typed handlers, shutdown with a report.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::channel::oneshot;
use leasehold_core::{
    Backend, Config, ConfigError, LeaseEngine, Membership, MembershipConfig, MembershipError,
    Settings, Stats,
};
use serde::de::DeserializeOwned;

use crate::codec::{Decode, Json};
use crate::delivery::{Delivery, IntoOutcome};
use crate::dispatch::{EnqueuedAt, Env, MakeDispatch};
use crate::driver::{Driver, DriverOptions, Sharding, Stream};
use crate::event::Event;
use crate::health::{Health, HealthCell};
use crate::inbox::Inbox;
use crate::meters::StreamMeters;
use crate::report::{ShutdownReport, Snapshot};
use crate::runtime::Runtime;
use crate::sharded::ShardedQueue;

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
    /// A sharded queue cannot be served as given (backends missing, of other shards or
    /// consumers, a second queue).
    #[error("{0}")]
    Sharded(String),
    /// The membership configuration of a sharded queue is invalid.
    #[error(transparent)]
    Membership(#[from] MembershipError),
    /// A backend lets others take leases after a different idle time than the config says.
    #[error(
        "stream {stream:?}: the backend's claim timeout is {backend:?} but the worker's config \
         says {config:?}; leave it out of the config (the worker then takes the backend's) or \
         set both to the same value"
    )]
    ClaimTimeoutMismatch {
        /// The stream's name.
        stream: String,
        /// The backend's claim timeout.
        backend: Duration,
        /// The engine config's claim timeout.
        config: Duration,
    },
    /// Two streams' backends have different claim timeouts, and one engine heartbeats both.
    #[error(
        "streams {first:?} and {second:?} have different claim timeouts ({first_timeout:?} and \
         {second_timeout:?}); one worker renews all its leases on one cadence: give them the \
         same claim timeout or serve them from separate workers"
    )]
    ClaimTimeoutsDiffer {
        /// One stream.
        first: String,
        /// Its backend's claim timeout.
        first_timeout: Duration,
        /// Another stream.
        second: String,
        /// Its backend's claim timeout.
        second_timeout: Duration,
    },
}

/// A stream added to the builder: its dispatcher is made at `start`, when the inbox exists.
pub(crate) struct Added<R, B: Backend> {
    pub(crate) name: Arc<str>,
    pub(crate) backend: Arc<B>,
    pub(crate) make: MakeDispatch<R, B::Payload>,
}

/// Builds a [`Worker`]: engine config, driver options, and one entry per stream.
pub struct WorkerBuilder<R: Runtime, B: Backend> {
    runtime: R,
    config: Config,
    options: DriverOptions,
    pub(crate) streams: Vec<Added<R, B>>,
    /// The sharded queue among the streams, if any.
    pub(crate) sharded: Option<ShardedQueue>,
    pub(crate) membership: MembershipConfig,
    /// The first mistake a builder method found: `start` returns it.
    pub(crate) error: Option<WorkerError>,
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
                call_timeout: Duration::from_secs(10),
            },
            streams: Vec::new(),
            sharded: None,
            membership: MembershipConfig::default(),
            error: None,
        }
    }

    /// The engine configuration (concurrency, retries, cancel grace, ...), validated by
    /// [`start`](Self::start). Leave its claim timeout unset to take the backends'.
    #[must_use]
    pub fn config(mut self, config: Config) -> Self {
        self.config = config;
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
        M: DeserializeOwned + Send + 'static,
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
        C: Decode<M>,
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

    /// The config with the claim timeout its backends know, or an error when they disagree
    /// with it or with each other.
    fn config_with_claim_timeout(&self) -> Result<Config, WorkerError> {
        let known = self
            .streams
            .iter()
            .filter_map(|s| Some((&s.name, s.backend.claim_timeout()?)));
        match self.config.configured_claim_timeout() {
            Some(config) => {
                for (stream, backend) in known {
                    if backend != config {
                        return Err(WorkerError::ClaimTimeoutMismatch {
                            stream: stream.to_string(),
                            backend,
                            config,
                        });
                    }
                }
                Ok(self.config.clone())
            }
            None => {
                let mut adopted: Option<(&Arc<str>, Duration)> = None;
                for (stream, timeout) in known {
                    match adopted {
                        Some((first, first_timeout)) if first_timeout != timeout => {
                            return Err(WorkerError::ClaimTimeoutsDiffer {
                                first: first.to_string(),
                                first_timeout,
                                second: stream.to_string(),
                                second_timeout: timeout,
                            })
                        }
                        Some(_) => {}
                        None => adopted = Some((stream, timeout)),
                    }
                }
                Ok(match adopted {
                    Some((_, timeout)) => self.config.clone().claim_timeout(timeout),
                    None => self.config.clone(),
                })
            }
        }
    }

    /// Validates everything and starts the worker's driver task.
    pub fn start(mut self) -> Result<Worker<B::Payload>, WorkerError> {
        if let Some(error) = self.error.take() {
            return Err(error);
        }
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
        let config = self.config_with_claim_timeout()?;
        let engine = LeaseEngine::with_streams(&config, sources, self.runtime.now())?;
        let settings = engine.settings().clone();
        let sharding = match self.sharded.take() {
            Some(queue) => {
                let policy = self.membership.validate(settings.claim_timeout)?;
                let membership =
                    Membership::new(queue.shards, queue.member, policy, self.runtime.now());
                Some(Sharding::new(membership, queue.io, queue.first))
            }
            None => None,
        };
        let cancel_grace = settings.cancel_grace;
        let inbox = Arc::new(Inbox::new());
        let env = Env {
            rt: self.runtime.clone(),
            inbox: inbox.clone(),
            base: self.runtime.now(),
            grace: cancel_grace,
        };
        let base = env.base;
        let streams = self
            .streams
            .into_iter()
            .map(|added| {
                let meters = StreamMeters::new(&added.name);
                let backend = added.backend.clone();
                let enqueued_at: EnqueuedAt = Arc::new(move |id| backend.enqueued_at(id));
                Stream {
                    dispatch: (added.make)(
                        env.clone(),
                        added.name.clone(),
                        meters.handler.clone(),
                        enqueued_at,
                    ),
                    meters,
                    throttles: Default::default(),
                    name: added.name,
                    backend: added.backend,
                }
            })
            .collect();
        let health = Arc::new(HealthCell::new());
        let driver = Driver::new(
            self.runtime.clone(),
            engine,
            streams,
            inbox.clone(),
            health.clone(),
            self.options,
            base,
        )
        .with_sharding(sharding);
        self.runtime.spawn(Box::pin(driver.run()));
        Ok(Worker {
            inbox,
            settings,
            health,
            shut_down: false,
        })
    }
}

/// A running worker. Dropping it starts a graceful shutdown with the configured grace.
#[must_use = "dropping a Worker shuts it down at once; keep it, and call shutdown() to wait"]
pub struct Worker<P> {
    inbox: Arc<Inbox<Event<P>>>,
    settings: Settings,
    health: Arc<HealthCell>,
    shut_down: bool,
}

impl<P> std::fmt::Debug for Worker<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker").finish_non_exhaustive()
    }
}

impl<P> Worker<P> {
    /// The configuration the worker runs with, every default resolved (the claim timeout is
    /// its backends' when the config left it out).
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

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

    /// How the worker is doing now: running, degraded (a fatal backend error halted some of
    /// its streams) or stopped.
    pub fn health(&self) -> Health {
        self.health.get()
    }

    /// Completes once the worker consumes nothing any more (shut down, its task ended, or
    /// every stream halted), with why.
    pub async fn closed(&self) -> Health {
        self.health.stopped().await
    }

    /// What the worker is doing now, per stream: invocations running, leases held and
    /// waiting, halted streams; and its lifetime counters (`None` once it has stopped).
    pub async fn snapshot(&self) -> Option<Snapshot> {
        let (reply, snapshot) = oneshot::channel();
        self.inbox.send(Event::Snapshot(reply)).ok()?;
        snapshot.await.ok()
    }

    /// The engine's lifetime counters (`None` once the worker has stopped).
    pub async fn stats(&self) -> Option<Stats> {
        Some(self.snapshot().await?.stats)
    }
}

impl<P> Drop for Worker<P> {
    fn drop(&mut self) {
        if !self.shut_down {
            let _ = self
                .inbox
                .send(Event::Shutdown(self.settings.shutdown_grace, None));
        }
    }
}
