//! The operator commands end to end: the binary against a throwaway redis-server, its `--json`
//! parsed; exit codes 0 / 1 / 2; destructive commands refused without `--yes` off a terminal;
//! errors that name the host and never the password.

use std::process::{Command, Output, Stdio};

use leasehold_redis_harness::{RedisServer, Reply};
use serde_json::Value;

fn server() -> RedisServer {
    RedisServer::builder()
        .password("s3cret-pw")
        .start()
        .unwrap_or_else(|e| panic!("these tests need redis-server: {e}"))
}

fn cmd(server: &RedisServer, args: &[&str]) -> Reply {
    server.command(args).expect("the server answers")
}

fn leasehold(server: &RedisServer, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(args)
        .env("LEASEHOLD_REDIS_URL", server.url())
        .stdin(Stdio::null())
        .output()
        .expect("the binary runs")
}

fn json(output: &Output) -> Value {
    assert!(
        output.status.success(),
        "exit {:?}: {}",
        output.status.code(),
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("JSON on stdout")
}

/// A stream with two messages held by `alice`, one waiting, and two dead letters.
fn seed(server: &RedisServer) {
    cmd(
        server,
        &["XGROUP", "CREATE", "jobs", "workers", "0", "MKSTREAM"],
    );
    for n in 0..3 {
        cmd(
            server,
            &["XADD", "jobs", "*", "data", &format!("{{\"n\":{n}}}")],
        );
    }
    cmd(
        server,
        &[
            "XREADGROUP",
            "GROUP",
            "workers",
            "alice",
            "COUNT",
            "2",
            "STREAMS",
            "jobs",
            ">",
        ],
    );
    // Dead-letter ids of their own time: one made with `*` in the same millisecond as a stream
    // entry's could spell the same id, and a repeated requeue of it would then name a live entry.
    for (id, reason) in [
        ("1000-1", "rejected: bad input"),
        ("1000-2", "failed on its last delivery"),
    ] {
        cmd(
            server,
            &[
                "XADD",
                "{jobs}:dead",
                id,
                "id",
                "1-1",
                "reason",
                reason,
                "deliveries",
                "5",
                "data",
                "{\"poison\":true}",
            ],
        );
    }
}

#[test]
fn inspect_pending_and_dead_letters_as_json() {
    let server = server();
    seed(&server);
    let overview = json(&leasehold(&server, &["inspect", "jobs", "--json"]));
    assert_eq!(overview["length"], 3);
    assert_eq!(overview["dead_letters"], 2);
    assert_eq!(overview["groups"][0]["name"], "workers");
    assert_eq!(overview["groups"][0]["pending"], 2);
    assert_eq!(overview["groups"][0]["lag"], 1);
    assert_eq!(overview["groups"][0]["consumers"][0]["name"], "alice");

    let pending = json(&leasehold(
        &server,
        &["pending", "jobs", "--limit", "1", "--json"],
    ));
    assert_eq!(pending["entries"].as_array().unwrap().len(), 1);
    let after = pending["next_after"]
        .as_str()
        .expect("a next page")
        .to_owned();
    let rest = json(&leasehold(
        &server,
        &["pending", "jobs", "--after", &after, "--json"],
    ));
    assert_eq!(rest["entries"].as_array().unwrap().len(), 1);
    assert_eq!(rest["entries"][0]["owner"], "alice");
    let none = json(&leasehold(
        &server,
        &["pending", "jobs", "--older-than", "1h", "--json"],
    ));
    assert!(none["entries"].as_array().unwrap().is_empty());

    let dead = json(&leasehold(&server, &["dead", "list", "jobs", "--json"]));
    let entries = dead["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[0]["reason"], "rejected: bad input");
    let id = entries[0]["id"].as_str().unwrap();
    let shown = json(&leasehold(&server, &["dead", "show", "jobs", id, "--json"]));
    assert_eq!(shown["payload"], "{\"poison\":true}");
    let table = leasehold(&server, &["dead", "show", "jobs", id]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.contains("\"poison\": true"), "pretty JSON: {text}");
}

#[test]
fn requeue_and_purge_need_yes_off_a_terminal_and_say_what_they_did() {
    let server = server();
    seed(&server);
    let refused = leasehold(&server, &["dead", "requeue", "jobs", "--all"]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--yes"));
    let Reply::Integer(2) = cmd(&server, &["XLEN", "{jobs}:dead"]) else {
        panic!("nothing changed")
    };

    let dead = json(&leasehold(&server, &["dead", "list", "jobs", "--json"]));
    let first = dead["entries"][0]["id"].as_str().unwrap().to_owned();
    let done = json(&leasehold(
        &server,
        &["dead", "requeue", "jobs", &first, "--yes", "--json"],
    ));
    assert_eq!(done["requeued"].as_array().unwrap().len(), 1);
    let Reply::Integer(4) = cmd(&server, &["XLEN", "jobs"]) else {
        panic!("requeued into the stream")
    };
    // The same id again: not a dead letter any more; reported, nothing doubled (exit 1).
    let again = leasehold(&server, &["dead", "requeue", "jobs", &first, "--yes"]);
    assert_eq!(again.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&again.stdout).contains("requeued 0; not dead letters"));
    let Reply::Integer(4) = cmd(&server, &["XLEN", "jobs"]) else {
        panic!("a repeat doubles nothing")
    };
    // A live entry cannot be purged as a dead letter.
    let pending = json(&leasehold(&server, &["pending", "jobs", "--json"]));
    let live = pending["entries"][0]["id"].as_str().unwrap();
    let purge_live = leasehold(&server, &["dead", "purge", "jobs", live, "--yes"]);
    assert_eq!(purge_live.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&purge_live.stderr).contains("a live entry of the stream"));

    let purged = json(&leasehold(
        &server,
        &["dead", "purge", "jobs", "--all", "--yes", "--json"],
    ));
    assert_eq!(purged["deleted"].as_array().unwrap().len(), 1);
    let Reply::Integer(0) = cmd(&server, &["XLEN", "{jobs}:dead"]) else {
        panic!("purged")
    };
}

#[test]
fn bad_usage_and_missing_things_are_clear_errors() {
    let server = server();
    seed(&server);
    let no_stream = leasehold(&server, &["inspect", "nope"]);
    assert_eq!(no_stream.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&no_stream.stderr).contains("no stream named \"nope\""));
    cmd(&server, &["SET", "plain", "x"]);
    let wrong_type = leasehold(&server, &["inspect", "plain"]);
    assert!(String::from_utf8_lossy(&wrong_type.stderr).contains("is a string, not a stream"));
    let no_group = leasehold(&server, &["pending", "jobs", "--group", "others"]);
    assert!(String::from_utf8_lossy(&no_group.stderr).contains("no consumer group \"others\""));
    let nothing_selected = leasehold(&server, &["dead", "purge", "jobs", "--yes"]);
    assert_eq!(nothing_selected.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&nothing_selected.stderr).contains("--all"));
    let bad_flag = leasehold(&server, &["pending", "jobs", "--limit", "0"]);
    assert_eq!(bad_flag.status.code(), Some(2));

    // Nobody listens there: the message names the host and what to check, not the password.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let unreachable = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args([
            "inspect",
            "jobs",
            "--redis",
            &format!("redis://:s3cret-pw@127.0.0.1:{port}/"),
        ])
        .env_remove("LEASEHOLD_REDIS_URL")
        .output()
        .unwrap();
    assert_eq!(unreachable.status.code(), Some(2));
    let message = String::from_utf8_lossy(&unreachable.stderr);
    assert!(message.contains(&format!("127.0.0.1:{port}")), "{message}");
    assert!(
        message.contains("is redis-server running there"),
        "{message}"
    );
    assert!(!message.contains("s3cret-pw"), "{message}");
    // A wrong password: refused, and not repeated.
    let wrong = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args([
            "inspect",
            "jobs",
            "--redis",
            &format!("redis://:wrong-pw@127.0.0.1:{}/", server.port()),
        ])
        .env_remove("LEASEHOLD_REDIS_URL")
        .output()
        .unwrap();
    assert_eq!(wrong.status.code(), Some(2));
    assert!(!String::from_utf8_lossy(&wrong.stderr).contains("wrong-pw"));
}

