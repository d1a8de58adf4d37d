//! Guarantee 3 of the crate docs, for work finished while the backend is unreachable: a `Done`
//! whose ack the backend has not confirmed when the lease expires locally keeps its fenced ack.
//! It is not held any more (not renewed, not counted against `max_leases`), and is retried,
//! backing off, until the backend answers: `Ok` (the work is not redone) or `Lost` (someone took
//! the message over: only then does it run again, and a redelivery of the message counts as
//! one); shutdown waits for late acks until its deadline and reports the ones it
//! gave up; at most `max_leases` are kept.
//!
//! Every test drives a backend that answers nothing but failures for a while ("down"), then
//! answers normally ("up"), on explicit instants.

mod common;

use std::time::{Duration, Instant};

use common::*;
use leasehold_core::{
    Effect, ErrorKind, LeaseEngine, LeaseId, LossReason, Outcome, RenewResult, SettleResult,
};

/// What the scripted backend does with the calls the engine makes.
#[derive(Clone, Copy, PartialEq)]
enum Backend {
    /// Every call fails (transiently).
    Down,
    /// Fetches find nothing, renews keep, acks succeed.
    Up,
    /// As up, but every ack is refused: another consumer took the message over.
    TakenOver,
}

/// Runs the engine from `from` to `until`, firing every timer and answering every call at once
/// (after `rtt`) as `backend` does. Returns every effect, with the instant it was drained at.
fn drive(
    e: &mut TestEngine,
    from: Instant,
    until: Instant,
    backend: Backend,
) -> Vec<(Instant, Effect<String>)> {
    let rtt = ms(5);
    let mut seen = Vec::new();
    let mut now = from;
    let mut pending: Vec<Effect<String>> = Vec::new();
    loop {
        pending.extend(std::iter::from_fn(|| e.poll_effect()));
        if pending.is_empty() {
            match e.poll_timeout() {
                Some(at) if at <= until => {
                    now = now.max(at);
                    e.handle_timeout(now);
                    continue;
                }
                _ => return seen,
            }
        }
        now += rtt;
        for effect in std::mem::take(&mut pending) {
            seen.push((now, effect.clone()));
            answer(e, now, effect, backend);
        }
    }
}

fn answer(e: &mut TestEngine, now: Instant, effect: Effect<String>, backend: Backend) {
    match (effect, backend) {
        (Effect::Fetch { stream, .. }, Backend::Down) => e.handle_fetch_failed(now, stream),
        (Effect::Fetch { stream, .. }, _) => e.handle_fetched(now, stream, vec![]),
        (Effect::Renew { batch, .. }, Backend::Down) => e.handle_renew_failed(now, batch),
        (Effect::Renew { batch, leases, .. }, _) => e.handle_renewed(
            now,
            batch,
            leases.into_iter().map(|l| (l, RenewResult::Kept)),
        ),
        (Effect::Ack { batch, .. }, Backend::Down) => {
            e.handle_ack_failed(now, batch, ErrorKind::Transient)
        }
        (Effect::Ack { leases, .. }, Backend::Up) => {
            e.handle_acked(now, leases.into_iter().map(|l| (l, SettleResult::Ok)))
        }
        (Effect::Ack { leases, .. }, Backend::TakenOver) => {
            e.handle_acked(now, leases.into_iter().map(|l| (l, SettleResult::Lost)))
        }
        (Effect::Release { lease, .. }, Backend::Down) => {
            LeaseEngine::handle_released(&mut **e, now, lease, Err(ErrorKind::Transient))
        }
        (Effect::Release { lease, .. }, _) => e.handle_released(now, lease, SettleResult::Ok),
        (Effect::Run(invocation), _) => panic!("nothing may run again: {invocation:?}"),
        _ => {}
    }
}

fn acks_of(effects: &[(Instant, Effect<String>)], lease: LeaseId) -> Vec<Instant> {
    effects
        .iter()
        .filter(|(_, f)| matches!(f, Effect::Ack { leases, .. } if leases.contains(&lease)))
        .map(|(at, _)| *at)
        .collect()
}

fn losses(effects: &[(Instant, Effect<String>)]) -> Vec<LossReason> {
    effects
        .iter()
        .filter_map(|(_, f)| match f {
            Effect::Lost { reason, .. } => Some(*reason),
            _ => None,
        })
        .collect()
}

