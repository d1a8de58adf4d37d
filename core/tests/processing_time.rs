//! `max_processing_time`: an invocation that runs longer is cancelled, and whatever it reports
//! afterwards counts as a failed attempt.
//!
//! The heartbeat would otherwise keep the lease of a hung handler forever. The lease stays held and
//! the slot taken until the invocation reports, so a retry never runs beside it (guarantee 2 of the
//! crate docs); then the message is released with the backoff, or dead-lettered on its last allowed
//! delivery, and never acked, even when the late outcome is `Done`.

mod common;

use std::time::{Duration, Instant};

use common::*;
use leasehold_core::{CancelReason, DeadLetterReason, Outcome};

/// `max_processing_time` exceeded → `Cancel { MaxProcessingTime }`; the invocation's later outcome
/// (even `Done`) counts as a failed attempt: released with the backoff, never acked.
#[test]
fn max_processing_time_cancels_and_counts_as_failure() {
    let t0 = Instant::now();
    let cfg = config()
        .concurrency(1)
        .max_processing_time(ms(500))
        .max_deliveries(3);
    let mut e = engine(&cfg, t0);
    drain(&mut e);
    e.handle_fetched(t0 + ms(10), S0, vec![delivery(1, 1, 1)]);
    let (inv, a) = one_run(&drain(&mut e));

    assert_eq!(e.poll_timeout(), Some(t0 + ms(510)));
    e.handle_timeout(t0 + ms(509));
    assert_eq!(drain(&mut e), vec![]);
    e.handle_timeout(t0 + ms(510));
    assert_eq!(
        drain(&mut e),
        vec![Seen::Cancel {
            invocation: inv,
            reason: CancelReason::MaxProcessingTime
        }]
    );
    assert!(e.valid_until(a).is_some(), "the lease is still ours");
    assert_eq!(
        e.running(),
        1,
        "the slot is held until the invocation reports"
    );

    e.handle_outcome(t0 + ms(600), inv, Outcome::Done);
    assert_eq!(
        drain(&mut e),
        vec![
            Seen::Release {
                lease: a,
                delay: secs(1)
            },
            fetch(1, Duration::ZERO)
        ]
    );
    assert_eq!(e.stats().failures, 1);
    assert_eq!(e.stats().acked, 0);
}

/// A max-processing-time failure on the last allowed delivery is dead-lettered.
#[test]
fn max_processing_time_on_last_delivery_dead_letters() {
    let t0 = Instant::now();
    let cfg = config()
        .concurrency(1)
        .max_processing_time(ms(500))
        .max_deliveries(3);
    let mut e = engine(&cfg, t0);
    drain(&mut e);
    e.handle_fetched(t0 + ms(10), S0, vec![delivery(1, 3, 3)]);
    let (inv, a) = one_run(&drain(&mut e));
    e.handle_timeout(t0 + ms(510));
    assert_eq!(
        cancels(&drain(&mut e)),
        vec![(inv, CancelReason::MaxProcessingTime)]
    );
    e.handle_outcome(t0 + ms(520), inv, Outcome::Pending);
    let fx = drain(&mut e);
    assert!(acks(&fx).is_empty() && releases(&fx).is_empty(), "{fx:?}");
    let dead = dead_letters(&fx);
    assert_eq!(dead.len(), 1, "{fx:?}");
    assert_eq!(dead[0].0, a);
    assert!(
        matches!(
            dead[0].1,
            DeadLetterReason::MaxDeliveries { deliveries: 3, .. }
        ),
        "{:?}",
        dead[0].1
    );
}
