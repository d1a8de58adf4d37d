//! Publishing to Redis: at once, in batches, delayed and deduplicated.
//! `cargo run -p leasehold --example producer` (needs a Redis on 127.0.0.1:6379)

use std::time::Duration;

use leasehold::redis::{PublisherConfig, RedisPublisher};
use leasehold::{Producer, PublishOptions};
use serde::Serialize;

#[derive(Serialize)]
struct Invoice {
    order: u64,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // No consumer group, no consumer name: a producer only appends.
    let publisher =
        RedisPublisher::connect(PublisherConfig::new("redis://127.0.0.1:6379/", "invoices"))
            .await?;
    let producer: Producer<Invoice, _> = Producer::new(publisher);

    let id = producer.publish(&Invoice { order: 1 }).await?;
    let ids = producer
        .publish_batch(&[Invoice { order: 2 }, Invoice { order: 3 }]) // one round trip
        .await?;
    println!("published {id} and {ids:?}");

    // Due in an hour by the Redis server's clock; a retry of this publish within a day (the
    // process restarted, the call timed out) enqueues nothing and answers the first id.
    let options = PublishOptions::new()
        .delay(Duration::from_secs(3600))
        .dedupe("invoice-order-4", Duration::from_secs(24 * 3600));
    let first = producer
        .publish_with(&Invoice { order: 4 }, options.clone())
        .await?;
    let again = producer
        .publish_with(&Invoice { order: 4 }, options)
        .await?;
    assert!(again.duplicate && again.id == first.id);

    let delayed = producer.delayed().await?;
    println!(
        "{} delayed, the next due in {:?}",
        delayed.len, delayed.next_due
    );
    Ok(())
}
