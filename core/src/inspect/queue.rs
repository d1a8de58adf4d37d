//! A sharded queue's view: its streams grouped by shard name, and their overviews summed.

use std::time::Duration;

use super::{InspectError, Inspector, Overview};
use crate::publish::DelayedSummary;

/// What an inspector found in a listing of streams: a plain stream, or the shards of a sharded
/// queue (streams named `{queue:i}`, see [`Shards::parse`](crate::Shards::parse)), grouped.
///
/// More kinds may be found later: a match on it outside this crate needs a `_` arm (every kind
/// has a [`name`](Self::name)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Discovered {
    /// A stream that is no shard.
    Stream(String),
    /// A sharded queue: its name and the shards found, (index, stream) by index.
    Queue {
        /// The queue's name.
        queue: String,
        /// The shards found, ascending (a shard not created yet is missing).
        shards: Vec<(u16, String)>,
    },
}

impl Discovered {
    /// The stream's or the queue's name.
    pub fn name(&self) -> &str {
        match self {
            Self::Stream(name) => name,
            Self::Queue { queue, .. } => queue,
        }
    }
}

/// Groups `streams` into plain streams and sharded queues, sorted by name (a queue under its
/// name, its shards by index).
pub fn group_streams(streams: impl IntoIterator<Item = String>) -> Vec<Discovered> {
    use std::collections::BTreeMap;
    let mut queues: BTreeMap<String, Vec<(u16, String)>> = BTreeMap::new();
    let mut found = Vec::new();
    for stream in streams {
        match crate::Shards::parse(&stream) {
            Some((queue, shard)) => queues
                .entry(queue.to_owned())
                .or_default()
                .push((shard, stream)),
            None => found.push(Discovered::Stream(stream)),
        }
    }
    found.extend(queues.into_iter().map(|(queue, mut shards)| {
        shards.sort();
        Discovered::Queue { queue, shards }
    }));
    found.sort_by(|a, b| a.name().cmp(b.name()));
    found
}

/// One consumer group over a sharded queue's shards: the group of that name on each shard,
/// summed.
///
/// Built with [`QueueGroupOverview::new`] and its `with_*` methods; it may grow counters, so it
/// cannot be built field by field outside this crate.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueGroupOverview {
    /// The group's name.
    pub name: String,
    /// Entries not yet delivered, over the shards that have the group (`None` when a shard
    /// cannot tell).
    pub lag: Option<u64>,
    /// Entries delivered and not yet acknowledged, over its shards.
    pub pending: u64,
    /// Age of the oldest pending entry of any shard.
    pub oldest_pending_age: Option<Duration>,
    /// Distinct consumer names over its shards.
    pub consumers: usize,
    /// Shards that have this group.
    pub shards: usize,
}

impl QueueGroupOverview {
    /// Group `name`: on no shard yet, nothing pending, no consumers, and its lag unknown
    /// (`None`) until set.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            lag: None,
            pending: 0,
            oldest_pending_age: None,
            consumers: 0,
            shards: 0,
        }
    }

    /// The same, with this lag over its shards (`None`: a shard cannot tell).
    #[must_use]
    pub fn with_lag(mut self, lag: impl Into<Option<u64>>) -> Self {
        self.lag = lag.into();
        self
    }

    /// The same, with `pending` entries delivered and not yet acknowledged.
    #[must_use]
    pub fn with_pending(mut self, pending: u64) -> Self {
        self.pending = pending;
        self
    }

    /// The same, with its oldest pending entry this old (`None`: nothing pending).
    #[must_use]
    pub fn with_oldest_pending_age(mut self, age: impl Into<Option<Duration>>) -> Self {
        self.oldest_pending_age = age.into();
        self
    }

    /// The same, with `consumers` distinct consumer names.
    #[must_use]
    pub fn with_consumers(mut self, consumers: usize) -> Self {
        self.consumers = consumers;
        self
    }

    /// The same, on `shards` shards.
    #[must_use]
    pub fn with_shards(mut self, shards: usize) -> Self {
        self.shards = shards;
        self
    }
}

