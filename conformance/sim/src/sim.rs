//! One seed: the world, its replicas (each the real worker on a node of its own), the
//! publishes and the faults on a schedule, and the checks after every step.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use event_listener::Event as Notify;
use leasehold_core::{Config, Dedupe, Due, MessageId, Outgoing, Stats};
use leasehold_memory::Bytes;
use leasehold_worker::{Health, Raw, ShutdownReport, Worker, WorkerBuilder};

use crate::backend::SimBackend;
use crate::behaviour::Behaviour;
use crate::bound::{drain_bound, liveness_bound};
use crate::checker::{
    lock, payload, Accepted, Msg, Outage, OutageMode, PublishPlan, ReplicaView, Shared, SharedState,
};
use crate::handler::handler;
use crate::rng::{mix, Rng};
use crate::runtime::{JoinHandle, NodeId, Step, World, WorldConfig};
use crate::store::ConsumerId;
use crate::trace::{Event, Trace};
use crate::{Check, Failure, SeedReport, SimConfig};

/// What the simulation schedules for itself.
#[derive(Debug)]
enum Scheduled {
    Publish(usize),
    /// The second publish of a message with a deduplication key: it must enqueue nothing.
    PublishAgain(usize),
    Crash(usize),
    Restart(usize),
    Pause {
        replica: usize,
        after_renew: bool,
    },
    Resume {
        replica: usize,
        pause: u64,
    },
    Stall(usize),
    StallEnd {
        replica: usize,
        stall: u64,
    },
    LinkFault(usize),
    /// The store becomes unavailable for a while.
    Outage,
    /// It is back.
    OutageEnd,
    /// A graceful restart (a rolling deploy): shut the worker down, start a fresh one.
    Deploy(usize),
    /// A replica woke (a pause or a stall ended) and has reacted: check it.
    Woke(usize),
    FaultsStop,
    Quiet,
    Deadline,
    DrainDeadline,
}

/// A replica, as the simulation drives it.
struct Replica {
    node: Option<NodeId>,
    worker: Option<Worker<Bytes>>,
    /// The shutdown under way: the worker's counters, then its report.
    shutdown: Option<JoinHandle<(Option<Stats>, ShutdownReport)>>,
    paused: Option<u64>,
    stalled: Option<u64>,
    restart_scheduled: bool,
    /// Its shutdown is a graceful restart, not the end of the run.
    deploying: bool,
}

type Res<T = ()> = Result<T, Box<Failure>>;

pub(crate) struct Sim {
    cfg: SimConfig,
    world: World<Scheduled>,
    shared: SharedState,
    /// A publish or a release happened: blocked fetches look again.
    changed: Arc<Notify>,
    network: NodeId,
    engine_config: Config,
    replicas: Vec<Replica>,
    next_consumer: u32,
    next_fault_id: u64,
    quiet: bool,
    deadline: Option<Instant>,
    completed: Option<Duration>,
    shutdown_at: Option<Duration>,
    finished: bool,
    steps: u64,
    /// Draws of the store's outages: a generator of their own, so the other draws of a seed
    /// stay what they were.
    outage_rng: Rng,
}

