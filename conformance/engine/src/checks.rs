//! The checks run once an input's effects are drained: guarantees 1 to 7 of `leasehold-core`'s
//! crate docs, numbered as there, and the agreement of the engine's public view (`held`,
//! `running`, `lease`, `valid_until`, `poll_timeout`, `is_drained`) with the reference model.

use std::time::Instant;

use leasehold_core::{CancelReason, LeaseEngine};

use crate::model::{End, MLease, MState, Model, Tag};
use crate::observe::{problem, Problems};
use crate::violation::Rule;

impl Model {
    /// Every check of the state after an input; problems go to `out`.
    pub(crate) fn check(&self, engine: &LeaseEngine<Tag>, out: &mut Problems) {
        self.check_expected_effects(out);
        self.check_engine_view(engine, out);
        self.check_capacity(out);
        self.check_heartbeat(out);
        self.check_timers(engine.poll_timeout(), out);
        self.check_drain(engine, out);
    }

    /// Effects the model decided on for this input were all emitted.
    fn check_expected_effects(&self, out: &mut Problems) {
        for (tag, l) in &self.leases {
            let who = Who(l, *tag);
            match &l.state {
                MState::Taken => problem(
                    out,
                    Rule::Model,
                    format!("{who} was delivered within the fetch's budget but not run"),
                ),
                MState::Settling {
                    op,
                    must_send: true,
                    ..
                } => problem(
                    out,
                    Rule::Model,
                    format!("{who}: expected {op:?} not emitted"),
                ),
                _ => {}
            }
            if let Some((inv, reason)) = l.must_cancel {
                let rule = match reason {
                    CancelReason::LeaseLost | CancelReason::LeaseExpired => Rule::Expiry,
                    _ => Rule::Model,
                };
                problem(
                    out,
                    rule,
                    format!("{who}: {inv:?} not cancelled ({reason:?})"),
                );
            }
        }
    }

    /// `held`, `running`, `lease`, `valid_until` agree with the model.
    fn check_engine_view(&self, engine: &LeaseEngine<Tag>, out: &mut Problems) {
        let (held, running) = (self.held(), self.runs.len());
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
                        if lease.fence() != l.fence || lease.delivery_count() != l.delivery_count {
                            problem(
                                out,
                                Rule::Model,
                                format!(
                                    "{who}: engine has fence {:?} count {}, latest delivery {:?} count {}",
                                    lease.fence(),
                                    lease.delivery_count(),
                                    l.fence,
                                    l.delivery_count
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
                _ => unreachable!("every state is held, orphaned or gone"),
            }
        }
    }

    /// Guarantees 1 and 2 on the state.
    fn check_capacity(&self, out: &mut Problems) {
        let (running, reserved, held) = (self.runs.len(), self.reserved(), self.held_counted());
        let (capacity, max_leases) = (self.capacity(), self.cfg.max_leases);
        if running > self.cfg.concurrency || running + reserved > capacity {
            problem(
                out,
                Rule::Capacity,
                format!(
                    "{running} running + {reserved} reserved by fetches > concurrency {} + \
                     prefetch {}",
                    self.cfg.concurrency, self.cfg.prefetch
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
            .runs
            .values()
            .map(|t| (self.leases[t].stream, &self.leases[t].msg))
            .collect();
        messages.sort();
        if let Some(pair) = messages.windows(2).find(|w| w[0] == w[1]) {
            problem(
                out,
                Rule::Serial,
                format!("two invocations of {:?}/{} running", pair[0].0, pair[0].1),
            );
        }
        if self.shutdown.is_none() && self.slot_free() {
            if let Some((tag, l)) = self.leases.iter().find(|(_, l)| l.state == MState::Ready) {
                problem(
                    out,
                    Rule::Model,
                    format!(
                        "{:?}/{} (delivery {tag}) is due to re-run, but waits although a slot is free",
                        l.stream, l.msg
                    ),
                );
            }
        }
    }

    /// Guarantee 4: with no round outstanding, every renewable held lease was named in a
    /// `Renew` (or fetched) less than `heartbeat_interval` ago; a round names all of them.
    fn check_heartbeat(&self, out: &mut Problems) {
        if let Some(round) = self.round.as_ref().filter(|r| r.step == self.input) {
            for (tag, l) in &self.leases {
                if !l.state.is_renewable() || round.gens.contains_key(tag) {
                    continue;
                }
                problem(
                    out,
                    Rule::Heartbeat,
                    format!("{:?}/{} missing from the heartbeat round", l.stream, l.msg),
                );
            }
        }
        if self.round_outstanding() {
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
        let round_outstanding = self.round_outstanding();
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
                // Between `earliest` and `due` the engine may have made it ready already.
                MState::Waiting { earliest, due: at } if earliest > now => {
                    due.push((at, Rule::Model, "re-poll", tag))
                }
                MState::Settling {
                    in_flight: false,
                    retry_at: Some(at),
                    ..
                } => due.push((at, Rule::Model, "settle retry", tag)),
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
        let idle =
            self.held() == 0 && self.runs.is_empty() && self.fetches.iter().all(Option::is_none);
        if self.drained && (self.held() > 0 || !self.runs.is_empty()) {
            problem(
                out,
                Rule::Drain,
                "a lease is held or an invocation runs after Drained".into(),
            );
        }
        if self.shutdown.is_some() && idle && !self.drained {
            problem(
                out,
                Rule::Drain,
                "shut down with nothing held, running or fetching, but no Drained".into(),
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
