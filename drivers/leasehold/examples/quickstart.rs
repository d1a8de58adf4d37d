//! A worker on tokio over the in-memory backend: `cargo run -p leasehold --example quickstart`

use std::time::Duration;

use leasehold::memory::{MemoryStream, StreamConfig};
use leasehold::{Config, Delivery, Outcome, Producer};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Resize {
    image: u64,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let stream = MemoryStream::new(StreamConfig::new(Duration::from_secs(60)))?;
    let producer = Producer::new(stream.clone()); // clone it into every task that publishes
    producer.publish(&Resize { image: 42 }).await?;

    let worker = leasehold::tokio::worker()
        .config(Config::default().concurrency(8)) // the claim timeout comes from the stream
        .stream(
            "images",
            stream.consumer("worker-1")?,
            |delivery: Delivery<Resize>| async move {
                println!(
                    "resizing image {} (attempt {})",
                    delivery.message().image,
                    delivery.attempt()
                );
                Outcome::Done // or Pending (invoke again later), retry(), reject(why); a panic is a failure
            },
        )
        .start()?;

    // Run until the stream is drained, or until Ctrl-C or SIGTERM (what Kubernetes, systemd and
    // Docker send): either way the shutdown is graceful.
    let drained = async {
        while !stream.is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::select! {
        () = drained => {}
        signal = leasehold::tokio::shutdown_signal() => eprintln!("{:?}: stopping", signal?),
    }
    let report = worker.shutdown(Duration::from_secs(30)).await; // acked, released, cancelled, ...
    println!("{report:?}");
    Ok(())
}
