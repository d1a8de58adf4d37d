//! Deliveries and fetch pacing: `handle_fetched`, `handle_fetch_failed`, and the `Fetch`
//! effects decided when effects are polled.

use std::time::{Duration, Instant};

use super::{Extra, LeaseEngine, Outstanding, Pacing};
use crate::backend::ErrorKind;
use crate::backend::LeaseRef;
use crate::effect::{Effect, Invocation};
use crate::lease::{Lease, State};
use crate::timers::{ticks, Tick};
use crate::types::{Fetched, InvocationId, LeaseId, LossReason, StreamId};

impl<P: Clone> LeaseEngine<P> {
    /// A fetch for `stream` returned these messages (possibly none).
    ///
    /// A message this engine already holds adopts the new delivery's fence and count and starts
    /// nothing. Messages beyond what the fetch asked for (or any during shutdown) are released
    /// at once, never run.
    pub fn handle_fetched(&mut self, now: Instant, stream: StreamId, messages: Vec<Fetched<P>>) {
        self.begin(now);
        if usize::from(stream.0) >= self.streams.len() {
            self.stats.unexpected += 1;
            return self.finish();
        }
        let (mut budget, epoch) = match self
            .streams
            .get_mut(usize::from(stream.0))
            .and_then(|s| s.outstanding.take())
        {
            Some(Outstanding {
                max,
                epoch,
                wait,
                starved,
            }) => {
                self.reserved -= max;
                let sent_at = self.epochs.sent_at(epoch);
                let now = self.now;
                let (poll, block) = (self.durations.poll, self.durations.fetch_wait);
                // A fetch that did not wait for new entries took one round trip.
                if wait == 0 || messages.len() >= max {
                    super::smooth(&mut self.observed.fetch_rtt, now.saturating_sub(sent_at));
                }
                let src = &mut self.streams[usize::from(stream.0)];
                src.failures = 0;
                // Empty: the next fetch comes at once, and may block, if this one waited out
                // whatever it was allowed to wait, a fetch asked not to block included (it found
                // the stream drained: waiting a poll interval here would only idle the worker
                // while new messages arrive). Only a fetch the backend answered before its wait
                // was over, or one kept from blocking to share a starved budget between
                // streams, pauses the stream until a poll interval after it was sent. Short:
                // fetch again at once, letting the backend block for new entries. Full: there
                // is probably more, fetch at once, no blocking.
                let waited_out = !starved && now >= sent_at.saturating_add(wait);
                (src.next_at, src.wait) = match messages.len() {
                    0 if waited_out => (now, block),
                    0 => (sent_at.saturating_add(poll), block),
                    n if n < max => (now, block),
                    _ => (now, 0),
                };
                (max, epoch)
            }
            // Not asked for: every delivery is handed back at once.
            None => {
                self.stats.unexpected += 1;
                (0, self.epochs.open(self.now))
            }
        };
        let sent_at = self.epochs.sent_at(epoch);
        let hb_due = sent_at.saturating_add(self.durations.heartbeat);
        // The fetch took so long that its deliveries may have lapsed already: never run them.
        let expired = sent_at.saturating_add(self.durations.lease_ttl) <= self.now;
        for message in messages {
            self.stats.delivered += 1;
            if expired {
                self.stats.expired += 1;
                self.effects.push_back(Effect::Lost {
                    stream,
                    lease_ref: LeaseRef::from(&message),
                    reason: LossReason::Expired,
                    margin: Duration::ZERO,
                });
                continue;
            }
            let hash = self.leases.hash(stream, &message.id);
            if let Some(id) = self.leases.find(hash, stream, &message.id) {
                if !self.leases.get(id).is_some_and(|l| l.state.is_late()) {
                    self.adopt(id, message, epoch);
                    continue;
                }
                // Delivered again since its ack went late: taken over, maybe by another
                // consumer first (fences are carried, never ordered, so nothing here tells),
                // so its result is discarded and the message runs again.
                self.late_superseded(id);
            }
            let take = budget > 0 && self.shutdown.is_none();
            if !take && self.shutdown.is_none() {
                self.stats.overflow += 1;
            }
            self.renew_by(hb_due);
            if !take {
                let id = self.create(hash, stream, message, epoch, State::Blocked);
                self.settle(id, super::settle::Settle::Release(Duration::ZERO));
                continue;
            }
            budget -= 1;
            let orphan = if self.orphans.is_empty() {
                None
            } else {
                self.orphans.get(&(stream, message.id.clone())).copied()
            };
            match orphan {
                // An earlier invocation of this message still winds down: serial per message.
                Some(orphan) => {
                    let id = self.create(hash, stream, message, epoch, State::Blocked);
                    if self.leases.get(orphan).is_some() {
                        self.extras.insert(orphan.slot, Extra::Successor(id));
                    }
                }
                // Every slot busy: a prefetched message waits, ready, for the next free one.
                None if self.running >= self.cfg.concurrency => {
                    self.create_ready(hash, stream, message, epoch);
                }
                // The common case: created running, its first invocation starts now.
                None => {
                    let state = State::Running { cancelled: None };
                    let id = self.create(hash, stream, message, epoch, state);
                    self.stats.invocations += 1;
                    let run = self.run_effect(id);
                    self.effects.push_back(run);
                }
            }
        }
        self.epochs.unpin(epoch);
        self.finish();
    }

