//! What the simulation knows and checks as it runs: the messages, every handler invocation,
//! the latest delivery of each message (from the store's own fetch results), and the replicas'
//! states. The backends, the handlers and the simulation share it behind one lock; a check that
//! fails records the seed's [`Failure`], and the simulation stops at its next step.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use leasehold_core::{
    CancelReason, Due, Fetched, LeaseRef, MessageId, Outcome, Settings, SettleResult,
};
use leasehold_memory::Bytes;
use leasehold_worker::{Cancellation, ShutdownReport};

use crate::behaviour::Behaviour;
use crate::rng::Rng;
use crate::runtime::SimClock;
use crate::store::{ConsumerId, SimStore};
use crate::trace::{Event, OpKind, Trace};
use crate::{Check, Failure, SeedReport, SimConfig};

/// What everyone shares: behind [`Shared::lock`].
pub(crate) type SharedState = Arc<Mutex<Shared>>;

/// How a message left the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Removal {
    Acked,
    DeadLettered,
}

/// How a message is published: when it is due, its deduplication key, and whether (and how
/// long after its publish) it is published a second time.
#[derive(Debug, Clone)]
pub(crate) struct PublishPlan {
    pub(crate) due: Option<Due>,
    pub(crate) key: Option<String>,
    pub(crate) again_after: Option<Duration>,
}

impl PublishPlan {
    /// The delay after its publish before the message may be delivered.
    pub(crate) fn delay(&self) -> Duration {
        match self.due {
            Some(Due::After(delay)) => delay,
            // The simulator's wall-clock due times are in the past: at once.
            Some(Due::At(_)) | None => Duration::ZERO,
        }
    }
}

/// The payload of message `m`: how a delivery of a delayed message, whose entry id the
/// publish could not tell, is known.
pub(crate) fn payload(m: usize) -> Bytes {
    Bytes::from(format!("message {m}"))
}

fn payload_index(payload: &[u8]) -> Option<usize> {
    std::str::from_utf8(payload)
        .ok()?
        .strip_prefix("message ")?
        .parse()
        .ok()
}

/// One message, as the checker follows it.
pub(crate) struct Msg {
    /// Its entry id (empty until it is known: a delayed message gets one when it is due).
    pub(crate) id: MessageId,
    pub(crate) behaviour: Behaviour,
    pub(crate) plan: PublishPlan,
    /// When it is published (virtual time).
    pub(crate) publish_at: Duration,
    /// The id its publish answered (`delayed:<n>` for a delayed message).
    pub(crate) published_id: Option<MessageId>,
    /// Its due time (virtual), if it was published with one: no delivery before it.
    pub(crate) due: Option<Duration>,
    /// A second publish with its deduplication key is still to come.
    pub(crate) again_pending: bool,
    pub(crate) published: bool,
    /// Invocations so far, across replicas (a behaviour's plan follows this count).
    pub(crate) invocations: u32,
    /// The checker's own view of the current delivery: (consumer, fence), from fetch results.
    pub(crate) owner: Option<(ConsumerId, u64)>,
    /// Every delivery so far, in fence order.
    pub(crate) deliveries: Vec<(ConsumerId, u64)>,
    pub(crate) removed: Option<(Removal, ConsumerId)>,
    /// Consumers an invocation of which returned a `Done` that may be acked (see
    /// [`InvocationRecord::done_stands`]).
    pub(crate) done_by: Vec<ConsumerId>,
    /// Consumers an invocation of which failed, was rejected, or ran past its time limit.
    pub(crate) failed_by: Vec<ConsumerId>,
}

