//! The pending list ordered by when each row becomes claimable: what a fetch reclaims, and
//! when a waiting fetch must look again.
//!
//! A delivery, a reclaim and a renew all set a row to `now + claim_timeout`, which never goes
//! down as the clock moves on, so those rows are appended to a queue already in order, at O(1)
//! per message instead of a tree insert and remove. A row acked, dead-lettered or moved since is
//! left behind there (the store tells which records still stand) and skipped; the queue is swept
//! when such records outnumber the standing ones. Anything out of order (a release's earlier
//! time, a clock that went back) goes to an exact ordered set instead.

use std::collections::{BTreeSet, VecDeque};
use std::time::Instant;

/// Where a pending row's record is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// In the in-order queue (standing while the row still has that record's stamp).
    Queue,
    /// In the ordered set (removed exactly when the row changes).
    Set,
}

/// A pending row's record: when it becomes claimable, a stamp unique to this record (rows
/// claimable at the same instant come in the order their records were made), and where it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) at: Instant,
    pub(crate) stamp: u64,
    pub(crate) place: Place,
}

/// Pending rows by the instant they become claimable, then by stamp.
#[derive(Debug, Default)]
pub(crate) struct Due {
    /// `(at, stamp, row)` in order (stamps rise, times never fall), some no longer standing.
    queue: VecDeque<(Instant, u64, u64)>,
    /// Rows whose record is in `queue`.
    in_queue: usize,
    /// `(at, stamp, row)` added out of order, all standing.
    set: BTreeSet<(Instant, u64, u64)>,
    /// The stamp of the next record.
    next_stamp: u64,
}

/// Records in the queue that may stand before a sweep.
const SLACK: usize = 1024;

impl Due {
    /// Adds a record for row `seq`, claimable at `at`.
    pub(crate) fn insert(&mut self, at: Instant, seq: u64) -> Record {
        let stamp = self.next_stamp;
        self.next_stamp += 1;
        let place = if self.queue.back().is_none_or(|&(last, ..)| last <= at) {
            self.queue.push_back((at, stamp, seq));
            self.in_queue += 1;
            Place::Queue
        } else {
            self.set.insert((at, stamp, seq));
            Place::Set
        };
        Record { at, stamp, place }
    }

    /// Row `seq`'s `record` no longer holds (the row changed or went away). A queued record is
    /// left for `standing` (does row `seq` still have the record stamped so?) to skip.
    pub(crate) fn remove(&mut self, record: Record, seq: u64, standing: impl Fn(u64, u64) -> bool) {
        match record.place {
            Place::Set => {
                self.set.remove(&(record.at, record.stamp, seq));
            }
            Place::Queue => {
                self.in_queue -= 1;
                if self.queue.len() > 2 * self.in_queue + SLACK {
                    self.queue.retain(|&(_, stamp, seq)| standing(stamp, seq));
                }
            }
        }
    }

