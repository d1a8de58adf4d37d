//! What [`MemoryInspector`](crate::MemoryInspector) reads of the store and does to its dead
//! letters, each call one critical section. Listings start from a cursor with a `BTreeMap`
//! range, so a page costs what it scans, never a copy of the pending list or the dead letters.

use std::ops::Bound;
use std::time::{Duration, Instant, SystemTime};

use leasehold_core::{
    ConsumerOverview, DeadLetterEntry, DelayedSummary, GroupOverview, MessageId, NotDead, Overview,
    PendingEntry, PendingQuery,
};

use super::{Dead, Store};
use crate::id;

impl Store {
    /// The stream at `now`, its one group named `group`.
    pub(crate) fn overview(&self, now: Instant, stream: &str, group: &str) -> Overview {
        // Every entry up to the last delivered one is pending (only pending ones are ever
        // removed) and none after it is, so the first entry is the oldest pending one if it is
        // pending at all.
        let oldest_pending_age = self
            .entries
            .first_key_value()
            .filter(|(_, entry)| entry.pending.is_some())
            .map(|(_, entry)| now.saturating_duration_since(entry.appended));
        let consumers = self
            .consumers
            .iter()
            .map(|(name, row)| {
                ConsumerOverview::new(
                    name.to_string(),
                    row.pending,
                    now.saturating_duration_since(row.seen),
                )
            })
            .collect();
        Overview::new(stream)
            .with_length(self.entries.len() as u64)
            .with_groups(vec![GroupOverview::new(group)
                .with_lag(Some(self.last_seq - self.last_delivered))
                .with_pending(self.pending as u64)
                .with_delivered(Some(self.last_delivered))
                .with_oldest_pending_age(oldest_pending_age)
                .with_consumers(consumers)])
            .with_dead_letters(self.dead.len() as u64)
            .with_delayed(DelayedSummary::new(
                self.delayed_len() as u64,
                self.next_due()
                    .map(|due| due.saturating_duration_since(now)),
            ))
    }

    /// The first `query.page.limit` pending entries after sequence number `after` that the
    /// query's filters let through.
    pub(crate) fn pending_page(
        &self,
        now: Instant,
        after: u64,
        query: &PendingQuery,
    ) -> Vec<PendingEntry> {
        self.entries
            .range((Bound::Excluded(after), Bound::Unbounded))
            .take_while(|(&seq, _)| seq <= self.last_delivered)
            .filter_map(|(_, entry)| {
                let pending = entry.pending.as_ref()?;
                if query
                    .consumer
                    .as_deref()
                    .is_some_and(|name| name != &*pending.owner)
                {
                    return None;
                }
                let info = self.info(now, pending);
                if query.min_idle.is_some_and(|min| info.idle < min) {
                    return None;
                }
                Some(PendingEntry::new(
                    entry.id.clone(),
                    info.owner,
                    info.idle,
                    info.delivery_count,
                ))
            })
            .take(query.page.limit)
            .collect()
    }

    /// Up to `limit` dead letters after sequence number `after`. `wall` is the system time at
    /// `now`.
    pub(crate) fn dead_page(
        &self,
        (now, wall): (Instant, SystemTime),
        after: u64,
        limit: usize,
        payloads: bool,
    ) -> Vec<DeadLetterEntry> {
        self.dead
            .range((Bound::Excluded(after), Bound::Unbounded))
            .take(limit)
            .map(|(_, dead)| dead.entry(now, wall, payloads))
            .collect()
    }

    /// Dead letter `seq`, with its payload.
    pub(crate) fn dead_entry(
        &self,
        (now, wall): (Instant, SystemTime),
        seq: u64,
    ) -> Option<DeadLetterEntry> {
        self.dead.get(&seq).map(|dead| dead.entry(now, wall, true))
    }

    /// Each of `ids` that is not a dead letter, and what it is instead.
    pub(crate) fn not_dead(&self, ids: &[MessageId]) -> Vec<(MessageId, NotDead)> {
        ids.iter()
            .filter(|id| id::parse(id.as_str()).is_none_or(|seq| !self.dead.contains_key(&seq)))
            .map(|id| {
                let what = if self.contains(id.as_str()) {
                    NotDead::Live
                } else {
                    NotDead::Unknown
                };
                (id.clone(), what)
            })
            .collect()
    }

    /// The dead letters (sequence numbers) dead-lettered at least `age` before `now`, every one
    /// with `None`; oldest first.
    pub(crate) fn dead_since(&self, now: Instant, age: Option<Duration>) -> Vec<u64> {
        self.dead
            .iter()
            .filter(|(_, dead)| age.is_none_or(|age| now.saturating_duration_since(dead.at) >= age))
            .map(|(&seq, _)| seq)
            .collect()
    }

    /// Puts dead letter `seq` back at `now`: appended to the stream as a fresh entry with its
    /// payload. Its new id, or `None` if it is gone.
    pub(crate) fn requeue(&mut self, now: Instant, seq: u64) -> Option<MessageId> {
        let dead = self.dead.remove(&seq)?;
        Some(self.publish(now, dead.letter.payload))
    }

    /// Deletes dead letter `seq`; whether it was there.
    pub(crate) fn purge(&mut self, seq: u64) -> bool {
        self.dead.remove(&seq).is_some()
    }
}

impl Dead {
    /// As the SPI lists it: dead-lettered at the wall time `wall` less its age on the stream's
    /// clock at `now`.
    fn entry(&self, now: Instant, wall: SystemTime, payload: bool) -> DeadLetterEntry {
        let letter = &self.letter;
        DeadLetterEntry::new(
            letter.id.clone(),
            letter.original_id.clone(),
            letter.reason.clone(),
            letter.delivery_count,
        )
        .with_at(wall.checked_sub(now.saturating_duration_since(self.at)))
        .with_payload(payload.then(|| letter.payload.to_vec()))
    }
}
