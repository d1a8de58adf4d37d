//! The event loop: replicas, calls, handlers, faults, and the checks run along the way.

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};
use std::time::{Duration, Instant};

use leasehold_core::{
    CancelReason, Config, DeadLetterReason, Effect, Fetched, InvocationId, LeaseEngine, LeaseId,
    LeaseRef, MessageId, Outcome, RenewId, RenewResult, Settings, SettleResult, StreamId,
};
use leasehold_memory::Bytes;

use crate::behaviour::Behaviour;
use crate::bound::{drain_bound, liveness_bound};
use crate::rng::{mix, Rng};
use crate::store::{ConsumerId, SimStore};
use crate::trace::{Event, Fault, MsgFence, OpKind, Trace};
use crate::{Check, Failure, SeedReport, SimConfig};

/// Virtual time: an offset from the simulation's start.
type Time = Duration;

/// Events on the queue.
#[derive(Debug)]
enum Scheduled {
    Publish(usize),
    Wake { r: usize, inc: u32, gen: u64 },
    Exec { call: usize, gen: u32 },
    Deliver { r: usize, inc: u32, input: Input },
    Crash(usize),
    Restart(usize),
    PauseStart(usize, bool),
    LinkFault(usize),
    PauseEnd { r: usize, id: u64 },
    FaultsStop,
    Quiet,
    Deadline,
    DrainDeadline,
}

/// What reaches a replica (and waits in its inbox while it is paused).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Input {
    Answer(usize),
    Timeout(usize),
    Outcome(InvocationId, u32),
}

struct Item {
    at: Time,
    tie: u64,
    seq: u64,
    ev: Scheduled,
}

impl PartialEq for Item {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Item {}
impl PartialOrd for Item {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Item {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.at, self.tie, self.seq).cmp(&(other.at, other.tie, other.seq))
    }
}

struct Pause {
    id: u64,
    inbox: Vec<Input>,
}

/// A handler invocation in flight on a replica.
struct HandlerRun {
    run: usize,
    gen: u32,
    /// When and with what it finishes; `None`: it hangs.
    end: Option<(Time, Outcome)>,
}

struct Replica {
    inc: u32,
    consumer: ConsumerId,
    engine: Option<LeaseEngine<Bytes>>,
    pause: Option<Pause>,
    wake_gen: u64,
    open: BTreeSet<usize>,
    handlers: BTreeMap<InvocationId, HandlerRun>,
    /// The last run of each lease of this incarnation (lookups only).
    lease_runs: HashMap<LeaseId, usize>,
    drained: bool,
    /// Until when its connection to the store is degraded (a link fault).
    link_bad_until: Time,
}

/// One run (handler invocation) as the checker sees it.
struct InvocationRecord {
    msg: usize,
    r: usize,
    live: bool,
    cancelled: Option<CancelReason>,
    /// Another replica started the message while this one was live on a paused replica.
    superseded: bool,
    outcome: Option<Outcome>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Removal {
    Acked,
    DeadLettered,
}

struct Msg {
    id: MessageId,
    behaviour: Behaviour,
    published: bool,
    invocations: u32,
    live_runs: Vec<usize>,
    /// The checker's own view of the current delivery: (consumer, fence), from fetch results.
    owner: Option<(ConsumerId, u64)>,
    removed: Option<(Removal, ConsumerId)>,
    /// Consumers a live, uncancelled invocation of which returned `Done`.
    done_by: Vec<ConsumerId>,
    /// Consumers an invocation of which failed, was rejected or hit `max_processing_time`.
    failed_by: Vec<ConsumerId>,
}

enum Op {
    Fetch {
        stream: StreamId,
        max: usize,
        wait: Duration,
    },
    Renew {
        batch: RenewId,
        leases: Vec<(LeaseId, LeaseRef)>,
    },
    Ack {
        leases: Vec<(LeaseId, LeaseRef)>,
    },
    Release {
        lease: LeaseId,
        lref: LeaseRef,
        delay: Duration,
    },
    DeadLetter {
        lease: LeaseId,
        lref: LeaseRef,
        reason: DeadLetterReason,
    },
}

impl Op {
    fn kind(&self) -> OpKind {
        match self {
            Op::Fetch { .. } => OpKind::Fetch,
            Op::Renew { .. } => OpKind::Renew,
            Op::Ack { .. } => OpKind::Ack,
            Op::Release { .. } => OpKind::Release,
            Op::DeadLetter { .. } => OpKind::DeadLetter,
        }
    }
}

enum Answer {
    Fetched(Vec<Fetched<Bytes>>),
    Renewed(Vec<(LeaseId, RenewResult)>),
    Acked(Vec<(LeaseId, SettleResult)>),
    Settled(SettleResult),
    Failed,
}

struct Call {
    r: usize,
    inc: u32,
    consumer: ConsumerId,
    op: Op,
    fault: Fault,
    answer_delay: Duration,
    exec_gen: u32,
    first_exec: Option<Time>,
    answer: Option<Answer>,
}

type Res<T = ()> = Result<T, Box<Failure>>;

pub(crate) struct Sim<'a> {
    cfg: &'a SimConfig,
    seed: u64,
    rng: Rng,
    base: Instant,
    now: Time,
    queue: BinaryHeap<Reverse<Item>>,
    seq: u64,
    store: Box<dyn SimStore>,
    engine_config: Config,
    settings: Settings,
    replicas: Vec<Replica>,
    next_consumer: u32,
    calls: Vec<Call>,
    blocked: BTreeSet<usize>,
    msgs: Vec<Msg>,
    by_id: HashMap<MessageId, usize>,
    runs: Vec<InvocationRecord>,
    trace: Trace,
    report: SeedReport,
    faults_active: bool,
    quiet_at: Time,
    quiet: bool,
    deadline: Option<Time>,
    completed: Option<Time>,
    shutdown: Option<Time>,
    finished: bool,
    published: usize,
    next_pause: u64,
}