/// One handler invocation.
pub(crate) struct InvocationRecord {
    pub(crate) msg: usize,
    pub(crate) replica: usize,
    pub(crate) consumer: ConsumerId,
    pub(crate) fence: u64,
    /// The invocation's cancellation: once it fired the invocation is no longer live (its
    /// result will be discarded), whether or not the handler has noticed yet.
    pub(crate) cancellation: Cancellation,
    /// The reason the handler saw, if it saw one.
    pub(crate) cancel_seen: Option<CancelReason>,
    /// The handler returned or was dropped.
    pub(crate) ended: bool,
    /// Another replica started the message while this one was live on a paused (or stalled)
    /// replica.
    pub(crate) superseded: bool,
    /// What it returned, and whether it was cancelled then.
    pub(crate) outcome: Option<(Outcome, bool)>,
    /// It returned `Done` that may be acked: uncancelled, or cancelled because its lease
    /// expired locally (a fenced late ack; the driver drops a handler that outlives the cancel
    /// grace, so a returned one came within it), and within its time limit either way.
    pub(crate) done_stands: bool,
}

impl InvocationRecord {
    /// Running, and its result still counts.
    pub(crate) fn is_live(&self) -> bool {
        !self.ended && !self.cancellation.is_cancelled()
    }
}

/// A replica, as the checker sees it.
#[derive(Debug, Clone, Default)]
pub(crate) struct ReplicaView {
    pub(crate) incarnation: u32,
    pub(crate) consumer: ConsumerId,
    /// Stopped for the moment (a pause), or its clock stalled: it cannot act on what it knows.
    pub(crate) frozen: bool,
    /// Woke at this instant and has not reacted yet: what it runs is not checked until then.
    pub(crate) waking: bool,
    /// Its worker is shutting down (a graceful restart, or the end).
    pub(crate) shutting_down: bool,
    /// What the store accepted from this incarnation: acks, releases and dead letters.
    pub(crate) accepted: Accepted,
    /// Until when its connection to the store is degraded.
    pub(crate) link_bad_until: Duration,
    /// When its worker's shutdown report came (no handler may run after it).
    pub(crate) reported_at: Option<Duration>,
    /// When it last stopped being frozen (a pause or a clock stall ended).
    pub(crate) thawed_at: Duration,
}

/// How the store is unavailable during an outage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OutageMode {
    /// Down (crashed, restarting): a call reaching it fails, a fetch blocked in it ends with
    /// an error.
    Down,
    /// Paused: a call reaching it waits until it is back, then executes.
    Paused,
}

/// One outage of the store, over `from .. until` (virtual time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Outage {
    pub(crate) mode: OutageMode,
    pub(crate) from: Duration,
    pub(crate) until: Duration,
}

/// The text of every fatal error the simulated network injects.
pub(crate) const INJECTED_FATAL: &str = "NOPERM the store refused the call";

/// Settle calls the store accepted from one incarnation, to hold its shutdown report to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Accepted {
    pub(crate) acked: u64,
    pub(crate) released: u64,
    pub(crate) dead_lettered: u64,
}

/// A deliberately broken driver, to show the checks catch one (see `SimConfig::broken`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BrokenDriver {
    /// Acks the leases whose invocations were cancelled for losing their lease to a takeover (it
    /// executes a `Done` that the engine discarded): caught as a single-runner violation. (A
    /// `Done` after an expiry is the engine's to ack late, fenced.)
    AcksAfterLoss,
    /// Drops the last result of every renew reply (an off-by-one in reading it): the worker
    /// must refuse the reply rather than pair results with the wrong leases, caught as a
    /// worker stopped by an error the simulator never injected.
    DropsRenewResult,
    /// Reports a renew's `Lost` results as `Kept` (a misread reply): the engine keeps running
    /// a message another replica has taken, caught as a single-runner violation.
    KeepsLostLeases,
    /// Answers the releases of a shutting-down worker without making them: its report claims
    /// hand-offs the store never saw, and the leases lapse a claim timeout later.
    ForgetsLeaseAtShutdown,
    /// Holds the calls that reach a store that is down, and sends them once it is back after
    /// a reconnection backoff of a claim timeout (a reconnecting client that queues what it is
    /// asked meanwhile): a fetch held so arrives with its leases spent, later than the outage
    /// alone forces. Needs outages ([`Profile::StoreOutage`](crate::Profile::StoreOutage)):
    /// caught as an expiry in transit.
    QueuesWhileDown,
}

