//! `Outcome::Pending`: work that is not finished yet keeps its lease and is invoked again after
//! `repoll_interval`, not after the claim timeout.
//!
//! A waiting message frees its invocation slot for other work, stays in every heartbeat (guarantee
//! 4 of the crate docs), and is re-invoked under the same lease exactly when due, ahead of new
//! fetches. With `repoll_spread`, a burst of waiting messages is not re-polled all at the same
//! instant. A handler can thus check on long work every `repoll_interval` without holding a slot
//! meanwhile, and without the message going to another replica.

mod common;

use std::time::{Duration, Instant};

use common::*;
use leasehold_core::{MessageId, Outcome, RenewResult, SettleResult};

/// A `Pending` message keeps its lease (it is in the next `Renew`) and frees its invocation slot
/// (at concurrency 1 another message is fetched and run while it waits).
#[test]
fn pending_keeps_its_lease_and_frees_its_slot() {
    let t0 = Instant::now();
    let cfg = config().concurrency(1).repoll_interval(ms(1500));
    let mut e = engine(&cfg, t0);
    assert_eq!(drain(&mut e), vec![fetch(1, ms(1000))]);

    e.handle_fetched(t0 + ms(10), S0, vec![msg(1)]);
    let fx = drain(&mut e);
    let (inv_a, a) = one_run(&fx);
    assert_eq!(
        fx,
        vec![Seen::Run {
            invocation: inv_a,
            lease: a
        }]
    );

    // Pending: the slot frees, so the one slot is offered to a new fetch at once.
    e.handle_outcome(t0 + ms(100), inv_a, Outcome::Pending);
    assert_eq!(drain(&mut e), vec![fetch(1, Duration::ZERO)]);
    assert_eq!(e.running(), 0);
    assert_eq!(e.held(), 1, "the pending message keeps its lease");
    assert!(e.lease(a).is_some());

    e.handle_fetched(t0 + ms(150), S0, vec![msg(2)]);
    let fx = drain(&mut e);
    let (inv_b, b) = one_run(&fx);
    assert_eq!(
        fx,
        vec![Seen::Run {
            invocation: inv_b,
            lease: b
        }]
    );
    assert_eq!(message_of(&e, b), MessageId::from(2));

    // The heartbeat renews the waiting lease with the running one, in one Renew.
    assert_eq!(e.poll_timeout(), Some(t0 + ms(1000)));
    e.handle_timeout(t0 + ms(1000));
    let fx = drain(&mut e);
    let (batch, leases) = one_renew(&fx);
    assert_eq!(fx.len(), 1, "{fx:?}");
    assert_eq!(leases, vec![a, b]);
    e.handle_renewed(
        t0 + ms(1010),
        batch,
        [(a, RenewResult::Kept), (b, RenewResult::Kept)],
    );
    assert_eq!(drain(&mut e), vec![]);
    assert!(e.lease(a).is_some());
}

