//! What a driver gets from the engine, and what it owes it.
//!
//! Every effect carries what its execution needs (the stream, the backend's lease references, an
//! invocation's payload and lease validity), so a driver only makes the call the effect names and
//! reports its result: no lookups, no regrouping per stream, no batching of its own. The engine
//! keeps one ack call in flight per stream, renews per stream, tells running handlers when
//! their lease was confirmed, and counts the inputs it ignores: stale ones (an answer that raced
//! with an expiry or a redelivery) and unexpected ones (which a correct driver never sends).

mod common;

use std::time::Instant;

use common::*;
use leasehold_core::{
    Effect, Fence, LeaseRef, MessageId, Outcome, RenewResult, SettleResult, StreamId,
};

/// A `Run` carries the stream, the lease's reference, the delivery count, the attempt, the
/// lease's local expiry and the payload; settle effects carry their stream and reference.
#[test]
fn effects_carry_what_their_execution_needs() {
    let t0 = Instant::now();
    let cfg = config().concurrency(2).repoll_interval(ms(400));
    let mut e = engine_with_streams(&cfg, 2, t0);
    drain(&mut e);
    let s1 = StreamId(1);
    e.handle_fetched(t0 + ms(10), s1, vec![delivery(7, 3, 3)]);
    let fx = drain_all(&mut e);
    let Some(Effect::Run(invocation)) = fx.first() else {
        panic!("a Run first: {fx:?}")
    };
    assert_eq!(invocation.stream, s1);
    let seven = MessageId::from(7);
    assert_eq!(invocation.lease_ref, LeaseRef::new(seven.clone(), Fence(3)));
    assert_eq!((invocation.delivery_count, invocation.attempt), (3, 1));
    assert_eq!(invocation.payload, "payload 7");
    // Confirmed by the fetch sent at t0 (when the engine was created): valid for claim − margin.
    assert_eq!(invocation.valid_until, t0 + secs(3) - ms(300));
    let (invocation, lease) = (invocation.id, invocation.id.lease());

    // A re-invocation carries its attempt (once the fetches that took the free slots are answered).
    // Stream 1's full answer made its next fetch non-blocking; its empty answer lets the one
    // after block, but no longer than the re-poll is due (t0 + 420 ms), whose answer at the end
    // of that wait frees the slot the re-invocation takes.
    e.handle_outcome(t0 + ms(20), invocation, Outcome::Pending);
    assert_eq!(
        fetches(&drain(&mut e)),
        vec![(s1, 1, ms(0))],
        "stream 0's first fetch is still out"
    );
    e.handle_fetched(t0 + ms(30), s1, vec![]);
    assert_eq!(fetches(&drain(&mut e)), vec![(s1, 1, ms(390))]);
    e.handle_fetched(t0 + ms(420), s1, vec![]);
    let fx = drain_all(&mut e);
    let again = fx
        .iter()
        .find_map(|f| match f {
            Effect::Run(invocation) => Some(invocation.clone()),
            _ => None,
        })
        .expect("the re-invocation");
    assert_eq!((again.attempt, again.id.lease()), (2, lease));

    // A rejected message's dead letter and a retried one's release name stream and reference.
    e.handle_outcome(t0 + ms(430), again.id, Outcome::reject("bad"));
    let fx = drain_all(&mut e);
    assert!(
        fx.iter().any(|f| matches!(f,
            Effect::DeadLetter { stream, lease: l, lease_ref, .. }
                if *stream == s1 && *l == lease && lease_ref.id == seven
                    && lease_ref.fence == Fence(3))),
        "{fx:?}"
    );
}

/// `into_parts` hands the payload over and keeps every other fact of the invocation as it was.
#[test]
fn an_invocation_splits_into_its_facts_and_its_payload() {
    let t0 = Instant::now();
    let mut e = engine(&config(), t0);
    drain(&mut e);
    e.handle_fetched(t0 + ms(10), S0, vec![delivery(7, 2, 5)]);
    let fx = drain_all(&mut e);
    let Some(Effect::Run(invocation)) = fx.first() else {
        panic!("a Run first: {fx:?}")
    };
    let (facts, payload) = invocation.clone().into_parts();
    assert_eq!(payload, invocation.payload);
    assert_eq!(
        (
            facts.id,
            facts.stream,
            &facts.lease_ref,
            facts.delivery_count
        ),
        (invocation.id, invocation.stream, &invocation.lease_ref, 2)
    );
    assert_eq!(
        (facts.attempt, facts.valid_until),
        (invocation.attempt, invocation.valid_until)
    );
}