impl BrokenDriver {
    /// The command-line name (`--broken NAME`).
    pub fn name(self) -> &'static str {
        match self {
            BrokenDriver::AcksAfterLoss => "acks-after-loss",
            BrokenDriver::DropsRenewResult => "drops-renew-result",
            BrokenDriver::KeepsLostLeases => "keeps-lost-leases",
            BrokenDriver::ForgetsLeaseAtShutdown => "forgets-lease-at-shutdown",
            BrokenDriver::QueuesWhileDown => "queues-while-down",
        }
    }

    /// Parses a command-line name.
    pub fn parse(name: &str) -> Option<Self> {
        [
            BrokenDriver::AcksAfterLoss,
            BrokenDriver::DropsRenewResult,
            BrokenDriver::KeepsLostLeases,
            BrokenDriver::ForgetsLeaseAtShutdown,
            BrokenDriver::QueuesWhileDown,
        ]
        .into_iter()
        .find(|b| b.name() == name)
    }
}

/// The shared state of one seed.
pub(crate) struct Shared {
    pub(crate) cfg: SimConfig,
    pub(crate) seed: u64,
    pub(crate) settings: Settings,
    /// The world's clock: the store's time.
    pub(crate) clock: SimClock,
    pub(crate) base: Instant,
    pub(crate) store: Box<dyn SimStore + Send>,
    /// Faults and delays of calls, and handlers' plans (the world has its own generator).
    pub(crate) rng: Rng,
    pub(crate) msgs: Vec<Msg>,
    pub(crate) by_id: HashMap<MessageId, usize>,
    pub(crate) invocations: Vec<InvocationRecord>,
    pub(crate) replicas: Vec<ReplicaView>,
    pub(crate) faults_active: bool,
    /// Whether shutdown has begun (every replica was asked to stop).
    pub(crate) shutting_down: bool,
    /// The instant the last fault's effect is over, so far.
    pub(crate) quiet_at: Duration,
    pub(crate) next_call: u32,
    pub(crate) trace: Trace,
    pub(crate) report: SeedReport,
    pub(crate) failure: Option<Box<Failure>>,
    /// Pauses a backend asked for right after a heartbeat went out: (replica, in how long).
    pub(crate) pauses_requested: Vec<(usize, Duration)>,
    /// Every outage of the store so far, the current one last.
    pub(crate) outages: Vec<Outage>,
}

impl Shared {
    /// The virtual time since the start.
    pub(crate) fn now(&self) -> Duration {
        self.instant().saturating_duration_since(self.base)
    }

    /// The world's instant (the store's clock).
    pub(crate) fn instant(&self) -> Instant {
        leasehold_memory::Clock::now(&self.clock)
    }

    pub(crate) fn log(&mut self, event: Event) {
        let now = self.now();
        self.trace.push(now, event);
    }

    /// Records the seed's failure (the first one counts).
    pub(crate) fn fail(&mut self, check: Check, detail: String) {
        if self.failure.is_none() {
            self.failure = Some(Box::new(Failure {
                seed: self.seed,
                check,
                at: self.now(),
                detail,
                replay: self.cfg.replay_command(self.seed),
                settings: describe(&self.settings),
                trace: self.trace.lines(),
            }));
        }
    }

    /// Notes an instant a fault still has an effect at: the liveness bound starts after it.
    pub(crate) fn fault_effect_until(&mut self, at: Duration) {
        if self.faults_active {
            self.quiet_at = self.quiet_at.max(at);
        }
    }

    /// The outage the store is in now, if any.
    pub(crate) fn outage(&self) -> Option<Outage> {
        let now = self.now();
        self.outages
            .last()
            .copied()
            .filter(|o| o.from <= now && now < o.until)
    }

