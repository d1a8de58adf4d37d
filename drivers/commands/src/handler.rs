//! Typed command handlers (`execute`, `check_status`, `on_cancel`) and what they see.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::pin;
use std::sync::Arc;

use futures::future::{self, BoxFuture, Either};
use futures::FutureExt;
use leasehold_core::CancelReason;
use leasehold_worker::{panic_message, Cancellation};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use crate::signal::Signal;

/// The error a handler returns: any error type converts into it with `?`.
pub type HandlerError = Box<dyn std::error::Error + Send + Sync>;

/// What `execute` or `check_status` found.
#[derive(Debug, Clone, PartialEq)]
pub enum Step<R> {
    /// The work is underway: check again after `status_interval`.
    Running,
    /// The work is underway, and `check_status` needs this (e.g. the external job id it got).
    /// Stored with the state; read it with [`CommandContext::checkpoint`].
    RunningWith(Value),
    /// Done, with a result.
    Succeeded(R),
    /// Done, failed: the command becomes FAILED with this error (no retry).
    Failed(String),
}

impl<R> Step<R> {
    /// [`Step::RunningWith`] for any serializable checkpoint.
    pub fn running_with(checkpoint: impl Serialize) -> Result<Self, serde_json::Error> {
        serde_json::to_value(checkpoint).map(Self::RunningWith)
    }
}

/// Runs one command type. `execute` starts the work and should return at once
/// ([`Step::Running`] while it goes on); `check_status` is then called every `status_interval`
/// until it reports the end. Both must be idempotent with respect to [`CommandContext::id`]:
/// delivery is at-least-once, so a replica that crashed after starting the work but before
/// recording it makes another replica `execute` again.
///
/// An `Err` or a panic is a failed attempt: retried with backoff, FAILED after `max_attempts`.
pub trait CommandHandler: Send + Sync + 'static {
    /// The command's parameters. Parameters that do not decode make the command FAILED.
    type Params: DeserializeOwned + Send + 'static;
    /// The result of a successful command.
    type Output: Serialize + Send + 'static;

    /// Starts the work (for a SUBMITTED command).
    fn execute(
        &self,
        ctx: CommandContext,
        params: Self::Params,
    ) -> impl Future<Output = Result<Step<Self::Output>, HandlerError>> + Send;

    /// Follows the work (for a RUNNING command, on whichever replica holds it now).
    fn check_status(
        &self,
        ctx: CommandContext,
        params: Self::Params,
    ) -> impl Future<Output = Result<Step<Self::Output>, HandlerError>> + Send;

    /// Called once on the replica that finds a command it had started CANCELLED, to stop the
    /// external work (e.g. tear the half-provisioned VM down). Default: nothing.
    fn on_cancel(
        &self,
        ctx: CommandContext,
        params: Self::Params,
    ) -> impl Future<Output = ()> + Send {
        let _ = (ctx, params);
        async {}
    }
}

/// Why a handler is asked to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// The command was cancelled through the queue.
    Cancelled,
    /// The invocation itself was cancelled: lease lost or expired, `max_processing_time`, or
    /// shutdown. Another replica (or a later invocation) will pick the command up.
    Invocation(CancelReason),
}

/// What a handler knows about the command it runs.
#[derive(Debug, Clone)]
pub struct CommandContext {
    pub(crate) id: Arc<str>,
    pub(crate) kind: Arc<str>,
    pub(crate) checkpoint: Option<Value>,
    pub(crate) errors_count: u32,
    pub(crate) retries: u32,
    pub(crate) delivery_count: u32,
    pub(crate) command: Arc<Signal>,
    pub(crate) invocation: Cancellation,
}

impl CommandContext {
    /// The command's id: the natural idempotency key for the external work.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The command type.
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// What `execute` stored with [`Step::RunningWith`], decoded as `T` (`Ok(None)` if none).
    pub fn checkpoint<T: DeserializeOwned>(&self) -> Result<Option<T>, serde_json::Error> {
        self.checkpoint
            .clone()
            .map(serde_json::from_value)
            .transpose()
    }

