//! The stores the simulator runs against, behind one synchronous trait.
//!
//! [`MemoryStore`] is the real thing: one [`MemoryStream`] on a [`ManualClock`] and one
//! [`MemoryBackend`] consumer per replica incarnation, driven through the backend's synchronous
//! `*_now` methods. [`ModelStore`] is a small re-implementation of the same semantics (the
//! lease model of Redis Streams: pending list with owner, delivery count = fence, idle time,
//! reclaim of those claimable longest first, half-and-half split between reclaims and new
//! entries), written so that one operation can be broken on purpose:
//! [`Flaw::RenewStealsBack`] is a heartbeat that is a plain `XCLAIM` (no owner check),
//! [`Flaw::AckIgnoresOwner`] a plain `XACK`, [`Flaw::DelayIgnored`] a publisher that enqueues
//! delayed messages at once, [`Flaw::DedupeIgnored`] one that forgets deduplication keys.
//! Without a flaw it makes exactly the decisions the memory backend makes (delayed messages and
//! deduplication keys included), which a test checks by comparing whole runs.
//!
//! The memory backend's public API cannot express "steal back" (its renew is owner-checked and
//! there is no raw `XCLAIM`), hence the model: the broken variant needs a store whose owner can
//! be overwritten by a renew.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant, SystemTime};

use leasehold_core::{
    DeadLetterReason, Due, Fence, Fetched, LeaseRef, MessageId, Outgoing, Published, RenewResult,
    SettleResult,
};
use leasehold_memory::{Bytes, ManualClock, MemoryBackend, MemoryStream, StreamConfig};

/// A consumer of the store's group: one per replica incarnation, never reused.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConsumerId(pub u32);

/// A pending-list row, as the final checks and the trace see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingRow {
    /// The message.
    pub id: MessageId,
    /// The consumer holding it.
    pub owner: ConsumerId,
    /// Its delivery count (= the fence of the current delivery).
    pub delivery_count: u32,
    /// Time since it was last delivered or renewed.
    pub idle: Duration,
}

/// A dead letter, as the final checks see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadRow {
    /// The message's id in the stream.
    pub id: MessageId,
    /// Its delivery count when it was dead-lettered.
    pub delivery_count: u32,
    /// Who dead-lettered it.
    pub consumer: ConsumerId,
}

/// The synchronous store operations the simulator executes, each at the virtual instant `now`
/// (never earlier than a previous call's). Semantics are those of [`leasehold_core::Backend`].
pub trait SimStore {
    /// Registers a consumer (a replica incarnation).
    fn add_consumer(&mut self, consumer: ConsumerId);
    /// Publishes a message (checked by the caller): at once, delayed until its due time, or —
    /// for a live deduplication key — not at all, answering the key's first id (semantics of
    /// [`leasehold_core::Publisher`] and `MemoryStream::publish_with_now`).
    fn publish(&mut self, now: Instant, message: Outgoing<Bytes>) -> Published;
    /// Takes up to `max` messages for `consumer`, reclaimable ones and new ones, after moving
    /// the delayed messages due at `now` into the stream; never waits.
    fn fetch(&mut self, now: Instant, consumer: ConsumerId, max: usize) -> Vec<Fetched<Bytes>>;
    /// Renews leases; one result per lease.
    fn renew(
        &mut self,
        now: Instant,
        consumer: ConsumerId,
        lease_refs: &[LeaseRef],
    ) -> Vec<RenewResult>;
    /// Acks leases; one result per lease.
    fn ack(
        &mut self,
        now: Instant,
        consumer: ConsumerId,
        lease_refs: &[LeaseRef],
    ) -> Vec<SettleResult>;
    /// Releases a lease with a delay.
    fn release(
        &mut self,
        now: Instant,
        consumer: ConsumerId,
        lease_ref: &LeaseRef,
        delay: Duration,
    ) -> SettleResult;
    /// Dead-letters a message.
    fn dead_letter(
        &mut self,
        now: Instant,
        consumer: ConsumerId,
        lease_ref: &LeaseRef,
        reason: &DeadLetterReason,
    ) -> SettleResult;
    /// Messages in the stream (pending ones included; delayed ones not).
    fn len(&self) -> usize;
    /// Whether the stream is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Delayed messages waiting outside the stream.
    fn delayed_len(&self) -> usize;
    /// When the earliest delayed message is due (for blocking fetches and `next_due`).
    fn next_due(&mut self, now: Instant) -> Option<Instant>;
    /// The pending list, in id order.
    fn pending(&mut self, now: Instant) -> Vec<PendingRow>;
    /// The dead-letter stream, oldest first.
    fn dead_letters(&self) -> Vec<DeadRow>;
    /// When the next pending message becomes claimable by anyone (for blocking fetches).
    fn next_claimable(&mut self, now: Instant) -> Option<Instant>;
}

