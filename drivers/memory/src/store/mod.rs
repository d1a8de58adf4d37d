//! The synchronous store: one stream, its consumer group's pending list (PEL) and a dead-letter
//! stream, with the lease semantics of Redis Streams, plus the delayed messages and
//! deduplication keys of its publishers (`delayed`). Every operation is given `now`; the
//! handles lock the store, read the clock and call in. Nothing here blocks, awaits or panics
//! half-way through a change.

mod delayed;
mod due;
mod fetch;
mod inspect;

use std::collections::{btree_map, BTreeMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use leasehold_core::{LeaseRef, MessageId, Published, RenewResult, SettleResult};

use crate::config::MemoryError;
use crate::id;
use crate::inspect::{DeadLetter, PendingInfo};
use delayed::{Dedupe, Delayed};
use due::{Due, Record};

/// A message to publish, checked and with its times resolved on the stream's clock: nothing
/// about it can fail inside the store.
#[derive(Debug)]
pub(crate) struct Outgoing {
    pub(crate) payload: Bytes,
    /// When it is due (`None`, or not after the publish: at once).
    pub(crate) due: Option<Instant>,
    /// Its deduplication key and when the key expires.
    pub(crate) dedupe: Option<(String, Instant)>,
}

/// One delivered, unacknowledged entry: an XPENDING row.
#[derive(Debug)]
struct Pending {
    owner: Arc<str>,
    delivery_count: u32,
    /// `due`'s record of the row. Its time is when the entry becomes claimable by anyone:
    /// last delivery/renew + claim timeout, or release time + delay; the idle time is
    /// `claim_timeout - (at - now)`.
    due: Record,
}

/// One entry of the stream, with its PEL row while it is delivered and unacknowledged (one
/// map for both: a delivery or an ack touches one tree node, not two).
#[derive(Debug)]
struct Entry {
    /// Its id, formatted once at publish: every delivery shares it.
    id: MessageId,
    payload: Bytes,
    /// When it entered the stream, on the stream's clock.
    appended: Instant,
    pending: Option<Pending>,
}

/// A consumer of the group, as `XINFO CONSUMERS` lists it.
#[derive(Debug)]
struct Consumer {
    /// Whether a live handle has its name.
    live: bool,
    /// Its last registration, fetch, renew, ack, release or dead-letter.
    seen: Instant,
    /// Entries it holds.
    pending: u64,
}

/// A dead letter, and when it was dead-lettered on the stream's clock.
#[derive(Debug)]
struct Dead {
    letter: DeadLetter,
    at: Instant,
}

/// Whether a queued `due` record (stamp `stamp`, row `seq`) still stands: the row is pending
/// and that is still its record.
fn standing(entries: &BTreeMap<u64, Entry>) -> impl Fn(u64, u64) -> bool + '_ {
    |stamp, seq| {
        entries
            .get(&seq)
            .and_then(|e| e.pending.as_ref())
            .is_some_and(|p| p.due.stamp == stamp)
    }
}

/// Whether `consumer` holds the entry with the lease's fence.
fn is_current(pending: &Pending, consumer: &str, lease_ref: &LeaseRef) -> bool {
    *pending.owner == *consumer && u64::from(pending.delivery_count) == lease_ref.fence.0
}

#[derive(Debug)]
pub(crate) struct Store {
    claim_timeout: Duration,
    /// The stream: entries by sequence number, pending ones included (XLEN counts them),
    /// each with its PEL row if it has one.
    entries: BTreeMap<u64, Entry>,
    last_seq: u64,
    /// The group's last delivered sequence number: new entries are those after it.
    last_delivered: u64,
    /// Entries with a PEL row.
    pending: usize,
    /// The PEL ordered by `claimable_at`: finds what is reclaimable without a scan.
    due: Due,
    /// Which kind gets the odd slot the next time reclaims and new entries compete.
    prefer_new: bool,
    /// The group's consumers: every live one, and gone ones while they still hold entries.
    consumers: BTreeMap<Arc<str>, Consumer>,
    /// The dead-letter stream, by sequence number (from `last_dead`: never reused, even after
    /// a requeue or purge took some out).
    dead: BTreeMap<u64, Dead>,
    last_dead: u64,
    /// Delayed messages, not in the stream until they are due.
    delayed: Delayed,
    /// Deduplication keys within their time to live.
    dedupe: Dedupe,
}

