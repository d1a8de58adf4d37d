//! The reference model: the harness's own bookkeeping of every delivery, invocation and request,
//! computed from the inputs it gives and the effects it sees, never from engine internals.
//!
//! Each input is mirrored in the engine's order (`begin`: local expiry, max processing time,
//! shutdown deadline, due re-polls, due settle retries; then the input itself; then `finish`:
//! ready leases start while a slot is free), and every effect the input causes is *predicted* at
//! that moment, with what it must carry then: `Run` (of a new delivery or of a ready lease, in
//! the order leases became ready), `Cancel`, `LeaseValid`, `Release`, `DeadLetter`, `Halt`,
//! `Drained`. The drained effects are matched against those predictions afterwards, which is
//! what lets a burst of inputs be drained once: an effect is judged by the state at the input
//! that caused it, not by the state after the burst. `Ack` and `Fetch` are decided when effects
//! are polled, so they are judged by the state after the last input. What the model does not
//! predict (when a fetch or a heartbeat round is sent) it bounds by the invariants instead; a
//! round is matched against the renewable leases at the end of one of the drained inputs.
//!
//! Retry jitter and the first re-poll's spread come from the engine's seeded generator; the
//! model draws the same numbers in the same order ([`Jitter`]), so backoff delays and re-poll
//! instants are predicted exactly. The only engine call the model makes is
//! [`LeaseEngine::lease`], to learn which delivery (payload tag) a `LeaseId` first seen in a
//! `Renew`, `Release` or `DeadLetter` stands for (a `Run` carries its payload).
//!
//! [`LeaseEngine::lease`]: leasehold_core::LeaseEngine::lease

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use leasehold_core::{
    AckId, CancelReason, DeadLetterReason, ErrorKind, Fence, Fetched, InvocationId, LeaseId,
    LeaseRef, LossReason, MessageId, Outcome, RenewId, RenewResult, Settings, SettleResult, Stats,
    StreamId,
};

/// A delivery's payload: a number unique per delivery, so an effect's `LeaseId` can be tied to
/// the delivery that created it.
pub(crate) type Tag = u64;

/// The order in which fetches and renew rounds were sent (their confirmations): the number of
/// the input at which the engine opened it, then its place within that input (0: an unsolicited
/// fetch answer, during the input; 1: a renew round, at its end; 2 and up: fetches, when the
/// effects were polled).
pub(crate) type Seq = (u64, u32);

/// How a held lease is settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Ack,
    Release,
    DeadLetter,
}

/// What a settle effect must carry.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Carry {
    Nothing,
    Delay(Duration),
    Reason(DeadLetterReason),
}

/// Why a lease is gone for good (the engine no longer knows it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    Settled(Op),
    Lost,
    Expired,
    Abandoned,
    OrphanReported,
}

/// Where a delivery is in its life, as the model sees it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum MState {
    /// Waiting for a cancelled invocation of the same message to report (or created beyond the
    /// fetch's budget, for the instant before its release).
    Blocked,
    Running {
        attempt: u32,
        started: Instant,
        cancelled: Option<CancelReason>,
    },
    /// Returned `Pending`: ready to re-run at `due`.
    Waiting {
        due: Instant,
    },
    /// Due to run, waiting for a free slot; `order` is when it became ready (first come, first
    /// started).
    Ready {
        order: u64,
    },
    Settling {
        op: Op,
        carry: Carry,
        /// The call is out (or, for an ack, waiting for its stream's batch).
        in_flight: bool,
        /// `gen` when the call was sent: a later adoption makes a `Lost` answer stale.
        sent_gen: u32,
        /// The `Ack` batch it went out in (`None` while it waits for one).
        batch: Option<AckId>,
        retry_at: Option<Instant>,
    },
    /// Returned `Done`, then expired locally before the backend confirmed the ack (or
    /// expired while running, and returned `Done` within the cancel grace): not held (not
    /// renewed, not counted), its fenced ack still sent until the backend answers.
    Late {
        /// The ack is out (or waiting for its stream's batch).
        in_flight: bool,
        /// `gen` when it was sent: a later adoption makes a `Lost` answer stale.
        sent_gen: u32,
        batch: Option<AckId>,
        retry_at: Option<Instant>,
        /// From an orphan: the lease was announced expired already, so a refusal or a
        /// redelivery ends it without another count or notice.
        orphan: bool,
    },
    /// Lost or expired while running: not held, its cancelled invocation still occupies a slot.
    Orphan {
        attempt: u32,
        successor: Option<Tag>,
        /// Expired (not lost) while running uncancelled: a `Done` reported before this instant
        /// (the cancel grace after the expiry, at most the invocation's time limit) is acked
        /// late.
        ack_until: Option<Instant>,
    },
    Gone(End),
}

impl MState {
    pub(crate) fn is_held(&self) -> bool {
        !matches!(
            self,
            MState::Orphan { .. } | MState::Gone(_) | MState::Late { .. }
        )
    }
    /// A late ack (see [`MState::Late`]).
    pub(crate) fn is_late(&self) -> bool {
        matches!(self, MState::Late { .. })
    }
    /// Held and not being released: a renew landing after a release would undo its delay,
    /// while acks and dead-letters in flight stay in the heartbeat.
    pub(crate) fn is_renewable(&self) -> bool {
        self.is_held()
            && !matches!(
                self,
                MState::Settling {
                    op: Op::Release,
                    in_flight: true,
                    ..
                }
            )
    }
    pub(crate) fn is_in_flight(&self) -> bool {
        matches!(
            self,
            MState::Settling {
                in_flight: true,
                ..
            }
        )
    }
    /// Occupies an invocation slot.
    pub(crate) fn is_running(&self) -> bool {
        matches!(self, MState::Running { .. } | MState::Orphan { .. })
    }
    /// Waiting for its stream's next `Ack`.
    pub(crate) fn awaits_ack(&self) -> bool {
        matches!(
            self,
            MState::Settling {
                op: Op::Ack,
                in_flight: true,
                batch: None,
                ..
            } | MState::Late {
                in_flight: true,
                batch: None,
                ..
            }
        )
    }
}

/// One delivery that created a lease.
#[derive(Debug, Clone)]
pub(crate) struct MLease {
    pub stream: StreamId,
    pub msg: MessageId,
    pub id: Option<LeaseId>,
    pub fence: Fence,
    pub delivery_count: u32,
    /// Adoptions of a newer delivery so far.
    pub gen: u32,
    /// When its latest delivery was taken in, among all deliveries ([`Model::deliveries`]):
    /// leases expiring together are let go of in this order.
    pub delivered: u64,
    /// Send time of the fetch or renew that last confirmed it, and that operation's order.
    pub confirmed: Instant,
    pub confirmed_seq: Seq,
    /// Send time of the last `Renew` naming it, or of the fetch that (re)delivered it.
    pub baseline: Instant,
    /// Delivered beyond the fetch's budget (or during shutdown): released at once, and not
    /// counted against `max_leases`.
    pub overflow: bool,
    /// Invocations of this delivery so far.
    pub attempt: u32,
    pub state: MState,
}

