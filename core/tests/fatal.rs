//! Error kinds mean something: a transient failure (a timeout, a lost connection) is retried
//! with backoff, a fatal one (authentication revoked, a key of the wrong type, a script error)
//! is not. A fatal error on any call of a stream stops that stream's intake for good (`Halt`,
//! once): nothing more is fetched from it, while the other streams go on. A settle call that
//! fails fatally gives its lease up (it lapses on the backend and is delivered again) instead
//! of retrying it forever.

mod common;

use std::time::Instant;

use common::*;
use leasehold_core::{CancelReason, ErrorKind, LeaseEngine, Outcome, StreamId};

/// A fatal fetch error halts its stream: one `Halt`, no fetch from it again, not even a timer
/// for one; another stream keeps being fetched.
#[test]
fn a_fatal_fetch_error_halts_its_stream_and_only_it() {
    let t0 = Instant::now();
    let mut e = engine_with_streams(&config().concurrency(2), 2, t0);
    let s1 = StreamId(1);
    drain(&mut e);
    LeaseEngine::handle_fetch_failed(&mut e, t0 + ms(10), s1, ErrorKind::Fatal);
    assert_eq!(drain(&mut e), vec![Seen::Halt { stream: s1 }]);
    assert_eq!(e.stats().halted, 1);
    e.handle_fetched(t0 + ms(20), S0, vec![]);
    drain(&mut e);
    for step in 1..=10u64 {
        let Some(at) = e.poll_timeout() else {
            break;
        };
        e.handle_timeout(at);
        let fx = drain(&mut e);
        assert!(
            fetches(&fx).iter().all(|(stream, _, _)| *stream == S0),
            "step {step}: {fx:?}"
        );
        for (stream, _, _) in fetches(&fx) {
            e.handle_fetched(at, stream, vec![]);
            drain(&mut e);
        }
    }
    assert_eq!(e.stats().halted, 1, "halted once");
}

/// A transient fetch error only backs off: the stream is fetched again.
#[test]
fn a_transient_fetch_error_backs_off_and_fetches_again() {
    let t0 = Instant::now();
    let mut e = engine(&config().concurrency(1), t0);
    drain(&mut e);
    e.handle_fetch_failed(t0 + ms(10), S0);
    assert_eq!(drain(&mut e), vec![]);
    let at = e.poll_timeout().expect("a backoff");
    e.handle_timeout(at);
    assert_eq!(fetches(&drain(&mut e)).len(), 1);
    assert_eq!(e.stats().halted, 0);
}

/// A fatal ack error gives the leases of the batch up (counted `abandoned`, never retried) and
/// halts the stream; a transient one keeps them for a retry.
#[test]
fn a_fatal_ack_error_gives_its_leases_up_and_halts() {
    let t0 = Instant::now();
    let mut e = engine(&config().concurrency(2), t0);
    drain(&mut e);
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1)]);
    let (inv, a) = one_run(&drain(&mut e));
    e.handle_outcome(t0 + ms(20), inv, Outcome::Done);
    assert_eq!(acks(&drain(&mut e)), vec![vec![a]]);
    let batch = e.last_ack_batch().expect("a batch");
    e.handle_ack_failed(t0 + ms(30), batch, ErrorKind::Fatal);
    let fx = drain(&mut e);
    assert!(fx.contains(&Seen::Halt { stream: S0 }), "{fx:?}");
    assert!(e.lease(a).is_none(), "given up");
    assert_eq!((e.stats().abandoned, e.stats().acked), (1, 0));
    assert_eq!(e.held(), 0);
    e.handle_timeout(t0 + secs(5));
    assert!(!mentions(&drain(&mut e), a), "never retried");
}

