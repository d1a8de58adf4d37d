//! A command queue: its commands by status with counts, and one command with its attempts,
//! with cancel and retry.

use leasehold_commands::{CommandState, Listing, Status, StatusCounts};
use maud::{html, Markup};

use super::dead::Actions;
use super::{command_url, csrf_field, next_link, queue_url, since_millis};

/// The queue page's live part: the counts per status (from the latest round), and a page of
/// the commands in `status`.
pub(crate) fn queue(
    name: &str,
    counts: Option<&StatusCounts>,
    status: Status,
    listing: &Listing,
) -> Markup {
    let base = queue_url(name);
    let after = listing.next.as_ref().map(ToString::to_string);
    html! {
        nav.tabs data-table="counts" {
            @for s in Status::ALL {
                a.current[s == status] data-status=(s) href={(base) "?status=" (s)} {
                    (s) " "
                    span.count { @if let Some(c) = counts { (c.get(s)) } @else { "?" } }
                }
            }
        }
        table.figures data-table="commands" {
            thead { tr {
                th { "id" } th { "type" } th { "in this status" } th.n { "attempts" } th { "error" }
            } }
            tbody {
                @for s in &listing.states {
                    tr data-command=(s.id) {
                        td { a href=(command_url(name, &s.id)) { code { (s.id) } } }
                        td { (s.kind) }
                        td { (since_millis(s.status_changed_at)) }
                        td.n { (s.attempts.last().map_or(0, |a| a.number)) }
                        td.reason { (s.last_error.as_deref().unwrap_or_default()) }
                    }
                }
                @if listing.states.is_empty() {
                    tr { td.muted colspan="5" { "none " (status) } }
                }
            }
        }
        (next_link(&base, &[("status", &status.to_string())], after.as_deref()))
    }
}

/// One command: its state, parameters, result or error, attempts, and the actions its status
/// allows.
pub(crate) fn command(queue: &str, state: &CommandState, actions: Actions<'_>) -> Markup {
    let url = command_url(queue, &state.id);
    let pretty = |v: &serde_json::Value| serde_json::to_string_pretty(v).unwrap_or_default();
    html! {
        dl.figures {
            dt { "status" } dd data-field="status" { span class={"status " (state.status)} { (state.status) } }
            dt { "type" } dd { (state.kind) }
            dt { "in this status" } dd { (since_millis(state.status_changed_at)) }
            dt { "submitted" } dd { (since_millis(state.created_at)) }
            @if state.retries > 0 { dt { "retried" } dd { (state.retries) " times" } }
            @if let Some(error) = &state.last_error { dt { "last error" } dd.reason data-field="error" { (error) } }
        }
        h3 { "Parameters" }
        pre.payload { (pretty(&state.params)) }
        @if let Some(result) = &state.result {
            h3 { "Result" }
            pre.payload { (pretty(result)) }
        }
        @if let Some(csrf) = actions {
            @if !state.status.is_terminal() || state.status == Status::Failed {
                form method="post" action={(url) "/cancel"} {
                    (csrf_field(csrf))
                    div.toolbar {
                        @if !state.status.is_terminal() {
                            button.danger type="submit" formaction={(url) "/cancel"} data-action="cancel"
                                data-confirm="Cancel this command? A running handler is told to stop." { "Cancel" }
                        }
                        @if state.status == Status::Failed {
                            button type="submit" formaction={(url) "/retry"} data-action="retry" { "Retry" }
                        }
                    }
                }
            }
        }
        h3 { "Attempts" }
        table.figures data-table="attempts" {
            thead { tr { th.n { "#" } th { "started" } th { "ended" } th { "outcome" } th { "error" } } }
            tbody {
                @for a in &state.attempts {
                    tr {
                        td.n { (a.number) }
                        td { (since_millis(a.started_at)) }
                        td { @if let Some(end) = a.ended_at { (since_millis(end)) } @else { "-" } }
                        td { (a.outcome) }
                        td.reason { (a.error.as_deref().unwrap_or_default()) }
                    }
                }
                @if state.attempts.is_empty() {
                    tr { td.muted colspan="5" { "not started yet" } }
                }
            }
        }
    }
}