impl<'a> Sim<'a> {
    pub(crate) fn new(cfg: &'a SimConfig, seed: u64, print: bool, digest: bool) -> Self {
        let mut rng = Rng::new(mix(seed ^ 0x5eed_1ea5_e401_5133));
        let claim = cfg.claim_timeout;
        let concurrency = rng.range(1, cfg.max_concurrency as u64) as usize;
        let heartbeat = *rng.pick(&[claim / 4, claim / 3, claim * 2 / 5]);
        let max_leases = concurrency + rng.range(0, 3) as usize;
        // From a generator of its own, so the other draws of a seed stay what they were; at
        // most the room `max_leases` leaves (the config refuses more).
        let prefetch = (*Rng::new(mix(seed ^ 0x9e3f_e7c4_0b1d_2a55)).pick(&[0, 0, 1, 3]))
            .min(max_leases - concurrency);
        let engine_config = Config::default()
            .concurrency(concurrency)
            .max_leases(max_leases)
            .claim_timeout(claim)
            .heartbeat_interval(heartbeat)
            .poll_interval(cfg.poll_interval)
            .repoll_interval(cfg.repoll_interval)
            .max_processing_time(cfg.max_processing_time)
            .retry(cfg.retry.clone())
            .max_deliveries(cfg.max_deliveries)
            .shutdown_grace(cfg.shutdown_grace)
            .renew_batch_size(*rng.pick(&[1000, 1000, 2, 3]))
            .fetch_backoff_max(cfg.fetch_backoff_max)
            .prefetch(prefetch);
        let settings = engine_config
            .validate()
            .expect("the simulator's engine configuration is valid");
        // Any fixed instant works; only differences matter.
        let base = Instant::now();
        let store = cfg.store.build(claim, base);
        let report = SeedReport {
            seed,
            messages: cfg.messages,
            replicas: cfg.replicas,
            concurrency,
            ..SeedReport::default()
        };
        Self {
            cfg,
            seed,
            rng,
            base,
            now: Duration::ZERO,
            queue: BinaryHeap::new(),
            seq: 0,
            store,
            engine_config,
            settings,
            replicas: Vec::new(),
            next_consumer: 0,
            calls: Vec::new(),
            blocked: BTreeSet::new(),
            msgs: Vec::new(),
            by_id: HashMap::new(),
            runs: Vec::new(),
            trace: Trace::new(cfg.trace_len, print, digest),
            report,
            faults_active: true,
            quiet_at: cfg.faults_until,
            quiet: false,
            deadline: None,
            completed: None,
            shutdown: None,
            finished: false,
            published: 0,
            next_pause: 0,
        }
    }

    // ----- plumbing ------------------------------------------------------------------------

    fn at(&mut self, after: Duration, ev: Scheduled) {
        let at = self.now + after;
        self.seq += 1;
        let tie = self.rng.next_u64();
        self.queue.push(Reverse(Item {
            at,
            tie,
            seq: self.seq,
            ev,
        }));
    }

    fn instant(&self) -> Instant {
        self.base + self.now
    }

    fn log(&mut self, event: Event) {
        self.trace.push(self.now, event);
    }

    fn fail(&self, check: Check, detail: String) -> Box<Failure> {
        Box::new(Failure {
            seed: self.seed,
            check,
            at: self.now,
            detail,
            replay: self.cfg.replay_command(self.seed),
            settings: describe(&self.settings),
            trace: self.trace.lines(),
        })
    }

    /// Notes an instant a fault still has an effect at: the liveness bound starts after it.
    fn fault_effect_until(&mut self, at: Time) {
        if self.faults_active {
            self.quiet_at = self.quiet_at.max(at);
        }
    }

    fn message_index(&self, id: &MessageId) -> usize {
        self.by_id[id]
    }

    fn engine(&mut self, r: usize) -> &mut LeaseEngine<Bytes> {
        self.replicas[r].engine.as_mut().expect("a live replica")
    }

    fn latency(&mut self) -> Duration {
        self.rng.duration(self.cfg.latency / 20, self.cfg.latency)
    }

    // ----- the run -------------------------------------------------------------------------

    pub(crate) fn run(mut self) -> Res<SeedReport> {
        let cfg = self.cfg;
        for i in 0..cfg.messages {
            let behaviour = Behaviour::draw(&mut self.rng);
            self.msgs.push(Msg {
                id: MessageId::from(""),
                behaviour,
                published: false,
                invocations: 0,
                live_runs: Vec::new(),
                owner: None,
                removed: None,
                done_by: Vec::new(),
                failed_by: Vec::new(),
            });
            let at = self.rng.duration(Duration::ZERO, cfg.publish_until);
            self.at(at, Scheduled::Publish(i));
        }
        for r in 0..cfg.replicas {
            self.replicas.push(Replica {
                inc: 0,
                consumer: ConsumerId(0),
                engine: None,
                pause: None,
                wake_gen: 0,
                open: BTreeSet::new(),
                handlers: BTreeMap::new(),
                lease_runs: HashMap::new(),
                drained: false,
                link_bad_until: Duration::ZERO,
            });
            self.start_replica(r)?;
            // Faults as Poisson arrivals per replica, until faults stop.
            for (mean, kind) in [(cfg.crash_mean, 0), (cfg.pause_mean, 1), (cfg.link_mean, 2)] {
                let mut t = self.rng.exponential(mean);
                while t < cfg.faults_until {
                    let ev = match kind {
                        0 => Scheduled::Crash(r),
                        1 => Scheduled::PauseStart(r, false),
                        _ => Scheduled::LinkFault(r),
                    };
                    self.at(t, ev);
                    t += self.rng.exponential(mean);
                }
            }
        }
        self.at(cfg.faults_until, Scheduled::FaultsStop);
        while let Some(Reverse(item)) = self.queue.pop() {
            self.now = item.at;
            self.report.events += 1;
            if self.report.events > cfg.max_events {
                return Err(self.fail(
                    Check::Liveness,
                    format!(
                        "more than {} events without finishing: a busy loop or a livelock",
                        cfg.max_events
                    ),
                ));
            }
            self.event(item.ev)?;
            if self.finished {
                break;
            }
        }
        if !self.finished {
            return Err(self.fail(
                Check::Liveness,
                "nothing left to happen, but the run did not finish".into(),
            ));
        }
        self.report.virtual_time = self.now;
        self.report.digest = self.trace.digest.unwrap_or_default();
        Ok(self.report)
    }

