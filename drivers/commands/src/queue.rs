//! The client side: submit, look up, cancel, and wait for commands; list them by status and
//! retry the failed ones.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use leasehold_worker::Runtime;
use serde::de::DeserializeOwned;

use crate::dispatch::Entry;
use crate::meters;
use crate::state::{AttemptOutcome, Command, CommandState, Status};
use crate::store::{CommandStore, Listing, Page, StatusCounts, StoreError, Submit};

/// Compare-and-set rounds a cancel tries before giving up (each loses only to another write).
const CANCEL_ROUNDS: usize = 64;

/// A queue call that failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum QueueError {
    /// The store failed; the call may be retried.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A command id must be non-empty.
    #[error("a command id must not be empty")]
    EmptyId,
    /// No command has this id (never submitted, or its state expired).
    #[error("no command {0:?}")]
    NotFound(String),
    /// The stored result does not decode as the requested type.
    #[error("the result of command {id:?} is not a {expected}: {source}")]
    ResultType {
        /// The command.
        id: String,
        /// The requested type's name.
        expected: &'static str,
        /// Why it does not decode.
        source: serde_json::Error,
    },
    /// The command did not end in time.
    #[error("command {id:?} is still {status} after {waited:?}")]
    Timeout {
        /// The command.
        id: String,
        /// Its status when the wait gave up.
        status: Status,
        /// How long was waited.
        waited: Duration,
    },
    /// The command kept changing under a cancel.
    #[error("command {0:?} kept changing: cancel gave up after {CANCEL_ROUNDS} attempts")]
    Contended(String),
    /// A cancel found the command over already.
    #[error(
        "command {id:?} is already {status}: only a SUBMITTED or RUNNING command can be cancelled"
    )]
    AlreadyOver {
        /// The command.
        id: String,
        /// Its (terminal) status.
        status: Status,
    },
    /// A retry found the command in another status than FAILED.
    #[error("command {id:?} is {status}: only a FAILED command can be retried")]
    NotFailed {
        /// The command.
        id: String,
        /// Its status.
        status: Status,
    },
    /// Another retry of the same failure won: this one did nothing.
    #[error("command {id:?} was retried by another call meanwhile (it is {status} now)")]
    AlreadyRetried {
        /// The command.
        id: String,
        /// Its status after the other retry.
        status: Status,
    },
}

/// What [`CommandQueue::submit`] did.
#[derive(Debug, Clone, PartialEq)]
pub struct Submitted {
    /// The command's state: fresh, or the existing one when the id was taken.
    pub state: CommandState,
    /// Whether this call created it (false: the id existed, nothing was enqueued).
    pub created: bool,
}

impl Submitted {
    /// The command's id.
    pub fn id(&self) -> &str {
        &self.state.id
    }
}

/// A handle to submit, track and cancel commands. Cheap to clone.
#[derive(Debug)]
pub struct CommandQueue<S, R> {
    store: Arc<S>,
    runtime: R,
    wait_poll: Duration,
}

impl<S, R: Clone> Clone for CommandQueue<S, R> {
    fn clone(&self) -> Self {
        Self {
            store: Arc::clone(&self.store),
            runtime: self.runtime.clone(),
            wait_poll: self.wait_poll,
        }
    }
}

impl<S: CommandStore, R: Runtime> CommandQueue<S, R> {
    /// A queue on `store`; `runtime` times [`wait`](Self::wait).
    pub fn new(runtime: R, store: S) -> Self {
        Self::from_shared(runtime, Arc::new(store))
    }

    pub(crate) fn from_shared(runtime: R, store: Arc<S>) -> Self {
        Self {
            store,
            runtime,
            wait_poll: Duration::from_millis(50),
        }
    }

