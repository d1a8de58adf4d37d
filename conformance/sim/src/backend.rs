//! The backend each replica's real worker runs against: a [`Backend`] whose calls cross a
//! simulated network to the shared store.
//!
//! A call is planned when the driver makes it (its fault and delays are drawn then). Its
//! request travels on the **network node**, which is never paused or killed: it reaches the
//! store after the request delay whatever happens to its sender meanwhile (a request on the
//! wire still lands when its process dies), executes there atomically at that instant, and
//! its answer comes back after the answer delay. The sender's future only waits for that
//! answer: a paused replica finds it waiting when it resumes; a dead one never reads it; the
//! driver's call timeout gives up on it like on any slow call.
//!
//! A fetch that finds nothing blocks in the store like the memory backend does on a real clock:
//! it looks again on a publish, a release, the next lapse or the next delayed message's due
//! time, until its `wait` is over; one its driver dropped (timed out, abandoned at shutdown,
//! crashed) takes nothing. Its answer carries how long after its execution the next delayed
//! message is due, as a Redis fetch's does ([`FetchAnswer::next_due`]).
//!
//! Faults are drawn per call while faults are on: fail fast (transient, or now and then
//! fatal), lose the answer after executing, be slow (either leg up to 1.5 × the claim
//! timeout, or the request landing half to one claim timeout late), or reach the store twice.
//! A [`BrokenDriver`] is applied here too, at the boundary between the driver and the store.

use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use event_listener::Event as Notify;
use futures::channel::oneshot;
use futures::future::select;
use leasehold_core::{
    Backend, BackendError, BackendResult, CancelReason, DeadLetterReason, ErrorKind, FetchAnswer,
    Fetched, LeaseRef, MessageId, Outcome, Outgoing, RenewResult, SettleResult,
};
use leasehold_memory::Bytes;
use leasehold_worker::Runtime;

use crate::checker::{latency, lock, BrokenDriver, OutageMode, SharedState, INJECTED_FATAL};
use crate::runtime::SimRuntime;
use crate::store::ConsumerId;
use crate::trace::{Event, Fault, OpKind};

/// One replica incarnation's backend handle.
pub(crate) struct SimBackend {
    pub(crate) shared: SharedState,
    pub(crate) replica: usize,
    pub(crate) consumer: ConsumerId,
    pub(crate) claim_timeout: Duration,
    /// Where requests travel: never paused, never killed.
    pub(crate) network: SimRuntime,
    /// Notified when something may have become fetchable (a publish, a release).
    pub(crate) changed: Arc<Notify>,
}

/// What a call asks of the store.
enum Request {
    Fetch { max: usize, wait: Duration },
    Renew(Vec<LeaseRef>),
    Ack(Vec<LeaseRef>),
    Release(LeaseRef, Duration),
    DeadLetter(LeaseRef, DeadLetterReason),
}

impl Request {
    fn kind(&self) -> OpKind {
        match self {
            Request::Fetch { .. } => OpKind::Fetch,
            Request::Renew(_) => OpKind::Renew,
            Request::Ack(_) => OpKind::Ack,
            Request::Release(..) => OpKind::Release,
            Request::DeadLetter(..) => OpKind::DeadLetter,
        }
    }
}

/// What the store answered.
enum Answer {
    /// The deliveries, and how long after the fetch the next delayed message is due.
    Fetched(Vec<Fetched<Bytes>>, Option<Duration>),
    Renewed(Vec<RenewResult>),
    Settled(Vec<SettleResult>),
    /// The store went down under a blocked fetch: its connection is gone.
    Reset,
}

/// A call's fault and delays.
struct Plan {
    call: u32,
    fault: Fault,
    request: Duration,
    answer: Duration,
}

/// Set when the sender's future is dropped: a blocked fetch then stops and takes nothing.
struct Abandon(Arc<AtomicBool>);

