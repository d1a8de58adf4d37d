//! `leasehold dashboard`: the web dashboard on a Redis, until Ctrl-C; and `demo --dashboard`,
//! the same pages over the demo's in-memory stream while it runs.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;
use leasehold::dashboard::{Dashboard, MemorySource, Options, RedisSource};
use leasehold::memory::{MemoryInspector, MemoryStream};

use crate::args::parse_duration;
use crate::ops::{host_of, OpsError};

/// Flags of `leasehold dashboard`.
#[derive(Debug, Args)]
pub struct DashboardArgs {
    /// The Redis URL (`redis://[user:password@]host:port/db`).
    #[arg(long, env = "LEASEHOLD_REDIS_URL", value_name = "URL")]
    pub redis: String,
    /// Where to listen. Anything but loopback needs --token.
    #[arg(long, default_value = "127.0.0.1:8080", value_name = "ADDR")]
    pub bind: SocketAddr,
    /// Streams to show (repeat it). Without --stream and --queue, every stream of the
    /// database is shown, found by a SCAN every 30 s.
    #[arg(long = "stream", value_name = "STREAM")]
    pub streams: Vec<String>,
    /// Command queues to show (repeat it).
    #[arg(long = "queue", value_name = "QUEUE")]
    pub queues: Vec<String>,
    /// A secret every request must carry (16+ visible characters): required off loopback.
    #[arg(long, env = "LEASEHOLD_DASHBOARD_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Hide and refuse every action (requeue, purge, cancel, retry).
    #[arg(long)]
    pub read_only: bool,
    /// How often the figures are read (once for all viewers) and pages update.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub refresh: Duration,
    /// The workers' claim timeout, against which each lease's idle time is shown.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub claim_timeout: Duration,
}

impl DashboardArgs {
    /// The dashboard's options.
    pub fn options(&self) -> Options {
        Options {
            bind: self.bind,
            token: self.token.clone(),
            read_only: self.read_only,
            refresh: self.refresh,
            claim_timeout: self.claim_timeout,
            discover_every: Options::default().discover_every.max(self.refresh),
            history: Options::default().history.min(self.refresh * 1000),
            ..Options::default()
        }
    }
}

/// Serves the dashboard until Ctrl-C.
pub fn run(args: &DashboardArgs) -> Result<(), OpsError> {
    let options = args.options();
    options
        .validate()
        .map_err(|e| OpsError::Usage(e.to_string()))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| OpsError::Usage(format!("cannot start the tokio runtime: {e}")))?;
    runtime.block_on(async {
        let source = RedisSource::connect(&args.redis, args.streams.clone(), args.queues.clone())
            .await
            .map_err(|e| {
                OpsError::Connect(format!(
                    "cannot use Redis at {}: {e}; is redis-server running there, and are the \
                     credentials right? (--redis or LEASEHOLD_REDIS_URL)",
                    host_of(&args.redis)
                ))
            })?;
        let dashboard = Dashboard::bind(source, options)
            .await
            .map_err(|e| OpsError::Usage(e.to_string()))?;
        eprintln!(
            "leasehold dashboard on http://{} ({}); Ctrl-C to stop",
            dashboard.local_addr(),
            host_of(&args.redis)
        );
        dashboard
            .serve(async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await
            .map_err(|e| OpsError::Usage(e.to_string()))
    })
}

/// The dashboard over a demo's stream, on a thread of its own; it stops when the guard is
/// dropped.
pub struct DemoDashboard {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl DemoDashboard {
    /// Serves the dashboard over `stream` (shown as `name`) on `addr`, from a thread with a
    /// tokio runtime of its own (the demo may run on smol, and never blocks on this one).
    pub fn start(addr: SocketAddr, name: &str, stream: &MemoryStream) -> Result<Self, String> {
        let source = MemorySource::new(MemoryInspector::new().with_stream(name, stream));
        let options = Options {
            bind: addr,
            claim_timeout: stream.claim_timeout(),
            refresh: Duration::from_secs(1),
            ..Options::default()
        };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (bound, bound_rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(e) => {
                    let _ = bound.send(Err(format!("cannot start the dashboard's runtime: {e}")));
                    return;
                }
            };
            runtime.block_on(async move {
                let dashboard = match Dashboard::bind(source, options).await {
                    Ok(dashboard) => dashboard,
                    Err(e) => {
                        let _ = bound.send(Err(e.to_string()));
                        return;
                    }
                };
                let _ = bound.send(Ok(dashboard.local_addr()));
                let served = dashboard
                    .serve(async {
                        let _ = stopped.await;
                    })
                    .await;
                if let Err(error) = served {
                    eprintln!("dashboard: {error}");
                }
            });
        });
        let addr = bound_rx
            .recv()
            .map_err(|_| "the dashboard's thread ended before it listened".to_owned())??;
        eprintln!("dashboard on http://{addr}");
        Ok(Self {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for DemoDashboard {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
