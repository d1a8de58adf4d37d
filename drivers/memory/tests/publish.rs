//! Publishing: delayed messages (not fetched before they are due, then new entries like any
//! other), deduplication keys within and after their time to live, batches, refused messages,
//! and fetches that wait for a due time.
#![cfg(not(loom))]

mod common;

use std::time::{Duration, Instant, SystemTime};

use common::*;
use leasehold_core::{
    Backend, Dedupe, DelayedSummary, Due, Outgoing, PublishRejected, Published, Publisher,
    MAX_DELAY,
};
use leasehold_memory::{Bytes, MemoryStream, StreamConfig};

fn at_once(payload: &str) -> Outgoing<Bytes> {
    Outgoing::new(Bytes::from(payload.to_owned()))
}

fn after(payload: &str, delay: Duration) -> Outgoing<Bytes> {
    at_once(payload).with_due(Due::After(delay))
}

fn keyed(mut message: Outgoing<Bytes>, key: &str, ttl: Duration) -> Outgoing<Bytes> {
    message.dedupe = Some(Dedupe::new(key, ttl));
    message
}

fn fresh(id: &str) -> Published {
    Published::new(id.into(), false)
}

fn payloads(batch: &[leasehold_core::Fetched<Bytes>]) -> Vec<String> {
    batch
        .iter()
        .map(|m| String::from_utf8_lossy(&m.payload).into_owned())
        .collect()
}

#[test]
fn a_delayed_message_is_not_fetched_before_it_is_due() {
    let (stream, clock) = stream();
    let worker = stream.consumer("w").unwrap();
    let published = stream.publish_with_now(after("later", secs(30))).unwrap();
    assert_eq!(published, fresh("delayed:1"));
    assert!(!stream.contains(&published.id));
    assert_eq!((stream.len(), stream.delayed_len()), (0, 1));
    assert!(worker.fetch_now(10).is_empty());
    clock.advance(secs(30) - Duration::from_nanos(1));
    assert!(
        worker.fetch_now(10).is_empty(),
        "fetched before its due time"
    );
    assert_eq!(stream.len(), 0, "in the stream before its due time");
    clock.advance(Duration::from_nanos(1));
    let batch = worker.fetch_now(10);
    assert_eq!(ids(&batch), ["0-1"]);
    assert_eq!(payloads(&batch), ["later"]);
    assert_eq!(batch[0].delivery_count, 1);
    assert_eq!(batch[0].fence.0, 1);
    assert_eq!((stream.len(), stream.delayed_len()), (1, 0));
    assert_eq!(holder(&stream, &batch[0].id), Some(("w".into(), 1)));
    // From then on an ordinary entry: it lapses and is reclaimed with count 2.
    clock.advance(TIMEOUT);
    let other = stream.consumer("o").unwrap();
    assert_eq!(other.fetch_now(10)[0].delivery_count, 2);
}

#[test]
fn a_due_time_in_the_past_or_now_is_at_once() {
    let (stream, _clock) = stream();
    let worker = stream.consumer("w").unwrap();
    let past = at_once("overdue").with_due(Due::At(SystemTime::now() - secs(3600)));
    let published = stream
        .publish_batch_now(vec![past, after("now", Duration::ZERO)])
        .unwrap();
    assert_eq!(published, [fresh("0-1"), fresh("0-2")]);
    assert_eq!(stream.delayed_now(), DelayedSummary::default());
    assert_eq!(payloads(&worker.fetch_now(10)), ["overdue", "now"]);
}

#[test]
fn a_due_time_ahead_on_the_wall_clock_is_a_delay_on_the_streams_clock() {
    let (stream, clock) = stream();
    let worker = stream.consumer("w").unwrap();
    let at = at_once("in an hour").with_due(Due::At(SystemTime::now() + secs(3600)));
    assert_eq!(stream.publish_with_now(at).unwrap(), fresh("delayed:1"));
    let next = stream.delayed_now().next_due.unwrap();
    // An hour from the publish, give or take the instants the conversion read.
    assert!(next <= secs(3600) && next > secs(3590), "{next:?}");
    clock.advance(secs(1800));
    assert!(worker.fetch_now(1).is_empty());
    clock.advance(secs(1800));
    assert_eq!(payloads(&worker.fetch_now(1)), ["in an hour"]);
}

