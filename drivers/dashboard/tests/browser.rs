//! The dashboard in a real browser: a throwaway redis-server seeded with workers holding
//! leases (one near lapsing, one lapsed), dead letters (one whose reason and payload are
//! script), delayed messages and commands in every status, a queue sharded over three streams
//! and a command queue over two shards; the dashboard on a free loopback
//! port; headless Chromium loading each page, checking the figures it shows (the sharded queue
//! as one row with its totals, and its page of shards), requeueing a dead
//! letter, cancelling a RUNNING command, and watching a page update itself. A screenshot of
//! each page lands in `target/dashboard-screenshots/`.

mod support;

use std::time::{Duration, Instant};

use bytes::Bytes;
use leasehold_commands::{
    Command, CommandContext, CommandHandler, CommandQueue, HandlerError, Status, Step,
};
use leasehold_core::{
    Backend, Config, DeadLetterReason, Due, Inspector, LeaseRef, MessageId, Outgoing, Publisher,
};
use leasehold_dashboard::{Dashboard, Options, RedisSource};
use leasehold_redis::{
    PublisherConfig, RedisBackend, RedisCommandStore, RedisConfig, RedisInspector, RedisPublisher,
    RedisStoreConfig,
};
use leasehold_redis_harness::RedisServer;
use leasehold_tokio::TokioRuntime;
use serde_json::{json, Value};
use support::{Browser, PATIENCE};

const CLAIM: Duration = Duration::from_secs(30);
const XSS_REASON: &str = "<script>window.__xss = 'reason'</script>";
const XSS_PAYLOAD: &str = "<img src=x onerror=\"window.__xss = 'payload'\">";

/// Commands by behaviour: `echo` succeeds, `provision` runs until cancelled, `boot` never
/// finishes starting (stays SUBMITTED until cancelled); any other type fails.
struct Handler;

impl CommandHandler for Handler {
    type Params = Value;
    type Output = Value;

    async fn execute(
        &self,
        ctx: CommandContext,
        params: Value,
    ) -> Result<Step<Value>, HandlerError> {
        match ctx.kind() {
            "echo" => Ok(Step::Succeeded(params)),
            "boot" => {
                ctx.stopped().await;
                Ok(Step::Running)
            }
            _ => Ok(Step::Running),
        }
    }

    async fn check_status(&self, _: CommandContext, _: Value) -> Result<Step<Value>, HandlerError> {
        Ok(Step::Running)
    }
}

async fn consumer(server: &RedisServer, name: &str) -> RedisBackend {
    let config = RedisConfig::new(server.url(), "orders", "workers")
        .consumer(name)
        .claim_timeout(CLAIM);
    RedisBackend::connect(config).await.expect("connect")
}

/// Publishes `payload` and dead-letters it with `reason`; the dead letter's id.
async fn dead_letter(
    server: &RedisServer,
    inspector: &RedisInspector,
    payload: &str,
    reason: &str,
) -> String {
    let poison = consumer(server, "poison").await;
    let id = poison
        .publish(Bytes::from(payload.to_owned()))
        .await
        .expect("publish");
    let fetched = poison.fetch(1, Duration::ZERO).await.expect("fetch");
    assert_eq!(fetched[0].id, id, "nothing else was waiting");
    let lease = LeaseRef::from(&fetched[0]);
    poison
        .dead_letter(&lease, &DeadLetterReason::Rejected(reason.into()))
        .await
        .expect("dead-letter");
    let page = leasehold_core::Page::first(1000);
    let listing = inspector
        .dead_letters("orders", &page, false)
        .await
        .expect("list");
    let entry = listing
        .entries
        .iter()
        .find(|e| e.original_id == fetched[0].id)
        .expect("the new dead letter");
    entry.id.to_string()
}