/// One `Renew` per stream per round (chunked by `renew_batch_size` within a stream), each with
/// the references of its leases in order; a failed chunk touches only its own stream's leases.
#[test]
fn renews_go_per_stream_with_their_references() {
    let t0 = Instant::now();
    let mut e = engine_with_streams(&config().concurrency(4), 2, t0);
    drain(&mut e);
    let s1 = StreamId(1);
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1), msg(2)]);
    e.handle_fetched(t0 + ms(10), s1, vec![msg(1)]);
    drain(&mut e);
    e.handle_timeout(t0 + secs(1));
    let fx = drain_all(&mut e);
    let renews: Vec<_> = fx
        .iter()
        .filter_map(|f| match f {
            Effect::Renew {
                batch,
                stream,
                leases,
                lease_refs,
            } => Some((*batch, *stream, leases.clone(), lease_refs.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(renews.len(), 2, "{fx:?}");
    for (_, stream, leases, lease_refs) in &renews {
        assert_eq!(leases.len(), lease_refs.len());
        for (id, lease_ref) in leases.iter().zip(lease_refs) {
            let held = e.lease(*id).expect("held");
            assert_eq!(held.stream(), *stream);
            assert_eq!(&held.lease_ref(), lease_ref);
        }
    }
    let on = |s: StreamId| {
        renews
            .iter()
            .find(|r| r.1 == s)
            .expect("a renew per stream")
    };
    assert_eq!(on(S0).2.len(), 2);
    assert_eq!(on(s1).2.len(), 1);
    // Stream 1's call fails, stream 0's succeeds: only stream 0's leases were confirmed.
    let (b0, _, l0, _) = on(S0).clone();
    let (b1, _, l1, _) = on(s1).clone();
    e.handle_renew_failed(t0 + secs(1) + ms(5), b1);
    e.handle_renewed(
        t0 + secs(1) + ms(5),
        b0,
        l0.iter().map(|id| (*id, RenewResult::Kept)),
    );
    drain(&mut e);
    let until = |id| e.valid_until(id).expect("held");
    assert_eq!(until(l0[0]), t0 + secs(1) + ms(2700));
    assert_eq!(
        until(l1[0]),
        t0 + ms(2700),
        "still the fetch's confirmation"
    );
}

/// A running invocation hears of every confirmation of its lease (`LeaseValid`), with the new
/// local expiry; a waiting lease has no invocation to tell.
#[test]
fn running_invocations_hear_of_each_confirmation() {
    let t0 = Instant::now();
    let mut e = engine(&config().concurrency(2).repoll_interval(secs(5)), t0);
    drain(&mut e);
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1), msg(2)]);
    let fx = drain(&mut e);
    let [(running, _), (waiting, _)] = runs(&fx)[..] else {
        panic!("{fx:?}")
    };
    e.handle_outcome(t0 + ms(20), waiting, Outcome::Pending);
    drain(&mut e);
    e.handle_timeout(t0 + secs(1));
    let (batch, leases) = one_renew(&drain(&mut e));
    e.handle_renewed(
        t0 + secs(1) + ms(50),
        batch,
        leases.iter().map(|id| (*id, RenewResult::Kept)),
    );
    let fx = drain_all(&mut e);
    // Valid for claim − margin from the renew's send time.
    assert_eq!(validities(&fx), vec![(running, t0 + secs(1) + ms(2700))]);

    // A redelivery of the running message by a fetch sent after that renew confirms it too.
    e.handle_fetched(t0 + secs(1) + ms(60), S0, vec![]);
    assert_eq!(
        drain(&mut e),
        vec![fetch(1, ms(1000))],
        "the next fetch, at once"
    );
    e.handle_fetched(t0 + secs(1) + ms(100), S0, vec![delivery(1, 2, 2)]);
    let fx = drain_all(&mut e);
    assert_eq!(
        validities(&fx),
        vec![(running, t0 + secs(1) + ms(60) + ms(2700))],
        "{fx:?}"
    );
}

/// One ack call in flight per stream: acks due on another stream go out at once.
#[test]
fn acks_wait_only_for_their_own_streams_call() {
    let t0 = Instant::now();
    let mut e = engine_with_streams(&config().concurrency(4), 2, t0);
    drain(&mut e);
    let s1 = StreamId(1);
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1), msg(2)]);
    let fx = drain(&mut e);
    let [(a, la), (b, lb)] = runs(&fx)[..] else {
        panic!("{fx:?}")
    };
    e.handle_fetched(t0 + ms(10), s1, vec![msg(3)]);
    let (c, lc) = one_run(&drain(&mut e));
    e.handle_outcome(t0 + ms(20), a, Outcome::Done);
    assert_eq!(acks(&drain(&mut e)), vec![vec![la]]);
    e.handle_outcome(t0 + ms(30), b, Outcome::Done);
    assert_eq!(
        acks(&drain(&mut e)),
        Vec::<Vec<_>>::new(),
        "stream 0 has one in flight"
    );
    e.handle_outcome(t0 + ms(40), c, Outcome::Done);
    assert_eq!(acks(&drain(&mut e)), vec![vec![lc]], "stream 1 has none");
    e.handle_acked(t0 + ms(50), [(la, SettleResult::Ok)]);
    assert_eq!(acks(&drain(&mut e)), vec![vec![lb]]);
}

