//! The checks run once an input's (or a burst's) effects are drained: guarantees 1 to 7 of
//! `leasehold-core`'s crate docs, numbered as there, every predicted effect emitted, and the
//! agreement of the engine's public view (`held`, `running`, `lease`, `valid_until`,
//! `poll_timeout`, `is_drained`, `stats`) with the reference model.

use std::time::Instant;

use leasehold_core::{CancelReason, LeaseEngine};

use crate::model::{End, Expect, MLease, MState, Model, Tag};
use crate::observe::{problem, Problems};
use crate::violation::Rule;

impl Model {
    /// Every check of the state after the drained inputs; problems go to `out`. Clears what the
    /// drain's effects were matched against.
    pub(crate) fn check(&mut self, engine: &LeaseEngine<Tag>, out: &mut Problems) {
        self.check_round(out);
        self.check_fetch_sizes(out);
        self.check_expected_effects(out);
        self.check_acks(out);
        self.check_engine_view(engine, out);
        self.check_counts(engine, out);
        self.check_capacity(out);
        self.check_heartbeat(out);
        self.check_timers(engine.poll_timeout(), out);
        self.check_drain(engine, out);
        self.drained_effects();
    }

    /// Effects the model decided on for the drained inputs were all emitted.
    fn check_expected_effects(&self, out: &mut Problems) {
        for expect in &self.expected {
            let who = |tag: &Tag| Who(&self.leases[tag], *tag).to_string();
            let (rule, detail) = match expect {
                Expect::Run { tag, attempt, .. } => (
                    Rule::Model,
                    format!(
                        "{}: Run (attempt {attempt}) expected, not emitted",
                        who(tag)
                    ),
                ),
                Expect::Cancel {
                    tag,
                    attempt,
                    reason,
                } => (
                    match reason {
                        CancelReason::LeaseLost | CancelReason::LeaseExpired => Rule::Expiry,
                        _ => Rule::Model,
                    },
                    format!("{}: attempt {attempt} not cancelled ({reason:?})", who(tag)),
                ),
                Expect::Valid {
                    tag,
                    attempt,
                    until,
                } => (
                    Rule::Model,
                    format!(
                        "{}: attempt {attempt} not told its lease is valid until {}",
                        who(tag),
                        self.at(*until)
                    ),
                ),
                Expect::Settle { tag, op, .. } => (
                    Rule::Model,
                    format!("{}: expected {op:?} not emitted", who(tag)),
                ),
                Expect::Halt { stream } => (
                    Rule::Model,
                    format!("a fatal error on {stream:?}, but no Halt"),
                ),
                Expect::Lost {
                    stream,
                    msg,
                    reason,
                    ..
                } => (
                    Rule::Model,
                    format!("{msg} of {stream:?} let go of ({reason:?}), but no Lost notice"),
                ),
                Expect::Failed {
                    stream, msg, error, ..
                } => (
                    Rule::Model,
                    format!("{msg} of {stream:?} failed ({error}), but no Failed notice"),
                ),
                Expect::Drained => (
                    Rule::Drain,
                    "shut down with nothing held, running or fetching, but no Drained".into(),
                ),
            };
            problem(out, rule, detail);
        }
    }

    /// The fetches decided when the effects were polled share the whole budget left after every
    /// input (each at most `fetch_batch_size`): a fetch decided in the middle of a burst would
    /// ask for less.
    fn check_fetch_sizes(&self, out: &mut Problems) {
        if let Some((budget, asked)) = self.polled {
            let fetches = self.fetches_polled as usize;
            let expected = budget.min(fetches * self.cfg.fetch_batch_size);
            if asked != expected {
                problem(
                    out,
                    Rule::Model,
                    format!(
                        "{fetches} Fetch effects ask for {asked} messages; the budget after the \
                         inputs is {budget} (fetch_batch_size {}), so {expected}",
                        self.cfg.fetch_batch_size
                    ),
                );
            }
        }
    }

    /// Once the effects are polled, a stream with no `Ack` in flight has no ack waiting.
    fn check_acks(&self, out: &mut Problems) {
        for (tag, l) in &self.leases {
            let s = usize::from(l.stream.0);
            if l.state.awaits_ack() && self.acking[s].is_none() {
                problem(
                    out,
                    Rule::Model,
                    format!(
                        "{}: its ack is due and no Ack of its stream is in flight, but none was sent",
                        Who(l, *tag)
                    ),
                );
            }
        }
    }

