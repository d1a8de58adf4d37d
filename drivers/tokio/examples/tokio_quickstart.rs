//! A worker on tokio over the in-memory backend: `cargo run -p leasehold-tokio --example tokio_quickstart`

use std::time::Duration;

use leasehold_memory::{MemoryStream, StreamConfig};
use leasehold_tokio::{Config, Delivery, Outcome};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Resize {
    image: u64,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let stream = MemoryStream::new(StreamConfig::new(Duration::from_secs(60)))?;
    for image in 1..=3 {
        stream.publish(serde_json::to_vec(&Resize { image })?);
    }

    let worker = leasehold_tokio::worker()
        .config(Config::default().concurrency(8)) // claim timeout 60 s, like the stream
        .stream(
            "images",
            stream.consumer("worker-1")?,
            |job: Delivery<Resize>| async move {
                println!(
                    "resizing image {} (attempt {})",
                    job.message().image,
                    job.attempt()
                );
                Outcome::Done
            },
        )
        .start()?;

    while !stream.is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let report = worker.shutdown(Duration::from_secs(30)).await;
    println!("{report:?}");
    Ok(())
}
