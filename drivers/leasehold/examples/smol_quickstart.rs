//! A worker on smol over the in-memory backend: `cargo run -p leasehold --example smol_quickstart`

use std::time::Duration;

use leasehold::memory::{MemoryStream, StreamConfig};
use leasehold::{Config, Delivery, Outcome};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    smol::block_on(async {
        let stream = MemoryStream::new(StreamConfig::new(Duration::from_secs(60)))?;
        for n in 1..=3u32 {
            stream.publish(serde_json::to_vec(&n)?);
        }

        let worker = leasehold::smol::worker()
            .config(Config::default().concurrency(8))
            .stream(
                "numbers",
                stream.consumer("worker-1")?,
                |delivery: Delivery<u32>| async move {
                    println!("got {}", delivery.message());
                    Outcome::Done
                },
            )
            .start()?;

        while !stream.is_empty() {
            smol::Timer::after(Duration::from_millis(10)).await;
        }
        let report = worker.shutdown(Duration::from_secs(30)).await;
        println!("{report:?}");
        Ok(())
    })
}
