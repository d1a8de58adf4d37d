//! Sharded queues as the memory inspector sees them: streams it knows as `{queue:i}` are
//! grouped under their queue, and a queue's overview totals its shards.
#![cfg(not(loom))]

use futures_lite::future::block_on;
use leasehold_core::{DeadLetterReason, Discovered, LeaseRef, SettleResult};
use leasehold_memory::{MemoryInspector, MemoryStream, StreamConfig};

#[test]
fn shards_are_grouped_into_their_queue_with_totals() {
    let shards: Vec<MemoryStream> = (0..3)
        .map(|_| MemoryStream::new(StreamConfig::default()).unwrap())
        .collect();
    let mut inspector = MemoryInspector::new();
    for (i, stream) in shards.iter().enumerate() {
        for n in 0..=i {
            stream.publish(format!("{i}-{n}"));
        }
        inspector.add(format!("{{orders:{i}}}"), stream);
    }
    let plain = MemoryStream::new(StreamConfig::default()).unwrap();
    inspector.add("plain", &plain);
    // Shard 2: two held, one of them then dead-lettered.
    let worker = shards[2].consumer("w").unwrap();
    let held = worker.fetch_now(2);
    assert_eq!(held.len(), 2);
    let reason = DeadLetterReason::Rejected("bad".into());
    assert_eq!(
        worker.dead_letter_now(&LeaseRef::from(&held[0]), &reason),
        SettleResult::Ok
    );

    let found = inspector.discover();
    let names: Vec<&str> = found.iter().map(Discovered::name).collect();
    assert_eq!(names, ["orders", "plain"]);
    let queue = block_on(inspector.queue("orders"))
        .unwrap()
        .expect("a queue");
    assert_eq!(queue.shards.len(), 3);
    // 1 + 2 + 3 published, 1 dead-lettered; 1 held.
    assert_eq!((queue.length, queue.pending, queue.dead_letters), (5, 1, 1));
    assert_eq!(queue.groups.len(), 1);
    assert_eq!(queue.groups[0].shards, 3);
    assert_eq!(block_on(inspector.queue("plain")).unwrap(), None);
    assert_eq!(block_on(inspector.queue("none")).unwrap(), None);
}

#[test]
fn a_memory_queue_is_known_by_its_shards() {
    use leasehold_core::Shards;
    use leasehold_memory::MemoryQueue;

    let queue = MemoryQueue::new(Shards::new("jobs", 4).unwrap(), StreamConfig::default()).unwrap();
    for (i, stream) in queue.streams().iter().enumerate() {
        for n in 0..i {
            stream.publish(format!("{i}-{n}"));
        }
    }
    let inspector = MemoryInspector::new().with_queue(&queue);
    let names: Vec<&str> = inspector.names().collect();
    assert_eq!(names, ["{jobs:0}", "{jobs:1}", "{jobs:2}", "{jobs:3}"]);
    let overview = block_on(inspector.queue("jobs")).unwrap().expect("a queue");
    assert_eq!((overview.shards.len(), overview.length), (4, 6));
}
