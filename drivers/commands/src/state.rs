//! What the queue stores per command: its status, timestamps, result or error, the history of
//! its attempts, and a version.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Where a command is in its life: SUBMITTED → RUNNING → SUCCEEDED | FAILED | CANCELLED (and
/// FAILED → SUBMITTED when an operator retries it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Status {
    /// Accepted and enqueued; `execute` has not finished yet.
    Submitted,
    /// `execute` started the work; `check_status` follows it every `status_interval`.
    Running,
    /// Finished with a result.
    Succeeded,
    /// Finished with an error (or gave up after `max_attempts` handler errors). An operator
    /// may [retry](crate::CommandQueue::retry) it: back to SUBMITTED.
    Failed,
    /// Cancelled by [`CommandQueue::cancel`](crate::CommandQueue::cancel).
    Cancelled,
}

impl Status {
    /// Whether the command is over: nothing will change its state again.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::Cancelled)
    }
}

impl Status {
    /// Every status, in life order.
    pub const ALL: [Self; 5] = [
        Self::Submitted,
        Self::Running,
        Self::Succeeded,
        Self::Failed,
        Self::Cancelled,
    ];
}

/// Text that names no [`Status`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a command status (SUBMITTED, RUNNING, SUCCEEDED, FAILED or CANCELLED)")]
pub struct StatusError(String);

/// A status by its name, in any case (`failed`, `FAILED`).
impl std::str::FromStr for Status {
    type Err = StatusError;

    fn from_str(name: &str) -> Result<Self, StatusError> {
        Self::ALL
            .into_iter()
            .find(|status| status.to_string().eq_ignore_ascii_case(name))
            .ok_or_else(|| StatusError(name.into()))
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Submitted => "SUBMITTED",
            Self::Running => "RUNNING",
            Self::Succeeded => "SUCCEEDED",
            Self::Failed => "FAILED",
            Self::Cancelled => "CANCELLED",
        })
    }
}

/// The stored record of one command.
///
/// Every write goes through compare-and-set on [`version`](Self::version): a writer that read
/// an older version loses, re-reads, and decides again. That is what keeps a cancel from being
/// overwritten by a result that was computed while the cancel happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CommandState {
    /// The command's id (unique within the queue).
    pub id: String,
    /// The command type: which handler runs it.
    pub kind: String,
    /// Where it is.
    pub status: Status,
    /// The parameters it was submitted with (JSON).
    pub params: Value,
    /// The result (JSON), present once SUCCEEDED.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// What `execute` asked to remember for `check_status` (e.g. an external job id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<Value>,
    /// Handler errors and panics so far.
    #[serde(default)]
    pub errors_count: u32,
    /// The last error: the failure message of a FAILED command; otherwise the error of an
    /// earlier attempt that was retried (a SUCCEEDED command may have one). [`error`] says
    /// which.
    ///
    /// [`error`]: Self::error
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// When it was submitted (milliseconds since the Unix epoch).
    pub created_at: u64,
    /// When `execute` first started it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<u64>,
    /// When it reached a terminal status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<u64>,
    /// When it entered its current status: what listings by status are ordered by.
    #[serde(default)]
    pub status_changed_at: u64,
    /// When the record was last written.
    #[serde(default)]
    pub updated_at: u64,
    /// How often an operator [retried](crate::CommandQueue::retry) it after it FAILED.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub retries: u32,
    /// Its latest attempts, oldest first: at most [`MAX_ATTEMPTS_KEPT`] (older ones are
    /// dropped; their numbers tell how many there were).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<Attempt>,
    /// Bumped by every write; the compare-and-set token.
    pub version: u64,
}

/// How many attempts a state keeps: the latest ones, so a record never grows without bound.
pub const MAX_ATTEMPTS_KEPT: usize = 20;

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// One attempt at a command: from the handler call that started it (`execute`, or the first
/// call after a failed attempt) to the step, error or cancel that ended it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    /// 1 for the first attempt, counting on across retries.
    pub number: u32,
    /// When its first handler call started (milliseconds since the Unix epoch).
    pub started_at: u64,
    /// When it ended; `None` while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<u64>,
    /// How it ended, or [`AttemptOutcome::Running`].
    pub outcome: AttemptOutcome,
    /// The error or failure it ended with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// How an [`Attempt`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[non_exhaustive]
pub enum AttemptOutcome {
    /// It has not ended yet.
    Running,
    /// The command SUCCEEDED.
    Succeeded,
    /// The command FAILED: a reported failure, parameters that do not decode, an unknown
    /// type, or the handler error that used up the last of `max_attempts`.
    Failed,
    /// A handler error or panic; the command was retried.
    Errored,
    /// The command was cancelled while it ran.
    Cancelled,
}