/// An effect the model decided on: it must be among the effects drained after the input.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Expect {
    Run {
        tag: Tag,
        attempt: u32,
        fence: Fence,
        delivery_count: u32,
        valid_until: Instant,
    },
    Cancel {
        tag: Tag,
        attempt: u32,
        reason: CancelReason,
    },
    Valid {
        tag: Tag,
        attempt: u32,
        until: Instant,
    },
    Settle {
        tag: Tag,
        op: Op,
        fence: Fence,
        carry: Carry,
    },
    Halt {
        stream: StreamId,
    },
    /// The notice of a held lease let go of unsettled.
    Lost {
        stream: StreamId,
        msg: MessageId,
        fence: Fence,
        reason: LossReason,
        margin: Duration,
    },
    /// The notice of a failed attempt handed back for another delivery.
    Failed {
        stream: StreamId,
        msg: MessageId,
        fence: Fence,
        delivery_count: u32,
        error: String,
        retry_in: Duration,
    },
    Drained,
}

/// One `Renew` effect.
#[derive(Debug, Clone)]
pub(crate) struct Chunk {
    pub batch: RenewId,
    pub stream: StreamId,
    pub leases: Vec<LeaseId>,
    pub lease_refs: Vec<LeaseRef>,
    pub answered: bool,
}

/// The heartbeat round in flight.
#[derive(Debug, Clone)]
pub(crate) struct Round {
    pub sent_at: Instant,
    pub seq: Seq,
    pub chunks: Vec<Chunk>,
    /// Per lease, its `gen` when the round was sent.
    pub gens: HashMap<Tag, u32>,
}

/// What a renew round sent at the end of an input must name: the renewable leases then, with
/// their stream, message, fence and `gen`.
#[derive(Debug, Clone)]
pub(crate) struct Snapshot {
    pub input: u64,
    pub now: Instant,
    pub renewable: BTreeMap<Tag, (StreamId, MessageId, Fence, u32)>,
}

/// An outstanding fetch.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FetchOut {
    pub max: usize,
    pub sent_at: Instant,
    pub seq: Seq,
    /// How long the backend was allowed to block for new entries.
    pub wait: Duration,
}

/// A stream's `Ack` in flight.
#[derive(Debug, Clone)]
pub(crate) struct AckOut {
    pub batch: AckId,
    pub leases: Vec<LeaseId>,
}

/// A settle answer already given, to give again (stale).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OldSettle {
    Ack(AckId, LeaseId),
    Release(LeaseId),
    DeadLetter(LeaseId),
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Shutdown {
    pub deadline: Instant,
    pub cancelled_running: bool,
}

/// The engine's seeded generator (splitmix64 over `Config::seed`), drawn once per first
/// re-poll with a spread and once per backoff, in the engine's order.
#[derive(Debug, Clone)]
pub(crate) struct Jitter(u64);