#[test]
fn next_due_tells_an_empty_fetch_when_to_look_again() {
    let (stream, clock) = stream();
    let worker = stream.consumer("w").unwrap();
    assert_eq!(worker.fetch_now(10).next_due, None, "nothing delayed");
    stream.publish_with_now(after("b", secs(20))).unwrap();
    // Known from the next fetch on.
    assert_eq!(worker.fetch_now(10).next_due, Some(secs(20)));
    // Measured from the fetch on the stream's clock.
    clock.advance(secs(5));
    assert_eq!(worker.fetch_now(10).next_due, Some(secs(15)));
    // An earlier one: the next fetch learns it.
    stream.publish_with_now(after("a", secs(10))).unwrap();
    let answer = worker.fetch_now(10);
    assert!(answer.is_empty());
    assert_eq!(answer.next_due, Some(secs(10)));
    clock.advance(secs(10));
    let answer = worker.fetch_now(10);
    assert_eq!(payloads(&answer), ["a"], "due: the fetch promotes it");
    assert_eq!(answer.next_due, Some(secs(5)));
    assert_eq!(stream.delayed_now(), DelayedSummary::new(1, Some(secs(5))));
    clock.advance(secs(5));
    let answer = worker.fetch_now(10);
    assert_eq!(payloads(&answer), ["b"]);
    assert_eq!(answer.next_due, None);
    // Each consumer's answer says what its own fetch saw.
    let other = stream.consumer("o").unwrap();
    stream.publish_with_now(after("c", secs(1))).unwrap();
    assert_eq!(other.fetch_now(1).next_due, Some(secs(1)));
}

#[test]
fn due_messages_join_the_stream_in_due_order_with_the_next_stream_ids() {
    let (stream, clock) = stream();
    let worker = stream.consumer("w").unwrap();
    let published = stream
        .publish_batch_now(vec![
            after("third", secs(3)),
            at_once("first at once"),
            after("first due", secs(1)),
            after("second due", secs(1)),
            at_once("second at once"),
        ])
        .unwrap();
    assert_eq!(
        published,
        [
            fresh("delayed:1"),
            fresh("0-1"),
            fresh("delayed:2"),
            fresh("delayed:3"),
            fresh("0-2"),
        ]
    );
    clock.advance(secs(5));
    // Every due one joins at the first fetch, behind what was there; that fetch takes two.
    let batch = worker.fetch_now(2);
    assert_eq!(payloads(&batch), ["first at once", "second at once"]);
    assert_eq!((stream.len(), stream.delayed_len()), (5, 0));
    let batch = worker.fetch_now(10);
    assert_eq!(payloads(&batch), ["first due", "second due", "third"]);
    assert_eq!(ids(&batch), ["0-3", "0-4", "0-5"]);
    assert!(batch.iter().all(|m| m.delivery_count == 1));
    // Delayed ids keep counting; stream ids too.
    let later = stream
        .publish_batch_now(vec![after("x", secs(1)), at_once("y")])
        .unwrap();
    assert_eq!(later, [fresh("delayed:4"), fresh("0-6")]);
}

#[test]
fn a_key_within_its_ttl_answers_the_first_id_and_enqueues_nothing() {
    let (stream, clock) = stream();
    let ttl = secs(60);
    let charge = || keyed(at_once("charge"), "order-7", ttl);
    let first = stream.publish_with_now(charge()).unwrap();
    assert_eq!(first, fresh("0-1"));
    // Repeats in one batch and in later ones, up to just before the ttl.
    let again = stream.publish_batch_now(vec![charge(), charge()]).unwrap();
    clock.advance(ttl - Duration::from_nanos(1));
    let last = stream.publish_with_now(charge()).unwrap();
    for repeat in again.iter().chain([&last]) {
        assert_eq!(repeat, &Published::new(first.id.clone(), true));
    }
    // Another key is another message; so is the same payload without a key.
    let other = stream
        .publish_batch_now(vec![
            keyed(at_once("charge"), "order-8", ttl),
            at_once("charge"),
        ])
        .unwrap();
    assert_eq!(other, [fresh("0-2"), fresh("0-3")]);
    assert_eq!(stream.len(), 3);
    // The key is remembered after its message is done, until the ttl is over.
    let worker = stream.consumer("w").unwrap();
    let batch = worker.fetch_now(10);
    worker.ack_now(&batch.iter().map(lease_ref).collect::<Vec<_>>());
    assert!(stream.publish_with_now(charge()).unwrap().duplicate);
    // Over: the key publishes again, remembered afresh.
    clock.advance(Duration::from_nanos(1));
    let later = stream.publish_with_now(charge()).unwrap();
    assert_eq!(later, fresh("0-4"));
    let repeat = stream.publish_with_now(charge()).unwrap();
    assert!(repeat.duplicate && repeat.id == later.id);
}

