//! Fetch: delayed messages that are due join the stream, then reclaims (like XAUTOCLAIM, those
//! claimable longest first) and new entries (XREADGROUP `>`), split so that neither kind
//! starves the other.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use leasehold_core::{Fence, Fetched, MessageId};

use super::{standing, Entry, Pending, Store};

impl Store {
    /// Up to `max` deliveries for `consumer`: reclaimed entries (those claimable longest first)
    /// and new ones (XREADGROUP `>`), split so that neither kind starves the other. Delayed
    /// messages due at `now` join the stream first, so they are new entries like any other.
    pub(crate) fn fetch(
        &mut self,
        now: Instant,
        consumer: &Arc<str>,
        max: usize,
    ) -> Vec<Fetched<Bytes>> {
        self.promote(now);
        self.seen(now, consumer);
        let due = if self.due.any_claimable(now, standing(&self.entries)) {
            self.due.oldest_claimable(now, max, standing(&self.entries))
        } else {
            Vec::new()
        };
        let reclaimable = due.len();
        // Only pending entries are ever removed, so every entry after the last delivered one
        // is still there: no need to count them.
        let fresh = usize::try_from(self.last_seq - self.last_delivered)
            .unwrap_or(usize::MAX)
            .min(max);
        debug_assert_eq!(
            fresh,
            self.entries
                .range(self.last_delivered + 1..)
                .take(max)
                .count()
        );
        let (reclaim, read) = split(max, reclaimable, fresh, self.prefer_new);
        if reclaimable > 0 && fresh > 0 && max % 2 == 1 {
            // The odd slot was contested: the other kind gets it next time.
            self.prefer_new = !self.prefer_new;
        }
        let mut out = Vec::with_capacity(reclaim + read);
        self.reclaim(now, consumer, due, reclaim, &mut out);
        self.read_new(now, consumer, read, &mut out);
        out
    }

    /// Takes the first `count` of the `due` entries (claimable longest first).
    fn reclaim(
        &mut self,
        now: Instant,
        consumer: &Arc<str>,
        mut due: Vec<u64>,
        count: usize,
        out: &mut Vec<Fetched<Bytes>>,
    ) {
        if count == 0 {
            return;
        }
        due.truncate(count);
        let until = self.lease_end(now, self.claim_timeout);
        for &seq in &due {
            let Some(Entry {
                id,
                payload,
                pending: Some(pending),
                ..
            }) = self.entries.get_mut(&seq)
            else {
                continue;
            };
            let previous = std::mem::replace(&mut pending.owner, consumer.clone());
            pending.delivery_count = pending.delivery_count.saturating_add(1);
            out.push(delivery(id, payload, pending.delivery_count));
            self.set_claimable_at(seq, until);
            self.let_go(&previous, 1);
            self.took(consumer, 1);
        }
    }

    /// Delivers up to `count` entries never delivered to the group, with delivery count 1.
    fn read_new(
        &mut self,
        now: Instant,
        consumer: &Arc<str>,
        count: usize,
        out: &mut Vec<Fetched<Bytes>>,
    ) {
        if count == 0 {
            return;
        }
        let until = self.lease_end(now, self.claim_timeout);
        let mut read = 0;
        for (&seq, entry) in self
            .entries
            .range_mut(self.last_delivered + 1..)
            .take(count)
        {
            // Never delivered to the group, so it has no PEL row yet.
            let due = self.due.insert(until, seq);
            entry.pending = Some(Pending {
                owner: consumer.clone(),
                delivery_count: 1,
                due,
            });
            self.pending += 1;
            self.last_delivered = seq;
            out.push(delivery(&entry.id, &entry.payload, 1));
            read += 1;
        }
        self.took(consumer, read);
    }
}

fn delivery(id: &MessageId, payload: &Bytes, delivery_count: u32) -> Fetched<Bytes> {
    Fetched::new(
        id.clone(),
        payload.clone(),
        delivery_count,
        Fence(u64::from(delivery_count)),
    )
}

/// How many of `max` slots go to reclaims and to new entries, given how many of each are
/// available: each kind gets half (the odd slot alternates, `prefer_new`), and a share one kind
/// cannot use goes to the other.
fn split(max: usize, reclaimable: usize, fresh: usize, prefer_new: bool) -> (usize, usize) {
    let reclaim_share = max / 2 + if prefer_new { 0 } else { max % 2 };
    let read = fresh.min(max - reclaim_share.min(reclaimable));
    let reclaim = reclaimable.min(max - read);
    (reclaim, read)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_shares_and_hands_over_unused_slots() {
        // Both kinds plentiful: half each, the odd slot to the preferred kind.
        assert_eq!(split(4, 10, 10, false), (2, 2));
        assert_eq!(split(5, 10, 10, false), (3, 2));
        assert_eq!(split(5, 10, 10, true), (2, 3));
        assert_eq!(split(1, 10, 10, false), (1, 0));
        assert_eq!(split(1, 10, 10, true), (0, 1));
        // One kind short: the other takes its unused share.
        assert_eq!(split(10, 1, 20, false), (1, 9));
        assert_eq!(split(10, 20, 1, true), (9, 1));
        assert_eq!(split(10, 0, 3, false), (0, 3));
        assert_eq!(split(0, 5, 5, false), (0, 0));
    }

    #[test]
    fn split_never_exceeds_max_or_availability() {
        for max in 0..8 {
            for r in 0..8 {
                for f in 0..8 {
                    for prefer_new in [false, true] {
                        let (reclaim, read) = split(max, r, f, prefer_new);
                        assert!(reclaim + read <= max);
                        assert!(reclaim <= r && read <= f);
                        // Nothing left idle that could have been taken.
                        assert_eq!(reclaim + read, max.min(r + f), "{max} {r} {f}");
                    }
                }
            }
        }
    }
}