/// Which store a simulation runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    /// `leasehold-memory`, the real in-memory backend.
    Memory,
    /// The simulator's own model of the same semantics, optionally with a flaw.
    Model(Option<Flaw>),
}

impl StoreKind {
    /// The command-line name (`--backend NAME`).
    pub fn name(self) -> &'static str {
        match self {
            StoreKind::Memory => "memory",
            StoreKind::Model(None) => "model",
            StoreKind::Model(Some(Flaw::RenewStealsBack)) => "steal-back",
            StoreKind::Model(Some(Flaw::AckIgnoresOwner)) => "unfenced-ack",
            StoreKind::Model(Some(Flaw::DelayIgnored)) => "ignores-delay",
            StoreKind::Model(Some(Flaw::DedupeIgnored)) => "ignores-dedupe",
        }
    }

    /// Parses a command-line name.
    pub fn parse(name: &str) -> Option<Self> {
        [
            StoreKind::Memory,
            StoreKind::Model(None),
            StoreKind::Model(Some(Flaw::RenewStealsBack)),
            StoreKind::Model(Some(Flaw::AckIgnoresOwner)),
            StoreKind::Model(Some(Flaw::DelayIgnored)),
            StoreKind::Model(Some(Flaw::DedupeIgnored)),
        ]
        .into_iter()
        .find(|k| k.name() == name)
    }

    pub(crate) fn build(self, claim_timeout: Duration, start: Instant) -> Box<dyn SimStore + Send> {
        match self {
            StoreKind::Memory => Box::new(MemoryStore::new(claim_timeout, start)),
            StoreKind::Model(flaw) => Box::new(ModelStore::new(claim_timeout, flaw)),
        }
    }
}

/// A deliberate defect of [`ModelStore`], to show the simulator catches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flaw {
    /// Renew is an unconditional `XCLAIM … 0 id JUSTID`: for any pending message it sets the
    /// owner to the caller and resets the idle time, even when another consumer reclaimed it,
    /// and answers `Kept`. A late heartbeat steals the message back.
    RenewStealsBack,
    /// Ack is a plain `XACK` + `XDEL`: it removes the message whoever holds it, with any fence.
    AckIgnoresOwner,
    /// Publish ignores the due time: a delayed message is appended to the stream at once.
    DelayIgnored,
    /// Publish ignores deduplication keys: a repeated publish enqueues the message again.
    DedupeIgnored,
}

// ----- the real memory backend ------------------------------------------------------------

/// The memory backend on a manual clock: the store the simulator checks by default.
pub struct MemoryStore {
    stream: MemoryStream,
    clock: ManualClock,
    consumers: Vec<Option<MemoryBackend>>,
    names: HashMap<String, ConsumerId>,
}