    /// The backend of `stream` holds delayed messages, the next due at `due` (`None`: none),
    /// as its last fetch learned ([`FetchAnswer::next_due`](crate::FetchAnswer::next_due)). The next
    /// fetch comes no later than that and blocks no longer, so an idle worker picks a delayed
    /// message up when it is due without polling for it. A fetch sent later forgets it: its
    /// own answer tells the next due time afresh.
    pub fn handle_due(&mut self, now: Instant, stream: StreamId, due: Option<Instant>) {
        self.begin(now);
        let due = due.map_or(Tick::MAX, |at| self.tick(at));
        match self.streams.get_mut(usize::from(stream.0)) {
            Some(src) => src.due = due,
            None => self.stats.unexpected += 1,
        }
        self.finish();
    }

    /// A fetch for `stream` failed. After a transient error the next one backs off
    /// exponentially (capped); a fatal one stops the stream's intake
    /// ([`Effect::Halt`](crate::Effect::Halt)).
    pub fn handle_fetch_failed(&mut self, now: Instant, stream: StreamId, kind: ErrorKind) {
        self.begin(now);
        let outstanding = self
            .streams
            .get_mut(usize::from(stream.0))
            .and_then(|src| src.outstanding.take().map(|o| (src, o)));
        match outstanding {
            None => self.stats.unexpected += 1,
            Some((src, Outstanding { max, epoch, .. })) => {
                src.failures = src.failures.saturating_add(1);
                let factor = 1u32 << (src.failures - 1).min(20);
                let backoff = self
                    .cfg
                    .poll_interval
                    .saturating_mul(factor)
                    .min(self.cfg.fetch_backoff_max);
                src.next_at = self.now.saturating_add(ticks(backoff));
                src.wait = self.durations.fetch_wait;
                self.reserved -= max;
                self.epochs.unpin(epoch);
                if kind == ErrorKind::Fatal {
                    self.halt(stream);
                }
            }
        }
        self.finish();
    }

    /// Issues fetches for due streams, sharing the budget round-robin, each for at most
    /// `fetch_batch_size` messages.
    ///
    /// With one stream its fetch is returned rather than queued (it is the next effect anyway);
    /// with several, they are queued.
    pub(super) fn fetch(&mut self) -> Option<Effect<P>> {
        if self.shutdown.is_some() {
            return None;
        }
        let budget = self.fetch_budget();
        if budget == 0 {
            return None;
        }
        let batch = self.cfg.fetch_batch_size;
        let now = self.now;
        // Leave room for waiting re-invocations: a fetch may block no longer than the next is due.
        let until_repoll: Option<Tick> = (self.repolls.live > 0)
            .then(|| self.repolls.front())
            .flatten()
            .map(|e| e.due.saturating_sub(now));
        if let [src] = &mut self.streams[..] {
            // The loop below for one due stream: it gets the whole budget, and may block.
            if !src.fetchable() || src.fetch_at() > now {
                return None;
            }
            let wait = src.wait_at(now);
            let wait = until_repoll.map_or(wait, |until| wait.min(until));
            return Some(self.open_fetch(0, budget.min(batch), wait, false));
        }
        self.fetch_shared(budget, until_repoll);
        None
    }

