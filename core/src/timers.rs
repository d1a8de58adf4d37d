//! Engine time and the timer structures that keep every event O(1) amortized.
//!
//! Inside the engine an instant is a [`Tick`]: nanoseconds since the engine's base `Instant`.
//! `Instant` is nanosecond-grained, so converting at the edges is exact, and the arithmetic in
//! between is plain integer arithmetic.
//!
//! Most timed states (run deadline, settle retry) wait a *constant* delay, so their due times
//! arrive in order and a FIFO is a priority queue; re-polls, whose first delay is spread, use a
//! heap. Entries are invalidated lazily: an entry is live while its slot still carries the stamp
//! it was pushed with (stamps only grow, also across the leases a slot holds over time). Lease
//! expiry is tracked per *epoch* (the send time of the fetch or renew that last confirmed a
//! lease), so a heartbeat that renews n leases moves n counters instead of re-sorting n
//! deadlines.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

/// An engine instant: nanoseconds since the engine's base `Instant`.
pub(crate) type Tick = u64;

/// A duration in ticks. Durations the engine adds are at most a year (validated), far below the
/// 584 years a `u64` of nanoseconds holds; anything longer saturates.
pub(crate) fn ticks(duration: Duration) -> Tick {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// A timer entry: due at `due`, for the lease in `slot` while the slot's stamp is `stamp`.
/// Ordered by due time, then slot (the order in which equal-time re-polls are taken).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Entry {
    pub(crate) due: Tick,
    pub(crate) slot: u32,
    pub(crate) stamp: u32,
}

/// The queue behind [`Timers`]: a FIFO or a min-heap.
pub(crate) trait Queue: Default {
    fn push(&mut self, entry: Entry);
    fn front(&self) -> Option<Entry>;
    fn pop_front(&mut self);
    fn len(&self) -> usize;
    fn retain(&mut self, keep: impl FnMut(&Entry) -> bool);
    fn clear(&mut self);
    /// Drops the newest entry if it is `entry` (a FIFO can; a heap leaves it to pruning).
    fn drop_newest(&mut self, entry: Entry);
}

/// For timers pushed in due order: O(1) per operation.
pub(crate) type Fifo = VecDeque<Entry>;
/// For timers pushed in any order: O(log n) per operation.
pub(crate) type Heap = BinaryHeap<Reverse<Entry>>;

impl Queue for Fifo {
    #[inline]
    fn push(&mut self, entry: Entry) {
        self.push_back(entry);
    }
    #[inline]
    fn front(&self) -> Option<Entry> {
        VecDeque::front(self).copied()
    }
    #[inline]
    fn pop_front(&mut self) {
        VecDeque::pop_front(self);
    }
    #[inline]
    fn len(&self) -> usize {
        VecDeque::len(self)
    }
    fn retain(&mut self, keep: impl FnMut(&Entry) -> bool) {
        VecDeque::retain(self, keep);
    }
    fn clear(&mut self) {
        VecDeque::clear(self);
    }
    #[inline]
    fn drop_newest(&mut self, entry: Entry) {
        if self
            .back()
            .is_some_and(|back| back.slot == entry.slot && back.stamp == entry.stamp)
        {
            self.pop_back();
        }
    }
}

impl Queue for Heap {
    #[inline]
    fn push(&mut self, entry: Entry) {
        BinaryHeap::push(self, Reverse(entry));
    }
    #[inline]
    fn front(&self) -> Option<Entry> {
        self.peek().map(|Reverse(e)| *e)
    }
    #[inline]
    fn pop_front(&mut self) {
        self.pop();
    }
    #[inline]
    fn len(&self) -> usize {
        BinaryHeap::len(self)
    }
    fn retain(&mut self, mut keep: impl FnMut(&Entry) -> bool) {
        BinaryHeap::retain(self, |Reverse(e)| keep(e));
    }
    fn clear(&mut self) {
        BinaryHeap::clear(self);
    }
    #[inline]
    fn drop_newest(&mut self, _: Entry) {}
}

/// Timer entries with a count of the live ones.
#[derive(Debug, Default)]
pub(crate) struct Timers<Q> {
    entries: Q,
    pub(crate) live: usize,
}

impl<Q: Queue> Timers<Q> {
    #[inline]
    pub(crate) fn push(&mut self, due: Tick, slot: u32, stamp: u32) {
        self.entries.push(Entry { due, slot, stamp });
        self.live += 1;
    }

    /// The earliest entry (live or stale).
    #[inline]
    pub(crate) fn front(&self) -> Option<Entry> {
        self.entries.front()
    }

    /// The earliest entry if it is due at `now`, popped.
    #[inline]
    pub(crate) fn pop_due(&mut self, now: Tick) -> Option<Entry> {
        let entry = self.entries.front().filter(|e| e.due <= now)?;
        self.entries.pop_front();
        Some(entry)
    }