#[test]
fn a_delayed_and_deduplicated_message_is_delivered_once() {
    let (stream, clock) = stream();
    let worker = stream.consumer("w").unwrap();
    let remind = || keyed(after("remind", secs(30)), "remind-3", secs(120));
    let first = stream.publish_with_now(remind()).unwrap();
    assert_eq!(first, fresh("delayed:1"));
    let second = stream.publish_with_now(remind()).unwrap();
    assert!(second.duplicate && second.id == first.id);
    assert_eq!(stream.delayed_len(), 1);
    clock.advance(secs(30));
    assert_eq!(payloads(&worker.fetch_now(10)), ["remind"]);
    // Still the delayed id: the key answers what its first publish answered.
    let third = stream.publish_with_now(remind()).unwrap();
    assert!(third.duplicate && third.id == first.id);
    assert!(worker.fetch_now(10).is_empty());
    // The ttl runs from the publish, not from the due time.
    clock.advance(secs(90));
    assert_eq!(
        stream.publish_with_now(remind()).unwrap(),
        fresh("delayed:2")
    );
}

#[test]
fn a_batch_with_a_refused_message_publishes_nothing() {
    let (stream, _clock) = stream();
    let cases = [
        (
            after("too late", MAX_DELAY + secs(1)),
            PublishRejected::DelayTooLong(MAX_DELAY + secs(1)),
        ),
        (
            keyed(at_once("no key"), "", secs(1)),
            PublishRejected::EmptyDedupeKey,
        ),
        (
            keyed(at_once("no ttl"), "k", Duration::ZERO),
            PublishRejected::DedupeTtl(Duration::ZERO),
        ),
    ];
    for (bad, why) in cases {
        let batch = vec![
            keyed(at_once("fine"), "fine", secs(60)),
            after("fine later", secs(1)),
            bad,
        ];
        assert_eq!(stream.publish_batch_now(batch.clone()), Err(why));
        let error = futures_lite::future::block_on(stream.publish_batch(batch)).unwrap_err();
        assert!(!error.is_transient(), "{error}");
    }
    assert_eq!((stream.len(), stream.delayed_len()), (0, 0));
    // Its keys were not taken either.
    let fine = stream
        .publish_with_now(keyed(at_once("fine"), "fine", secs(60)))
        .unwrap();
    assert_eq!(fine, fresh("0-1"));
    // The longest delay is fine.
    let longest = stream
        .publish_with_now(after("in a year", MAX_DELAY))
        .unwrap();
    assert_eq!(longest, fresh("delayed:1"));
}

#[test]
fn the_publisher_trait_publishes_and_summarizes() {
    let (stream, clock) = stream();
    futures_lite::future::block_on(async {
        let published = stream
            .publish_batch(vec![at_once("a"), after("b", secs(2)), after("c", secs(1))])
            .await
            .unwrap();
        assert_eq!(
            published,
            [fresh("0-1"), fresh("delayed:1"), fresh("delayed:2")]
        );
        assert_eq!(
            stream.delayed().await.unwrap(),
            DelayedSummary::new(2, Some(secs(1)))
        );
        clock.advance(secs(3));
        // Due, and no fetch moved them yet.
        assert_eq!(
            stream.delayed().await.unwrap(),
            DelayedSummary::new(2, Some(Duration::ZERO))
        );
    });
}

fn system_stream() -> MemoryStream {
    MemoryStream::new(StreamConfig::new(TIMEOUT)).unwrap()
}

#[test]
fn a_waiting_fetch_wakes_when_a_delayed_message_is_due() {
    // Nothing else happens: only the due time can end the wait before the minute is over
    // (at its end the fetch would find the message too, so the elapsed time tells).
    let stream = system_stream();
    let worker = stream.consumer("w").unwrap();
    let started = Instant::now();
    stream
        .publish_with_now(after("soon", Duration::from_millis(20)))
        .unwrap();
    let batch = async_io::block_on(worker.fetch(10, TIMEOUT)).unwrap();
    assert_eq!(payloads(&batch), ["soon"]);
    assert!(started.elapsed() < TIMEOUT, "woke only when the wait ended");
}

#[test]
fn a_delayed_publish_wakes_a_waiting_fetch_to_learn_its_due_time() {
    // The fetch waits with nothing delayed; a message due in 20 ms is published meanwhile.
    let stream = system_stream();
    let worker = stream.consumer("w").unwrap();
    let publisher = {
        let stream = stream.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            stream
                .publish_with_now(after("soon", Duration::from_millis(20)))
                .unwrap()
        })
    };
    let started = Instant::now();
    let batch = async_io::block_on(worker.fetch(10, TIMEOUT)).unwrap();
    publisher.join().unwrap();
    assert_eq!(payloads(&batch), ["soon"]);
    assert!(started.elapsed() < TIMEOUT, "woke only when the wait ended");
}