async fn until_status(
    queue: &CommandQueue<RedisCommandStore, TokioRuntime>,
    id: &str,
    status: Status,
) {
    let start = Instant::now();
    loop {
        let state = queue.command(id).await.expect("read").expect("exists");
        if state.status == status {
            return;
        }
        assert!(start.elapsed() < PATIENCE, "{id} stayed {}", state.status);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn redis(server: &RedisServer, args: &[&str]) {
    server.command(args).expect("the server answers");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seeded_system_seen_and_acted_on_in_chromium() {
    let server =
        RedisServer::start().unwrap_or_else(|e| panic!("this test needs redis-server: {e}"));
    let inspector = RedisInspector::connect(&server.url())
        .await
        .expect("inspector");

    // Stream `orders`: worker-a holds 3 leases, worker-b 2; two dead letters, one of them
    // script; two delayed messages.
    let (a, b) = (
        consumer(&server, "worker-a").await,
        consumer(&server, "worker-b").await,
    );
    let declined = dead_letter(
        &server,
        &inspector,
        r#"{"order":41,"total":12.5}"#,
        "card declined",
    )
    .await;
    let xss = dead_letter(&server, &inspector, XSS_PAYLOAD, XSS_REASON).await;
    for n in 0..5 {
        a.publish(Bytes::from(format!(r#"{{"order":{n}}}"#)))
            .await
            .expect("publish");
    }
    let held_a = a.fetch(3, Duration::ZERO).await.expect("fetch");
    let held_b = b.fetch(2, Duration::ZERO).await.expect("fetch");
    assert_eq!((held_a.len(), held_b.len()), (3, 2));
    let producer = RedisPublisher::connect(PublisherConfig::new(server.url(), "orders"))
        .await
        .expect("producer");
    for hours in [1, 2] {
        let mut later = Outgoing::new(Bytes::from_static(b"{\"later\":true}"));
        later.due = Some(Due::After(Duration::from_secs(3600 * hours)));
        producer.publish_batch(vec![later]).await.expect("delay");
    }

    // Queue `vms`: a command in every status.
    let store = RedisCommandStore::connect(RedisStoreConfig::new(server.url(), "vms"))
        .await
        .expect("store");
    let queue = CommandQueue::new(TokioRuntime::current(), store);
    let worker = queue
        .worker()
        .config(Config::default().claim_timeout(CLAIM))
        .handler("echo", Handler)
        .handler("provision", Handler)
        .handler("boot", Handler)
        .start()
        .await
        .expect("command worker");
    for (id, kind) in [
        ("vm-ok", "echo"),
        ("vm-broken", "mystery"),
        ("vm-running", "provision"),
        ("vm-booting", "boot"),
        ("vm-cancelled", "boot"),
    ] {
        let command = Command::new(kind, json!({ "id": id })).expect("params");
        queue.submit(command.with_id(id)).await.expect("submit");
    }
    until_status(&queue, "vm-ok", Status::Succeeded).await;
    until_status(&queue, "vm-broken", Status::Failed).await;
    until_status(&queue, "vm-running", Status::Running).await;
    assert!(queue.cancel("vm-cancelled").await.expect("cancel"));

    // Queue `payments` over 3 shards: shard i holds i + 1 messages; 1 of shard 0 and 2 of
    // shard 2 held; one dead letter in shard 1.
    for shard in 0..3usize {
        let stream = format!("{{payments:{shard}}}");
        let config = RedisConfig::new(server.url(), &stream, "workers")
            .consumer(format!("payer-{shard}"))
            .claim_timeout(CLAIM);
        let backend = RedisBackend::connect(config).await.expect("connect");
        for n in 0..=shard {
            backend
                .publish(Bytes::from(format!(r#"{{"payment":{n}}}"#)))
                .await
                .expect("publish");
        }
        let take = [1, 1, 2][shard];
        let fetched = backend.fetch(take, Duration::ZERO).await.expect("fetch");
        assert_eq!(fetched.len(), take);
        if shard == 1 {
            let lease = LeaseRef::from(&fetched[0]);
            let reason = DeadLetterReason::Rejected("no such account".into());
            backend
                .dead_letter(&lease, &reason)
                .await
                .expect("dead-letter");
        }
    }
    let payments = inspector
        .queue("payments")
        .await
        .expect("read")
        .expect("a sharded queue");
    assert_eq!(
        (payments.length, payments.pending, payments.dead_letters),
        (5, 3, 1)
    );
    // Command queue `jobs` over 2 shards: one command in each, both SUCCEEDED.
    let sharded = RedisStoreConfig::new(server.url(), "jobs")
        .shards(2)
        .expect("2 shards");
    let jobs = CommandQueue::new(
        TokioRuntime::current(),
        RedisCommandStore::connect(sharded).await.expect("store"),
    );
    let jobs_worker = jobs
        .worker()
        .config(Config::default().claim_timeout(CLAIM))
        .handler("echo", Handler)
        .start()
        .await
        .expect("command worker");
    let job_ids = ["job-a", "job-b", "job-c", "job-d"];
    for id in job_ids {
        let command = Command::new("echo", json!({ "id": id })).expect("params");
        jobs.submit(command.with_id(id)).await.expect("submit");
    }
    for id in job_ids {
        until_status(&jobs, id, Status::Succeeded).await;
    }
    jobs_worker.shutdown(Duration::from_secs(5)).await;

    // The dashboard, discovering them all.
    let source = RedisSource::connect(&server.url(), vec![], vec![])
        .await
        .expect("source");
    let options = Options {
        bind: "127.0.0.1:0".parse().unwrap(),
        claim_timeout: CLAIM,
        refresh: Duration::from_millis(300),
        ..Options::default()
    };
    let dashboard = Dashboard::bind(source, options).await.expect("bind");
    let base = format!("http://{}", dashboard.local_addr());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(dashboard.serve(async {
        let _ = stopped.await;
    }));
    let browser = Browser::start().await;
    let go = |path: &str| {
        let url = format!("{base}{path}");
        let client = browser.client.clone();
        async move { client.goto(&url).await.expect("navigate") }
    };

    // Overview: the seeded figures.
    go("/").await;
    let row = "tr[data-stream='orders']";
    browser.wait_for(row).await;
    let expected = inspector.overview("orders").await.expect("overview");
    let field = |name: &str| format!("{row} [data-field='{name}']");
    assert_eq!(
        browser.text(&field("length")).await,
        expected.length.to_string()
    );
    assert_eq!(browser.text(&field("pending")).await, "5");
    assert_eq!(browser.text(&field("dead")).await, "2");
    assert_eq!(browser.text(&field("delayed")).await, "2");
    assert_eq!(
        browser.text(&field("lag")).await,
        "0",
        "every entry delivered"
    );
    // worker-a, worker-b, and the consumer that dead-lettered.
    assert_eq!(browser.text(&field("consumers")).await, "3");
    let queue_row = "tr[data-queue='vms']";
    for status in Status::ALL {
        let count = browser
            .text(&format!("{queue_row} [data-field='{status}']"))
            .await;
        assert_eq!(count, "1", "{status}");
    }
    // The sharded queue: one row with the totals of its shards, none of its own for them.
    let sharded_row = "tr[data-sharded='payments']";
    let total = |name: &str| format!("{sharded_row} [data-field='{name}']");
    assert_eq!(
        browser.text(&total("length")).await,
        payments.length.to_string()
    );
    assert_eq!(browser.text(&total("pending")).await, "3");
    assert_eq!(browser.text(&total("dead")).await, "1");
    assert_eq!(
        browser.text(&total("lag")).await,
        "2",
        "shards 1 and 2 each have one not delivered"
    );
    assert_eq!(browser.text(&total("consumers")).await, "3");
    assert_eq!(browser.text(&total("shards")).await, "(3 shards)");
    assert_eq!(browser.count("tr[data-stream^='{payments:']").await, 0);
    // The sharded command queue: one row, counting both shards.
    assert_eq!(
        browser
            .text("tr[data-queue='jobs'] [data-field='SUCCEEDED']")
            .await,
        "4"
    );
    assert_eq!(browser.count("tr[data-queue^='jobs:']").await, 0);
    // Its streams: one row over its two shards.
    let jobs_streams = "tr[data-sharded='leasehold:{jobs}:stream']";
    assert_eq!(
        browser
            .text(&format!("{jobs_streams} [data-field='shards']"))
            .await,
        "(2 shards)"
    );
    assert_eq!(
        browser.count("tr[data-stream^='leasehold:{jobs:']").await,
        0
    );
    browser.screenshot("overview").await;

    // The sharded queue's page: its shards, each linking to its stream page.
    browser
        .click(&format!("{sharded_row} a[href='/sharded/payments']"))
        .await;
    browser.wait_for("table[data-table='shards']").await;
    assert_eq!(browser.count("tr[data-shard]").await, 3);
    for shard in 0..3u16 {
        let stream = format!("{{payments:{shard}}}");
        let own = inspector.overview(&stream).await.expect("overview");
        assert_eq!(
            browser
                .text(&format!("tr[data-shard='{shard}'] [data-field='length']"))
                .await,
            own.length.to_string()
        );
    }
    assert_eq!(
        browser
            .text("tr[data-group='workers'] [data-field='shards']")
            .await,
        "3"
    );
    browser.screenshot("sharded").await;
    browser.click("tr[data-shard='2'] a").await;
    browser
        .wait_text("tr[data-consumer='payer-2'] [data-field='pending']", "2")
        .await;

    // Dead letters: the script is text, and never ran.
    go("/streams/orders/dead").await;
    browser.wait_for("tr[data-dead]").await;
    assert_eq!(browser.count("tr[data-dead]").await, 2);
    let reason = browser
        .text(&format!("tr[data-dead='{xss}'] [data-field='reason']"))
        .await;
    assert_eq!(reason, format!("rejected: {XSS_REASON}"));
    assert_eq!(
        browser
            .text(&format!("tr[data-dead='{declined}'] [data-field='reason']"))
            .await,
        "rejected: card declined"
    );
    let ran = |client: fantoccini::Client| async move {
        client
            .execute("return window.__xss === undefined", vec![])
            .await
            .expect("script")
    };
    assert_eq!(
        ran(browser.client.clone()).await,
        json!(true),
        "the reason ran as script"
    );
    browser.screenshot("dead-letters").await;
    go(&format!("/streams/orders/dead/{xss}")).await;
    browser.wait_for("pre[data-payload]").await;
    assert_eq!(browser.text("pre[data-payload]").await, XSS_PAYLOAD);
    assert_eq!(
        ran(browser.client.clone()).await,
        json!(true),
        "the payload ran as script"
    );
    go(&format!("/streams/orders/dead/{declined}")).await;
    browser.wait_for("pre[data-payload]").await;
    assert_eq!(
        browser.text("pre[data-payload]").await,
        "{\n  \"order\": 41,\n  \"total\": 12.5\n}"
    );
    browser.screenshot("dead-letter").await;

    // The list updates itself: a new dead letter shows up without a reload.
    go("/streams/orders/dead").await;
    browser.wait_for("tr[data-dead]").await;
    browser
        .client
        .execute("window.__still_here = true", vec![])
        .await
        .expect("mark");
    let late = dead_letter(&server, &inspector, r#"{"order":99}"#, "arrived late").await;
    browser.wait_for(&format!("tr[data-dead='{late}']")).await;
    let kept = browser
        .client
        .execute("return window.__still_here === true", vec![])
        .await;
    assert_eq!(
        kept.expect("script"),
        json!(true),
        "the page was reloaded, not updated"
    );

    // Requeue one: back in the stream, gone from the dead letters.
    let length_before = inspector.overview("orders").await.expect("overview").length;
    browser
        .click(&format!(
            "tr[data-dead='{declined}'] button[data-action='requeue-one']"
        ))
        .await;
    browser.wait_for("p.notice.ok").await;
    assert!(
        browser.text("p.notice").await.starts_with("requeued 1"),
        "{}",
        browser.text("p.notice").await
    );
    assert_eq!(
        browser.count(&format!("tr[data-dead='{declined}']")).await,
        0
    );
    let after = inspector.overview("orders").await.expect("overview");
    assert_eq!(after.length, length_before + 1);
    assert_eq!(after.dead_letters, 2);
    // A worker gets it again.
    let again = a.fetch(10, Duration::ZERO).await.expect("fetch");
    let payloads: Vec<&[u8]> = again.iter().map(|m| m.payload.as_ref()).collect();
    assert_eq!(payloads, [br#"{"order":41,"total":12.5}"#]);
    assert!(inspector
        .dead_letter("orders", &MessageId::from(declined.as_str()))
        .await
        .expect("read")
        .is_none());

    // Command queue: the RUNNING one, then cancel it.
    go("/queues/vms?status=RUNNING").await;
    browser.wait_for("tr[data-command='vm-running']").await;
    for status in Status::ALL {
        let count = browser
            .text(&format!("a[data-status='{status}'] .count"))
            .await;
        assert_eq!(count, "1", "{status}");
    }
    browser.screenshot("queue").await;
    browser.click("tr[data-command='vm-running'] a").await;
    browser.wait_for("button[data-action='cancel']").await;
    assert_eq!(browser.text("[data-field='status']").await, "RUNNING");
    browser.screenshot("command").await;
    // The confirmation is the browser's own dialog: answered yes here.
    browser
        .client
        .execute("window.confirm = () => true", vec![])
        .await
        .expect("script");
    browser.click("button[data-action='cancel']").await;
    browser.wait_for("p.notice.ok").await;
    assert_eq!(
        browser.text("p.notice").await,
        "cancelled vm-running: now CANCELLED"
    );
    assert_eq!(browser.text("[data-field='status']").await, "CANCELLED");
    let state = queue
        .command("vm-running")
        .await
        .expect("read")
        .expect("exists");
    assert_eq!(state.status, Status::Cancelled);

    // A stream: consumers and leases, one near lapsing, one lapsed (last: the next fetch
    // anywhere would take the lapsed one over).
    redis(
        &server,
        &[
            "XCLAIM",
            "orders",
            "workers",
            "worker-b",
            "0",
            held_b[0].id.as_str(),
            "IDLE",
            "24000",
        ],
    );
    redis(
        &server,
        &[
            "XCLAIM",
            "orders",
            "workers",
            "worker-b",
            "0",
            held_b[1].id.as_str(),
            "IDLE",
            "45000",
        ],
    );
    go("/streams/orders").await;
    // worker-a took the requeued one too.
    browser
        .wait_text("tr[data-consumer='worker-a'] [data-field='pending']", "4")
        .await;
    browser
        .wait_text("tr[data-consumer='worker-b'] [data-field='pending']", "2")
        .await;
    assert_eq!(browser.count("tr[data-lease]").await, 6);
    let near = format!("tr.near[data-lease='{}']", held_b[0].id);
    let lapsed = format!("tr.lapsed[data-lease='{}']", held_b[1].id);
    assert_eq!(
        browser.count(&near).await,
        1,
        "24 s of a 30 s claim timeout"
    );
    assert_eq!(
        browser.count(&lapsed).await,
        1,
        "45 s of a 30 s claim timeout"
    );
    assert_eq!(browser.count("tr.fresh[data-lease]").await, 4);
    browser.screenshot("stream").await;

    browser.close().await;
    let _ = stop.send(());
    serving.await.expect("joined").expect("served");
    worker.shutdown(Duration::from_secs(5)).await;
}
