//! The command queue's metrics add up to what happened to the commands: every status written
//! (by the queue and by the worker), every status check; and the worker's stream metrics carry
//! the queue's name. One test: the recorder is the process's.

mod common;

use common::{builder, queue, Calls, Double, Fixture, Polled, Troubled, CLAIM, PATIENCE};
use leasehold_commands::meters::{COMMANDS, COMMAND_CHECKS};
use leasehold_commands::{
    Command, CommandContext, CommandHandler, HandlerError, MemoryCommandStore, Status, Step,
};
use leasehold_memory::{MemoryStream, StreamConfig};
use leasehold_worker::meters::INVOCATIONS;
use leasehold_worker_suite::capture::Metrics;

struct Memory(MemoryCommandStore);

impl Fixture for Memory {
    type Store = MemoryCommandStore;

    async fn store(&self) -> MemoryCommandStore {
        self.0.clone()
    }

    async fn pending(&self) -> usize {
        self.0.stream().pending_len()
    }
}

/// Errors on its first attempt, then succeeds.
struct Flaky;

impl CommandHandler for Flaky {
    type Params = ();
    type Output = ();

    async fn execute(&self, ctx: CommandContext, _: ()) -> Result<Step<()>, HandlerError> {
        if ctx.errors_count() == 0 {
            return Err("the API timed out".into());
        }
        Ok(Step::Succeeded(()))
    }

    async fn check_status(&self, _: CommandContext, _: ()) -> Result<Step<()>, HandlerError> {
        Err("never running".into())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_metrics_count_every_status_and_check() {
    let metrics = Metrics::global();
    let stream = MemoryStream::new(StreamConfig::new(CLAIM)).expect("valid stream config");
    let fixture = Memory(MemoryCommandStore::new(stream));
    let queue = queue(&fixture).await;
    let command = |kind: &str, id: &str, params: serde_json::Value| {
        Command::new(kind, params).unwrap().with_id(id)
    };
    queue
        .submit(command("cancelled", "c0", serde_json::json!(0)))
        .await
        .unwrap();
    assert!(queue.cancel("c0").await.unwrap());
    let calls = Calls::default();
    let worker = metrics
        .start(|| {
            builder::<Memory>(&queue)
                .handler("double", Double(calls.clone()))
                .handler("polled", Polled(calls.clone()))
                .handler("troubled", Troubled(calls.clone()))
                .handler("flaky", Flaky)
                .max_attempts(2)
                .start()
        })
        .await
        .unwrap();
    for (kind, id, params) in [
        ("double", "c1", serde_json::json!(21)),
        ("polled", "c2", serde_json::json!(2)),
        ("troubled", "c3", serde_json::json!("error")),
        ("flaky", "c4", serde_json::json!(null)),
    ] {
        queue.submit(command(kind, id, params)).await.unwrap();
    }
    for id in ["c1", "c2", "c3", "c4"] {
        let state = queue.wait(id, PATIENCE).await.unwrap();
        assert!(state.status.is_terminal(), "{state}");
    }
    let flaky = queue.state("c4").await.unwrap().unwrap();
    assert_eq!(flaky.status, Status::Succeeded);
    assert!(flaky.error().is_some_and(|e| e.earlier_attempt), "{flaky}");
    assert!(flaky
        .to_string()
        .contains("an earlier attempt failed: the API timed out"));
    worker.shutdown(std::time::Duration::from_secs(2)).await;

    let m = metrics.snapshot();
    let status = |kind: &'static str, status: &'static str| {
        m.counter(
            COMMANDS,
            &[("queue", "commands"), ("type", kind), ("status", status)],
        )
    };
    assert_eq!(
        (
            status("cancelled", "submitted"),
            status("cancelled", "cancelled")
        ),
        (1, 1)
    );
    assert_eq!(
        (status("double", "submitted"), status("double", "succeeded")),
        (1, 1)
    );
    assert_eq!(
        (status("polled", "running"), status("polled", "succeeded")),
        (1, 1)
    );
    assert_eq!(status("troubled", "failed"), 1);
    assert_eq!(status("flaky", "succeeded"), 1);
    assert_eq!(status("double", "running"), 0, "it never ran long");
    let checks =
        |kind: &'static str| m.counter(COMMAND_CHECKS, &[("queue", "commands"), ("type", kind)]);
    assert_eq!((checks("polled"), checks("double")), (2, 0));
    assert!(
        m.counter(
            INVOCATIONS,
            &[("stream", "commands"), ("outcome", "pending")]
        ) >= 1,
        "the worker's own metrics carry the queue's name"
    );
}
