//! The inspector on a real, throwaway `redis-server`: a scripted stream (leases held by two
//! consumers, a takeover, dead letters of different reasons, delayed messages), read page by
//! page; requeue and
//! purge, atomic per entry and refusing what is not a dead letter; requeue racing itself and
//! racing workers (nothing lost, nothing doubled); bad input as clear errors.

use std::collections::HashSet;
use std::time::Duration;

use bytes::Bytes;
use leasehold_core::{
    Backend, DeadLetterReason, Due, InspectError, Inspector, LeaseRef, MessageId, NotDead,
    Outgoing, Page, PendingQuery, Publisher, Selection, SettleResult,
};
use leasehold_redis::{PublisherConfig, RedisBackend, RedisConfig, RedisInspector, RedisPublisher};
use leasehold_redis_harness::RedisServer;

const CLAIM: Duration = Duration::from_secs(30);

fn server() -> RedisServer {
    RedisServer::start().unwrap_or_else(|e| panic!("these tests need redis-server: {e}"))
}

async fn consumer(server: &RedisServer, name: &str) -> RedisBackend {
    let config = RedisConfig::new(server.url(), "jobs", "workers")
        .consumer(name)
        .claim_timeout(CLAIM);
    RedisBackend::connect(config).await.expect("connect")
}

async fn inspector(server: &RedisServer) -> RedisInspector {
    RedisInspector::connect(&server.url())
        .await
        .expect("connect")
}

fn cmd(server: &RedisServer, args: &[&str]) {
    server.command(args).expect("the server answers");
}

/// Publishes `n` messages `prefix-0`…; their ids.
async fn publish(backend: &RedisBackend, prefix: &str, n: usize) -> Vec<MessageId> {
    let mut ids = Vec::new();
    for i in 0..n {
        let payload = Bytes::from(format!("{prefix}-{i}"));
        ids.push(backend.publish(payload).await.unwrap());
    }
    ids
}

/// Dead-letters everything `backend` can fetch, with `reason`.
async fn dead_letter_all(backend: &RedisBackend, reason: &str) {
    let fetched = backend.fetch(1000, Duration::ZERO).await.unwrap();
    for message in &fetched {
        let lease = LeaseRef::from(message);
        let result = backend
            .dead_letter(&lease, &DeadLetterReason::Rejected(reason.into()))
            .await
            .unwrap();
        assert_eq!(result, SettleResult::Ok);
    }
}