impl Sim {
    pub(crate) fn new(cfg: &SimConfig, seed: u64, print: bool, digest: bool) -> Self {
        let mut rng = Rng::new(mix(seed ^ 0x5eed_1ea5_e401_5133));
        let claim = cfg.claim_timeout;
        let concurrency = rng.range(1, cfg.max_concurrency as u64) as usize;
        let heartbeat = *rng.pick(&[claim / 4, claim / 3, claim * 2 / 5]);
        let max_leases = concurrency + rng.range(0, 3) as usize;
        // From a generator of its own, so the other draws of a seed stay what they were; at
        // most the room `max_leases` leaves (the config refuses more).
        let prefetch = (*Rng::new(mix(seed ^ 0x9e3f_e7c4_0b1d_2a55)).pick(&[0, 0, 1, 3]))
            .min(max_leases - concurrency);
        // One seed in four leaves the prefetch unset: it adapts, within `max_leases`.
        let adaptive = Rng::new(mix(seed ^ 0x3c1a_9d07_e5b2_64f8)).range(0, 3) == 0;
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
            .cancel_grace(cfg.cancel_grace)
            .renew_batch_size(*rng.pick(&[1000, 1000, 2, 3]))
            .fetch_backoff_max(cfg.fetch_backoff_max);
        let engine_config = if adaptive {
            engine_config
        } else {
            engine_config.prefetch(prefetch)
        };
        let settings = engine_config
            .validate()
            .expect("the simulator's engine configuration is valid");
        // Any fixed instant works; only differences matter.
        let base = Instant::now();
        let world_rng = Rng::new(mix(seed ^ 0x77a1_d0c3_9b2e_4f61));
        let mut world = World::with_config(
            base,
            world_rng,
            WorldConfig {
                trace_len: 0,
                ..WorldConfig::default()
            },
        );
        let network = world.new_node();
        let report = SeedReport {
            seed,
            messages: cfg.messages,
            replicas: cfg.replicas,
            concurrency,
            ..SeedReport::default()
        };
        let shared = Shared {
            cfg: cfg.clone(),
            seed,
            settings,
            clock: world.clock(),
            base,
            store: cfg.store.build(claim, base),
            rng,
            msgs: Vec::new(),
            by_id: HashMap::new(),
            invocations: Vec::new(),
            replicas: vec![ReplicaView::default(); cfg.replicas],
            faults_active: true,
            shutting_down: false,
            quiet_at: cfg.faults_until,
            next_call: 0,
            trace: Trace::new(cfg.trace_len, print, digest),
            report,
            failure: None,
            pauses_requested: Vec::new(),
            outages: Vec::new(),
        };
        Self {
            cfg: cfg.clone(),
            world,
            shared: Arc::new(Mutex::new(shared)),
            changed: Arc::new(Notify::new()),
            network,
            engine_config,
            replicas: Vec::new(),
            next_consumer: 0,
            next_fault_id: 0,
            quiet: false,
            deadline: None,
            completed: None,
            shutdown_at: None,
            finished: false,
            steps: 0,
            outage_rng: Rng::new(mix(seed ^ 0x0a7a_6e5d_41c3_9b27)),
        }
    }

    fn now(&self) -> Duration {
        self.world.elapsed()
    }

    fn at(&mut self, after: Duration, event: Scheduled) {
        let at = self.world.now() + after;
        self.world.schedule(at, event);
    }

    fn log(&self, event: Event) {
        lock(&self.shared).log(event);
    }

    fn fail(&self, check: Check, detail: String) -> Box<Failure> {
        let mut s = lock(&self.shared);
        s.fail(check, detail);
        s.failure.take().expect("just recorded")
    }

    // ----- the run -------------------------------------------------------------------------

    pub(crate) fn run(mut self) -> Res<SeedReport> {
        let cfg = self.cfg.clone();
        {
            // Due times and keys from a generator of their own, so the other draws of a seed
            // stay what they were.
            let seed = lock(&self.shared).seed;
            let mut plans = Rng::new(mix(seed ^ 0xde1a_7ed0_d0d0_5eed));
            let mut s = lock(&self.shared);
            for i in 0..cfg.messages {
                let behaviour = Behaviour::draw(&mut s.rng);
                let at = s.rng.duration(Duration::ZERO, cfg.publish_until);
                let plan = publish_plan(&cfg, &mut plans, i);
                let again = plan.again_after;
                s.msgs.push(Msg {
                    id: MessageId::from(""),
                    behaviour,
                    plan,
                    publish_at: at,
                    published_id: None,
                    due: None,
                    again_pending: again.is_some(),
                    published: false,
                    invocations: 0,
                    owner: None,
                    deliveries: Vec::new(),
                    removed: None,
                    done_by: Vec::new(),
                    failed_by: Vec::new(),
                });
                drop(s);
                self.at(at, Scheduled::Publish(i));
                if let Some(after) = again {
                    self.at(at + after, Scheduled::PublishAgain(i));
                }
                s = lock(&self.shared);
            }
        }
        for r in 0..cfg.replicas {
            self.replicas.push(Replica {
                node: None,
                worker: None,
                shutdown: None,
                paused: None,
                stalled: None,
                restart_scheduled: false,
                deploying: false,
            });
            self.start_replica(r);
            // Faults as Poisson arrivals per replica, until faults stop.
            let kinds = [
                (cfg.crash_mean, 0),
                (cfg.pause_mean, 1),
                (cfg.link_mean, 2),
                (cfg.stall_mean, 3),
                (cfg.deploy_mean, 4),
            ];
            for (mean, kind) in kinds {
                let mut t = lock(&self.shared).rng.exponential(mean);
                while t < cfg.faults_until {
                    let event = match kind {
                        0 => Scheduled::Crash(r),
                        1 => Scheduled::Pause {
                            replica: r,
                            after_renew: false,
                        },
                        2 => Scheduled::LinkFault(r),
                        3 => Scheduled::Stall(r),
                        _ => Scheduled::Deploy(r),
                    };
                    self.at(t, event);
                    t += lock(&self.shared).rng.exponential(mean);
                }
            }
        }
        if let Some(mean) = cfg.outage_mean {
            let mut t = self.outage_rng.exponential(mean);
            while t < cfg.faults_until {
                self.at(t, Scheduled::Outage);
                t += self.outage_rng.exponential(mean);
            }
        }
        self.at(cfg.faults_until, Scheduled::FaultsStop);
        loop {
            self.steps += 1;
            if self.steps > cfg.max_events {
                return Err(self.fail(
                    Check::Liveness,
                    format!(
                        "more than {} steps without finishing: a livelock",
                        cfg.max_events
                    ),
                ));
            }
            let step = match self.world.step() {
                Ok(step) => step,
                Err(busy) => {
                    return Err(self.fail(Check::Engine, format!("{busy} (a busy loop)")));
                }
            };
            match step {
                Step::Event(event) => self.event(event),
                Step::Advanced(_) => {}
                Step::Idle => {
                    return Err(self.fail(
                        Check::Liveness,
                        "nothing left to happen, but the run did not finish".into(),
                    ));
                }
            }
            self.after_step();
            if let Some(failure) = lock(&self.shared).failure.take() {
                return Err(failure);
            }
            if self.finished {
                break;
            }
        }
        let mut s = lock(&self.shared);
        s.report.virtual_time = self.world.elapsed();
        s.report.events = self.steps;
        s.report.digest = s.trace.digest.unwrap_or_default();
        Ok(s.report.clone())
    }

