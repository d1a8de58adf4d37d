//! A stream: its groups, its consumers, and its held leases, each with how far it is from
//! lapsing.

use std::time::Duration;

use leasehold_core::{Listing, Overview, PendingEntry};
use maud::{html, Markup};

use super::{ago, dead_url, next_link, query_value, stream_url};

/// How a lease stands, from the time since its last renew against the claim timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Health {
    /// Renewed within the last two heartbeats.
    Fresh,
    /// Idle two thirds of the claim timeout: two heartbeats missed, lapsing soon.
    Near,
    /// Idle a whole claim timeout: another consumer may take it over.
    Lapsed,
}

impl Health {
    pub fn of(idle: Duration, claim_timeout: Duration) -> Self {
        if idle >= claim_timeout {
            Self::Lapsed
        } else if idle * 3 >= claim_timeout * 2 {
            Self::Near
        } else {
            Self::Fresh
        }
    }

    fn class(self) -> &'static str {
        match self {
            Self::Fresh => "fresh",
            Self::Near => "near",
            Self::Lapsed => "lapsed",
        }
    }
}

/// The stream page's live part: `overview` (from the latest round), the group shown, and a
/// page of its pending entries.
pub(crate) fn stream(
    overview: &Overview,
    group: &str,
    pending: &Listing<PendingEntry>,
    claim_timeout: Duration,
) -> Markup {
    let base = stream_url(&overview.stream);
    html! {
        dl.figures {
            dt { "length" } dd data-field="length" { (overview.length) }
            dt { "dead letters" } dd data-field="dead" {
                a href=(dead_url(&overview.stream)) { (overview.dead_letters) }
            }
            dt { "delayed" } dd data-field="delayed" {
                (overview.delayed.len)
                @if let Some(next) = overview.delayed.next_due { " (next due in " (ago(next)) ")" }
            }
            dt { "claim timeout" } dd { (ago(claim_timeout)) }
        }
        @if overview.groups.len() > 1 {
            nav.tabs {
                @for g in &overview.groups {
                    a.current[g.name == group] href={(base) "?group=" (query_value(&g.name))} { (g.name) }
                }
            }
        }
        @if let Some(g) = overview.groups.iter().find(|g| g.name == group) {
            h2 { "Group " code { (g.name) } }
            dl.figures {
                dt { "lag" } dd data-field="lag" { @if let Some(lag) = g.lag { (lag) } @else { "?" } }
                dt { "pending" } dd data-field="pending" { (g.pending) }
                dt { "oldest pending" } dd { @if let Some(age) = g.oldest_pending_age { (ago(age)) } @else { "-" } }
            }
            h3 { "Consumers" }
            table.figures data-table="consumers" {
                thead { tr { th { "consumer" } th.n { "pending" } th.n { "idle" } } }
                tbody {
                    @for c in &g.consumers {
                        tr data-consumer=(c.name) {
                            td { (c.name) }
                            td.n data-field="pending" { (c.pending) }
                            td.n data-field="idle" { (ago(c.idle)) }
                        }
                    }
                }
            }
        } @else {
            p.muted { "no consumer group yet" }
        }
        h3 { "Held leases" }
        p.muted {
            "Time since each lease was last renewed against the claim timeout: amber after two \
             missed heartbeats, red once another consumer may take it over."
        }
        table.figures data-table="leases" {
            thead { tr {
                th { "id" } th { "owner" } th.n { "idle" } th { "lease" } th.n { "deliveries" }
            } }
            tbody {
                @for e in &pending.entries {
                    @let health = Health::of(e.idle, claim_timeout);
                    @let used = (e.idle.as_secs_f64() / claim_timeout.as_secs_f64()).min(1.0);
                    tr class=(health.class()) data-lease=(e.id) {
                        td { code { (e.id) } }
                        td { (e.owner) }
                        td.n data-field="idle" { (ago(e.idle)) }
                        td {
                            meter min="0" max="1" low="0.666" high="0.999" optimum="0"
                                value=(format!("{used:.3}")) title={(ago(e.idle)) " of " (ago(claim_timeout))} {}
                        }
                        td.n { (e.delivery_count) }
                    }
                }
                @if pending.entries.is_empty() {
                    tr { td.muted colspan="5" { "none held" } }
                }
            }
        }
        @let after = pending.next.as_ref().and_then(|p| p.after.as_ref()).map(|id| id.as_str());
        (next_link(&base, &[("group", group)], after))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_nears_lapsing_after_two_missed_heartbeats() {
        let claim = Duration::from_secs(30);
        assert_eq!(Health::of(Duration::from_secs(9), claim), Health::Fresh);
        assert_eq!(Health::of(Duration::from_secs(19), claim), Health::Fresh);
        assert_eq!(Health::of(Duration::from_secs(20), claim), Health::Near);
        assert_eq!(Health::of(Duration::from_secs(30), claim), Health::Lapsed);
    }
}