    fn event(&mut self, ev: Scheduled) -> Res {
        match ev {
            Scheduled::Publish(i) => self.publish(i),
            Scheduled::Wake { r, inc, gen } => {
                let rep = &self.replicas[r];
                if rep.inc == inc && rep.wake_gen == gen && rep.pause.is_none() {
                    if let Some(engine) = self.replicas[r].engine.as_mut() {
                        engine.handle_timeout(self.base + self.now);
                        self.pump(r)?;
                    }
                }
                Ok(())
            }
            Scheduled::Exec { call, gen } => self.exec(call, gen),
            Scheduled::Deliver { r, inc, input } => {
                let rep = &mut self.replicas[r];
                if rep.inc != inc || rep.engine.is_none() {
                    return Ok(()); // for an incarnation that crashed
                }
                if let Some(pause) = rep.pause.as_mut() {
                    pause.inbox.push(input);
                    return Ok(());
                }
                self.input(r, input)
            }
            Scheduled::Crash(r) => self.crash(r),
            Scheduled::Restart(r) => self.start_replica(r),
            Scheduled::PauseStart(r, after_renew) => {
                self.pause(r, after_renew);
                Ok(())
            }
            Scheduled::LinkFault(r) => {
                if self.faults_active && self.replicas[r].engine.is_some() {
                    let claim = self.cfg.claim_timeout;
                    let until = self.now + self.rng.duration(claim / 4, claim * 2);
                    self.replicas[r].link_bad_until = until;
                    self.report.link_faults += 1;
                    self.log(Event::Link { r: r as u16, until });
                    self.fault_effect_until(until);
                }
                Ok(())
            }
            Scheduled::PauseEnd { r, id } => {
                if self.replicas[r].pause.as_ref().is_some_and(|p| p.id == id) {
                    self.resume(r)?;
                }
                Ok(())
            }
            Scheduled::FaultsStop => {
                self.faults_active = false;
                self.log(Event::FaultsStop);
                // Just after the last fault effect, so it is processed after every one of them.
                let quiet = self.quiet_at.max(self.now) + Duration::from_millis(1);
                self.report.quiet_at = quiet;
                self.at(quiet - self.now, Scheduled::Quiet);
                Ok(())
            }
            Scheduled::Quiet => {
                self.quiet = true;
                let behaviours: Vec<Behaviour> = self.msgs.iter().map(|m| m.behaviour).collect();
                let bound =
                    liveness_bound(self.cfg, &self.settings, &behaviours, self.cfg.replicas)
                        .mul_f64(self.cfg.bound_scale);
                self.report.bound = bound;
                self.deadline = Some(self.now + bound);
                self.log(Event::Quiet { bound });
                self.at(bound, Scheduled::Deadline);
                self.check_completed()
            }
            Scheduled::Deadline => {
                if self.completed.is_none() {
                    let rows = self.store.pending(self.base + self.now);
                    let mut detail = format!(
                        "{} message(s) unfinished {:?} after the last fault effect ended (the bound)",
                        self.store.len(),
                        self.report.bound
                    );
                    for row in rows {
                        let i = self.message_index(&row.id);
                        detail.push_str(&format!(
                            "\n    m{i} ({}) pending on c{} with count {}, idle {:?}",
                            self.msgs[i].behaviour, row.owner.0, row.delivery_count, row.idle
                        ));
                    }
                    return Err(self.fail(Check::Liveness, detail));
                }
                Ok(())
            }
            Scheduled::DrainDeadline => {
                if !self.finished {
                    let stuck: Vec<String> = self
                        .replicas
                        .iter()
                        .enumerate()
                        .filter(|(_, rep)| !rep.drained)
                        .map(|(r, rep)| {
                            let e = rep.engine.as_ref().expect("live");
                            format!("r{r} (held {}, running {})", e.held(), e.running())
                        })
                        .collect();
                    return Err(self.fail(
                        Check::NoLeak,
                        format!(
                            "shutdown did not drain within {:?}: {}",
                            drain_bound(self.cfg, &self.settings),
                            stuck.join(", ")
                        ),
                    ));
                }
                Ok(())
            }
        }
    }

    fn publish(&mut self, i: usize) -> Res {
        let payload = Bytes::from(format!("message {i}"));
        let id = self.store.publish(self.base + self.now, payload);
        self.by_id.insert(id.clone(), i);
        let msg = &mut self.msgs[i];
        msg.id = id;
        msg.published = true;
        self.published += 1;
        let behaviour = msg.behaviour.to_string();
        self.log(Event::Publish {
            m: i as u32,
            behaviour,
        });
        self.wake_blocked();
        Ok(())
    }

    // ----- replicas ------------------------------------------------------------------------

    fn start_replica(&mut self, r: usize) -> Res {
        let consumer = ConsumerId(self.next_consumer);
        self.next_consumer += 1;
        self.store.add_consumer(consumer);
        let rep = &mut self.replicas[r];
        rep.inc += 1;
        let config = self
            .engine_config
            .clone()
            .seed(mix(self.seed ^ ((r as u64) << 32) ^ u64::from(rep.inc)));
        rep.engine = Some(
            LeaseEngine::new(&config, self.base + self.now).expect("valid engine configuration"),
        );
        rep.consumer = consumer;
        rep.pause = None;
        rep.open.clear();
        rep.handlers.clear();
        rep.lease_runs.clear();
        rep.drained = false;
        if self.now > Duration::ZERO {
            self.report.restarts += 1;
            self.log(Event::Restart {
                r: r as u16,
                consumer: consumer.0,
            });
        }
        self.pump(r)
    }

    fn crash(&mut self, r: usize) -> Res {
        if self.replicas[r].engine.is_none() || !self.faults_active {
            return Ok(());
        }
        let restart_in = self
            .rng
            .duration(Duration::from_millis(500), self.cfg.claim_timeout * 2);
        self.report.crashes += 1;
        self.log(Event::Crash {
            r: r as u16,
            restart_in,
        });
        let rep = &mut self.replicas[r];
        rep.engine = None;
        rep.pause = None;
        rep.inc += 1; // answers and outcomes for the dead incarnation are dropped
        rep.open.clear();
        rep.lease_runs.clear();
        let handlers = std::mem::take(&mut rep.handlers);
        for inv in handlers.values() {
            self.end_run(inv.run);
        }
        // A blocked fetch dies with its connection; requests already sent still reach the store.
        let calls = &self.calls;
        self.blocked.retain(|&c| calls[c].r != r);
        self.fault_effect_until(self.now + restart_in);
        self.at(restart_in, Scheduled::Restart(r));
        Ok(())
    }