/// An engine (claim 3 s: lease valid 2.7 s from its fetch's send time at t0) that ran message 1
/// to `Done` at t0 + 100 ms and has its ack outstanding.
fn done_at_100ms(t0: Instant) -> (TestEngine, LeaseId) {
    let mut e = engine(&config().concurrency(1).max_leases(1), t0);
    assert_eq!(drain(&mut e), vec![fetch(1, ms(1000))]);
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1)]);
    let (inv, a) = one_run(&drain(&mut e));
    e.handle_outcome(t0 + ms(100), inv, Outcome::Done);
    (e, a)
}

/// Done, then the backend is down past the local expiry (t0 + 2.7 s), then up again: the ack
/// is sent again and succeeds; the message is never run again, and nothing is reported lost.
#[test]
fn a_done_whose_lease_expired_during_an_outage_is_acked_when_the_backend_returns() {
    let t0 = Instant::now();
    let (mut e, a) = done_at_100ms(t0);
    let down = drive(&mut e, t0 + ms(100), t0 + secs(120), Backend::Down);
    assert!(losses(&down).is_empty(), "{down:?}");
    // Expired locally: not held, not renewed, but its ack is still pending.
    assert_eq!((e.held(), e.late_acks()), (0, 1));
    assert_eq!(e.valid_until(a), None);
    assert_eq!(e.stats().expired, 0);
    let expiry = t0 + ms(2700);
    assert!(
        !down.iter().any(|(at, f)| *at > expiry
            && matches!(f, Effect::Renew { leases, .. } if leases.contains(&a))),
        "a late ack is not renewed: {down:?}"
    );
    // Retried while down, backing off: the gaps between late retries grow, up to
    // fetch_backoff_max (30 s, plus the 5 ms the failure takes to come back), and never fall
    // below poll_interval.
    let sends: Vec<Instant> = acks_of(&down, a)
        .into_iter()
        .filter(|at| *at > expiry)
        .collect();
    assert!(sends.len() >= 3, "{sends:?}");
    let gaps: Vec<Duration> = sends.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(gaps.windows(2).all(|g| g[0] <= g[1]), "{gaps:?}");
    assert!(gaps.iter().all(|g| *g >= ms(1000)), "{gaps:?}");
    assert_eq!(gaps.last(), Some(&(secs(30) + ms(5))), "{gaps:?}");

    let up = drive(&mut e, t0 + secs(120), t0 + secs(180), Backend::Up);
    assert_eq!(acks_of(&up, a).len(), 1, "{up:?}");
    assert!(losses(&up).is_empty(), "{up:?}");
    let stats = e.stats();
    assert_eq!(
        (stats.invocations, stats.acked, stats.acked_late, stats.lost),
        (1, 1, 1, 0)
    );
    assert_eq!((e.held(), e.late_acks()), (0, 0));
    assert!(e.lease(a).is_none());
}

/// If the backend refuses the late ack (someone took the message over), its result is
/// discarded and reported as lost: only a takeover lets the work run again.
#[test]
fn a_late_ack_refused_by_the_backend_is_a_takeover() {
    let t0 = Instant::now();
    let (mut e, a) = done_at_100ms(t0);
    drive(&mut e, t0 + ms(100), t0 + secs(5), Backend::Down);
    assert_eq!(e.late_acks(), 1);
    let after = drive(&mut e, t0 + secs(5), t0 + secs(60), Backend::TakenOver);
    assert_eq!(acks_of(&after, a).len(), 1);
    assert_eq!(losses(&after), vec![LossReason::LostAtSettle]);
    let stats = e.stats();
    assert_eq!((stats.acked, stats.acked_late, stats.lost), (0, 0, 1));
    assert_eq!(e.late_acks(), 0);
    assert!(e.lease(a).is_none());
}

