//! Timer structures that keep every event O(1) amortized.
//!
//! Each timed state (run deadline, re-poll, settle retry) waits a *constant* delay, so its due
//! times arrive in order and a FIFO is a priority queue. Entries are invalidated lazily: an entry
//! is live while its lease still carries the stamp it was pushed with. Lease expiry is tracked
//! per *epoch* (the send time of the fetch or renew that last confirmed a lease), so a heartbeat
//! that renews n leases moves n counters instead of re-sorting n deadlines.

use std::collections::VecDeque;
use std::time::Instant;

use crate::types::LeaseId;

/// A FIFO of `(due, lease, stamp)` entries with a count of the live ones.
#[derive(Debug, Default)]
pub(crate) struct Fifo {
    entries: VecDeque<(Instant, LeaseId, u32)>,
    pub(crate) live: usize,
}

impl Fifo {
    pub(crate) fn push(&mut self, due: Instant, lease: LeaseId, stamp: u32) {
        self.entries.push_back((due, lease, stamp));
        self.live += 1;
    }

    pub(crate) fn front(&self) -> Option<(Instant, LeaseId, u32)> {
        self.entries.front().copied()
    }

    pub(crate) fn pop_front(&mut self) {
        self.entries.pop_front();
    }

    /// Drops stale entries: from the front always, everywhere once they outnumber live ones.
    pub(crate) fn prune(&mut self, is_live: impl Fn(LeaseId, u32) -> bool) {
        while let Some(&(_, lease, stamp)) = self.entries.front() {
            if is_live(lease, stamp) {
                break;
            }
            self.entries.pop_front();
        }
        if self.entries.len() > 32 + 2 * self.live {
            self.entries
                .retain(|&(_, lease, stamp)| is_live(lease, stamp));
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
