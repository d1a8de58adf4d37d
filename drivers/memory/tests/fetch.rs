//! Fetch: the bound on `max`, reclaims reaching every stale entry, the split between reclaims and new entries,
//! and waiting (manual clock: never; system clock: until a publish, a release or a lapse).
#![cfg(not(loom))]

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::*;
use leasehold_core::{Backend, SettleResult};
use leasehold_memory::{MemoryStream, StreamConfig};

/// Publishes `n` messages and lets consumer "dead" take them all, then lets them lapse.
fn stale(stream: &MemoryStream, clock: &leasehold_memory::ManualClock, n: usize) {
    let dead = stream.consumer("dead").unwrap();
    for i in 0..n {
        stream.publish(format!("old {i}"));
    }
    assert_eq!(dead.fetch_now(n).len(), n);
    clock.advance(TIMEOUT);
}

#[test]
fn fetch_never_returns_more_than_asked() {
    let (stream, clock) = stream();
    stale(&stream, &clock, 7);
    for i in 0..7 {
        stream.publish(format!("new {i}"));
    }
    let worker = stream.consumer("w").unwrap();
    assert!(worker.fetch_now(0).is_empty());
    assert_eq!(
        stream
            .pending_entries()
            .iter()
            .filter(|(_, p)| p.owner == "w")
            .count(),
        0
    );
    let mut seen = BTreeSet::new();
    for max in [1, 2, 3, 4, 100] {
        let batch = worker.fetch_now(max);
        assert!(batch.len() <= max, "{} > {max}", batch.len());
        assert_eq!(batch.len(), max.min(14 - seen.len()));
        for m in &batch {
            assert!(seen.insert(m.id.clone()), "{} delivered twice", m.id);
        }
    }
    assert_eq!(seen.len(), 14);
}

#[test]
fn the_reclaim_cursor_reaches_every_stale_entry() {
    // 100 stale entries, fetches of 2, and everything lapses again before each fetch (the
    // reclaimer never renews). A scan from the start of the pending list would take 0-1 and
    // 0-2 every time; taking those lapsed longest first goes round.
    let (stream, clock) = stream();
    stale(&stream, &clock, 100);
    let worker = stream.consumer("w").unwrap();
    let mut order = Vec::new();
    for _ in 0..50 {
        let batch = worker.fetch_now(2);
        assert_eq!(batch.len(), 2);
        order.extend(batch.iter().map(|m| m.id.to_string()));
        clock.advance(TIMEOUT);
    }
    let expected: Vec<String> = (1..=100).map(|n| format!("0-{n}")).collect();
    assert_eq!(order, expected);
    // And it wraps around: the next round starts at the beginning again, delivery count 3.
    let batch = worker.fetch_now(1);
    assert_eq!(ids(&batch), ["0-1"]);
    assert_eq!(batch[0].delivery_count, 3);
}

#[test]
fn new_entries_flow_while_reclaims_happen() {
    // Plenty to reclaim and fetches of one: new entries still get every other slot.
    let (stream, clock) = stream();
    stale(&stream, &clock, 50);
    let worker = stream.consumer("w").unwrap();
    let mut new = 0;
    let mut reclaimed = 0;
    for i in 0..20 {
        stream.publish(format!("fresh {i}"));
        let batch = worker.fetch_now(1);
        assert_eq!(batch.len(), 1);
        if batch[0].delivery_count == 1 {
            new += 1;
        } else {
            reclaimed += 1;
        }
    }
    assert_eq!((new, reclaimed), (10, 10));
}

#[test]
fn reclaims_flow_while_new_entries_keep_coming() {
    let (stream, clock) = stream();
    stale(&stream, &clock, 10);
    for i in 0..100 {
        stream.publish(format!("fresh {i}"));
    }
    let worker = stream.consumer("w").unwrap();
    // Fetches of 4: two of each kind while both last.
    for _ in 0..5 {
        let batch = worker.fetch_now(4);
        let reclaimed = batch.iter().filter(|m| m.delivery_count > 1).count();
        assert_eq!((batch.len(), reclaimed), (4, 2));
    }
    // Reclaims exhausted: new entries take the whole fetch.
    let batch = worker.fetch_now(4);
    assert!(batch.iter().all(|m| m.delivery_count == 1));
    assert_eq!(batch.len(), 4);
}