    fn pause(&mut self, r: usize, after_renew: bool) {
        let rep = &self.replicas[r];
        if rep.engine.is_none() || rep.pause.is_some() || !self.faults_active {
            return;
        }
        let claim = self.cfg.claim_timeout;
        // Short stalls, pauses around the lease, and pauses well past the claim timeout.
        // Short stalls, pauses around the lease, and pauses well past the claim timeout; right
        // after a heartbeat, pauses around the lease.
        let length = match self.rng.below(10) {
            _ if after_renew => self.rng.duration(claim / 2, self.cfg.pause_after_renew_max),
            0..=2 => self.rng.duration(claim / 20, claim / 2),
            3..=6 => self.rng.duration(claim / 2, claim * 3 / 2),
            _ => self.rng.duration(claim * 3 / 2, claim * 3),
        };
        self.next_pause += 1;
        let id = self.next_pause;
        self.replicas[r].pause = Some(Pause {
            id,
            inbox: Vec::new(),
        });
        self.report.pauses += 1;
        self.log(Event::Pause {
            r: r as u16,
            until: self.now + length,
        });
        self.fault_effect_until(self.now + length);
        self.at(length, Scheduled::PauseEnd { r, id });
    }

    fn resume(&mut self, r: usize) -> Res {
        let mut inbox = self.replicas[r].pause.take().expect("paused").inbox;
        self.log(Event::Resume {
            r: r as u16,
            inbox: inbox.len(),
        });
        // Both an answer and the driver's timeout of one call may have arrived: the call task
        // polls the call first, so the answer wins.
        let answered: BTreeSet<usize> = inbox
            .iter()
            .filter_map(|i| match i {
                Input::Answer(c) => Some(*c),
                _ => None,
            })
            .collect();
        inbox.retain(|i| !matches!(i, Input::Timeout(c) if answered.contains(c)));
        // The tasks that completed during the pause are polled in no particular order.
        self.rng.shuffle(&mut inbox);
        for input in inbox {
            self.input(r, input)?;
        }
        let now = self.instant();
        self.engine(r).handle_timeout(now);
        self.pump(r)?;
        // Whatever another replica took over during the pause must be cancelled by now.
        let rep = &self.replicas[r];
        for inv in rep.handlers.values() {
            let run = &self.runs[inv.run];
            if run.live && run.superseded {
                return Err(self.fail(
                    Check::SingleRunner,
                    format!(
                        "r{r} resumed from a pause past its lease and still runs m{} (not \
                         cancelled), while another replica took it over during the pause",
                        run.msg
                    ),
                ));
            }
        }
        self.check_single_runner(r)
    }

