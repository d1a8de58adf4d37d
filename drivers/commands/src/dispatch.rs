//! One delivery of a command's stream entry: load the state, run the right handler method,
//! write the outcome with compare-and-set, and tell the engine what to do with the lease.
//!
//! | stored status       | handler call   | step                  | write              | lease   |
//! |---------------------|----------------|-----------------------|--------------------|---------|
//! | stale entry         | none           |                       | none               | ack     |
//! | terminal / missing  | none           |                       | none               | ack     |
//! | SUBMITTED           | `execute`      | Running               | RUNNING, started   | keep    |
//! | RUNNING             | `check_status` | Running (same)        | none               | keep    |
//! | either              | either         | Succeeded / Failed    | terminal           | ack     |
//! | either              | either         | error or panic        | errors_count       | retry   |
//!
//! Every write also records the attempt: opened by the call that starts it (`execute`, or the
//! first call after a failed attempt), ended by the step, error or failure that ends it. An
//! entry enqueued before an operator's retry of the command is stale: the retry enqueued
//! another.
//!
//! A kept lease is re-invoked after `status_interval` (the engine's `Pending`). A lost
//! compare-and-set means someone wrote in between: the state is read again, and a CANCELLED
//! one wins (the late result is dropped and counted).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use leasehold_core::Outcome;
use leasehold_worker::Delivery;
use serde::{Deserialize, Serialize};

use crate::handler::{CommandContext, ErasedHandler, Failure, Phase, Step};
use crate::meters;
use crate::signal::Signal;
use crate::state::{unix_millis, AttemptOutcome, CommandState, Status};
use crate::store::{CommandStore, StoreError};

/// The stream entry of a command: just enough to find its state.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Entry {
    pub(crate) id: String,
    pub(crate) kind: String,
    /// The command's retry count when this entry was enqueued (0: by its submit).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) retry: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Counters of one command worker.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CommandStats {
    /// `execute` calls.
    pub executed: u64,
    /// `check_status` calls.
    pub checked: u64,
    /// Commands this worker brought to SUCCEEDED.
    pub succeeded: u64,
    /// Commands this worker brought to FAILED.
    pub failed: u64,
    /// Handler errors and panics (failed attempts).
    pub errors: u64,
    /// Results computed for a command that was cancelled meanwhile, dropped (not written).
    pub dropped_after_cancel: u64,
    /// Cancels that reached a running handler's signal.
    pub cancel_signals: u64,
    /// Store calls that failed (each retried with backoff).
    pub store_errors: u64,
}

/// The counters of several workers together (replicas of one queue, say).
impl std::ops::Add for CommandStats {
    type Output = Self;

    fn add(self, other: Self) -> Self {
        Self {
            executed: self.executed + other.executed,
            checked: self.checked + other.checked,
            succeeded: self.succeeded + other.succeeded,
            failed: self.failed + other.failed,
            errors: self.errors + other.errors,
            dropped_after_cancel: self.dropped_after_cancel + other.dropped_after_cancel,
            cancel_signals: self.cancel_signals + other.cancel_signals,
            store_errors: self.store_errors + other.store_errors,
        }
    }
}

#[derive(Default)]
struct Counters {
    executed: AtomicU64,
    checked: AtomicU64,
    succeeded: AtomicU64,
    failed: AtomicU64,
    errors: AtomicU64,
    dropped_after_cancel: AtomicU64,
    cancel_signals: AtomicU64,
    store_errors: AtomicU64,
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// Shared by every invocation of one worker.
pub(crate) struct Dispatcher<S> {
    pub(crate) store: Arc<S>,
    pub(crate) handlers: HashMap<String, Arc<dyn ErasedHandler>>,
    pub(crate) max_attempts: u32,
    running: Mutex<HashMap<String, Arc<Signal>>>,
    counters: Counters,
}

/// Keeps a command's cancel signal registered while its handler runs here.
struct Registered<'a> {
    running: &'a Mutex<HashMap<String, Arc<Signal>>>,
    id: &'a str,
    signal: Arc<Signal>,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        lock(self.running).remove(self.id);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every critical section is one map operation: a poisoned map is still consistent.
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl<S: CommandStore> Dispatcher<S> {
    pub(crate) fn new(
        store: Arc<S>,
        handlers: HashMap<String, Arc<dyn ErasedHandler>>,
        max_attempts: u32,
    ) -> Self {
        Self {
            store,
            handlers,
            max_attempts,
            running: Mutex::default(),
            counters: Counters::default(),
        }
    }

    /// Fires the cancel signal of command `id` if its handler is running here.
    pub(crate) fn signal_cancel(&self, id: &str) {
        if let Some(signal) = lock(&self.running).get(id) {
            bump(&self.counters.cancel_signals);
            signal.fire();
        }
    }

    pub(crate) fn stats(&self) -> CommandStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        CommandStats {
            executed: get(&c.executed),
            checked: get(&c.checked),
            succeeded: get(&c.succeeded),
            failed: get(&c.failed),
            errors: get(&c.errors),
            dropped_after_cancel: get(&c.dropped_after_cancel),
            cancel_signals: get(&c.cancel_signals),
            store_errors: get(&c.store_errors),
        }
    }