impl Store {
    pub(crate) fn new(claim_timeout: Duration) -> Self {
        Self {
            claim_timeout,
            entries: BTreeMap::new(),
            last_seq: 0,
            last_delivered: 0,
            pending: 0,
            due: Due::default(),
            prefer_new: false,
            consumers: BTreeMap::new(),
            dead: BTreeMap::new(),
            last_dead: 0,
            delayed: Delayed::default(),
            dedupe: Dedupe::default(),
        }
    }

    pub(crate) fn register(&mut self, now: Instant, name: &str) -> Result<Arc<str>, MemoryError> {
        if name.is_empty() {
            return Err(MemoryError::EmptyConsumerName);
        }
        // A gone consumer that still holds entries: the name comes back to them.
        let pending = match self.consumers.get(name) {
            Some(row) if row.live => return Err(MemoryError::ConsumerNameTaken(name.to_owned())),
            Some(row) => row.pending,
            None => 0,
        };
        let name: Arc<str> = name.into();
        let row = Consumer {
            live: true,
            seen: now,
            pending,
        };
        self.consumers.insert(name.clone(), row);
        Ok(name)
    }

    /// Frees a consumer's name. Its pending entries stay pending under its name (as on Redis
    /// when a worker dies) until another consumer reclaims them; it is listed until then.
    pub(crate) fn unregister(&mut self, name: &str) {
        if let Some(row) = self.consumers.get_mut(name) {
            row.live = false;
        }
        self.let_go(name, 0);
    }

    /// Notes that `name` acted at `now` (its idle time starts again).
    fn seen(&mut self, now: Instant, name: &str) {
        if let Some(row) = self.consumers.get_mut(name) {
            row.seen = row.seen.max(now);
        }
    }

    /// `name` took `n` more entries.
    fn took(&mut self, name: &str, n: u64) {
        if let Some(row) = self.consumers.get_mut(name) {
            row.pending = row.pending.saturating_add(n);
        }
    }

    /// `n` entries `name` held left it (acked, dead-lettered, taken over). A consumer that is
    /// gone and holds nothing more is forgotten.
    fn let_go(&mut self, name: &str, n: u64) {
        if let Some(row) = self.consumers.get_mut(name) {
            row.pending = row.pending.saturating_sub(n);
            if !row.live && row.pending == 0 {
                self.consumers.remove(name);
            }
        }
    }

    /// XADD at `now`: appends an entry and returns its id.
    pub(crate) fn publish(&mut self, now: Instant, payload: Bytes) -> MessageId {
        self.last_seq += 1;
        let id = id::format(self.last_seq);
        self.entries.insert(
            self.last_seq,
            Entry {
                id: id.clone(),
                payload,
                appended: now,
                pending: None,
            },
        );
        id
    }

    /// Publishes one message at `now`: a duplicate of a live deduplication key answers that
    /// key's id and enqueues nothing; a message due later waits outside the stream (id
    /// `delayed:<n>`); any other is appended at once.
    pub(crate) fn publish_outgoing(&mut self, now: Instant, message: Outgoing) -> Published {
        self.dedupe.prune(now);
        if let Some((key, _)) = &message.dedupe {
            if let Some(id) = self.dedupe.get(key) {
                return Published::new(id.clone(), true);
            }
        }
        let id = match message.due {
            Some(due) if due > now => self.delayed.insert(due, message.payload),
            _ => self.publish(now, message.payload),
        };
        if let Some((key, expires)) = message.dedupe {
            self.dedupe.insert(&key, id.clone(), expires);
        }
        Published::new(id, false)
    }