    /// `held`, `running`, `lease`, `valid_until` agree with the model.
    fn check_engine_view(&self, engine: &LeaseEngine<Tag>, out: &mut Problems) {
        let (held, running) = (self.held(), self.running());
        if engine.held() != held {
            problem(
                out,
                Rule::Model,
                format!("engine holds {} leases, model {held}", engine.held()),
            );
        }
        if engine.running() != running {
            problem(
                out,
                Rule::Model,
                format!(
                    "engine runs {} invocations, model {running}",
                    engine.running()
                ),
            );
        }
        let ttl = self.ttl();
        for (tag, l) in &self.leases {
            let Some(id) = l.id else { continue };
            let who = Who(l, *tag);
            let lease = engine.lease(id);
            let valid = engine.valid_until(id);
            match &l.state {
                state if state.is_held() => match lease {
                    None => problem(
                        out,
                        Rule::Model,
                        format!("{who} held by the model, unknown to the engine"),
                    ),
                    Some(lease) => {
                        let engine_view = (
                            lease.fence(),
                            lease.delivery_count(),
                            lease.attempt(),
                            *lease.payload(),
                        );
                        if engine_view != (l.fence, l.delivery_count, l.attempt, *tag) {
                            problem(
                                out,
                                Rule::Model,
                                format!(
                                    "{who}: engine has (fence, count, attempt, payload) \
                                     {engine_view:?}, model {:?}",
                                    (l.fence, l.delivery_count, l.attempt, *tag)
                                ),
                            );
                        }
                        let expected = l.confirmed + ttl;
                        if valid != Some(expected) {
                            let rule = if valid.is_some_and(|v| v > expected) {
                                Rule::Expiry
                            } else {
                                Rule::Model
                            };
                            problem(
                                out,
                                rule,
                                format!(
                                    "{who}: engine says valid until {}, model {} (confirmed at {})",
                                    valid.map_or("never".into(), |v| self.at(v)),
                                    self.at(expected),
                                    self.at(l.confirmed)
                                ),
                            );
                        }
                    }
                },
                MState::Orphan { .. } => {
                    if lease.is_none() {
                        problem(
                            out,
                            Rule::Model,
                            format!("{who}: orphan still running, unknown to the engine"),
                        );
                    }
                    if valid.is_some() {
                        problem(
                            out,
                            Rule::Expiry,
                            format!("{who} lost or expired, but still valid in the engine"),
                        );
                    }
                }
                MState::Late { .. } => match lease {
                    None => problem(
                        out,
                        Rule::Model,
                        format!("{who}: its ack is late, but the engine forgot it"),
                    ),
                    Some(lease) => {
                        if (lease.fence(), lease.delivery_count()) != (l.fence, l.delivery_count) {
                            problem(
                                out,
                                Rule::Model,
                                format!(
                                    "{who}: engine has (fence, count) {:?}, model {:?}",
                                    (lease.fence(), lease.delivery_count()),
                                    (l.fence, l.delivery_count)
                                ),
                            );
                        }
                        if valid.is_some() {
                            problem(
                                out,
                                Rule::Expiry,
                                format!("{who} expired (its ack is late), but still valid"),
                            );
                        }
                    }
                },
                MState::Gone(end) => {
                    if lease.is_some() {
                        let rule = match end {
                            End::Lost | End::Expired => Rule::Expiry,
                            _ => Rule::Model,
                        };
                        problem(
                            out,
                            rule,
                            format!("{who} gone ({end:?}), but the engine still has it"),
                        );
                    }
                }
                _ => unreachable!("every state is held, late, orphaned or gone"),
            }
        }
    }

    /// The engine's counters equal the model's, `stale` and `unexpected` included.
    fn check_counts(&self, engine: &LeaseEngine<Tag>, out: &mut Problems) {
        // The model counts in the engine's own `Stats`: a counter the engine gains is then a
        // difference here until the model learns it, never silently unchecked.
        let engine_counts = *engine.stats();
        if engine_counts != self.counts {
            problem(
                out,
                Rule::Model,
                format!(
                    "engine stats {engine_counts:?} differ from the model's {:?}",
                    self.counts
                ),
            );
        }
    }

    /// Guarantees 1 and 2 on the state.
    fn check_capacity(&self, out: &mut Problems) {
        let (running, reserved, held) = (self.running(), self.reserved(), self.held_counted());
        // A fixed prefetch bounds the slots at all times. An adaptive one is checked exactly
        // where it decides (each `Fetch`, against the prefetch in force then, and each `Run`
        // of a ready lease, predicted by the model's own `slot_free`); it may shrink while a
        // fetch is out, so here it is held to its ceiling.
        let max_leases = self.cfg.max_leases;
        let capacity = self.cfg.concurrency + self.cfg.prefetch;
        if running > self.cfg.concurrency || running + reserved > capacity {
            problem(
                out,
                Rule::Capacity,
                format!(
                    "{running} running + {reserved} reserved by fetches > concurrency {} + \
                     prefetch {} (now {})",
                    self.cfg.concurrency,
                    self.cfg.prefetch,
                    self.prefetch()
                ),
            );
        }
        if held + reserved > max_leases {
            problem(
                out,
                Rule::Capacity,
                format!(
                    "{held} leases held (overflow excluded) + {reserved} reserved by fetches > \
                     max_leases {max_leases}"
                ),
            );
        }
        let mut messages: Vec<_> = self
            .leases
            .values()
            .filter(|l| l.state.is_running())
            .map(|l| (l.stream, &l.msg))
            .collect();
        messages.sort();
        if let Some(pair) = messages.windows(2).find(|w| w[0] == w[1]) {
            problem(
                out,
                Rule::Serial,
                format!("two invocations of {:?}/{} running", pair[0].0, pair[0].1),
            );
        }
    }

