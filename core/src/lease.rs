//! Held leases: a generational slab (O(1) by [`LeaseId`]) plus an index by message, which stores
//! only lease ids and hashes through the slab, so a message id is kept once.

use std::hash::BuildHasher;

use hashbrown::{DefaultHashBuilder, HashTable};

use crate::backend::LeaseRef;
use crate::types::{CancelReason, Fence, LeaseId, MessageId, StreamId, Tenure};

/// A lease the engine holds on one message, as a driver sees it when executing an effect.
#[derive(Debug)]
pub struct Lease<P> {
    pub(crate) id: MessageId,
    pub(crate) payload: P,
    pub(crate) fence: Fence,
    /// Engine sequence number at which `fence` was adopted: results of operations sent before
    /// it carry an older fence and are stale.
    pub(crate) fence_seq: u64,
    /// The consumer's tenure when the current delivery was made.
    pub(crate) tenure: Tenure,
    /// While settling: the engine sequence number at which the settle operation was last sent.
    /// While running: the tick its invocation started (for the observed handler time).
    pub(crate) sent_seq: u64,
    /// The epoch (fetch or renew send time) that last confirmed this lease.
    pub(crate) epoch: u64,
    pub(crate) delivery_count: u32,
    /// Invocations of this delivery so far: the attempt of the current (or last) one.
    pub(crate) attempt: u32,
    pub(crate) stream: StreamId,
    pub(crate) state: State,
}

impl<P> Lease<P> {
    /// The stream the message came from.
    pub fn stream(&self) -> StreamId {
        self.stream
    }
    /// The message's id in the backend.
    pub fn message_id(&self) -> &MessageId {
        &self.id
    }
    /// The message's payload.
    pub fn payload(&self) -> &P {
        &self.payload
    }
    /// The backend's delivery count of the current delivery.
    pub fn delivery_count(&self) -> u32 {
        self.delivery_count
    }
    /// The fence of the current delivery, for the backend's fenced operations.
    pub fn fence(&self) -> Fence {
        self.fence
    }
    /// How many invocations this delivery has had (1 during the first).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }
    /// What a backend needs to act on this lease: the message id and the current fence.
    pub fn lease_ref(&self) -> LeaseRef {
        LeaseRef::new(self.id.clone(), self.fence).with_tenure(self.tenure)
    }
}

/// Where a lease is in its life. Two bytes: what a state carries beyond that (a release's delay,
/// a dead letter's reason, an orphan's successor) is rare and kept beside the slab.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// An invocation (run number = `attempt`) is running.
    Running { cancelled: Option<CancelReason> },
    /// Returned `Pending`; waits for its re-poll timer.
    Waiting,
    /// Due to run, waiting for a free invocation slot.
    Ready,
    /// Delivered while a cancelled invocation of the same message still winds down.
    Blocked,
    /// Being acked, released or dead-lettered; `in_flight` while the effect awaits its result
    /// (sent at the lease's `sent_seq`), otherwise waiting to retry after a transient failure.
    Settling { op: Op, in_flight: bool },
    /// No longer held (lost or expired) but its cancelled invocation has not reported yet: it
    /// still occupies an invocation slot. A newer lease of the same message waiting for it is
    /// its successor. Its `sent_seq` is the tick until which a `Done` it reports is acked late
    /// (0: never; see [`State::Late`]).
    Orphaned,
    /// Returned `Done`, but the lease expired locally before the backend confirmed the ack
    /// (it was unreachable): no longer held (not renewed, not counted against `max_leases`),
    /// its fenced ack is still sent, `in_flight` while it awaits an answer (or its stream's
    /// next batch), otherwise waiting to be retried. The backend refuses it if anyone took the
    /// message over; otherwise the work is not redone.
    ///
    /// `orphan`: the `Done` came from an invocation still running when the lease expired,
    /// cancelled then, that returned within the cancel grace. The lease was reported expired
    /// at that moment, so an end without an ack reports nothing again.
    Late { in_flight: bool, orphan: bool },
}

/// Which settle operation a settling lease is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Ack,
    Release,
    DeadLetter,
}