    /// Moves every delayed message due at `now` into the stream, in due order (publish order
    /// among those due at the same instant), with entry ids as publishes get them.
    pub(crate) fn promote(&mut self, now: Instant) {
        while let Some(payload) = self.delayed.take_due(now) {
            self.publish(now, payload);
        }
    }

    /// When the earliest delayed message is due, if any waits.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.delayed.next_due()
    }

    /// Delayed messages not in the stream yet.
    pub(crate) fn delayed_len(&self) -> usize {
        self.delayed.len()
    }

    /// Resets the idle time of each lease `consumer` holds with that fence (owner-checked
    /// `XCLAIM … 0 id JUSTID`: the delivery count stays).
    pub(crate) fn renew(
        &mut self,
        now: Instant,
        consumer: &str,
        lease_refs: &[LeaseRef],
    ) -> Vec<RenewResult> {
        self.seen(now, consumer);
        let until = self.lease_end(now, self.claim_timeout);
        lease_refs
            .iter()
            .map(|lease_ref| match self.held(consumer, lease_ref) {
                Some(seq) => {
                    self.set_claimable_at(seq, until);
                    RenewResult::Kept
                }
                None => RenewResult::Lost,
            })
            .collect()
    }

    /// Removes each message `consumer` holds with that fence from the PEL and the stream
    /// (owner-checked XACK + XDEL).
    pub(crate) fn ack(
        &mut self,
        now: Instant,
        consumer: &str,
        lease_refs: &[LeaseRef],
    ) -> Vec<SettleResult> {
        self.seen(now, consumer);
        let results: Vec<SettleResult> = lease_refs
            .iter()
            .map(|lease_ref| {
                // One lookup to check and remove (the hot path of every message).
                let Some(seq) = id::parse(lease_ref.id.as_str()) else {
                    return SettleResult::Lost;
                };
                let btree_map::Entry::Occupied(entry) = self.entries.entry(seq) else {
                    return SettleResult::Lost;
                };
                let Some(pending) = entry.get().pending.as_ref() else {
                    return SettleResult::Lost;
                };
                if !is_current(pending, consumer, lease_ref) {
                    return SettleResult::Lost;
                }
                let record = pending.due;
                entry.remove();
                self.pending -= 1;
                self.due.remove(record, seq, standing(&self.entries));
                SettleResult::Ok
            })
            .collect();
        let acked = results.iter().filter(|r| **r == SettleResult::Ok).count();
        self.let_go(consumer, acked as u64);
        results
    }

    /// Makes the message claimable by anyone once `delay` (capped at the claim timeout) has
    /// passed; owner and delivery count stay (owner-checked `XCLAIM … IDLE (timeout - delay)`).
    pub(crate) fn release(
        &mut self,
        now: Instant,
        consumer: &str,
        lease_ref: &LeaseRef,
        delay: Duration,
    ) -> SettleResult {
        self.seen(now, consumer);
        let Some(seq) = self.held(consumer, lease_ref) else {
            return SettleResult::Lost;
        };
        let at = self.lease_end(now, delay.min(self.claim_timeout));
        self.set_claimable_at(seq, at);
        SettleResult::Ok
    }

    /// Appends the message to the dead-letter stream (dead-lettered at `now`) and acks it, in
    /// one step.
    pub(crate) fn dead_letter(
        &mut self,
        now: Instant,
        consumer: &str,
        lease_ref: &LeaseRef,
        reason: String,
    ) -> SettleResult {
        self.seen(now, consumer);
        let Some(seq) = self.held(consumer, lease_ref) else {
            return SettleResult::Lost;
        };
        let Some((original_id, payload, pending)) = self.remove(seq) else {
            return SettleResult::Lost;
        };
        self.last_dead += 1;
        let letter = DeadLetter {
            id: id::format(self.last_dead),
            original_id,
            payload,
            reason,
            delivery_count: pending.delivery_count,
            consumer: consumer.to_owned(),
        };
        self.dead.insert(self.last_dead, Dead { letter, at: now });
        self.let_go(consumer, 1);
        SettleResult::Ok
    }

    /// When the next pending entry becomes claimable, if any is pending.
    pub(crate) fn next_claimable(&mut self) -> Option<Instant> {
        self.due.first(standing(&self.entries))
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn pending_len(&self) -> usize {
        self.pending
    }

    /// The dead-letter stream, oldest first.
    pub(crate) fn dead_letters(&self) -> impl Iterator<Item = &DeadLetter> {
        self.dead.values().map(|dead| &dead.letter)
    }

    pub(crate) fn dead_len(&self) -> usize {
        self.dead.len()
    }

    pub(crate) fn contains(&self, id: &str) -> bool {
        id::parse(id).is_some_and(|seq| self.entries.contains_key(&seq))
    }

    pub(crate) fn pending_info(&self, now: Instant, id: &str) -> Option<PendingInfo> {
        let seq = id::parse(id)?;
        let pending = self.entries.get(&seq)?.pending.as_ref()?;
        Some(self.info(now, pending))
    }

    pub(crate) fn pending_entries(&self, now: Instant) -> Vec<(MessageId, PendingInfo)> {
        self.entries
            .values()
            .filter_map(|entry| Some((entry.id.clone(), self.info(now, entry.pending.as_ref()?))))
            .collect()
    }

    fn info(&self, now: Instant, pending: &Pending) -> PendingInfo {
        let at = pending.due.at;
        let idle = if at >= now {
            self.claim_timeout.saturating_sub(at - now)
        } else {
            self.claim_timeout.saturating_add(now - at)
        };
        PendingInfo {
            owner: pending.owner.to_string(),
            delivery_count: pending.delivery_count,
            idle,
        }
    }

    /// The sequence number of the entry, if `consumer` owns it with the lease's fence.
    fn held(&self, consumer: &str, lease_ref: &LeaseRef) -> Option<u64> {
        let seq = id::parse(lease_ref.id.as_str())?;
        let pending = self.entries.get(&seq)?.pending.as_ref()?;
        is_current(pending, consumer, lease_ref).then_some(seq)
    }

    fn set_claimable_at(&mut self, seq: u64, at: Instant) {
        let Some(pending) = self.entries.get(&seq).and_then(|e| e.pending.as_ref()) else {
            return;
        };
        let old = pending.due;
        if old.at == at {
            return; // its record stands as it is
        }
        // Moved first, so the old record no longer stands when `remove` may sweep.
        let record = self.due.insert(at, seq);
        let pending = self
            .entries
            .get_mut(&seq)
            .and_then(|e| e.pending.as_mut())
            .expect("checked above");
        pending.due = record;
        self.due.remove(old, seq, standing(&self.entries));
    }

    /// Drops a pending entry from the PEL and the stream; returns its id, payload and PEL row.
    fn remove(&mut self, seq: u64) -> Option<(MessageId, Bytes, Pending)> {
        let btree_map::Entry::Occupied(entry) = self.entries.entry(seq) else {
            return None;
        };
        entry.get().pending.as_ref()?;
        let Entry {
            id,
            payload,
            pending,
            ..
        } = entry.remove();
        let pending = pending.expect("checked above");
        self.pending -= 1;
        self.due.remove(pending.due, seq, standing(&self.entries));
        Some((id, payload, pending))
    }

    /// `now + after`. Both are bounded (`after` ≤ the validated claim timeout), so this only
    /// fails for a clock centuries past its start; computed before anything is changed.
    fn lease_end(&self, now: Instant, after: Duration) -> Instant {
        now.checked_add(after)
            .expect("lease deadline beyond the range of Instant")
    }
}
