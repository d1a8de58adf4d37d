//! The overview: every stream with its figures and recent charts (the shards of a sharded
//! queue, streams `{queue:i}`, as one row of the queue with their totals), every command queue
//! with its counts per status. Rendered from the latest snapshot alone: no read of its own.

use leasehold_commands::Status;
use leasehold_core::{group_streams, Discovered, Overview, QueueOverview};
use maud::{html, Markup};

use super::chart::sparkline;
use super::{ago, dead_url, queue_url, sharded_url, since, stream_url};
use crate::sampler::{Point, Snapshot, StreamState};

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
                        @for found in grouped(snapshot) {
                            @match found {
                                Discovered::Stream(name) => {
                                    @if let Some(stream) = snapshot.stream(&name) {
                                        (stream_row(stream))
                                    }
                                }
                                Discovered::Queue { queue, shards } => {
                                    (sharded_row(snapshot, &queue, &shards))
                                }
                                // A kind this page does not know yet: its stream, if one has
                                // its name.
                                other => {
                                    @if let Some(stream) = snapshot.stream(other.name()) {
                                        (stream_row(stream))
                                    }
                                }
                            }
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

/// The snapshot's streams, the shards of each sharded queue grouped: streams `{q:i}` under
/// `q` ([`group_streams`]), and a sharded command queue's streams `leasehold:{q:i}:stream`
/// under `leasehold:{q}:stream`.
pub(crate) fn grouped(snapshot: &Snapshot) -> Vec<Discovered> {
    use std::collections::BTreeMap;
    let mut commands: BTreeMap<String, Vec<(u16, String)>> = BTreeMap::new();
    let mut found: Vec<Discovered> = Vec::new();
    for d in group_streams(snapshot.streams.iter().map(|s| s.name.clone())) {
        match d {
            Discovered::Stream(name) => match command_shard(&name) {
                Some((queue, shard)) => commands
                    .entry(format!("leasehold:{{{queue}}}:stream"))
                    .or_default()
                    .push((shard, name)),
                None => found.push(Discovered::Stream(name)),
            },
            queue => found.push(queue),
        }
    }
    found.extend(commands.into_iter().map(|(queue, mut shards)| {
        shards.sort();
        Discovered::Queue { queue, shards }
    }));
    found.sort_by(|a, b| a.name().cmp(b.name()));
    found
}

/// The sharded queue whose shard stream `stream` is, as [`grouped`] names it.
pub(crate) fn queue_of_shard(stream: &str) -> Option<String> {
    if let Some((queue, _)) = leasehold_core::Shards::parse(stream) {
        return Some(queue.to_owned());
    }
    command_shard(stream).map(|(queue, _)| format!("leasehold:{{{queue}}}:stream"))
}

/// The command queue and shard of a sharded command queue's stream `leasehold:{q:i}:stream`.
fn command_shard(stream: &str) -> Option<(&str, u16)> {
    let tag = stream.strip_prefix("leasehold:")?.strip_suffix(":stream")?;
    leasehold_core::Shards::parse(tag)
}

/// The shards of sharded queue `queue` in `snapshot`: their totals (of those read), the states
/// of all, and the errors of those that could not be read.
pub(crate) fn sharded<'a>(
    snapshot: &'a Snapshot,
    queue: &str,
    shards: &[(u16, String)],
) -> (QueueOverview, Vec<(u16, &'a StreamState)>, Vec<String>) {
    let states: Vec<(u16, &StreamState)> = shards
        .iter()
        .filter_map(|(i, name)| Some((*i, snapshot.stream(name)?)))
        .collect();
    let read = states
        .iter()
        .filter_map(|(i, s)| Some((*i, s.overview.as_ref().ok()?.clone())))
        .collect();
    let errors = states
        .iter()
        .filter_map(|(_, s)| Some(format!("{}: {}", s.name, s.overview.as_ref().err()?)))
        .collect();
    (QueueOverview::from_shards(queue, read), states, errors)
}

/// The histories of `states` added up, aligned on their latest samples.
pub(crate) fn summed_history<'a>(states: impl IntoIterator<Item = &'a StreamState>) -> Vec<Point> {
    let mut sum: Vec<Point> = Vec::new();
    for state in states {
        let history = &state.history;
        if history.len() > sum.len() {
            let missing = history.len() - sum.len();
            let zero = Point {
                depth: 0,
                settled_per_s: 0.0,
                appended_per_s: 0.0,
            };
            sum.splice(0..0, std::iter::repeat_n(zero, missing));
        }
        let offset = sum.len() - history.len();
        for (total, point) in sum[offset..].iter_mut().zip(history) {
            total.depth += point.depth;
            total.settled_per_s += point.settled_per_s;
            total.appended_per_s += point.appended_per_s;
        }
    }
    sum
}

