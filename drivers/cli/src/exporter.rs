//! `--metrics-addr`: the workers' metrics (every `leasehold_*` name the library records through
//! the `metrics` facade) as Prometheus text over HTTP while a demo runs, and for
//! `--metrics-linger` after it, so a scraper also gets the final counts.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};

use crate::args::parse_duration;
use crate::CliError;

/// Bucket bounds of every `*_seconds` histogram: 1 ms to 5 min, for round trips, handler
/// durations, pickup delays and lease margins alike.
const BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0, 300.0,
];

/// The metrics flags, shared by the demos.
#[derive(Debug, Clone, Args)]
pub struct MetricsArgs {
    /// Serve Prometheus metrics at http://ADDR/metrics during the run (e.g. 127.0.0.1:9000).
    #[arg(long, value_name = "ADDR")]
    pub metrics_addr: Option<SocketAddr>,
    /// With --metrics-addr: keep serving this long after the summary is printed.
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = parse_duration, requires = "metrics_addr")]
    pub metrics_linger: Duration,
}

impl MetricsArgs {
    /// Installs the exporter as the process's metrics recorder and starts its listener (on a
    /// thread of its own), if an address was given. Call before the workers start: they make
    /// their metric handles then.
    pub fn serve(&self) -> Result<(), CliError> {
        let Some(addr) = self.metrics_addr else {
            return Ok(());
        };
        let failed = |e: &dyn std::fmt::Display| {
            CliError::Invalid(format!("cannot serve metrics on {addr}: {e}"))
        };
        PrometheusBuilder::new()
            .with_http_listener(addr)
            .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &BUCKETS)
            .map_err(|e| failed(&e))?
            .install()
            .map_err(|e| failed(&e))?;
        eprintln!("serving metrics on http://{addr}/metrics");
        Ok(())
    }

    /// After the run: keeps the exporter up for `--metrics-linger`.
    pub fn linger(&self) {
        if self.metrics_addr.is_some() && !self.metrics_linger.is_zero() {
            eprintln!("metrics stay up for {:?}", self.metrics_linger);
            std::thread::sleep(self.metrics_linger);
        }
    }
}