impl Drop for Abandon {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

impl SimBackend {
    /// Draws the call's fault and delays, and logs it.
    fn plan(&self, request: &Request) -> Plan {
        let mut s = lock(&self.shared);
        let cfg = s.cfg.clone();
        let claim = cfg.claim_timeout;
        let now = s.now();
        let bad_link = now < s.replicas[self.replica].link_bad_until;
        let p = if bad_link {
            cfg.link_fault
        } else {
            cfg.call_fault
        };
        let fault = if s.faults_active && !s.shutting_down && s.rng.chance(p) {
            if s.rng.chance(cfg.slow_share) {
                Fault::Slow
            } else if s.rng.chance(cfg.duplicate_share) {
                Fault::Duplicate
            } else if s.rng.chance(0.55) {
                let kind = if s.rng.chance(cfg.fatal_share) {
                    ErrorKind::Fatal
                } else {
                    ErrorKind::Transient
                };
                Fault::FailFast(kind)
            } else {
                Fault::LoseAnswer
            }
        } else {
            Fault::None
        };
        let (mut request_delay, mut answer_delay) =
            (latency(&mut s.rng, &cfg), latency(&mut s.rng, &cfg));
        if fault == Fault::Slow {
            // The request lands around the lease boundary (half to one claim timeout late),
            // or the answer is late (up to 1.5 × the claim timeout), or both legs are.
            if s.rng.chance(cfg.slow_request_edge) {
                request_delay = s.rng.duration(claim / 2, claim);
            } else if s.rng.chance(0.5) {
                answer_delay = s.rng.duration(Duration::ZERO, claim * 3 / 2);
            } else {
                request_delay = s.rng.duration(Duration::ZERO, claim * 3 / 4);
                answer_delay = s.rng.duration(Duration::ZERO, claim * 3 / 4);
            }
        }
        match fault {
            Fault::FailFast(_) => s.report.failed_calls += 1,
            Fault::LoseAnswer => s.report.lost_answers += 1,
            Fault::Slow => s.report.slow_calls += 1,
            Fault::Duplicate => s.report.duplicated_calls += 1,
            Fault::None => {}
        }
        let wait = match request {
            Request::Fetch { wait, .. } => *wait,
            _ => Duration::ZERO,
        };
        // The driver bounds every call; the fault's effect is over once it gave up, or, for a
        // fatal error (which stops the worker), once the stopped worker has been restarted
        // (within a claim timeout) and had time to notice.
        let mut horizon = (request_delay + wait + answer_delay).max(cfg.call_timeout + wait);
        if fault == Fault::FailFast(ErrorKind::Fatal) {
            horizon = request_delay + answer_delay + claim + Duration::from_millis(100);
        }
        if fault != Fault::None {
            s.fault_effect_until(now + horizon);
        }
        let call = s.next_call;
        s.next_call += 1;
        let msgs = match request {
            Request::Fetch { .. } => Box::new([]) as Box<[(u32, u64)]>,
            Request::Renew(lease_refs) | Request::Ack(lease_refs) => s.msg_fences(lease_refs),
            Request::Release(lease_ref, _) | Request::DeadLetter(lease_ref, _) => {
                s.msg_fences(std::slice::from_ref(lease_ref))
            }
        };
        s.log(Event::Call {
            r: self.replica as u16,
            call,
            op: request.kind(),
            msgs,
            fault,
            exec_in: request_delay,
        });
        Plan {
            call,
            fault,
            request: request_delay,
            answer: answer_delay,
        }
    }

    /// Sends `request` across the network and waits for its answer (forever, if it is lost:
    /// the driver's call timeout gives up on it).
    async fn call(&self, request: Request) -> BackendResult<Answer> {
        self.call_planned(request).await.2
    }

