//! The command-queue scenarios, written once and run on the memory store and on Redis
//! (`tests/memory.rs`, `tests/redis.rs`). Real time, short intervals: every wait is bounded by
//! `PATIENCE`, and reaching it means the behaviour is missing, not that the machine is slow.
#![allow(dead_code)]

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use leasehold_commands::{
    Command, CommandContext, CommandHandler, CommandQueue, CommandStore, CommandWorker,
    CommandWorkerBuilder, HandlerError, QueueError, Status, Step, StopReason,
};
use leasehold_core::Config;
use leasehold_tokio::TokioRuntime;

pub const CLAIM: Duration = Duration::from_secs(1);
pub const STATUS: Duration = Duration::from_millis(50);
pub const PATIENCE: Duration = Duration::from_secs(20);

/// A queue's store, made fresh per test, and a way to look at its stream.
pub trait Fixture: Send + Sync + 'static {
    type Store: CommandStore + Clone;

    /// A store handle on this test's queue (every handle sees the same queue).
    fn store(&self) -> impl Future<Output = Self::Store> + Send;

    /// Stream entries delivered and not yet acked.
    fn pending(&self) -> impl Future<Output = usize> + Send;
}

/// One `#[tokio::test]` per scenario, each on a fresh fixture made by `$fixture`.
#[macro_export]
macro_rules! scenarios {
    ($fixture:expr) => {
        $crate::scenarios!(
            $fixture;
            succeeds_with_a_typed_result,
            failures_keep_their_error,
            unknown_types_and_bad_params_fail_at_once,
            cancel_before_pickup_and_after_the_end,
            long_running_commands_are_polled_until_done,
            several_types_and_a_batch_complete,
            submit_is_idempotent,
            cancel_during_execute_stays_cancelled,
            cancel_reaches_running_commands,
            shutdown_hands_running_commands_over,
            crash_failover_resumes_with_check_status,
        );
    };
    ($fixture:expr; $($name:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            common::$name($fixture).await;
        }
    )*};
}

pub type Queue<F> = CommandQueue<<F as Fixture>::Store, TokioRuntime>;

pub async fn queue<F: Fixture>(fixture: &F) -> Queue<F> {
    CommandQueue::new(TokioRuntime::current(), fixture.store().await)
        .with_wait_poll(Duration::from_millis(10))
}

/// A worker builder with the test timings.
pub fn builder<F: Fixture>(queue: &Queue<F>) -> CommandWorkerBuilder<TokioRuntime, F::Store> {
    builder_with_claim::<F>(queue, CLAIM)
}

/// [`builder`] with another claim timeout.
pub fn builder_with_claim<F: Fixture>(
    queue: &Queue<F>,
    claim: Duration,
) -> CommandWorkerBuilder<TokioRuntime, F::Store> {
    queue
        .worker()
        .config(
            Config::default()
                .concurrency(32)
                .max_leases(2000)
                .claim_timeout(claim)
                .poll_interval(Duration::from_millis(20))
                .retry(leasehold_core::RetryPolicy {
                    initial: Duration::from_millis(10),
                    max: Duration::from_millis(50),
                    ..Default::default()
                })
                .cancel_grace(Duration::from_millis(50)),
        )
        .status_interval(STATUS)
}