    /// A fetch of `replica` (call `call`, sent at `sent`, its fault `fault`) brought `n`
    /// deliveries now. If their leases are spent (it took a lease's validity or more), some
    /// fault must force that: the call was slow, its replica was paused or stalled meanwhile,
    /// or the store was paused meanwhile long enough on its own (until no earlier than a
    /// lease's validity after the send, less a fault-free round trip).
    pub(crate) fn check_in_transit(
        &mut self,
        replica: usize,
        call: u32,
        sent: Duration,
        fault: crate::trace::Fault,
        n: usize,
    ) {
        let now = self.now();
        let ttl = self
            .settings
            .claim_timeout
            .saturating_sub(self.settings.expiry_margin);
        if n == 0 || now.saturating_sub(sent) < ttl {
            return;
        }
        let view = &self.replicas[replica];
        let frozen = view.frozen || view.waking || view.thawed_at >= sent;
        let slow = fault == crate::trace::Fault::Slow;
        let rtt = self.cfg.latency * 2;
        // Only a paused store holds a call: a correct client's calls to one that is down fail.
        let outage = self
            .outages
            .iter()
            .any(|o| o.mode == OutageMode::Paused && o.from <= now && o.until + rtt >= sent + ttl);
        self.log(Event::ExpiredInTransit {
            r: replica as u16,
            call,
            n: n as u32,
            after: now - sent,
        });
        if slow || frozen || outage {
            self.report.expired_in_transit += n as u64;
            return;
        }
        self.fail(
            Check::InTransit,
            format!(
                "fetch#{call} of r{replica}, sent at {:.6}s, brought {n} deliveries {:?} later, \
                 past their lease ({ttl:?}), and no fault forces that (not slow, its replica \
                 not frozen, no outage that long)",
                sent.as_secs_f64(),
                now - sent
            ),
        );
    }

    pub(crate) fn message_index(&self, id: &MessageId) -> usize {
        self.by_id[id]
    }

    pub(crate) fn msg_fences(&self, lease_refs: &[LeaseRef]) -> Box<[(u32, u64)]> {
        lease_refs
            .iter()
            .map(|l| (self.message_index(&l.id) as u32, l.fence.0))
            .collect()
    }

    // ----- handlers ----------------------------------------------------------------------------

    /// Invocation of message `id` (fence `fence`) starts on `replica`: serial per message, and
    /// no other live runner unless the one holding the older lease (lower fence) is frozen:
    /// a paused runner was taken over, or a starter whose clock stalls acts on a lease it
    /// cannot know has lapsed. That invocation is superseded, and must be cancelled once its
    /// replica wakes.
    pub(crate) fn start_invocation(
        &mut self,
        replica: usize,
        id: &MessageId,
        fence: u64,
        cancellation: Cancellation,
    ) -> (usize, u32) {
        let msg = self.message_index(id);
        if let Some(due) = self.msgs[msg].due.filter(|&due| self.now() < due) {
            let now = self.now();
            self.fail(
                Check::DueTime,
                format!(
                    "r{replica} starts m{msg} at {:.6}s, before its due time {:.6}s",
                    now.as_secs_f64(),
                    due.as_secs_f64()
                ),
            );
        }
        let view = &self.replicas[replica];
        let consumer = view.consumer;
        if view.reported_at.is_some() {
            self.fail(
                Check::NoLeak,
                format!("r{replica} runs m{msg} after its worker's shutdown report"),
            );
        }
        if let Some(other) = self.invocations.iter().find(|invocation| {
            invocation.msg == msg && invocation.replica == replica && !invocation.ended
        }) {
            let cancelled = other.cancellation.reason();
            self.fail(
                Check::SingleRunner,
                format!(
                    "r{replica} starts m{msg} again while its previous invocation has not \
                     ended (cancelled: {cancelled:?})"
                ),
            );
        }
        let mut overlaps_frozen = false;
        let mut starter_superseded = false;
        let frozen = |view: &ReplicaView| view.frozen || view.waking;
        let starter_frozen = frozen(&self.replicas[replica]);
        let others: Vec<usize> = (0..self.invocations.len())
            .filter(|&i| self.invocations[i].msg == msg && self.invocations[i].is_live())
            .collect();
        for &i in &others {
            let other = self.invocations[i].replica;
            let older_is_other = self.invocations[i].fence < fence;
            if older_is_other && frozen(&self.replicas[other]) {
                overlaps_frozen = true;
                self.invocations[i].superseded = true;
            } else if !older_is_other && starter_frozen {
                overlaps_frozen = true;
                starter_superseded = true;
            } else {
                self.fail(
                    Check::SingleRunner,
                    format!(
                        "r{replica} starts m{msg} (fence {fence}) while r{other} still runs it \
                         and is neither paused nor stalled"
                    ),
                );
            }
        }
        if overlaps_frozen {
            self.report.paused_overlaps += 1;
        }
        let m = &mut self.msgs[msg];
        m.invocations += 1;
        let n = m.invocations;
        if n > 1 {
            self.report.reinvocations += 1;
        }
        self.report.invocations += 1;
        self.invocations.push(InvocationRecord {
            msg,
            replica,
            consumer,
            fence,
            cancellation,
            cancel_seen: None,
            done_stands: false,
            ended: false,
            superseded: starter_superseded,
            outcome: None,
        });
        self.log(Event::Run {
            r: replica as u16,
            m: msg as u32,
            fence,
            n,
            overlaps_paused: overlaps_frozen,
        });
        (self.invocations.len() - 1, n)
    }