    fn event(&mut self, event: Scheduled) {
        match event {
            Scheduled::Publish(i) => self.publish(i),
            Scheduled::PublishAgain(i) => self.publish_again(i),
            Scheduled::Crash(r) => self.crash(r),
            Scheduled::Restart(r) => {
                self.replicas[r].restart_scheduled = false;
                self.start_replica(r);
            }
            Scheduled::Pause {
                replica,
                after_renew,
            } => self.pause(replica, after_renew),
            Scheduled::Resume { replica, pause } => {
                if self.replicas[replica].paused == Some(pause) {
                    self.replicas[replica].paused = None;
                    if let Some(node) = self.replicas[replica].node {
                        self.world.resume(node);
                    }
                    self.log(Event::Resume { r: replica as u16 });
                    self.woke(replica);
                }
            }
            Scheduled::Stall(r) => self.stall(r),
            Scheduled::StallEnd { replica, stall } => {
                if self.replicas[replica].stalled == Some(stall) {
                    self.replicas[replica].stalled = None;
                    self.woke(replica);
                }
            }
            Scheduled::LinkFault(r) => {
                let mut s = lock(&self.shared);
                if s.faults_active && self.replicas[r].node.is_some() {
                    let claim = self.cfg.claim_timeout;
                    let until = s.now() + s.rng.duration(claim / 4, claim * 2);
                    s.replicas[r].link_bad_until = until;
                    s.report.link_faults += 1;
                    s.log(Event::Link { r: r as u16, until });
                    s.fault_effect_until(until);
                }
            }
            Scheduled::Deploy(r) => self.deploy(r),
            Scheduled::Outage => self.outage(),
            Scheduled::OutageEnd => {
                self.log(Event::OutageEnd);
                self.changed.notify(usize::MAX);
            }
            Scheduled::Woke(r) => lock(&self.shared).check_woke(r),
            Scheduled::FaultsStop => {
                let mut s = lock(&self.shared);
                s.faults_active = false;
                s.log(Event::FaultsStop);
                // Just after the last fault effect, so it is processed after every one of them.
                let quiet = s.quiet_at.max(s.now()) + Duration::from_millis(1);
                s.report.quiet_at = quiet;
                let now = s.now();
                drop(s);
                self.at(quiet - now, Scheduled::Quiet);
            }
            Scheduled::Quiet => {
                self.quiet = true;
                let mut s = lock(&self.shared);
                let behaviours: Vec<Behaviour> = s.msgs.iter().map(|m| m.behaviour).collect();
                // Counted from when the last message may be delivered, if that is later.
                let available = s.msgs.iter().map(|m| m.publish_at + m.plan.delay()).max();
                let later = available.unwrap_or_default().saturating_sub(s.now());
                let bound =
                    (liveness_bound(&self.cfg, &s.settings, &behaviours, self.cfg.replicas)
                        + later)
                        .mul_f64(self.cfg.bound_scale);
                s.report.bound = bound;
                s.log(Event::Quiet { bound });
                drop(s);
                self.deadline = Some(self.world.now() + bound);
                self.at(bound, Scheduled::Deadline);
            }
            Scheduled::Deadline => {
                if self.completed.is_none() {
                    let mut s = lock(&self.shared);
                    let now = s.instant();
                    let rows = s.store.pending(now);
                    let mut detail = format!(
                        "{} message(s) unfinished ({} of them delayed) {:?} after the last \
                         fault effect ended (the bound)",
                        s.store.len() + s.store.delayed_len(),
                        s.store.delayed_len(),
                        s.report.bound
                    );
                    for row in rows {
                        let i = s.message_index(&row.id);
                        detail.push_str(&format!(
                            "\n    m{i} ({}) pending on c{} with count {}, idle {:?}",
                            s.msgs[i].behaviour, row.owner.0, row.delivery_count, row.idle
                        ));
                    }
                    s.fail(Check::Liveness, detail);
                }
            }
            Scheduled::DrainDeadline => {
                if !self.finished {
                    let stuck: Vec<String> = self
                        .replicas
                        .iter()
                        .enumerate()
                        .filter(|(_, rep)| rep.worker.is_some() || rep.shutdown.is_some())
                        .map(|(r, _)| format!("r{r}"))
                        .collect();
                    let bound = drain_bound(&self.cfg, &lock(&self.shared).settings);
                    lock(&self.shared).fail(
                        Check::NoLeak,
                        format!(
                            "shutdown did not finish within {bound:?}: no report from {}",
                            stuck.join(", ")
                        ),
                    );
                }
            }
        }
    }