impl MemoryStore {
    /// An empty stream whose clock starts at `start`.
    pub fn new(claim_timeout: Duration, start: Instant) -> Self {
        let clock = ManualClock::starting_at(start);
        let stream = MemoryStream::with_clock(StreamConfig::new(claim_timeout), clock.clone())
            .expect("the simulator's claim timeout is valid");
        Self {
            stream,
            clock,
            consumers: Vec::new(),
            names: HashMap::new(),
        }
    }

    fn at(&mut self, now: Instant, consumer: ConsumerId) -> &MemoryBackend {
        self.tick(now);
        self.consumers[consumer.0 as usize]
            .as_ref()
            .expect("registered consumer")
    }

    fn tick(&self, now: Instant) {
        let current = self.stream.now();
        if now > current {
            self.clock.advance(now - current);
        }
    }
}

fn consumer_name(consumer: ConsumerId) -> String {
    format!("c{}", consumer.0)
}

impl SimStore for MemoryStore {
    fn add_consumer(&mut self, consumer: ConsumerId) {
        let name = consumer_name(consumer);
        // A crashed incarnation's handle is kept (not dropped): requests it sent before the
        // crash may still reach the store. Names are never reused, so this changes nothing else.
        let handle = self.stream.consumer(&name).expect("fresh consumer name");
        let index = consumer.0 as usize;
        if self.consumers.len() <= index {
            self.consumers.resize_with(index + 1, || None);
        }
        self.consumers[index] = Some(handle);
        self.names.insert(name, consumer);
    }

    fn publish(&mut self, now: Instant, message: Outgoing<Bytes>) -> Published {
        self.tick(now);
        self.stream
            .publish_with_now(message)
            .expect("the simulator publishes valid messages")
    }

    fn fetch(&mut self, now: Instant, consumer: ConsumerId, max: usize) -> Vec<Fetched<Bytes>> {
        self.at(now, consumer).fetch_now(max).messages
    }

    fn renew(
        &mut self,
        now: Instant,
        consumer: ConsumerId,
        lease_refs: &[LeaseRef],
    ) -> Vec<RenewResult> {
        self.at(now, consumer).renew_now(lease_refs)
    }

    fn ack(
        &mut self,
        now: Instant,
        consumer: ConsumerId,
        lease_refs: &[LeaseRef],
    ) -> Vec<SettleResult> {
        self.at(now, consumer).ack_now(lease_refs)
    }

    fn release(
        &mut self,
        now: Instant,
        consumer: ConsumerId,
        lease_ref: &LeaseRef,
        delay: Duration,
    ) -> SettleResult {
        self.at(now, consumer).release_now(lease_ref, delay)
    }

    fn dead_letter(
        &mut self,
        now: Instant,
        consumer: ConsumerId,
        lease_ref: &LeaseRef,
        reason: &DeadLetterReason,
    ) -> SettleResult {
        self.at(now, consumer).dead_letter_now(lease_ref, reason)
    }

    fn len(&self) -> usize {
        self.stream.len()
    }

    fn delayed_len(&self) -> usize {
        self.stream.delayed_len()
    }

    fn next_due(&mut self, now: Instant) -> Option<Instant> {
        self.tick(now);
        self.stream.delayed_now().next_due.map(|d| now + d)
    }

    fn pending(&mut self, now: Instant) -> Vec<PendingRow> {
        self.tick(now);
        self.stream
            .pending_entries()
            .into_iter()
            .map(|(id, info)| PendingRow {
                id,
                owner: self.names[&info.owner],
                delivery_count: info.delivery_count,
                idle: info.idle,
            })
            .collect()
    }

    fn dead_letters(&self) -> Vec<DeadRow> {
        self.stream
            .dead_letters()
            .into_iter()
            .map(|d| DeadRow {
                id: d.original_id,
                delivery_count: d.delivery_count,
                consumer: self.names[&d.consumer],
            })
            .collect()
    }

    fn next_claimable(&mut self, now: Instant) -> Option<Instant> {
        let claim = self.stream.claim_timeout();
        self.pending(now)
            .iter()
            .map(|row| now + claim.saturating_sub(row.idle))
            .min()
    }
}