/// A sharded queue's row: its name (to its page, with its shard count) and its totals.
fn sharded_row(snapshot: &Snapshot, queue: &str, shards: &[(u16, String)]) -> Markup {
    let (total, states, errors) = sharded(snapshot, queue, shards);
    let history = summed_history(states.iter().map(|(_, s)| *s));
    let consumers: usize = total.groups.iter().map(|g| g.consumers).sum();
    html! {
        tr.sharded data-sharded=(queue) data-shards=(shards.len()) {
            td {
                a href=(sharded_url(queue)) { (queue) }
                " "
                span.muted data-field="shards" title=[(!errors.is_empty()).then(|| errors.join("; "))] {
                    "(" (shards.len()) " shards"
                    @if !errors.is_empty() { ", " (errors.len()) " unread" }
                    ")"
                }
            }
            td.n data-field="length" { (total.length) }
            td.n data-field="lag" { @if let Some(lag) = total.lag { (lag) } @else { "?" } }
            td.n data-field="pending" { (total.pending) }
            td.n data-field="oldest" {
                @if let Some(age) = total.oldest_pending_age { (ago(age)) } @else { "-" }
            }
            td.n data-field="dead" {
                @if total.dead_letters > 0 {
                    a.warn href=(sharded_url(queue)) { (total.dead_letters) }
                } @else { "0" }
            }
            td.n data-field="delayed" title=[total.delayed.next_due.map(|d| format!("next due in {}", ago(d)))] {
                (total.delayed.len)
            }
            td.n data-field="consumers" { (consumers) }
            @let settled: Vec<f64> = history.iter().map(|p| p.settled_per_s).collect();
            @let depth: Vec<f64> = history.iter().map(|p| p.depth as f64).collect();
            td { (sparkline("messages settled per second, all shards", &settled, "/s")) }
            td { (sparkline("entries in all shards", &depth, "")) }
        }
    }
}