    /// After every step the world is quiet: check it, act on what the replicas did.
    fn after_step(&mut self) {
        lock(&self.shared).check_single_runner();
        let requested = std::mem::take(&mut lock(&self.shared).pauses_requested);
        for (replica, after) in requested {
            self.at(
                after,
                Scheduled::Pause {
                    replica,
                    after_renew: true,
                },
            );
        }
        // A worker stopped by a fatal error is restarted, as an operator would.
        for r in 0..self.replicas.len() {
            let health = self.replicas[r].worker.as_ref().map(|w| w.health());
            if let Some(Health::Stopped(why)) = health {
                if self.shutdown_at.is_none() {
                    lock(&self.shared).check_halt_cause(r, &why);
                    self.halted(r);
                }
            }
        }
        self.collect_reports();
        self.check_completed();
    }

    /// The store is unavailable from now for a while (one outage at a time): down or paused,
    /// half the time each. Calls it holds execute at its end, and a driver gives up on one
    /// after its call timeout: the effect is over a claim timeout and a call timeout later
    /// (room for a client that queues while it is down, `BrokenDriver::QueuesWhileDown`).
    fn outage(&mut self) {
        let mut s = lock(&self.shared);
        if !s.faults_active || s.outage().is_some() {
            return;
        }
        let claim = self.cfg.claim_timeout;
        let len = self.outage_rng.duration(claim / 20, self.cfg.outage_max);
        let down = self.outage_rng.chance(0.5);
        let from = s.now();
        let until = from + len;
        s.outages.push(Outage {
            mode: if down {
                OutageMode::Down
            } else {
                OutageMode::Paused
            },
            from,
            until,
        });
        s.report.outages += 1;
        s.log(Event::Outage { down, until });
        s.fault_effect_until(until + claim + self.cfg.call_timeout);
        drop(s);
        // A fetch blocked in the store finds out.
        self.changed.notify(usize::MAX);
        self.at(len, Scheduled::OutageEnd);
    }

    /// Publishing waits for the store to be back, if it is away (the simulator's own
    /// publishes are not network calls).
    fn deferred(&mut self, event: Scheduled) -> Option<Scheduled> {
        let outage = lock(&self.shared).outage();
        match outage {
            Some(outage) => {
                let now = lock(&self.shared).now();
                self.at(outage.until - now, event);
                None
            }
            None => Some(event),
        }
    }

