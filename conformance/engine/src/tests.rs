//! The checker must be able to fail: hand-made violations injected into a real run are reported
//! under the right rule.

use leasehold_core::{CancelReason, Effect, InvocationId, LeaseId, RenewId, StreamId};

use crate::{Finish, Harness, Item, Jump, RenewAnswer, Rule, Setup, Step};

fn one_slot() -> Setup {
    Setup {
        concurrency: 1,
        max_leases: 1,
        streams: 1,
        ..Setup::default()
    }
}

fn apply(harness: &mut Harness, steps: &[Step]) {
    for step in steps {
        harness
            .apply(step)
            .unwrap_or_else(|v| panic!("the real engine must pass: {v}"));
    }
}

fn deliver_one() -> Step {
    Step::Fetched {
        pick: 0,
        items: vec![Item::Fresh { count: 0 }],
    }
}

/// The last `Run` effect so far.
fn last_run(harness: &Harness) -> (InvocationId, LeaseId) {
    harness
        .effects()
        .iter()
        .rev()
        .find_map(|e| match e {
            Effect::Run { invocation, lease } => Some((*invocation, *lease)),
            _ => None,
        })
        .expect("a run")
}

fn last_renew(harness: &Harness) -> RenewId {
    harness
        .effects()
        .iter()
        .rev()
        .find_map(|e| match e {
            Effect::Renew { batch, .. } => Some(*batch),
            _ => None,
        })
        .expect("a renew")
}

fn expect_violation(harness: &mut Harness, effect: Effect, rule: Rule) {
    match harness.inject(effect.clone()) {
        Ok(()) => panic!("injected {effect:?} was not reported"),
        Err(violation) => assert!(
            violation.breaks(rule),
            "injected {effect:?}: expected {rule}, got {violation}"
        ),
    }
}

#[test]
fn a_second_concurrent_run_of_one_message_is_reported() {
    let mut harness = Harness::new(&Setup::default()).unwrap();
    apply(&mut harness, &[deliver_one()]);
    let (invocation, lease) = last_run(&harness);
    expect_violation(
        &mut harness,
        Effect::Run { invocation, lease },
        Rule::Serial,
    );
}

#[test]
fn an_ack_without_done_is_reported() {
    let mut harness = Harness::new(&Setup::default()).unwrap();
    apply(&mut harness, &[deliver_one()]);
    let (_, lease) = last_run(&harness);
    let ack = Effect::Ack {
        leases: vec![lease],
    };
    expect_violation(&mut harness, ack, Rule::AckAfterDone);
}

#[test]
fn an_ack_after_the_lease_was_reported_lost_is_reported() {
    let mut harness = Harness::new(&one_slot()).unwrap();
    apply(
        &mut harness,
        &[
            deliver_one(),
            Step::Tick, // the heartbeat round
            Step::Renewed {
                pick: 0,
                answers: vec![RenewAnswer::Lost],
            },
            // The cancelled invocation reports Done anyway: its result is discarded.
            Step::Finish {
                pick: 0,
                outcome: Finish::Done,
            },
        ],
    );
    let (invocation, lease) = last_run(&harness);
    assert!(harness.effects().contains(&Effect::Cancel {
        invocation,
        reason: CancelReason::LeaseLost
    }));
    let ack = Effect::Ack {
        leases: vec![lease],
    };
    expect_violation(&mut harness, ack, Rule::AckAfterDone);
}

#[test]
fn a_renew_of_an_expired_lease_is_reported() {
    let mut harness = Harness::new(&one_slot()).unwrap();
    apply(&mut harness, &[deliver_one(), Step::Wait(Jump::Long(255))]);
    let (invocation, lease) = last_run(&harness);
    assert!(harness.effects().contains(&Effect::Cancel {
        invocation,
        reason: CancelReason::LeaseExpired
    }));
    let renew = Effect::Renew {
        batch: last_renew(&harness),
        leases: vec![lease],
    };
    expect_violation(&mut harness, renew, Rule::Expiry);
}

#[test]
fn a_fetch_while_every_slot_is_taken_is_reported() {
    let mut harness = Harness::new(&one_slot()).unwrap();
    apply(&mut harness, &[deliver_one()]);
    let fetch = Effect::Fetch {
        stream: StreamId(0),
        max: 1,
        wait: std::time::Duration::ZERO,
    };
    expect_violation(&mut harness, fetch, Rule::Capacity);
}

#[test]
fn drained_before_shutdown_and_twice_is_reported() {
    let mut harness = Harness::new(&Setup::default()).unwrap();
    expect_violation(&mut harness, Effect::Drained, Rule::Drain);
    let mut harness = Harness::new(&Setup::default()).unwrap();
    apply(
        &mut harness,
        &[
            Step::FetchFailed { pick: 0 },
            Step::FetchFailed { pick: 0 },
            Step::Shutdown { grace_ms: 10 },
        ],
    );
    assert_eq!(harness.effects().last(), Some(&Effect::Drained));
    expect_violation(&mut harness, Effect::Drained, Rule::Drain);
}

#[test]
fn an_unexpected_cancel_is_reported() {
    let mut harness = Harness::new(&Setup::default()).unwrap();
    apply(&mut harness, &[deliver_one()]);
    let (invocation, _) = last_run(&harness);
    let cancel = Effect::Cancel {
        invocation,
        reason: CancelReason::MaxProcessingTime,
    };
    expect_violation(&mut harness, cancel, Rule::Model);
}
