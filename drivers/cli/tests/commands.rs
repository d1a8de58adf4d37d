//! `leasehold commands list|show|cancel|retry` end to end: commands brought to SUCCEEDED and
//! FAILED by a real command worker on a throwaway redis-server, then listed, shown, retried
//! and cancelled through the binary, its `--json` parsed; refusals exit 1, usage errors 2.

use std::process::{Command as Process, Output, Stdio};
use std::time::Duration;

use leasehold::commands::{
    Command, CommandContext, CommandHandler, CommandQueue, HandlerError, RedisCommandStore,
    RedisStoreConfig, Status, Step,
};
use leasehold::tokio::TokioRuntime;
use leasehold::Config;
use leasehold_redis_harness::RedisServer;
use serde_json::Value;

/// Succeeds at once with its parameters.
struct Echo;

impl CommandHandler for Echo {
    type Params = Value;
    type Output = Value;

    async fn execute(&self, _: CommandContext, params: Value) -> Result<Step<Value>, HandlerError> {
        Ok(Step::Succeeded(params))
    }

    async fn check_status(
        &self,
        _: CommandContext,
        params: Value,
    ) -> Result<Step<Value>, HandlerError> {
        Ok(Step::Succeeded(params))
    }
}

/// `ok` SUCCEEDED and `broken` FAILED (no handler for its type), in queue `vms`.
fn seed(server: &RedisServer) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio");
    runtime.block_on(async {
        let store = RedisCommandStore::connect(RedisStoreConfig::new(server.url(), "vms"))
            .await
            .expect("store");
        let queue = CommandQueue::new(TokioRuntime::current(), store);
        let worker = queue
            .worker()
            .config(Config::default().claim_timeout(Duration::from_secs(5)))
            .handler("echo", Echo)
            .start()
            .await
            .expect("worker");
        for (id, kind) in [("ok", "echo"), ("broken", "mystery")] {
            let command = Command::new(kind, serde_json::json!({ "n": 1 })).expect("params");
            queue.submit(command.with_id(id)).await.expect("submit");
        }
        let wait = Duration::from_secs(30);
        assert_eq!(
            queue.wait("ok", wait).await.expect("ends").status,
            Status::Succeeded
        );
        assert_eq!(
            queue.wait("broken", wait).await.expect("ends").status,
            Status::Failed
        );
        worker.shutdown(Duration::from_secs(5)).await;
    });
}

fn leasehold(server: &RedisServer, args: &[&str]) -> Output {
    Process::new(env!("CARGO_BIN_EXE_leasehold"))
        .arg("commands")
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

fn ids(listing: &Value) -> Vec<&str> {
    listing["commands"]
        .as_array()
        .expect("commands")
        .iter()
        .map(|c| c["id"].as_str().expect("id"))
        .collect()
}

#[test]
fn list_show_retry_and_cancel_a_failed_command() {
    let server =
        RedisServer::start().unwrap_or_else(|e| panic!("these tests need redis-server: {e}"));
    seed(&server);

    let failed = json(&leasehold(
        &server,
        &["list", "vms", "--status", "failed", "--json"],
    ));
    assert_eq!(ids(&failed), ["broken"]);
    let succeeded = json(&leasehold(
        &server,
        &["list", "vms", "--status", "SUCCEEDED", "--json"],
    ));
    assert_eq!(ids(&succeeded), ["ok"]);
    let table = leasehold(&server, &["list", "vms", "--status", "failed"]);
    assert!(String::from_utf8_lossy(&table.stdout).contains("broken"));

    let shown = json(&leasehold(&server, &["show", "vms", "broken", "--json"]));
    assert_eq!(shown["status"], "FAILED");
    assert!(
        shown["last_error"].as_str().is_some_and(|e| !e.is_empty()),
        "{shown}"
    );

    // Retrying asks first: off a terminal it needs --yes.
    let refused = leasehold(&server, &["retry", "vms", "broken"]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--yes"));

    let retried = json(&leasehold(
        &server,
        &["retry", "vms", "broken", "--yes", "--json"],
    ));
    assert_eq!(retried["command"]["status"], "SUBMITTED");
    let failed = json(&leasehold(
        &server,
        &["list", "vms", "--status", "failed", "--json"],
    ));
    assert!(ids(&failed).is_empty(), "{failed}");

    // Only a FAILED command can be retried; a refusal is exit 1 with the reason.
    let not_failed = leasehold(&server, &["retry", "vms", "ok", "--yes"]);
    assert_eq!(not_failed.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&not_failed.stdout).contains("only a FAILED command"));

    let cancelled = json(&leasehold(
        &server,
        &["cancel", "vms", "broken", "--yes", "--json"],
    ));
    assert_eq!(cancelled["command"]["status"], "CANCELLED");
    let again = leasehold(&server, &["cancel", "vms", "broken", "--yes"]);
    assert_eq!(again.status.code(), Some(1));

    let unknown = leasehold(&server, &["show", "vms", "nope"]);
    assert_eq!(unknown.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&unknown.stdout).contains("no command"));

    let bad_status = leasehold(&server, &["list", "vms", "--status", "stuck"]);
    assert_eq!(bad_status.status.code(), Some(2));
}

