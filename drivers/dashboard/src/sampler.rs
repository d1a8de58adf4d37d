//! The sampler: one inspector round per refresh interval, whoever is looking. Every viewer
//! reads the latest [`Snapshot`], so a hundred open tabs cost Redis what one does; the
//! history behind the overview's charts is kept here, in memory, from these rounds.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use leasehold_commands::StatusCounts;
use leasehold_core::{Inspector, Overview};
use tokio::sync::watch;

use crate::source::{Catalog, Source};
use crate::state::Queues;
use crate::Options;

/// What the dashboard knew at the end of its latest round.
#[derive(Debug, Clone, Default)]
pub(crate) struct Snapshot {
    /// When the round ended (`None`: no round yet).
    pub taken: Option<SystemTime>,
    /// How long the round took.
    pub took: Duration,
    /// Why the list of streams and queues could not be read, if it could not.
    pub catalog_error: Option<String>,
    /// Each stream, by name.
    pub streams: Vec<StreamState>,
    /// Each command queue, by name.
    pub queues: Vec<QueueState>,
}

impl Snapshot {
    pub fn stream(&self, name: &str) -> Option<&StreamState> {
        self.streams.iter().find(|s| s.name == name)
    }

    pub fn queue(&self, name: &str) -> Option<&QueueState> {
        self.queues.iter().find(|q| q.name == name)
    }
}

/// One stream: its overview (or why it could not be read), and its recent history.
#[derive(Debug, Clone)]
pub(crate) struct StreamState {
    pub name: String,
    pub overview: Result<Overview, String>,
    pub history: Vec<Point>,
}

/// One command queue: its counts per status (or why they could not be read).
#[derive(Debug, Clone)]
pub(crate) struct QueueState {
    pub name: String,
    pub counts: Result<StatusCounts, String>,
}

/// One sample of a stream's history.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Point {
    /// Entries in the stream.
    pub depth: u64,
    /// Messages settled (acked or dead-lettered) per second since the sample before.
    pub settled_per_s: f64,
    /// Messages appended per second since the sample before.
    pub appended_per_s: f64,
}

/// The counters a rate is computed from.
#[derive(Debug, Clone, Copy)]
struct Counters {
    at: Instant,
    settled: Option<u64>,
    appended: Option<u64>,
}

impl Counters {
    fn of(overview: &Overview, at: Instant) -> Self {
        let delivered: Option<Vec<(u64, u64, Option<u64>)>> = overview
            .groups
            .iter()
            .map(|g| g.delivered.map(|d| (d, g.pending, g.lag)))
            .collect();
        let delivered = delivered.filter(|groups| !groups.is_empty());
        Self {
            at,
            // Settled by any group: read minus still pending.
            settled: delivered
                .as_ref()
                .map(|groups| groups.iter().map(|(d, p, _)| d.saturating_sub(*p)).sum()),
            // Appended: read plus not yet read, by the group that knows it.
            appended: delivered.as_ref().and_then(|groups| {
                groups
                    .iter()
                    .filter_map(|(d, _, lag)| lag.map(|lag| d + lag))
                    .max()
            }),
        }
    }

    /// Rates from `before` to `self`; a counter that went back (a recreated stream) is 0.
    fn rates(&self, before: &Self) -> (f64, f64) {
        let secs = self.at.duration_since(before.at).as_secs_f64();
        let rate = |now: Option<u64>, then: Option<u64>| match (now, then) {
            (Some(now), Some(then)) if secs > 0.0 => now.saturating_sub(then) as f64 / secs,
            _ => 0.0,
        };
        (
            rate(self.settled, before.settled),
            rate(self.appended, before.appended),
        )
    }
}

/// Reads every stream and queue once per round and keeps their history.
pub(crate) struct Sampler<S: Source> {
    source: Arc<S>,
    queues: Arc<Queues<S>>,
    options: Options,
    catalog: Catalog,
    catalog_error: Option<String>,
    discovered: Option<Instant>,
    counters: BTreeMap<String, Counters>,
    history: BTreeMap<String, VecDeque<Point>>,
}

impl<S: Source> Sampler<S> {
    pub fn new(source: Arc<S>, queues: Arc<Queues<S>>, options: Options) -> Self {
        Self {
            source,
            queues,
            options,
            catalog: Catalog::default(),
            catalog_error: None,
            discovered: None,
            counters: BTreeMap::new(),
            history: BTreeMap::new(),
        }
    }

