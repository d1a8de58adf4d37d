//! The checker must be able to fail: hand-made violations injected into a real run, effects of
//! the real engine tampered with, and wrong expectations of the model are reported under the
//! right rule.

use std::time::Duration;

use leasehold_core::{
    AckId, CancelReason, Effect, Invocation, InvocationId, LeaseId, LeaseRef, RenewId, StreamId,
};

use crate::model::Tag;
use crate::{Finish, Harness, Item, Jump, RenewAnswer, Rule, SettleAnswer, Setup, Step, Violation};

fn one_slot() -> Setup {
    Setup {
        concurrency: 1,
        max_leases: 1,
        streams: 1,
        ..Setup::default()
    }
}

/// One stream, two slots.
fn two_slots() -> Setup {
    Setup {
        concurrency: 2,
        max_leases: 2,
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

fn deliver(n: usize) -> Step {
    Step::Fetched {
        pick: 0,
        items: vec![Item::Fresh { count: 0 }; n],
    }
}

fn deliver_one() -> Step {
    deliver(1)
}

fn done(pick: u8) -> Step {
    Step::Finish {
        pick,
        outcome: Finish::Done,
    }
}

/// The invocations the `Run` effects so far started.
fn all_invocations(harness: &Harness) -> Vec<Invocation<Tag>> {
    harness
        .effects()
        .iter()
        .filter_map(|e| match e {
            Effect::Run(invocation) => Some(invocation.clone()),
            _ => None,
        })
        .collect()
}

/// The invocation the last `Run` effect so far started.
fn last_invocation(harness: &Harness) -> Invocation<Tag> {
    all_invocations(harness).pop().expect("an invocation")
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

/// The `Ack` effects so far, as `(batch, stream, leases)`.
fn all_acks(harness: &Harness) -> Vec<(AckId, StreamId, Vec<LeaseId>)> {
    harness
        .effects()
        .iter()
        .filter_map(|e| match e {
            Effect::Ack {
                batch,
                stream,
                leases,
                ..
            } => Some((*batch, *stream, leases.clone())),
            _ => None,
        })
        .collect()
}

fn validities(harness: &Harness) -> Vec<(InvocationId, std::time::Instant)> {
    harness
        .effects()
        .iter()
        .filter_map(|e| match e {
            Effect::LeaseValid { invocation, until } => Some((*invocation, *until)),
            _ => None,
        })
        .collect()
}

fn lease_ref(invocation: &Invocation<Tag>) -> LeaseRef {
    invocation.lease_ref.clone()
}

fn expect_violation(harness: &mut Harness, effect: Effect<Tag>, rule: Rule) -> Violation {
    match harness.inject(effect.clone()) {
        Ok(()) => panic!("injected {effect:?} was not reported"),
        Err(violation) => {
            assert!(
                violation.breaks(rule),
                "injected {effect:?}: expected {rule}, got {violation}"
            );
            violation
        }
    }
}

/// Asserts one of the violation's problems breaks `rule` and says `what`.
fn assert_reports(violation: &Violation, rule: Rule, what: &str) {
    assert!(
        violation
            .problems
            .iter()
            .any(|p| p.rule == rule && p.detail.contains(what)),
        "expected {rule} saying {what:?}, got {violation}"
    );
}

#[test]
fn a_second_concurrent_run_of_one_message_is_reported() {
    let mut harness = Harness::new(&Setup::default()).unwrap();
    apply(&mut harness, &[deliver_one()]);
    let invocation = last_invocation(&harness);
    expect_violation(&mut harness, Effect::Run(invocation), Rule::Serial);
}

#[test]
fn an_ack_without_done_is_reported() {
    let mut harness = Harness::new(&two_slots()).unwrap();
    apply(&mut harness, &[deliver(2), done(0)]);
    let (batch, stream, _) = all_acks(&harness).pop().expect("the first Done's ack");
    apply(
        &mut harness,
        &[Step::Acked {
            pick: 0,
            answers: vec![],
        }],
    );
    // The other invocation is still running.
    let running = all_invocations(&harness)
        .into_iter()
        .find(|r| !all_acks(&harness)[0].2.contains(&r.id.lease()))
        .expect("the running one");
    let ack = Effect::Ack {
        batch,
        stream,
        leases: vec![running.id.lease()],
        lease_refs: vec![lease_ref(&running)],
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
            done(0),
        ],
    );
    let invocation = last_invocation(&harness);
    assert!(harness.effects().contains(&Effect::Cancel {
        invocation: invocation.id,
        reason: CancelReason::LeaseLost
    }));
    // No Ack was ever sent; borrow an id from another harness.
    let mut other = Harness::new(&one_slot()).unwrap();
    apply(&mut other, &[deliver_one(), done(0)]);
    let (batch, ..) = all_acks(&other).pop().expect("an ack");
    let ack = Effect::Ack {
        batch,
        stream: invocation.stream,
        leases: vec![invocation.id.lease()],
        lease_refs: vec![lease_ref(&invocation)],
    };
    expect_violation(&mut harness, ack, Rule::AckAfterDone);
}

#[test]
fn a_renew_of_an_expired_lease_is_reported() {
    let mut harness = Harness::new(&one_slot()).unwrap();
    apply(&mut harness, &[deliver_one(), Step::Wait(Jump::Long(255))]);
    let invocation = last_invocation(&harness);
    assert!(harness.effects().contains(&Effect::Cancel {
        invocation: invocation.id,
        reason: CancelReason::LeaseExpired
    }));
    let renew = Effect::Renew {
        batch: last_renew(&harness),
        stream: invocation.stream,
        leases: vec![invocation.id.lease()],
        lease_refs: vec![lease_ref(&invocation)],
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
        wait: Duration::ZERO,
    };
    expect_violation(&mut harness, fetch, Rule::Capacity);
}

#[test]
fn drained_before_shutdown_and_twice_is_reported() {
    let mut harness = Harness::new(&Setup::default()).unwrap();
    expect_violation(&mut harness, Effect::Drained, Rule::Drain);
    let mut harness = Harness::new(&Setup::default()).unwrap();
    let failed = Step::FetchFailed {
        pick: 0,
        fatal: false,
    };
    apply(
        &mut harness,
        &[failed.clone(), failed, Step::Shutdown { grace_ms: 10 }],
    );
    assert_eq!(harness.effects().last(), Some(&Effect::Drained));
    expect_violation(&mut harness, Effect::Drained, Rule::Drain);
}

#[test]
fn an_unexpected_cancel_is_reported() {
    let mut harness = Harness::new(&Setup::default()).unwrap();
    apply(&mut harness, &[deliver_one()]);
    let cancel = Effect::Cancel {
        invocation: last_invocation(&harness).id,
        reason: CancelReason::MaxProcessingTime,
    };
    expect_violation(&mut harness, cancel, Rule::Model);
}

/// One `Ack` in flight per stream: a second one before the first is answered is reported.
#[test]
fn a_second_ack_on_a_stream_while_one_is_in_flight_is_reported() {
    let mut harness = Harness::new(&two_slots()).unwrap();
    apply(&mut harness, &[deliver(2), done(0), done(0)]);
    let acks = all_acks(&harness);
    assert_eq!(acks.len(), 1, "the second Done waits for the first's batch");
    let (batch, stream, first) = acks[0].clone();
    let second = all_invocations(&harness)
        .into_iter()
        .find(|r| !first.contains(&r.id.lease()))
        .expect("the other invocation");
    let ack = Effect::Ack {
        batch,
        stream,
        leases: vec![second.id.lease()],
        lease_refs: vec![lease_ref(&second)],
    };
    let violation = expect_violation(&mut harness, ack, Rule::Model);
    assert_reports(&violation, Rule::Model, "is unanswered");
}

/// Acks that came due together go out in one batch: an engine splitting them is reported.
#[test]
fn acks_due_together_split_in_two_batches_are_reported() {
    let mut harness = Harness::new(&two_slots()).unwrap();
    apply(&mut harness, &[deliver(2)]);
    // Both finish in one burst: one Ack with both leases.
    let burst = Step::Burst(vec![done(0), done(0)]);
    let mut split = |effect: Effect<Tag>| match effect {
        Effect::Ack {
            batch,
            stream,
            leases,
            lease_refs,
        } if leases.len() == 2 => vec![
            Effect::Ack {
                batch,
                stream,
                leases: leases[..1].to_vec(),
                lease_refs: lease_refs[..1].to_vec(),
            },
            Effect::Ack {
                batch,
                stream,
                leases: leases[1..].to_vec(),
                lease_refs: lease_refs[1..].to_vec(),
            },
        ],
        other => vec![other],
    };
    let violation = harness
        .apply_tampered(&burst, &mut split)
        .expect_err("a split batch is reported");
    assert_reports(&violation, Rule::Model, "leaves out acks due");
    assert_reports(&violation, Rule::Model, "is unanswered");
}

/// A `LeaseValid` must carry the confirmation's send time plus the TTL exactly.
#[test]
fn a_lease_valid_with_a_wrong_until_is_reported() {
    let setup = one_slot();
    let ttl = setup.config().validate().unwrap().lease_ttl();
    let kept = Step::Renewed {
        pick: 0,
        answers: vec![RenewAnswer::Kept],
    };
    // The real engine: one LeaseValid, the renew's send time + TTL.
    let mut harness = Harness::new(&setup).unwrap();
    apply(&mut harness, &[deliver_one(), Step::Tick]);
    let renewed_at = harness.model_mut().now;
    apply(&mut harness, std::slice::from_ref(&kept));
    let invocation = last_invocation(&harness);
    assert_eq!(
        validities(&harness),
        vec![(invocation.id, renewed_at + ttl)]
    );

    // An engine telling the handler its lease lasts a millisecond longer.
    let mut harness = Harness::new(&setup).unwrap();
    apply(&mut harness, &[deliver_one(), Step::Tick]);
    let mut later = |effect: Effect<Tag>| match effect {
        Effect::LeaseValid { invocation, until } => vec![Effect::LeaseValid {
            invocation,
            until: until + Duration::from_millis(1),
        }],
        other => vec![other],
    };
    let violation = harness
        .apply_tampered(&kept, &mut later)
        .expect_err("a late until is reported");
    assert_reports(&violation, Rule::Expiry, "LeaseValid");

    // One that forgets to tell it.
    let mut harness = Harness::new(&setup).unwrap();
    apply(&mut harness, &[deliver_one(), Step::Tick]);
    let mut silent = |effect: Effect<Tag>| match effect {
        Effect::LeaseValid { .. } => vec![],
        other => vec![other],
    };
    let violation = harness
        .apply_tampered(&kept, &mut silent)
        .expect_err("a missing LeaseValid is reported");
    assert_reports(&violation, Rule::Model, "not told its lease is valid");
}

/// An unassigned stream is not fetched from, and the model says so when the engine does.
#[test]
fn a_fetch_from_an_unassigned_stream_is_reported() {
    let mut harness = Harness::new(&one_slot()).unwrap();
    apply(
        &mut harness,
        &[
            Step::FetchFailed {
                pick: 0,
                fatal: false,
            },
            Step::Assign {
                stream: 0,
                fetching: false,
            },
        ],
    );
    let before = harness.effects().len();
    apply(&mut harness, &[Step::Wait(Jump::Long(255))]);
    let after = &harness.effects()[before..];
    assert!(
        !after.iter().any(|e| matches!(e, Effect::Fetch { .. })),
        "no fetch once unassigned: {after:?}"
    );
    let fetch = Effect::Fetch {
        stream: StreamId(0),
        max: 1,
        wait: Duration::ZERO,
    };
    let violation = expect_violation(&mut harness, fetch, Rule::Model);
    assert_reports(&violation, Rule::Model, "not assigned");
}

/// A fatal fetch error halts the stream: `Halt` once, and no fetch from it again.
#[test]
fn a_fetch_from_a_halted_stream_is_reported() {
    let mut harness = Harness::new(&one_slot()).unwrap();
    apply(
        &mut harness,
        &[Step::FetchFailed {
            pick: 0,
            fatal: true,
        }],
    );
    let stream = StreamId(0);
    assert_eq!(harness.effects().last(), Some(&Effect::Halt { stream }));
    let fetch = Effect::Fetch {
        stream,
        max: 1,
        wait: Duration::ZERO,
    };
    let violation = expect_violation(&mut harness, fetch, Rule::Model);
    assert_reports(&violation, Rule::Model, "halted");
    // A second Halt of the same stream is not expected either.
    let violation = expect_violation(&mut harness, Effect::Halt { stream }, Rule::Model);
    assert_reports(&violation, Rule::Model, "Halt of StreamId(0) not expected");
}

/// The model predicts `unexpected` exactly: an expectation off by one is reported.
#[test]
fn an_unexpected_counter_off_by_one_is_reported() {
    let mut harness = Harness::new(&one_slot()).unwrap();
    apply(
        &mut harness,
        &[
            deliver_one(),
            done(0),
            // The same invocation reported again, and the ack batch answered twice.
            Step::FinishStale {
                pick: 0,
                outcome: Finish::Done,
            },
            Step::Acked {
                pick: 0,
                answers: vec![],
            },
            Step::SettleStale {
                pick: 0,
                answer: SettleAnswer::Ok,
            },
        ],
    );
    assert_eq!(harness.engine().stats().unexpected, 2);
    harness.model_mut().counts.unexpected += 1;
    let violation = harness.recheck().expect_err("an off-by-one is reported");
    assert_reports(&violation, Rule::Model, "unexpected: 2");
}

/// A release must carry the fence the lease had when it was sent.
#[test]
fn a_release_with_a_stale_fence_is_reported() {
    let mut harness = Harness::new(&one_slot()).unwrap();
    apply(&mut harness, &[deliver_one()]);
    let retry = Step::Finish {
        pick: 0,
        outcome: Finish::RetryAfter(3),
    };
    let mut stale = |effect: Effect<Tag>| match effect {
        Effect::Release {
            stream,
            lease,
            mut lease_ref,
            delay,
        } => {
            lease_ref.fence.0 -= 1;
            vec![Effect::Release {
                stream,
                lease,
                lease_ref,
                delay,
            }]
        }
        other => vec![other],
    };
    let violation = harness
        .apply_tampered(&retry, &mut stale)
        .expect_err("a stale fence is reported");
    assert_reports(&violation, Rule::Model, "fence when it was sent");
}

/// A `Lost` notice must name the delivery, the reason and the validity left exactly; one left
/// out is reported too.
#[test]
fn a_lost_notice_with_a_wrong_margin_or_none_is_reported() {
    let lost = Step::Renewed {
        pick: 0,
        answers: vec![RenewAnswer::Lost],
    };
    let mut harness = Harness::new(&one_slot()).unwrap();
    apply(&mut harness, &[deliver_one(), Step::Tick]);
    let mut wider = |effect: Effect<Tag>| match effect {
        Effect::Lost {
            stream,
            lease_ref,
            reason,
            margin,
        } => vec![Effect::Lost {
            stream,
            lease_ref,
            reason,
            margin: margin + Duration::from_millis(1),
        }],
        other => vec![other],
    };
    let violation = harness
        .apply_tampered(&lost, &mut wider)
        .expect_err("a wrong margin is reported");
    assert_reports(&violation, Rule::Model, "Lost");

    let mut harness = Harness::new(&one_slot()).unwrap();
    apply(&mut harness, &[deliver_one(), Step::Tick]);
    let mut silent = |effect: Effect<Tag>| match effect {
        Effect::Lost { .. } => vec![],
        other => vec![other],
    };
    let violation = harness
        .apply_tampered(&lost, &mut silent)
        .expect_err("a missing notice is reported");
    assert_reports(&violation, Rule::Model, "no Lost notice");
}

/// A failed attempt is announced with its error and the delay its release carries.
#[test]
fn a_failed_notice_with_another_delay_is_reported() {
    let failed = Step::Finish {
        pick: 0,
        outcome: Finish::Failed,
    };
    let mut harness = Harness::new(&one_slot()).unwrap();
    apply(&mut harness, &[deliver_one()]);
    let mut sooner = |effect: Effect<Tag>| match effect {
        Effect::Failed {
            stream,
            lease_ref,
            delivery_count,
            error,
            retry_in,
        } => vec![Effect::Failed {
            stream,
            lease_ref,
            delivery_count,
            error,
            retry_in: retry_in / 2,
        }],
        other => vec![other],
    };
    let violation = harness
        .apply_tampered(&failed, &mut sooner)
        .expect_err("another delay is reported");
    assert_reports(&violation, Rule::Model, "Failed");
}
