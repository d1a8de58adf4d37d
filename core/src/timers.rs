//! Timer structures that keep every event O(1) amortized.
//!
//! Most timed states (run deadline, settle retry) wait a *constant* delay, so their due times
//! arrive in order and a FIFO is a priority queue; re-polls, whose first delay is spread, use a
//! heap. Entries are invalidated lazily: an entry
//! is live while its lease still carries the stamp it was pushed with. Lease expiry is tracked
//! per *epoch* (the send time of the fetch or renew that last confirmed a lease), so a heartbeat
//! that renews n leases moves n counters instead of re-sorting n deadlines.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Instant;

use crate::types::LeaseId;

type Entry = (Instant, LeaseId, u32);

/// Timer entries `(due, lease, stamp)` with a count of the live ones: a FIFO for timers whose
/// delay is constant (their due times arrive in order), a min-heap for the others.
#[derive(Debug)]
pub(crate) struct Timers {
    entries: Entries,
    pub(crate) live: usize,
}

#[derive(Debug)]
enum Entries {
    Fifo(VecDeque<Entry>),
    Heap(BinaryHeap<Reverse<Entry>>),
}

impl Timers {
    /// For timers pushed in due order: O(1) per operation.
    pub(crate) fn fifo() -> Self {
        Self {
            entries: Entries::Fifo(VecDeque::new()),
            live: 0,
        }
    }

    /// For timers pushed in any order: O(log n) per operation.
    pub(crate) fn heap() -> Self {
        Self {
            entries: Entries::Heap(BinaryHeap::new()),
            live: 0,
        }
    }

    pub(crate) fn push(&mut self, due: Instant, lease: LeaseId, stamp: u32) {
        match &mut self.entries {
            Entries::Fifo(q) => q.push_back((due, lease, stamp)),
            Entries::Heap(h) => h.push(Reverse((due, lease, stamp))),
        }
        self.live += 1;
    }

    /// The earliest entry (live or stale).
    pub(crate) fn front(&self) -> Option<Entry> {
        match &self.entries {
            Entries::Fifo(q) => q.front().copied(),
            Entries::Heap(h) => h.peek().map(|Reverse(e)| *e),
        }
    }

    pub(crate) fn pop_front(&mut self) {
        match &mut self.entries {
            Entries::Fifo(q) => {
                q.pop_front();
            }
            Entries::Heap(h) => {
                h.pop();
            }
        }
    }

    fn len(&self) -> usize {
        match &self.entries {
            Entries::Fifo(q) => q.len(),
            Entries::Heap(h) => h.len(),
        }
    }

    /// Drops stale entries: from the front always, everywhere once they outnumber live ones.
    pub(crate) fn prune(&mut self, is_live: impl Fn(LeaseId, u32) -> bool) {
        if self.len() == self.live {
            return; // nothing stale
        }
        while let Some((_, lease, stamp)) = self.front() {
            if is_live(lease, stamp) {
                break;
            }
            self.pop_front();
        }
        if self.len() > 32 + 2 * self.live {
            match &mut self.entries {
                Entries::Fifo(q) => q.retain(|&(_, lease, stamp)| is_live(lease, stamp)),
                Entries::Heap(h) => h.retain(|Reverse((_, lease, stamp))| is_live(*lease, *stamp)),
            }
        }
    }
}

#[derive(Debug)]
struct Epoch {
    sent_at: Instant,
    live: usize,
    /// An outstanding fetch or renew will still add leases to this epoch.
    pinned: bool,
}

/// Epochs in send order, each counting the held leases it last confirmed.
#[derive(Debug, Default)]
pub(crate) struct Epochs {
    base: u64,
    entries: VecDeque<Epoch>,
}

impl Epochs {
    /// Opens a pinned epoch for an operation sent at `sent_at` (not before the previous one).
    pub(crate) fn open(&mut self, sent_at: Instant) -> u64 {
        self.entries.push_back(Epoch {
            sent_at,
            live: 0,
            pinned: true,
        });
        self.base + self.entries.len() as u64 - 1
    }

    fn get_mut(&mut self, epoch: u64) -> &mut Epoch {
        &mut self.entries[(epoch - self.base) as usize]
    }

    pub(crate) fn unpin(&mut self, epoch: u64) {
        self.get_mut(epoch).pinned = false;
        self.prune();
    }

    pub(crate) fn add(&mut self, epoch: u64) {
        self.get_mut(epoch).live += 1;
    }

    pub(crate) fn remove(&mut self, epoch: u64) {
        self.get_mut(epoch).live -= 1;
    }

    pub(crate) fn sent_at(&self, epoch: u64) -> Instant {
        self.entries[(epoch - self.base) as usize].sent_at
    }

    pub(crate) fn prune(&mut self) {
        while let Some(front) = self.entries.front() {
            if front.live > 0 || front.pinned {
                break;
            }
            self.entries.pop_front();
            self.base += 1;
        }
    }

    /// The oldest epoch that still confirms a held lease, with its send time.
    pub(crate) fn oldest_live(&self) -> Option<(u64, Instant)> {
        self.entries
            .iter()
            .enumerate()
            .find(|(_, e)| e.live > 0)
            .map(|(i, e)| (self.base + i as u64, e.sent_at))
    }

    /// The newest epoch sent at or before `cutoff`, if one holds leases at or before it.
    pub(crate) fn newest_live_sent_by(&self, cutoff: Instant) -> Option<u64> {
        let mut found = None;
        let mut any_live = false;
        for (i, e) in self.entries.iter().enumerate() {
            if e.sent_at > cutoff {
                break;
            }
            any_live |= e.live > 0;
            found = Some(self.base + i as u64);
        }
        found.filter(|_| any_live)
    }
}

/// splitmix64: a tiny, well-distributed generator; all the engine needs for jitter.
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// A uniform float in `[0, 1)`.
    pub(crate) fn next_f64(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}
