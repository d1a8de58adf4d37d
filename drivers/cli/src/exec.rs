//! Starting the async runtimes the commands run on.

use std::future::Future;
use std::sync::Arc;
use std::thread;

use leasehold::smol::SmolRuntime;
use leasehold::tokio::TokioRuntime;

use crate::CliError;

/// Which async runtime the workers run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RuntimeKind {
    /// tokio's multi-thread scheduler.
    Tokio,
    /// smol: an `async-executor` driven by one thread per core.
    Smol,
}

impl RuntimeKind {
    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Tokio => "tokio",
            Self::Smol => "smol",
        }
    }
}

/// Threads for the runtime: one per core.
pub(crate) fn threads() -> usize {
    thread::available_parallelism().map_or(2, |n| n.get())
}

/// A tokio multi-thread runtime with timers, one worker thread per core.
fn tokio_runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|source| CliError::Runtime {
            runtime: "tokio",
            source,
        })
}

/// Runs `main` on a fresh tokio multi-thread runtime.
pub(crate) fn on_tokio<F, T>(main: impl FnOnce(TokioRuntime) -> F) -> Result<T, CliError>
where
    F: Future<Output = T>,
{
    let runtime = tokio_runtime()?;
    let handle = TokioRuntime::from_handle(runtime.handle().clone());
    Ok(runtime.block_on(main(handle)))
}

/// Runs `main` on a fresh smol executor driven by one thread per core (this one included).
pub(crate) fn on_smol<F, T>(main: impl FnOnce(SmolRuntime) -> F) -> Result<T, CliError>
where
    F: Future<Output = T>,
{
    let executor = Arc::new(smol::Executor::new());
    let (stop, stopped) = smol::channel::bounded::<()>(1);
    let mut helpers = Vec::new();
    for i in 1..threads() {
        let (executor, stopped) = (executor.clone(), stopped.clone());
        let helper = thread::Builder::new()
            .name(format!("smol-{i}"))
            .spawn(move || smol::block_on(executor.run(stopped.recv())))
            .map_err(|source| CliError::Runtime {
                runtime: "smol",
                source,
            })?;
        helpers.push(helper);
    }
    let result = smol::block_on(executor.run(main(SmolRuntime::with_executor(executor.clone()))));
    drop(stop); // closes the channel: every helper's `run` returns
    for helper in helpers {
        let _ = helper.join();
    }
    Ok(result)
}
