//! # leasehold-dashboard: see a running system, and act on it, from a browser
//!
//! What job-queue dashboards show (depth, failures, retry buttons) and what only leasehold
//! has: **lease health**, which messages are held, by whom, and how close each lease is to
//! lapsing.
//!
//! - **Overview**: every stream with length, lag, pending, oldest pending age, dead letters,
//!   delayed and consumers, and charts of settled messages per second and depth over the last
//!   minutes; every command queue with its counts per status.
//! - **A stream**: its consumers (pending, idle) and its held leases, paged, each with a bar
//!   of its idle time against the claim timeout: amber after two missed heartbeats, red once
//!   another consumer may take it over.
//! - **Dead letters**: reason, deliveries, time, the payload on demand (pretty JSON, text or
//!   hex); requeue and purge for one, a selection or all.
//! - **A command queue**: its commands by status, a command's state and attempts; cancel and
//!   retry.
//!
//! ## How it reads
//!
//! A [`Source`] names the streams and queues and hands out the inspector. One sampler task
//! reads every stream's [overview](leasehold_core::Inspector::overview) and every queue's
//! [counts](leasehold_commands::CommandQueue::counts) once per
//! [`refresh`](Options::refresh), whoever is looking; every viewer renders from that one
//! snapshot. The paged tables (leases, dead letters, commands) are read when a page asks and
//! kept for one refresh interval, so viewers of the same page share one read. Open pages
//! update their live part in place (a few lines of plain script, `fetch` and swap), keeping
//! the rows a viewer ticked. Nothing ever lists a whole pending list or dead-letter stream:
//! every read is one page, so a refresh costs the same at 100 or at 100 000 entries.
//!
//! ## Safe by default
//!
//! It binds to loopback unless told otherwise, and anywhere else only with a token
//! ([`Options::token`]; [`Options::validate`] refuses an open bind). Actions are POST forms
//! carrying a per-process CSRF secret, refused when the browser says they came from another
//! site; [`Options::read_only`] hides and refuses them all. Every string from Redis is
//! escaped by the templates (maud), and the content security policy allows no script but the
//! dashboard's own. Payloads are shown, never logged.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use leasehold_dashboard::{Dashboard, Options, RedisSource};
//!
//! // Every stream on this Redis (discovered), on http://127.0.0.1:8080.
//! let source = RedisSource::connect("redis://127.0.0.1:6379", vec![], vec![]).await?;
//! let dashboard = Dashboard::bind(source, Options::default()).await?;
//! println!("http://{}", dashboard.local_addr());
//! dashboard.serve(std::future::pending()).await?;
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]

mod options;
mod pages;
mod sampler;
mod server;
mod source;
mod state;
pub mod text;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

pub use options::{Options, OptionsError};
#[cfg(feature = "memory")]
pub use source::MemorySource;
#[cfg(feature = "redis")]
pub use source::RedisSource;
pub use source::{Catalog, Queue, Source};

use sampler::{Sampler, Snapshot};
use state::{Cache, Notices, Queues, Shared};

/// Why the dashboard could not start or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DashboardError {
    /// The options do not fit together.
    #[error(transparent)]
    Options(#[from] OptionsError),
    /// The address could not be bound, or serving failed.
    #[error("cannot serve on {addr}: {source}")]
    Io {
        /// Where.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// A dashboard bound to its address, its first round read; [`serve`](Self::serve) runs it.
pub struct Dashboard<S: Source> {
    listener: tokio::net::TcpListener,
    addr: SocketAddr,
    shared: Arc<Shared<S>>,
    sampler: Sampler<S>,
    snapshots: tokio::sync::watch::Sender<Arc<Snapshot>>,
}

impl<S: Source> std::fmt::Debug for Dashboard<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dashboard")
            .field("addr", &self.addr)
            .field("options", &self.shared.options)
            .finish_non_exhaustive()
    }
}

impl<S: Source> Dashboard<S> {
    /// Checks `options`, binds, and reads the first round (so the first page shows figures).
    ///
    /// # Errors
    ///
    /// Options that do not fit together, or an address that cannot be bound.
    pub async fn bind(source: S, options: Options) -> Result<Self, DashboardError> {
        options.validate()?;
        let io = |source| DashboardError::Io {
            addr: options.bind,
            source,
        };
        let listener = tokio::net::TcpListener::bind(options.bind)
            .await
            .map_err(io)?;
        let addr = listener.local_addr().map_err(io)?;
        let source = Arc::new(source);
        let queues = Arc::new(Queues::default());
        let mut sampler = Sampler::new(Arc::clone(&source), Arc::clone(&queues), options.clone());
        let first = sampler.round(std::time::Instant::now()).await;
        let (snapshots, snapshot) = tokio::sync::watch::channel(Arc::new(first));
        let shared = Arc::new(Shared {
            source,
            pages: Cache::new(options.refresh),
            csrf: state::secret().map_err(io)?,
            options,
            queues,
            snapshot,
            notices: Notices::default(),
        });
        Ok(Self {
            listener,
            addr,
            shared,
            sampler,
            snapshots,
        })
    }

    /// Where it listens (the port, when [`Options::bind`] asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves until `shutdown` completes, then finishes the requests in flight.
    ///
    /// # Errors
    ///
    /// Serving failed.
    pub async fn serve(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), DashboardError> {
        let Self {
            listener,
            addr,
            shared,
            sampler,
            snapshots,
        } = self;
        let sampling = tokio::spawn(sampler.run(snapshots));
        let served = axum::serve(listener, server::router(shared))
            .with_graceful_shutdown(shutdown)
            .await
            .map_err(|source| DashboardError::Io { addr, source });
        sampling.abort();
        served
    }
}