/// A sharded queue (streams `{orders:0}`, `{orders:1}`, `{orders:2}`) inspected by its name:
/// its totals, its group over the shards, and a row per shard.
#[test]
fn inspect_a_sharded_queue_shows_totals_and_shards() {
    let server = server();
    for shard in 0..3 {
        let stream = format!("{{orders:{shard}}}");
        cmd(
            &server,
            &["XGROUP", "CREATE", &stream, "workers", "0", "MKSTREAM"],
        );
        for n in 0..=shard {
            cmd(&server, &["XADD", &stream, "*", "data", &format!("{n}")]);
        }
    }
    // Shard 2: two of its three read by bob; shard 1: one dead letter.
    cmd(
        &server,
        &[
            "XREADGROUP",
            "GROUP",
            "workers",
            "bob",
            "COUNT",
            "2",
            "STREAMS",
            "{orders:2}",
            ">",
        ],
    );
    cmd(
        &server,
        &[
            "XADD",
            "{orders:1}:dead",
            "*",
            "id",
            "1-1",
            "reason",
            "rejected: bad",
        ],
    );
    let queue = json(&leasehold(&server, &["inspect", "orders", "--json"]));
    assert_eq!(queue["queue"], "orders");
    assert_eq!(queue["length"], 6);
    assert_eq!(queue["pending"], 2);
    assert_eq!(queue["lag"], 4);
    assert_eq!(queue["dead_letters"], 1);
    assert_eq!(queue["groups"][0]["name"], "workers");
    assert_eq!(queue["groups"][0]["shards"], 3);
    let shards: Vec<(u64, &str, u64)> = queue["shards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let shard = s["shard"].as_u64().unwrap();
            (
                shard,
                s["stream"].as_str().unwrap(),
                s["length"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        shards,
        [
            (0, "{orders:0}", 1),
            (1, "{orders:1}", 2),
            (2, "{orders:2}", 3)
        ]
    );
    let text = leasehold(&server, &["inspect", "orders"]);
    assert!(text.status.success());
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("queue           orders"), "{text}");
    assert!(
        text.contains("| 2     | {orders:2} | 3      | 2       | 1   | 0            | 0       |"),
        "{text}"
    );
    // A shard is still a stream of its own.
    let shard = json(&leasehold(&server, &["inspect", "{orders:2}", "--json"]));
    assert_eq!(shard["stream"], "{orders:2}");
}
