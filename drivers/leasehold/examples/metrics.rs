//! A service that serves its workers' metrics to Prometheus and a readiness probe from their
//! health: `cargo run -p leasehold --example metrics`, then
//! `curl 127.0.0.1:9000/metrics` and `curl -i 127.0.0.1:9001/ready`. Ctrl-C or SIGTERM stops
//! it.

use std::time::Duration;

use leasehold::memory::{MemoryStream, StreamConfig};
use leasehold::{Config, Delivery, Health, Outcome, Worker};
use metrics_exporter_prometheus::PrometheusBuilder;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The recorder first: workers register their metrics when they start.
    PrometheusBuilder::new()
        .with_http_listener(([127, 0, 0, 1], 9000))
        .install()?;

    let stream = MemoryStream::new(StreamConfig::new(Duration::from_secs(30)))?;
    let worker = leasehold::tokio::worker()
        .config(Config::default().concurrency(4))
        .stream(
            "emails",
            stream.consumer("worker-1")?,
            |mail: Delivery<u64>| async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                if mail.message().is_multiple_of(10) && mail.delivery_count() == 1 {
                    return Outcome::retry(); // a flaky mail server, now and then
                }
                Outcome::Done
            },
        )
        .start()?;

    // Some traffic to look at.
    let producer = stream.clone();
    tokio::spawn(async move {
        for n in 1.. {
            producer.publish(serde_json::to_vec(&n).expect("a number encodes"));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });

    let probe = TcpListener::bind("127.0.0.1:9001").await?;
    println!("metrics on http://127.0.0.1:9000/metrics, readiness on http://127.0.0.1:9001/ready");
    tokio::select! {
        _ = serve_readiness(probe, &worker) => {}
        health = worker.closed() => eprintln!("the worker stopped: {health:?}"),
        signal = leasehold::tokio::shutdown_signal() => eprintln!("{:?}: stopping", signal?),
    }
    let report = worker.shutdown(Duration::from_secs(10)).await;
    println!("{report:?}");
    Ok(())
}

/// Answers every request with 200 while the worker consumes all its streams, 503 otherwise
/// (a fatal backend error halted one: the reason is in the body).
async fn serve_readiness<P>(probe: TcpListener, worker: &Worker<P>) -> std::io::Result<()> {
    loop {
        let (mut conn, _) = probe.accept().await?;
        let mut request = [0u8; 1024];
        let _ = conn.read(&mut request).await?;
        let (status, body) = match worker.health() {
            Health::Running => ("200 OK", "ready".to_owned()),
            other => ("503 Service Unavailable", format!("{other:?}")),
        };
        let response = format!(
            "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        conn.write_all(response.as_bytes()).await?;
    }
}