/// The page of sharded queue `queue`: its totals, its groups over the shards, and a row per
/// shard linking to the shard's stream page. `None` when no shard of it is shown.
pub(crate) fn sharded_page(snapshot: &Snapshot, queue: &str) -> Option<Markup> {
    let shards = grouped(snapshot)
        .into_iter()
        .find_map(|found| match found {
            Discovered::Queue {
                queue: name,
                shards,
            } if name == queue => Some(shards),
            _ => None,
        })?;
    let (total, states, _) = sharded(snapshot, queue, &shards);
    Some(html! {
        dl.figures data-sharded=(queue) {
            dt { "shards" } dd data-field="shards" { (shards.len()) }
            dt { "length" } dd data-field="length" { (total.length) }
            dt { "lag" } dd data-field="lag" { @if let Some(lag) = total.lag { (lag) } @else { "?" } }
            dt { "pending" } dd data-field="pending" { (total.pending) }
            dt { "oldest pending" } dd data-field="oldest" {
                @if let Some(age) = total.oldest_pending_age { (ago(age)) } @else { "-" }
            }
            dt { "dead letters" } dd data-field="dead" { (total.dead_letters) }
            dt { "delayed" } dd data-field="delayed" {
                (total.delayed.len)
                @if let Some(next) = total.delayed.next_due { " (next due in " (ago(next)) ")" }
            }
        }
        section {
            h2 { "Groups" }
            table.figures data-table="groups" {
                thead { tr {
                    th { "group" } th.n { "shards" } th.n { "lag" } th.n { "pending" }
                    th.n { "consumers" } th.n { "oldest pending" }
                } }
                tbody {
                    @for g in &total.groups {
                        tr data-group=(g.name) {
                            td { (g.name) }
                            td.n data-field="shards" { (g.shards) }
                            td.n data-field="lag" { @if let Some(lag) = g.lag { (lag) } @else { "?" } }
                            td.n data-field="pending" { (g.pending) }
                            td.n data-field="consumers" { (g.consumers) }
                            td.n data-field="oldest" {
                                @if let Some(age) = g.oldest_pending_age { (ago(age)) } @else { "-" }
                            }
                        }
                    }
                }
            }
        }
        section {
            h2 { "Shards" }
            table.figures data-table="shards" {
                thead { tr {
                    th.n { "shard" } th { "stream" } th.n { "length" } th.n { "lag" }
                    th.n { "pending" } th.n { "oldest pending" } th.n { "dead letters" }
                    th.n { "delayed" } th.n { "consumers" } th { "settled / s" } th { "depth" }
                } }
                tbody {
                    @for (i, state) in &states {
                        tr data-shard=(i) data-stream=(state.name) {
                            td.n { (i) }
                            td { a href=(stream_url(&state.name)) { (state.name) } }
                            @match &state.overview {
                                Ok(o) => { (figures(o)) }
                                Err(error) => td.failed colspan="7" { (error) }
                            }
                            @let settled: Vec<f64> = state.history.iter().map(|p| p.settled_per_s).collect();
                            @let depth: Vec<f64> = state.history.iter().map(|p| p.depth as f64).collect();
                            td { (sparkline("messages settled per second", &settled, "/s")) }
                            td { (sparkline("entries in the stream", &depth, "")) }
                        }
                    }
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(name: &str) -> StreamState {
        StreamState {
            name: name.into(),
            overview: Err("unread".into()),
            history: Vec::new(),
        }
    }

    #[test]
    fn shards_and_command_queue_shards_are_grouped() {
        let snapshot = Snapshot {
            streams: [
                "{orders:1}",
                "{orders:0}",
                "leasehold:{jobs:1}:stream",
                "leasehold:{jobs:0}:stream",
                "leasehold:{vms}:stream",
                "plain",
            ]
            .map(state)
            .into(),
            ..Snapshot::default()
        };
        let names: Vec<(String, usize)> = grouped(&snapshot)
            .iter()
            .map(|d| match d {
                Discovered::Stream(name) => (name.clone(), 0),
                Discovered::Queue { queue, shards } => (queue.clone(), shards.len()),
                other => panic!("only streams and queues here: {other:?}"),
            })
            .collect();
        let expected = [
            ("leasehold:{jobs}:stream", 2),
            ("leasehold:{vms}:stream", 0),
            ("orders", 2),
            ("plain", 0),
        ];
        assert_eq!(names, expected.map(|(n, c)| (n.to_owned(), c)).to_vec());
        let page = sharded_page(&snapshot, "leasehold:{jobs}:stream")
            .expect("a page")
            .into_string();
        assert!(page.contains("data-shard=\"1\""), "{page}");
        assert!(sharded_page(&snapshot, "plain").is_none());
        assert_eq!(queue_of_shard("{orders:1}").as_deref(), Some("orders"));
        assert_eq!(
            queue_of_shard("leasehold:{jobs:0}:stream").as_deref(),
            Some("leasehold:{jobs}:stream")
        );
        assert_eq!(queue_of_shard("leasehold:{vms}:stream"), None);
    }
}