    #[inline]
    pub(crate) fn pop_front(&mut self) {
        self.entries.pop_front();
    }

    /// The lease in `slot` left the state it pushed an entry for with `stamp`: that entry is
    /// stale. The newest entry of a FIFO is dropped at once (an invocation that ends before the
    /// next one starts leaves nothing to prune).
    #[inline]
    pub(crate) fn forget(&mut self, slot: u32, stamp: u32) {
        self.live -= 1;
        self.entries.drop_newest(Entry {
            due: 0,
            slot,
            stamp,
        });
    }

    /// Whether some entry is stale.
    #[inline]
    pub(crate) fn has_stale(&self) -> bool {
        self.entries.len() != self.live
    }

    /// Drops stale entries: from the front always, everywhere once they outnumber live ones.
    #[inline]
    pub(crate) fn prune(&mut self, is_live: impl Fn(u32, u32) -> bool) {
        if self.entries.len() != self.live {
            if self.live == 0 {
                self.entries.clear();
            } else {
                self.prune_stale(is_live);
            }
        }
    }

    #[cold]
    fn prune_stale(&mut self, is_live: impl Fn(u32, u32) -> bool) {
        while let Some(e) = self.entries.front() {
            if is_live(e.slot, e.stamp) {
                break;
            }
            self.entries.pop_front();
        }
        if self.entries.len() > 32 + 2 * self.live {
            self.entries.retain(|e| is_live(e.slot, e.stamp));
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Epoch {
    sent_at: Tick,
    /// Held leases this epoch confirms (at most one per slot, and slots are `u32`).
    live: u32,
    /// An outstanding fetch or renew will still add leases to this epoch.
    pinned: bool,
}

/// Epochs in send order, each counting the held leases it last confirmed.
///
/// An epoch is referenced only by the leases it counts and, while pinned, by its fetch or renew
/// round; so an unpinned epoch with no lease is referenced by nothing, and when the newest epoch
/// is such a dead one, the next `open` reuses its number instead of growing the queue.
#[derive(Debug, Default)]
pub(crate) struct Epochs {
    base: u64,
    entries: VecDeque<Epoch>,
}

impl Epochs {
    /// Opens a pinned epoch for an operation sent at `sent_at` (not before the previous one).
    #[inline]
    pub(crate) fn open(&mut self, sent_at: Tick) -> u64 {
        let epoch = Epoch {
            sent_at,
            live: 0,
            pinned: true,
        };
        match self.entries.back_mut() {
            Some(back) if back.live == 0 && !back.pinned => *back = epoch,
            _ => self.entries.push_back(epoch),
        }
        self.base + self.entries.len() as u64 - 1
    }

    #[inline]
    fn get_mut(&mut self, epoch: u64) -> &mut Epoch {
        &mut self.entries[(epoch - self.base) as usize]
    }

    #[inline]
    pub(crate) fn unpin(&mut self, epoch: u64) {
        self.get_mut(epoch).pinned = false;
        self.prune();
    }

    #[inline]
    pub(crate) fn add(&mut self, epoch: u64) {
        self.get_mut(epoch).live += 1;
    }

    #[inline]
    pub(crate) fn remove(&mut self, epoch: u64) {
        self.get_mut(epoch).live -= 1;
    }

    #[inline]
    pub(crate) fn sent_at(&self, epoch: u64) -> Tick {
        self.entries[(epoch - self.base) as usize].sent_at
    }

    /// Whether the oldest epoch is dead (no lease, not pinned): [`prune`](Self::prune) drops it.
    #[inline]
    pub(crate) fn has_dead_front(&self) -> bool {
        self.entries
            .front()
            .is_some_and(|front| front.live == 0 && !front.pinned)
    }

    /// Drops dead epochs from the front, and gives back memory once the queue is mostly empty
    /// (after a heartbeat moved every lease of a long fill into one epoch).
    #[inline]
    pub(crate) fn prune(&mut self) {
        if self.has_dead_front() {
            self.prune_front();
        }
    }

    #[cold]
    fn prune_front(&mut self) {
        while let Some(front) = self.entries.front() {
            if front.live > 0 || front.pinned {
                break;
            }
            self.entries.pop_front();
            self.base += 1;
        }
        if self.entries.capacity() > 64 && self.entries.len() < self.entries.capacity() / 4 {
            self.entries.shrink_to(self.entries.len() * 2);
        }
    }

    /// The send time of the oldest epoch that still confirms a held lease.
    #[inline]
    pub(crate) fn oldest_live(&self) -> Option<Tick> {
        match self.entries.front() {
            Some(front) if front.live > 0 => Some(front.sent_at),
            _ => self.entries.iter().find(|e| e.live > 0).map(|e| e.sent_at),
        }
    }

    /// The newest epoch sent at or before `cutoff`, if one holds leases at or before it.
    pub(crate) fn newest_live_sent_by(&self, cutoff: Tick) -> Option<u64> {
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