impl Jitter {
    fn next_f64(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Limits of the stale-answer histories.
const HISTORY: usize = 16;

/// The reference model and the record of outstanding requests.
#[derive(Debug, Clone)]
pub(crate) struct Model {
    pub cfg: Settings,
    /// The engine's creation time, for printing instants as offsets.
    pub origin: Instant,
    pub now: Instant,
    /// Number of the input being mirrored (each step, each timeout, each input of a burst).
    pub input: u64,
    pub leases: BTreeMap<Tag, MLease>,
    /// Deliveries taken in so far, new or adopted.
    pub deliveries: u64,
    pub by_id: HashMap<LeaseId, Tag>,
    /// Invocations seen in a `Run`, with their delivery and attempt.
    pub invocations: HashMap<InvocationId, (Tag, u32)>,
    /// Invocations seen and not reported yet (running or orphaned), for the harness to finish.
    pub unreported: BTreeMap<InvocationId, Tag>,
    pub seen_batches: BTreeSet<RenewId>,
    pub seen_acks: BTreeSet<AckId>,
    /// Per stream, the outstanding fetch.
    pub fetches: Vec<Option<FetchOut>>,
    /// Per stream, whether a fatal error stopped its intake.
    pub halted: Vec<bool>,
    /// Per stream, whether it is assigned (`handle_assignment`): only then fetched from.
    pub assigned: Vec<bool>,
    /// Per stream, the `Ack` in flight.
    pub acking: Vec<Option<AckOut>>,
    /// Per stream, consecutive `Ack` calls that failed as a whole (the late acks' backoff).
    pub ack_failures: Vec<u32>,
    pub round: Option<Round>,
    pub releases: Vec<LeaseId>,
    pub dead_letters: Vec<LeaseId>,
    pub shutdown: Option<Shutdown>,
    pub drained: bool,
    pub drained_expected: bool,
    /// Effects decided since the last drain, not seen yet.
    pub expected: Vec<Expect>,
    /// The renewable leases at the end of each input since the last drain.
    pub snapshots: Vec<Snapshot>,
    /// The `Renew` chunks seen in this drain (a round sent by one of its inputs).
    pub new_chunks: Vec<Chunk>,
    /// `Fetch` effects seen in this drain.
    pub fetches_polled: u32,
    /// The fetch budget when this drain's fetches were decided, and what they asked for.
    pub polled: Option<(usize, usize)>,
    /// Leases made ready so far (the ready queue's order).
    pub next_ready: u64,
    pub counts: Stats,
    pub jitter: Jitter,
    /// Reported invocations, answered chunks and settles, for stale answers.
    pub old_invocations: Vec<InvocationId>,
    pub old_chunks: Vec<(RenewId, Vec<LeaseId>)>,
    pub old_settles: Vec<OldSettle>,
    /// The smoothed handler time and fetch round trip in nanoseconds, as the adaptive
    /// prefetch observes them (see [`Model::prefetch`]).
    pub observed_handler: Option<u64>,
    pub observed_rtt: Option<u64>,
    /// An invocation ended (not cancelled) since the last `Fetch`: only then does a fetch ask
    /// for the adaptive prefetch.
    pub observed_fresh: bool,
}

/// Moves a smoothed estimate an eighth of the way to `sample`; the first sample is taken as is.
fn smooth(estimate: &mut Option<u64>, sample: Duration) {
    let sample = u64::try_from(sample.as_nanos()).unwrap_or(u64::MAX);
    *estimate = Some(match *estimate {
        None => sample,
        Some(old) if sample >= old => old + (sample - old) / 8,
        Some(old) => old - (old - sample) / 8,
    });
}

impl Model {
    pub(crate) fn new(cfg: Settings, streams: usize, now: Instant) -> Self {
        let seed = cfg.seed;
        Self {
            cfg,
            origin: now,
            now,
            input: 0,
            leases: BTreeMap::new(),
            deliveries: 0,
            by_id: HashMap::new(),
            invocations: HashMap::new(),
            unreported: BTreeMap::new(),
            seen_batches: BTreeSet::new(),
            seen_acks: BTreeSet::new(),
            fetches: vec![None; streams],
            halted: vec![false; streams],
            assigned: vec![true; streams],
            acking: vec![None; streams],
            ack_failures: vec![0; streams],
            round: None,
            releases: Vec::new(),
            dead_letters: Vec::new(),
            shutdown: None,
            drained: false,
            drained_expected: false,
            expected: Vec::new(),
            snapshots: Vec::new(),
            new_chunks: Vec::new(),
            fetches_polled: 0,
            polled: None,
            next_ready: 0,
            counts: Stats::default(),
            jitter: Jitter(seed),
            old_invocations: Vec::new(),
            old_chunks: Vec::new(),
            old_settles: Vec::new(),
            observed_handler: None,
            observed_rtt: None,
            observed_fresh: false,
        }
    }

    /// An instant as an offset from the engine's creation, for messages.
    pub(crate) fn at(&self, t: Instant) -> String {
        format!("+{:?}", t.saturating_duration_since(self.origin))
    }

    pub(crate) fn ttl(&self) -> Duration {
        self.cfg.lease_ttl()
    }

    /// The held lease of a message, if any.
    pub(crate) fn held_of(&self, stream: StreamId, msg: &MessageId) -> Option<Tag> {
        self.leases
            .iter()
            .find(|(_, l)| l.state.is_held() && l.stream == stream && l.msg == *msg)
            .map(|(tag, _)| *tag)
    }

    /// The late ack of a message, if any.
    fn late_of(&self, stream: StreamId, msg: &MessageId) -> Option<Tag> {
        self.leases
            .iter()
            .find(|(_, l)| l.state.is_late() && l.stream == stream && l.msg == *msg)
            .map(|(tag, _)| *tag)
    }

    fn orphan_of(&self, stream: StreamId, msg: &MessageId) -> Option<Tag> {
        self.leases
            .iter()
            .find(|(_, l)| {
                matches!(l.state, MState::Orphan { .. }) && l.stream == stream && l.msg == *msg
            })
            .map(|(tag, _)| *tag)
    }

    fn lease(&mut self, tag: Tag) -> &mut MLease {
        self.leases.get_mut(&tag).expect("model lease")
    }

    fn tags(&self, keep: impl Fn(&MLease) -> bool) -> Vec<Tag> {
        self.leases
            .iter()
            .filter(|(_, l)| keep(l))
            .map(|(tag, _)| *tag)
            .collect()
    }

    // ----- the engine's `begin`: timers due at `now` ------------------------------------------

    /// Starts mirroring an input at `now`: the clock never goes back; due timers run.
    pub(crate) fn begin(&mut self, now: Instant) {
        self.start(now);
        self.advance();
    }

    /// Starts mirroring an input whose answers apply before timers run (renew and settle
    /// answers are about sends already made).
    fn start(&mut self, now: Instant) {
        self.input += 1;
        self.now = self.now.max(now);
    }

    /// Everything due at `self.now`, in the engine's order.
    fn advance(&mut self) {
        let now = self.now;
        self.expire();
        let mpt = self.cfg.max_processing_time;
        for tag in self.tags(|l| {
            matches!(l.state, MState::Running { started, cancelled: None, .. } if started + mpt <= now)
        }) {
            self.cancel(tag, CancelReason::MaxProcessingTime);
        }
        if let Some(shutdown) = &mut self.shutdown {
            if !shutdown.cancelled_running && shutdown.deadline <= now {
                shutdown.cancelled_running = true;
                for tag in self.tags(|l| {
                    matches!(
                        l.state,
                        MState::Running {
                            cancelled: None,
                            ..
                        }
                    )
                }) {
                    self.cancel(tag, CancelReason::Shutdown);
                }
            }
        }
        // Re-polls in due order, then lease id order (the engine's timer heap: slot order).
        let mut due: Vec<(Instant, Option<LeaseId>, Tag)> = self
            .leases
            .iter()
            .filter_map(|(tag, l)| match l.state {
                MState::Waiting { due } if due <= now => Some((due, l.id, *tag)),
                _ => None,
            })
            .collect();
        due.sort();
        for (_, _, tag) in due {
            self.make_ready(tag);
        }
        for tag in self.tags(|l| {
            matches!(l.state, MState::Settling { in_flight: false, retry_at: Some(at), .. } if at <= now)
        }) {
            self.resend(tag);
        }
        for tag in self.tags(|l| {
            matches!(l.state, MState::Late { in_flight: false, retry_at: Some(at), .. } if at <= now)
        }) {
            self.send_late(tag);
        }
    }

    /// Ends every input, as the engine's `finish`: ready leases start while a slot is free, in
    /// the order they became ready; `Drained` once shut down with nothing left.
    fn finish(&mut self) {
        while self.slot_free() {
            let next = self
                .leases
                .iter()
                .filter_map(|(tag, l)| match l.state {
                    MState::Ready { order } => Some((order, *tag)),
                    _ => None,
                })
                .min();
            let Some((_, tag)) = next else { break };
            self.start_run(tag);
        }
        if self.shutdown.is_some()
            && !self.drained_expected
            && self.held() == 0
            && self.running() == 0
            && self.late() == 0
            && self.fetches.iter().all(Option::is_none)
        {
            self.drained_expected = true;
            self.expected.push(Expect::Drained);
        }
        let renewable = self
            .leases
            .iter()
            .filter(|(_, l)| l.state.is_renewable())
            .map(|(tag, l)| (*tag, (l.stream, l.msg.clone(), l.fence, l.gen)))
            .collect();
        self.snapshots.push(Snapshot {
            input: self.input,
            now: self.now,
            renewable,
        });
    }

    fn make_ready(&mut self, tag: Tag) {
        let order = self.next_ready;
        self.next_ready += 1;
        self.lease(tag).state = MState::Ready { order };
    }

    /// A lease's next invocation starts now.
    fn start_run(&mut self, tag: Tag) {
        let (now, ttl) = (self.now, self.ttl());
        let lease = self.lease(tag);
        lease.attempt += 1;
        let attempt = lease.attempt;
        lease.state = MState::Running {
            attempt,
            started: now,
            cancelled: None,
        };
        let expect = Expect::Run {
            tag,
            attempt,
            fence: lease.fence,
            delivery_count: lease.delivery_count,
            valid_until: lease.confirmed + ttl,
        };
        self.counts.invocations += 1;
        self.expected.push(expect);
    }

    /// Drops every held lease whose confirmation is `ttl` old.
    /// Lets go of the leases that expired, in the order of their latest delivery: where more
    /// `Done`s expire at once than late acks may be kept, the earlier deliveries keep theirs.
    fn expire(&mut self) {
        let cutoff = self.ttl();
        let now = self.now;
        let mut expired = self.tags(|l| l.state.is_held() && l.confirmed + cutoff <= now);
        expired.sort_by_key(|tag| self.leases[tag].delivered);
        for tag in expired {
            self.drop_lease(tag, CancelReason::LeaseExpired);
        }
    }

    fn cancel(&mut self, tag: Tag, reason: CancelReason) {
        let lease = self.lease(tag);
        if let MState::Running {
            attempt,
            cancelled: cancelled @ None,
            ..
        } = &mut lease.state
        {
            *cancelled = Some(reason);
            let attempt = *attempt;
            self.counts.cancelled += 1;
            self.expected.push(Expect::Cancel {
                tag,
                attempt,
                reason,
            });
        }
    }

    /// The lease is not ours any more: announced, a running invocation is cancelled and
    /// becomes an orphan.
    fn drop_lease(&mut self, tag: Tag, reason: CancelReason) {
        if !self.lease(tag).state.is_held() {
            return;
        }
        // A `Done` whose ack is unconfirmed keeps it, as a late ack (at most `max_leases`).
        if let (
            CancelReason::LeaseExpired,
            MState::Settling {
                op: Op::Ack,
                in_flight,
                sent_gen,
                batch,
                ..
            },
        ) = (reason, &self.leases[&tag].state)
        {
            if self.late() < self.cfg.max_leases {
                let (in_flight, sent_gen, batch) = (*in_flight, *sent_gen, *batch);
                let stream = self.leases[&tag].stream;
                let retry_at = (!in_flight).then(|| self.now + self.late_backoff(stream));
                self.lease(tag).state = MState::Late {
                    in_flight,
                    sent_gen,
                    batch,
                    retry_at,
                    orphan: false,
                };
                return;
            }
        }
        let loss = match reason {
            CancelReason::LeaseExpired => {
                self.counts.expired += 1;
                LossReason::Expired
            }
            _ => {
                self.counts.lost += 1;
                LossReason::TakenOver
            }
        };
        // A `Done` of an invocation cancelled by its lease's expiry may still be acked: until
        // the cancel grace after the expiry, and before the invocation's own time limit.
        let ack_until = match (reason, &self.leases[&tag]) {
            (
                CancelReason::LeaseExpired,
                MLease {
                    state:
                        MState::Running {
                            started,
                            cancelled: None,
                            ..
                        },
                    confirmed,
                    ..
                },
            ) => Some(
                (*confirmed + self.ttl() + self.cfg.cancel_grace)
                    .min(*started + self.cfg.max_processing_time),
            ),
            _ => None,
        };
        self.announce_loss(tag, loss);
        self.cancel(tag, reason);
        let lease = self.lease(tag);
        lease.state = match lease.state {
            MState::Running { attempt, .. } => MState::Orphan {
                attempt,
                successor: None,
                ack_until,
            },
            _ => MState::Gone(match reason {
                CancelReason::LeaseExpired => End::Expired,
                _ => End::Lost,
            }),
        };
    }

    /// The `Lost` notice of a held lease: its validity left is what remains of its last
    /// confirmation's lease.
    fn announce_loss(&mut self, tag: Tag, reason: LossReason) {
        let until = self.leases[&tag].confirmed + self.ttl();
        let lease = &self.leases[&tag];
        self.expected.push(Expect::Lost {
            stream: lease.stream,
            msg: lease.msg.clone(),
            fence: lease.fence,
            reason,
            margin: until.saturating_duration_since(self.now),
        });
    }

    /// A lease's confirmation moved to the operation `seq` sent at `sent_at`, if that is newer:
    /// its running invocation hears of it.
    fn confirm(&mut self, tag: Tag, sent_at: Instant, seq: Seq) {
        let ttl = self.ttl();
        let lease = self.lease(tag);
        if lease.confirmed_seq >= seq {
            return;
        }
        lease.confirmed = sent_at;
        lease.confirmed_seq = seq;
        if let MState::Running {
            attempt,
            cancelled: None,
            ..
        } = lease.state
        {
            self.expected.push(Expect::Valid {
                tag,
                attempt,
                until: sent_at + ttl,
            });
        }
    }

    /// Decides a settle operation: a release or dead-letter is sent now, an ack waits for its
    /// stream's next batch.
    fn settle(&mut self, tag: Tag, op: Op, carry: Carry) {
        let lease = self.lease(tag);
        let fence = lease.fence;
        lease.state = MState::Settling {
            op,
            carry: carry.clone(),
            in_flight: true,
            sent_gen: lease.gen,
            batch: None,
            retry_at: None,
        };
        if op != Op::Ack {
            self.expected.push(Expect::Settle {
                tag,
                op,
                fence,
                carry,
            });
        }
    }

    /// Sends a late ack (again): it goes out with its stream's next `Ack`.
    fn send_late(&mut self, tag: Tag) {
        let lease = self.lease(tag);
        let orphan = matches!(
            lease.state,
            MState::Late { orphan: true, .. } | MState::Orphan { .. }
        );
        lease.state = MState::Late {
            in_flight: true,
            sent_gen: lease.gen,
            batch: None,
            retry_at: None,
            orphan,
        };
    }

    /// How long a late ack waits to be sent again: `poll_interval`, doubled per consecutive
    /// failed `Ack` call of its stream beyond the first, up to `fetch_backoff_max`;
    /// `poll_interval` during shutdown.
    fn late_backoff(&self, stream: StreamId) -> Duration {
        let poll = self.cfg.poll_interval;
        let failures = self.ack_failures[usize::from(stream.0)];
        if self.shutdown.is_some() || failures <= 1 {
            return poll;
        }
        poll.saturating_mul(1u32 << (failures - 1).min(20))
            .min(self.cfg.fetch_backoff_max)
    }

    /// Sends a settle operation again (after a transient failure, a stale `Lost`, or shutdown).
    fn resend(&mut self, tag: Tag) {
        if let MState::Settling { op, carry, .. } = &self.lease(tag).state {
            let (op, carry) = (*op, carry.clone());
            self.settle(tag, op, carry);
        }
    }

    fn fail(&mut self, tag: Tag, delay: Option<Duration>, error: String) {
        self.counts.failures += 1;
        let deliveries = self.lease(tag).delivery_count;
        if deliveries >= self.cfg.max_deliveries {
            let reason = DeadLetterReason::MaxDeliveries {
                deliveries,
                last_error: error,
            };
            self.settle(tag, Op::DeadLetter, Carry::Reason(reason));
        } else {
            let delay = delay.unwrap_or_else(|| self.backoff(deliveries));
            let lease = &self.leases[&tag];
            self.expected.push(Expect::Failed {
                stream: lease.stream,
                msg: lease.msg.clone(),
                fence: lease.fence,
                delivery_count: deliveries,
                error,
                retry_in: delay,
            });
            self.settle(tag, Op::Release, Carry::Delay(delay));
        }
    }

    /// The retry policy's backoff after `deliveries`, with the engine's jitter.
    fn backoff(&mut self, deliveries: u32) -> Duration {
        let retry = &self.cfg.retry;
        let exponent = deliveries.saturating_sub(1).min(1024) as i32;
        let max = retry.max.as_secs_f64();
        let secs = retry.initial.as_secs_f64() * retry.multiplier.powi(exponent);
        let secs = if secs.is_finite() { secs.min(max) } else { max };
        let jittered = secs * (1.0 - retry.jitter * self.jitter.next_f64());
        Duration::from_secs_f64(jittered.clamp(0.0, max))
    }

    /// `repoll_interval`, a delivery's first re-poll brought forward by the spread's jitter.
    fn repoll_delay(&mut self, tag: Tag) -> Duration {
        let interval = self.cfg.repoll_interval;
        if self.lease(tag).attempt == 1 && self.cfg.repoll_spread > 0.0 {
            interval.mul_f64(1.0 - self.cfg.repoll_spread * self.jitter.next_f64())
        } else {
            interval
        }
    }

    /// A fatal error stopped `stream`'s intake: `Halt` once (none after `Drained`: nothing
    /// follows it).
    fn halt(&mut self, stream: StreamId) {
        let halted = &mut self.halted[usize::from(stream.0)];
        if !std::mem::replace(halted, true) {
            self.counts.halted += 1;
            if !self.drained_expected {
                self.expected.push(Expect::Halt { stream });
            }
        }
    }

    // ----- inputs ------------------------------------------------------------------------------

    /// The engine was created: its first `finish`.
    pub(crate) fn created(&mut self) {
        self.begin(self.now);
        self.finish();
    }

    /// `handle_timeout`.
    pub(crate) fn timeout(&mut self, now: Instant) {
        self.begin(now);
        self.finish();
    }

    /// `handle_assignment`: whether `stream` may be fetched from; its leases are served either
    /// way, so nothing else changes.
    pub(crate) fn assignment(&mut self, now: Instant, stream: StreamId, fetching: bool) {
        self.begin(now);
        match self.assigned.get_mut(usize::from(stream.0)) {
            Some(assigned) => *assigned = fetching,
            None => self.counts.unexpected += 1,
        }
        self.finish();
    }

    /// `handle_fetched`: deliveries carry their tag as payload.
    pub(crate) fn fetched(&mut self, now: Instant, stream: StreamId, batch: &[Fetched<Tag>]) {
        self.begin(now);
        let (mut budget, sent_at, seq) = match self.fetches[usize::from(stream.0)].take() {
            Some(fetch) => {
                // A round trip: the fetch did not wait for new entries (asked not to, or
                // answered full).
                if fetch.wait.is_zero() || batch.len() >= fetch.max {
                    smooth(
                        &mut self.observed_rtt,
                        self.now.saturating_duration_since(fetch.sent_at),
                    );
                }
                (fetch.max, fetch.sent_at, fetch.seq)
            }
            // Nothing was asked: the deliveries are dated at the engine's clock (never at an
            // older `now`, which would put them out of send order).
            None => {
                self.counts.unexpected += 1;
                (0, self.now, (self.input, 0))
            }
        };
        let expired = sent_at + self.ttl() <= self.now;
        for message in batch {
            self.counts.delivered += 1;
            if expired {
                // The fetch took so long that its deliveries may have lapsed: none may be run,
                // held or acted on (not even a held message's new fence is adopted).
                self.counts.expired += 1;
                self.expected.push(Expect::Lost {
                    stream,
                    msg: message.id.clone(),
                    fence: message.fence,
                    reason: LossReason::Expired,
                    margin: Duration::ZERO,
                });
                continue;
            }
            if let Some(tag) = self.late_of(stream, &message.id) {
                // Delivered again since its ack went late: taken over (by whom, no fence tells),
                // its result discarded; the delivery is a new lease. An orphan's lease was
                // announced expired already.
                let lease = &self.leases[&tag];
                if !matches!(lease.state, MState::Late { orphan: true, .. }) {
                    self.counts.lost += 1;
                    self.expected.push(Expect::Lost {
                        stream: lease.stream,
                        msg: lease.msg.clone(),
                        fence: lease.fence,
                        reason: LossReason::TakenOver,
                        margin: Duration::ZERO,
                    });
                }
                self.lease(tag).state = MState::Gone(End::Lost);
            }
            self.deliveries += 1;
            let delivered = self.deliveries;
            if let Some(tag) = self.held_of(stream, &message.id) {
                self.counts.redelivered += 1;
                let lease = self.lease(tag);
                lease.gen += 1;
                lease.delivered = delivered;
                lease.fence = message.fence;
                lease.delivery_count = message.delivery_count;
                // A redelivery resets the backend's idle time like a renew does.
                lease.baseline = lease.baseline.max(sent_at);
                self.confirm(tag, sent_at, seq);
                continue;
            }
            let take = budget > 0 && self.shutdown.is_none();
            if !take && self.shutdown.is_none() {
                self.counts.overflow += 1;
            }
            let tag = message.payload;
            let orphan = self.orphan_of(stream, &message.id);
            self.leases.insert(
                tag,
                MLease {
                    stream,
                    msg: message.id.clone(),
                    id: None,
                    fence: message.fence,
                    delivery_count: message.delivery_count,
                    gen: 0,
                    delivered,
                    confirmed: sent_at,
                    confirmed_seq: seq,
                    baseline: sent_at,
                    overflow: !take,
                    attempt: 0,
                    state: MState::Blocked,
                },
            );
            if !take {
                self.settle(tag, Op::Release, Carry::Delay(Duration::ZERO));
                continue;
            }
            budget -= 1;
            if let Some(orphan) = orphan {
                if let MState::Orphan { successor, .. } = &mut self.lease(orphan).state {
                    *successor = Some(tag);
                }
            } else if self.running() < self.cfg.concurrency {
                self.start_run(tag);
            } else {
                self.make_ready(tag);
            }
        }
        self.finish();
    }

    /// `handle_fetch_failed`.
    pub(crate) fn fetch_failed(&mut self, now: Instant, stream: StreamId, kind: ErrorKind) {
        self.begin(now);
        match self.fetches[usize::from(stream.0)].take() {
            None => self.counts.unexpected += 1,
            Some(_) if kind == ErrorKind::Fatal => self.halt(stream),
            Some(_) => {}
        }
        self.finish();
    }

    /// `handle_outcome`.
    pub(crate) fn outcome(&mut self, now: Instant, inv: InvocationId, outcome: &Outcome) {
        self.begin(now);
        let Some(tag) = self.unreported.remove(&inv) else {
            self.counts.unexpected += 1;
            return self.finish();
        };
        self.old_invocations.push(inv);
        trim(&mut self.old_invocations);
        let state = self.lease(tag).state.clone();
        // A handler time, for the adaptive prefetch: of invocations that were not cancelled.
        if let MState::Running {
            started,
            cancelled: None,
            ..
        } = state
        {
            let took = self.now.saturating_duration_since(started);
            smooth(&mut self.observed_handler, took);
            self.observed_fresh = true;
        }
        match state {
            // Expired while running, `Done` within the grace: acked late, unless its message was
            // delivered here again meanwhile (a takeover) or the late acks are at their bound.
            MState::Orphan {
                successor: None,
                ack_until: Some(until),
                ..
            } if matches!(outcome, Outcome::Done)
                && self.now < until
                && self.late() < self.cfg.max_leases
                && self
                    .held_of(self.leases[&tag].stream, &self.leases[&tag].msg)
                    .is_none() =>
            {
                self.send_late(tag)
            }
            MState::Orphan { successor, .. } => {
                self.lease(tag).state = MState::Gone(End::OrphanReported);
                let blocked = successor.filter(|s| {
                    self.leases
                        .get(s)
                        .is_some_and(|l| l.state == MState::Blocked)
                });
                if let Some(next) = blocked {
                    if self.shutdown.is_some() {
                        self.settle(next, Op::Release, Carry::Delay(Duration::ZERO));
                    } else {
                        self.make_ready(next);
                    }
                }
            }
            MState::Running {
                cancelled: Some(CancelReason::MaxProcessingTime),
                ..
            } => self.fail(tag, None, "max processing time exceeded".into()),
            MState::Running {
                cancelled: Some(_), ..
            } => self.settle(tag, Op::Release, Carry::Delay(Duration::ZERO)),
            MState::Running {
                cancelled: None, ..
            } => match outcome {
                Outcome::Done => self.settle(tag, Op::Ack, Carry::Nothing),
                Outcome::Pending if self.shutdown.is_some() => {
                    self.settle(tag, Op::Release, Carry::Delay(Duration::ZERO))
                }
                Outcome::Pending => {
                    self.counts.pending += 1;
                    let due = self.now + self.repoll_delay(tag);
                    self.lease(tag).state = MState::Waiting { due };
                }
                Outcome::Retry { delay } => self.fail(tag, *delay, "handler asked to retry".into()),
                Outcome::Failed { error } => self.fail(tag, None, error.clone()),
                Outcome::Reject { reason } => self.settle(
                    tag,
                    Op::DeadLetter,
                    Carry::Reason(DeadLetterReason::Rejected(reason.clone())),
                ),
            },
            other => unreachable!("an unreported invocation's lease is {other:?}"),
        }
        self.finish();
    }

    /// `handle_renewed`: results apply before the clock advances.
    pub(crate) fn renewed(
        &mut self,
        now: Instant,
        batch: RenewId,
        results: &[(LeaseId, RenewResult)],
    ) {
        self.start(now);
        match self.answer_chunk(batch) {
            None => self.counts.unexpected += 1,
            Some((_, sent_at, seq, gens)) => {
                for (id, result) in results {
                    let Some(&tag) = self.by_id.get(id) else {
                        self.counts.unexpected += 1;
                        continue;
                    };
                    let lease = &self.leases[&tag];
                    let refenced = gens.get(&tag).is_none_or(|gen| lease.gen > *gen);
                    if !lease.state.is_held() || refenced {
                        self.counts.stale += 1;
                        continue;
                    }
                    let in_flight = lease.state.is_in_flight();
                    match result {
                        RenewResult::Kept => self.confirm(tag, sent_at, seq),
                        // An ack, release or dead-letter in flight may have removed the entry
                        // itself: its own answer tells what happened.
                        RenewResult::Lost if in_flight => {}
                        RenewResult::Lost => self.drop_lease(tag, CancelReason::LeaseLost),
                    }
                }
                self.close_round();
            }
        }
        self.advance();
        self.finish();
    }

    /// `handle_renew_failed`.
    pub(crate) fn renew_failed(&mut self, now: Instant, batch: RenewId, kind: ErrorKind) {
        self.begin(now);
        match self.answer_chunk(batch) {
            None => self.counts.unexpected += 1,
            Some((stream, ..)) => {
                if kind == ErrorKind::Fatal {
                    self.halt(stream);
                }
                self.close_round();
            }
        }
        self.finish();
    }

    /// Marks a chunk of the current round answered; its stream, the round's send time, order
    /// and gens if it was outstanding.
    #[allow(clippy::type_complexity)]
    fn answer_chunk(
        &mut self,
        batch: RenewId,
    ) -> Option<(StreamId, Instant, Seq, HashMap<Tag, u32>)> {
        let round = self.round.as_mut()?;
        let chunk = round
            .chunks
            .iter_mut()
            .find(|c| c.batch == batch && !c.answered)?;
        chunk.answered = true;
        self.old_chunks.push((chunk.batch, chunk.leases.clone()));
        trim(&mut self.old_chunks);
        Some((chunk.stream, round.sent_at, round.seq, round.gens.clone()))
    }

    fn close_round(&mut self) {
        if self
            .round
            .as_ref()
            .is_some_and(|r| r.chunks.iter().all(|c| c.answered))
        {
            self.round = None;
        }
    }

    /// The stream whose `Ack` `batch` is in flight, and its leases; no longer in flight.
    /// Counts the call's failure as a whole (`failed`), or resets the count.
    fn take_ack(&mut self, batch: AckId, failed: bool) -> Option<Vec<LeaseId>> {
        let s = self
            .acking
            .iter()
            .position(|a| a.as_ref().is_some_and(|a| a.batch == batch))?;
        let failures = &mut self.ack_failures[s];
        *failures = if failed {
            failures.saturating_add(1)
        } else {
            0
        };
        self.acking[s].take().map(|a| a.leases)
    }

    fn in_ack(&self, tag: Tag, batch: AckId) -> bool {
        matches!(
            self.leases[&tag].state,
            MState::Settling { op: Op::Ack, in_flight: true, batch: Some(b), .. }
            | MState::Late { in_flight: true, batch: Some(b), .. } if b == batch
        )
    }

    /// An answer for a lease not waiting for one: stale if the engine let it go meanwhile.
    fn not_settling(&mut self, tag: Option<Tag>) {
        match tag.map(|tag| &self.leases[&tag].state) {
            Some(MState::Gone(_)) => self.counts.stale += 1,
            _ => self.counts.unexpected += 1,
        }
    }

    /// `handle_acked`.
    pub(crate) fn acked(
        &mut self,
        now: Instant,
        batch: AckId,
        results: &[(LeaseId, SettleResult)],
    ) {
        self.start(now);
        for (id, _) in results {
            self.old_settles.push(OldSettle::Ack(batch, *id));
            trim(&mut self.old_settles);
        }
        match self.take_ack(batch, false) {
            None => self.counts.unexpected += 1,
            Some(leases) => {
                for (id, result) in results {
                    let tag = self.by_id.get(id).copied();
                    match tag.filter(|tag| self.in_ack(*tag, batch)) {
                        Some(tag) => self.settled(tag, *result, Op::Ack),
                        None => self.not_settling(tag),
                    }
                }
                for id in &leases {
                    let tag = self.by_id[id];
                    if self.in_ack(tag, batch) {
                        self.settled(tag, SettleResult::Failed, Op::Ack);
                    }
                }
            }
        }
        self.advance();
        self.finish();
    }

    /// `handle_ack_failed`.
    pub(crate) fn ack_failed(&mut self, now: Instant, batch: AckId, kind: ErrorKind) {
        self.start(now);
        match self.take_ack(batch, true) {
            None => self.counts.unexpected += 1,
            Some(leases) => {
                for id in &leases {
                    let tag = self.by_id[id];
                    if self.in_ack(tag, batch) {
                        self.settle_failed(tag, Op::Ack, kind);
                    }
                }
            }
        }
        self.advance();
        self.finish();
    }

    /// `handle_released` and `handle_dead_lettered`.
    pub(crate) fn settle_answered(
        &mut self,
        now: Instant,
        op: Op,
        id: LeaseId,
        result: Result<SettleResult, ErrorKind>,
    ) {
        self.start(now);
        self.old_settles.push(match op {
            Op::Release => OldSettle::Release(id),
            _ => OldSettle::DeadLetter(id),
        });
        trim(&mut self.old_settles);
        let tag = self.by_id.get(&id).copied();
        let sent = tag.is_some_and(|tag| {
            matches!(
                self.leases[&tag].state,
                MState::Settling { op: sent, in_flight: true, .. } if sent == op
            )
        });
        match (tag, result) {
            (Some(tag), Ok(result)) if sent => self.settled(tag, result, op),
            (Some(tag), Err(kind)) if sent => self.settle_failed(tag, op, kind),
            _ => self.not_settling(tag),
        }
        self.advance();
        self.finish();
    }

    /// The call for a settling lease failed: retried after a transient error; given up after a
    /// fatal one, which halts the stream.
    fn settle_failed(&mut self, tag: Tag, op: Op, kind: ErrorKind) {
        match kind {
            ErrorKind::Transient => self.settled(tag, SettleResult::Failed, op),
            ErrorKind::Fatal => {
                self.counts.abandoned += 1;
                if op == Op::Ack {
                    self.counts.abandoned_acks += 1;
                }
                let lease = self.lease(tag);
                lease.state = MState::Gone(End::Abandoned);
                let stream = lease.stream;
                self.halt(stream);
            }
        }
    }

    /// The backend answered the settle operation `op` for `tag`, which is in flight.
    fn settled(&mut self, tag: Tag, result: SettleResult, op: Op) {
        let now = self.now;
        let deadline_over = self.shutdown.is_some_and(|s| s.deadline <= now);
        let lease = &self.leases[&tag];
        if lease.state.is_late() {
            return self.late_settled(tag, result, deadline_over);
        }
        let MState::Settling { sent_gen, .. } = lease.state else {
            unreachable!("settled while {:?}", lease.state);
        };
        let refenced = lease.gen > sent_gen;
        let valid = lease.confirmed + self.ttl() > now;
        match result {
            SettleResult::Ok => {
                self.lease(tag).state = MState::Gone(End::Settled(op));
                match op {
                    Op::Ack => self.counts.acked += 1,
                    Op::Release => self.counts.released += 1,
                    Op::DeadLetter => self.counts.dead_lettered += 1,
                }
            }
            // A stale fence is retried with the new one, unless the lease lapsed: then the
            // expiry that follows this answer drops it.
            SettleResult::Lost if refenced && valid => {
                self.counts.stale += 1;
                self.resend(tag);
            }
            SettleResult::Lost if refenced => {
                self.counts.stale += 1;
                self.retry_later(tag);
            }
            SettleResult::Lost => {
                self.counts.lost += 1;
                self.announce_loss(tag, LossReason::LostAtSettle);
                self.lease(tag).state = MState::Gone(End::Lost);
            }
            SettleResult::Failed if deadline_over => {
                self.counts.abandoned += 1;
                if op == Op::Ack {
                    self.counts.abandoned_acks += 1;
                }
                self.lease(tag).state = MState::Gone(End::Abandoned);
            }
            SettleResult::Failed => self.retry_later(tag),
        }
    }

    /// The backend answered the late ack of `tag`: confirmed (the work is not redone), refused
    /// (taken over: announced, discarded), or failed (retried after the backoff, given up past
    /// the shutdown deadline).
    fn late_settled(&mut self, tag: Tag, result: SettleResult, over: bool) {
        let orphan = matches!(self.leases[&tag].state, MState::Late { orphan: true, .. });
        match result {
            SettleResult::Ok => {
                self.counts.acked += 1;
                self.counts.acked_late += 1;
                if orphan {
                    self.counts.acked_after_expiry += 1;
                }
                self.lease(tag).state = MState::Gone(End::Settled(Op::Ack));
            }
            // An orphan's lease was announced expired already.
            SettleResult::Lost if orphan => {
                self.lease(tag).state = MState::Gone(End::Lost);
            }
            SettleResult::Lost => {
                self.counts.lost += 1;
                let lease = &self.leases[&tag];
                self.expected.push(Expect::Lost {
                    stream: lease.stream,
                    msg: lease.msg.clone(),
                    fence: lease.fence,
                    reason: LossReason::LostAtSettle,
                    margin: Duration::ZERO,
                });
                self.lease(tag).state = MState::Gone(End::Lost);
            }
            SettleResult::Failed if over => {
                self.counts.abandoned += 1;
                self.counts.abandoned_acks += 1;
                self.lease(tag).state = MState::Gone(End::Abandoned);
            }
            SettleResult::Failed => {
                let stream = self.leases[&tag].stream;
                let at = self.now + self.late_backoff(stream);
                self.lease(tag).state = MState::Late {
                    in_flight: false,
                    sent_gen: 0,
                    batch: None,
                    retry_at: Some(at),
                    orphan,
                };
            }
        }
    }

    /// The settle call is sent again after `poll_interval`.
    fn retry_later(&mut self, tag: Tag) {
        let at = self.now + self.cfg.poll_interval;
        if let MState::Settling {
            in_flight,
            retry_at,
            batch,
            ..
        } = &mut self.lease(tag).state
        {
            *in_flight = false;
            *batch = None;
            *retry_at = Some(at);
        }
    }

    /// `handle_shutdown`.
    pub(crate) fn shutdown(&mut self, now: Instant, deadline: Instant) {
        self.begin(now);
        match &mut self.shutdown {
            Some(shutdown) => {
                if !shutdown.cancelled_running {
                    shutdown.deadline = shutdown.deadline.min(deadline);
                }
            }
            None => {
                self.shutdown = Some(Shutdown {
                    deadline,
                    cancelled_running: false,
                });
                for tag in self.tags(|l| {
                    matches!(
                        l.state,
                        MState::Waiting { .. } | MState::Ready { .. } | MState::Blocked
                    )
                }) {
                    self.settle(tag, Op::Release, Carry::Delay(Duration::ZERO));
                }
                for tag in self.tags(|l| {
                    matches!(
                        l.state,
                        MState::Settling {
                            in_flight: false,
                            ..
                        }
                    )
                }) {
                    self.resend(tag);
                }
                for tag in self.tags(|l| {
                    matches!(
                        l.state,
                        MState::Late {
                            in_flight: false,
                            ..
                        }
                    )
                }) {
                    self.send_late(tag);
                }
            }
        }
        self.advance();
        self.finish();
    }

    // ----- after the effects are drained ---------------------------------------------------

    /// Clears what one drain's effects were matched against.
    pub(crate) fn drained_effects(&mut self) {
        self.expected.clear();
        self.snapshots.clear();
        self.new_chunks.clear();
        self.fetches_polled = 0;
        self.polled = None;
    }

    // ----- counts ------------------------------------------------------------------------------

    pub(crate) fn held(&self) -> usize {
        self.leases.values().filter(|l| l.state.is_held()).count()
    }

    /// Late acks pending.
    pub(crate) fn late(&self) -> usize {
        self.leases.values().filter(|l| l.state.is_late()).count()
    }

    /// Invocations occupying a slot (running, cancelled or orphaned, seen or not).
    pub(crate) fn running(&self) -> usize {
        self.leases
            .values()
            .filter(|l| l.state.is_running())
            .count()
    }

    /// Held leases counted against `max_leases`: overflow deliveries are excluded (they are
    /// released at once and never run).
    pub(crate) fn held_counted(&self) -> usize {
        self.leases
            .values()
            .filter(|l| l.state.is_held() && !l.overflow)
            .count()
    }

    /// Slots promised to outstanding fetches.
    pub(crate) fn reserved(&self) -> usize {
        self.fetches.iter().flatten().map(|f| f.max).sum()
    }

    /// How many messages fetches may ask for now: free slots and prefetch room not promised to
    /// ready or blocked leases or to outstanding fetches, within `max_leases`; an adaptive
    /// prefetch only once an invocation ended since the last fetch was sent.
    pub(crate) fn fetch_budget(&self) -> usize {
        let waiting = self
            .leases
            .values()
            .filter(|l| matches!(l.state, MState::Ready { .. } | MState::Blocked))
            .count();
        let reserved = self.reserved();
        // The prefetch, only while an invocation ended since the last fetch was sent.
        let ahead = if self.observed_fresh || !self.cfg.adaptive_prefetch {
            self.prefetch()
        } else {
            0
        };
        let slots =
            (self.cfg.concurrency + ahead).saturating_sub(self.running() + waiting + reserved);
        let leases = self.cfg.max_leases.saturating_sub(self.held() + reserved);
        slots.min(leases)
    }

    /// Slots plus prefetch room: what running invocations and outstanding fetches may fill.
    pub(crate) fn capacity(&self) -> usize {
        self.cfg.concurrency + self.prefetch()
    }

    /// The prefetch in force: the configured one, or the adaptive one, computed here from
    /// what the model saw: `4 × concurrency × round trip / handler time` (smoothed samples of
    /// fetches that did not wait and of invocations that were not cancelled; the handler time
    /// never below the age of the oldest running invocation), at most the ceiling, 0 before
    /// both were observed.
    pub(crate) fn prefetch(&self) -> usize {
        if !self.cfg.adaptive_prefetch {
            return self.cfg.prefetch;
        }
        let (Some(handler), Some(rtt)) = (self.observed_handler, self.observed_rtt) else {
            return 0;
        };
        let oldest = self
            .leases
            .values()
            .filter_map(|l| match l.state {
                MState::Running {
                    started,
                    cancelled: None,
                    ..
                } => Some(started),
                _ => None,
            })
            .min();
        let age = oldest.map_or(0, |started| {
            u64::try_from(self.now.saturating_duration_since(started).as_nanos())
                .unwrap_or(u64::MAX)
        });
        let handler = u128::from(handler.max(age).max(1));
        let wanted = 4 * self.cfg.concurrency as u128 * u128::from(rtt) / handler;
        wanted.min(self.cfg.prefetch as u128) as usize
    }

    /// Whether a ready lease must start: a slot is free beyond the part of the outstanding
    /// fetches' reservation that the prefetch's ceiling (`cfg.prefetch`, not the adaptive
    /// prefetch now, which may have shrunk since they were sent) does not cover.
    pub(crate) fn slot_free(&self) -> bool {
        self.running() + self.reserved().saturating_sub(self.cfg.prefetch) < self.cfg.concurrency
    }

    /// The `Ack` batches in flight, for the harness to answer.
    pub(crate) fn ack_batches(&self) -> Vec<(AckId, Vec<LeaseId>)> {
        self.acking
            .iter()
            .flatten()
            .map(|a| (a.batch, a.leases.clone()))
            .collect()
    }
}

fn trim<T>(history: &mut Vec<T>) {
    if history.len() > HISTORY {
        history.remove(0);
    }
}
