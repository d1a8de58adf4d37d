//! A worker on Redis Streams: `cargo run -p leasehold --example redis_worker`
//!
//! Consumes the stream `jobs` of the Redis at 127.0.0.1:6379 with the consumer group `workers`;
//! each entry's `data` field holds a JSON string. Ctrl-C or SIGTERM shuts it down gracefully.

use std::time::Duration;

use leasehold::redis::{RedisBackend, RedisConfig};
use leasehold::{Delivery, Outcome};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The claim timeout is the backend's (it decides when a peer may take a message over);
    // the worker takes it from there.
    let config = RedisConfig::new("redis://127.0.0.1:6379/", "jobs", "workers")
        .claim_timeout(Duration::from_secs(60));
    let backend = RedisBackend::connect(config).await?;

    let worker = leasehold::tokio::worker()
        .stream("jobs", backend, |delivery: Delivery<String>| async move {
            if !delivery.lease_valid() {
                return Outcome::retry(); // lost it while stalled: commit nothing
            }
            println!(
                "{} (delivery {}): {}",
                delivery.message_id(),
                delivery.delivery_count(),
                delivery.message()
            );
            Outcome::Done
        })
        .start()?;

    // Ctrl-C or SIGTERM (what Kubernetes, systemd and Docker send): running handlers get 30 s
    // to finish, and what is left is handed back at once for another replica to take.
    let signal = leasehold::tokio::shutdown_signal().await?;
    eprintln!("{signal:?}: stopping");
    worker.shutdown(Duration::from_secs(30)).await;
    Ok(())
}