    /// How often [`wait`](Self::wait) looks at the state (default 50 ms).
    #[must_use]
    pub fn with_wait_poll(mut self, every: Duration) -> Self {
        self.wait_poll = every.max(Duration::from_millis(1));
        self
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The runtime.
    pub fn runtime(&self) -> &R {
        &self.runtime
    }

    pub(crate) fn shared_store(&self) -> Arc<S> {
        Arc::clone(&self.store)
    }

    /// Submits `command`: writes its SUBMITTED state and enqueues it, atomically. If its id
    /// exists, returns the existing state and enqueues nothing.
    pub async fn submit(&self, command: Command) -> Result<Submitted, QueueError> {
        let id = match command.id {
            Some(id) if id.is_empty() => return Err(QueueError::EmptyId),
            Some(id) => id,
            None => generate_id(),
        };
        let state = CommandState::submitted(id, command.kind, command.params);
        let entry = serde_json::to_vec(&Entry {
            id: state.id.clone(),
            kind: state.kind.clone(),
            retry: 0,
        })
        .expect("an entry always serializes");
        Ok(match self.store.submit(&state, &entry).await? {
            Submit::Created => {
                meters::status_written(self.store.queue(), &state.kind, Status::Submitted);
                Submitted {
                    state,
                    created: true,
                }
            }
            Submit::Exists(state) => Submitted {
                state: *state,
                created: false,
            },
        })
    }

    /// The state of command `id`, if it exists.
    pub async fn state(&self, id: &str) -> Result<Option<CommandState>, QueueError> {
        Ok(self.store.load(id).await?)
    }

    /// Everything stored about command `id`, for an operator: status, parameters, result or
    /// error, timestamps, retries and the latest [`attempts`](CommandState::attempts). `None`
    /// if it does not exist (never submitted, or its state expired). The same as
    /// [`state`](Self::state).
    pub async fn command(&self, id: &str) -> Result<Option<CommandState>, QueueError> {
        self.state(id).await
    }

    /// One page of the commands in `status`, oldest in it first (ordered by
    /// ([`status_changed_at`](CommandState::status_changed_at), id)); pass
    /// [`Listing::next_page`] to read the next one. Read from the store's status index, not a
    /// scan: commands whose state expired are left out.
    ///
    /// Paging while commands move sees each command that stays in `status` exactly once; one
    /// that enters it meanwhile is seen if it sorts after the page being read (it normally
    /// does: it entered last).
    pub async fn commands(&self, status: Status, page: Page) -> Result<Listing, QueueError> {
        Ok(self.store.list(status, &page).await?)
    }

    /// How many commands each status holds, for a dashboard: read from the status indexes,
    /// so it costs the same for ten commands or a million. An upper bound: expired states
    /// count until a listing meets them.
    pub async fn counts(&self) -> Result<StatusCounts, QueueError> {
        Ok(self.store.counts().await?)
    }

    /// The result of command `id` as `T`: `Some` only once it SUCCEEDED.
    pub async fn result<T: DeserializeOwned>(&self, id: &str) -> Result<Option<T>, QueueError> {
        let Some(state) = self.state(id).await? else {
            return Err(QueueError::NotFound(id.into()));
        };
        match (state.status, state.result) {
            (Status::Succeeded, Some(result)) => {
                serde_json::from_value(result)
                    .map(Some)
                    .map_err(|source| QueueError::ResultType {
                        id: id.into(),
                        expected: std::any::type_name::<T>(),
                        source,
                    })
            }
            _ => Ok(None),
        }
    }

    /// Cancels command `id`: true if this call moved it to CANCELLED, false if it is missing or
    /// already terminal. A handler running it is signalled; its result will not be recorded.
    /// [`cancel_command`](Self::cancel_command) says which it was.
    pub async fn cancel(&self, id: &str) -> Result<bool, QueueError> {
        match self.cancel_command(id).await {
            Ok(_) => Ok(true),
            Err(QueueError::NotFound(_) | QueueError::AlreadyOver { .. }) => Ok(false),
            Err(error) => Err(error),
        }
    }

    /// Cancels command `id`, for an operator: its CANCELLED state, or why not.
    ///
    /// A SUBMITTED command is never run; a RUNNING one's handler is signalled
    /// ([`CommandContext::stopped`](crate::CommandContext::stopped)), its result is not
    /// recorded, and the handler's `on_cancel` stops the external work. The attempt underway
    /// ends CANCELLED. The write is a compare-and-set, so a result that arrives at the same
    /// time never overwrites the cancel.
    ///
    /// # Errors
    ///
    /// [`QueueError::NotFound`] for an unknown (or expired) id, [`QueueError::AlreadyOver`]
    /// for a command that already SUCCEEDED, FAILED or was CANCELLED (nothing is written),
    /// [`QueueError::Contended`] if it kept changing under the cancel, and
    /// [`QueueError::Store`].
    pub async fn cancel_command(&self, id: &str) -> Result<CommandState, QueueError> {
        for _ in 0..CANCEL_ROUNDS {
            let Some(state) = self.store.load(id).await? else {
                return Err(QueueError::NotFound(id.into()));
            };
            if state.status.is_terminal() {
                return Err(QueueError::AlreadyOver {
                    id: id.into(),
                    status: state.status,
                });
            }
            let mut next = state.next();
            next.end_attempt(AttemptOutcome::Cancelled, None);
            next.finish(Status::Cancelled);
            if self.store.compare_and_set(&next).await? {
                meters::status_written(self.store.queue(), &next.kind, Status::Cancelled);
                // Best effort: a worker that misses it sees the cancel at its next status check.
                if let Err(error) = self.store.announce_cancel(id).await {
                    tracing::warn!(command = %id, "cancel announcement failed: {error}");
                }
                return Ok(next);
            }
        }
        Err(QueueError::Contended(id.into()))
    }

    /// Runs a FAILED command again, for an operator: back to SUBMITTED with a fresh budget of
    /// `max_attempts`, enqueued anew; returns its new state.
    ///
    /// The state write is a compare-and-set on the FAILED version read, and the new stream
    /// entry is written with it (one script on Redis): a retry is never lost nor doubled, and
    /// of several racing retries exactly one succeeds; the others answer
    /// [`QueueError::AlreadyRetried`]. The command keeps its id, parameters, last error (now an
    /// earlier attempt's) and attempt history; [`retries`](CommandState::retries) counts up,
    /// and the checkpoint is cleared: the retry starts with `execute`
    /// ([`CommandContext::retries`](crate::CommandContext::retries) tells it which run it is).
    ///
    /// # Errors
    ///
    /// [`QueueError::NotFound`] for an unknown (or expired) id, [`QueueError::NotFailed`] for
    /// a command in any other status (nothing is written), [`QueueError::AlreadyRetried`], and
    /// [`QueueError::Store`].
    pub async fn retry(&self, id: &str) -> Result<CommandState, QueueError> {
        let Some(state) = self.store.load(id).await? else {
            return Err(QueueError::NotFound(id.into()));
        };
        if state.status != Status::Failed {
            return Err(QueueError::NotFailed {
                id: id.into(),
                status: state.status,
            });
        }
        let mut next = state.next();
        next.set_status(Status::Submitted);
        next.errors_count = 0;
        next.retries += 1;
        next.completed_at = None;
        next.checkpoint = None;
        next.result = None;
        let entry = serde_json::to_vec(&Entry {
            id: next.id.clone(),
            kind: next.kind.clone(),
            retry: next.retries,
        })
        .expect("an entry always serializes");
        if self.store.requeue(&next, &entry).await? {
            meters::status_written(self.store.queue(), &next.kind, Status::Submitted);
            return Ok(next);
        }
        // Only a retry writes over a FAILED state: another one won.
        match self.store.load(id).await? {
            None => Err(QueueError::NotFound(id.into())),
            Some(now) => Err(QueueError::AlreadyRetried {
                id: id.into(),
                status: now.status,
            }),
        }
    }

    /// Waits until command `id` is terminal and returns its state, or fails after `timeout`. A
    /// transient store error (a restarting server, a dropped connection) is retried meanwhile.
    pub async fn wait(&self, id: &str, timeout: Duration) -> Result<CommandState, QueueError> {
        let start = self.runtime.now();
        loop {
            let read = self.state(id).await;
            let waited = self.runtime.now().saturating_duration_since(start);
            let state = match read {
                Ok(Some(state)) => state,
                Ok(None) => return Err(QueueError::NotFound(id.into())),
                // Waiting rides out what retrying mends (a restarting server, a dropped
                // connection), until the timeout: then the error is the answer.
                Err(QueueError::Store(error)) if error.is_transient() && waited < timeout => {
                    let next = self.runtime.now() + self.wait_poll.min(timeout - waited);
                    self.runtime.sleep_until(next).await;
                    continue;
                }
                Err(error) => return Err(error),
            };
            if state.status.is_terminal() {
                return Ok(state);
            }
            if waited >= timeout {
                return Err(QueueError::Timeout {
                    id: id.into(),
                    status: state.status,
                    waited,
                });
            }
            let next = self.runtime.now() + self.wait_poll.min(timeout - waited);
            self.runtime.sleep_until(next).await;
        }
    }
}

/// A unique id: wall-clock milliseconds, a per-process counter, and a random part.
fn generate_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(count);
    hasher.write_u32(std::process::id());
    format!(
        "{:x}-{count:x}-{:016x}",
        crate::state::unix_millis(),
        hasher.finish()
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn generated_ids_differ() {
        let a = super::generate_id();
        let b = super::generate_id();
        assert_ne!(a, b);
        assert!(!a.is_empty());
    }
}