// ----- the model -----------------------------------------------------------------------------

#[derive(Debug)]
struct Pending {
    owner: ConsumerId,
    delivery_count: u32,
    claimable_at: Instant,
    /// Rows claimable at the same instant are taken in the order they got that time (as the
    /// memory store's due index does): the stamp says when.
    stamp: u64,
}

/// A model of the memory backend's semantics in ~200 lines, with an optional [`Flaw`].
#[derive(Debug)]
pub struct ModelStore {
    /// Delayed messages by `(due, n)`; their id is `delayed:<n>`.
    delayed: BTreeMap<(Instant, u64), Bytes>,
    last_delayed: u64,
    /// Deduplication keys: the id they answer, and when they expire.
    keys: HashMap<String, (MessageId, Instant)>,
    /// `(expires, key)` of every key.
    key_expiry: BTreeSet<(Instant, String)>,
    claim_timeout: Duration,
    flaw: Option<Flaw>,
    entries: BTreeMap<u64, Bytes>,
    last_seq: u64,
    last_delivered: u64,
    pel: BTreeMap<u64, Pending>,
    /// `(claimable at, stamp, row)`.
    due: BTreeSet<(Instant, u64, u64)>,
    next_stamp: u64,
    prefer_new: bool,
    dead: Vec<DeadRow>,
}

impl ModelStore {
    /// An empty model store.
    pub fn new(claim_timeout: Duration, flaw: Option<Flaw>) -> Self {
        Self {
            delayed: BTreeMap::new(),
            last_delayed: 0,
            keys: HashMap::new(),
            key_expiry: BTreeSet::new(),
            claim_timeout,
            flaw,
            entries: BTreeMap::new(),
            last_seq: 0,
            last_delivered: 0,
            pel: BTreeMap::new(),
            due: BTreeSet::new(),
            next_stamp: 0,
            prefer_new: false,
            dead: Vec::new(),
        }
    }

    fn seq(id: &MessageId) -> Option<u64> {
        let digits = id.as_str().strip_prefix("0-")?;
        digits
            .parse()
            .ok()
            .filter(|n: &u64| n.to_string() == digits)
    }

    /// The entry, if `consumer` holds it with the lease's fence (the owner check and the fence).
    fn held(&self, consumer: ConsumerId, lease_ref: &LeaseRef) -> Option<u64> {
        let seq = Self::seq(&lease_ref.id)?;
        let p = self.pel.get(&seq)?;
        (p.owner == consumer && u64::from(p.delivery_count) == lease_ref.fence.0).then_some(seq)
    }

    /// A new stamp for a row that gets a claimable time.
    fn stamp(&mut self) -> u64 {
        self.next_stamp += 1;
        self.next_stamp
    }

    /// Row `seq` becomes claimable at `at` (unchanged, with its stamp, if it already was).
    fn set_claimable(&mut self, seq: u64, at: Instant) {
        let Some(&Pending {
            claimable_at,
            stamp,
            ..
        }) = self.pel.get(&seq)
        else {
            return;
        };
        if claimable_at == at {
            return;
        }
        let new_stamp = self.stamp();
        self.due.remove(&(claimable_at, stamp, seq));
        self.due.insert((at, new_stamp, seq));
        let p = self.pel.get_mut(&seq).expect("looked up above");
        (p.claimable_at, p.stamp) = (at, new_stamp);
    }

    fn remove(&mut self, seq: u64) -> Option<u32> {
        let p = self.pel.remove(&seq)?;
        self.due.remove(&(p.claimable_at, p.stamp, seq));
        self.entries.remove(&seq);
        Some(p.delivery_count)
    }

    /// XADD.
    fn append(&mut self, payload: Bytes) -> MessageId {
        self.last_seq += 1;
        self.entries.insert(self.last_seq, payload);
        MessageId::from(format!("0-{}", self.last_seq))
    }