    /// Guarantee 4: with no round outstanding, every renewable held lease was named in a
    /// `Renew` (or fetched) less than `heartbeat_interval` ago.
    fn check_heartbeat(&self, out: &mut Problems) {
        if self.round.is_some() {
            return;
        }
        let hb = self.cfg.heartbeat_interval;
        for (tag, l) in &self.leases {
            if l.state.is_renewable() && l.baseline + hb <= self.now {
                problem(
                    out,
                    Rule::Heartbeat,
                    format!(
                        "{:?}/{} (delivery {tag}) last renewed or fetched at {}, heartbeat {hb:?}, \
                         now {}, and no renew is outstanding",
                        l.stream,
                        l.msg,
                        self.at(l.baseline),
                        self.at(self.now)
                    ),
                );
            }
        }
    }

    /// Guarantee 7, and that `poll_timeout` is no later than any timer the model knows is due.
    fn check_timers(&self, timeout: Option<Instant>, out: &mut Problems) {
        let now = self.now;
        if let Some(t) = timeout.filter(|t| *t <= now) {
            problem(
                out,
                Rule::NoBusyLoop,
                format!(
                    "poll_timeout {} is not after now {}",
                    self.at(t),
                    self.at(now)
                ),
            );
        }
        // (due, rule, which timer, for which delivery)
        let mut due: Vec<(Instant, Rule, &str, Option<Tag>)> = Vec::new();
        let (ttl, hb, mpt) = (
            self.ttl(),
            self.cfg.heartbeat_interval,
            self.cfg.max_processing_time,
        );
        let round_outstanding = self.round.is_some();
        for (tag, l) in &self.leases {
            let tag = Some(*tag);
            if l.state.is_held() {
                due.push((l.confirmed + ttl, Rule::Expiry, "local expiry", tag));
            }
            if l.state.is_renewable() && !round_outstanding {
                due.push((l.baseline + hb, Rule::Heartbeat, "heartbeat", tag));
            }
            match l.state {
                MState::Running {
                    started,
                    cancelled: None,
                    ..
                } => due.push((started + mpt, Rule::Model, "max processing time", tag)),
                MState::Waiting { due: at } => due.push((at, Rule::Model, "re-poll", tag)),
                MState::Settling {
                    in_flight: false,
                    retry_at: Some(at),
                    ..
                } => due.push((at, Rule::Model, "settle retry", tag)),
                MState::Late {
                    in_flight: false,
                    retry_at: Some(at),
                    ..
                } => due.push((at, Rule::Model, "late ack retry", tag)),
                _ => {}
            }
        }
        if let Some(shutdown) = self.shutdown.filter(|s| !s.cancelled_running) {
            if self.leases.values().any(|l| {
                matches!(
                    l.state,
                    MState::Running {
                        cancelled: None,
                        ..
                    }
                )
            }) {
                due.push((shutdown.deadline, Rule::Model, "shutdown deadline", None));
            }
        }
        for (at, rule, what, tag) in due {
            if at > now && timeout.is_none_or(|t| t > at) {
                let of = tag.map_or(String::new(), |t| {
                    format!(" of {}", Who(&self.leases[&t], t))
                });
                problem(
                    out,
                    rule,
                    format!(
                        "{what}{of} is due at {}, but poll_timeout is {}",
                        self.at(at),
                        timeout.map_or("None".into(), |t| self.at(t))
                    ),
                );
            }
        }
    }

    /// Guarantee 6.
    fn check_drain(&self, engine: &LeaseEngine<Tag>, out: &mut Problems) {
        if engine.is_drained() != self.drained {
            problem(
                out,
                Rule::Drain,
                format!(
                    "engine is_drained {}, Drained seen {}",
                    engine.is_drained(),
                    self.drained
                ),
            );
        }
        if self.drained && (self.held() > 0 || self.running() > 0 || self.late() > 0) {
            problem(
                out,
                Rule::Drain,
                "a lease is held, an invocation runs or a late ack is pending after Drained".into(),
            );
        }
        if engine.late_acks() != self.late() {
            problem(
                out,
                Rule::Model,
                format!(
                    "engine has {} late acks, model {}",
                    engine.late_acks(),
                    self.late()
                ),
            );
        }
    }
}

/// Names a delivery in messages, formatted only when a problem is reported.
struct Who<'a>(&'a MLease, Tag);

impl std::fmt::Display for Who<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Who(lease, tag) = self;
        write!(f, "{:?}/{} (delivery {tag}", lease.stream, lease.msg)?;
        match lease.id {
            Some(id) => write!(f, ", {id:?})"),
            None => f.write_str(")"),
        }
    }
}
