//! Delayed and deduplicated publishing ([`RedisPublisher`]) and the promotion of due messages
//! by the fetch, against a real, throwaway `redis-server`.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use leasehold_core::{
    Backend, Dedupe, Due, ErrorKind, Fetched, Outgoing, Published, Publisher, MAX_DELAY,
};
use leasehold_redis::{PublisherConfig, RedisBackend, RedisConfig, RedisPublisher};
use leasehold_redis_harness::RedisServer;

const STREAM: &str = "jobs";
const DELAYED: &str = "{jobs}:delayed";
/// Long enough that nothing a test leaves pending is reclaimed while it runs.
const CLAIM: Duration = Duration::from_secs(60);
/// How long a test waits for something that should happen within a fraction of it.
const DEADLINE: Duration = Duration::from_secs(20);

fn server() -> RedisServer {
    RedisServer::start().unwrap_or_else(|e| panic!("these tests need redis-server: {e}"))
}

async fn publisher(server: &RedisServer) -> RedisPublisher {
    RedisPublisher::connect(PublisherConfig::new(server.url(), STREAM))
        .await
        .expect("connect publisher")
}

async fn consumer(server: &RedisServer, name: &str) -> RedisBackend {
    let config = RedisConfig::new(server.url(), STREAM, "workers")
        .consumer(name)
        .claim_timeout(CLAIM);
    RedisBackend::connect(config).await.expect("connect")
}

fn plain(payload: &str) -> Outgoing<Bytes> {
    Outgoing::new(Bytes::from(payload.to_string()))
}

fn after(payload: &str, delay: Duration) -> Outgoing<Bytes> {
    plain(payload).with_due(Due::After(delay))
}

fn deduped(message: Outgoing<Bytes>, key: &str, ttl: Duration) -> Outgoing<Bytes> {
    message.with_dedupe(Dedupe::new(key, ttl))
}

fn int(server: &RedisServer, args: &[&str]) -> i64 {
    let reply = server.command(args).expect("command");
    reply
        .as_int()
        .unwrap_or_else(|| panic!("{args:?} replied {reply:?}"))
}

/// The payloads of the stream's entries, in stream order.
fn stream_payloads(server: &RedisServer) -> Vec<String> {
    let reply = server.command(["XRANGE", STREAM, "-", "+"]).unwrap();
    let mut out = Vec::new();
    for entry in reply.as_array().unwrap_or_default() {
        let fields = entry.as_array().unwrap()[1].as_array().unwrap();
        out.push(fields[1].as_str().unwrap().to_string());
    }
    out
}

/// The server's clock, Unix ms.
fn server_now_ms(server: &RedisServer) -> u64 {
    let reply = server.command(["TIME"]).unwrap();
    let parts = reply.as_array().unwrap();
    let secs: u64 = parts[0].as_str().unwrap().parse().unwrap();
    let micros: u64 = parts[1].as_str().unwrap().parse().unwrap();
    secs * 1000 + micros / 1000
}

fn stream_ms(message: &Fetched<Bytes>) -> u64 {
    let (ms, _) = message.id.as_str().split_once('-').unwrap();
    ms.parse().unwrap()
}

/// Fetches (waiting up to `wait` each time) until `n` messages came or the deadline passed.
async fn fetch_until(backend: &RedisBackend, n: usize, wait: Duration) -> Vec<Fetched<Bytes>> {
    let deadline = Instant::now() + DEADLINE;
    let mut got = Vec::new();
    while got.len() < n && Instant::now() < deadline {
        match backend.fetch(n - got.len(), wait).await {
            Ok(batch) => got.extend(batch),
            // A server restarting under the test: retry, as the worker does.
            Err(e) if e.is_transient() => tokio::task::yield_now().await,
            Err(e) => panic!("fetch: {e}"),
        }
    }
    got
}

/// Messages `m0`, `m1`, ... all due at `at`.
fn all_due_at(n: usize, at: SystemTime) -> Vec<Outgoing<Bytes>> {
    (0..n)
        .map(|i| plain(&format!("m{i}")).with_due(Due::At(at)))
        .collect()
}