    fn delivery(seq: u64, payload: &Bytes, count: u32) -> Fetched<Bytes> {
        Fetched::new(
            MessageId::from(format!("0-{seq}")),
            payload.clone(),
            count,
            Fence(u64::from(count)),
        )
    }
}

impl SimStore for ModelStore {
    fn add_consumer(&mut self, _consumer: ConsumerId) {}

    fn publish(&mut self, now: Instant, message: Outgoing<Bytes>) -> Published {
        // Keys expire at `publish + ttl`, excluded.
        while let Some((at, key)) = self.key_expiry.first().cloned() {
            if at > now {
                break;
            }
            self.key_expiry.remove(&(at, key.clone()));
            self.keys.remove(&key);
        }
        let dedupe = message
            .dedupe
            .filter(|_| self.flaw != Some(Flaw::DedupeIgnored));
        if let Some(dedupe) = &dedupe {
            if let Some((id, _)) = self.keys.get(&dedupe.key) {
                return Published::new(id.clone(), true);
            }
        }
        let due = match message.due {
            _ if self.flaw == Some(Flaw::DelayIgnored) => None,
            None => None,
            Some(Due::After(delay)) => Some(now + delay),
            Some(Due::At(at)) => {
                Some(now + at.duration_since(SystemTime::now()).unwrap_or_default())
            }
        };
        let id = match due {
            Some(due) if due > now => {
                self.last_delayed += 1;
                self.delayed
                    .insert((due, self.last_delayed), message.payload);
                MessageId::from(format!("delayed:{}", self.last_delayed))
            }
            _ => self.append(message.payload),
        };
        if let Some(dedupe) = dedupe {
            let expires = now + dedupe.ttl;
            self.key_expiry.insert((expires, dedupe.key.clone()));
            self.keys.insert(dedupe.key, (id.clone(), expires));
        }
        Published::new(id, false)
    }

    fn fetch(&mut self, now: Instant, consumer: ConsumerId, max: usize) -> Vec<Fetched<Bytes>> {
        // Every due delayed message joins the stream first, in due order.
        let due: Vec<(Instant, u64)> = self
            .delayed
            .range(..=(now, u64::MAX))
            .map(|(&key, _)| key)
            .collect();
        for key in due {
            let payload = self.delayed.remove(&key).expect("listed above");
            self.append(payload);
        }
        let claimable = ..=(now, u64::MAX, u64::MAX);
        let reclaimable = self.due.range(claimable).take(max).count();
        let fresh = self
            .entries
            .range(self.last_delivered + 1..)
            .take(max)
            .count();
        // Half each, the odd slot alternating, unused shares handed over (as the memory store).
        let reclaim_share = max / 2 + if self.prefer_new { 0 } else { max % 2 };
        let read = fresh.min(max - reclaim_share.min(reclaimable));
        let reclaim = reclaimable.min(max - read);
        if reclaimable > 0 && fresh > 0 && max % 2 == 1 {
            self.prefer_new = !self.prefer_new;
        }
        let mut out = Vec::new();
        let until = now + self.claim_timeout;
        if reclaim > 0 {
            // Those claimable longest first.
            let due: Vec<u64> = self
                .due
                .range(claimable)
                .take(reclaim)
                .map(|&(.., s)| s)
                .collect();
            for seq in due {
                let p = self.pel.get_mut(&seq).expect("due entries are pending");
                p.owner = consumer;
                p.delivery_count += 1;
                let count = p.delivery_count;
                self.set_claimable(seq, until);
                out.push(Self::delivery(seq, &self.entries[&seq], count));
            }
        }
        let fresh: Vec<u64> = self
            .entries
            .range(self.last_delivered + 1..)
            .take(read)
            .map(|(&s, _)| s)
            .collect();
        for seq in fresh {
            let stamp = self.stamp();
            self.pel.insert(
                seq,
                Pending {
                    owner: consumer,
                    delivery_count: 1,
                    claimable_at: until,
                    stamp,
                },
            );
            self.due.insert((until, stamp, seq));
            self.last_delivered = seq;
            out.push(Self::delivery(seq, &self.entries[&seq], 1));
        }
        out
    }

