//! The dashboard's guards over plain HTTP, on the in-memory backend: the token, the CSRF
//! secret and the origin checks on actions, read-only mode, unknown names, the security
//! headers, the live part of a page, and options that refuse to start.

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use leasehold_core::{DeadLetterReason, LeaseRef};
use leasehold_dashboard::{Dashboard, DashboardError, MemorySource, Options, OptionsError};
use leasehold_memory::{MemoryInspector, MemoryStream, StreamConfig};
use support::{http, Answer};

const TOKEN: &str = "s3cret-token-for-tests";

/// A stream `jobs` with two dead letters.
fn stream() -> MemoryStream {
    let stream = MemoryStream::new(StreamConfig::new(Duration::from_secs(30))).unwrap();
    let consumer = stream.consumer("w").unwrap();
    for payload in ["{\"n\":1}", "{\"n\":2}"] {
        stream.publish(payload.as_bytes().to_vec());
    }
    for message in consumer.fetch_now(10) {
        let lease = LeaseRef::from(&message);
        consumer.dead_letter_now(&lease, &DeadLetterReason::Rejected("bad".into()));
    }
    stream
}

/// Serves a dashboard over `stream` with `options` (on a free loopback port); stops when
/// the returned sender is dropped.
async fn serve(
    stream: &MemoryStream,
    options: Options,
) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let source = MemorySource::new(MemoryInspector::new().with_stream("jobs", stream));
    let options = Options {
        bind: "127.0.0.1:0".parse().unwrap(),
        ..options
    };
    let dashboard = Dashboard::bind(source, options).await.expect("bind");
    let addr = dashboard.local_addr();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(dashboard.serve(async {
        let _ = stopped.await;
    }));
    (addr, stop)
}

/// `http` on a blocking thread (the server runs on this runtime).
async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Answer {
    let (method, path, body) = (method.to_owned(), path.to_owned(), body.to_owned());
    let headers: Vec<(String, String)> = headers
        .iter()
        .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
        .collect();
    tokio::task::spawn_blocking(move || {
        let headers: Vec<(&str, &str)> = headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        http(addr, &method, &path, &headers, &body)
    })
    .await
    .expect("joined")
}

/// The CSRF secret in the page's forms.
fn csrf(page: &str) -> String {
    let at = page.find("name=\"csrf\" value=\"").expect("a form") + 19;
    page[at..at + 32].to_owned()
}

