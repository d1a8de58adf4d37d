//! The inspector on memory streams, on a manual clock: a scripted stream (leases held by two
//! consumers, a takeover, dead letters of different reasons) read call by call; requeue and
//! purge, refusing what is not a dead letter; requeues racing each other, a purge and
//! consuming threads (nothing lost, nothing doubled); pages that neither miss nor repeat;
//! bad input as clear errors that change nothing.
#![cfg(not(loom))]

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, SystemTime};

use common::*;
use futures_lite::future::block_on;
use leasehold_core::{
    DeadLetterEntry, DeadLetterReason, InspectError, Inspector, MessageId, NotDead, Overview, Page,
    PendingEntry, PendingQuery, Selection, SettleResult,
};
use leasehold_memory::{MemoryBackend, MemoryInspector, MemoryStream};

fn inspector(stream: &MemoryStream) -> MemoryInspector {
    MemoryInspector::new().with_stream("jobs", stream)
}

fn overview(inspector: &MemoryInspector) -> Overview {
    block_on(inspector.overview("jobs")).unwrap()
}

/// (name, pending, idle) of each consumer of the stream's group.
fn consumers(overview: &Overview) -> Vec<(String, u64, Duration)> {
    let [group] = overview.groups.as_slice() else {
        panic!("one group: {overview:?}")
    };
    group
        .consumers
        .iter()
        .map(|c| (c.name.clone(), c.pending, c.idle))
        .collect()
}

/// Every pending entry that `query` selects, page by page.
fn all_pending(inspector: &MemoryInspector, mut query: PendingQuery) -> Vec<PendingEntry> {
    let mut out = Vec::new();
    loop {
        let page = block_on(inspector.pending("jobs", None, &query)).unwrap();
        assert!(page.entries.len() <= query.page.limit);
        out.extend(page.entries);
        match page.next {
            Some(next) => query.page = next,
            None => return out,
        }
    }
}

/// The overview's per-consumer counts agree with the pending list.
fn check_counts(inspector: &MemoryInspector) {
    let mut held: BTreeMap<String, u64> = BTreeMap::new();
    for entry in all_pending(inspector, PendingQuery::all(50)) {
        *held.entry(entry.owner).or_default() += 1;
    }
    let listed: BTreeMap<String, u64> = consumers(&overview(inspector))
        .into_iter()
        .filter(|(_, pending, _)| *pending > 0)
        .map(|(name, pending, _)| (name, pending))
        .collect();
    assert_eq!(listed, held);
}

fn dead_letter(backend: &MemoryBackend, id: &str, fence: u64, reason: &DeadLetterReason) {
    let lease = lease_ref_of(&id.into(), fence);
    assert_eq!(backend.dead_letter_now(&lease, reason), SettleResult::Ok);
}

fn rejected(why: &str) -> DeadLetterReason {
    DeadLetterReason::Rejected(why.into())
}

fn ids_of<'a>(ids: impl IntoIterator<Item = &'a MessageId>) -> Vec<&'a str> {
    ids.into_iter().map(MessageId::as_str).collect()
}