impl State {
    /// Held leases count against `max_leases` and are renewed unless a release is in flight.
    #[inline]
    pub(crate) fn is_held(self) -> bool {
        !matches!(self, State::Orphaned | State::Late { .. })
    }
    /// Running invocations count against `concurrency`.
    #[inline]
    pub(crate) fn is_running(self) -> bool {
        matches!(self, State::Running { .. } | State::Orphaned)
    }
    /// A late ack (see [`State::Late`]).
    #[inline]
    pub(crate) fn is_late(self) -> bool {
        matches!(self, State::Late { .. })
    }
    /// An ack awaiting its answer or its stream's next batch, held or late.
    #[inline]
    pub(crate) fn is_acking(self) -> bool {
        matches!(
            self,
            State::Settling {
                op: Op::Ack,
                in_flight: true,
            } | State::Late {
                in_flight: true,
                ..
            }
        )
    }
    /// Settling with its effect awaiting a result.
    #[inline]
    pub(crate) fn is_in_flight(self) -> bool {
        matches!(
            self,
            State::Settling {
                in_flight: true,
                ..
            }
        )
    }
    /// A release in flight is not renewed: a renew landing after it would reset the idle time
    /// and undo the release's delay. Acks and dead-letters in flight are renewed, so a slow one
    /// cannot let the lease lapse.
    #[inline]
    pub(crate) fn is_releasing(self) -> bool {
        matches!(
            self,
            State::Settling {
                op: Op::Release,
                in_flight: true,
            }
        )
    }
    #[inline]
    pub(crate) fn is_renewable(self) -> bool {
        self.is_held() && !self.is_releasing()
    }
    /// Whether the state may have data beside the slab (see [`State`]).
    #[inline]
    pub(crate) fn has_extra(self) -> bool {
        matches!(
            self,
            State::Orphaned
                | State::Settling {
                    op: Op::Release | Op::DeadLetter,
                    ..
                }
        )
    }
}

struct Slot<P> {
    generation: u32,
    /// Bumped on every state change and removal of the slot's lease, never reset: a timer entry
    /// carrying an older stamp is stale.
    stamp: u32,
    /// The message index hash of the slot's lease, so removing it hashes nothing.
    hash: u64,
    lease: Option<Lease<P>>,
}

/// The generational slab of leases and the index of held leases by `(stream, message id)`.
pub(crate) struct LeaseTable<P> {
    slots: Vec<Slot<P>>,
    free: Vec<u32>,
    index: HashTable<LeaseId>,
    hasher: DefaultHashBuilder,
}

impl<P> LeaseTable<P> {
    pub(crate) fn new() -> Self {
        Self {
            slots: Vec::new(),
            free: Vec::new(),
            index: HashTable::new(),
            hasher: DefaultHashBuilder::default(),
        }
    }

    /// The index hash of a message, to look it up and insert it with one hashing.
    #[inline]
    pub(crate) fn hash(&self, stream: StreamId, id: &MessageId) -> u64 {
        self.hasher.hash_one((stream, id))
    }

    #[inline]
    pub(crate) fn get(&self, id: LeaseId) -> Option<&Lease<P>> {
        let slot = self.slots.get(id.slot as usize)?;
        if slot.generation == id.generation {
            slot.lease.as_ref()
        } else {
            None
        }
    }

    #[inline]
    pub(crate) fn get_mut(&mut self, id: LeaseId) -> Option<&mut Lease<P>> {
        let slot = self.slots.get_mut(id.slot as usize)?;
        if slot.generation == id.generation {
            slot.lease.as_mut()
        } else {
            None
        }
    }

    /// Whether this table ever handed out `id` (it may be gone since): its slot exists and has
    /// reached its generation.
    pub(crate) fn was_issued(&self, id: LeaseId) -> bool {
        self.slots
            .get(id.slot as usize)
            .is_some_and(|slot| slot.generation >= id.generation)
    }

    /// The lease in `slot` if its stamp is still `stamp` (a timer entry for it is live).
    #[inline]
    pub(crate) fn current(&self, slot: u32, stamp: u32) -> Option<LeaseId> {
        let entry = self.slots.get(slot as usize)?;
        (entry.stamp == stamp && entry.lease.is_some()).then_some(LeaseId {
            slot,
            generation: entry.generation,
        })
    }