/// Waits until the earliest delayed message is due on the server's clock.
async fn until_due(publisher: &RedisPublisher) {
    let deadline = Instant::now() + DEADLINE;
    while publisher.delayed().await.unwrap().next_due != Some(Duration::ZERO) {
        assert!(Instant::now() < deadline, "never due");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Until a fetch waits blocked in `XREAD` or `XREADGROUP`.
async fn wait_for_blocked_read(server: &RedisServer) {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let clients = server.command(["CLIENT", "LIST"]).unwrap();
        let blocked = clients.as_str().unwrap().lines().any(|line| {
            (line.contains("cmd=xread ") || line.contains("cmd=xreadgroup "))
                && line.contains("flags=b")
        });
        if blocked {
            return;
        }
        assert!(Instant::now() < deadline, "no fetch blocked in a read");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_plain_batch_appends_in_order() {
    let server = server();
    let publisher = publisher(&server).await;
    let batch = (0..5).map(|i| plain(&format!("m{i}"))).collect();
    let published = publisher.publish_batch(batch).await.unwrap();
    assert_eq!(published.len(), 5);
    assert!(published.iter().all(|p| !p.duplicate));
    let ids: Vec<&str> = published.iter().map(|p| p.id.as_str()).collect();
    let mut sorted = ids.clone();
    sorted.sort_by_key(|id| {
        let (ms, seq) = id.split_once('-').unwrap();
        (ms.parse::<u64>().unwrap(), seq.parse::<u64>().unwrap())
    });
    assert_eq!(ids, sorted, "stream ids ascend in publish order");
    assert_eq!(stream_payloads(&server), ["m0", "m1", "m2", "m3", "m4"]);
    assert!(publisher
        .publish_batch(Vec::new())
        .await
        .unwrap()
        .is_empty());

    // The consumers read the same field.
    let a = consumer(&server, "a").await;
    let fetched = a.fetch(10, Duration::ZERO).await.unwrap();
    let got: Vec<&str> = fetched.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(got, ids);
    assert_eq!(fetched.next_due, None, "nothing delayed");
}

#[tokio::test]
async fn a_batch_with_options_publishes_each_message_its_way_in_order() {
    let server = server();
    let publisher = publisher(&server).await;
    let hour = Duration::from_secs(3600);
    let past = SystemTime::now() - hour;
    let batch = vec![
        plain("now"),
        after("later", hour),
        deduped(plain("once"), "k", hour),
        deduped(plain("once again"), "k", hour),
        plain("overdue").with_due(Due::At(past)),
        after("zero delay", Duration::ZERO),
    ];
    let published = publisher.publish_batch(batch).await.unwrap();
    let ids: Vec<&str> = published.iter().map(|p| p.id.as_str()).collect();
    assert_eq!(ids[1], "delayed:1");
    assert_eq!(ids[3], ids[2], "the duplicate answers the first one's id");
    let duplicates: Vec<bool> = published.iter().map(|p| p.duplicate).collect();
    assert_eq!(duplicates, [false, false, false, true, false, false]);
    assert_eq!(
        stream_payloads(&server),
        ["now", "once", "overdue", "zero delay"]
    );
    let summary = publisher.delayed().await.unwrap();
    assert_eq!(summary.len, 1);
    let next = summary.next_due.unwrap();
    assert!(next <= hour && next > hour - DEADLINE, "{next:?}");

    // One at a time, too.
    let one = publisher.publish(after("later too", hour)).await.unwrap();
    assert_eq!(one, Published::new("delayed:2".into(), false));
    assert_eq!(publisher.delayed().await.unwrap().len, 2);
}

#[tokio::test]
async fn a_delayed_message_is_fetched_once_it_is_due_and_not_before() {
    let server = server();
    let publisher = publisher(&server).await;
    let a = consumer(&server, "a").await;
    let delay = Duration::from_secs(2);
    let before_publish = server_now_ms(&server);
    let published = publisher.publish(after("soon", delay)).await.unwrap();
    assert!(published.id.as_str().starts_with("delayed:"));

    let empty = a.fetch(10, Duration::ZERO).await.unwrap();
    assert!(empty.is_empty());
    let next = empty
        .next_due
        .expect("a fetch that found nothing knows the due time");
    assert!(next <= delay, "{next:?}");

    let got = fetch_until(&a, 1, Duration::from_secs(5)).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].payload, Bytes::from_static(b"soon"));
    assert_eq!((got[0].delivery_count, got[0].fence.0), (1, 1));
    // Its stream id is the server's clock when it was promoted: not before it was due.
    assert!(stream_ms(&got[0]) >= before_publish + 2000);
    let after = a.fetch(10, Duration::ZERO).await.unwrap();
    assert_eq!(after.next_due, None, "nothing else is delayed");
    assert_eq!(int(&server, &["ZCARD", DELAYED]), 0);
    assert_eq!(int(&server, &["XLEN", STREAM]), 1);
}

#[tokio::test]
async fn a_due_message_behind_a_backlog_is_promoted_by_the_next_fetch() {
    let server = server();
    let publisher = publisher(&server).await;
    let a = consumer(&server, "a").await;
    // The first fetch runs the script; the next ones read without one while nothing is due.
    publisher.publish(plain("first")).await.unwrap();
    assert_eq!(a.fetch(1, Duration::ZERO).await.unwrap().len(), 1);
    publisher
        .publish_batch(vec![
            plain("a"),
            plain("b"),
            after("due", Duration::from_millis(200)),
        ])
        .await
        .unwrap();
    until_due(&publisher).await;
    // The backlog is read first; the fetch sees the due message and says so.
    let got = a.fetch(1, Duration::ZERO).await.unwrap();
    assert_eq!(got[0].payload, Bytes::from_static(b"a"));
    assert_eq!(got.next_due, Some(Duration::ZERO));
    // The next fetch promotes it, behind the rest of the backlog.
    let got = a.fetch(10, Duration::ZERO).await.unwrap();
    let payloads: Vec<_> = got.iter().map(|m| m.payload.clone()).collect();
    assert_eq!(payloads, [&b"b"[..], &b"due"[..]]);
    assert_eq!(got.next_due, None);
}

#[tokio::test]
async fn an_idle_fetch_wakes_for_a_message_delayed_after_it_started_waiting() {
    let server = server();
    let publisher = publisher(&server).await;
    let a = Arc::new(consumer(&server, "a").await);
    let waiting = {
        let a = Arc::clone(&a);
        // Far longer than the test may take: only the wake-up can end it in time.
        tokio::spawn(async move { a.fetch(10, Duration::from_secs(300)).await })
    };
    wait_for_blocked_read(&server).await;
    publisher
        .publish(after("wake", Duration::from_millis(300)))
        .await
        .unwrap();
    let got = tokio::time::timeout(DEADLINE, waiting)
        .await
        .expect("the waiting fetch returned the delayed message when it was due")
        .unwrap()
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].payload, Bytes::from_static(b"wake"));
    assert_eq!(got[0].delivery_count, 1);
    // The wait took the wake-up through the wake stream's group, and acknowledged it.
    let wake_pending = server
        .command(["XPENDING", "{jobs}:delayed:wake", "workers"])
        .unwrap();
    assert_eq!(
        wake_pending
            .as_array()
            .and_then(|a| a.first())
            .and_then(|n| n.as_int()),
        Some(0),
        "{wake_pending:?}"
    );

    // After a fetch that found nothing, the backend tells when the next one is due.
    let hour = Duration::from_secs(3600);
    publisher.publish(after("later", hour)).await.unwrap();
    let empty = a.fetch(10, Duration::ZERO).await.unwrap();
    assert!(empty.is_empty());
    let next = empty.next_due.unwrap();
    assert!(next <= hour && next > hour - DEADLINE, "{next:?}");
}