    fn publish(&mut self, i: usize) {
        if self.deferred(Scheduled::Publish(i)).is_none() {
            return;
        }
        let mut s = lock(&self.shared);
        let now = s.instant();
        let message = outgoing(i, &s.msgs[i].plan);
        let published = s.store.publish(now, message);
        if published.duplicate {
            let detail = format!(
                "the first publish of m{i} was answered as a duplicate of {}",
                published.id
            );
            s.fail(Check::Dedupe, detail);
        }
        let delayed = published.id.as_str().starts_with("delayed:");
        if delayed {
            s.report.delayed += 1;
        } else {
            // A delayed message's entry id is known at its first delivery.
            s.by_id.insert(published.id.clone(), i);
            s.msgs[i].id = published.id.clone();
        }
        let due = s.msgs[i].plan.due.map(|_| s.now() + s.msgs[i].plan.delay());
        let msg = &mut s.msgs[i];
        msg.published = true;
        msg.published_id = Some(published.id.clone());
        msg.due = due;
        let event = Event::Publish {
            m: i as u32,
            behaviour: msg.behaviour.to_string(),
            id: published.id.to_string(),
            due,
            keyed: msg.plan.key.is_some(),
        };
        s.log(event);
        drop(s);
        self.changed.notify(usize::MAX);
    }

    /// Publishes message `i` again, with its deduplication key: the store must answer the
    /// first publish's id and enqueue nothing.
    fn publish_again(&mut self, i: usize) {
        if self.deferred(Scheduled::PublishAgain(i)).is_none() {
            return;
        }
        let mut s = lock(&self.shared);
        let now = s.instant();
        let message = outgoing(i, &s.msgs[i].plan);
        let published = s.store.publish(now, message);
        let first = s.msgs[i].published_id.clone();
        s.msgs[i].again_pending = false;
        s.log(Event::PublishAgain {
            m: i as u32,
            id: published.id.to_string(),
            duplicate: published.duplicate,
        });
        if published.duplicate && Some(&published.id) == first.as_ref() {
            s.report.duplicates += 1;
            return;
        }
        let detail = format!(
            "m{i} published again with its deduplication key within the key's time to live: \
             answered {} (duplicate: {}), the first publish answered {}",
            published.id,
            published.duplicate,
            first.map_or("nothing".into(), |id| id.to_string())
        );
        s.fail(Check::Dedupe, detail);
        drop(s);
        self.changed.notify(usize::MAX);
    }

    // ----- replicas ------------------------------------------------------------------------

    fn start_replica(&mut self, r: usize) {
        let consumer = ConsumerId(self.next_consumer);
        self.next_consumer += 1;
        let node = self.world.new_node();
        let incarnation = {
            let mut s = lock(&self.shared);
            s.store.add_consumer(consumer);
            let view = &mut s.replicas[r];
            view.incarnation += 1;
            view.consumer = consumer;
            view.frozen = false;
            view.waking = false;
            view.shutting_down = false;
            view.accepted = Accepted::default();
            view.reported_at = None;
            let incarnation = view.incarnation;
            if self.world.elapsed() > Duration::ZERO {
                s.report.restarts += 1;
                s.log(Event::Restart {
                    r: r as u16,
                    consumer: consumer.0,
                });
            }
            incarnation
        };
        let backend = SimBackend {
            shared: self.shared.clone(),
            replica: r,
            consumer,
            claim_timeout: self.cfg.claim_timeout,
            network: self.world.runtime(self.network),
            changed: self.changed.clone(),
        };
        let rt = self.world.runtime(node);
        let seed = lock(&self.shared).seed;
        let config = self
            .engine_config
            .clone()
            .seed(mix(seed ^ ((r as u64) << 32) ^ u64::from(incarnation)));
        let worker = WorkerBuilder::new(rt.clone())
            .config(config)
            .call_timeout(self.cfg.call_timeout)
            .stream_with_codec("s", backend, Raw, handler(self.shared.clone(), r, rt))
            .start()
            .expect("the simulator's worker configuration is valid");
        let replica = &mut self.replicas[r];
        replica.node = Some(node);
        replica.worker = Some(worker);
        replica.paused = None;
        replica.stalled = None;
    }

