//! A worker on Redis Streams: `cargo run -p leasehold-redis --example redis_worker -- redis://127.0.0.1:6379/`
//!
//! Consumes the stream `jobs` with the consumer group `workers`; each entry's `data` field holds
//! a JSON string. A job that is not finished yet answers `Pending` and is re-invoked every
//! second while the worker keeps its lease; Ctrl-C shuts down gracefully.

use std::time::Duration;

use leasehold_redis::{RedisBackend, RedisConfig};
use leasehold_tokio::{Config, Delivery, Outcome};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "redis://127.0.0.1:6379/".into());
    let claim_timeout = Duration::from_secs(60);
    let backend = RedisBackend::connect(
        RedisConfig::new(url, "jobs", "workers").claim_timeout(claim_timeout),
    )
    .await?;
    println!("consuming as {}", backend.consumer_name());

    let worker = leasehold_tokio::worker()
        .config(
            Config::default()
                .concurrency(100)
                .claim_timeout(claim_timeout)
                .repoll_interval(Duration::from_secs(1)),
        )
        .stream("jobs", backend, |job: Delivery<String>| async move {
            if !job.lease_valid() {
                return Outcome::Retry { delay: None }; // lost it while stalled: do nothing
            }
            println!(
                "{} (delivery {}): {}",
                job.message_id(),
                job.delivery_count(),
                job.message()
            );
            if job.message().starts_with("wait") && job.attempt() < 3 {
                Outcome::Pending
            } else {
                Outcome::Done
            }
        })
        .start()?;

    tokio::signal::ctrl_c().await?;
    let report = worker.shutdown(Duration::from_secs(30)).await;
    println!("{report:?}");
    Ok(())
}