    /// Failed attempts so far (errors and panics of earlier invocations).
    pub fn errors_count(&self) -> u32 {
        self.errors_count
    }

    /// How often an operator retried the command after it FAILED (0 at first). A retry runs
    /// `execute` again: key external work by (`id`, `retries`) to start it afresh rather than
    /// find the failed one.
    pub fn retries(&self) -> u32 {
        self.retries
    }

    /// How often the stream delivered the command (1 at first; grows with failovers and retries).
    pub fn delivery_count(&self) -> u32 {
        self.delivery_count
    }

    /// Why the handler should stop, if it should.
    pub fn stop_reason(&self) -> Option<StopReason> {
        if self.command.is_fired() {
            return Some(StopReason::Cancelled);
        }
        self.invocation.reason().map(StopReason::Invocation)
    }

    /// Completes when the handler should stop: the command was cancelled, or this invocation
    /// was. Select on it in long work; whatever the handler returns afterwards is not written
    /// over a cancel.
    pub async fn stopped(&self) -> StopReason {
        let command = pin!(self.command.fired());
        let invocation = pin!(self.invocation.cancelled());
        match future::select(command, invocation).await {
            Either::Left(((), _)) => StopReason::Cancelled,
            Either::Right((reason, _)) => StopReason::Invocation(reason),
        }
    }
}

/// Which handler method to call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Execute,
    CheckStatus,
}

/// Why a call produced no step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The parameters do not decode: the command can never run.
    BadParams(String),
    /// An error, a panic, or a result that does not serialize: a failed attempt.
    Attempt(String),
}

/// A handler with its types erased to JSON, as the dispatcher stores it.
pub(crate) trait ErasedHandler: Send + Sync {
    fn call(
        &self,
        phase: Phase,
        ctx: CommandContext,
        params: Value,
    ) -> BoxFuture<'static, Result<Step<Value>, Failure>>;

    fn on_cancel(&self, ctx: CommandContext, params: Value) -> BoxFuture<'static, ()>;
}

pub(crate) struct Typed<H>(pub(crate) Arc<H>);

impl<H: CommandHandler> ErasedHandler for Typed<H> {
    fn call(
        &self,
        phase: Phase,
        ctx: CommandContext,
        params: Value,
    ) -> BoxFuture<'static, Result<Step<Value>, Failure>> {
        let params: H::Params = match serde_json::from_value(params) {
            Ok(params) => params,
            Err(e) => return future::ready(Err(Failure::BadParams(e.to_string()))).boxed(),
        };
        let handler = Arc::clone(&self.0);
        async move {
            let run = async {
                match phase {
                    Phase::Execute => handler.execute(ctx, params).await,
                    Phase::CheckStatus => handler.check_status(ctx, params).await,
                }
            };
            let step = match AssertUnwindSafe(run).catch_unwind().await {
                Ok(Ok(step)) => step,
                Ok(Err(error)) => return Err(Failure::Attempt(error.to_string())),
                Err(panic) => return Err(Failure::Attempt(panic_message(&*panic))),
            };
            Ok(match step {
                Step::Running => Step::Running,
                Step::RunningWith(checkpoint) => Step::RunningWith(checkpoint),
                Step::Failed(error) => Step::Failed(error),
                Step::Succeeded(output) => match serde_json::to_value(output) {
                    Ok(value) => Step::Succeeded(value),
                    Err(e) => {
                        return Err(Failure::Attempt(format!(
                            "cannot serialize the result: {e}"
                        )))
                    }
                },
            })
        }
        .boxed()
    }

    fn on_cancel(&self, ctx: CommandContext, params: Value) -> BoxFuture<'static, ()> {
        let Ok(params) = serde_json::from_value::<H::Params>(params) else {
            return future::ready(()).boxed();
        };
        let handler = Arc::clone(&self.0);
        async move {
            let id = ctx.id.clone();
            if let Err(panic) = AssertUnwindSafe(handler.on_cancel(ctx, params))
                .catch_unwind()
                .await
            {
                tracing::warn!(command = %id, "on_cancel: {}", panic_message(&*panic));
            }
        }
        .boxed()
    }
}