#[tokio::test]
async fn the_overview_and_listings_show_what_is_held_and_what_died() {
    let server = server();
    let (a, b) = (consumer(&server, "a").await, consumer(&server, "b").await);
    publish(&a, "poison", 3).await;
    dead_letter_all(&a, "bad input").await;
    publish(&a, "work", 5).await;
    let held_by_a = a.fetch(3, Duration::ZERO).await.unwrap();
    let held_by_b = b.fetch(1, Duration::ZERO).await.unwrap();
    assert_eq!((held_by_a.len(), held_by_b.len()), (3, 1));
    // A peer takes one of a's over.
    cmd(
        &server,
        &[
            "XCLAIM",
            "jobs",
            "workers",
            "peer",
            "0",
            held_by_a[0].id.as_str(),
        ],
    );

    // Two delayed messages, the next due in about a minute.
    let producer = RedisPublisher::connect(PublisherConfig::new(server.url(), "jobs"))
        .await
        .unwrap();
    for minutes in [1, 5] {
        let mut later = Outgoing::new(Bytes::from_static(b"later"));
        later.due = Some(Due::After(Duration::from_secs(60 * minutes)));
        producer.publish_batch(vec![later]).await.unwrap();
    }

    let inspector = inspector(&server).await;
    let overview = inspector.overview("jobs").await.unwrap();
    assert_eq!((overview.length, overview.dead_letters), (5, 3));
    assert_eq!(overview.delayed.len, 2);
    let next = overview.delayed.next_due.expect("a next due time");
    assert!(
        next > Duration::from_secs(50) && next <= Duration::from_secs(60),
        "{next:?}"
    );
    let [group] = overview.groups.as_slice() else {
        panic!("one group: {overview:?}")
    };
    assert_eq!(
        (group.name.as_str(), group.pending, group.lag),
        ("workers", 4, Some(1))
    );
    assert_eq!(group.delivered, Some(7), "3 dead-lettered, then 4 held");
    assert!(group.oldest_pending_age.is_some());
    // Discovery: the stream, not its dead letters; other keys and types left out.
    cmd(&server, &["XADD", "{app}:audit", "*", "data", "x"]);
    cmd(&server, &["XADD", "{app}:audit:dead", "*", "data", "x"]);
    cmd(&server, &["SET", "plain", "x"]);
    assert_eq!(
        inspector.streams(100).await.unwrap(),
        ["jobs", "{app}:audit"],
        "sorted by name, dead-letter streams left out"
    );
    assert_eq!(inspector.streams(1).await.unwrap(), ["jobs"]);
    let mut consumers: Vec<(String, u64)> = group
        .consumers
        .iter()
        .map(|c| (c.name.clone(), c.pending))
        .collect();
    consumers.sort();
    assert_eq!(
        consumers,
        [("a".into(), 2), ("b".into(), 1), ("peer".into(), 1)]
    );

    // Pending, in pages of 2, by consumer, by idle time.
    let first = inspector
        .pending("jobs", None, &PendingQuery::all(2))
        .await
        .unwrap();
    assert_eq!(first.entries.len(), 2);
    let next = first.next.expect("more");
    let second = inspector
        .pending("jobs", Some("workers"), &PendingQuery::new(next))
        .await
        .unwrap();
    let ids: Vec<_> = first
        .entries
        .iter()
        .chain(&second.entries)
        .map(|e| e.id.clone())
        .collect();
    assert_eq!(ids.len(), 4);
    assert_eq!(
        ids.iter().collect::<HashSet<_>>().len(),
        4,
        "no entry twice: {ids:?}"
    );
    let taken = &first.entries[0];
    assert_eq!((taken.owner.as_str(), taken.delivery_count), ("peer", 2));
    let of_b = inspector
        .pending(
            "jobs",
            None,
            &PendingQuery::all(10).with_consumer(String::from("b")),
        )
        .await
        .unwrap();
    assert_eq!(of_b.entries.len(), 1);
    assert_eq!(of_b.entries[0].id, held_by_b[0].id);
    let idle = inspector
        .pending(
            "jobs",
            None,
            &PendingQuery::all(10).with_min_idle(Duration::from_secs(3600)),
        )
        .await
        .unwrap();
    assert!(idle.entries.is_empty(), "nothing idle an hour");

    // Dead letters, with payloads on request only.
    let dead = inspector
        .dead_letters("jobs", &Page::first(10), false)
        .await
        .unwrap();
    assert_eq!(dead.entries.len(), 3);
    assert!(dead.next.is_none());
    for entry in &dead.entries {
        assert!(entry.reason.contains("bad input"), "{entry:?}");
        assert_eq!(entry.delivery_count, 1);
        assert!(entry.at.is_some() && entry.payload.is_none());
    }
    let with_payloads = inspector
        .dead_letters("jobs", &Page::first(1), true)
        .await
        .unwrap();
    assert_eq!(
        with_payloads.entries[0].payload.as_deref(),
        Some(&b"poison-0"[..])
    );
    assert!(with_payloads.next.is_some());
}

#[tokio::test]
async fn requeue_and_purge_move_each_dead_letter_once_and_refuse_live_entries() {
    let server = server();
    let a = consumer(&server, "a").await;
    publish(&a, "poison", 4).await;
    dead_letter_all(&a, "bad input").await;
    // An id of its own: ids of two streams appended in one millisecond can be equal.
    let live: Vec<MessageId> = vec!["99999999999999-0".into()];
    cmd(&server, &["XADD", "jobs", live[0].as_str(), "data", "work"]);
    let inspector = inspector(&server).await;
    let dead: Vec<MessageId> = inspector
        .dead_letters("jobs", &Page::first(10), false)
        .await
        .unwrap()
        .entries
        .into_iter()
        .map(|e| e.id)
        .collect();

    // A live entry and an unknown id are refused, and nothing changes.
    let refused = inspector
        .purge_dead(
            "jobs",
            &Selection::Ids(vec![dead[0].clone(), live[0].clone(), "9-9".into()]),
        )
        .await
        .expect_err("not dead letters");
    let InspectError::NotDeadLetters { ids, .. } = &refused else {
        panic!("{refused}")
    };
    assert_eq!(
        ids,
        &[
            (live[0].clone(), NotDead::Live),
            ("9-9".into(), NotDead::Unknown)
        ]
    );
    assert!(
        refused.to_string().contains("a live entry of the stream"),
        "{refused}"
    );
    assert_eq!(inspector.overview("jobs").await.unwrap().dead_letters, 4);

    // Requeue one: a fresh message (delivery count 1) with the payload it had.
    let requeued = inspector
        .requeue("jobs", &Selection::Ids(vec![dead[0].clone()]))
        .await
        .unwrap();
    assert_eq!(requeued.moved.len(), 1);
    assert!(requeued.gone.is_empty());
    // Again: no dead letter any more, so it is reported gone and nothing is doubled.
    let again = inspector
        .requeue("jobs", &Selection::Ids(vec![dead[0].clone()]))
        .await
        .unwrap();
    assert!(again.moved.is_empty());
    assert_eq!(again.gone, [dead[0].clone()]);
    let fetched = a.fetch(10, Duration::ZERO).await.unwrap();
    let back = fetched
        .iter()
        .find(|m| m.id == requeued.moved[0].1)
        .expect("the requeued message is delivered");
    assert_eq!(
        (back.payload.as_ref(), back.delivery_count),
        (&b"poison-0"[..], 1)
    );

    // Purge the rest; the dead-letter stream is empty.
    let purged = inspector.purge_dead("jobs", &Selection::All).await.unwrap();
    assert_eq!(purged.deleted.len(), 3);
    assert_eq!(inspector.overview("jobs").await.unwrap().dead_letters, 0);
    let nothing = inspector.requeue("jobs", &Selection::All).await.unwrap();
    assert!(nothing.moved.is_empty());
    // Only dead letters older than a day: none.
    publish(&a, "poison", 1).await;
    dead_letter_all(&a, "later").await;
    let old = inspector
        .purge_dead("jobs", &Selection::OlderThan(Duration::from_secs(86_400)))
        .await
        .unwrap();
    assert!(old.deleted.is_empty());
}