    /// Kills the replica's node (its worker, handlers and calls in flight die with it;
    /// requests already on the wire still land) and schedules its restart.
    fn kill(&mut self, r: usize, restart_in: Duration) {
        if let Some(node) = self.replicas[r].node.take() {
            self.world.kill(node);
        }
        drop(self.replicas[r].worker.take());
        drop(self.replicas[r].shutdown.take());
        self.replicas[r].deploying = false;
        self.replicas[r].paused = None;
        self.replicas[r].stalled = None;
        let mut s = lock(&self.shared);
        s.crashed(r);
        s.replicas[r].shutting_down = false;
        s.replicas[r].frozen = false;
        s.replicas[r].waking = false;
        let until = s.now() + restart_in;
        s.fault_effect_until(until);
        drop(s);
        self.replicas[r].restart_scheduled = true;
        self.at(restart_in, Scheduled::Restart(r));
    }

    fn crash(&mut self, r: usize) {
        if self.replicas[r].node.is_none() || !lock(&self.shared).faults_active {
            return;
        }
        let restart_in = lock(&self.shared)
            .rng
            .duration(Duration::from_millis(500), self.cfg.claim_timeout * 2);
        {
            let mut s = lock(&self.shared);
            s.report.crashes += 1;
            s.log(Event::Crash {
                r: r as u16,
                restart_in,
            });
        }
        self.kill(r, restart_in);
    }

    /// Shuts the replica's worker down with the configured grace; once it reports, the
    /// report is checked and a fresh incarnation starts (see `collect_reports`).
    fn deploy(&mut self, r: usize) {
        if !lock(&self.shared).faults_active || self.replicas[r].node.is_none() {
            return;
        }
        let Some(worker) = self.replicas[r].worker.take() else {
            return;
        };
        {
            let mut s = lock(&self.shared);
            s.report.deploys += 1;
            s.replicas[r].shutting_down = true;
            s.log(Event::Deploy { r: r as u16 });
            // The restart follows the report: the grace, the hand-off, a restart delay.
            let until = s.now() + self.cfg.shutdown_grace + self.cfg.claim_timeout * 2;
            s.fault_effect_until(until);
        }
        self.replicas[r].deploying = true;
        self.replicas[r].shutdown = Some(self.spawn_shutdown(r, worker));
    }

    /// The worker's counters, then its shutdown report, from a task on its own node.
    fn spawn_shutdown(
        &mut self,
        r: usize,
        worker: Worker<Bytes>,
    ) -> JoinHandle<(Option<Stats>, ShutdownReport)> {
        let node = self.replicas[r].node.expect("a running replica has a node");
        let grace = self.cfg.shutdown_grace;
        self.world.spawn(node, async move {
            let stats = worker.stats().await;
            let report = worker.shutdown(grace).await;
            (stats, report)
        })
    }

    /// A fatal error stopped the replica's worker: restart it.
    fn halted(&mut self, r: usize) {
        // At most a claim timeout: the fatal call's fault effect lasts that long (see
        // `SimBackend::plan`).
        let restart_in = lock(&self.shared)
            .rng
            .duration(Duration::from_millis(100), self.cfg.claim_timeout);
        {
            let mut s = lock(&self.shared);
            s.report.halts += 1;
            s.log(Event::Halted {
                r: r as u16,
                restart_in,
            });
        }
        self.kill(r, restart_in);
    }

    fn pause(&mut self, r: usize, after_renew: bool) {
        let Some(node) = self.replicas[r].node else {
            return;
        };
        if self.replicas[r].paused.is_some() || !lock(&self.shared).faults_active {
            return;
        }
        let claim = self.cfg.claim_timeout;
        let length = {
            let mut s = lock(&self.shared);
            // Short stalls, pauses around the lease, and pauses well past the claim timeout;
            // right after a heartbeat, pauses around the lease.
            let roll = s.rng.below(10);
            match roll {
                _ if after_renew => s.rng.duration(claim / 2, self.cfg.pause_after_renew_max),
                0..=2 => s.rng.duration(claim / 20, claim / 2),
                3..=6 => s.rng.duration(claim / 2, claim * 3 / 2),
                _ => s.rng.duration(claim * 3 / 2, claim * 3),
            }
        };
        self.next_fault_id += 1;
        let id = self.next_fault_id;
        self.world.pause(node);
        self.replicas[r].paused = Some(id);
        self.update_frozen(r);
        {
            let mut s = lock(&self.shared);
            s.report.pauses += 1;
            let until = s.now() + length;
            s.log(Event::Pause { r: r as u16, until });
            s.fault_effect_until(until);
        }
        self.at(
            length,
            Scheduled::Resume {
                replica: r,
                pause: id,
            },
        );
    }