/// A `Pending` message is re-invoked after exactly `repoll_interval`, not before (`poll_timeout()`
/// names that instant; a `handle_timeout` just before does nothing).
#[test]
fn pending_is_rerun_after_exactly_repoll_interval() {
    let t0 = Instant::now();
    let cfg = config().concurrency(1).repoll_interval(ms(400));
    let mut e = engine(&cfg, t0);
    drain(&mut e);
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1)]);
    let (inv1, a) = one_run(&drain(&mut e));

    e.handle_outcome(t0 + ms(100), inv1, Outcome::Pending);
    assert_eq!(drain(&mut e), vec![fetch(1, Duration::ZERO)]);
    // Nothing new: the next fetch goes at once and may block, but no longer than the re-invocation
    // is due (t0+500).
    e.handle_fetched(t0 + ms(110), S0, vec![]);
    assert_eq!(drain(&mut e), vec![fetch(1, ms(390))]);

    assert_eq!(e.poll_timeout(), Some(t0 + ms(500)));
    e.handle_timeout(t0 + ms(499));
    assert_eq!(
        drain(&mut e),
        vec![],
        "no re-invocation before repoll_interval"
    );
    // Due, but the one slot is the blocking fetch's until the backend answers, which it does at
    // the end of the wait: then the re-invocation starts, and no fetch takes the slot.
    e.handle_timeout(t0 + ms(500));
    assert_eq!(drain(&mut e), vec![]);
    e.handle_fetched(t0 + ms(500), S0, vec![]);
    let fx = drain(&mut e);
    let (inv2, lease) = one_run(&fx);
    assert_eq!(
        fx,
        vec![Seen::Run {
            invocation: inv2,
            lease: a
        }]
    );
    assert_eq!(lease, a, "the re-invocation is under the same lease");
    assert_ne!(inv2, inv1, "a re-invocation is a new invocation");
    assert_eq!(e.lease(a).unwrap().attempt(), 2);
    assert_eq!(e.stats().pending, 1);
    assert_eq!(e.stats().invocations, 2);
}

/// Re-invocations that are due go before new fetches: when a re-invocation is due and a slot frees,
/// the slot goes to the re-invocation's `Run` and no `Fetch` takes it.
#[test]
fn due_reinvocations_go_before_new_fetches() {
    let t0 = Instant::now();
    let cfg = config().concurrency(1).repoll_interval(ms(400));
    let mut e = engine(&cfg, t0);
    drain(&mut e);
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1)]);
    let (inv_a, a) = one_run(&drain(&mut e));
    e.handle_outcome(t0 + ms(100), inv_a, Outcome::Pending);
    assert_eq!(drain(&mut e), vec![fetch(1, Duration::ZERO)]);
    e.handle_fetched(t0 + ms(150), S0, vec![msg(2)]);
    let (inv_b, b) = one_run(&drain(&mut e));

    // A's re-invocation is due at t0+500, but B holds the only slot.
    assert_eq!(e.poll_timeout(), Some(t0 + ms(500)));
    e.handle_timeout(t0 + ms(500));
    assert_eq!(drain(&mut e), vec![]);

    // B finishes: its slot goes to A's re-invocation, not to a fetch.
    e.handle_outcome(t0 + ms(600), inv_b, Outcome::Done);
    let fx = drain(&mut e);
    let (inv_a2, _) = one_run(&fx);
    assert_eq!(
        fx,
        vec![
            Seen::Run {
                invocation: inv_a2,
                lease: a
            },
            Seen::Ack { leases: vec![b] }
        ]
    );
    assert!(fetches(&fx).is_empty());
    e.handle_acked(t0 + ms(650), [(b, SettleResult::Ok)]);
    assert_eq!(drain(&mut e), vec![]);

    // Once A is done the slot is free for new intake.
    e.handle_outcome(t0 + ms(700), inv_a2, Outcome::Done);
    assert_eq!(
        drain(&mut e),
        vec![fetch(1, Duration::ZERO), Seen::Ack { leases: vec![a] }]
    );
}