    /// The handler of `invocation` saw its cancellation.
    pub(crate) fn cancel_seen(&mut self, invocation: usize, reason: CancelReason) {
        let rec = &mut self.invocations[invocation];
        rec.cancel_seen = Some(reason);
        let (r, m) = (rec.replica as u16, rec.msg as u32);
        self.timed_out(invocation);
        self.log(Event::Cancelled { r, m, reason });
    }

    /// An invocation cancelled for running past `max_processing_time` is a failed attempt,
    /// whatever it returns: its message may be dead-lettered for it.
    fn timed_out(&mut self, invocation: usize) {
        let rec = &self.invocations[invocation];
        if rec.cancellation.reason() == Some(CancelReason::MaxProcessingTime) {
            let (msg, consumer) = (rec.msg, rec.consumer);
            if !self.msgs[msg].failed_by.contains(&consumer) {
                self.msgs[msg].failed_by.push(consumer);
            }
        }
    }

    /// The handler of `invocation` returned `outcome`, `overran` if it did so
    /// `max_processing_time` or more after it started, by its replica's clock. Such a result
    /// reaches the engine at or after the invocation's deadline, which the engine passes first:
    /// the invocation is cancelled for its time limit, a failed attempt, even if the
    /// cancellation could not reach the handler before it returned (a clock stall that ends
    /// after both were due).
    pub(crate) fn returned(&mut self, invocation: usize, outcome: &Outcome, overran: bool) {
        let rec = &mut self.invocations[invocation];
        let cancelled = rec.cancellation.is_cancelled() || overran;
        let expired = rec.cancellation.reason() == Some(CancelReason::LeaseExpired);
        rec.done_stands = matches!(outcome, Outcome::Done) && !overran && (!cancelled || expired);
        if overran {
            let (msg, consumer) = (rec.msg, rec.consumer);
            if !self.msgs[msg].failed_by.contains(&consumer) {
                self.msgs[msg].failed_by.push(consumer);
            }
        }
        let rec = &mut self.invocations[invocation];
        rec.outcome = Some((outcome.clone(), cancelled));
        rec.ended = true;
        let (msg, consumer, r) = (rec.msg, rec.consumer, rec.replica);
        self.timed_out(invocation);
        let stands = self.invocations[invocation].done_stands;
        let m = &mut self.msgs[msg];
        match outcome {
            Outcome::Done if stands => m.done_by.push(consumer),
            Outcome::Failed { .. } | Outcome::Retry { .. } | Outcome::Reject { .. }
                if !cancelled =>
            {
                m.failed_by.push(consumer)
            }
            _ => {}
        }
        self.log(Event::Outcome {
            r: r as u16,
            m: msg as u32,
            outcome: short(outcome),
            cancelled,
        });
    }

    /// The driver dropped the handler of `invocation` (it did not stop within the cancel grace).
    pub(crate) fn dropped(&mut self, invocation: usize) {
        let rec = &mut self.invocations[invocation];
        if !rec.ended {
            rec.ended = true;
            let (r, m) = (rec.replica as u16, rec.msg as u32);
            self.timed_out(invocation);
            self.log(Event::Dropped { r, m });
        }
    }