    /// Moves a lease to `state` and bumps its slot's stamp; returns the old state, the lease's
    /// epoch, the new stamp and the lease's stream.
    #[inline]
    pub(crate) fn set_state(&mut self, id: LeaseId, state: State) -> (State, u64, u32, StreamId) {
        let slot = self
            .slots
            .get_mut(id.slot as usize)
            .filter(|slot| slot.generation == id.generation)
            .expect("known lease");
        let lease = slot.lease.as_mut().expect("known lease");
        slot.stamp = slot.stamp.wrapping_add(1);
        let old = std::mem::replace(&mut lease.state, state);
        (old, lease.epoch, slot.stamp, lease.stream)
    }

    /// Stores a lease whose index hash is `hash` and indexes it by message; returns its id and
    /// its slot's stamp.
    #[inline]
    pub(crate) fn insert(&mut self, hash: u64, lease: Lease<P>) -> (LeaseId, u32) {
        let (id, stamp) = match self.free.pop() {
            Some(slot) => {
                let entry = &mut self.slots[slot as usize];
                entry.lease = Some(lease);
                entry.hash = hash;
                let id = LeaseId {
                    slot,
                    generation: entry.generation,
                };
                (id, entry.stamp)
            }
            None => {
                // Grow by half rather than double: the slab is most of a lease's memory.
                if self.slots.len() == self.slots.capacity() {
                    self.slots.reserve_exact((self.slots.len() / 2).max(16));
                }
                let slot = u32::try_from(self.slots.len()).expect("fewer than 2^32 leases");
                self.slots.push(Slot {
                    generation: 0,
                    stamp: 0,
                    hash,
                    lease: Some(lease),
                });
                let id = LeaseId {
                    slot,
                    generation: 0,
                };
                (id, 0)
            }
        };
        let slots = &self.slots;
        self.index
            .insert_unique(hash, id, |other| slots[other.slot as usize].hash);
        (id, stamp)
    }

    /// The held lease of a message whose index hash is `hash`, if any.
    #[inline]
    pub(crate) fn find(&self, hash: u64, stream: StreamId, message: &MessageId) -> Option<LeaseId> {
        self.index
            .find(hash, |id| {
                let lease = self.slots[id.slot as usize]
                    .lease
                    .as_ref()
                    .expect("indexed");
                lease.stream == stream && lease.id == *message
            })
            .copied()
    }

    /// Indexes a lease by its message again (an orphan whose `Done` is acked late). The caller
    /// makes sure no other lease of the message is indexed.
    pub(crate) fn reindex(&mut self, id: LeaseId) {
        if self.get(id).is_none() {
            return;
        }
        let hash = self.slots[id.slot as usize].hash;
        let slots = &self.slots;
        self.index
            .insert_unique(hash, id, |other| slots[other.slot as usize].hash);
    }

    /// Removes a lease from the message index (it stays in the slab, e.g. as an orphan).
    pub(crate) fn unindex(&mut self, id: LeaseId) {
        if self.get(id).is_none() {
            return;
        }
        let hash = self.slots[id.slot as usize].hash;
        if let Ok(entry) = self.index.find_entry(hash, |other| *other == id) {
            entry.remove();
        }
    }

    /// Removes (and drops) a lease entirely; its id is never valid again. Returns its state,
    /// its epoch, the stamp its slot had and its stream.
    #[inline]
    pub(crate) fn remove(&mut self, id: LeaseId) -> Option<(State, u64, u32, StreamId)> {
        let slot = self
            .slots
            .get_mut(id.slot as usize)
            .filter(|slot| slot.generation == id.generation)?;
        let lease = slot.lease.take()?;
        let stamp = slot.stamp;
        slot.generation = slot.generation.wrapping_add(1);
        slot.stamp = stamp.wrapping_add(1);
        let hash = slot.hash;
        self.free.push(id.slot);
        if let Ok(entry) = self.index.find_entry(hash, |other| *other == id) {
            entry.remove();
        }
        Some((lease.state, lease.epoch, stamp, lease.stream))
    }

    /// All live slots (held leases and orphans), in slot order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (LeaseId, &Lease<P>)> {
        self.slots.iter().enumerate().filter_map(|(slot, entry)| {
            let lease = entry.lease.as_ref()?;
            let id = LeaseId {
                slot: slot as u32,
                generation: entry.generation,
            };
            Some((id, lease))
        })
    }
}