    /// The earliest instant a row becomes claimable.
    pub(crate) fn first(&mut self, standing: impl Fn(u64, u64) -> bool) -> Option<Instant> {
        self.trim_front(&standing);
        let queued = self.queue.front().map(|&(at, ..)| at);
        let set = self.set.first().map(|&(at, ..)| at);
        match (queued, set) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Up to `count` rows claimable at `now`, those claimable longest first. The work is
    /// bounded by `count` (and the records left behind that it passes), not by how many rows
    /// are claimable: after a crash that may be all of them, fetched a few at a time.
    ///
    /// Oldest first is also what keeps every claimable row reached: a row taken becomes
    /// claimable again (if its new owner dies too) only behind all the others.
    pub(crate) fn oldest_claimable(
        &mut self,
        now: Instant,
        count: usize,
        standing: impl Fn(u64, u64) -> bool,
    ) -> Vec<u64> {
        self.trim_front(&standing);
        let queued = self
            .queue
            .iter()
            .take_while(|&&(at, ..)| at <= now)
            .filter(|&&(_, stamp, seq)| standing(stamp, seq));
        let set = self.set.range(..=(now, u64::MAX, u64::MAX));
        // A merge of two sequences ordered by (time, stamp).
        let (mut queued, mut set) = (queued.peekable(), set.peekable());
        let mut rows = Vec::with_capacity(count.min(self.in_queue + self.set.len()));
        while rows.len() < count {
            let next = match (queued.peek(), set.peek()) {
                (Some(q), Some(s)) if (q.0, q.1) <= (s.0, s.1) => queued.next(),
                (_, Some(_)) => set.next(),
                (Some(_), None) => queued.next(),
                (None, None) => break,
            };
            let Some(&(_, _, seq)) = next else { break };
            rows.push(seq);
        }
        rows
    }

    /// Whether any row is claimable at `now`.
    pub(crate) fn any_claimable(
        &mut self,
        now: Instant,
        standing: impl Fn(u64, u64) -> bool,
    ) -> bool {
        self.first(standing).is_some_and(|at| at <= now)
    }

    /// Drops records that no longer stand from the front of the queue.
    fn trim_front(&mut self, standing: &impl Fn(u64, u64) -> bool) {
        while let Some(&(_, stamp, seq)) = self.queue.front() {
            if standing(stamp, seq) {
                break;
            }
            self.queue.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::time::Duration;

    use super::*;

    /// The rows' current records, as the store keeps them.
    #[derive(Default)]
    struct Rows(HashMap<u64, Record>);

    impl Rows {
        fn standing(&self) -> impl Fn(u64, u64) -> bool + '_ {
            |stamp, seq| self.0.get(&seq).is_some_and(|r| r.stamp == stamp)
        }
    }

    fn set(due: &mut Due, rows: &mut Rows, seq: u64, at: Instant) {
        if let Some(old) = rows.0.remove(&seq) {
            due.remove(old, seq, rows.standing());
        }
        let record = due.insert(at, seq);
        rows.0.insert(seq, record);
    }

    /// Every row claimable at `now`, in id order.
    fn claimable(due: &mut Due, now: Instant, standing: impl Fn(u64, u64) -> bool) -> Vec<u64> {
        let mut rows = due.oldest_claimable(now, usize::MAX, standing);
        rows.sort_unstable();
        rows
    }

    fn drop_row(due: &mut Due, rows: &mut Rows, seq: u64) {
        let record = rows.0.remove(&seq).expect("a row");
        due.remove(record, seq, rows.standing());
    }

    #[test]
    fn finds_claimable_rows_in_order_and_out_of_order_alike() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let (mut due, mut rows) = (Due::default(), Rows::default());
        set(&mut due, &mut rows, 1, ms(100));
        set(&mut due, &mut rows, 2, ms(200));
        set(&mut due, &mut rows, 3, ms(50)); // a release: out of order
        assert_eq!(rows.0[&3].place, Place::Set);
        assert_eq!(due.first(rows.standing()), Some(ms(50)));
        assert_eq!(
            claimable(&mut due, ms(40), rows.standing()),
            Vec::<u64>::new()
        );
        assert_eq!(claimable(&mut due, ms(100), rows.standing()), [1, 3]);
        assert!(due.any_claimable(ms(50), rows.standing()));
        assert!(!due.any_claimable(ms(49), rows.standing()));

        // Acked, renewed: the old records no longer count.
        drop_row(&mut due, &mut rows, 3);
        set(&mut due, &mut rows, 1, ms(300));
        assert_eq!(due.first(rows.standing()), Some(ms(200)));
        assert_eq!(claimable(&mut due, ms(250), rows.standing()), [2]);
        assert_eq!(claimable(&mut due, ms(300), rows.standing()), [1, 2]);
    }

    #[test]
    fn the_longest_claimable_come_first_and_no_more_than_asked() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let (mut due, mut rows) = (Due::default(), Rows::default());
        for seq in 1..=5 {
            set(&mut due, &mut rows, seq, ms(100 + seq));
        }
        set(&mut due, &mut rows, 9, ms(50)); // released: out of order, claimable longest
        assert_eq!(due.oldest_claimable(ms(200), 3, rows.standing()), [9, 1, 2]);
        // Taken (claimable again a timeout later): behind every other row.
        set(&mut due, &mut rows, 9, ms(300));
        set(&mut due, &mut rows, 1, ms(300));
        assert_eq!(
            due.oldest_claimable(ms(400), 9, rows.standing()),
            [2, 3, 4, 5, 9, 1]
        );
    }

    #[test]
    fn a_row_back_at_its_old_instant_is_found_once() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let (mut due, mut rows) = (Due::default(), Rows::default());
        set(&mut due, &mut rows, 1, ms(100));
        set(&mut due, &mut rows, 2, ms(100));
        set(&mut due, &mut rows, 1, ms(10)); // released
        set(&mut due, &mut rows, 1, ms(100)); // renewed at the same instant as before
        assert_eq!(claimable(&mut due, ms(100), rows.standing()), [1, 2]);
    }

    #[test]
    fn records_left_behind_are_swept() {
        let t0 = Instant::now();
        let (mut due, mut rows) = (Due::default(), Rows::default());
        for seq in 0..100_000u64 {
            set(&mut due, &mut rows, seq, t0 + Duration::from_micros(seq));
            if seq >= 10 {
                drop_row(&mut due, &mut rows, seq - 10);
            }
        }
        assert_eq!(due.in_queue, 10);
        assert!(
            due.queue.len() <= 2 * 10 + SLACK + 1,
            "{} records kept for 10 rows",
            due.queue.len()
        );
        let now = t0 + Duration::from_secs(1);
        assert_eq!(
            claimable(&mut due, now, rows.standing()),
            (99_990..100_000).collect::<Vec<_>>()
        );
    }
}
