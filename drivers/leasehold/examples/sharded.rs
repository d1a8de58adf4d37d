//! One logical queue over 8 shard streams, shared by two workers; one customer's orders go to
//! one shard. `cargo run -p leasehold --example sharded` (in memory, no setup)

use std::time::Duration;

use leasehold::memory::{MemoryQueue, StreamConfig};
use leasehold::{Config, Delivery, Outcome, ShardedProducer, Shards};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Order {
    customer: String,
    step: u32,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Streams `{orders:0}` … `{orders:7}`: on a Redis Cluster each is a hash slot of its own.
    let shards = Shards::new("orders", 8)?;
    let queue = MemoryQueue::new(shards.clone(), StreamConfig::new(Duration::from_secs(60)))?;
    // On Redis: RedisPublisher::connect_shards(PublisherConfig::new(url, "orders"), &shards)
    let producer = ShardedProducer::new(shards.clone(), queue.streams().iter().cloned())?;

    let mut workers = Vec::new();
    for name in ["worker-1", "worker-2"] {
        // On Redis: RedisBackend::connect_shards(RedisConfig::new(url, "orders", "workers"),
        // &shards): one backend per shard over one command connection.
        let backends = queue.consumers(name)?;
        let worker = leasehold::tokio::worker()
            .config(Config::default().concurrency(4)) // one budget over all its shards
            .sharded(
                shards.clone(),
                backends,
                |order: Delivery<Order>| async move {
                    let Order { customer, step } = order.message();
                    println!("{customer}: step {step}");
                    Outcome::Done
                },
            )
            .start()?;
        workers.push(worker);
    }

    for step in 0..3 {
        for customer in ["customer-1", "customer-2", "customer-3"] {
            // A customer's orders all go to the shard of its key, in publish order (handled in
            // that order only by one fetcher per shard at concurrency 1: see GUIDE.md).
            let order = Order {
                customer: customer.into(),
                step,
            };
            producer.publish_keyed(customer, &order).await?;
        }
    }
    // Without a key: the next shard, round-robin.
    let anyone = Order {
        customer: "anyone".into(),
        step: 0,
    };
    producer.publish(&anyone).await?;

    while !queue.is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for worker in workers {
        worker.shutdown(Duration::from_secs(30)).await;
    }
    Ok(())
}
