//! The command queue's metrics, through the `metrics` facade, labelled with the queue's name
//! and the command type (the worker's stream metrics carry the queue's name as `stream`).
//! Command types are open-ended, so these are registered per call: a command costs store
//! round trips, next to which a registry lookup is nothing.

use metrics::counter;

use crate::state::Status;

/// Status changes written, by `queue`, `type` and the new `status` (`submitted`, `running`,
/// `succeeded`, `failed`, `cancelled`).
pub const COMMANDS: &str = "leasehold_commands_total";
/// `check_status` calls, by `queue` and `type`.
pub const COMMAND_CHECKS: &str = "leasehold_command_checks_total";

/// A command of `kind` in `queue` was moved to `status` (the write succeeded).
pub(crate) fn status_written(queue: &str, kind: &str, status: Status) {
    counter!(COMMANDS, "queue" => queue.to_owned(), "type" => kind.to_owned(), "status" => label(status))
        .increment(1);
}

/// A command of `kind` in `queue` was checked.
pub(crate) fn checked(queue: &str, kind: &str) {
    counter!(COMMAND_CHECKS, "queue" => queue.to_owned(), "type" => kind.to_owned()).increment(1);
}

fn label(status: Status) -> &'static str {
    match status {
        Status::Submitted => "submitted",
        Status::Running => "running",
        Status::Succeeded => "succeeded",
        Status::Failed => "failed",
        Status::Cancelled => "cancelled",
    }
}