    /// A replica crashed: its invocations end with it.
    pub(crate) fn crashed(&mut self, replica: usize) {
        for invocation in self.invocations.iter_mut().filter(|r| r.replica == replica) {
            invocation.ended = true;
        }
    }

    /// No two live invocations of one message on replicas that are not frozen.
    pub(crate) fn check_single_runner(&mut self) {
        let mut live: HashMap<usize, usize> = HashMap::new();
        let mut clash = None;
        for (i, invocation) in self.invocations.iter().enumerate() {
            let view = &self.replicas[invocation.replica];
            if !invocation.is_live() || view.frozen || view.waking {
                continue;
            }
            if let Some(&j) = live.get(&invocation.msg) {
                clash = Some((j, i));
                break;
            }
            live.insert(invocation.msg, i);
        }
        if let Some((a, b)) = clash {
            let (ra, rb) = (&self.invocations[a], &self.invocations[b]);
            let how = if ra.superseded || rb.superseded {
                " (one took it over while the other was paused or stalled; when that one woke, \
                 its invocation was not cancelled)"
            } else {
                ""
            };
            let detail = format!(
                "m{} runs on r{} and on r{} at once, neither paused nor stalled{how}",
                ra.msg, ra.replica, rb.replica
            );
            self.fail(Check::SingleRunner, detail);
        }
    }

    /// A worker stopped, or a stream halted, on `error`: only a fatal error the simulator
    /// injected may do that (a transient one must be retried, a healthy answer accepted).
    pub(crate) fn check_halt_cause(&mut self, replica: usize, error: &str) {
        if !error.contains(INJECTED_FATAL) {
            self.fail(
                Check::Engine,
                format!("r{replica}'s worker stopped on an error nobody injected: {error}"),
            );
        }
    }

    /// A worker's shutdown report claims no more acks, releases and dead letters than the
    /// store accepted from its incarnation (a lost answer makes the store's count the larger).
    pub(crate) fn check_report(&mut self, replica: usize, report: &ShutdownReport) {
        let store = self.replicas[replica].accepted;
        let claimed = Accepted {
            acked: report.acked,
            released: report.released,
            dead_lettered: report.dead_lettered,
        };
        if claimed.acked > store.acked
            || claimed.released > store.released
            || claimed.dead_lettered > store.dead_lettered
        {
            self.fail(
                Check::NoLeak,
                format!(
                    "r{replica}'s shutdown report claims {claimed:?}, but the store accepted \
                     only {store:?} from it: it handed back leases it still holds"
                ),
            );
        }
    }

    /// `replica` just woke (a pause or a clock stall ended) and reacted: whatever another
    /// replica took over meanwhile must be cancelled by now.
    pub(crate) fn check_woke(&mut self, replica: usize) {
        self.replicas[replica].waking = false;
        let stale = self
            .invocations
            .iter()
            .find(|invocation| {
                invocation.replica == replica && invocation.superseded && invocation.is_live()
            })
            .map(|invocation| invocation.msg);
        if let Some(msg) = stale {
            self.fail(
                Check::SingleRunner,
                format!(
                    "r{replica} woke from a pause or stall past its lease and still runs m{msg} \
                     (not cancelled), while another replica took it over meanwhile"
                ),
            );
        }
    }