#[test]
fn a_scripted_stream_read_and_acted_on_call_by_call() {
    let (stream, clock) = stream();
    let (a, b, c) = (
        stream.consumer("a").unwrap(),
        stream.consumer("b").unwrap(),
        stream.consumer("c").unwrap(),
    );
    // t = 0: two poison messages (0-1, 0-2) and four of work (0-3 … 0-6).
    for payload in ["p-0", "p-1", "w-0", "w-1", "w-2", "w-3"] {
        stream.publish(payload);
    }
    assert_eq!(ids(&a.fetch_now(2)), ["0-1", "0-2"]);
    // t = 5: a rejects 0-1; a takes three of the work, b one.
    clock.advance(secs(5));
    dead_letter(&a, "0-1", 1, &rejected("bad input"));
    assert_eq!(ids(&a.fetch_now(3)), ["0-3", "0-4", "0-5"]);
    assert_eq!(ids(&b.fetch_now(1)), ["0-6"]);
    // t = 30: a keeps 0-4 and 0-5 (not 0-2 nor 0-3), b keeps 0-6.
    clock.advance(secs(25));
    a.renew_now(&[
        lease_ref_of(&"0-4".into(), 1),
        lease_ref_of(&"0-5".into(), 1),
    ]);
    b.renew_now(&[lease_ref_of(&"0-6".into(), 1)]);
    // t = 70: 0-2 and 0-3 have lapsed; c takes them over, and gives up on 0-2 at t = 75.
    clock.advance(secs(40));
    let taken = c.fetch_now(5);
    assert_eq!(ids(&taken), ["0-2", "0-3"]);
    assert!(taken.iter().all(|m| m.delivery_count == 2));
    clock.advance(secs(5));
    let exhausted = DeadLetterReason::MaxDeliveries {
        deliveries: 2,
        last_error: "timeout".into(),
    };
    dead_letter(&c, "0-2", 2, &exhausted);
    assert_eq!(stream.publish("w-4").as_str(), "0-7");
    clock.advance(secs(5)); // t = 80

    let inspector = inspector(&stream);
    let seen = overview(&inspector);
    assert_eq!(
        (seen.stream.as_str(), seen.length, seen.dead_letters),
        ("jobs", 5, 2)
    );
    let group = &seen.groups[0];
    assert_eq!(
        (group.name.as_str(), group.pending, group.lag),
        (MemoryInspector::DEFAULT_GROUP, 4, Some(1))
    );
    // 0-3, appended at t = 0.
    assert_eq!(group.oldest_pending_age, Some(secs(80)));
    assert_eq!(
        consumers(&seen),
        [
            ("a".into(), 2, secs(50)),
            ("b".into(), 1, secs(50)),
            ("c".into(), 1, secs(5)),
        ]
    );

    // Pending, two a page: c's takeover first, then a's and b's, then an empty last page.
    let first = block_on(inspector.pending("jobs", None, &PendingQuery::all(2))).unwrap();
    let row = |id: &str, owner: &str, idle: u64, count: u32| {
        PendingEntry::new(id, owner, secs(idle), count)
    };
    assert_eq!(
        first.entries,
        [row("0-3", "c", 10, 2), row("0-4", "a", 50, 1)]
    );
    let next = first.next.expect("a full page: maybe more");
    assert_eq!(next, Page::after("0-4", 2));
    let query = PendingQuery::new(next);
    let second = block_on(inspector.pending("jobs", Some("default"), &query)).unwrap();
    assert_eq!(
        second.entries,
        [row("0-5", "a", 50, 1), row("0-6", "b", 50, 1)]
    );
    let query = PendingQuery::new(second.next.expect("full"));
    let last = block_on(inspector.pending("jobs", None, &query)).unwrap();
    assert!(last.entries.is_empty() && last.next.is_none());
    // By consumer, by idle time.
    let of_a = all_pending(
        &inspector,
        PendingQuery::all(10).with_consumer(String::from("a")),
    );
    assert_eq!(ids_of(of_a.iter().map(|e| &e.id)), ["0-4", "0-5"]);
    let idle = |min: u64| {
        let query = PendingQuery::all(10).with_min_idle(secs(min));
        let entries = all_pending(&inspector, query);
        entries
            .into_iter()
            .map(|e| e.id.to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(idle(50), ["0-4", "0-5", "0-6"]);
    assert_eq!(idle(11), ["0-4", "0-5", "0-6"]);
    assert_eq!(idle(10), ["0-3", "0-4", "0-5", "0-6"]);
    assert!(idle(51).is_empty());

    // Dead letters: payloads only on request, times on the stream's clock.
    let before = SystemTime::now();
    let dead = block_on(inspector.dead_letters("jobs", &Page::first(10), false)).unwrap();
    let after = SystemTime::now();
    assert!(dead.next.is_none());
    let summary: Vec<_> = dead
        .entries
        .iter()
        .map(|e| {
            let (id, original) = (e.id.as_str(), e.original_id.as_str());
            (
                id,
                original,
                e.reason.as_str(),
                e.delivery_count,
                e.payload.is_some(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("0-1", "0-1", "rejected: bad input", 1, false),
            (
                "0-2",
                "0-2",
                "failed 2 deliveries, last error: timeout",
                2,
                false
            ),
        ]
    );
    let at = |entry: &DeadLetterEntry, age: u64| {
        let at = entry.at.expect("known");
        assert!(
            before - secs(age) <= at && at <= after - secs(age),
            "{entry:?}"
        );
    };
    at(&dead.entries[0], 75);
    at(&dead.entries[1], 5);
    let one = block_on(inspector.dead_letters("jobs", &Page::first(1), true)).unwrap();
    assert_eq!(one.entries[0].payload.as_deref(), Some(&b"p-0"[..]));
    assert_eq!(one.next, Some(Page::after("0-1", 1)));
    let single = block_on(inspector.dead_letter("jobs", &"0-2".into())).unwrap();
    let single = single.expect("a dead letter");
    assert_eq!(
        (single.reason.as_str(), single.payload.as_deref()),
        (exhausted.to_string().as_str(), Some(&b"p-1"[..]))
    );
    for absent in ["0-3", "0-9", "delayed:1", "nonsense"] {
        let found = block_on(inspector.dead_letter("jobs", &absent.into())).unwrap();
        assert!(found.is_none(), "{absent}");
    }
    check_counts(&inspector);

    // Requeue those dead a minute or more: 0-1 only, as a fresh message 0-8.
    let requeued = block_on(inspector.requeue("jobs", &Selection::OlderThan(secs(60)))).unwrap();
    assert_eq!(requeued.moved, [("0-1".into(), "0-8".into())]);
    assert!(requeued.gone.is_empty());
    let seen = overview(&inspector);
    assert_eq!(
        (seen.length, seen.dead_letters, seen.groups[0].lag),
        (6, 1, Some(2))
    );
    let fetched = b.fetch_now(10);
    assert_eq!(ids(&fetched), ["0-7", "0-8"]);
    assert_eq!(
        (fetched[1].payload.as_ref(), fetched[1].delivery_count),
        (&b"p-0"[..], 1)
    );
    // b was seen just now, and holds three.
    assert!(consumers(&overview(&inspector)).contains(&("b".into(), 3, Duration::ZERO)));
    // Again: 0-1 is no dead letter any more, so it is reported gone and nothing changes.
    let before = stream.len();
    let again = block_on(inspector.requeue("jobs", &Selection::Ids(vec!["0-1".into()]))).unwrap();
    assert!(again.moved.is_empty(), "{again:?}");
    assert_eq!(ids_of(&again.gone), ["0-1"]);
    assert_eq!(stream.len(), before, "a repeat doubles nothing");
    // Those dead five seconds or more: 0-2, purged; then nothing is left to requeue.
    let purged = block_on(inspector.purge_dead("jobs", &Selection::OlderThan(secs(5)))).unwrap();
    assert_eq!(ids_of(&purged.deleted), ["0-2"]);
    assert!(purged.gone.is_empty());
    let nothing = block_on(inspector.requeue("jobs", &Selection::All)).unwrap();
    assert!(nothing.moved.is_empty() && nothing.gone.is_empty());
    assert_eq!(overview(&inspector).dead_letters, 0);
    // Dead-letter ids are not reused after a purge.
    dead_letter(&b, "0-8", 1, &rejected("still bad"));
    let dead = block_on(inspector.dead_letters("jobs", &Page::first(10), false)).unwrap();
    assert_eq!(ids_of(dead.entries.iter().map(|e| &e.id)), ["0-3"]);
    check_counts(&inspector);
}

#[test]
fn consumers_are_listed_while_live_or_holding_entries() {
    let (stream, clock) = stream();
    let inspector = inspector(&stream);
    let a = stream.consumer("a").unwrap();
    let b = stream.consumer("b").unwrap();
    stream.publish("x");
    stream.publish("y");
    clock.advance(secs(3));
    let held = a.fetch_now(1);
    let names = |overview: &Overview| {
        let listed = consumers(overview);
        listed
            .into_iter()
            .map(|(name, pending, idle)| (name, pending, idle.as_secs()))
            .collect::<Vec<_>>()
    };
    // Registered at t = 0; a fetched at t = 3.
    clock.advance(secs(1));
    assert_eq!(
        names(&overview(&inspector)),
        [("a".into(), 1, 1), ("b".into(), 0, 4)]
    );
    // b's handle is dropped holding nothing: gone. a's is dropped holding one: listed.
    drop(b);
    drop(a);
    assert_eq!(names(&overview(&inspector)), [("a".into(), 1, 1)]);
    // Its name comes back with what it holds, and its ack lets go of it.
    clock.advance(secs(1));
    let a = stream.consumer("a").unwrap();
    assert_eq!(names(&overview(&inspector)), [("a".into(), 1, 0)]);
    clock.advance(secs(2));
    assert_eq!(a.ack_now(&[lease_ref(&held[0])]), [SettleResult::Ok]);
    assert_eq!(names(&overview(&inspector)), [("a".into(), 0, 0)]);
    // A gone consumer's entries taken over: it is forgotten.
    let held = a.fetch_now(1);
    drop(a);
    clock.advance(TIMEOUT);
    let c = stream.consumer("c").unwrap();
    assert_eq!(
        names(&overview(&inspector)),
        [("a".into(), 1, 60), ("c".into(), 0, 0)]
    );
    let taken = c.fetch_now(1);
    assert_eq!((&taken[0].id, taken[0].delivery_count), (&held[0].id, 2));
    assert_eq!(names(&overview(&inspector)), [("c".into(), 1, 0)]);
    // A custom group name.
    let named = MemoryInspector::new()
        .group("workers")
        .with_stream("jobs", &stream);
    assert_eq!(
        block_on(named.overview("jobs")).unwrap().groups[0].name,
        "workers"
    );
    let listing = block_on(named.pending("jobs", Some("workers"), &PendingQuery::all(5)));
    assert_eq!(listing.unwrap().entries.len(), 1);
}

#[test]
fn bad_input_is_a_clear_error_and_changes_nothing() {
    let (stream, _clock) = stream();
    let a = stream.consumer("a").unwrap();
    for payload in ["p", "w-0", "w-1"] {
        stream.publish(payload);
    }
    dead_letter(&a, a.fetch_now(1)[0].id.as_str(), 1, &rejected("bad"));
    assert_eq!(ids(&a.fetch_now(1)), ["0-2"]); // pending; 0-3 waits undelivered
    let delayed = stream
        .publish_with_now(
            leasehold_core::Outgoing::new("later".into())
                .with_due(leasehold_core::Due::After(secs(60))),
        )
        .unwrap();
    let mut inspector = MemoryInspector::new();
    inspector.add("jobs", &stream);
    // The overview counts the delayed message and says when it is due.
    let delayed_now = overview(&inspector).delayed;
    assert_eq!((delayed_now.len, delayed_now.next_due), (1, Some(secs(60))));
    let state = |stream: &MemoryStream| {
        (
            stream.len(),
            stream.pending_entries(),
            stream.dead_letters(),
            stream.delayed_len(),
        )
    };
    let before = state(&stream);

    // Unknown streams.
    let unknown = |result: Result<(), InspectError>| {
        let error = result.expect_err("no such stream");
        assert!(matches!(error, InspectError::NoSuchStream(_)), "{error}");
        assert_eq!(error.to_string(), "no stream named \"nope\"");
    };
    unknown(block_on(inspector.overview("nope")).map(drop));
    unknown(block_on(inspector.pending("nope", None, &PendingQuery::all(1))).map(drop));
    unknown(block_on(inspector.dead_letters("nope", &Page::first(1), true)).map(drop));
    unknown(block_on(inspector.dead_letter("nope", &"0-1".into())).map(drop));
    unknown(block_on(inspector.requeue("nope", &Selection::All)).map(drop));
    unknown(block_on(inspector.purge_dead("nope", &Selection::All)).map(drop));

    // Another group.
    let group = block_on(inspector.pending("jobs", Some("others"), &PendingQuery::all(1)))
        .expect_err("one group");
    assert!(matches!(group, InspectError::NoSuchGroup { .. }));
    assert_eq!(
        group.to_string(),
        "stream \"jobs\" has no consumer group \"others\" (its groups: [\"default\"])"
    );

    // Empty pages and cursors that are no ids of the stream.
    let invalid = |result: Result<(), InspectError>, says: &str| {
        let error = result.expect_err("invalid");
        assert!(matches!(error, InspectError::Invalid(_)), "{error}");
        assert!(error.to_string().contains(says), "{error}");
    };
    invalid(
        block_on(inspector.dead_letters("jobs", &Page::first(0), false)).map(drop),
        "at least 1",
    );
    invalid(
        block_on(inspector.pending("jobs", None, &PendingQuery::all(0))).map(drop),
        "at least 1",
    );
    let far = PendingQuery::new(Page::after("1700000000000-0", 10));
    invalid(
        block_on(inspector.pending("jobs", None, &far)).map(drop),
        "\"1700000000000-0\" is not an id of a memory stream",
    );
    invalid(
        block_on(inspector.dead_letters("jobs", &Page::after("0-01", 5), false)).map(drop),
        "not an id",
    );

    // Purging or requeueing what is not a dead letter: refused whole, naming each.
    let wrong = vec![
        "0-1".into(), // the dead letter
        "0-2".into(), // pending
        "0-3".into(), // not delivered yet
        "0-99".into(),
        delayed.id.clone(),
        "not-an-id".into(),
    ];
    let expected = [
        ("0-2".into(), NotDead::Live),
        ("0-3".into(), NotDead::Live),
        ("0-99".into(), NotDead::Unknown),
        (delayed.id.clone(), NotDead::Unknown),
        ("not-an-id".into(), NotDead::Unknown),
    ];
    for refused in [
        block_on(inspector.purge_dead("jobs", &Selection::Ids(wrong.clone()))).map(drop),
        block_on(inspector.requeue("jobs", &Selection::Ids(wrong.clone()))).map(drop),
    ] {
        let error = refused.expect_err("not dead letters");
        let message = error.to_string();
        let InspectError::NotDeadLetters { stream, ids } = error else {
            panic!("{message}")
        };
        assert_eq!((stream.as_str(), ids.as_slice()), ("jobs", &expected[..]));
        assert!(
            message.contains("0-2 (a live entry of the stream)")
                && message.contains("not-an-id (no such entry)"),
            "{message}"
        );
    }
    assert_eq!(state(&stream), before, "nothing changed");

    // An empty selection does nothing.
    let none = block_on(inspector.purge_dead("jobs", &Selection::Ids(Vec::new()))).unwrap();
    assert!(none.deleted.is_empty() && none.gone.is_empty());
    assert_eq!(state(&stream), before, "nothing changed");
}

#[test]
fn requeues_racing_a_purge_and_consumers_lose_and_double_nothing() {
    for _ in 0..10 {
        race_requeues_a_purge_and_consumers();
    }
}

/// 300 dead letters, the first 100 dead longer: two requeues of all of them and a purge of the
/// older ones race, while three consumers fetch and ack what comes back. The manual clock
/// stands still then: no lease lapses, so a message delivered twice would be one doubled.
fn race_requeues_a_purge_and_consumers() {
    const N: usize = 300;
    let (stream, clock) = stream();
    let poisoner = stream.consumer("poisoner").unwrap();
    for i in 0..N {
        stream.publish(format!("m-{i}"));
    }
    for (i, message) in poisoner.fetch_now(N).iter().enumerate() {
        if i == N / 3 {
            clock.advance(secs(10));
        }
        dead_letter(&poisoner, message.id.as_str(), 1, &rejected("bad"));
    }
    drop(poisoner);
    let payloads: HashMap<MessageId, Vec<u8>> = stream
        .dead_letters()
        .into_iter()
        .map(|d| (d.id, d.payload.to_vec()))
        .collect();
    assert_eq!(payloads.len(), N);
    let inspector = inspector(&stream);

    let done = AtomicBool::new(false);
    let start = Barrier::new(6);
    let (requeues, purged, delivered) = thread::scope(|s| {
        let requeues: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    start.wait();
                    block_on(inspector.requeue("jobs", &Selection::All)).unwrap()
                })
            })
            .collect();
        let purge = s.spawn(|| {
            start.wait();
            let old = Selection::OlderThan(secs(5));
            block_on(inspector.purge_dead("jobs", &old)).unwrap()
        });
        let consumers: Vec<_> = (0..3)
            .map(|i| {
                let worker = stream.consumer(&format!("w{i}")).unwrap();
                let (done, start) = (&done, &start);
                s.spawn(move || {
                    start.wait();
                    let mut seen = Vec::new();
                    loop {
                        // Read before fetching: once set, this fetch sees every requeue.
                        let last = done.load(Ordering::SeqCst);
                        let got = worker.fetch_now(7);
                        let leases: Vec<_> = got.iter().map(lease_ref).collect();
                        let acked = worker.ack_now(&leases);
                        assert!(acked.iter().all(|r| *r == SettleResult::Ok));
                        let got = got
                            .into_iter()
                            .map(|m| (m.payload.to_vec(), m.delivery_count));
                        seen.extend(got);
                        if last && leases.is_empty() {
                            return seen;
                        }
                    }
                })
            })
            .collect();
        let requeues: Vec<_> = requeues.into_iter().map(|h| h.join().unwrap()).collect();
        let purged = purge.join().unwrap();
        done.store(true, Ordering::SeqCst);
        let delivered: Vec<_> = consumers
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        (requeues, purged, delivered)
    });

    // Each dead letter was moved by one requeue or deleted by the purge, never two of these;
    // the purge took only older ones.
    let moved: Vec<&MessageId> = requeues
        .iter()
        .flat_map(|r| r.moved.iter().map(|(dead, _)| dead))
        .collect();
    let mut handled: Vec<&MessageId> = moved.iter().copied().chain(&purged.deleted).collect();
    handled.sort();
    handled.dedup();
    assert_eq!(moved.len() + purged.deleted.len(), N, "each handled once");
    assert_eq!(handled.len(), N, "none handled twice");
    let old: HashSet<MessageId> = (1..=N / 3).map(|n| format!("0-{n}").into()).collect();
    assert!(purged
        .deleted
        .iter()
        .chain(&purged.gone)
        .all(|id| old.contains(id)));
    // Every requeued message was delivered once, fresh, and acked; nothing else was.
    let mut expected: Vec<Vec<u8>> = moved.iter().map(|id| payloads[*id].clone()).collect();
    expected.sort();
    let mut got: Vec<Vec<u8>> = delivered.iter().map(|(p, _)| p.clone()).collect();
    got.sort();
    assert_eq!(got, expected, "each requeued message delivered once");
    assert!(delivered.iter().all(|(_, count)| *count == 1));
    let new_ids: HashSet<_> = requeues
        .iter()
        .flat_map(|r| &r.moved)
        .map(|(_, n)| n)
        .collect();
    assert_eq!(
        new_ids.len(),
        moved.len(),
        "each requeued under an id of its own"
    );
    let end = overview(&inspector);
    assert_eq!(
        (end.length, end.groups[0].pending, end.groups[0].lag),
        (0, 0, Some(0))
    );
    assert_eq!(end.dead_letters, 0);
    check_counts(&inspector);
}