impl std::fmt::Display for AttemptOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Running => "RUNNING",
            Self::Succeeded => "SUCCEEDED",
            Self::Failed => "FAILED",
            Self::Errored => "ERRORED",
            Self::Cancelled => "CANCELLED",
        })
    }
}

impl CommandState {
    /// A fresh SUBMITTED record.
    pub(crate) fn submitted(id: String, kind: String, params: Value) -> Self {
        let now = unix_millis();
        Self {
            id,
            kind,
            status: Status::Submitted,
            params,
            result: None,
            checkpoint: None,
            errors_count: 0,
            last_error: None,
            created_at: now,
            started_at: None,
            completed_at: None,
            status_changed_at: now,
            updated_at: now,
            retries: 0,
            attempts: Vec::new(),
            version: 1,
        }
    }

    /// The error to show for this command: why it FAILED, or the error of an earlier attempt
    /// that was retried (whatever the status is now: a SUCCEEDED command may have one).
    pub fn error(&self) -> Option<CommandError<'_>> {
        self.last_error.as_deref().map(|message| CommandError {
            message,
            earlier_attempt: self.status != Status::Failed,
        })
    }

    /// The attempt that is underway, if one is.
    pub fn current_attempt(&self) -> Option<&Attempt> {
        self.attempts
            .last()
            .filter(|attempt| attempt.outcome == AttemptOutcome::Running)
    }

    /// The next version of this record, to be written with compare-and-set, stamped now.
    pub(crate) fn next(&self) -> Self {
        Self {
            version: self.version + 1,
            updated_at: unix_millis(),
            ..self.clone()
        }
    }

    /// Moves to `status`, stamping when (a listing by status orders by it).
    pub(crate) fn set_status(&mut self, status: Status) {
        if status != self.status {
            self.status = status;
            self.status_changed_at = unix_millis();
        }
    }

    /// Moves to a terminal status, stamping the completion time.
    pub(crate) fn finish(&mut self, status: Status) {
        debug_assert!(status.is_terminal());
        self.set_status(status);
        self.completed_at = Some(self.status_changed_at);
    }

    /// Opens an attempt started at `started_at`, unless one is underway.
    pub(crate) fn begin_attempt(&mut self, started_at: u64) {
        if self.current_attempt().is_some() {
            return;
        }
        let number = self.attempts.last().map_or(1, |last| last.number + 1);
        self.attempts.push(Attempt {
            number,
            started_at,
            ended_at: None,
            outcome: AttemptOutcome::Running,
            error: None,
        });
        if self.attempts.len() > MAX_ATTEMPTS_KEPT {
            let excess = self.attempts.len() - MAX_ATTEMPTS_KEPT;
            self.attempts.drain(..excess);
        }
    }

    /// Ends the attempt underway, if one is.
    pub(crate) fn end_attempt(&mut self, outcome: AttemptOutcome, error: Option<String>) {
        debug_assert_ne!(outcome, AttemptOutcome::Running);
        if let Some(attempt) = self
            .attempts
            .last_mut()
            .filter(|attempt| attempt.outcome == AttemptOutcome::Running)
        {
            attempt.ended_at = Some(unix_millis().max(attempt.started_at));
            attempt.outcome = outcome;
            attempt.error = error;
        }
    }
}

/// A command's error, and whether it is the reason it failed or an earlier attempt's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommandError<'a> {
    /// The error's text.
    pub message: &'a str,
    /// It is an earlier attempt's (retried since), not the reason the command failed.
    pub earlier_attempt: bool,
}

impl std::fmt::Display for CommandError<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.earlier_attempt {
            write!(f, "an earlier attempt failed: {}", self.message)
        } else {
            f.write_str(self.message)
        }
    }
}

/// One line: id, type, status, and its error if it has one (`c1 vm SUCCEEDED (an earlier
/// attempt failed: timeout)`).
impl std::fmt::Display for CommandState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} {}", self.id, self.kind, self.status)?;
        match self.error() {
            Some(error) => write!(f, " ({error})"),
            None => Ok(()),
        }
    }
}

/// Wall-clock milliseconds since the Unix epoch (0 if the clock is before it).
pub(crate) fn unix_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A command to submit: its type, parameters, and optionally its id.
#[derive(Debug, Clone, PartialEq)]
pub struct Command {
    pub(crate) id: Option<String>,
    pub(crate) kind: String,
    pub(crate) params: Value,
}

impl Command {
    /// A command of type `kind` with `params` (anything serde can serialize to JSON).
    pub fn new(kind: impl Into<String>, params: impl Serialize) -> Result<Self, serde_json::Error> {
        Ok(Self {
            id: None,
            kind: kind.into(),
            params: serde_json::to_value(params)?,
        })
    }