    fn renew(
        &mut self,
        now: Instant,
        consumer: ConsumerId,
        lease_refs: &[LeaseRef],
    ) -> Vec<RenewResult> {
        let until = now + self.claim_timeout;
        lease_refs
            .iter()
            .map(|lease_ref| {
                let seq = if self.flaw == Some(Flaw::RenewStealsBack) {
                    // The flaw: no owner check, no fence check: the caller becomes the owner.
                    let seq = Self::seq(&lease_ref.id).filter(|s| self.pel.contains_key(s));
                    if let Some(p) = seq.and_then(|s| self.pel.get_mut(&s)) {
                        p.owner = consumer;
                    }
                    seq
                } else {
                    self.held(consumer, lease_ref)
                };
                match seq {
                    Some(seq) => {
                        self.set_claimable(seq, until);
                        RenewResult::Kept
                    }
                    None => RenewResult::Lost,
                }
            })
            .collect()
    }

    fn ack(
        &mut self,
        _now: Instant,
        consumer: ConsumerId,
        lease_refs: &[LeaseRef],
    ) -> Vec<SettleResult> {
        lease_refs
            .iter()
            .map(|lease_ref| {
                let seq = if self.flaw == Some(Flaw::AckIgnoresOwner) {
                    Self::seq(&lease_ref.id).filter(|s| self.pel.contains_key(s))
                } else {
                    self.held(consumer, lease_ref)
                };
                match seq.and_then(|s| self.remove(s)) {
                    Some(_) => SettleResult::Ok,
                    None => SettleResult::Lost,
                }
            })
            .collect()
    }

    fn release(
        &mut self,
        now: Instant,
        consumer: ConsumerId,
        lease_ref: &LeaseRef,
        delay: Duration,
    ) -> SettleResult {
        match self.held(consumer, lease_ref) {
            Some(seq) => {
                self.set_claimable(seq, now + delay.min(self.claim_timeout));
                SettleResult::Ok
            }
            None => SettleResult::Lost,
        }
    }

    fn dead_letter(
        &mut self,
        _now: Instant,
        consumer: ConsumerId,
        lease_ref: &LeaseRef,
        _reason: &DeadLetterReason,
    ) -> SettleResult {
        let Some(seq) = self.held(consumer, lease_ref) else {
            return SettleResult::Lost;
        };
        let delivery_count = self.remove(seq).expect("held entries are pending");
        self.dead.push(DeadRow {
            id: lease_ref.id.clone(),
            delivery_count,
            consumer,
        });
        SettleResult::Ok
    }

    fn len(&self) -> usize {
        self.entries.len()
    }

    fn delayed_len(&self) -> usize {
        self.delayed.len()
    }

    fn next_due(&mut self, _now: Instant) -> Option<Instant> {
        self.delayed.first_key_value().map(|(&(due, _), _)| due)
    }

    fn pending(&mut self, now: Instant) -> Vec<PendingRow> {
        self.pel
            .iter()
            .map(|(&seq, p)| PendingRow {
                id: MessageId::from(format!("0-{seq}")),
                owner: p.owner,
                delivery_count: p.delivery_count,
                idle: if p.claimable_at >= now {
                    self.claim_timeout.saturating_sub(p.claimable_at - now)
                } else {
                    self.claim_timeout + (now - p.claimable_at)
                },
            })
            .collect()
    }

    fn dead_letters(&self) -> Vec<DeadRow> {
        self.dead.clone()
    }

    fn next_claimable(&mut self, _now: Instant) -> Option<Instant> {
        self.due.first().map(|&(at, ..)| at)
    }
}