/// A fatal renew error halts the stream; its leases keep their state (they expire locally if
/// no renew succeeds), so running handlers are cancelled in time rather than left unfenced.
#[test]
fn a_fatal_renew_error_halts_the_stream_and_leases_expire_locally() {
    let t0 = Instant::now();
    let mut e = engine(&config().concurrency(1), t0);
    drain(&mut e);
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1)]);
    let (inv, a) = one_run(&drain(&mut e));
    e.handle_timeout(t0 + secs(1));
    let (batch, _) = one_renew(&drain(&mut e));
    LeaseEngine::handle_renew_failed(&mut e, t0 + secs(1), batch, ErrorKind::Fatal);
    assert_eq!(drain(&mut e), vec![Seen::Halt { stream: S0 }]);
    assert!(e.lease(a).is_some(), "still held until it expires");
    // Later rounds fail too; at claim − margin after the fetch the lease expires locally and
    // its invocation is cancelled.
    let mut seen = Vec::new();
    while let Some(at) = e.poll_timeout() {
        if at > t0 + secs(3) {
            break;
        }
        e.handle_timeout(at);
        let fx = drain(&mut e);
        for (batch, _) in renews(&fx) {
            LeaseEngine::handle_renew_failed(&mut e, at, batch, ErrorKind::Fatal);
        }
        seen.extend(fx);
        seen.extend(drain(&mut e));
    }
    assert_eq!(cancels(&seen), vec![(inv, CancelReason::LeaseExpired)]);
    assert_eq!(e.valid_until(a), None);
    assert_eq!((e.stats().expired, e.stats().halted), (1, 1));
}

/// A fatal release error gives the lease up and halts the stream.
#[test]
fn a_fatal_release_error_gives_the_lease_up() {
    let t0 = Instant::now();
    let mut e = engine(&config().concurrency(1), t0);
    drain(&mut e);
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1)]);
    let (inv, a) = one_run(&drain(&mut e));
    e.handle_outcome(t0 + ms(20), inv, Outcome::retry());
    assert_eq!(releases(&drain(&mut e)).len(), 1);
    LeaseEngine::handle_released(&mut e, t0 + ms(30), a, Err(ErrorKind::Fatal));
    assert_eq!(drain(&mut e), vec![Seen::Halt { stream: S0 }]);
    assert!(e.lease(a).is_none());
    assert_eq!((e.stats().abandoned, e.stats().released), (1, 0));
    // A transient failure of the same call would have been retried.
    let mut e = engine(&config().concurrency(1), t0);
    drain(&mut e);
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1)]);
    let (inv, a) = one_run(&drain(&mut e));
    e.handle_outcome(t0 + ms(20), inv, Outcome::retry());
    drain(&mut e);
    LeaseEngine::handle_released(&mut e, t0 + ms(30), a, Err(ErrorKind::Transient));
    assert_eq!(drain(&mut e), vec![]);
    e.handle_timeout(t0 + ms(1030));
    assert_eq!(
        releases(&drain(&mut e)).len(),
        1,
        "retried after poll_interval"
    );
    assert_eq!(e.stats().halted, 0);
}

/// Nothing follows `Drained`: a renew call still out when shutdown completed, answered with a
/// fatal error, halts its stream (counted) without a `Halt` effect.
#[test]
fn a_fatal_error_after_drained_emits_nothing() {
    let t0 = Instant::now();
    let mut e = engine(&config().concurrency(1), t0);
    drain(&mut e);
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1)]);
    let (inv, a) = one_run(&drain(&mut e));
    e.handle_timeout(t0 + secs(1));
    let (batch, _) = one_renew(&drain(&mut e));
    e.handle_outcome(t0 + secs(1), inv, Outcome::Done);
    let mut fx = drain(&mut e);
    assert_eq!(acks(&fx), vec![vec![a]], "{fx:?}");
    e.handle_acked(t0 + secs(1), [(a, leasehold_core::SettleResult::Ok)]);
    fx.extend(drain(&mut e));
    let [(stream, _, _)] = fetches(&fx)[..] else {
        panic!("one fetch outstanding: {fx:?}")
    };
    e.handle_shutdown(t0 + secs(1), t0 + secs(2));
    e.handle_fetched(t0 + secs(1), stream, vec![]);
    assert_eq!(drain(&mut e), vec![Seen::Drained]);
    // The renew round sent before shutdown is answered now.
    LeaseEngine::handle_renew_failed(&mut e, t0 + secs(1), batch, ErrorKind::Fatal);
    assert_eq!(drain(&mut e), vec![]);
    assert_eq!(e.stats().halted, 1);
    assert!(e.is_drained());
}