fn dead_ids(page: &str) -> Vec<String> {
    page.match_indices("data-dead=\"")
        .map(|(at, _)| page[at + 11..].split('"').next().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_needs_the_token_once_one_is_set() {
    let stream = stream();
    let options = Options {
        token: Some(TOKEN.into()),
        ..Options::default()
    };
    let (addr, _stop) = serve(&stream, options).await;
    for path in [
        "/",
        "/streams/jobs",
        "/streams/jobs/dead",
        "/assets/app.js",
        "/healthz",
    ] {
        let answer = request(addr, "GET", path, &[], "").await;
        assert_eq!(answer.status, 401, "{path}");
        assert!(!answer.body.contains("jobs"), "{path}: {}", answer.body);
    }
    let wrong = request(
        addr,
        "GET",
        "/",
        &[("Authorization", "Bearer s3cret-token-for-test")],
        "",
    )
    .await;
    assert_eq!(wrong.status, 401);
    let bearer = request(
        addr,
        "GET",
        "/",
        &[("Authorization", &format!("Bearer {TOKEN}"))],
        "",
    )
    .await;
    assert_eq!(bearer.status, 200);
    // Once in the query: a cookie, and the same URL without the token.
    let first = request(
        addr,
        "GET",
        &format!("/streams/jobs/dead?token={TOKEN}&after=0-0"),
        &[],
        "",
    )
    .await;
    assert_eq!(first.status, 303);
    assert_eq!(
        first.header("location"),
        Some("/streams/jobs/dead?after=0-0")
    );
    let cookie = first.header("set-cookie").expect("a cookie");
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let pair = cookie.split(';').next().unwrap();
    let page = request(addr, "GET", "/streams/jobs/dead", &[("Cookie", pair)], "").await;
    assert_eq!(page.status, 200);
    assert_eq!(dead_ids(&page.body).len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actions_need_the_pages_own_form() {
    let stream = stream();
    let (addr, _stop) = serve(&stream, Options::default()).await;
    let page = request(addr, "GET", "/streams/jobs/dead", &[], "").await;
    assert_eq!(page.status, 200);
    let (secret, ids) = (csrf(&page.body), dead_ids(&page.body));
    let one = format!("one={}", ids[0]);
    let forged = [
        (format!("csrf=0000&{one}"), vec![]),
        (one.clone(), vec![]),
        (
            format!("csrf={secret}&{one}"),
            vec![("Origin", "http://evil.example")],
        ),
        (
            format!("csrf={secret}&{one}"),
            vec![("Sec-Fetch-Site", "cross-site")],
        ),
    ];
    for (body, headers) in forged {
        let answer = request(addr, "POST", "/streams/jobs/dead/purge", &headers, &body).await;
        assert_eq!(answer.status, 403, "{body} {headers:?}");
    }
    assert_eq!(stream.dead_letters().len(), 2, "nothing was purged");
    // The real form: purged, and back to the list with a notice.
    let answer = request(
        addr,
        "POST",
        "/streams/jobs/dead/purge",
        &[
            ("Origin", &format!("http://{addr}")),
            ("Sec-Fetch-Site", "same-origin"),
        ],
        &format!("csrf={secret}&{one}"),
    )
    .await;
    assert_eq!(answer.status, 303, "{}", answer.body);
    let location = answer.header("location").expect("a redirect").to_owned();
    assert!(
        location.starts_with("/streams/jobs/dead?notice="),
        "{location}"
    );
    assert_eq!(stream.dead_letters().len(), 1);
    let after = request(addr, "GET", &location, &[], "").await;
    assert!(
        after.body.contains("deleted 1 dead letter(s)"),
        "{}",
        after.body
    );
    // Nothing selected is a notice, not an error.
    let none = request(
        addr,
        "POST",
        "/streams/jobs/dead/requeue",
        &[],
        &format!("csrf={secret}"),
    )
    .await;
    assert_eq!(none.status, 303);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_hides_and_refuses_every_action() {
    let stream = stream();
    let options = Options {
        read_only: true,
        ..Options::default()
    };
    let (addr, _stop) = serve(&stream, options).await;
    let page = request(addr, "GET", "/streams/jobs/dead", &[], "").await;
    assert_eq!(page.status, 200);
    assert!(
        !page.body.contains("<form") && !page.body.contains("<button"),
        "{}",
        page.body
    );
    assert!(page.body.contains("read-only"));
    let id = &dead_ids(&page.body)[0];
    let detail = request(addr, "GET", &format!("/streams/jobs/dead/{id}"), &[], "").await;
    assert_eq!(detail.status, 200);
    assert!(!detail.body.contains("<form"), "{}", detail.body);
    for action in ["requeue", "purge"] {
        let answer = request(
            addr,
            "POST",
            &format!("/streams/jobs/dead/{action}"),
            &[],
            "all=1",
        )
        .await;
        assert_eq!(answer.status, 403);
    }
    assert_eq!(stream.dead_letters().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_answer_their_live_part_headers_and_unknown_names() {
    let stream = stream();
    let (addr, _stop) = serve(&stream, Options::default()).await;
    let whole = request(addr, "GET", "/", &[], "").await;
    assert_eq!(whole.status, 200);
    assert!(whole.body.starts_with("<!DOCTYPE html>"));
    let csp = whole.header("content-security-policy").expect("a CSP");
    assert!(
        csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"),
        "{csp}"
    );
    assert_eq!(whole.header("x-content-type-options"), Some("nosniff"));
    let live = request(addr, "GET", "/", &[("X-Leasehold-Live", "1")], "").await;
    assert!(!live.body.contains("<html"), "{}", live.body);
    assert!(live.body.contains("data-stream=\"jobs\""));
    for path in [
        "/streams/nope",
        "/streams/nope/dead",
        "/queues/nope",
        "/queues/nope/commands/x",
    ] {
        assert_eq!(
            request(addr, "GET", path, &[], "").await.status,
            404,
            "{path}"
        );
    }
    let missing = request(addr, "GET", "/streams/jobs/dead/1-1", &[], "").await;
    assert_eq!(missing.status, 404);
}

#[tokio::test]
async fn options_that_would_open_the_door_refuse_to_start() {
    let source = MemorySource::new(MemoryInspector::new());
    let open = Options {
        bind: "0.0.0.0:0".parse().unwrap(),
        ..Options::default()
    };
    let error = Dashboard::bind(source, open).await.expect_err("refused");
    assert!(
        matches!(
            error,
            DashboardError::Options(OptionsError::OpenWithoutToken(_))
        ),
        "{error}"
    );
    assert!(error.to_string().contains("--token"), "{error}");
}

/// The shards of a sharded queue (streams `{queue:i}`) show as one row of the queue with their
/// totals, and the queue's page lists each shard linking to its stream page; a hostile queue
/// name is escaped everywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sharded_queue_is_one_row_with_totals_and_a_page_of_shards() {
    let claim = Duration::from_secs(30);
    let shard = |messages: usize, held: usize| {
        let stream = MemoryStream::new(StreamConfig::new(claim)).unwrap();
        for n in 0..messages {
            stream.publish(format!("{{\"n\":{n}}}").into_bytes());
        }
        let consumer = stream.consumer("w").unwrap();
        assert_eq!(consumer.fetch_now(held).len(), held);
        stream
    };
    let (a, b, c) = (shard(2, 1), shard(3, 2), stream());
    let hostile = shard(1, 0);
    let inspector = MemoryInspector::new()
        .with_stream("{orders:0}", &a)
        .with_stream("{orders:1}", &b)
        .with_stream("jobs", &c)
        .with_stream("{<img src=x>:0}", &hostile);
    let options = Options {
        bind: "127.0.0.1:0".parse().unwrap(),
        ..Options::default()
    };
    let dashboard = Dashboard::bind(MemorySource::new(inspector), options)
        .await
        .expect("bind");
    let addr = dashboard.local_addr();
    let (_stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(dashboard.serve(async {
        let _ = stopped.await;
    }));

    let live = request(addr, "GET", "/", &[("X-Leasehold-Live", "1")], "").await;
    let body = &live.body;
    let row = body
        .split("<tr")
        .find(|row| row.contains("data-sharded=\"orders\""))
        .unwrap_or_else(|| panic!("a row of the queue: {body}"));
    assert!(row.contains("data-shards=\"2\""), "{row}");
    assert!(row.contains("href=\"/sharded/orders\""), "{row}");
    for (field, value) in [
        ("length", "5"),
        ("pending", "3"),
        ("lag", "2"),
        ("dead", "0"),
    ] {
        assert!(
            row.contains(&format!("data-field=\"{field}\">{value}<")),
            "{field} = {value}: {row}"
        );
    }
    assert!(
        !body.contains("data-stream=\"{orders:0}\""),
        "no row of its own: {body}"
    );
    assert!(body.contains("data-stream=\"jobs\""), "{body}");
    assert!(!body.contains("<img src=x>"), "escaped: {body}");
    assert!(body.contains("&lt;img src=x&gt;"), "{body}");

    let page = request(addr, "GET", "/sharded/orders", &[], "").await;
    assert_eq!(page.status, 200);
    for (i, length) in [(0, 2), (1, 3)] {
        let row = page
            .body
            .split("<tr")
            .find(|row| row.contains(&format!("data-shard=\"{i}\"")))
            .unwrap_or_else(|| panic!("shard {i}: {}", page.body));
        assert!(
            row.contains(&format!("href=\"/streams/%7Borders%3A{i}%7D\"")),
            "{row}"
        );
        assert!(
            row.contains(&format!("data-field=\"length\">{length}<")),
            "{row}"
        );
    }
    assert!(
        page.body.contains("data-field=\"length\">5<"),
        "{}",
        page.body
    );
    let shard_page = request(addr, "GET", "/streams/%7Borders%3A1%7D", &[], "").await;
    assert_eq!(shard_page.status, 200);
    assert!(
        shard_page.body.contains("href=\"/sharded/orders\""),
        "under its queue"
    );
    let hostile = request(addr, "GET", "/sharded/%3Cimg%20src%3Dx%3E", &[], "").await;
    assert_eq!(hostile.status, 200);
    assert!(!hostile.body.contains("<img src=x>"), "{}", hostile.body);
    for path in ["/sharded/nope", "/sharded/jobs"] {
        assert_eq!(
            request(addr, "GET", path, &[], "").await.status,
            404,
            "{path}"
        );
    }
}