    /// Submits under this id instead of a generated one: submitting the same id again returns
    /// the existing command and enqueues nothing (idempotent submit).
    #[must_use]
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_serialize_as_the_documented_names() {
        let json = serde_json::to_string(&Status::Cancelled).unwrap();
        assert_eq!(json, "\"CANCELLED\"");
        assert_eq!(Status::Running.to_string(), "RUNNING");
        assert!(!Status::Running.is_terminal());
        assert!(Status::Failed.is_terminal());
    }

    #[test]
    fn an_error_says_whether_it_is_why_the_command_failed_or_an_earlier_attempts() {
        let mut state = CommandState::submitted("c1".into(), "vm".into(), serde_json::json!(1));
        assert_eq!(state.error(), None);
        assert_eq!(state.to_string(), "c1 vm SUBMITTED");
        state.last_error = Some("timeout".into());
        state.finish(Status::Succeeded);
        let error = state.error().unwrap();
        assert!(error.earlier_attempt);
        assert_eq!(
            state.to_string(),
            "c1 vm SUCCEEDED (an earlier attempt failed: timeout)"
        );
        state.status = Status::Failed;
        assert!(!state.error().unwrap().earlier_attempt);
        assert_eq!(state.to_string(), "c1 vm FAILED (timeout)");
    }

    #[test]
    fn statuses_parse_in_any_case() {
        for status in Status::ALL {
            assert_eq!(status.to_string().parse(), Ok(status));
            assert_eq!(status.to_string().to_lowercase().parse(), Ok(status));
        }
        let error = "done".parse::<Status>().unwrap_err();
        assert!(
            error.to_string().contains("not a command status"),
            "{error}"
        );
    }

    #[test]
    fn attempts_are_numbered_on_and_the_latest_kept() {
        let mut state = CommandState::submitted("c1".into(), "vm".into(), serde_json::json!(1));
        assert_eq!(state.current_attempt(), None);
        state.end_attempt(AttemptOutcome::Errored, Some("nothing open".into()));
        assert!(
            state.attempts.is_empty(),
            "no attempt underway: nothing to end"
        );
        state.begin_attempt(10);
        state.begin_attempt(11);
        assert_eq!(state.attempts.len(), 1, "one attempt underway at a time");
        assert_eq!(state.current_attempt().unwrap().started_at, 10);
        state.end_attempt(AttemptOutcome::Errored, Some("timeout".into()));
        assert_eq!(state.current_attempt(), None);
        let first = &state.attempts[0];
        assert_eq!((first.number, first.outcome), (1, AttemptOutcome::Errored));
        assert_eq!(first.error.as_deref(), Some("timeout"));
        assert!(first.ended_at >= Some(10));
        for n in 2..=30u64 {
            state.begin_attempt(n);
            state.end_attempt(AttemptOutcome::Errored, None);
        }
        assert_eq!(state.attempts.len(), MAX_ATTEMPTS_KEPT);
        assert_eq!(state.attempts[0].number, 11);
        assert_eq!(state.attempts.last().unwrap().number, 30);
    }

    #[test]
    fn a_status_change_is_stamped() {
        let mut state = CommandState::submitted("c1".into(), "vm".into(), serde_json::json!(1));
        assert_eq!(state.status_changed_at, state.created_at);
        state.status_changed_at = 5;
        state.set_status(Status::Submitted);
        assert_eq!(state.status_changed_at, 5, "not a change");
        state.finish(Status::Failed);
        assert!(state.status_changed_at >= state.created_at);
        assert_eq!(state.completed_at, Some(state.status_changed_at));
    }

    #[test]
    fn a_record_without_the_newer_fields_still_reads() {
        let old = r#"{"id":"c1","kind":"vm","status":"FAILED","params":1,"errors_count":2,
            "last_error":"x","created_at":7,"version":3}"#;
        let state: CommandState = serde_json::from_str(old).unwrap();
        assert_eq!((state.status_changed_at, state.retries), (0, 0));
        assert!(state.attempts.is_empty());
    }

    #[test]
    fn a_record_survives_a_round_trip_and_versions_count_up() {
        let mut state =
            CommandState::submitted("c1".into(), "vm".into(), serde_json::json!({"n": 1}));
        state.begin_attempt(state.created_at);
        state.end_attempt(AttemptOutcome::Failed, Some("no".into()));
        state.retries = 1;
        let back: CommandState =
            serde_json::from_str(&serde_json::to_string(&state).unwrap()).unwrap();
        assert_eq!(back, state);
        assert_eq!(state.next().version, 2);
    }
}
