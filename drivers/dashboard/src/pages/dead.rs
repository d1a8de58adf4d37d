//! A stream's dead letters: a page of them with requeue and purge for one, a selection or
//! all, and one dead letter with its payload.

use leasehold_core::{DeadLetterEntry, Listing};
use maud::{html, Markup};

use super::{csrf_field, dead_url, next_link, segment, since, PayloadText};

/// What the action forms need: the CSRF secret, or `None` when the dashboard is read-only.
pub(crate) type Actions<'a> = Option<&'a str>;

/// The dead-letter page's live part.
pub(crate) fn dead_letters(
    stream: &str,
    listing: &Listing<DeadLetterEntry>,
    actions: Actions<'_>,
) -> Markup {
    let base = dead_url(stream);
    let table = html! {
        table.figures data-table="dead" {
            thead { tr {
                @if actions.is_some() {
                    th { input type="checkbox" data-select-all aria-label="select all"; }
                }
                th { "id" } th { "reason" } th.n { "deliveries" } th { "dead-lettered" }
                th { "original id" }
                @if actions.is_some() { th {} }
            } }
            tbody {
                @for e in &listing.entries {
                    tr data-dead=(e.id) {
                        @if actions.is_some() {
                            td { input type="checkbox" name="id" value=(e.id) aria-label="select"; }
                        }
                        td { a href={(base) "/" (segment(e.id.as_str()))} { code { (e.id) } } }
                        td.reason data-field="reason" { (e.reason) }
                        td.n data-field="deliveries" { (e.delivery_count) }
                        td { (since(e.at)) }
                        td { code { (e.original_id) } }
                        @if actions.is_some() {
                            td.actions {
                                button type="submit" name="one" value=(e.id)
                                    formaction={(base) "/requeue"} data-action="requeue-one" { "requeue" }
                                button.danger type="submit" name="one" value=(e.id)
                                    formaction={(base) "/purge"} data-action="purge-one"
                                    data-confirm="Delete this dead letter for good?" { "purge" }
                            }
                        }
                    }
                }
                @if listing.entries.is_empty() {
                    tr { td.muted colspan="7" { "no dead letters" } }
                }
            }
        }
    };
    let after = listing
        .next
        .as_ref()
        .and_then(|p| p.after.as_ref())
        .map(|id| id.as_str());
    html! {
        @if let Some(csrf) = actions {
            form method="post" action={(base) "/requeue"} {
                (csrf_field(csrf))
                div.toolbar {
                    button type="submit" formaction={(base) "/requeue"} data-action="requeue-selected" { "Requeue selected" }
                    button.danger type="submit" formaction={(base) "/purge"} data-action="purge-selected"
                        data-confirm="Delete the selected dead letters for good?" { "Purge selected" }
                    span.gap {}
                    button type="submit" name="all" value="1" formaction={(base) "/requeue"} data-action="requeue-all"
                        data-confirm="Put every dead letter of this stream back into it?" { "Requeue all" }
                    button.danger type="submit" name="all" value="1" formaction={(base) "/purge"} data-action="purge-all"
                        data-confirm="Delete every dead letter of this stream for good?" { "Purge all" }
                }
                (table)
            }
        } @else {
            (table)
        }
        (next_link(&base, &[], after))
    }
}

/// One dead letter with its payload.
pub(crate) fn dead_letter(stream: &str, entry: &DeadLetterEntry, actions: Actions<'_>) -> Markup {
    let base = dead_url(stream);
    let payload = entry.payload.as_deref().map(PayloadText::of);
    html! {
        dl.figures {
            dt { "id" } dd { code { (entry.id) } }
            dt { "original id" } dd { code { (entry.original_id) } }
            dt { "reason" } dd data-field="reason" { (entry.reason) }
            dt { "deliveries" } dd data-field="deliveries" { (entry.delivery_count) }
            dt { "dead-lettered" } dd { (since(entry.at)) }
            dt { "payload" } dd {
                @match &payload {
                    Some(p) => { (entry.payload.as_ref().map_or(0, Vec::len)) " bytes, " (p.kind()) }
                    None => "not kept",
                }
            }
        }
        @if let Some(payload) = &payload {
            pre.payload data-payload data-kind=(payload.kind()) { (payload.text()) }
        }
        @if let Some(csrf) = actions {
            form method="post" action={(base) "/requeue"} {
                (csrf_field(csrf))
                input type="hidden" name="one" value=(entry.id);
                div.toolbar {
                    button type="submit" formaction={(base) "/requeue"} data-action="requeue-one" { "Requeue" }
                    button.danger type="submit" formaction={(base) "/purge"} data-action="purge-one"
                        data-confirm="Delete this dead letter for good?" { "Purge" }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(reason: &str, payload: &[u8]) -> DeadLetterEntry {
        DeadLetterEntry::new("1-0", "0-1", reason, 3).with_payload(payload.to_vec())
    }

    #[test]
    fn reasons_and_payloads_render_as_text() {
        let evil = "<script>alert('reason')</script>";
        let listing = Listing::new(
            vec![entry(evil, b"<script>alert('payload')</script>")],
            None,
        );
        for html in [
            dead_letters("s", &listing, Some("csrf")).into_string(),
            dead_letter("s", &listing.entries[0], Some("csrf")).into_string(),
        ] {
            assert!(!html.contains("<script>"), "{html}");
            assert!(html.contains("&lt;script&gt;alert("), "{html}");
        }
    }

    #[test]
    fn read_only_pages_offer_no_action() {
        let listing = Listing::new(vec![entry("bad", b"{}")], None);
        let html = dead_letters("s", &listing, None).into_string();
        assert!(!html.contains("<form"), "{html}");
        assert!(!html.contains("<button"), "{html}");
        let html = dead_letter("s", &listing.entries[0], None).into_string();
        assert!(!html.contains("<form"), "{html}");
    }
}