    /// No two live runs of one message on replicas that are not paused.
    fn check_single_runner(&self, r: usize) -> Res {
        for inv in self.replicas[r].handlers.values() {
            let run = &self.runs[inv.run];
            if !run.live {
                continue;
            }
            for &other in &self.msgs[run.msg].live_runs {
                let o = &self.runs[other];
                if other != inv.run && self.replicas[o.r].pause.is_none() {
                    let how = if run.superseded || o.superseded {
                        let (old, new) = if run.superseded { (r, o.r) } else { (o.r, r) };
                        format!(
                            " (r{new} took it over while r{old} was paused; r{old} resumed and \
                             its invocation was not cancelled)"
                        )
                    } else {
                        String::new()
                    };
                    return Err(self.fail(
                        Check::SingleRunner,
                        format!(
                            "m{} runs on r{r} and on r{} at once, neither paused{how}",
                            run.msg, o.r
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Feeds one input to a running (not paused) replica, then executes its effects.
    fn input(&mut self, r: usize, input: Input) -> Res {
        let now = self.base + self.now;
        match input {
            Input::Answer(c) | Input::Timeout(c) => {
                if !self.replicas[r].open.remove(&c) {
                    return Ok(()); // already answered (or timed out)
                }
                let timeout = matches!(input, Input::Timeout(_));
                let call = &mut self.calls[c];
                let answer = if timeout {
                    Answer::Failed
                } else {
                    call.answer.take().unwrap_or(Answer::Failed)
                };
                let kind = call.op.kind();
                let failed = matches!(answer, Answer::Failed);
                self.log(if timeout {
                    Event::Timeout {
                        r: r as u16,
                        call: c as u32,
                        op: kind,
                    }
                } else {
                    Event::Answer {
                        r: r as u16,
                        call: c as u32,
                        op: kind,
                        failed,
                    }
                });
                let call = &self.calls[c];
                let engine = self.replicas[r].engine.as_mut().expect("live");
                match (&call.op, answer) {
                    (Op::Fetch { stream, .. }, Answer::Fetched(got)) => {
                        engine.handle_fetched(now, *stream, got)
                    }
                    (Op::Fetch { stream, .. }, _) => engine.handle_fetch_failed(now, *stream),
                    (Op::Renew { batch, .. }, Answer::Renewed(results)) => {
                        engine.handle_renewed(now, *batch, results)
                    }
                    (Op::Renew { batch, .. }, _) => engine.handle_renew_failed(now, *batch),
                    (Op::Ack { .. }, Answer::Acked(results)) => engine.handle_acked(now, results),
                    (Op::Ack { leases }, _) => engine.handle_acked(
                        now,
                        leases.iter().map(|(id, _)| (*id, SettleResult::Failed)),
                    ),
                    (Op::Release { lease, .. }, answer) => {
                        engine.handle_released(now, *lease, settled(answer))
                    }
                    (Op::DeadLetter { lease, .. }, answer) => {
                        engine.handle_dead_lettered(now, *lease, settled(answer))
                    }
                }
            }
            Input::Outcome(invocation, gen) => {
                let rep = &mut self.replicas[r];
                if rep.handlers.get(&invocation).map(|i| i.gen) != Some(gen) {
                    return Ok(());
                }
                let inv = rep.handlers.remove(&invocation).expect("checked");
                let (_, outcome) = inv.end.expect("only finishing invocations report");
                let consumer = rep.consumer;
                let run = &mut self.runs[inv.run];
                let (msg, cancelled) = (run.msg, run.cancelled);
                run.outcome = Some(outcome.clone());
                let live = run.live;
                self.end_run(inv.run);
                let m = &mut self.msgs[msg];
                match (&outcome, cancelled) {
                    (Outcome::Done, None) if live => m.done_by.push(consumer),
                    (
                        Outcome::Failed { .. } | Outcome::Retry { .. } | Outcome::Reject { .. },
                        None,
                    )
                    | (_, Some(CancelReason::MaxProcessingTime)) => m.failed_by.push(consumer),
                    _ => {}
                }
                self.log(Event::Outcome {
                    r: r as u16,
                    m: msg as u32,
                    outcome: short(&outcome),
                    cancelled: cancelled.is_some(),
                });
                self.engine(r).handle_outcome(now, invocation, outcome);
            }
        }
        self.pump(r)
    }

    /// Executes every effect of replica `r`'s engine, then sets its next wake-up.
    fn pump(&mut self, r: usize) -> Res {
        while let Some(effect) = self.engine(r).poll_effect() {
            self.effect(r, effect)?;
        }
        let now = self.base + self.now;
        let engine = self.replicas[r].engine.as_ref().expect("live");
        let next = engine.poll_timeout();
        if next.is_some_and(|t| t <= now) {
            return Err(self.fail(
                Check::Engine,
                format!("r{r}: poll_timeout is not in the future after draining (busy loop)"),
            ));
        }
        let rep = &mut self.replicas[r];
        rep.wake_gen += 1;
        let (inc, gen) = (rep.inc, rep.wake_gen);
        if let Some(t) = next {
            // A driver's timer fires a little late, never early.
            let late = self.rng.duration(Duration::ZERO, Duration::from_millis(2));
            self.at(t - now + late, Scheduled::Wake { r, inc, gen });
        }
        if self.shutdown.is_some() {
            self.check_drained()?;
        }
        self.check_single_runner(r)
    }

    fn lease_ref(&self, r: usize, lease: LeaseId) -> Res<LeaseRef> {
        let engine = self.replicas[r].engine.as_ref().expect("live");
        match engine.lease(lease) {
            Some(l) => Ok(l.lease_ref()),
            None => Err(self.fail(
                Check::Engine,
                format!("r{r}: an effect names lease {lease:?}, which the engine does not know"),
            )),
        }
    }

    fn lease_refs(&self, r: usize, leases: Vec<LeaseId>) -> Res<Vec<(LeaseId, LeaseRef)>> {
        leases
            .into_iter()
            .map(|id| Ok((id, self.lease_ref(r, id)?)))
            .collect()
    }

    fn effect(&mut self, r: usize, effect: Effect) -> Res {
        let shown = format!("{effect:?}");
        self.effect_inner(r, effect).map_err(|mut f| {
            if f.check == Check::Engine {
                f.detail.push_str(&format!(" (effect: {shown})"));
            }
            f
        })
    }

    fn effect_inner(&mut self, r: usize, effect: Effect) -> Res {
        match effect {
            Effect::Fetch { stream, max, wait } => self.send(r, Op::Fetch { stream, max, wait }),
            Effect::Run { invocation, lease } => self.start_run(r, invocation, lease),
            Effect::Cancel { invocation, reason } => {
                self.cancel(r, invocation, reason);
                Ok(())
            }
            Effect::Renew { batch, leases } => {
                let leases = self.lease_refs(r, leases)?;
                self.send(r, Op::Renew { batch, leases })?;
                // A stop-the-world pause right after a heartbeat went out: the case where a
                // renew lands while its sender cannot act on anything.
                if self.faults_active && self.rng.chance(self.cfg.pause_after_renew) {
                    let after = self.rng.duration(Duration::ZERO, Duration::from_millis(5));
                    self.at(after, Scheduled::PauseStart(r, true));
                }
                Ok(())
            }
            Effect::Ack { leases } => {
                for lease in &leases {
                    self.check_ack(r, *lease)?;
                }
                let leases = self.lease_refs(r, leases)?;
                self.send(r, Op::Ack { leases })
            }
            Effect::Release { lease, .. } | Effect::DeadLetter { lease, .. }
                if self.cfg.skip_stale_effects && self.engine(r).lease(lease).is_none() =>
            {
                // What the worker driver does with it: nothing (see `skip_stale_effects`).
                self.report.stale_effects += 1;
                Ok(())
            }
            Effect::Release { lease, delay } => {
                let lref = self.lease_ref(r, lease)?;
                self.send(r, Op::Release { lease, lref, delay })
            }
            Effect::DeadLetter { lease, reason } => {
                let lref = self.lease_ref(r, lease)?;
                self.send(
                    r,
                    Op::DeadLetter {
                        lease,
                        lref,
                        reason,
                    },
                )
            }
            Effect::Drained => {
                self.replicas[r].drained = true;
                self.log(Event::Drained { r: r as u16 });
                Ok(())
            }
        }
    }

    /// An `Ack` must follow a `Done` of an invocation that was neither cancelled nor taken over.
    fn check_ack(&self, r: usize, lease: LeaseId) -> Res {
        let run = self.replicas[r]
            .lease_runs
            .get(&lease)
            .map(|&i| &self.runs[i]);
        let ok = run.is_some_and(|run| {
            run.outcome == Some(Outcome::Done) && run.cancelled.is_none() && !run.superseded
        });
        if ok {
            return Ok(());
        }
        let what = match run {
            None => "a lease that never ran".to_string(),
            Some(run) if run.superseded => format!(
                "m{}, whose invocation another replica took over while r{r} was paused",
                run.msg
            ),
            Some(run) => format!(
                "m{} after outcome {:?}, cancelled: {:?}",
                run.msg, run.outcome, run.cancelled
            ),
        };
        Err(self.fail(
            Check::SingleRunner,
            format!("r{r} acks {what}: its result should have been discarded"),
        ))
    }

    // ----- handlers ------------------------------------------------------------------------

    fn start_run(&mut self, r: usize, invocation: InvocationId, lease: LeaseId) -> Res {
        let lref = self.lease_ref(r, lease)?;
        let msg = self.message_index(&lref.id);
        // Serial per message on one replica, counting a cancelled invocation still winding down.
        if let Some(inv) = self.replicas[r]
            .handlers
            .values()
            .find(|inv| self.runs[inv.run].msg == msg)
        {
            let cancelled = self.runs[inv.run].cancelled;
            return Err(self.fail(
                Check::SingleRunner,
                format!(
                    "r{r} starts m{msg} again while its previous invocation has not reported \
                     (cancelled: {cancelled:?})"
                ),
            ));
        }
        let mut overlaps_paused = false;
        for &other in &self.msgs[msg].live_runs {
            let o = &self.runs[other];
            if self.replicas[o.r].pause.is_none() {
                return Err(self.fail(
                    Check::SingleRunner,
                    format!(
                        "r{r} starts m{msg} (fence {}) while r{} still runs it and is not paused",
                        lref.fence.0, o.r
                    ),
                ));
            }
            overlaps_paused = true;
        }
        for &other in &self.msgs[msg].live_runs {
            self.runs[other].superseded = true;
        }
        if overlaps_paused {
            self.report.paused_overlaps += 1;
        }
        let run = self.runs.len();
        self.runs.push(InvocationRecord {
            msg,
            r,
            live: true,
            cancelled: None,
            superseded: false,
            outcome: None,
        });
        let m = &mut self.msgs[msg];
        m.live_runs.push(run);
        m.invocations += 1;
        let (n, behaviour) = (m.invocations, m.behaviour);
        if n > 1 {
            self.report.reruns += 1;
        }
        self.report.runs += 1;
        self.log(Event::Run {
            r: r as u16,
            m: msg as u32,
            fence: lref.fence.0,
            n,
            overlaps_paused,
        });
        let plan = behaviour.plan(n, self.cfg, &mut self.rng);
        let end = plan
            .finish
            .map(|(after, outcome)| (self.now + after, outcome));
        let rep = &mut self.replicas[r];
        rep.lease_runs.insert(lease, run);
        let inc = rep.inc;
        if let Some((at, _)) = &end {
            let after = *at - self.now;
            self.at(
                after,
                Scheduled::Deliver {
                    r,
                    inc,
                    input: Input::Outcome(invocation, 0),
                },
            );
        }
        self.replicas[r]
            .handlers
            .insert(invocation, HandlerRun { run, gen: 0, end });
        Ok(())
    }

    fn cancel(&mut self, r: usize, invocation: InvocationId, reason: CancelReason) {
        let Some(inv) = self.replicas[r].handlers.get(&invocation) else {
            return; // it already reported
        };
        let (run, hangs, planned) = (inv.run, inv.end.is_none(), inv.end.as_ref().map(|e| e.0));
        let msg = self.runs[run].msg;
        self.runs[run].cancelled = Some(reason);
        self.end_run(run);
        self.log(Event::Cancel {
            r: r as u16,
            m: msg as u32,
            reason,
        });
        // The handler notices within the cancel grace, or is dropped when it is over.
        let grace = self.cfg.cancel_grace;
        let react = if hangs {
            grace
        } else {
            self.rng.duration(Duration::ZERO, grace)
        };
        let at = self.now + react;
        if planned.is_some_and(|end| end <= at) {
            return; // it finishes on its own first
        }
        let outcome = if hangs {
            Outcome::Failed {
                error: format!("cancelled ({reason:?}) and dropped after {grace:?}"),
            }
        } else if self.rng.chance(0.5) {
            Outcome::Done // ignores the signal and reports success: must be discarded
        } else {
            Outcome::Failed {
                error: "cancelled".into(),
            }
        };
        let rep = &mut self.replicas[r];
        let inv = rep.handlers.get_mut(&invocation).expect("checked");
        inv.gen += 1;
        inv.end = Some((at, outcome));
        let (inc, gen) = (rep.inc, inv.gen);
        self.at(
            react,
            Scheduled::Deliver {
                r,
                inc,
                input: Input::Outcome(invocation, gen),
            },
        );
    }

    /// The run is no longer live (it reported, was cancelled, or its replica crashed).
    fn end_run(&mut self, run: usize) {
        let rec = &mut self.runs[run];
        if rec.live {
            rec.live = false;
            let live = &mut self.msgs[rec.msg].live_runs;
            live.retain(|&x| x != run);
        }
    }

    // ----- backend calls -------------------------------------------------------------------

    fn send(&mut self, r: usize, op: Op) -> Res {
        let cfg = self.cfg;
        let claim = cfg.claim_timeout;
        // A degraded link fails or slows most calls; otherwise calls fault independently.
        let bad_link = self.now < self.replicas[r].link_bad_until;
        let p = if bad_link {
            cfg.link_fault
        } else {
            cfg.call_fault
        };
        let fault = if self.faults_active && self.rng.chance(p) {
            if self.rng.chance(cfg.slow_share) {
                Fault::Slow
            } else if self.rng.chance(0.55) {
                Fault::FailFast
            } else {
                Fault::LoseAnswer
            }
        } else {
            Fault::None
        };
        let (mut request, mut answer) = (self.latency(), self.latency());
        if fault == Fault::Slow {
            // The request lands around the lease boundary (half to one claim timeout late),
            // or the answer is late (up to 1.5 × the claim timeout), or both legs are.
            if self.rng.chance(cfg.slow_request_edge) {
                request = self.rng.duration(claim / 2, claim);
            } else if self.rng.chance(0.5) {
                answer = self.rng.duration(Duration::ZERO, claim * 3 / 2);
            } else {
                request = self.rng.duration(Duration::ZERO, claim * 3 / 4);
                answer = self.rng.duration(Duration::ZERO, claim * 3 / 4);
            }
        }
        match fault {
            Fault::FailFast => self.report.failed_calls += 1,
            Fault::LoseAnswer => self.report.lost_answers += 1,
            Fault::Slow => self.report.slow_calls += 1,
            Fault::None => {}
        }
        let c = self.calls.len();
        let kind = op.kind();
        let msgs: Box<[MsgFence]> = match &op {
            Op::Fetch { .. } => Box::new([]),
            Op::Renew { leases, .. } | Op::Ack { leases } => leases
                .iter()
                .map(|(_, l)| (self.message_index(&l.id) as u32, l.fence.0))
                .collect(),
            Op::Release { lref, .. } | Op::DeadLetter { lref, .. } => {
                Box::new([(self.message_index(&lref.id) as u32, lref.fence.0)])
            }
        };
        let wait = match op {
            Op::Fetch { wait, .. } => wait,
            _ => Duration::ZERO,
        };
        self.log(Event::Send {
            r: r as u16,
            call: c as u32,
            op: kind,
            msgs,
            fault,
            exec_in: request,
        });
        let rep = &mut self.replicas[r];
        rep.open.insert(c);
        let (inc, consumer) = (rep.inc, rep.consumer);
        self.calls.push(Call {
            r,
            inc,
            consumer,
            op,
            fault,
            answer_delay: answer,
            exec_gen: 0,
            first_exec: None,
            answer: None,
        });
        // The driver bounds every call (a fetch gets its wait on top).
        let timeout = cfg.call_timeout + wait;
        self.at(
            timeout,
            Scheduled::Deliver {
                r,
                inc,
                input: Input::Timeout(c),
            },
        );
        self.fault_effect_until(self.now + (request + wait + answer).max(timeout));
        if fault == Fault::FailFast {
            self.calls[c].answer = Some(Answer::Failed);
            self.at(
                request,
                Scheduled::Deliver {
                    r,
                    inc,
                    input: Input::Answer(c),
                },
            );
        } else {
            self.at(request, Scheduled::Exec { call: c, gen: 0 });
        }
        Ok(())
    }

    /// Wakes every fetch blocked in the store to look again (a publish or a release).
    fn wake_blocked(&mut self) {
        for c in std::mem::take(&mut self.blocked) {
            self.calls[c].exec_gen += 1;
            let gen = self.calls[c].exec_gen;
            self.at(Duration::ZERO, Scheduled::Exec { call: c, gen });
        }
    }

    /// The request of call `c` reaches the store.
    fn exec(&mut self, c: usize, gen: u32) -> Res {
        let now = self.base + self.now;
        let call = &self.calls[c];
        if call.exec_gen != gen {
            return Ok(());
        }
        let (r, consumer) = (call.r, call.consumer);
        let answer = match &call.op {
            Op::Fetch { max, wait, .. } => {
                let (max, wait) = (*max, *wait);
                let first = *self.calls[c].first_exec.get_or_insert(self.now);
                let alive = self.replicas[r].inc == self.calls[c].inc;
                let waiting = alive && self.replicas[r].open.contains(&c);
                if first != self.now && !waiting {
                    // The driver dropped the blocked fetch (its call timed out, or the replica
                    // crashed): a dropped fetch takes nothing.
                    self.blocked.remove(&c);
                    return Ok(());
                }
                let got = self.store.fetch(now, consumer, max);
                let deadline = first + wait;
                if got.is_empty() && self.now < deadline && waiting {
                    // Block like the memory backend does on a real clock: until a publish, a
                    // release, the next lapse, or the end of the wait.
                    let lapse = self
                        .store
                        .next_claimable(now)
                        .map(|at| at.saturating_duration_since(self.base))
                        .filter(|&at| at > self.now);
                    let wake = lapse.map_or(deadline, |at| at.min(deadline));
                    let call = &mut self.calls[c];
                    call.exec_gen += 1;
                    let gen = call.exec_gen;
                    self.blocked.insert(c);
                    self.log(Event::Blocked {
                        r: r as u16,
                        call: c as u32,
                    });
                    self.at(wake - self.now, Scheduled::Exec { call: c, gen });
                    return Ok(());
                }
                self.blocked.remove(&c);
                let mut list = Vec::with_capacity(got.len());
                for f in &got {
                    let m = self.message_index(&f.id);
                    list.push((m as u32, f.fence.0));
                    self.delivered(m, consumer, f.fence.0)?;
                }
                self.log(Event::Fetched {
                    r: r as u16,
                    call: c as u32,
                    got: list.into(),
                });
                Answer::Fetched(got)
            }
            Op::Renew { leases, .. } => {
                let refs: Vec<LeaseRef> = leases.iter().map(|(_, l)| l.clone()).collect();
                let results = self.store.renew(now, consumer, &refs);
                let call = &self.calls[c];
                let Op::Renew { leases, .. } = &call.op else {
                    unreachable!()
                };
                let logged = leases
                    .iter()
                    .zip(&results)
                    .map(|((_, l), res)| (self.message_index(&l.id) as u32, l.fence.0, *res))
                    .collect();
                let answer = leases.iter().map(|(id, _)| *id).zip(results).collect();
                self.log(Event::Renewed {
                    r: r as u16,
                    call: c as u32,
                    results: logged,
                });
                Answer::Renewed(answer)
            }
            Op::Ack { leases } => {
                let refs: Vec<LeaseRef> = leases.iter().map(|(_, l)| l.clone()).collect();
                let ids: Vec<LeaseId> = leases.iter().map(|(id, _)| *id).collect();
                let results = self.store.ack(now, consumer, &refs);
                self.settled(r, c, OpKind::Ack, consumer, &refs, &results)?;
                Answer::Acked(ids.into_iter().zip(results).collect())
            }
            Op::Release { lref, delay, .. } => {
                let (lref, delay) = (lref.clone(), *delay);
                let result = self.store.release(now, consumer, &lref, delay);
                self.settled(r, c, OpKind::Release, consumer, &[lref], &[result])?;
                if result == SettleResult::Ok {
                    self.wake_blocked();
                }
                Answer::Settled(result)
            }
            Op::DeadLetter { lref, reason, .. } => {
                let (lref, reason) = (lref.clone(), reason.clone());
                let result = self.store.dead_letter(now, consumer, &lref, &reason);
                self.settled(r, c, OpKind::DeadLetter, consumer, &[lref], &[result])?;
                Answer::Settled(result)
            }
        };
        let call = &mut self.calls[c];
        if call.fault == Fault::LoseAnswer {
            return self.check_completed(); // the driver's timeout answers instead
        }
        call.answer = Some(answer);
        let (inc, after) = (call.inc, call.answer_delay);
        self.at(
            after,
            Scheduled::Deliver {
                r,
                inc,
                input: Input::Answer(c),
            },
        );
        self.check_completed()
    }

    // ----- the store-side checks -----------------------------------------------------------

    /// The store delivered message `m` to `consumer` with `fence`.
    fn delivered(&mut self, m: usize, consumer: ConsumerId, fence: u64) -> Res {
        let msg = &self.msgs[m];
        if msg.removed.is_some() {
            return Err(self.fail(
                Check::NothingLost,
                format!("the store delivered m{m}, which was already acked or dead-lettered"),
            ));
        }
        if let Some((_, old)) = msg.owner {
            if fence <= old {
                return Err(self.fail(
                    Check::Fencing,
                    format!(
                        "m{m} redelivered to c{} with fence {fence}, not above {old}",
                        consumer.0
                    ),
                ));
            }
        }
        self.msgs[m].owner = Some((consumer, fence));
        Ok(())
    }

    /// Checks what the store accepted of an ack, release or dead-letter against the checker's
    /// own log of deliveries.
    fn settled(
        &mut self,
        r: usize,
        c: usize,
        op: OpKind,
        consumer: ConsumerId,
        refs: &[LeaseRef],
        results: &[SettleResult],
    ) -> Res {
        let logged = refs
            .iter()
            .zip(results)
            .map(|(l, res)| (self.message_index(&l.id) as u32, l.fence.0, *res))
            .collect();
        self.log(Event::Settled {
            r: r as u16,
            call: c as u32,
            op,
            results: logged,
        });
        for (lref, result) in refs.iter().zip(results) {
            if *result != SettleResult::Ok {
                continue;
            }
            let m = self.message_index(&lref.id);
            let msg = &self.msgs[m];
            let owner = msg.owner;
            if msg.removed.is_some() || owner != Some((consumer, lref.fence.0)) {
                return Err(self.fail(
                    Check::Fencing,
                    format!(
                        "the store accepted {op} of m{m} by c{} with fence {}, but the current \
                         delivery is {} ({})",
                        consumer.0,
                        lref.fence.0,
                        owner.map_or("none".into(), |(o, f)| format!("c{} fence {f}", o.0)),
                        if msg.removed.is_some() {
                            "already removed"
                        } else {
                            "another replica's delivery"
                        }
                    ),
                ));
            }
            let removal = match op {
                OpKind::Ack => Removal::Acked,
                OpKind::DeadLetter => Removal::DeadLettered,
                _ => continue,
            };
            let justified = match removal {
                Removal::Acked => msg.done_by.contains(&consumer),
                Removal::DeadLettered => msg.failed_by.contains(&consumer),
            };
            if !justified {
                return Err(self.fail(
                    Check::NothingLost,
                    format!(
                        "m{m} {} by c{} although no invocation there {}",
                        if removal == Removal::Acked {
                            "acked"
                        } else {
                            "dead-lettered"
                        },
                        consumer.0,
                        if removal == Removal::Acked {
                            "returned Done uncancelled: its work is lost"
                        } else {
                            "failed or was rejected"
                        }
                    ),
                ));
            }
            self.msgs[m].removed = Some((removal, consumer));
            match removal {
                Removal::Acked => self.report.acked += 1,
                Removal::DeadLettered => self.report.dead_lettered += 1,
            }
        }
        Ok(())
    }

    // ----- the end -------------------------------------------------------------------------

    /// Once faults stopped and every message is acked or dead-lettered: shut every replica down.
    fn check_completed(&mut self) -> Res {
        if self.completed.is_none() && self.published == self.msgs.len() && self.store.is_empty() {
            self.completed = Some(self.now);
        }
        let Some(done) = self.completed else {
            return Ok(());
        };
        if !self.quiet || self.shutdown.is_some() {
            return Ok(());
        }
        self.report.completed_after_quiet = done.saturating_sub(self.report.quiet_at);
        self.log(Event::Completed);
        self.shutdown = Some(self.now);
        self.log(Event::Shutdown);
        let deadline = self.base + self.now + self.cfg.shutdown_grace;
        for r in 0..self.replicas.len() {
            let now = self.base + self.now;
            self.engine(r).handle_shutdown(now, deadline);
            self.pump(r)?;
        }
        self.at(
            drain_bound(self.cfg, &self.settings),
            Scheduled::DrainDeadline,
        );
        self.check_drained()
    }

    fn check_drained(&mut self) -> Res {
        if self.finished || self.replicas.iter().any(|r| !r.drained) {
            return Ok(());
        }
        // No leak: every engine drained with nothing held or running, and no call open but a
        // heartbeat (a renew holds nothing; the engine may drain while its last one is in
        // flight, and its answer changes nothing).
        for (r, rep) in self.replicas.iter().enumerate() {
            let e = rep.engine.as_ref().expect("live");
            let open = rep
                .open
                .iter()
                .filter(|&&c| !matches!(self.calls[c].op, Op::Renew { .. }))
                .count();
            if !e.is_drained() || e.held() != 0 || e.running() != 0 || open != 0 {
                return Err(self.fail(
                    Check::NoLeak,
                    format!(
                        "r{r} drained with held {}, running {}, {open} call(s) other than renews \
                         open",
                        e.held(),
                        e.running(),
                    ),
                ));
            }
            if !rep.handlers.is_empty() {
                return Err(self.fail(
                    Check::NoLeak,
                    format!(
                        "r{r} drained while {} invocation(s) still run",
                        rep.handlers.len()
                    ),
                ));
            }
        }
        let now = self.base + self.now;
        let pending = self.store.pending(now);
        if !pending.is_empty() || !self.store.is_empty() {
            return Err(self.fail(
                Check::NoLeak,
                format!(
                    "after shutdown the store still holds {} message(s), {} pending: {:?}",
                    self.store.len(),
                    pending.len(),
                    pending
                ),
            ));
        }
        // Nothing lost: each message acked or dead-lettered exactly once, as the store says.
        let dead = self.store.dead_letters();
        for (m, msg) in self.msgs.iter().enumerate() {
            let in_dead = dead.iter().filter(|d| d.id == msg.id).count();
            let expected = usize::from(matches!(msg.removed, Some((Removal::DeadLettered, _))));
            if msg.removed.is_none() || in_dead != expected {
                return Err(self.fail(
                    Check::NothingLost,
                    format!(
                        "m{m} ({}) ended as {:?} in the checker's log but appears {in_dead} \
                         time(s) in the dead-letter stream",
                        msg.behaviour, msg.removed
                    ),
                ));
            }
        }
        if dead.len() != self.report.dead_lettered {
            return Err(self.fail(
                Check::NothingLost,
                format!(
                    "{} dead letters in the store, {} accepted dead-letter calls",
                    dead.len(),
                    self.report.dead_lettered
                ),
            ));
        }
        self.finished = true;
        Ok(())
    }
}

fn settled(answer: Answer) -> SettleResult {
    match answer {
        Answer::Settled(result) => result,
        _ => SettleResult::Failed,
    }
}

fn short(outcome: &Outcome) -> String {
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
        "concurrency {}, prefetch {}, max_leases {}, claim {:?}, heartbeat {:?}, margin {:?}, \
         renew batch {}",
        settings.concurrency,
        settings.prefetch,
        settings.max_leases,
        settings.claim_timeout,
        settings.heartbeat_interval,
        settings.expiry_margin,
        settings.renew_batch_size
    )
}