#[tokio::test]
async fn racing_requeues_and_workers_lose_and_double_nothing() {
    let server = server();
    let a = consumer(&server, "a").await;
    publish(&a, "poison", 200).await;
    dead_letter_all(&a, "bad input").await;
    let (one, two) = (inspector(&server).await, inspector(&server).await);
    let worker = consumer(&server, "w").await;
    // Two requeues of everything at once, while a worker consumes what comes back.
    let consume = async {
        let mut seen = Vec::new();
        for _ in 0..200 {
            let got = worker.fetch(50, Duration::from_millis(20)).await.unwrap();
            let leases: Vec<LeaseRef> = got.iter().map(LeaseRef::from).collect();
            if !leases.is_empty() {
                worker.ack(&leases).await.unwrap();
            }
            seen.extend(got.into_iter().map(|m| m.payload));
            if seen.len() >= 200 {
                break;
            }
        }
        seen
    };
    let (first, second, seen) = tokio::join!(
        one.requeue("jobs", &Selection::All),
        two.requeue("jobs", &Selection::All),
        consume
    );
    let (first, second) = (first.unwrap(), second.unwrap());
    assert_eq!(
        first.moved.len() + second.moved.len(),
        200,
        "each moved once"
    );
    let moved: HashSet<_> = first
        .moved
        .iter()
        .chain(&second.moved)
        .map(|(d, _)| d)
        .collect();
    assert_eq!(moved.len(), 200, "no dead letter moved by both");
    let distinct: HashSet<_> = seen.iter().collect();
    assert_eq!(
        (seen.len(), distinct.len()),
        (200, 200),
        "each delivered once"
    );
    assert_eq!(one.overview("jobs").await.unwrap().dead_letters, 0);
}

#[tokio::test]
async fn bad_input_is_a_clear_error() {
    let server = server();
    let a = consumer(&server, "a").await;
    let inspector = inspector(&server).await;
    let missing = inspector.overview("nope").await.expect_err("no stream");
    assert!(
        matches!(missing, InspectError::NoSuchStream(_)),
        "{missing}"
    );
    cmd(&server, &["SET", "a-string", "x"]);
    let wrong = inspector
        .overview("a-string")
        .await
        .expect_err("not a stream");
    assert_eq!(wrong.to_string(), "\"a-string\" is a string, not a stream");
    let group = inspector
        .pending("jobs", Some("others"), &PendingQuery::all(10))
        .await
        .expect_err("no such group");
    assert!(group.to_string().contains("\"workers\""), "{group}");
    cmd(&server, &["XGROUP", "CREATE", "jobs", "second", "0"]);
    let which = inspector
        .pending("jobs", None, &PendingQuery::all(10))
        .await
        .expect_err("two groups");
    assert!(matches!(which, InspectError::WhichGroup { .. }), "{which}");
    let zero = inspector
        .dead_letters("jobs", &Page::first(0), false)
        .await
        .expect_err("an empty page");
    assert!(matches!(zero, InspectError::Invalid(_)));
    let not_an_id = inspector
        .requeue("jobs", &Selection::Ids(vec!["not-an-id".into()]))
        .await
        .expect_err("no such dead letter");
    assert!(
        not_an_id.to_string().contains("no such entry"),
        "{not_an_id}"
    );
    drop(a);
}

#[tokio::test]
async fn pages_of_many_pending_entries_neither_miss_nor_repeat() {
    let server = server();
    let a = consumer(&server, "a").await;
    publish(&a, "m", 1000).await;
    assert_eq!(a.fetch(1000, Duration::ZERO).await.unwrap().len(), 1000);
    let inspector = inspector(&server).await;
    let mut query = PendingQuery::all(128);
    let mut ids = Vec::new();
    loop {
        let page = inspector.pending("jobs", None, &query).await.unwrap();
        assert!(page.entries.len() <= 128);
        ids.extend(page.entries.into_iter().map(|e| e.id));
        match page.next {
            Some(next) => query.page = next,
            None => break,
        }
    }
    let distinct: HashSet<_> = ids.iter().collect();
    assert_eq!((ids.len(), distinct.len()), (1000, 1000));
}