    /// The driver of `replica` asks to ack these leases: each must follow a `Done` of an
    /// invocation that was neither cancelled nor taken over, under that lease or an older one
    /// of the same consumer with no other consumer's delivery between (its own fetch took the
    /// message back while the ack was on its way: nobody else ran it).
    pub(crate) fn check_ack(&mut self, replica: usize, lease_refs: &[LeaseRef]) {
        for lease_ref in lease_refs {
            let msg = self.message_index(&lease_ref.id);
            let fence = lease_ref.fence.0;
            let last = self.invocations.iter().rev().find(|invocation| {
                invocation.replica == replica
                    && invocation.msg == msg
                    && invocation.fence <= fence
                    && self.msgs[msg]
                        .deliveries
                        .iter()
                        .filter(|(_, f)| (invocation.fence..=fence).contains(f))
                        .all(|&(c, _)| c == invocation.consumer)
            });
            let ok =
                last.is_some_and(|invocation| invocation.done_stands && !invocation.superseded);
            if !ok {
                let what = match last {
                    None => format!("m{msg} (fence {fence}), which never ran there"),
                    Some(invocation) if invocation.superseded => format!(
                        "m{msg}, whose invocation another replica took over while r{replica} \
                         was paused or stalled"
                    ),
                    Some(invocation) => match &invocation.outcome {
                        None => format!("m{msg} while its handler still runs"),
                        Some((outcome, true)) => format!(
                            "m{msg}, whose {outcome:?} came after its cancellation ({:?}, or \
                             past its time limit)",
                            invocation.cancellation.reason()
                        ),
                        Some((outcome, false)) => format!("m{msg} after {outcome:?}"),
                    },
                };
                self.fail(
                    Check::SingleRunner,
                    format!("r{replica} acks {what}: its result should have been discarded"),
                );
            }
        }
    }

    // ----- the store --------------------------------------------------------------------------

    /// The message a fetch delivered. A delayed message's first delivery is the first time its
    /// entry id is seen: it is known by its payload then, and must not be in the stream under
    /// another id already (a deduplicated publish enqueued it twice).
    pub(crate) fn fetched_index(&mut self, fetched: &Fetched<Bytes>) -> usize {
        if let Some(&m) = self.by_id.get(&fetched.id) {
            return m;
        }
        let m = payload_index(&fetched.payload)
            .filter(|&m| m < self.msgs.len())
            .expect("the store delivers only what the simulator published");
        let known = &self.msgs[m].id;
        if !known.as_str().is_empty() {
            let detail = format!(
                "m{m} is in the stream twice, as {known} and as {}: a publish with its \
                 deduplication key enqueued it again",
                fetched.id
            );
            self.fail(Check::Dedupe, detail);
        }
        self.msgs[m].id = fetched.id.clone();
        self.by_id.insert(fetched.id.clone(), m);
        m
    }

    /// The store delivered message `msg` to `consumer` with `fence`.
    pub(crate) fn delivered(&mut self, msg: usize, consumer: ConsumerId, fence: u64) {
        let m = &self.msgs[msg];
        if let Some(due) = m.due.filter(|&due| self.now() < due) {
            let now = self.now();
            self.fail(
                Check::DueTime,
                format!(
                    "the store delivered m{msg} to c{} at {:.6}s, before its due time {:.6}s",
                    consumer.0,
                    now.as_secs_f64(),
                    due.as_secs_f64()
                ),
            );
            return;
        }
        let m = &self.msgs[msg];
        if m.removed.is_some() {
            self.fail(
                Check::NothingLost,
                format!("the store delivered m{msg}, which was already acked or dead-lettered"),
            );
            return;
        }
        if let Some((_, old)) = m.owner {
            if fence <= old {
                self.fail(
                    Check::Fencing,
                    format!(
                        "m{msg} redelivered to c{} with fence {fence}, not above {old}",
                        consumer.0
                    ),
                );
            }
        }
        self.msgs[msg].owner = Some((consumer, fence));
        self.msgs[msg].deliveries.push((consumer, fence));
    }