/// A sharded queue: totals over its shards, and each shard's own overview.
///
/// Built by [`QueueOverview::from_shards`], or with [`QueueOverview::new`] and its `with_*`
/// methods; it may grow counters, so it cannot be built field by field outside this crate.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueOverview {
    /// The queue's name.
    pub queue: String,
    /// Entries in all shards' streams.
    pub length: u64,
    /// Entries delivered and not yet acknowledged, over every group of every shard.
    pub pending: u64,
    /// Entries not yet delivered, over every group of every shard (`None` when a shard cannot
    /// tell).
    pub lag: Option<u64>,
    /// Dead letters of all shards.
    pub dead_letters: u64,
    /// Delayed messages of all shards: how many, and the soonest due.
    pub delayed: DelayedSummary,
    /// Age of the oldest pending entry of any shard.
    pub oldest_pending_age: Option<Duration>,
    /// Each group, summed over the shards that have it, by name.
    pub groups: Vec<QueueGroupOverview>,
    /// Each shard found: its index and overview, ascending.
    pub shards: Vec<(u16, Overview)>,
}

impl QueueOverview {
    /// Queue `queue`: no shards, empty, and its lag unknown (`None`) until set.
    pub fn new(queue: impl Into<String>) -> Self {
        Self {
            queue: queue.into(),
            length: 0,
            pending: 0,
            lag: None,
            dead_letters: 0,
            delayed: DelayedSummary::default(),
            oldest_pending_age: None,
            groups: Vec::new(),
            shards: Vec::new(),
        }
    }

    /// The same, with `length` entries in all shards' streams.
    #[must_use]
    pub fn with_length(mut self, length: u64) -> Self {
        self.length = length;
        self
    }

    /// The same, with `pending` entries delivered and not yet acknowledged.
    #[must_use]
    pub fn with_pending(mut self, pending: u64) -> Self {
        self.pending = pending;
        self
    }

    /// The same, with this lag over every group of every shard (`None`: a shard cannot tell).
    #[must_use]
    pub fn with_lag(mut self, lag: impl Into<Option<u64>>) -> Self {
        self.lag = lag.into();
        self
    }

    /// The same, with `dead_letters` dead letters over all shards.
    #[must_use]
    pub fn with_dead_letters(mut self, dead_letters: u64) -> Self {
        self.dead_letters = dead_letters;
        self
    }

    /// The same, with these delayed messages over all shards.
    #[must_use]
    pub fn with_delayed(mut self, delayed: DelayedSummary) -> Self {
        self.delayed = delayed;
        self
    }

    /// The same, with its oldest pending entry this old (`None`: nothing pending).
    #[must_use]
    pub fn with_oldest_pending_age(mut self, age: impl Into<Option<Duration>>) -> Self {
        self.oldest_pending_age = age.into();
        self
    }

    /// The same, with these groups, summed over their shards.
    #[must_use]
    pub fn with_groups(mut self, groups: Vec<QueueGroupOverview>) -> Self {
        self.groups = groups;
        self
    }

    /// The same, with these shards (index and overview of each).
    #[must_use]
    pub fn with_shards(mut self, shards: Vec<(u16, Overview)>) -> Self {
        self.shards = shards;
        self
    }

    /// The totals of `shards` (index and overview of each shard found) of queue `queue`.
    pub fn from_shards(queue: impl Into<String>, mut shards: Vec<(u16, Overview)>) -> Self {
        use std::collections::{BTreeMap, BTreeSet};
        shards.sort_by_key(|(i, _)| *i);
        let mut groups: BTreeMap<&str, (QueueGroupOverview, BTreeSet<&str>)> = BTreeMap::new();
        let mut total = Self::new(queue).with_lag(Some(0));
        for (_, o) in &shards {
            total.length += o.length;
            total.dead_letters += o.dead_letters;
            total.delayed.len += o.delayed.len;
            total.delayed.next_due = min_some(total.delayed.next_due, o.delayed.next_due);
            for g in &o.groups {
                total.pending += g.pending;
                total.lag = total.lag.zip(g.lag).map(|(a, b)| a + b);
                total.oldest_pending_age = total.oldest_pending_age.max(g.oldest_pending_age);
                let (sum, consumers) = groups.entry(&g.name).or_insert_with(|| {
                    let empty = QueueGroupOverview::new(g.name.clone()).with_lag(Some(0));
                    (empty, BTreeSet::new())
                });
                sum.lag = sum.lag.zip(g.lag).map(|(a, b)| a + b);
                sum.pending += g.pending;
                sum.oldest_pending_age = sum.oldest_pending_age.max(g.oldest_pending_age);
                sum.shards += 1;
                consumers.extend(g.consumers.iter().map(|c| c.name.as_str()));
            }
        }
        total.groups = groups
            .into_values()
            .map(|(mut sum, consumers)| {
                sum.consumers = consumers.len();
                sum
            })
            .collect();
        total.shards = shards;
        total
    }
}