    /// [`fetch`](Self::fetch) with several streams: queues a fetch for each due one, sharing
    /// the budget round-robin.
    fn fetch_shared(&mut self, mut budget: usize, until_repoll: Option<Tick>) {
        let now = self.now;
        let is_due = |s: &Pacing| s.fetchable() && s.fetch_at() <= now;
        let due = self.streams.iter().filter(|s| is_due(s)).count();
        if due == 0 {
            return;
        }
        let starved = due > budget;
        let mut shares = due.min(budget);
        let n = self.streams.len();
        let start = self.next_stream;
        // Round-robin from `start` (< n), without a division per step.
        for i in (start..n).chain(0..start) {
            if shares == 0 {
                break;
            }
            if !is_due(&self.streams[i]) {
                continue;
            }
            let max = budget.div_ceil(shares).min(self.cfg.fetch_batch_size);
            shares -= 1;
            budget -= max;
            let mut wait = if starved {
                0
            } else {
                self.streams[i].wait_at(now)
            };
            if let Some(until) = until_repoll {
                wait = wait.min(until);
            }
            self.next_stream = if i + 1 == n { 0 } else { i + 1 };
            let fetch = self.open_fetch(i, max, wait, starved);
            self.effects.push_back(fetch);
        }
    }

    /// Marks a fetch of up to `max` for stream `i` outstanding, its room reserved.
    #[inline]
    fn open_fetch(&mut self, i: usize, max: usize, wait: Tick, starved: bool) -> Effect<P> {
        let epoch = self.epochs.open(self.now);
        self.observed.fresh = false;
        let src = &mut self.streams[i];
        src.outstanding = Some(Outstanding {
            max,
            epoch,
            wait,
            starved,
        });
        // The fetch promotes what is due and reports the next due time afresh.
        src.due = Tick::MAX;
        self.reserved += max;
        Effect::Fetch {
            stream: StreamId(i as u16),
            max,
            wait: Duration::from_nanos(wait),
        }
    }

    /// Stores a new lease in `state`: blocked (until an orphan of its message reports, or
    /// before it is handed back), or running its first invocation. `hash` is its message's
    /// index hash.
    #[inline(always)]
    fn create(
        &mut self,
        hash: u64,
        stream: StreamId,
        message: Fetched<P>,
        epoch: u64,
        state: State,
    ) -> LeaseId {
        let fence_seq = self.next_seq();
        let (id, stamp) = self.leases.insert(
            hash,
            Lease {
                id: message.id,
                payload: message.payload,
                fence: message.fence,
                fence_seq,
                tenure: message.tenure,
                sent_seq: self.now,
                epoch,
                delivery_count: message.delivery_count,
                attempt: u32::from(state.is_running()),
                stream,
                state,
            },
        );
        self.enter(id, stream, state, epoch, stamp);
        id
    }

    /// [`create`](Self::create) in state ready (a prefetched message), kept out of line: the
    /// common path of a delivery, created running, stays small.
    #[inline(never)]
    fn create_ready(&mut self, hash: u64, stream: StreamId, message: Fetched<P>, epoch: u64) {
        self.create(hash, stream, message, epoch, State::Ready);
    }

    /// A held message was delivered again: adopt the newer delivery, start nothing.
    fn adopt(&mut self, id: LeaseId, message: Fetched<P>, epoch: u64) {
        self.stats.redelivered += 1;
        let fence_seq = self.next_seq();
        let lease = self.leases.get_mut(id).expect("found");
        lease.fence = message.fence;
        lease.tenure = message.tenure;
        lease.delivery_count = message.delivery_count;
        lease.fence_seq = fence_seq;
        if lease.epoch < epoch {
            let old = std::mem::replace(&mut lease.epoch, epoch);
            self.epochs.remove(old);
            self.epochs.add(epoch);
            self.confirmed(id);
        }
    }

    /// The `Run` effect of a lease's current invocation.
    #[inline]
    pub(super) fn run_effect(&self, id: LeaseId) -> Effect<P> {
        let lease = self.leases.get(id).expect("held");
        Effect::Run(Invocation {
            id: InvocationId {
                lease: id,
                attempt: lease.attempt,
            },
            stream: lease.stream,
            lease_ref: lease.lease_ref(),
            delivery_count: lease.delivery_count,
            attempt: lease.attempt,
            valid_until: self.instant(self.confirmation_deadline(lease.epoch)),
            payload: lease.payload.clone(),
        })
    }
}