#[test]
fn uncontested_fetches_do_not_upset_the_alternation() {
    // Fetches of one where both kinds compete alternate between them, also with fetches in
    // between where only reclaims are available (which must not count as a turn).
    let (stream, clock) = stream();
    stale(&stream, &clock, 10);
    let worker = stream.consumer("w").unwrap();
    let kind = |worker: &leasehold_memory::MemoryBackend| {
        let batch = worker.fetch_now(1);
        if batch[0].delivery_count > 1 {
            "reclaim"
        } else {
            "new"
        }
    };
    let mut contested = Vec::new();
    for i in 0..3 {
        stream.publish(format!("fresh {i}"));
        contested.push(kind(&worker)); // both kinds available
        contested.push(kind(&worker)); // both kinds available, unless the new one was taken
        assert_eq!(kind(&worker), "reclaim"); // only reclaims available
    }
    assert_eq!(
        contested,
        ["reclaim", "new", "reclaim", "new", "reclaim", "new"]
    );
}

#[test]
fn fetch_on_a_manual_clock_never_waits() {
    let (stream, _clock) = stream();
    let worker = stream.consumer("w").unwrap();
    let batch = futures_lite::future::block_on(worker.fetch(10, Duration::MAX)).unwrap();
    assert!(batch.is_empty());
}

fn system_stream(claim_timeout: Duration) -> MemoryStream {
    MemoryStream::new(StreamConfig::new(claim_timeout)).unwrap()
}

#[test]
fn a_waiting_fetch_wakes_on_publish_under_async_io() {
    let stream = system_stream(TIMEOUT);
    let worker = stream.consumer("w").unwrap();
    let publisher = {
        let stream = stream.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            stream.publish("late")
        })
    };
    // Waits for the publish (a missed wake-up would return empty after the full minute).
    let batch = async_io::block_on(worker.fetch(10, TIMEOUT)).unwrap();
    let id = publisher.join().unwrap();
    assert_eq!(ids(&batch), [id.to_string()]);
}

#[tokio::test(flavor = "current_thread")]
async fn a_waiting_fetch_wakes_on_publish_under_tokio() {
    let stream = system_stream(TIMEOUT);
    let worker = stream.consumer("w").unwrap();
    let publisher = {
        let stream = stream.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            stream.publish("late")
        })
    };
    let batch = worker.fetch(10, TIMEOUT).await.unwrap();
    let id = publisher.join().unwrap();
    assert_eq!(ids(&batch), [id.to_string()]);
}

#[test]
fn a_waiting_fetch_wakes_on_release() {
    let stream = system_stream(TIMEOUT);
    let (a, b) = (stream.consumer("a").unwrap(), stream.consumer("b").unwrap());
    let id = stream.publish("job");
    let held = a.fetch_now(1).messages.remove(0);
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        a.release_now(&lease_ref(&held), Duration::ZERO)
    });
    let batch = async_io::block_on(b.fetch(10, TIMEOUT)).unwrap();
    assert_eq!(releaser.join().unwrap(), SettleResult::Ok);
    assert_eq!(ids(&batch), [id.to_string()]);
    assert_eq!(batch[0].delivery_count, 2);
}

#[test]
fn a_waiting_fetch_wakes_when_a_lease_lapses() {
    // Nothing is published or released: only the lapse of A's lease can end B's wait early.
    let stream = system_stream(Duration::from_millis(50));
    let (a, b) = (stream.consumer("a").unwrap(), stream.consumer("b").unwrap());
    let id = stream.publish("job");
    a.fetch_now(1);
    let batch = async_io::block_on(b.fetch(10, TIMEOUT)).unwrap();
    assert_eq!(ids(&batch), [id.to_string()]);
    assert_eq!(holder(&stream, &id), Some(("b".into(), 2)));
}

#[test]
fn a_waiting_fetch_returns_empty_when_the_wait_is_over() {
    let stream = system_stream(TIMEOUT);
    let worker = stream.consumer("w").unwrap();
    let batch = async_io::block_on(worker.fetch(10, Duration::from_millis(10))).unwrap();
    assert!(batch.is_empty());
    // Zero wait: just a poll.
    assert!(async_io::block_on(worker.fetch(10, Duration::ZERO))
        .unwrap()
        .is_empty());
}