    /// The worker's handler for the command stream.
    pub(crate) async fn handle(&self, delivery: Delivery<Entry>) -> Outcome {
        match self.run(&delivery).await {
            Ok(outcome) => outcome,
            Err(error) => {
                bump(&self.counters.store_errors);
                tracing::warn!(command = %delivery.message().id, "{error}; retrying");
                Outcome::Failed {
                    error: error.to_string(),
                }
            }
        }
    }

    async fn run(&self, delivery: &Delivery<Entry>) -> Result<Outcome, StoreError> {
        let id = delivery.message().id.as_str();
        let Some(state) = self.store.load(id).await? else {
            tracing::warn!(command = %id, "no state (expired?): dropping the entry");
            return Ok(Outcome::Done);
        };
        if delivery.message().retry < state.retries {
            // Redelivered after the command FAILED and was retried: the retry's own entry
            // runs it.
            tracing::debug!(command = %id, "an entry from before a retry: dropping it");
            return Ok(Outcome::Done);
        }
        let handler = self.handlers.get(&state.kind).cloned();
        let registered = self.register(id);
        let ctx = CommandContext {
            id: id.into(),
            kind: state.kind.as_str().into(),
            checkpoint: state.checkpoint.clone(),
            errors_count: state.errors_count,
            retries: state.retries,
            delivery_count: delivery.delivery_count(),
            command: registered.signal.clone(),
            invocation: delivery.cancellation().clone(),
        };
        if state.status.is_terminal() {
            // Cancelled after its work started, and this replica holds it: stop the work.
            if state.status == Status::Cancelled && state.started_at.is_some() {
                if let Some(handler) = &handler {
                    handler.on_cancel(ctx, state.params.clone()).await;
                }
            }
            return Ok(Outcome::Done);
        }
        let Some(handler) = handler else {
            let mut known: Vec<_> = self.handlers.keys().map(String::as_str).collect();
            known.sort_unstable();
            let error = format!(
                "unknown command type {:?}: this worker handles {known:?}",
                state.kind
            );
            let mut next = state.next();
            next.begin_attempt(next.updated_at);
            next.end_attempt(AttemptOutcome::Failed, Some(error.clone()));
            next.last_error = Some(error);
            next.finish(Status::Failed);
            // Lost to another writer: look again at the next status check.
            return Ok(self
                .write(state.status, next, None)
                .await?
                .unwrap_or(Outcome::Pending));
        };
        let phase = match state.status {
            Status::Submitted => Phase::Execute,
            _ => Phase::CheckStatus,
        };
        match phase {
            Phase::Execute => bump(&self.counters.executed),
            Phase::CheckStatus => {
                bump(&self.counters.checked);
                meters::checked(self.store.queue(), &state.kind);
            }
        }
        // A replica that stalled since the delivery (a slow load, a paused process) may have
        // lost the lease, and a peer may be running this command: check right before the
        // handler's side effect, as every handler should (the compare-and-set only decides
        // which state write wins, not whether `execute` runs twice).
        if !delivery.lease_valid() {
            return Ok(Outcome::Pending);
        }
        let started = unix_millis();
        let result = handler.call(phase, ctx.clone(), state.params.clone()).await;
        let mut next = state.next();
        next.begin_attempt(started);
        let outcome = match result {
            Ok(step @ (Step::Running | Step::RunningWith(_))) => {
                if let Step::RunningWith(checkpoint) = step {
                    next.checkpoint = Some(checkpoint);
                }
                if phase == Phase::Execute {
                    next.set_status(Status::Running);
                    next.started_at = Some(started);
                }
                if next.status == state.status
                    && next.checkpoint == state.checkpoint
                    && next.attempts == state.attempts
                {
                    // Nothing new to record; but a cancel that came meanwhile is acted on now.
                    if registered.signal.is_fired() {
                        return self.lost_race(&state, &handler, ctx, true).await;
                    }
                    return Ok(Outcome::Pending);
                }
                Outcome::Pending
            }
            Ok(Step::Succeeded(output)) => {
                next.result = Some(output);
                next.started_at.get_or_insert(started);
                next.end_attempt(AttemptOutcome::Succeeded, None);
                next.finish(Status::Succeeded);
                Outcome::Done
            }
            Ok(Step::Failed(error)) => {
                next.end_attempt(AttemptOutcome::Failed, Some(error.clone()));
                next.last_error = Some(error);
                next.finish(Status::Failed);
                Outcome::Done
            }
            Err(Failure::BadParams(error)) => {
                let error = format!(
                    "cannot decode the parameters of a {:?} command: {error}",
                    state.kind
                );
                next.end_attempt(AttemptOutcome::Failed, Some(error.clone()));
                next.last_error = Some(error);
                next.finish(Status::Failed);
                Outcome::Done
            }
            Err(Failure::Attempt(error)) => {
                bump(&self.counters.errors);
                next.errors_count += 1;
                if next.errors_count >= self.max_attempts {
                    next.end_attempt(AttemptOutcome::Failed, Some(error.clone()));
                    next.last_error = Some(format!(
                        "gave up after {} failed attempts; last: {error}",
                        next.errors_count
                    ));
                    next.finish(Status::Failed);
                    Outcome::Done
                } else {
                    next.end_attempt(AttemptOutcome::Errored, Some(error.clone()));
                    next.last_error = Some(error);
                    Outcome::Retry { delay: None }
                }
            }
        };
        let work_started = phase == Phase::CheckStatus
            || matches!(next.status, Status::Running | Status::Succeeded);
        match self.write(state.status, next, Some(outcome)).await? {
            Some(outcome) => Ok(outcome),
            None => self.lost_race(&state, &handler, ctx, work_started).await,
        }
    }