#[tokio::test]
async fn racing_consumers_promote_each_due_message_exactly_once() {
    const N: usize = 500;
    let server = server();
    let publisher = publisher(&server).await;
    let mut consumers = Vec::new();
    for i in 0..4 {
        consumers.push(Arc::new(consumer(&server, &format!("c{i}")).await));
    }
    // All due at the same moment, while the consumers fetch.
    let due = SystemTime::now() + Duration::from_millis(500);
    let batch = all_due_at(N, due);
    publisher.publish_batch(batch).await.unwrap();
    let total = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = consumers
        .iter()
        .map(|c| {
            let (c, total) = (Arc::clone(c), Arc::clone(&total));
            tokio::spawn(async move {
                let deadline = Instant::now() + DEADLINE;
                let mut got = Vec::new();
                while total.load(Ordering::SeqCst) < N && Instant::now() < deadline {
                    let batch = c.fetch(37, Duration::from_millis(100)).await.unwrap();
                    total.fetch_add(batch.len(), Ordering::SeqCst);
                    got.extend(batch);
                }
                got
            })
        })
        .collect();
    let mut delivered = Vec::new();
    for task in tasks {
        delivered.extend(task.await.unwrap());
    }
    assert!(
        consumers[0]
            .fetch(N, Duration::ZERO)
            .await
            .unwrap()
            .is_empty(),
        "nothing more"
    );
    assert_eq!(delivered.len(), N, "every message delivered, once");
    let ids: HashSet<_> = delivered.iter().map(|m| m.id.clone()).collect();
    let payloads: HashSet<_> = delivered.iter().map(|m| m.payload.clone()).collect();
    assert_eq!((ids.len(), payloads.len()), (N, N), "no duplicates");
    assert!(delivered.iter().all(|m| m.delivery_count == 1));
    let in_stream = stream_payloads(&server);
    assert_eq!(in_stream.len(), N, "each promoted once");
    assert_eq!(in_stream.iter().collect::<HashSet<_>>().len(), N);
    // Equal due times keep their publish order.
    let expected: Vec<String> = (0..N).map(|i| format!("m{i}")).collect();
    assert_eq!(in_stream, expected);
    assert_eq!(int(&server, &["ZCARD", DELAYED]), 0);
}

