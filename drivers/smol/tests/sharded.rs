//! A sharded queue on smol, in real time: two workers share a memory queue of 4 shards; every
//! shard gets a fetcher, every message is done once, and a worker shut down leaves the
//! membership.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use leasehold_memory::{MemoryQueue, StreamConfig};
use leasehold_smol::{core::Shards, Config, Delivery, Outcome, ShardedProducer};

#[test]
fn two_smol_workers_share_a_sharded_queue() {
    smol::block_on(async {
        let shards = Shards::new("jobs", 4).unwrap();
        let claim = Duration::from_secs(1);
        let queue = MemoryQueue::new(shards.clone(), StreamConfig::new(claim)).unwrap();
        let runs: Arc<Mutex<HashMap<u64, u32>>> = Arc::default();
        let mut workers = Vec::new();
        for name in ["a", "b"] {
            let runs = runs.clone();
            let worker = leasehold_smol::worker()
                .config(
                    Config::default()
                        .concurrency(4)
                        .claim_timeout(claim)
                        .poll_interval(Duration::from_millis(20)),
                )
                .sharded(
                    shards.clone(),
                    queue.consumers(name).unwrap(),
                    move |d: Delivery<u64>| {
                        let runs = runs.clone();
                        async move {
                            *runs.lock().unwrap().entry(*d.message()).or_default() += 1;
                            Outcome::Done
                        }
                    },
                )
                .start()
                .unwrap();
            workers.push(worker);
        }
        let producer: ShardedProducer<u64, _> =
            ShardedProducer::new(shards.clone(), queue.streams().iter().cloned()).unwrap();
        producer
            .publish_batch(&(0..100).collect::<Vec<u64>>())
            .await
            .unwrap();
        let start = Instant::now();
        while runs.lock().unwrap().len() < 100 {
            assert!(start.elapsed() < Duration::from_secs(20), "not all done");
            smol::Timer::after(Duration::from_millis(10)).await;
        }
        assert_eq!(queue.members(claim), ["a", "b"]);
        let mut every = [0; 4];
        for w in &workers {
            for s in w.snapshot().await.unwrap().streams {
                let shard = Shards::parse(&s.stream).unwrap().1;
                every[usize::from(shard)] += usize::from(s.fetching);
            }
        }
        assert!(
            every.iter().all(|&n| n >= 1),
            "every shard fetched: {every:?}"
        );
        let b = workers.pop().unwrap();
        assert_eq!(b.shutdown(Duration::from_secs(5)).await.lost, 0);
        // Its leave is sent at shutdown, not waited for.
        let start = Instant::now();
        while queue.members(claim) != ["a"] {
            assert!(start.elapsed() < Duration::from_secs(5), "b never left");
            smol::Timer::after(Duration::from_millis(10)).await;
        }
        let a = workers.pop().unwrap();
        assert_eq!(a.shutdown(Duration::from_secs(5)).await.lost, 0);
        assert!(queue.is_empty());
        assert!(runs.lock().unwrap().values().all(|&n| n == 1));
    });
}