    fn stall(&mut self, r: usize) {
        let Some(node) = self.replicas[r].node else {
            return;
        };
        if self.replicas[r].stalled.is_some() || !lock(&self.shared).faults_active {
            return;
        }
        let claim = self.cfg.claim_timeout;
        let length = lock(&self.shared).rng.duration(claim / 20, claim * 2);
        self.next_fault_id += 1;
        let id = self.next_fault_id;
        self.world.stall_clock(node, length);
        self.replicas[r].stalled = Some(id);
        self.update_frozen(r);
        {
            let mut s = lock(&self.shared);
            s.report.stalls += 1;
            let until = s.now() + length;
            s.log(Event::Stall { r: r as u16, until });
            s.fault_effect_until(until);
        }
        self.at(
            length,
            Scheduled::StallEnd {
                replica: r,
                stall: id,
            },
        );
    }

    /// A pause or a stall ended: once the replica is neither paused nor stalled and has
    /// reacted (the tasks woken at this instant ran), check what it still runs. Until then
    /// the checker leaves its invocations be: it cannot have acted on what it missed yet.
    fn woke(&mut self, r: usize) {
        if self.update_frozen(r) {
            lock(&self.shared).replicas[r].waking = true;
            self.at(Duration::ZERO, Scheduled::Woke(r));
        }
    }

    /// Tells the checker whether the replica can act on what it knows right now; true if
    /// it can.
    fn update_frozen(&mut self, r: usize) -> bool {
        let frozen = self.replicas[r].paused.is_some() || self.replicas[r].stalled.is_some();
        let mut s = lock(&self.shared);
        if s.replicas[r].frozen && !frozen {
            s.replicas[r].thawed_at = s.now();
        }
        s.replicas[r].frozen = frozen;
        drop(s);
        !frozen
    }

    // ----- the end -------------------------------------------------------------------------

    /// Once faults stopped and every message is acked or dead-lettered: shut every replica down.
    fn check_completed(&mut self) {
        let done = lock(&self.shared).all_done();
        if self.completed.is_none() && done {
            self.completed = Some(self.now());
        }
        let Some(done_at) = self.completed else {
            return;
        };
        if !self.quiet
            || self.shutdown_at.is_some()
            || self
                .replicas
                .iter()
                .any(|r| r.restart_scheduled || r.deploying)
        {
            return;
        }
        {
            let mut s = lock(&self.shared);
            s.report.completed_after_quiet = done_at.saturating_sub(s.report.quiet_at);
            s.shutting_down = true;
            s.log(Event::Completed);
            s.log(Event::Shutdown);
        }
        self.shutdown_at = Some(self.now());
        for r in 0..self.replicas.len() {
            if self.replicas[r].node.is_none() {
                continue;
            }
            let Some(worker) = self.replicas[r].worker.take() else {
                continue;
            };
            lock(&self.shared).replicas[r].shutting_down = true;
            self.replicas[r].shutdown = Some(self.spawn_shutdown(r, worker));
        }
        let bound = drain_bound(&self.cfg, &lock(&self.shared).settings);
        self.at(bound, Scheduled::DrainDeadline);
    }

