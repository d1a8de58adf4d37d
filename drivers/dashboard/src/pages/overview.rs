//! The overview: every stream with its figures and recent charts, every command queue with
//! its counts per status. Rendered from the latest snapshot alone: no read of its own.

use leasehold_commands::Status;
use leasehold_core::Overview;
use maud::{html, Markup};

use super::chart::sparkline;
use super::{ago, dead_url, queue_url, since, stream_url};
use crate::sampler::{Snapshot, StreamState};

/// The overview's live part.
pub(crate) fn overview(snapshot: &Snapshot) -> Markup {
    html! {
        @if let Some(error) = &snapshot.catalog_error {
            p.notice.failed role="alert" { "cannot list the streams and queues: " (error) }
        }
        @if snapshot.taken.is_none() {
            p.muted { "reading…" }
        }
        section {
            h2 { "Streams" }
            @if snapshot.streams.is_empty() && snapshot.taken.is_some() {
                p.muted { "no streams" }
            } @else {
                table.figures data-table="streams" {
                    thead { tr {
                        th { "stream" } th.n { "length" } th.n { "lag" } th.n { "pending" }
                        th.n { "oldest pending" } th.n { "dead letters" } th.n { "delayed" }
                        th.n { "consumers" } th { "settled / s" } th { "depth" }
                    } }
                    tbody {
                        @for stream in &snapshot.streams {
                            (stream_row(stream))
                        }
                    }
                }
            }
        }
        @if !snapshot.queues.is_empty() {
            section {
                h2 { "Command queues" }
                table.figures data-table="queues" {
                    thead { tr {
                        th { "queue" }
                        @for status in Status::ALL { th.n { (status) } }
                    } }
                    tbody {
                        @for queue in &snapshot.queues {
                            tr data-queue=(queue.name) {
                                td { a href=(queue_url(&queue.name)) { (queue.name) } }
                                @match &queue.counts {
                                    Ok(counts) => {
                                        @for (status, count) in counts.iter() {
                                            td.n data-field=(status) {
                                                a href={(queue_url(&queue.name)) "?status=" (status)} { (count) }
                                            }
                                        }
                                    }
                                    Err(error) => td.failed colspan="5" { (error) }
                                }
                            }
                        }
                    }
                }
            }
        }
        @if let Some(taken) = snapshot.taken {
            p.muted.footnote {
                "read " (since(Some(taken))) " in " (ago(snapshot.took))
                ", one round for every viewer"
            }
        }
    }
}

fn stream_row(stream: &StreamState) -> Markup {
    html! {
        tr data-stream=(stream.name) {
            td { a href=(stream_url(&stream.name)) { (stream.name) } }
            @match &stream.overview {
                Ok(o) => { (figures(o)) }
                Err(error) => td.failed colspan="7" { (error) }
            }
            @let settled: Vec<f64> = stream.history.iter().map(|p| p.settled_per_s).collect();
            @let depth: Vec<f64> = stream.history.iter().map(|p| p.depth as f64).collect();
            td { (sparkline("messages settled per second", &settled, "/s")) }
            td { (sparkline("entries in the stream", &depth, "")) }
        }
    }
}

fn figures(o: &Overview) -> Markup {
    let lag: Option<u64> = o.groups.iter().map(|g| g.lag).sum();
    let pending: u64 = o.groups.iter().map(|g| g.pending).sum();
    let oldest = o.groups.iter().filter_map(|g| g.oldest_pending_age).max();
    let consumers: usize = o.groups.iter().map(|g| g.consumers.len()).sum();
    html! {
        td.n data-field="length" { (o.length) }
        td.n data-field="lag" { @if let Some(lag) = lag { (lag) } @else { "?" } }
        td.n data-field="pending" { (pending) }
        td.n data-field="oldest" { @if let Some(age) = oldest { (ago(age)) } @else { "-" } }
        td.n data-field="dead" {
            @if o.dead_letters > 0 {
                a.warn href=(dead_url(&o.stream)) { (o.dead_letters) }
            } @else { "0" }
        }
        td.n data-field="delayed" title=[o.delayed.next_due.map(|d| format!("next due in {}", ago(d)))] {
            (o.delayed.len)
        }
        td.n data-field="consumers" { (consumers) }
    }
}