    /// Rounds until every receiver of `snapshots` is gone, one per refresh interval.
    pub async fn run(mut self, snapshots: watch::Sender<Arc<Snapshot>>) {
        let mut ticks = tokio::time::interval(self.options.refresh);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let snapshot = self.round(Instant::now()).await;
            if snapshots.send(Arc::new(snapshot)).is_err() {
                return;
            }
        }
    }

    /// One round at `now`: the catalog (if due), each stream's overview, each queue's counts.
    pub async fn round(&mut self, now: Instant) -> Snapshot {
        let due = self
            .discovered
            .is_none_or(|at| now.duration_since(at) >= self.options.discover_every);
        if due {
            match self.source.catalog().await {
                Ok(catalog) => {
                    self.catalog = catalog;
                    self.catalog_error = None;
                    self.discovered = Some(now);
                }
                Err(error) => self.catalog_error = Some(error.to_string()),
            }
        }
        let names = self.catalog.streams.clone();
        let mut streams = Vec::with_capacity(names.len());
        for name in &names {
            let overview = self.source.inspector().overview(name).await;
            if let Ok(overview) = &overview {
                self.record(name, overview, now);
            }
            let history = self
                .history
                .get(name)
                .map(|h| h.iter().copied().collect())
                .unwrap_or_default();
            streams.push(StreamState {
                name: name.clone(),
                overview: overview.map_err(|e| e.to_string()),
                history,
            });
        }
        // Streams that left the catalog take their history with them.
        self.history
            .retain(|name, _| self.catalog.streams.contains(name));
        self.counters
            .retain(|name, _| self.catalog.streams.contains(name));
        let mut queues = Vec::with_capacity(self.catalog.queues.len());
        for name in &self.catalog.queues {
            let counts = match self.queues.get(&self.source, name).await {
                Ok(queue) => queue.counts().await.map_err(|e| e.to_string()),
                Err(error) => Err(error),
            };
            queues.push(QueueState {
                name: name.clone(),
                counts,
            });
        }
        Snapshot {
            taken: Some(SystemTime::now()),
            took: now.elapsed(),
            catalog_error: self.catalog_error.clone(),
            streams,
            queues,
        }
    }

    fn record(&mut self, name: &str, overview: &Overview, now: Instant) {
        let counters = Counters::of(overview, now);
        let (settled_per_s, appended_per_s) = self
            .counters
            .insert(name.to_owned(), counters)
            .map_or((0.0, 0.0), |before| counters.rates(&before));
        let history = self.history.entry(name.to_owned()).or_default();
        if history.len() == self.options.samples() {
            history.pop_front();
        }
        history.push_back(Point {
            depth: overview.length,
            settled_per_s,
            appended_per_s,
        });
    }
}

#[cfg(test)]
mod tests {
    use leasehold_core::GroupOverview;

    use super::*;

    fn overview(length: u64, delivered: u64, pending: u64, lag: u64) -> Overview {
        Overview::new("s")
            .with_length(length)
            .with_groups(vec![GroupOverview::new("g")
                .with_lag(Some(lag))
                .with_pending(pending)
                .with_delivered(Some(delivered))])
    }

    #[test]
    fn rates_come_from_the_counters_and_never_go_negative() {
        let t0 = Instant::now();
        let before = Counters::of(&overview(100, 50, 10, 50), t0);
        // 2 s later: 40 more read, 5 fewer pending (45 settled), 10 more appended.
        let after = Counters::of(&overview(65, 90, 5, 20), t0 + Duration::from_secs(2));
        assert_eq!(after.rates(&before), (22.5, 5.0));
        // A recreated stream: counters restart, rates read 0, not a huge negative.
        let reset = Counters::of(&overview(1, 1, 0, 0), t0 + Duration::from_secs(4));
        assert_eq!(reset.rates(&after), (0.0, 0.0));
        // No groups: nothing to count from.
        let mut lone = overview(3, 0, 0, 0);
        lone.groups.clear();
        let lone = Counters::of(&lone, t0);
        assert_eq!((lone.settled, lone.appended), (None, None));
    }
}
