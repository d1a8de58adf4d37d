//! `leasehold publish` end to end: the binary against a throwaway redis-server; ids printed,
//! delayed messages kept out of the stream, deduplicated repeats enqueue nothing, JSON lines
//! from standard input, and bad input refused with exit code 2 before anything is sent.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use leasehold_redis_harness::{RedisServer, Reply};
use serde_json::Value;

fn server() -> RedisServer {
    RedisServer::start().unwrap_or_else(|e| panic!("these tests need redis-server: {e}"))
}

fn publish(server: &RedisServer, args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .arg("publish")
        .args(args)
        .env("LEASEHOLD_REDIS_URL", server.url())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    let mut input = child.stdin.take().expect("piped");
    input
        .write_all(stdin.unwrap_or("").as_bytes())
        .expect("stdin written");
    drop(input);
    child.wait_with_output().expect("the binary ends")
}

fn json(output: &Output) -> Vec<Value> {
    assert!(
        output.status.success(),
        "exit {:?}: {}",
        output.status.code(),
        String::from_utf8_lossy(&output.stderr)
    );
    let value: Value = serde_json::from_slice(&output.stdout).expect("JSON on stdout");
    value.as_array().expect("an array of results").clone()
}

fn xlen(server: &RedisServer, stream: &str) -> i64 {
    match server.command(["XLEN", stream]).expect("XLEN") {
        Reply::Integer(n) => n,
        other => panic!("XLEN answered {other:?}"),
    }
}

#[test]
fn one_message_prints_its_stream_id() {
    let server = server();
    let out = publish(&server, &["--stream", "jobs", r#"{"n": 1}"#], None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = String::from_utf8(out.stdout).expect("utf-8");
    let id = id.trim();
    assert!(id.split_once('-').is_some(), "a stream id, got {id:?}");
    let entry = server.command(["XRANGE", "jobs", id, id]).expect("XRANGE");
    let fields = entry
        .as_array()
        .and_then(|e| e.first())
        .and_then(Reply::as_array);
    let fields = fields.and_then(|e| e.get(1)).and_then(Reply::as_array);
    let payload = fields.and_then(|f| f.get(1)).and_then(Reply::as_str);
    assert_eq!(payload, Some(r#"{"n": 1}"#), "{entry:?}");
}

#[test]
fn json_lines_from_stdin_are_published_in_order() {
    let server = server();
    let lines = "{\"n\":1}\n\n{\"n\":2}\n[3]\n";
    let results = json(&publish(
        &server,
        &["--stream", "jobs", "--json"],
        Some(lines),
    ));
    assert_eq!(results.len(), 3);
    assert_eq!(xlen(&server, "jobs"), 3);
    let ids: Vec<&str> = results
        .iter()
        .map(|r| r["id"].as_str().expect("id"))
        .collect();
    let mut sorted = ids.clone();
    sorted.sort_by_key(|id| {
        let (ms, seq) = id.split_once('-').expect("stream id");
        (ms.parse::<u64>().unwrap(), seq.parse::<u64>().unwrap())
    });
    assert_eq!(ids, sorted, "published in input order");
}

#[test]
fn a_delayed_message_waits_outside_the_stream() {
    let server = server();
    let results = json(&publish(
        &server,
        &[
            "--stream",
            "jobs",
            "--delay",
            "1h",
            "--json",
            r#"{"later":true}"#,
        ],
        None,
    ));
    assert_eq!(results.len(), 1);
    let id = results[0]["id"].as_str().expect("id");
    assert!(id.starts_with("delayed:"), "a delayed id, got {id}");
    assert_eq!(
        xlen(&server, "jobs"),
        0,
        "not in the stream before it is due"
    );
    // `inspect` counts it, and says when it is due.
    json(&publish(
        &server,
        &["--stream", "jobs", "--json", "{}"],
        None,
    ));
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["inspect", "jobs", "--json"])
        .env("LEASEHOLD_REDIS_URL", server.url())
        .output()
        .expect("the binary runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let overview: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(overview["length"], 1);
    assert_eq!(overview["delayed"], 1);
    let next = overview["next_due_ms"].as_u64().expect("a next due time");
    assert!(
        (3_500_000..=3_600_000).contains(&next),
        "due in about an hour: {next} ms"
    );
}

#[test]
fn a_repeat_with_a_dedupe_key_enqueues_nothing() {
    let server = server();
    let args = [
        "--stream", "jobs", "--dedupe", "order-7", "--ttl", "1h", "--json", "{}",
    ];
    let first = json(&publish(&server, &args, None));
    let again = json(&publish(&server, &args, None));
    assert_eq!(first[0]["duplicate"], false);
    assert_eq!(again[0]["duplicate"], true);
    assert_eq!(again[0]["id"], first[0]["id"]);
    assert_eq!(xlen(&server, "jobs"), 1);
}

#[test]
fn bad_input_is_refused_before_anything_is_sent() {
    let server = server();
    let cases: [(&[&str], Option<&str>, &str); 4] = [
        (&["--stream", "jobs", "not json"], None, "not JSON"),
        (&["--stream", "jobs"], Some("{}\n{oops\n"), "line 2"),
        (&["--stream", "jobs"], Some(""), "no message"),
        (
            &["--stream", "jobs", "--delay", "400d", "{}"],
            None,
            "longer than",
        ),
    ];
    for (args, stdin, says) in cases {
        let out = publish(&server, args, stdin);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    // --dedupe without --ttl is a usage error from the parser.
    let out = publish(&server, &["--stream", "jobs", "--dedupe", "k", "{}"], None);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(xlen(&server, "jobs"), 0, "nothing was published");
}

#[test]
fn an_unreachable_redis_names_the_host() {
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args([
            "publish",
            "--redis",
            "redis://127.0.0.1:1/",
            "--stream",
            "s",
            "{}",
        ])
        .stdin(Stdio::null())
        .output()
        .expect("the binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("127.0.0.1:1"), "{stderr}");
}