/// The message is delivered again (to this consumer, but maybe after another consumer took it
/// over in between: the engine never orders fences, so it cannot tell) before the late ack went
/// out again: the late ack is given up as taken over, and the new delivery runs.
#[test]
fn a_redelivery_of_a_late_acks_message_is_a_takeover() {
    let t0 = Instant::now();
    let (mut e, a) = done_at_100ms(t0);
    drive(&mut e, t0 + ms(100), t0 + secs(5), Backend::Down);
    assert_eq!(e.late_acks(), 1);
    let now = t0 + secs(5);
    // The fetch backoff is over before the late ack's: a fetch goes out first.
    let next = e.poll_timeout().unwrap().max(now);
    e.handle_timeout(next);
    let fx = drain_all(&mut e);
    assert!(
        fx.iter().any(|f| matches!(f, Effect::Fetch { .. })),
        "{fx:?}"
    );
    let redelivery = delivery(1, 3, 3);
    e.handle_fetched(next + ms(10), S0, vec![redelivery]);
    let fx = drain_all(&mut e);
    let lost: Vec<_> = fx
        .iter()
        .filter_map(|f| match f {
            Effect::Lost {
                reason, lease_ref, ..
            } => Some((*reason, lease_ref.fence.0)),
            _ => None,
        })
        .collect();
    assert_eq!(lost, vec![(LossReason::TakenOver, 1)], "{fx:?}");
    let runs: Vec<_> = fx
        .iter()
        .filter_map(|f| match f {
            Effect::Run(invocation) => Some(invocation.lease_ref.fence.0),
            _ => None,
        })
        .collect();
    assert_eq!(runs, vec![3], "{fx:?}");
    assert!(e.lease(a).is_none());
    let stats = e.stats();
    assert_eq!((stats.invocations, stats.acked, stats.lost), (2, 0, 1));
    assert_eq!(e.late_acks(), 0);
}

/// Shutdown sends a late ack at once and waits for it; if the backend is still down past the
/// deadline it is given up and counted, and `Drained` follows: truthful, nothing dropped silently.
#[test]
fn shutdown_waits_for_late_acks_and_reports_the_ones_it_gives_up() {
    let t0 = Instant::now();
    let (mut e, a) = done_at_100ms(t0);
    drive(&mut e, t0 + ms(100), t0 + secs(8), Backend::Down);
    assert_eq!(e.late_acks(), 1);
    let now = t0 + secs(8);
    e.handle_shutdown(now, now + secs(2));
    let fx = drain_all(&mut e);
    assert!(
        fx.iter()
            .any(|f| matches!(f, Effect::Ack { leases, .. } if leases == &[a])),
        "the late ack goes out at once: {fx:?}"
    );
    let batch = e.last_ack_batch().unwrap();
    e.handle_ack_failed(now + ms(10), batch, ErrorKind::Transient);
    assert!(!drain_all(&mut e).contains(&Effect::Drained));
    assert!(!e.is_drained(), "a late ack is pending");
    let rest = drive(&mut e, now + ms(10), now + secs(30), Backend::Down);
    assert!(rest.iter().any(|(_, f)| *f == Effect::Drained), "{rest:?}");
    let stats = e.stats();
    assert_eq!(
        (stats.abandoned, stats.abandoned_acks, stats.acked),
        (1, 1, 0)
    );
    assert_eq!(e.late_acks(), 0);
}

/// At most `max_leases` late acks are kept: past that, a lease expiring after its `Done` is let
/// go of as before (reported expired; its message runs again after the claim timeout).
#[test]
fn late_acks_are_capped_at_max_leases() {
    let t0 = Instant::now();
    let (mut e, a) = done_at_100ms(t0);
    // Acks and renews fail; fetches work (a late ack is not held: intake goes on).
    let mut now = t0 + ms(100);
    let mut second = None;
    let mut lost = Vec::new();
    while now < t0 + secs(12) {
        let fx = drain_all(&mut e);
        for f in fx {
            match f {
                Effect::Fetch { stream, .. } if second.is_none() && e.late_acks() == 1 => {
                    e.handle_fetched(now, stream, vec![msg(2)]);
                }
                Effect::Fetch { stream, .. } => e.handle_fetched(now, stream, vec![]),
                Effect::Run(invocation) => {
                    second = Some(invocation.id.lease());
                    e.handle_outcome(now, invocation.id, Outcome::Done);
                }
                Effect::Renew { batch, .. } => e.handle_renew_failed(now, batch),
                Effect::Ack { batch, .. } => e.handle_ack_failed(now, batch, ErrorKind::Transient),
                Effect::Lost { reason, .. } => lost.push(reason),
                _ => {}
            }
        }
        now = e
            .poll_timeout()
            .map_or(now + ms(100), |t| t.max(now + ms(1)));
        e.handle_timeout(now);
    }
    let b = second.expect("a second message ran while the first's ack was late");
    assert_ne!(a, b);
    assert_eq!(lost, vec![LossReason::Expired]);
    assert_eq!(e.late_acks(), 1);
    assert!(e.lease(b).is_none());
    assert_eq!(e.stats().expired, 1);
}
