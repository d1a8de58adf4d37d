//! Failed attempts: `Retry` and `Failed` release the message with an exponential backoff (capped,
//! its jitter drawn from the seeded generator), `Retry { delay: Some(d) }` with exactly `d`; a
//! failure at `max_deliveries`, or a `Reject`, dead-letters it.
//!
//! The backoff keeps a failing message from hammering the handler and the backend; the cap on
//! deliveries keeps a message that can never succeed from cycling forever.

mod common;

use std::time::{Duration, Instant};

use common::*;
use leasehold_core::{DeadLetterReason, Outcome, RetryPolicy};

/// Fails one delivery per entry of `counts` (each a fresh message with that delivery count) with
/// `outcome`, and returns the effect that settled each.
fn fail_each(cfg: &leasehold_core::Config, counts: &[u32], outcome: &Outcome) -> Vec<Seen> {
    let t0 = Instant::now();
    let mut e = engine(&cfg.clone().concurrency(1), t0);
    drain(&mut e);
    let mut settled = Vec::new();
    for (i, &count) in counts.iter().enumerate() {
        let at = t0 + ms(10 * i as u64 + 1);
        e.handle_fetched(at, S0, vec![delivery(i as u64, count, u64::from(count))]);
        let (inv, lease) = one_run(&drain(&mut e));
        e.handle_outcome(at, inv, outcome.clone());
        let fx = drain(&mut e);
        assert!(acks(&fx).is_empty(), "{fx:?}");
        let mut settle: Vec<Seen> = fx
            .into_iter()
            .filter(|f| matches!(f, Seen::Release { .. } | Seen::DeadLetter { .. }))
            .collect();
        assert_eq!(settle.len(), 1);
        assert!(mentions(&settle, lease));
        settled.push(settle.remove(0));
    }
    settled
}

fn release_delays(effects: &[Seen]) -> Vec<Duration> {
    let delays: Vec<Duration> = releases(effects).into_iter().map(|(_, d)| d).collect();
    assert_eq!(delays.len(), effects.len(), "all released: {effects:?}");
    delays
}

/// With jitter 0 the backoff is exact: `initial × multiplier^(count-1)`, capped at `retry.max`;
/// `Outcome::Failed` behaves like `Retry { delay: None }`.
#[test]
fn backoff_grows_by_multiplier_and_is_capped() {
    let retry = RetryPolicy {
        initial: secs(1),
        multiplier: 2.0,
        max: secs(10),
        jitter: 0.0,
    };
    let cfg = config().retry(retry).max_deliveries(10);
    let counts = [1, 2, 3, 4, 5, 6];
    let expected: Vec<Duration> = [1, 2, 4, 8, 10, 10].into_iter().map(secs).collect();
    let retry_delays = release_delays(&fail_each(&cfg, &counts, &Outcome::Retry { delay: None }));
    assert_eq!(retry_delays, expected);
    let failed = Outcome::Failed {
        error: "panicked".into(),
    };
    assert_eq!(release_delays(&fail_each(&cfg, &counts, &failed)), expected);

    let retry = RetryPolicy {
        initial: ms(100),
        multiplier: 3.0,
        max: secs(1),
        jitter: 0.0,
    };
    let delays = release_delays(&fail_each(&config().retry(retry), &[1, 2, 3, 4], &failed));
    assert_eq!(delays, vec![ms(100), ms(300), ms(900), secs(1)]);
}

/// Jitter comes from the seeded generator: the same seed gives the same delays (two engines), a
/// different seed different ones; every delay lies in `[base × (1-jitter), base]`.
#[test]
fn jitter_is_seeded_and_bounded() {
    let retry = RetryPolicy {
        initial: secs(1),
        multiplier: 2.0,
        max: secs(100),
        jitter: 0.5,
    };
    let counts = [1, 2, 3, 4, 5, 6, 7, 8];
    let outcome = Outcome::Retry { delay: None };
    let run = |seed| {
        release_delays(&fail_each(
            &config().retry(retry.clone()).seed(seed),
            &counts,
            &outcome,
        ))
    };
    let first = run(7);
    assert_eq!(first, run(7), "same seed, same delays");
    assert_ne!(first, run(8), "different seed, different delays");
    for (delay, count) in first.iter().zip(counts) {
        let base = secs(1 << (count - 1)).min(secs(100));
        assert!(
            *delay <= base && *delay >= base / 2,
            "count {count}: {delay:?} vs base {base:?}"
        );
    }
    let distinct: std::collections::HashSet<_> = first
        .iter()
        .zip(counts)
        .map(|(d, c)| d.as_nanos() * 1000 / secs(1 << (c - 1)).as_nanos())
        .collect();
    assert!(
        distinct.len() > 1,
        "jitter should vary the fraction: {first:?}"
    );
}