/// Polls `done` until it holds, or fails the test after `PATIENCE`.
pub async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < PATIENCE, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub async fn wait_pending_zero<F: Fixture>(fixture: &F) {
    let start = Instant::now();
    loop {
        let pending = fixture.pending().await;
        if pending == 0 {
            return;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "{pending} entries still pending: a finished command's lease was not acked"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// ----- handlers --------------------------------------------------------------------------------

/// Calls per command id and handler method, shared by handler and test.
#[derive(Clone, Default)]
pub struct Calls(Arc<Mutex<HashMap<(String, &'static str), u32>>>);

impl Calls {
    pub fn record(&self, id: &str, what: &'static str) -> u32 {
        let mut calls = self.0.lock().unwrap();
        let n = calls.entry((id.to_owned(), what)).or_default();
        *n += 1;
        *n
    }

    pub fn get(&self, id: &str, what: &'static str) -> u32 {
        let calls = self.0.lock().unwrap();
        calls.get(&(id.to_owned(), what)).copied().unwrap_or(0)
    }

    pub fn total(&self, what: &'static str) -> u32 {
        let calls = self.0.lock().unwrap();
        calls
            .iter()
            .filter(|((_, w), _)| *w == what)
            .map(|(_, n)| n)
            .sum()
    }
}

/// `execute` doubles its number at once.
pub struct Double(pub Calls);

impl CommandHandler for Double {
    type Params = u64;
    type Output = u64;

    async fn execute(&self, ctx: CommandContext, n: u64) -> Result<Step<u64>, HandlerError> {
        self.0.record(ctx.id(), "execute");
        Ok(Step::Succeeded(n * 2))
    }

    async fn check_status(&self, ctx: CommandContext, _: u64) -> Result<Step<u64>, HandlerError> {
        self.0.record(ctx.id(), "check");
        Err("a command that finishes in execute is never checked".into())
    }
}

/// Starts work that is done after `checks` status checks; remembers a job id.
pub struct Polled(pub Calls);

impl CommandHandler for Polled {
    type Params = u32;
    type Output = String;

    async fn execute(&self, ctx: CommandContext, _: u32) -> Result<Step<String>, HandlerError> {
        self.0.record(ctx.id(), "execute");
        Ok(Step::running_with(format!("job-{}", ctx.id()))?)
    }

    async fn check_status(
        &self,
        ctx: CommandContext,
        checks: u32,
    ) -> Result<Step<String>, HandlerError> {
        let n = self.0.record(ctx.id(), "check");
        let job: String = ctx.checkpoint()?.ok_or("no checkpoint")?;
        Ok(if n >= checks {
            Step::Succeeded(format!("{job} done after {n} checks"))
        } else {
            Step::Running
        })
    }
}

/// [`Polled`] that never finishes: what a replica sees of a job that outlives it.
pub struct NeverDone(pub Calls);

impl CommandHandler for NeverDone {
    type Params = u32;
    type Output = String;

    async fn execute(
        &self,
        ctx: CommandContext,
        checks: u32,
    ) -> Result<Step<String>, HandlerError> {
        Polled(self.0.clone()).execute(ctx, checks).await
    }

    async fn check_status(
        &self,
        ctx: CommandContext,
        _: u32,
    ) -> Result<Step<String>, HandlerError> {
        self.0.record(ctx.id(), "check");
        Ok(Step::Running)
    }
}

/// Fails its way: `"fail"` reports a failure, `"error"` returns an error, `"panic"` panics.
pub struct Troubled(pub Calls);

impl CommandHandler for Troubled {
    type Params = String;
    type Output = ();

    async fn execute(&self, ctx: CommandContext, how: String) -> Result<Step<()>, HandlerError> {
        self.0.record(ctx.id(), "execute");
        match how.as_str() {
            "fail" => Ok(Step::Failed("the cloud said no".into())),
            "error" => Err("connection refused".into()),
            "panic" => panic!("handler bug"),
            other => Err(format!("unknown mode {other}").into()),
        }
    }

    async fn check_status(&self, _: CommandContext, _: String) -> Result<Step<()>, HandlerError> {
        Err("never started".into())
    }
}

/// `execute` (or `check_status`) blocks until the command is cancelled, then returns a result
/// anyway: the late result that must not overwrite the cancel.
pub struct Stubborn {
    pub calls: Calls,
    pub stops: Arc<Mutex<Vec<StopReason>>>,
    pub block_in_check: bool,
}

impl Stubborn {
    /// Blocks in `execute`, or (`block_in_check`) in `check_status` after a quick `execute`.
    pub fn new(block_in_check: bool) -> Self {
        Self {
            calls: Calls::default(),
            stops: Arc::default(),
            block_in_check,
        }
    }

    async fn block(&self, ctx: &CommandContext, what: &'static str) -> Step<u64> {
        self.calls.record(ctx.id(), what);
        let reason = ctx.stopped().await;
        self.stops.lock().unwrap().push(reason);
        Step::Succeeded(42)
    }
}

impl CommandHandler for Stubborn {
    type Params = ();
    type Output = u64;

    async fn execute(&self, ctx: CommandContext, (): ()) -> Result<Step<u64>, HandlerError> {
        if self.block_in_check {
            self.calls.record(ctx.id(), "execute");
            return Ok(Step::Running);
        }
        Ok(self.block(&ctx, "execute").await)
    }

    async fn check_status(&self, ctx: CommandContext, (): ()) -> Result<Step<u64>, HandlerError> {
        Ok(self.block(&ctx, "check").await)
    }

    async fn on_cancel(&self, ctx: CommandContext, (): ()) {
        self.calls.record(ctx.id(), "on_cancel");
    }
}

/// Never finishes: `execute` starts, every check says still running.
pub struct Forever(pub Calls);

impl CommandHandler for Forever {
    type Params = ();
    type Output = ();

    async fn execute(&self, ctx: CommandContext, (): ()) -> Result<Step<()>, HandlerError> {
        self.0.record(ctx.id(), "execute");
        Ok(Step::Running)
    }

    async fn check_status(&self, ctx: CommandContext, (): ()) -> Result<Step<()>, HandlerError> {
        self.0.record(ctx.id(), "check");
        Ok(Step::Running)
    }

    async fn on_cancel(&self, ctx: CommandContext, (): ()) {
        self.0.record(ctx.id(), "on_cancel");
    }
}

fn command(kind: &str, params: impl serde::Serialize, id: &str) -> Command {
    Command::new(kind, params).unwrap().with_id(id)
}

async fn stop<S: CommandStore>(worker: CommandWorker<S>) {
    worker.shutdown(Duration::from_secs(2)).await;
}

// ----- scenarios -------------------------------------------------------------------------------

pub async fn succeeds_with_a_typed_result<F: Fixture>(fixture: F) {
    let queue = queue(&fixture).await;
    let calls = Calls::default();
    let worker = builder::<F>(&queue)
        .handler("double", Double(calls.clone()))
        .start()
        .await
        .unwrap();
    let submitted = queue.submit(command("double", 21u64, "c1")).await.unwrap();
    assert!(submitted.created);
    assert_eq!(submitted.state.status, Status::Submitted);
    let state = queue.wait("c1", PATIENCE).await.unwrap();
    assert_eq!(state.status, Status::Succeeded);
    assert!(state.started_at.is_some() && state.completed_at >= state.started_at);
    assert!(state.created_at <= state.started_at.unwrap());
    assert_eq!(queue.result::<u64>("c1").await.unwrap(), Some(42));
    // A type mismatch is an error, not a panic.
    let mismatch = queue.result::<String>("c1").await.unwrap_err();
    assert!(
        matches!(mismatch, QueueError::ResultType { .. }),
        "{mismatch}"
    );
    assert!(matches!(
        queue.result::<u64>("nope").await,
        Err(QueueError::NotFound(_))
    ));
    assert_eq!(calls.get("c1", "execute"), 1);
    wait_pending_zero(&fixture).await;
    stop(worker).await;
}

pub async fn failures_keep_their_error<F: Fixture>(fixture: F) {
    let queue = queue(&fixture).await;
    let calls = Calls::default();
    let worker = builder::<F>(&queue)
        .handler("troubled", Troubled(calls.clone()))
        .max_attempts(3)
        .start()
        .await
        .unwrap();
    for mode in ["fail", "error", "panic"] {
        queue.submit(command("troubled", mode, mode)).await.unwrap();
    }
    let failed = queue.wait("fail", PATIENCE).await.unwrap();
    assert_eq!(failed.status, Status::Failed);
    assert_eq!(failed.last_error.as_deref(), Some("the cloud said no"));
    assert_eq!(
        calls.get("fail", "execute"),
        1,
        "a reported failure is not retried"
    );

    let errored = queue.wait("error", PATIENCE).await.unwrap();
    assert_eq!(errored.status, Status::Failed);
    assert_eq!(errored.errors_count, 3);
    let error = errored.last_error.unwrap();
    assert!(
        error.contains("3 failed attempts") && error.contains("connection refused"),
        "{error}"
    );
    assert_eq!(
        calls.get("error", "execute"),
        3,
        "retried up to max_attempts"
    );

    let panicked = queue.wait("panic", PATIENCE).await.unwrap();
    assert_eq!(panicked.status, Status::Failed);
    assert_eq!(panicked.errors_count, 3);
    assert!(panicked.last_error.unwrap().contains("handler bug"));
    assert_eq!(queue.result::<()>("fail").await.unwrap(), None);
    assert_eq!(worker.stats().errors, 6, "three errors and three panics");
    wait_pending_zero(&fixture).await;
    stop(worker).await;
}

pub async fn unknown_types_and_bad_params_fail_at_once<F: Fixture>(fixture: F) {
    let queue = queue(&fixture).await;
    let calls = Calls::default();
    let worker = builder::<F>(&queue)
        .handler("double", Double(calls.clone()))
        .start()
        .await
        .unwrap();
    queue
        .submit(command("reboot_the_moon", (), "unknown"))
        .await
        .unwrap();
    queue
        .submit(command("double", "not a number", "bad"))
        .await
        .unwrap();
    let unknown = queue.wait("unknown", PATIENCE).await.unwrap();
    assert_eq!(unknown.status, Status::Failed);
    let error = unknown.last_error.unwrap();
    assert!(
        error.contains("unknown command type \"reboot_the_moon\"") && error.contains("double"),
        "{error}"
    );
    let bad = queue.wait("bad", PATIENCE).await.unwrap();
    assert_eq!(bad.status, Status::Failed);
    assert!(
        bad.last_error
            .unwrap()
            .contains("cannot decode the parameters"),
        "clear message"
    );
    assert_eq!(bad.errors_count, 0, "not a retried attempt");
    assert_eq!(calls.total("execute"), 0);
    wait_pending_zero(&fixture).await;
    stop(worker).await;
}

pub async fn cancel_before_pickup_and_after_the_end<F: Fixture>(fixture: F) {
    let queue = queue(&fixture).await;
    queue
        .submit(command("double", 1u64, "early"))
        .await
        .unwrap();
    assert!(
        queue.cancel("early").await.unwrap(),
        "a pending command cancels"
    );
    assert!(
        !queue.cancel("early").await.unwrap(),
        "twice: already terminal"
    );
    assert!(!queue.cancel("missing").await.unwrap(), "missing");
    let calls = Calls::default();
    let worker = builder::<F>(&queue)
        .handler("double", Double(calls.clone()))
        .start()
        .await
        .unwrap();
    queue.submit(command("double", 2u64, "late")).await.unwrap();
    assert_eq!(
        queue.wait("late", PATIENCE).await.unwrap().status,
        Status::Succeeded
    );
    assert!(
        !queue.cancel("late").await.unwrap(),
        "a finished command does not cancel"
    );
    assert_eq!(
        queue.state("late").await.unwrap().unwrap().status,
        Status::Succeeded
    );
    wait_pending_zero(&fixture).await;
    let early = queue.state("early").await.unwrap().unwrap();
    assert_eq!(early.status, Status::Cancelled);
    assert!(early.completed_at.is_some());
    assert_eq!(
        calls.get("early", "execute"),
        0,
        "a cancelled command never runs"
    );
    stop(worker).await;
}

pub async fn long_running_commands_are_polled_until_done<F: Fixture>(fixture: F) {
    let queue = queue(&fixture).await;
    let calls = Calls::default();
    let worker = builder::<F>(&queue)
        .handler("polled", Polled(calls.clone()))
        .start()
        .await
        .unwrap();
    queue.submit(command("polled", 5u32, "long")).await.unwrap();
    eventually("RUNNING", || calls.get("long", "check") >= 1).await;
    let running = queue.state("long").await.unwrap().unwrap();
    assert_eq!(running.status, Status::Running);
    assert_eq!(
        running.checkpoint,
        Some(serde_json::json!("job-long")),
        "execute's checkpoint is stored"
    );
    let done = queue.wait("long", PATIENCE).await.unwrap();
    assert_eq!(done.status, Status::Succeeded);
    assert_eq!(
        queue.result::<String>("long").await.unwrap().unwrap(),
        "job-long done after 5 checks"
    );
    assert_eq!(calls.get("long", "execute"), 1);
    assert_eq!(calls.get("long", "check"), 5);
    wait_pending_zero(&fixture).await;
    stop(worker).await;
}

pub async fn several_types_and_a_batch_complete<F: Fixture>(fixture: F) {
    let queue = queue(&fixture).await;
    let calls = Calls::default();
    let worker = builder::<F>(&queue)
        .handler("double", Double(calls.clone()))
        .handler("polled", Polled(calls.clone()))
        .handler("troubled", Troubled(calls.clone()))
        .start()
        .await
        .unwrap();
    let mut ids = Vec::new();
    for i in 0..200u64 {
        let id = format!("batch-{i}");
        let command = match i % 3 {
            0 => command("double", i, &id),
            1 => command("polled", 2u32, &id),
            _ => command("troubled", "fail", &id),
        };
        assert!(queue.submit(command).await.unwrap().created);
        ids.push(id);
    }
    for (i, id) in ids.iter().enumerate() {
        let state = queue.wait(id, PATIENCE).await.unwrap();
        let expected = if i % 3 == 2 {
            Status::Failed
        } else {
            Status::Succeeded
        };
        assert_eq!(state.status, expected, "{id}");
    }
    assert_eq!(queue.result::<u64>("batch-99").await.unwrap(), Some(198));
    assert_eq!(
        calls.total("execute"),
        200,
        "every command executed exactly once"
    );
    wait_pending_zero(&fixture).await;
    stop(worker).await;
}

pub async fn submit_is_idempotent<F: Fixture>(fixture: F) {
    let queue = queue(&fixture).await;
    let first = queue.submit(command("double", 5u64, "same")).await.unwrap();
    let again = queue.submit(command("double", 6u64, "same")).await.unwrap();
    assert!(first.created && !again.created);
    assert_eq!(again.state, first.state, "the existing state, unchanged");
    let calls = Calls::default();
    let worker = builder::<F>(&queue)
        .handler("double", Double(calls.clone()))
        .start()
        .await
        .unwrap();
    assert_eq!(
        queue.wait("same", PATIENCE).await.unwrap().status,
        Status::Succeeded
    );
    let third = queue.submit(command("double", 7u64, "same")).await.unwrap();
    assert!(!third.created);
    assert_eq!(third.state.status, Status::Succeeded);
    assert_eq!(queue.result::<u64>("same").await.unwrap(), Some(10));
    wait_pending_zero(&fixture).await;
    assert_eq!(calls.get("same", "execute"), 1, "one entry, one execution");
    // Generated ids are unique.
    let a = queue
        .submit(Command::new("double", 1u64).unwrap())
        .await
        .unwrap();
    let b = queue
        .submit(Command::new("double", 1u64).unwrap())
        .await
        .unwrap();
    assert!(a.created && b.created && a.id() != b.id());
    assert!(matches!(
        queue.submit(command("double", 1u64, "")).await,
        Err(QueueError::EmptyId)
    ));
    stop(worker).await;
}

/// The lost update: a cancel lands while `execute` runs; `execute` then returns a result
/// anyway. The state stays CANCELLED, the result is dropped and counted, the handler saw the
/// signal, `on_cancel` stops the work, and the entry is acked.
pub async fn cancel_during_execute_stays_cancelled<F: Fixture>(fixture: F) {
    let queue = queue(&fixture).await;
    let stubborn = Stubborn::new(false);
    let (calls, stops) = (stubborn.calls.clone(), stubborn.stops.clone());
    let worker = builder::<F>(&queue)
        .handler("stubborn", stubborn)
        .start()
        .await
        .unwrap();
    queue
        .submit(command("stubborn", (), "victim"))
        .await
        .unwrap();
    eventually("execute running", || calls.get("victim", "execute") == 1).await;
    assert!(queue.cancel("victim").await.unwrap());
    eventually("the handler saw the cancel", || {
        !stops.lock().unwrap().is_empty()
    })
    .await;
    assert_eq!(stops.lock().unwrap()[0], StopReason::Cancelled);
    eventually("the late result was dropped", || {
        worker.stats().dropped_after_cancel == 1
    })
    .await;
    wait_pending_zero(&fixture).await;
    let state = queue.state("victim").await.unwrap().unwrap();
    assert_eq!(
        state.status,
        Status::Cancelled,
        "the cancel was overwritten"
    );
    assert_eq!(state.result, None);
    assert_eq!(queue.result::<u64>("victim").await.unwrap(), None);
    assert_eq!(
        calls.get("victim", "on_cancel"),
        1,
        "the started work is stopped"
    );
    assert_eq!(worker.stats().cancel_signals, 1);
    stop(worker).await;
}

/// A cancel reaches a running `check_status`, and a RUNNING command waiting between checks is
/// acked at its next check.
pub async fn cancel_reaches_running_commands<F: Fixture>(fixture: F) {
    let queue = queue(&fixture).await;
    let stubborn = Stubborn::new(true);
    let (calls, stops) = (stubborn.calls.clone(), stubborn.stops.clone());
    let forever = Calls::default();
    let worker = builder::<F>(&queue)
        .handler("stubborn", stubborn)
        .handler("forever", Forever(forever.clone()))
        .start()
        .await
        .unwrap();
    queue
        .submit(command("stubborn", (), "checking"))
        .await
        .unwrap();
    queue
        .submit(command("forever", (), "waiting"))
        .await
        .unwrap();
    eventually("a check is running", || calls.get("checking", "check") == 1).await;
    eventually("the other is RUNNING", || {
        forever.get("waiting", "check") >= 2
    })
    .await;
    assert!(queue.cancel("checking").await.unwrap());
    assert!(queue.cancel("waiting").await.unwrap());
    eventually("the check saw the cancel", || {
        !stops.lock().unwrap().is_empty()
    })
    .await;
    assert_eq!(stops.lock().unwrap()[0], StopReason::Cancelled);
    wait_pending_zero(&fixture).await;
    for id in ["checking", "waiting"] {
        assert_eq!(
            queue.state(id).await.unwrap().unwrap().status,
            Status::Cancelled
        );
    }
    eventually("on_cancel ran for both", || {
        calls.get("checking", "on_cancel") == 1 && forever.get("waiting", "on_cancel") == 1
    })
    .await;
    stop(worker).await;
}

/// Shutdown hands a RUNNING command back at once; the next worker resumes it with
/// `check_status`, never `execute`.
pub async fn shutdown_hands_running_commands_over<F: Fixture>(fixture: F) {
    let queue = queue(&fixture).await;
    let calls = Calls::default();
    // The first replica never finishes the job, however late its shutdown comes.
    let first = builder::<F>(&queue)
        .handler("polled", NeverDone(calls.clone()))
        .start()
        .await
        .unwrap();
    queue
        .submit(command("polled", 2u32, "handover"))
        .await
        .unwrap();
    eventually("checked twice", || calls.get("handover", "check") >= 2).await;
    stop(first).await;
    let second = builder::<F>(&queue)
        .handler("polled", Polled(calls.clone()))
        .start()
        .await
        .unwrap();
    let state = queue.wait("handover", PATIENCE).await.unwrap();
    assert_eq!(state.status, Status::Succeeded);
    assert_eq!(calls.get("handover", "execute"), 1, "never executed twice");
    assert_eq!(second.stats().executed, 0);
    assert!(second.stats().checked >= 1);
    wait_pending_zero(&fixture).await;
    stop(second).await;
}

/// A replica dies holding a RUNNING command (no shutdown, no release, no heartbeat); after the
/// claim timeout another replica resumes it with `check_status`.
pub async fn crash_failover_resumes_with_check_status<F: Fixture>(fixture: F) {
    let queue = queue(&fixture).await;
    let calls = Calls::default();
    let doomed = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let victim = {
        let queue = CommandQueue::new(
            TokioRuntime::from_handle(doomed.handle().clone()),
            fixture.store().await,
        );
        let calls = calls.clone();
        doomed
            .spawn(async move {
                builder::<F>(&queue)
                    .handler("polled", Polled(calls))
                    .start()
                    .await
                    .unwrap()
            })
            .await
            .unwrap()
    };
    queue
        .submit(command("polled", 1000u32, "vm"))
        .await
        .unwrap();
    eventually("RUNNING on the victim", || calls.get("vm", "check") >= 2).await;
    // The crash: every task of the victim stops dead.
    doomed.shutdown_background();
    std::mem::forget(victim);
    let checks_before = calls.get("vm", "check");
    assert_eq!(
        queue.state("vm").await.unwrap().unwrap().status,
        Status::Running
    );
    let survivor = builder::<F>(&queue)
        .handler("polled", Polled(calls.clone()))
        .start()
        .await
        .unwrap();
    eventually("the survivor checks it", || survivor.stats().checked >= 1).await;
    assert_eq!(
        survivor.stats().executed,
        0,
        "never execute a RUNNING command again"
    );
    assert_eq!(calls.get("vm", "execute"), 1);
    assert!(calls.get("vm", "check") > checks_before);
    assert!(queue.cancel("vm").await.unwrap());
    wait_pending_zero(&fixture).await;
    stop(survivor).await;
}