/// A command queue of 3 shards: `--shards 3` lists the failed commands of every shard, shows
/// and retries each in its shard; a bad count is a usage error.
#[test]
fn a_sharded_queue_is_listed_and_retried_over_its_shards() {
    let server =
        RedisServer::start().unwrap_or_else(|e| panic!("these tests need redis-server: {e}"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio");
    let ids_submitted: Vec<String> = (0..6).map(|i| format!("broken-{i}")).collect();
    runtime.block_on(async {
        let config = RedisStoreConfig::new(server.url(), "jobs")
            .shards(3)
            .expect("3 shards");
        let store = RedisCommandStore::connect(config).await.expect("store");
        let shards: std::collections::BTreeSet<u16> =
            ids_submitted.iter().map(|id| store.shard_of(id)).collect();
        assert_eq!(shards.len(), 3, "the ids cover every shard");
        let queue = CommandQueue::new(TokioRuntime::current(), store);
        let worker = queue
            .worker()
            .config(Config::default().claim_timeout(Duration::from_secs(5)))
            .handler("echo", Echo)
            .start()
            .await
            .expect("worker");
        for id in &ids_submitted {
            let command = Command::new("mystery", serde_json::json!({})).expect("params");
            queue.submit(command.with_id(id)).await.expect("submit");
        }
        for id in &ids_submitted {
            let state = queue.wait(id, Duration::from_secs(30)).await.expect("ends");
            assert_eq!(state.status, Status::Failed);
        }
        worker.shutdown(Duration::from_secs(5)).await;
    });

    let failed = json(&leasehold(
        &server,
        &[
            "list", "jobs", "--shards", "3", "--status", "failed", "--json",
        ],
    ));
    let mut listed = ids(&failed);
    listed.sort_unstable();
    assert_eq!(listed, ids_submitted);
    let shown = json(&leasehold(
        &server,
        &["show", "jobs", "broken-4", "--shards", "3", "--json"],
    ));
    assert_eq!(shown["status"], "FAILED");
    let retried = json(&leasehold(
        &server,
        &[
            "retry", "jobs", "broken-4", "--shards", "3", "--yes", "--json",
        ],
    ));
    assert_eq!(retried["command"]["status"], "SUBMITTED");
    // Without --shards, the unsharded queue of that name: nothing there.
    let unsharded = json(&leasehold(
        &server,
        &["list", "jobs", "--status", "failed", "--json"],
    ));
    assert!(ids(&unsharded).is_empty());
    let bad = leasehold(&server, &["list", "jobs", "--shards", "0"]);
    assert_eq!(bad.status.code(), Some(2));
}