    /// Takes the shutdown reports that came in, checks each replica as it stops, and the store
    /// once all have.
    fn collect_reports(&mut self) {
        for r in 0..self.replicas.len() {
            let Some(handle) = self.replicas[r].shutdown.as_mut() else {
                continue;
            };
            let Some((stats, report)) = handle.try_take() else {
                continue;
            };
            self.replicas[r].shutdown = None;
            let mut s = lock(&self.shared);
            let now = s.now();
            s.replicas[r].reported_at = Some(now);
            s.log(Event::Reported { r: r as u16 });
            if let Some(invocation) = s
                .invocations
                .iter()
                .find(|invocation| invocation.replica == r && !invocation.ended)
            {
                let msg = invocation.msg;
                s.fail(
                    Check::NoLeak,
                    format!("r{r}'s worker reported its shutdown while its handler of m{msg} runs"),
                );
            }
            match stats {
                Some(stats) if stats.unexpected > 0 => s.fail(
                    Check::Engine,
                    format!(
                        "r{r}'s driver gave its engine {} input(s) it never asked for",
                        stats.unexpected
                    ),
                ),
                Some(stats) => s.report.stale_inputs += stats.stale,
                None => {}
            }
            s.check_report(r, &report);
            for halted in &report.halted {
                s.check_halt_cause(r, &halted.error);
            }
            if self.replicas[r].deploying {
                // Faults still strike during a deploy: a fatal one may halt a stream then.
                let restart_in = s
                    .rng
                    .duration(Duration::from_millis(100), Duration::from_secs(2));
                s.log(Event::Redeployed {
                    r: r as u16,
                    restart_in,
                });
                drop(s);
                self.kill(r, restart_in);
                continue;
            }
            if !report.halted.is_empty() {
                s.fail(
                    Check::NoLeak,
                    format!(
                        "r{r} reported halted streams at shutdown: {:?}",
                        report.halted
                    ),
                );
            }
        }
        let all_in = self.shutdown_at.is_some()
            && self
                .replicas
                .iter()
                .all(|r| r.shutdown.is_none() && r.worker.is_none());
        if all_in && !self.finished {
            self.check_drained();
        }
    }

    fn check_drained(&mut self) {
        let mut s = lock(&self.shared);
        let now = s.instant();
        let pending = s.store.pending(now);
        if !pending.is_empty() || !s.store.is_empty() {
            let detail = format!(
                "after shutdown the store still holds {} message(s), {} pending: {:?}",
                s.store.len(),
                pending.len(),
                pending
            );
            s.fail(Check::NoLeak, detail);
            return;
        }
        if s.store.delayed_len() > 0 {
            let detail = format!(
                "after shutdown {} delayed message(s) still wait",
                s.store.delayed_len()
            );
            s.fail(Check::NothingLost, detail);
            return;
        }
        // Nothing lost: each message acked or dead-lettered exactly once, as the store says.
        let dead = s.store.dead_letters();
        for (m, msg) in s.msgs.iter().enumerate() {
            let in_dead = dead.iter().filter(|d| d.id == msg.id).count();
            let expected = usize::from(matches!(
                msg.removed,
                Some((crate::checker::Removal::DeadLettered, _))
            ));
            if msg.removed.is_none() || in_dead != expected {
                let detail = format!(
                    "m{m} ({}) ended as {:?} in the checker's log but appears {in_dead} time(s) \
                     in the dead-letter stream",
                    msg.behaviour, msg.removed
                );
                s.fail(Check::NothingLost, detail);
                return;
            }
        }
        if dead.len() != s.report.dead_lettered {
            let detail = format!(
                "{} dead letters in the store, {} accepted dead-letter calls",
                dead.len(),
                s.report.dead_lettered
            );
            s.fail(Check::NothingLost, detail);
            return;
        }
        drop(s);
        self.finished = true;
    }
}

/// How long a deduplication key is remembered: longer than any run.
const KEY_TTL: Duration = Duration::from_secs(24 * 3600);

/// Draws how message `i` is published (the mix is in [`SimConfig`]'s docs).
fn publish_plan(cfg: &SimConfig, rng: &mut Rng, i: usize) -> PublishPlan {
    let max = cfg.delay_max;
    let due = rng.chance(cfg.delayed_share).then(|| match rng.below(8) {
        // Already due: a delay of zero, or a wall-clock time in the past.
        0 if rng.chance(0.5) => Due::After(Duration::ZERO),
        0 => Due::At(std::time::UNIX_EPOCH),
        1..=3 => Due::After(rng.duration(Duration::from_millis(1), max / 150)),
        4..=5 => Due::After(rng.duration(max / 150, max / 3)),
        _ => Due::After(rng.duration(max / 3, max)),
    });
    let key = rng.chance(cfg.dedupe_share).then(|| format!("key-{i}"));
    let again_after = key
        .as_ref()
        .filter(|_| rng.chance(0.5))
        .map(|_| rng.duration(Duration::from_millis(1), cfg.claim_timeout * 2));
    PublishPlan {
        due,
        key,
        again_after,
    }
}

/// Message `i` as its plan publishes it.
fn outgoing(i: usize, plan: &PublishPlan) -> Outgoing<Bytes> {
    Outgoing::new(payload(i))
        .with_due(plan.due)
        .with_dedupe(plan.key.clone().map(|key| Dedupe::new(key, KEY_TTL)))
}