    fn register<'a>(&'a self, id: &'a str) -> Registered<'a> {
        let signal = Arc::new(Signal::default());
        lock(&self.running).insert(id.to_owned(), signal.clone());
        Registered {
            running: &self.running,
            id,
            signal,
        }
    }

    /// Writes `next` with compare-and-set. `Some(outcome)` if written (counted), `None` if
    /// another writer came first.
    async fn write(
        &self,
        before: Status,
        next: CommandState,
        outcome: Option<Outcome>,
    ) -> Result<Option<Outcome>, StoreError> {
        if !self.store.compare_and_set(&next).await? {
            return Ok(None);
        }
        match next.status {
            Status::Succeeded => bump(&self.counters.succeeded),
            Status::Failed => bump(&self.counters.failed),
            _ => {}
        }
        if next.status != before {
            meters::status_written(self.store.queue(), &next.kind, next.status);
        }
        Ok(Some(outcome.unwrap_or(Outcome::Done)))
    }

    /// Someone wrote the state while the handler ran. A cancel wins: the result is dropped, the
    /// work stopped if it had started, and the entry acked. Otherwise decide again later.
    async fn lost_race(
        &self,
        before: &CommandState,
        handler: &Arc<dyn ErasedHandler>,
        ctx: CommandContext,
        work_started: bool,
    ) -> Result<Outcome, StoreError> {
        let Some(now) = self.store.load(&before.id).await? else {
            return Ok(Outcome::Done);
        };
        match now.status {
            Status::Cancelled => {
                bump(&self.counters.dropped_after_cancel);
                tracing::info!(
                    command = %before.id,
                    "cancelled while its handler ran: the handler's result is dropped"
                );
                if work_started {
                    handler.on_cancel(ctx, before.params.clone()).await;
                }
                Ok(Outcome::Done)
            }
            status if status.is_terminal() => Ok(Outcome::Done),
            _ => Ok(Outcome::Pending),
        }
    }
}