    /// [`call`](Self::call), with the call's number and fault.
    async fn call_planned(&self, request: Request) -> (u32, Fault, BackendResult<Answer>) {
        let plan = self.plan(&request);
        let (number, fault) = (plan.call, plan.fault);
        let queues = self.broken() == Some(BrokenDriver::QueuesWhileDown);
        let (reply, answer) = oneshot::channel();
        let abandoned = Arc::new(AtomicBool::new(false));
        let _abandon = Abandon(abandoned.clone());
        let network = self.network.clone();
        let shared = self.shared.clone();
        let changed = self.changed.clone();
        let (replica, consumer) = (self.replica, self.consumer);
        self.network.spawn_unboxed(async move {
            let now = network.now();
            network.sleep_until(now + plan.request).await;
            // A store that is away: paused, it holds the request until it is back; down, the
            // request fails (a broken client holds it, and sends it once reconnected).
            loop {
                let (outage, base, claim) = {
                    let s = lock(&shared);
                    (s.outage(), s.base, s.cfg.claim_timeout)
                };
                let Some(outage) = outage else { break };
                let back = base + outage.until;
                match outage.mode {
                    OutageMode::Paused => network.sleep_until(back).await,
                    OutageMode::Down if queues => network.sleep_until(back + claim).await,
                    OutageMode::Down => {
                        network.sleep_until(network.now() + plan.answer).await;
                        let refused = BackendError::transient("the store is down: refused");
                        let _ = reply.send(Err(refused));
                        return;
                    }
                }
            }
            if let Fault::FailFast(kind) = plan.fault {
                let error = match kind {
                    ErrorKind::Transient => BackendError::transient("the network failed the call"),
                    ErrorKind::Fatal => BackendError::fatal(INJECTED_FATAL),
                };
                network.sleep_until(network.now() + plan.answer).await;
                let _ = reply.send(Err(error));
                return;
            }
            let exec = Exec {
                shared: &shared,
                network: &network,
                changed: &changed,
                replica,
                consumer,
                call: plan.call,
                abandoned: &abandoned,
            };
            let Some(result) = exec.run(&request).await else {
                return; // a fetch its driver dropped
            };
            if let Answer::Reset = result {
                network.sleep_until(network.now() + plan.answer).await;
                let reset = BackendError::transient("the store went down: connection reset");
                let _ = reply.send(Err(reset));
                return;
            }
            if plan.fault == Fault::Duplicate {
                // The same request lands a second time, a little later: what it takes is not
                // reported (a fetch's extra deliveries lapse and are reclaimed).
                network
                    .sleep_until(network.now() + Duration::from_millis(1))
                    .await;
                let _ = exec.run(&request).await;
            }
            if plan.fault == Fault::LoseAnswer {
                return;
            }
            network.sleep_until(network.now() + plan.answer).await;
            lock(&shared).log(Event::Answered {
                r: replica as u16,
                call: plan.call,
                op: request.kind(),
            });
            let _ = reply.send(Ok(result));
        });
        match answer.await {
            Ok(result) => (number, fault, result),
            // Lost: never answered.
            Err(_) => std::future::pending().await,
        }
    }
}

/// One execution of a request at the store.
struct Exec<'a> {
    shared: &'a SharedState,
    network: &'a SimRuntime,
    changed: &'a Notify,
    replica: usize,
    consumer: ConsumerId,
    call: u32,
    abandoned: &'a AtomicBool,
}

