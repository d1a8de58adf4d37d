//! The command-queue scenarios, written once and run on every store: the memory store here
//! (`tests/memory.rs`), and the Redis store in leasehold-redis, whose `tests/commands_*.rs`
//! include this module by path. Real time, short intervals: every wait is bounded by
//! `PATIENCE`, and reaching it means the behaviour is missing, not that the machine is slow.
#![allow(dead_code)]

pub mod on_smol;

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use leasehold_commands::{
    AttemptOutcome, Command, CommandContext, CommandHandler, CommandQueue, CommandState,
    CommandStore, CommandWorker, CommandWorkerBuilder, Cursor, HandlerError, Page, QueueError,
    Status, Step, StopReason, MAX_ATTEMPTS_KEPT,
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
            commands_are_listed_by_status_as_they_move,
            attempts_are_recorded_and_bounded,
            retry_reruns_a_failed_command_with_a_new_budget,
            racing_retries_rerun_once,
            retry_and_cancel_refuse_clearly,
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

/// Fails its first run (`Step::Failed`); after an operator's retry, succeeds with the retry
/// count.
pub struct Flaky(pub Calls);

impl CommandHandler for Flaky {
    type Params = ();
    type Output = u32;

    async fn execute(&self, ctx: CommandContext, (): ()) -> Result<Step<u32>, HandlerError> {
        self.0.record(ctx.id(), "execute");
        Ok(match ctx.retries() {
            0 => Step::Failed("the first run fails".into()),
            retries => Step::Succeeded(retries),
        })
    }

    async fn check_status(&self, _: CommandContext, (): ()) -> Result<Step<u32>, HandlerError> {
        Err("never started".into())
    }
}

/// Every command in `status`, read `limit` at a time; fails on a duplicate or a state under the
/// wrong status.
pub async fn list_all<F: Fixture>(
    queue: &Queue<F>,
    status: Status,
    limit: usize,
) -> Vec<CommandState> {
    let mut states: Vec<CommandState> = Vec::new();
    let mut page = Page::first(limit);
    loop {
        let listing = queue.commands(status, page).await.unwrap();
        assert!(listing.states.len() <= limit);
        for state in listing.states {
            assert_eq!(state.status, status, "{} listed under {status}", state.id);
            if let Some(previous) = states.last() {
                assert!(
                    Cursor::of(previous) < Cursor::of(&state),
                    "{status} out of order: {} before {}",
                    Cursor::of(previous),
                    Cursor::of(&state)
                );
            }
            assert!(
                states.iter().all(|s| s.id != state.id),
                "{} listed twice under {status}",
                state.id
            );
            states.push(state);
        }
        match listing.next {
            Some(cursor) => page = Page::first(limit).starting_after(cursor),
            None => return states,
        }
    }
}

/// The ids listed under `status`, sorted.
pub async fn listed<F: Fixture>(queue: &Queue<F>, status: Status, limit: usize) -> Vec<String> {
    let mut ids: Vec<String> = list_all::<F>(queue, status, limit)
        .await
        .into_iter()
        .map(|s| s.id)
        .collect();
    ids.sort();
    ids
}

fn sorted(ids: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut ids: Vec<String> = ids.into_iter().collect();
    ids.sort();
    ids
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

/// Listing by status follows commands SUBMITTED → RUNNING → SUCCEEDED / FAILED / CANCELLED:
/// each status, read page by page, lists exactly the commands in it, none twice.
pub async fn commands_are_listed_by_status_as_they_move<F: Fixture>(fixture: F) {
    let queue = queue(&fixture).await;
    let name = |prefix: &str, range: std::ops::Range<u32>| -> Vec<String> {
        range.map(|i| format!("{prefix}-{i:02}")).collect()
    };
    let (succeed, fail, run) = (name("ok", 0..12), name("bad", 0..5), name("run", 0..7));
    let (cancel_waiting, cancel_running) = (name("wait", 0..3), &run[4..]);
    for id in &succeed {
        queue.submit(command("double", 1u64, id)).await.unwrap();
    }
    for id in &fail {
        queue.submit(command("troubled", "fail", id)).await.unwrap();
    }
    for id in run.iter().chain(&cancel_waiting) {
        queue.submit(command("forever", (), id)).await.unwrap();
    }
    let everyone = sorted(
        succeed
            .iter()
            .chain(&fail)
            .chain(&run)
            .chain(&cancel_waiting)
            .cloned(),
    );
    for limit in [1, 4, 100] {
        assert_eq!(
            listed::<F>(&queue, Status::Submitted, limit).await,
            everyone
        );
    }
    // Oldest first: by the time each entered the status, then by id.
    let first = queue
        .commands(Status::Submitted, Page::first(1))
        .await
        .unwrap();
    let all = list_all::<F>(&queue, Status::Submitted, 100).await;
    assert_eq!(first.states[..], all[..1]);
    assert!(first.next.is_some());
    for id in &cancel_waiting {
        assert!(queue.cancel(id).await.unwrap());
    }
    assert_eq!(
        listed::<F>(&queue, Status::Cancelled, 2).await,
        cancel_waiting
    );

    let calls = Calls::default();
    let worker = builder::<F>(&queue)
        .handler("double", Double(calls.clone()))
        .handler("troubled", Troubled(calls.clone()))
        .handler("forever", Forever(calls.clone()))
        .start()
        .await
        .unwrap();
    for id in succeed.iter().chain(&fail) {
        queue.wait(id, PATIENCE).await.unwrap();
    }
    for id in &run {
        let start = Instant::now();
        while queue.command(id).await.unwrap().unwrap().status != Status::Running {
            assert!(start.elapsed() < PATIENCE, "{id} never RUNNING");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    assert_eq!(listed::<F>(&queue, Status::Running, 3).await, run);
    for id in cancel_running {
        assert!(queue.cancel(id).await.unwrap());
    }
    let expect = [
        (Status::Submitted, Vec::new()),
        (Status::Running, run[..4].to_vec()),
        (Status::Succeeded, succeed.clone()),
        (Status::Failed, fail.clone()),
        (
            Status::Cancelled,
            sorted(cancel_waiting.iter().chain(cancel_running).cloned()),
        ),
    ];
    for (status, ids) in expect {
        for limit in [1, 5, 1000] {
            assert_eq!(
                listed::<F>(&queue, status, limit).await,
                ids,
                "{status} by {limit}"
            );
        }
    }
    // A listed state is the whole stored state.
    for state in list_all::<F>(&queue, Status::Failed, 2).await {
        assert_eq!(
            Some(&state),
            queue.command(&state.id).await.unwrap().as_ref()
        );
        assert_eq!(state.last_error.as_deref(), Some("the cloud said no"));
    }
    for id in &run[..4] {
        assert!(queue.cancel(id).await.unwrap());
    }
    wait_pending_zero(&fixture).await;
    assert!(list_all::<F>(&queue, Status::Running, 10).await.is_empty());
    stop(worker).await;
}

/// Each attempt is recorded: when it started and ended, how, and its error; the history keeps
/// the latest `MAX_ATTEMPTS_KEPT` attempts.
pub async fn attempts_are_recorded_and_bounded<F: Fixture>(fixture: F) {
    let queue = queue(&fixture).await;
    let calls = Calls::default();
    let many = u32::try_from(MAX_ATTEMPTS_KEPT).unwrap() + 5;
    let worker = builder::<F>(&queue)
        .handler("polled", Polled(calls.clone()))
        .handler("troubled", Troubled(calls.clone()))
        .handler("forever", Forever(calls.clone()))
        .max_attempts(many)
        .start()
        .await
        .unwrap();
    queue
        .submit(command("polled", 2u32, "polled"))
        .await
        .unwrap();
    queue
        .submit(command("troubled", "fail", "fail"))
        .await
        .unwrap();
    queue
        .submit(command("troubled", "error", "error"))
        .await
        .unwrap();
    queue
        .submit(command("forever", (), "forever"))
        .await
        .unwrap();

    let polled = queue.wait("polled", PATIENCE).await.unwrap();
    assert_eq!(polled.attempts.len(), 1, "{:?}", polled.attempts);
    let attempt = &polled.attempts[0];
    assert_eq!(
        (attempt.number, attempt.outcome, attempt.error.as_deref()),
        (1, AttemptOutcome::Succeeded, None)
    );
    assert_eq!(Some(attempt.started_at), polled.started_at);
    assert!(attempt.ended_at >= Some(attempt.started_at));
    assert!(polled.completed_at >= attempt.ended_at);

    let failed = queue.wait("fail", PATIENCE).await.unwrap();
    assert_eq!(failed.attempts.len(), 1);
    assert_eq!(failed.attempts[0].outcome, AttemptOutcome::Failed);
    assert_eq!(
        failed.attempts[0].error.as_deref(),
        Some("the cloud said no")
    );

    let errored = queue.wait("error", PATIENCE).await.unwrap();
    assert_eq!(errored.status, Status::Failed);
    assert_eq!(errored.errors_count, many);
    assert_eq!(errored.attempts.len(), MAX_ATTEMPTS_KEPT, "bounded");
    let numbers: Vec<u32> = errored.attempts.iter().map(|a| a.number).collect();
    assert_eq!(numbers, (6..=many).collect::<Vec<_>>(), "the latest kept");
    let (last, earlier) = errored.attempts.split_last().unwrap();
    assert_eq!(last.outcome, AttemptOutcome::Failed);
    for attempt in errored.attempts.iter() {
        assert_eq!(attempt.error.as_deref(), Some("connection refused"));
        assert!(attempt.ended_at >= Some(attempt.started_at));
    }
    for (attempt, next) in earlier.iter().zip(&errored.attempts[1..]) {
        assert_eq!(attempt.outcome, AttemptOutcome::Errored);
        assert!(next.started_at >= attempt.ended_at.unwrap());
    }

    eventually("forever RUNNING", || calls.get("forever", "check") >= 1).await;
    let running = queue.command("forever").await.unwrap().unwrap();
    let current = running.current_attempt().expect("an attempt underway");
    assert_eq!((current.number, current.ended_at), (1, None));
    assert_eq!(current.outcome, AttemptOutcome::Running);
    let cancelled = queue.cancel_command("forever").await.unwrap();
    assert_eq!(cancelled.status, Status::Cancelled);
    assert_eq!(cancelled.current_attempt(), None);
    assert_eq!(cancelled.attempts[0].outcome, AttemptOutcome::Cancelled);
    assert_eq!(
        queue.command("forever").await.unwrap().as_ref(),
        Some(&cancelled)
    );
    wait_pending_zero(&fixture).await;
    stop(worker).await;
}

/// A FAILED command retried runs again from `execute`, with a new attempt budget, and ends
/// SUCCEEDED; its history keeps the failed run.
pub async fn retry_reruns_a_failed_command_with_a_new_budget<F: Fixture>(fixture: F) {
    let queue = queue(&fixture).await;
    let calls = Calls::default();
    let worker = builder::<F>(&queue)
        .handler("flaky", Flaky(calls.clone()))
        .handler("troubled", Troubled(calls.clone()))
        .max_attempts(3)
        .start()
        .await
        .unwrap();
    queue.submit(command("flaky", (), "flaky")).await.unwrap();
    let failed = queue.wait("flaky", PATIENCE).await.unwrap();
    assert_eq!(failed.status, Status::Failed);
    assert_eq!(listed::<F>(&queue, Status::Failed, 10).await, ["flaky"]);

    let retried = queue.retry("flaky").await.unwrap();
    assert_eq!(retried.status, Status::Submitted);
    assert_eq!((retried.retries, retried.errors_count), (1, 0));
    assert_eq!(retried.completed_at, None);
    assert!(retried.status_changed_at >= failed.completed_at.unwrap());
    let done = queue.wait("flaky", PATIENCE).await.unwrap();
    assert_eq!(done.status, Status::Succeeded);
    assert_eq!(queue.result::<u32>("flaky").await.unwrap(), Some(1));
    assert_eq!(calls.get("flaky", "execute"), 2, "one re-run");
    let outcomes: Vec<_> = done
        .attempts
        .iter()
        .map(|a| (a.number, a.outcome))
        .collect();
    assert_eq!(
        outcomes,
        [(1, AttemptOutcome::Failed), (2, AttemptOutcome::Succeeded)]
    );
    let error = done.error().expect("the first run's error");
    assert!(error.earlier_attempt && error.message == "the first run fails");
    assert!(listed::<F>(&queue, Status::Failed, 10).await.is_empty());
    assert_eq!(listed::<F>(&queue, Status::Succeeded, 10).await, ["flaky"]);

    // A new budget: a command that used up its 3 attempts gets 3 more.
    queue
        .submit(command("troubled", "error", "spent"))
        .await
        .unwrap();
    let spent = queue.wait("spent", PATIENCE).await.unwrap();
    assert_eq!((spent.status, spent.errors_count), (Status::Failed, 3));
    queue.retry("spent").await.unwrap();
    let start = Instant::now();
    let again = loop {
        let state = queue.command("spent").await.unwrap().unwrap();
        if state.status == Status::Failed {
            break state;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "the retry never ended: {state:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!((again.errors_count, again.retries), (3, 1));
    assert_eq!(calls.get("spent", "execute"), 6);
    let numbers: Vec<u32> = again.attempts.iter().map(|a| a.number).collect();
    assert_eq!(numbers, [1, 2, 3, 4, 5, 6]);
    wait_pending_zero(&fixture).await;
    stop(worker).await;
}

/// Eight retries of one failure at once: exactly one succeeds, the others say why not, and the
/// command runs once more.
pub async fn racing_retries_rerun_once<F: Fixture>(fixture: F) {
    let queue = queue(&fixture).await;
    let calls = Calls::default();
    let worker = builder::<F>(&queue)
        .handler("flaky", Flaky(calls.clone()))
        .start()
        .await
        .unwrap();
    queue.submit(command("flaky", (), "raced")).await.unwrap();
    assert_eq!(
        queue.wait("raced", PATIENCE).await.unwrap().status,
        Status::Failed
    );
    let mut racers = Vec::new();
    for _ in 0..8 {
        let queue = queue.clone();
        racers.push(tokio::spawn(async move { queue.retry("raced").await }));
    }
    let mut won = 0;
    for racer in racers {
        match racer.await.unwrap() {
            Ok(state) => {
                won += 1;
                assert_eq!(state.retries, 1);
            }
            Err(
                QueueError::AlreadyRetried { status, .. } | QueueError::NotFailed { status, .. },
            ) => {
                assert_ne!(status, Status::Failed);
            }
            Err(other) => panic!("a losing retry: {other}"),
        }
    }
    assert_eq!(won, 1, "exactly one retry wins");
    let done = queue.wait("raced", PATIENCE).await.unwrap();
    assert_eq!(done.status, Status::Succeeded);
    assert_eq!(done.retries, 1);
    wait_pending_zero(&fixture).await;
    assert_eq!(calls.get("raced", "execute"), 2, "one re-run");
    stop(worker).await;
}

/// Retry takes only FAILED commands, cancel only SUBMITTED or RUNNING ones; the others are
/// refused with what the command is, and nothing is written.
pub async fn retry_and_cancel_refuse_clearly<F: Fixture>(fixture: F) {
    let queue = queue(&fixture).await;
    let not_found = |result: Result<CommandState, QueueError>| matches!(result, Err(QueueError::NotFound(id)) if id == "nobody");
    assert!(not_found(queue.retry("nobody").await));
    assert!(not_found(queue.cancel_command("nobody").await));
    assert!(!queue.cancel("nobody").await.unwrap());

    queue
        .submit(command("double", 1u64, "waiting"))
        .await
        .unwrap();
    let error = queue.retry("waiting").await.unwrap_err();
    assert!(
        matches!(
            error,
            QueueError::NotFailed {
                status: Status::Submitted,
                ..
            }
        ),
        "{error}"
    );
    assert_eq!(
        error.to_string(),
        "command \"waiting\" is SUBMITTED: only a FAILED command can be retried"
    );
    let calls = Calls::default();
    let worker = builder::<F>(&queue)
        .handler("double", Double(calls.clone()))
        .handler("troubled", Troubled(calls.clone()))
        .handler("forever", Forever(calls.clone()))
        .start()
        .await
        .unwrap();
    queue
        .submit(command("troubled", "fail", "failed"))
        .await
        .unwrap();
    queue
        .submit(command("forever", (), "running"))
        .await
        .unwrap();
    queue
        .submit(command("forever", (), "cancelled"))
        .await
        .unwrap();
    assert_eq!(
        queue.wait("waiting", PATIENCE).await.unwrap().status,
        Status::Succeeded
    );
    queue.wait("failed", PATIENCE).await.unwrap();
    eventually("RUNNING", || {
        calls.get("running", "check") >= 1 && calls.get("cancelled", "check") >= 1
    })
    .await;
    queue.cancel_command("cancelled").await.unwrap();

    for (id, status) in [
        ("waiting", Status::Succeeded),
        ("running", Status::Running),
        ("cancelled", Status::Cancelled),
    ] {
        let before = queue.command(id).await.unwrap().unwrap();
        let error = queue.retry(id).await.unwrap_err();
        assert!(
            matches!(&error, QueueError::NotFailed { id: got, status: s } if got == id && *s == status),
            "{error}"
        );
        assert_eq!(
            queue.command(id).await.unwrap().unwrap().version,
            before.version
        );
    }
    for (id, status) in [
        ("waiting", Status::Succeeded),
        ("failed", Status::Failed),
        ("cancelled", Status::Cancelled),
    ] {
        let before = queue.command(id).await.unwrap().unwrap();
        let error = queue.cancel_command(id).await.unwrap_err();
        assert!(
            matches!(&error, QueueError::AlreadyOver { id: got, status: s } if got == id && *s == status),
            "{error}"
        );
        assert!(
            error.to_string().contains(&format!("is already {status}")),
            "{error}"
        );
        assert!(!queue.cancel(id).await.unwrap());
        assert_eq!(
            queue.command(id).await.unwrap().unwrap(),
            before,
            "nothing written"
        );
    }
    assert!(queue.cancel("running").await.unwrap());
    wait_pending_zero(&fixture).await;
    stop(worker).await;
}

// ----- sharded queues --------------------------------------------------------------------------

/// A fixture whose queue is spread over several shards.
pub trait ShardedFixture: Fixture {
    /// How many shards the queue has.
    fn shard_count(&self) -> u16;

    /// The shard command `id` lives in, as the store routes it.
    fn shard_of(&self, id: &str) -> u16;

    /// Entries in each shard's stream, shard 0 first.
    fn shard_lengths(&self) -> impl Future<Output = Vec<usize>> + Send;
}

/// For each shard, the first id `"{prefix}-{n}"` that lives there.
fn one_id_per_shard<F: ShardedFixture>(fixture: &F, prefix: &str) -> Vec<String> {
    (0..fixture.shard_count())
        .map(|shard| {
            (0..)
                .map(|n| format!("{prefix}-{n}"))
                .find(|id| fixture.shard_of(id) == shard)
                .expect("some id lives in every shard")
        })
        .collect()
}

/// A queue of several shards, served by two workers that each consume every shard: commands
/// go to the shard of their id (each shard's stream holds exactly its own), all run once; a
/// RUNNING command in every shard is cancelled and its handler hears it, wherever it runs; a
/// failed command in every shard is retried and succeeds; listings and counts cover every
/// shard, and nothing is lost or left pending.
pub async fn sharded_commands_run_cancel_and_retry_across_shards<F: ShardedFixture>(fixture: F) {
    const QUICK: usize = 60;
    let shards = usize::from(fixture.shard_count());
    assert!(shards > 1, "a sharded fixture");
    let queue = queue(&fixture).await;
    let quick: Vec<String> = (0..QUICK).map(|i| format!("quick-{i}")).collect();
    for (i, id) in quick.iter().enumerate() {
        queue.submit(command("double", i as u64, id)).await.unwrap();
    }
    // Routed by id, before any worker runs: each shard's stream holds its own commands.
    let mut expected = vec![0; shards];
    for id in &quick {
        expected[usize::from(fixture.shard_of(id))] += 1;
    }
    assert!(
        expected.iter().all(|&n| n > 0),
        "{QUICK} ids cover every shard: {expected:?}"
    );
    assert_eq!(fixture.shard_lengths().await, expected);

    let calls = Calls::default();
    let stubborn = Stubborn::new(true);
    let (stubborn_calls, stops) = (stubborn.calls.clone(), stubborn.stops.clone());
    let second = Stubborn {
        calls: stubborn_calls.clone(),
        stops: stops.clone(),
        block_in_check: true,
    };
    let start = |stubborn: Stubborn| {
        builder::<F>(&queue)
            .handler("double", Double(calls.clone()))
            .handler("flaky", Flaky(calls.clone()))
            .handler("stubborn", stubborn)
            .start()
    };
    let a = start(stubborn).await.unwrap();
    let b = start(second).await.unwrap();

    for (i, id) in quick.iter().enumerate() {
        let done = queue.wait(id, PATIENCE).await.unwrap();
        assert_eq!(done.status, Status::Succeeded, "{id}");
        assert_eq!(queue.result::<u64>(id).await.unwrap(), Some(2 * i as u64));
    }

    // A RUNNING command in every shard, blocked in a check: cancelled, each handler hears it.
    let running = one_id_per_shard(&fixture, "running");
    for id in &running {
        queue.submit(command("stubborn", (), id)).await.unwrap();
    }
    eventually("a check of every RUNNING command is in flight", || {
        running
            .iter()
            .all(|id| stubborn_calls.get(id, "check") >= 1)
    })
    .await;
    for id in &running {
        assert_eq!(
            queue.state(id).await.unwrap().unwrap().status,
            Status::Running
        );
        assert!(queue.cancel(id).await.unwrap(), "{id}");
    }
    eventually("every cancelled check heard its cancel", || {
        stops.lock().unwrap().len() == shards
    })
    .await;
    assert!(stops
        .lock()
        .unwrap()
        .iter()
        .all(|r| *r == StopReason::Cancelled));

    // A failed command in every shard, retried.
    let flaky = one_id_per_shard(&fixture, "flaky");
    for id in &flaky {
        queue.submit(command("flaky", (), id)).await.unwrap();
    }
    for id in &flaky {
        assert_eq!(
            queue.wait(id, PATIENCE).await.unwrap().status,
            Status::Failed
        );
    }
    assert_eq!(
        listed::<F>(&queue, Status::Failed, 2).await,
        sorted(flaky.clone())
    );
    for id in &flaky {
        assert_eq!(queue.retry(id).await.unwrap().status, Status::Submitted);
    }
    for id in &flaky {
        assert_eq!(
            queue.wait(id, PATIENCE).await.unwrap().status,
            Status::Succeeded
        );
        assert_eq!(queue.result::<u32>(id).await.unwrap(), Some(1));
        assert_eq!(
            calls.get(id, "execute"),
            2,
            "{id}: the first run and the retry"
        );
    }

    // Every command once, listed once under its status across shards (pages smaller than a
    // shard's share, so pages merge), counted in every shard.
    for id in &quick {
        assert_eq!(calls.get(id, "execute"), 1, "{id} ran once");
    }
    let succeeded = sorted(quick.iter().chain(&flaky).cloned());
    assert_eq!(listed::<F>(&queue, Status::Succeeded, 7).await, succeeded);
    assert_eq!(
        listed::<F>(&queue, Status::Cancelled, 1).await,
        sorted(running.clone())
    );
    let counts = queue.counts().await.unwrap();
    assert_eq!(counts.get(Status::Succeeded), (QUICK + shards) as u64);
    assert_eq!(counts.get(Status::Cancelled), shards as u64);
    assert_eq!(counts.total(), (QUICK + 2 * shards) as u64);
    wait_pending_zero(&fixture).await;
    stop(a).await;
    stop(b).await;
}