fn min_some(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The overview of the sharded queue whose shards are `shards` (index and stream, as
/// [`group_streams`] finds them): each shard's [`Inspector::overview`], one after the other,
/// and their totals. A shard deleted meanwhile is left out.
///
/// # Errors
///
/// Any other failure of a shard's overview.
pub async fn queue_overview<I: Inspector + ?Sized>(
    inspector: &I,
    queue: &str,
    shards: &[(u16, String)],
) -> Result<QueueOverview, InspectError> {
    let mut found = Vec::with_capacity(shards.len());
    for (index, stream) in shards {
        match inspector.overview(stream).await {
            Ok(overview) => found.push((*index, overview)),
            Err(InspectError::NoSuchStream(_)) => {}
            Err(error) => return Err(error),
        }
    }
    Ok(QueueOverview::from_shards(queue, found))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inspect::{ConsumerOverview, GroupOverview};

    fn overview(stream: &str, length: u64, groups: Vec<GroupOverview>) -> Overview {
        Overview::new(stream)
            .with_length(length)
            .with_groups(groups)
            .with_dead_letters(length / 10)
            .with_delayed(DelayedSummary::new(1, Some(Duration::from_secs(length))))
    }

    fn group(
        name: &str,
        pending: u64,
        lag: Option<u64>,
        oldest: u64,
        who: &[&str],
    ) -> GroupOverview {
        GroupOverview::new(name)
            .with_lag(lag)
            .with_pending(pending)
            .with_oldest_pending_age(Duration::from_secs(oldest))
            .with_consumers(
                who.iter()
                    .map(|name| ConsumerOverview::new(*name, 1, Duration::ZERO))
                    .collect(),
            )
    }

    #[test]
    fn streams_group_into_queues_by_shard_name() {
        let found = group_streams(
            [
                "{orders:1}",
                "plain",
                "{orders:0}",
                "{orders:10}",
                "{jobs:0}",
                "{bad:01}",
            ]
            .map(String::from),
        );
        let queue = |queue: &str, shards: &[(u16, &str)]| Discovered::Queue {
            queue: queue.into(),
            shards: shards.iter().map(|&(i, s)| (i, s.to_owned())).collect(),
        };
        assert_eq!(
            found,
            [
                queue("jobs", &[(0, "{jobs:0}")]),
                queue(
                    "orders",
                    &[(0, "{orders:0}"), (1, "{orders:1}"), (10, "{orders:10}")]
                ),
                Discovered::Stream("plain".into()),
                Discovered::Stream("{bad:01}".into()),
            ]
        );
        assert_eq!(found[1].name(), "orders");
    }

    #[test]
    fn a_queue_overview_sums_its_shards() {
        let shards = vec![
            (
                1,
                overview("{q:1}", 30, vec![group("w", 2, Some(5), 9, &["a", "b"])]),
            ),
            (
                0,
                overview(
                    "{q:0}",
                    20,
                    vec![
                        group("w", 3, Some(1), 4, &["a"]),
                        group("x", 1, None, 1, &[]),
                    ],
                ),
            ),
        ];
        let q = QueueOverview::from_shards("q", shards);
        assert_eq!((q.queue.as_str(), q.length, q.pending), ("q", 50, 6));
        assert_eq!(q.lag, None, "a shard's group cannot tell");
        assert_eq!(q.dead_letters, 5);
        assert_eq!(q.delayed.len, 2);
        assert_eq!(q.delayed.next_due, Some(Duration::from_secs(20)));
        assert_eq!(q.oldest_pending_age, Some(Duration::from_secs(9)));
        assert_eq!(q.shards.iter().map(|(i, _)| *i).collect::<Vec<_>>(), [0, 1]);
        let w = &q.groups[0];
        assert_eq!(
            (w.name.as_str(), w.pending, w.lag, w.consumers, w.shards),
            ("w", 5, Some(6), 2, 2)
        );
        assert_eq!((q.groups[1].name.as_str(), q.groups[1].lag), ("x", None));
        let empty = QueueOverview::from_shards("none", Vec::new());
        assert_eq!(
            (empty.length, empty.lag, empty.oldest_pending_age),
            (0, Some(0), None)
        );
    }
}