impl Exec<'_> {
    /// Executes `request` at the store (a fetch may block); `None` if a fetch's driver gave up.
    async fn run(&self, request: &Request) -> Option<Answer> {
        match request {
            Request::Fetch { max, wait } => self.fetch(*max, *wait).await,
            Request::Renew(lease_refs) => Some(Answer::Renewed(self.renew(lease_refs))),
            Request::Ack(lease_refs) => Some(Answer::Settled(self.settle(
                OpKind::Ack,
                lease_refs,
                |s, c, n| s.store.ack(n, c, lease_refs),
            ))),
            Request::Release(lease_ref, delay) => {
                let results = self.settle(
                    OpKind::Release,
                    std::slice::from_ref(lease_ref),
                    |s, c, n| vec![s.store.release(n, c, lease_ref, *delay)],
                );
                if results == [SettleResult::Ok] {
                    self.changed.notify(usize::MAX);
                }
                Some(Answer::Settled(results))
            }
            Request::DeadLetter(lease_ref, reason) => Some(Answer::Settled(self.settle(
                OpKind::DeadLetter,
                std::slice::from_ref(lease_ref),
                |s, c, n| vec![s.store.dead_letter(n, c, lease_ref, reason)],
            ))),
        }
    }

    async fn fetch(&self, max: usize, wait: Duration) -> Option<Answer> {
        let deadline = self.network.now() + wait;
        let mut blocked = false;
        loop {
            if self.abandoned.load(Ordering::SeqCst) {
                return None;
            }
            let (outage, base) = {
                let s = lock(self.shared);
                (s.outage(), s.base)
            };
            match outage.map(|o| (o.mode, base + o.until)) {
                Some((OutageMode::Down, _)) => return Some(Answer::Reset),
                Some((OutageMode::Paused, back)) => {
                    self.network.sleep_until(back).await;
                    continue;
                }
                None => {}
            }
            let listener = self.changed.listen();
            let wake_at = {
                let mut s = lock(self.shared);
                let now = s.instant();
                let got = s.store.fetch(now, self.consumer, max);
                let next_due = s.store.next_due(now);
                if !got.is_empty() || now >= deadline {
                    let mut list = Vec::with_capacity(got.len());
                    for f in &got {
                        let m = s.fetched_index(f);
                        list.push((m as u32, f.fence.0));
                        s.delivered(m, self.consumer, f.fence.0);
                    }
                    s.log(Event::Fetched {
                        r: self.replica as u16,
                        call: self.call,
                        got: list.into(),
                    });
                    let next_due = next_due.map(|at| at.saturating_duration_since(now));
                    return Some(Answer::Fetched(got, next_due));
                }
                if !blocked {
                    blocked = true;
                    s.log(Event::Blocked {
                        r: self.replica as u16,
                        call: self.call,
                    });
                }
                let lapse = s.store.next_claimable(now).filter(|&at| at > now);
                let due = next_due.filter(|&at| at > now);
                [lapse, due]
                    .into_iter()
                    .flatten()
                    .fold(deadline, Instant::min)
            };
            let sleep = pin!(self.network.sleep_until(wake_at));
            let _ = select(sleep, listener).await;
        }
    }

    fn renew(&self, lease_refs: &[LeaseRef]) -> Vec<RenewResult> {
        let mut s = lock(self.shared);
        let now = s.instant();
        let results = s.store.renew(now, self.consumer, lease_refs);
        let logged = lease_refs
            .iter()
            .zip(&results)
            .map(|(l, res)| (s.message_index(&l.id) as u32, l.fence.0, *res))
            .collect();
        s.log(Event::Renewed {
            r: self.replica as u16,
            call: self.call,
            results: logged,
        });
        results
    }

    fn settle(
        &self,
        op: OpKind,
        lease_refs: &[LeaseRef],
        act: impl FnOnce(&mut crate::checker::Shared, ConsumerId, Instant) -> Vec<SettleResult>,
    ) -> Vec<SettleResult> {
        let mut s = lock(self.shared);
        let now = s.instant();
        let results = act(&mut s, self.consumer, now);
        s.settled(
            self.replica,
            self.call,
            op,
            self.consumer,
            lease_refs,
            &results,
        );
        results
    }
}

impl Backend for SimBackend {
    type Payload = Bytes;

    fn claim_timeout(&self) -> Option<Duration> {
        Some(self.claim_timeout)
    }

    async fn publish(&self, payload: Bytes) -> BackendResult<MessageId> {
        let mut s = lock(&self.shared);
        let now = s.instant();
        let id = s.store.publish(now, Outgoing::new(payload)).id;
        drop(s);
        self.changed.notify(usize::MAX);
        Ok(id)
    }

    /// Checks, as the answer reaches the driver, that deliveries whose leases are spent by
    /// now are so only because of a fault (`Shared::check_in_transit`). The next due time is
    /// as of the fetch's execution at the store (the driver adds it to the instant, on its own
    /// clock, the answer reached it).
    async fn fetch(&self, max: usize, wait: Duration) -> BackendResult<FetchAnswer<Bytes>> {
        let sent = lock(&self.shared).now();
        let (call, fault, answer) = self.call_planned(Request::Fetch { max, wait }).await;
        match answer? {
            Answer::Fetched(got, next_due) => {
                lock(&self.shared).check_in_transit(self.replica, call, sent, fault, got.len());
                Ok(FetchAnswer::new(got).with_next_due(next_due))
            }
            _ => unreachable!("a fetch is answered with deliveries"),
        }
    }