#[tokio::test]
async fn one_fetch_promotes_at_most_a_thousand_and_says_more_are_due() {
    let server = server();
    let publisher = publisher(&server).await;
    let a = consumer(&server, "a").await;
    let due = SystemTime::now() + Duration::from_millis(200);
    let batch = all_due_at(1200, due);
    publisher.publish_batch(batch).await.unwrap();
    until_due(&publisher).await;
    let got = a.fetch(10, Duration::ZERO).await.unwrap();
    assert_eq!(got.len(), 10);
    assert_eq!(int(&server, &["XLEN", STREAM]), 1000);
    assert_eq!(got.next_due, Some(Duration::ZERO), "200 more are due");
    assert_eq!(publisher.delayed().await.unwrap().len, 200);
    let rest = fetch_until(&a, 1190, Duration::ZERO).await;
    assert_eq!(rest.len(), 1190);
    assert_eq!(a.fetch(10, Duration::ZERO).await.unwrap().next_due, None);
}

#[tokio::test]
async fn a_deduplication_key_holds_for_its_ttl_then_publishes_again() {
    let server = server();
    let publisher = publisher(&server).await;
    let hour = Duration::from_secs(3600);
    let first = publisher
        .publish(deduped(plain("a"), "order-1", hour))
        .await
        .unwrap();
    assert!(!first.duplicate);
    let again = publisher
        .publish(deduped(plain("b"), "order-1", hour))
        .await
        .unwrap();
    assert_eq!(
        (again.id.clone(), again.duplicate),
        (first.id.clone(), true)
    );
    assert_eq!(
        stream_payloads(&server),
        ["a"],
        "the duplicate enqueued nothing"
    );
    let ttl = int(&server, &["PTTL", "{jobs}:dedupe:order-1"]);
    assert!(ttl > 0 && ttl <= 3_600_000, "{ttl}");

    // A short ttl: once the key has expired, the same key publishes again.
    let short = Duration::from_millis(100);
    let first = publisher
        .publish(deduped(plain("c"), "order-2", short))
        .await
        .unwrap();
    let deadline = Instant::now() + DEADLINE;
    while int(&server, &["EXISTS", "{jobs}:dedupe:order-2"]) == 1 {
        assert!(Instant::now() < deadline, "the key never expired");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let second = publisher
        .publish(deduped(plain("d"), "order-2", short))
        .await
        .unwrap();
    assert!(!second.duplicate);
    assert_ne!(second.id, first.id);
    assert_eq!(stream_payloads(&server), ["a", "c", "d"]);
}

#[tokio::test]
async fn a_delayed_message_is_deduplicated_too() {
    let server = server();
    let publisher = publisher(&server).await;
    let a = consumer(&server, "a").await;
    let message = || {
        deduped(
            after("x", Duration::from_millis(300)),
            "k",
            Duration::from_secs(3600),
        )
    };
    let first = publisher.publish(message()).await.unwrap();
    assert_eq!(first.id.as_str(), "delayed:1");
    let again = publisher.publish(message()).await.unwrap();
    assert_eq!((again.id.as_str(), again.duplicate), ("delayed:1", true));
    assert_eq!(publisher.delayed().await.unwrap().len, 1);
    let got = fetch_until(&a, 1, Duration::from_secs(1)).await;
    assert_eq!(got.len(), 1);
    // Still held after it was delivered: within the ttl it stays a duplicate.
    let later = publisher.publish(message()).await.unwrap();
    assert_eq!((later.id.as_str(), later.duplicate), ("delayed:1", true));
    assert_eq!(int(&server, &["XLEN", STREAM]), 1);
    assert_eq!(int(&server, &["ZCARD", DELAYED]), 0);
}

#[tokio::test]
async fn a_delayed_message_survives_a_restart_with_aof() {
    let server = RedisServer::builder()
        .aof(true)
        .start()
        .unwrap_or_else(|e| panic!("these tests need redis-server: {e}"));
    let publisher = publisher(&server).await;
    let a = consumer(&server, "a").await;
    // Both have run their scripts, which the restarted server forgets.
    assert!(a.fetch(10, Duration::ZERO).await.unwrap().is_empty());
    publisher
        .publish(after("durable", Duration::from_millis(500)))
        .await
        .unwrap();
    server.kill().unwrap();
    server.restart().unwrap();
    assert_eq!(int(&server, &["ZCARD", DELAYED]), 1, "kept by the AOF");

    // The publisher reloads its script (NOSCRIPT) and carries on.
    let deadline = Instant::now() + DEADLINE;
    let second = loop {
        match publisher
            .publish(after("after restart", Duration::from_millis(100)))
            .await
        {
            Ok(published) => break published,
            Err(e) if e.is_transient() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("publish after restart: {e}"),
        }
    };
    assert_eq!(second.id.as_str(), "delayed:2", "the sequence survived too");

    let got = fetch_until(&a, 2, Duration::from_secs(1)).await;
    let mut payloads: Vec<_> = got.iter().map(|m| m.payload.clone()).collect();
    payloads.sort();
    assert_eq!(payloads, [&b"after restart"[..], &b"durable"[..]]);
    assert!(got.iter().all(|m| m.delivery_count == 1));
}

#[tokio::test]
async fn a_delay_over_a_year_or_an_empty_key_is_refused_with_nothing_sent() {
    let server = server();
    let publisher = publisher(&server).await;
    let too_long = MAX_DELAY + Duration::from_secs(1);
    let refused = [
        vec![plain("ok"), after("too late", too_long)],
        vec![
            plain("ok"),
            plain("too late").with_due(Due::At(
                SystemTime::now() + too_long + Duration::from_secs(60),
            )),
        ],
        vec![deduped(plain("no key"), "", Duration::from_secs(1))],
        vec![deduped(plain("no ttl"), "k", Duration::ZERO)],
    ];
    for batch in refused {
        let e = publisher.publish_batch(batch).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Fatal, "{e}");
        assert!(e.to_string().contains("nothing sent"), "{e}");
    }
    let e = publisher
        .publish(after("too late", too_long))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("year"), "{e}");
    let e = publisher
        .publish(deduped(plain("no key"), "", Duration::from_secs(1)))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("empty"), "{e}");
    assert_eq!(
        int(&server, &["EXISTS", STREAM, DELAYED]),
        0,
        "nothing sent"
    );
}

#[tokio::test]
async fn a_publisher_config_that_cannot_work_is_refused_and_debug_hides_the_password() {
    let e = RedisPublisher::connect(PublisherConfig::new("redis://127.0.0.1:1/", "s").field(""))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Fatal);
    assert!(e.to_string().contains("field"), "{e}");

    let server = RedisServer::builder()
        .password("s3cret-pw")
        .start()
        .unwrap_or_else(|e| panic!("these tests need redis-server: {e}"));
    let publisher = RedisPublisher::connect(PublisherConfig::new(server.url(), STREAM))
        .await
        .unwrap();
    let debug = format!("{publisher:?}");
    assert!(!debug.contains("s3cret-pw"), "{debug}");
    publisher.publish(plain("authenticated")).await.unwrap();
    assert_eq!(stream_payloads(&server), ["authenticated"]);
}