/// A lease left out of an ack's answer was not acked: it is retried like a transient failure,
/// never forgotten.
#[test]
fn a_lease_left_out_of_an_ack_answer_is_acked_again() {
    let t0 = Instant::now();
    let mut e = engine(&config().concurrency(2), t0);
    drain(&mut e);
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1), msg(2)]);
    let fx = drain(&mut e);
    let [(a, la), (b, lb)] = runs(&fx)[..] else {
        panic!("{fx:?}")
    };
    e.handle_outcome(t0 + ms(20), a, Outcome::Done);
    drain(&mut e);
    e.handle_outcome(t0 + ms(20), b, Outcome::Done);
    drain(&mut e);
    e.handle_acked(t0 + ms(30), [(la, SettleResult::Ok)]);
    let fx = drain(&mut e);
    assert_eq!(acks(&fx), vec![vec![lb]], "b waited for a's call: {fx:?}");
    // The answer to b's batch leaves b out.
    let batch = e.last_ack_batch().expect("b's batch");
    leasehold_core::LeaseEngine::handle_acked(&mut e, t0 + ms(40), batch, []);
    assert_eq!(acks(&drain(&mut e)), Vec::<Vec<_>>::new());
    e.handle_timeout(t0 + ms(1040));
    assert_eq!(
        acks(&drain(&mut e)),
        vec![vec![lb]],
        "retried after poll_interval"
    );
    assert_eq!(e.stats().acked, 1);
}

/// Inputs the engine ignores are counted: `stale` for answers that raced with a redelivery or an
/// expiry, `unexpected` for what it never asked for or already had.
#[test]
fn ignored_inputs_are_counted_stale_or_unexpected() {
    let t0 = Instant::now();
    let mut e = engine(&config().concurrency(1).max_leases(2), t0);
    drain(&mut e);
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1)]);
    let (a, la) = one_run(&drain(&mut e));
    assert_eq!(e.stats().unexpected, 0, "that fetch was in flight");

    // Deliveries without a fetch in flight are handed back, and counted.
    e.handle_fetched(t0 + ms(11), S0, vec![msg(9)]);
    let fx = drain(&mut e);
    let [(nine, _)] = releases(&fx)[..] else {
        panic!("{fx:?}")
    };
    assert_eq!(e.stats().unexpected, 1);
    // A fetch failure with no fetch in flight; a stream that does not exist.
    e.handle_fetch_failed(t0 + ms(12), S0);
    e.handle_fetched(t0 + ms(12), StreamId(5), vec![]);
    assert_eq!(e.stats().unexpected, 3);
    // An outcome reported twice.
    e.handle_outcome(t0 + ms(20), a, Outcome::Pending);
    e.handle_outcome(t0 + ms(21), a, Outcome::Done);
    assert_eq!(e.stats().unexpected, 4);
    assert_eq!(e.stats().pending, 1, "the first report stands");
    e.handle_released(t0 + ms(22), nine, SettleResult::Ok);
    let fx = drain(&mut e);
    assert_eq!(fetches(&fx).len(), 1, "room again: {fx:?}");

    // A renew answered twice.
    e.handle_timeout(t0 + secs(1));
    let (batch, leases) = one_renew(&drain(&mut e));
    assert_eq!(leases, vec![la]);
    let kept = || [(la, RenewResult::Kept)];
    e.handle_renewed(t0 + secs(1), batch, kept());
    e.handle_renewed(t0 + secs(1), batch, kept());
    assert_eq!(e.stats().unexpected, 5);
    assert_eq!(e.stats().stale, 0);

    // A renew sent before a redelivery replaced the fence: its answer is stale.
    e.handle_timeout(t0 + secs(2));
    let (batch, _) = one_renew(&drain(&mut e));
    e.handle_fetched(t0 + secs(2) + ms(1), S0, vec![delivery(1, 2, 2)]);
    drain(&mut e);
    assert_eq!(e.stats().redelivered, 1);
    e.handle_renewed(t0 + secs(2) + ms(2), batch, kept());
    assert_eq!(e.stats().stale, 1);
    assert_eq!(
        e.stats().unexpected,
        5,
        "a correct driver's inputs are never unexpected"
    );
}