/// With `repoll_spread`, a delivery's first re-poll comes between `(1 - spread) × repoll_interval`
/// and `repoll_interval` after its `Pending`; later re-polls keep the exact cadence.
#[test]
fn first_repoll_is_spread_then_the_cadence_is_exact() {
    let t0 = Instant::now();
    let interval = ms(1000);
    let mut e = engine(
        &config()
            .concurrency(1)
            .repoll_interval(interval)
            .repoll_spread(0.5),
        t0,
    );
    drain(&mut e);
    e.handle_fetched(t0, S0, vec![msg(1)]);
    let (inv, _) = one_run(&drain(&mut e));
    e.handle_outcome(t0, inv, Outcome::Pending);
    // The freed slot fetches; nothing new is there. That fetch did not block, so the next one
    // goes at once; the backend answers it early, empty too, which paces the stream.
    let mut queue: std::collections::VecDeque<Seen> = drain(&mut e).into();
    while let Some(effect) = queue.pop_front() {
        match effect {
            Seen::Fetch { stream, .. } => e.handle_fetched(t0, stream, vec![]),
            other => panic!("unexpected {other:?}"),
        }
        queue.extend(drain(&mut e));
    }
    let mut reinvocations = Vec::new();
    while reinvocations.len() < 3 {
        let now = e.poll_timeout().expect("a re-poll is due");
        assert!(now < t0 + secs(10), "no re-invocation came");
        e.handle_timeout(now);
        let mut queue: std::collections::VecDeque<Seen> = drain(&mut e).into();
        while let Some(effect) = queue.pop_front() {
            match effect {
                Seen::Run { invocation, .. } => {
                    reinvocations.push(now);
                    e.handle_outcome(now, invocation, Outcome::Pending);
                }
                Seen::Fetch { stream, .. } => e.handle_fetched(now, stream, vec![]),
                Seen::Renew { batch, leases } => e.handle_renewed(
                    now,
                    batch,
                    leases.into_iter().map(|l| (l, RenewResult::Kept)),
                ),
                other => panic!("unexpected {other:?}"),
            }
            queue.extend(drain(&mut e));
        }
    }
    let first = reinvocations[0] - t0;
    assert!(
        first >= interval / 2 && first <= interval,
        "first re-poll after {first:?}"
    );
    assert_eq!(reinvocations[1] - reinvocations[0], interval);
    assert_eq!(reinvocations[2] - reinvocations[1], interval);
}

/// A burst of `Pending` messages is re-polled at many distinct instants across the interval, not
/// all at once; without spread they all come due together.
#[test]
fn a_burst_of_pending_messages_is_spread_over_the_interval() {
    let t0 = Instant::now();
    for (spread, expect_distinct) in [(1.0, true), (0.0, false)] {
        let mut e = engine(
            &config()
                .concurrency(100)
                .max_leases(100)
                .claim_timeout(secs(60))
                .heartbeat_interval(secs(20))
                .repoll_interval(secs(10))
                .repoll_spread(spread),
            t0,
        );
        drain(&mut e);
        e.handle_fetched(t0, S0, (1..=100).map(msg).collect());
        for (inv, _) in runs(&drain(&mut e)) {
            e.handle_outcome(t0, inv, Outcome::Pending);
        }
        drain(&mut e);
        let mut instants = std::collections::BTreeSet::new();
        let mut now = t0;
        let mut reinvoked = 0;
        while reinvoked < 100 {
            now = e.poll_timeout().expect("re-polls are due");
            assert!(now <= t0 + secs(10), "re-poll past the interval");
            e.handle_timeout(now);
            let mut queue: std::collections::VecDeque<Seen> = drain(&mut e).into();
            while let Some(effect) = queue.pop_front() {
                match effect {
                    Seen::Run { invocation, .. } => {
                        reinvoked += 1;
                        instants.insert(now);
                        e.handle_outcome(now, invocation, Outcome::Done);
                    }
                    Seen::Fetch { stream, .. } => e.handle_fetched(now, stream, vec![]),
                    Seen::Renew { batch, leases } => e.handle_renewed(
                        now,
                        batch,
                        leases.into_iter().map(|l| (l, RenewResult::Kept)),
                    ),
                    Seen::Ack { leases } => {
                        e.handle_acked(now, leases.into_iter().map(|l| (l, SettleResult::Ok)))
                    }
                    other => panic!("unexpected {other:?}"),
                }
                queue.extend(drain(&mut e));
            }
        }
        assert!(now <= t0 + secs(10), "all re-polled within one interval");
        if expect_distinct {
            assert!(
                instants.len() > 90,
                "only {} distinct instants",
                instants.len()
            );
        } else {
            assert_eq!(instants.len(), 1);
        }
    }
}