/// `Retry { delay: Some(d) }` releases with exactly `d`.
#[test]
fn explicit_retry_delay_is_used() {
    let outcome = Outcome::Retry {
        delay: Some(ms(1234)),
    };
    let delays = release_delays(&fail_each(&config(), &[1, 5], &outcome));
    assert_eq!(delays, vec![ms(1234), ms(1234)]);
}

/// At `max_deliveries` (the delivery count of the `Fetched`) a failure dead-letters with
/// `MaxDeliveries`; below it, it is released.
#[test]
fn failure_at_max_deliveries_dead_letters() {
    let cfg = config().max_deliveries(3);
    let settled = fail_each(
        &cfg,
        &[2, 3, 4],
        &Outcome::Failed {
            error: "boom".into(),
        },
    );
    assert!(
        matches!(settled[0], Seen::Release { delay, .. } if delay == secs(2)),
        "{settled:?}"
    );
    for (effect, deliveries) in settled[1..].iter().zip([3, 4]) {
        match effect {
            Seen::DeadLetter { reason, .. } => assert_eq!(
                *reason,
                DeadLetterReason::MaxDeliveries {
                    deliveries,
                    last_error: "boom".into()
                }
            ),
            other => panic!("expected a dead letter, got {other:?}"),
        }
    }
    let settled = fail_each(&cfg, &[3], &Outcome::Retry { delay: Some(ms(5)) });
    assert!(
        matches!(
            &settled[0],
            Seen::DeadLetter {
                reason: DeadLetterReason::MaxDeliveries { deliveries: 3, .. },
                ..
            }
        ),
        "{settled:?}"
    );
}

/// `Outcome::Reject` dead-letters at once with `Rejected`, whatever the delivery count.
#[test]
fn reject_dead_letters_at_once() {
    let reject = Outcome::Reject {
        reason: "cannot decode".into(),
    };
    let settled = fail_each(&config().max_deliveries(10), &[1], &reject);
    match &settled[0] {
        Seen::DeadLetter { reason, .. } => {
            assert_eq!(*reason, DeadLetterReason::Rejected("cannot decode".into()))
        }
        other => panic!("expected a dead letter, got {other:?}"),
    }
}

/// A failure is announced with its error and the delay before the next delivery, ahead of the
/// release that carries that delay; a failure on the last allowed delivery is not (its dead
/// letter carries the error).
#[test]
fn a_failure_is_announced_with_its_error_and_the_next_delay() {
    let t0 = Instant::now();
    let mut e = engine(&config().concurrency(1).max_deliveries(2), t0);
    drain(&mut e);
    e.handle_fetched(t0, S0, vec![delivery(1, 1, 1)]);
    let (inv, _) = one_run(&drain(&mut e));
    e.handle_outcome(
        t0 + ms(5),
        inv,
        Outcome::Failed {
            error: "connection refused".into(),
        },
    );
    let effects = drain_all(&mut e);
    let notice = effects.iter().position(|f| {
        matches!(f, leasehold_core::Effect::Failed { error, retry_in, delivery_count: 1, .. }
            if error == "connection refused" && *retry_in == secs(1))
    });
    let release = effects.iter().position(
        |f| matches!(f, leasehold_core::Effect::Release { delay, .. } if *delay == secs(1)),
    );
    assert!(notice.is_some() && notice < release, "{effects:?}");

    e.handle_fetched(t0 + secs(2), S0, vec![delivery(2, 2, 2)]);
    let (inv, _) = one_run(&drain(&mut e));
    e.handle_outcome(
        t0 + secs(2),
        inv,
        Outcome::Failed {
            error: "still refused".into(),
        },
    );
    let effects = drain_all(&mut e);
    assert!(
        !effects
            .iter()
            .any(|f| matches!(f, leasehold_core::Effect::Failed { .. })),
        "{effects:?}"
    );
    assert!(effects.iter().any(|f| matches!(
        f,
        leasehold_core::Effect::DeadLetter { reason: DeadLetterReason::MaxDeliveries { last_error, .. }, .. }
            if last_error == "still refused"
    )));
}