    /// Checks what the store accepted of an ack, release or dead-letter against the checker's
    /// own log of deliveries.
    pub(crate) fn settled(
        &mut self,
        replica: usize,
        call: u32,
        op: OpKind,
        consumer: ConsumerId,
        lease_refs: &[LeaseRef],
        results: &[SettleResult],
    ) {
        let logged = lease_refs
            .iter()
            .zip(results)
            .map(|(l, res)| (self.message_index(&l.id) as u32, l.fence.0, *res))
            .collect();
        self.log(Event::Settled {
            r: replica as u16,
            call,
            op,
            results: logged,
        });
        for (lease_ref, result) in lease_refs.iter().zip(results) {
            if *result != SettleResult::Ok {
                continue;
            }
            let view = &mut self.replicas[replica];
            if view.consumer == consumer {
                let tally = match op {
                    OpKind::Ack => &mut view.accepted.acked,
                    OpKind::Release => &mut view.accepted.released,
                    OpKind::DeadLetter => &mut view.accepted.dead_lettered,
                    OpKind::Fetch | OpKind::Renew => unreachable!("{op} settles nothing"),
                };
                *tally += 1;
            }
            let msg = self.message_index(&lease_ref.id);
            let m = &self.msgs[msg];
            let owner = m.owner;
            if m.removed.is_some() || owner != Some((consumer, lease_ref.fence.0)) {
                let detail = format!(
                    "the store accepted {op} of m{msg} by c{} with fence {}, but the current \
                     delivery is {} ({})",
                    consumer.0,
                    lease_ref.fence.0,
                    owner.map_or("none".into(), |(o, f)| format!("c{} fence {f}", o.0)),
                    if m.removed.is_some() {
                        "already removed"
                    } else {
                        "another replica's delivery"
                    }
                );
                self.fail(Check::Fencing, detail);
                continue;
            }
            let removal = match op {
                OpKind::Ack => Removal::Acked,
                OpKind::DeadLetter => Removal::DeadLettered,
                _ => continue,
            };
            let justified = match removal {
                Removal::Acked => m.done_by.contains(&consumer),
                Removal::DeadLettered => m.failed_by.contains(&consumer),
            };
            if !justified {
                let detail = match removal {
                    Removal::Acked => format!(
                        "m{msg} acked by c{} although no invocation there returned Done \
                         uncancelled: its work is lost",
                        consumer.0
                    ),
                    Removal::DeadLettered => format!(
                        "m{msg} dead-lettered by c{} although no invocation there failed or was \
                         rejected",
                        consumer.0
                    ),
                };
                self.fail(Check::NothingLost, detail);
                continue;
            }
            self.msgs[msg].removed = Some((removal, consumer));
            match removal {
                Removal::Acked => self.report.acked += 1,
                Removal::DeadLettered => self.report.dead_lettered += 1,
            }
        }
    }

    /// Every message was published (twice, where planned) and the store holds none, in the
    /// stream or delayed: all work is done.
    pub(crate) fn all_done(&self) -> bool {
        self.msgs.iter().all(|m| m.published && !m.again_pending)
            && self.store.is_empty()
            && self.store.delayed_len() == 0
    }
}

/// Locks `shared` (no check panics while holding it, so a poisoned lock is still consistent).
pub(crate) fn lock(shared: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    shared.lock().unwrap_or_else(|e| e.into_inner())
}

pub(crate) fn short(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Done => "Done".into(),
        Outcome::Pending => "Pending".into(),
        Outcome::Retry { delay: None } => "Retry".into(),
        Outcome::Retry { delay: Some(d) } => format!("Retry({d:?})"),
        Outcome::Reject { .. } => "Reject".into(),
        Outcome::Failed { error } => format!("Failed({error})"),
    }
}

/// For the trace's header: the resolved engine settings of a seed.
pub(crate) fn describe(settings: &Settings) -> String {
    format!(
        "concurrency {}, prefetch {}{}, max_leases {}, claim {:?}, heartbeat {:?}, margin {:?}, \
         cancel grace {:?}, renew batch {}",
        settings.concurrency,
        settings.prefetch,
        if settings.adaptive_prefetch {
            " (adaptive, its ceiling)"
        } else {
            ""
        },
        settings.max_leases,
        settings.claim_timeout,
        settings.heartbeat_interval,
        settings.expiry_margin,
        settings.cancel_grace,
        settings.renew_batch_size
    )
}

/// The time a fault-free call takes one way: 1/20 of the latency up to the latency.
pub(crate) fn latency(rng: &mut Rng, cfg: &SimConfig) -> Duration {
    rng.duration(cfg.latency / 20, cfg.latency)
}