    async fn renew(&self, lease_refs: &[LeaseRef]) -> BackendResult<Vec<RenewResult>> {
        {
            // A stop-the-world pause right after a heartbeat went out: the case where a renew
            // lands while its sender cannot act on anything.
            let mut s = lock(&self.shared);
            let p = s.cfg.pause_after_renew;
            if s.faults_active && s.rng.chance(p) {
                let after = s.rng.duration(Duration::ZERO, Duration::from_millis(5));
                s.pauses_requested.push((self.replica, after));
            }
        }
        let Answer::Renewed(mut results) = self.call(Request::Renew(lease_refs.to_vec())).await?
        else {
            unreachable!("a renew is answered with renew results")
        };
        if self.broken() == Some(BrokenDriver::DropsRenewResult) && results.pop().is_some() {
            lock(&self.shared).log(Event::Broken {
                r: self.replica as u16,
                what: "drops the last renew result".into(),
            });
        }
        if self.broken() == Some(BrokenDriver::KeepsLostLeases) {
            let lost = results.iter().filter(|r| **r == RenewResult::Lost).count();
            if lost > 0 {
                for result in &mut results {
                    if *result == RenewResult::Lost {
                        *result = RenewResult::Kept;
                    }
                }
                lock(&self.shared).log(Event::Broken {
                    r: self.replica as u16,
                    what: format!("reports {lost} lost lease(s) as kept"),
                });
            }
        }
        Ok(results)
    }

    async fn ack(&self, lease_refs: &[LeaseRef]) -> BackendResult<Vec<SettleResult>> {
        let mut lease_refs = lease_refs.to_vec();
        let extra = {
            let mut s = lock(&self.shared);
            let extra = if s.cfg.broken == Some(BrokenDriver::AcksAfterLoss) {
                self.discarded_dones(&s)
            } else {
                Vec::new()
            };
            if !extra.is_empty() {
                s.log(Event::Broken {
                    r: self.replica as u16,
                    what: format!("acks {} discarded result(s) too", extra.len()),
                });
            }
            lease_refs.extend(extra.iter().cloned());
            s.check_ack(self.replica, &lease_refs);
            extra.len()
        };
        let Answer::Settled(mut results) = self.call(Request::Ack(lease_refs)).await? else {
            unreachable!("an ack is answered with settle results")
        };
        results.truncate(results.len() - extra);
        Ok(results)
    }

    async fn release(&self, lease_ref: &LeaseRef, delay: Duration) -> BackendResult<SettleResult> {
        if self.broken() == Some(BrokenDriver::ForgetsLeaseAtShutdown)
            && lock(&self.shared).replicas[self.replica].shutting_down
        {
            lock(&self.shared).log(Event::Broken {
                r: self.replica as u16,
                what: "forgets to release a lease at shutdown".into(),
            });
            return Ok(SettleResult::Ok);
        }
        let Answer::Settled(results) = self
            .call(Request::Release(lease_ref.clone(), delay))
            .await?
        else {
            unreachable!("a release is answered with a settle result")
        };
        Ok(results[0])
    }

    async fn dead_letter(
        &self,
        lease_ref: &LeaseRef,
        reason: &DeadLetterReason,
    ) -> BackendResult<SettleResult> {
        let request = Request::DeadLetter(lease_ref.clone(), reason.clone());
        let Answer::Settled(results) = self.call(request).await? else {
            unreachable!("a dead-letter is answered with a settle result")
        };
        Ok(results[0])
    }

    async fn stream_len(&self) -> BackendResult<u64> {
        Ok(lock(&self.shared).store.len() as u64)
    }

    async fn pending(&self) -> BackendResult<u64> {
        let mut s = lock(&self.shared);
        let now = s.instant();
        Ok(s.store.pending(now).len() as u64)
    }
}

impl SimBackend {
    fn broken(&self) -> Option<BrokenDriver> {
        lock(&self.shared).cfg.broken
    }

    /// For [`BrokenDriver::AcksAfterLoss`]: this replica's invocations that returned `Done`
    /// after a cancellation for a lost lease (taken over), as the leases they ran under (each
    /// taken once).
    fn discarded_dones(&self, s: &crate::checker::Shared) -> Vec<LeaseRef> {
        s.invocations
            .iter()
            .filter(|invocation| {
                invocation.replica == self.replica
                    && invocation.consumer == self.consumer
                    && matches!(invocation.outcome, Some((Outcome::Done, true)))
                    && invocation.cancellation.reason() == Some(CancelReason::LeaseLost)
                    && s.msgs[invocation.msg].removed.is_none()
            })
            .map(|invocation| {
                LeaseRef::new(
                    s.msgs[invocation.msg].id.clone(),
                    leasehold_core::Fence(invocation.fence),
                )
            })
            .take(1)
            .collect()
    }
}