#[test]
fn pages_neither_miss_nor_repeat() {
    let (stream, clock) = stream();
    let workers: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|name| stream.consumer(name).unwrap())
        .collect();
    for i in 0..1000 {
        stream.publish(format!("m-{i}"));
    }
    // Round robin, one at a time: each consumer's entries are spread over the whole list.
    let mut held: HashMap<&str, Vec<String>> = HashMap::new();
    for i in 0..1000 {
        let worker = &workers[i % 3];
        let got = worker.fetch_now(1);
        held.entry(worker.name())
            .or_default()
            .extend(got.iter().map(|m| m.id.to_string()));
    }
    // Half of b's renewed later: the other half is idle longer.
    clock.advance(secs(20));
    let renewed: Vec<_> = held["b"].iter().step_by(2).cloned().collect();
    let leases: Vec<_> = renewed
        .iter()
        .map(|id| lease_ref_of(&id.as_str().into(), 1))
        .collect();
    workers[1].renew_now(&leases);
    clock.advance(secs(1));
    let inspector = inspector(&stream);

    let listed = |query: PendingQuery| -> Vec<String> {
        let entries = all_pending(&inspector, query);
        let ids: Vec<String> = entries.into_iter().map(|e| e.id.to_string()).collect();
        let distinct: HashSet<_> = ids.iter().collect();
        assert_eq!(distinct.len(), ids.len(), "no entry twice");
        ids
    };
    let in_order = |mut ids: Vec<String>| {
        ids.sort_by_key(|id| id[2..].parse::<u64>().unwrap());
        ids
    };
    let every = listed(PendingQuery::all(128));
    assert_eq!(every.len(), 1000);
    assert_eq!(every, in_order(every.clone()), "in id order");
    for name in ["a", "b", "c"] {
        let query = PendingQuery::all(7).with_consumer(String::from(name));
        assert_eq!(listed(query), held[name], "{name}'s");
    }
    let idle_b = PendingQuery::all(10)
        .with_consumer(String::from("b"))
        .with_min_idle(secs(2));
    let not_renewed: Vec<_> = held["b"].iter().skip(1).step_by(2).cloned().collect();
    assert_eq!(listed(idle_b), not_renewed);
    check_counts(&inspector);

    // Dead letters, paged while some are purged behind and ahead of the cursor.
    for worker in &workers {
        for id in &held[worker.name()] {
            dead_letter(worker, id, 1, &rejected("bad"));
        }
    }
    let mut page = Page::first(64);
    let mut seen = Vec::new();
    let mut round = 0;
    loop {
        let listing = block_on(inspector.dead_letters("jobs", &page, false)).unwrap();
        seen.extend(listing.entries.iter().map(|e| e.id.to_string()));
        round += 1;
        if round == 3 {
            // The cursor's own entry, one behind it and one ahead of it.
            let cursor = seen.last().unwrap().clone();
            let ids = vec![cursor.as_str().into(), "0-1".into(), "0-900".into()];
            let purged = block_on(inspector.purge_dead("jobs", &Selection::Ids(ids))).unwrap();
            assert_eq!(purged.deleted.len(), 3);
        }
        match listing.next {
            Some(next) => page = next,
            None => break,
        }
    }
    let expected: Vec<String> = (1..=1000)
        .filter(|n| *n != 900)
        .map(|n| format!("0-{n}"))
        .collect();
    assert_eq!(
        seen, expected,
        "every one once, in order, but the one purged ahead"
    );
}
