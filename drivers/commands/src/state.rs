//! What the queue stores per command: its status, timestamps, result or error, and a version.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Where a command is in its life: SUBMITTED → RUNNING → SUCCEEDED | FAILED | CANCELLED.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Status {
    /// Accepted and enqueued; `execute` has not finished yet.
    Submitted,
    /// `execute` started the work; `check_status` follows it every `status_interval`.
    Running,
    /// Finished with a result.
    Succeeded,
    /// Finished with an error (or gave up after `max_attempts` handler errors).
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
    /// Bumped by every write; the compare-and-set token.
    pub version: u64,
}

impl CommandState {
    /// A fresh SUBMITTED record.
    pub(crate) fn submitted(id: String, kind: String, params: Value) -> Self {
        Self {
            id,
            kind,
            status: Status::Submitted,
            params,
            result: None,
            checkpoint: None,
            errors_count: 0,
            last_error: None,
            created_at: unix_millis(),
            started_at: None,
            completed_at: None,
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

    /// The next version of this record, to be written with compare-and-set.
    pub(crate) fn next(&self) -> Self {
        Self {
            version: self.version + 1,
            ..self.clone()
        }
    }

    /// Moves to a terminal status, stamping the completion time.
    pub(crate) fn finish(&mut self, status: Status) {
        debug_assert!(status.is_terminal());
        self.status = status;
        self.completed_at = Some(unix_millis());
    }

    #[cfg(feature = "redis")]
    pub(crate) fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a CommandState always serializes")
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
    fn a_record_survives_a_round_trip_and_versions_count_up() {
        let state = CommandState::submitted("c1".into(), "vm".into(), serde_json::json!({"n": 1}));
        let back: CommandState = serde_json::from_str(&state.to_json()).unwrap();
        assert_eq!(back, state);
        assert_eq!(state.next().version, 2);
    }
}
