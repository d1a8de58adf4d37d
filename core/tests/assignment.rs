//! Which streams an engine fetches from (`handle_assignment`): the shards of a sharded queue
//! that a worker shares with others. An unassigned stream is never fetched from, while the
//! leases it holds are served to the end (renewed, re-polled, acked), so handing a shard over
//! drops nothing.

mod common;

use std::time::Instant;

use common::*;
use leasehold_core::{Outcome, RenewResult, SettleResult, StreamId};

const S1: StreamId = StreamId(1);

/// Every stream starts assigned; an unassigned one issues no fetch, and the budget goes to
/// the others.
#[test]
fn an_unassigned_stream_is_never_fetched_from() {
    let t0 = Instant::now();
    let mut e = engine_with_streams(&config().concurrency(2), 2, t0);
    assert!(e.is_assigned(S0) && e.is_assigned(S1));
    e.handle_assignment(t0, S0, false);
    assert!(!e.is_assigned(S0));
    assert_eq!(
        fetches(&drain(&mut e)),
        vec![(S1, 2, ms(1000))],
        "all the budget to the assigned stream"
    );
    // Empty answers: the next fetch of stream 1 comes a poll interval later, none of stream 0.
    e.handle_fetched(t0 + ms(5), S1, vec![]);
    assert!(drain(&mut e).is_empty());
    assert_eq!(e.poll_timeout(), Some(t0 + ms(1000)));
    for i in 1..=5u64 {
        let at = t0 + ms(1000 * i);
        e.handle_timeout(at);
        assert_eq!(fetches(&drain(&mut e)), vec![(S1, 2, ms(1000))], "at {i} s");
        e.handle_fetched(at + ms(5), S1, vec![]);
        assert!(drain(&mut e).is_empty());
    }
    // Neither assigned: nothing to wait for at all.
    e.handle_assignment(t0 + ms(5100), S1, false);
    assert!(drain(&mut e).is_empty());
    assert_eq!(e.poll_timeout(), None);
    assert_eq!(e.stats().unexpected, 0);
}

/// Leases of a stream that stops being assigned keep their heartbeat, their re-polls and their
/// acks until each is done; only intake stops.
#[test]
fn leases_of_an_unassigned_stream_are_served_to_the_end() {
    let t0 = Instant::now();
    let mut e = engine_with_streams(&config().concurrency(2), 2, t0);
    assert_eq!(
        fetches(&drain(&mut e)),
        vec![(S0, 1, ms(1000)), (S1, 1, ms(1000))]
    );
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1)]);
    let (first, lease) = one_run(&drain(&mut e));
    e.handle_fetched(t0 + ms(10), S1, vec![]);
    drain(&mut e);
    // Stream 0 goes to another worker while its message runs.
    e.handle_assignment(t0 + ms(20), S0, false);
    assert!(drain(&mut e).is_empty());
    e.handle_outcome(t0 + ms(30), first, Outcome::Pending);
    let fx = drain(&mut e);
    assert!(fetches(&fx).iter().all(|(s, ..)| *s == S1), "{fx:?}");
    // Re-polled after `repoll_interval` (400 ms), renewed at the heartbeat (1 s), never
    // fetched from.
    e.handle_timeout(t0 + ms(430));
    let fx = drain(&mut e);
    let (second, again) = one_run(&fx);
    assert_eq!(again, lease);
    assert_ne!(second, first, "a second invocation");
    e.handle_timeout(t0 + ms(1010));
    let fx = drain(&mut e);
    let (batch, leases) = one_renew(&fx);
    assert_eq!(leases, vec![lease]);
    assert!(fetches(&fx).iter().all(|(s, ..)| *s == S1), "{fx:?}");
    e.handle_renewed(t0 + ms(1020), batch, [(lease, RenewResult::Kept)]);
    e.handle_outcome(t0 + ms(1100), second, Outcome::Done);
    let fx = drain(&mut e);
    assert_eq!(acks(&fx), vec![vec![lease]]);
    assert!(fetches(&fx).iter().all(|(s, ..)| *s == S1), "{fx:?}");
    e.handle_acked(t0 + ms(1110), [(lease, SettleResult::Ok)]);
    assert_eq!(e.held(), 0);
    assert_eq!(e.stats().acked, 1);
    assert_eq!(e.stats().lost, 0);
}

/// A stream assigned again fetches at once, not a poll interval after its last empty fetch:
/// a worker that left may have lapsed leases there.
#[test]
fn a_stream_assigned_again_fetches_at_once() {
    let t0 = Instant::now();
    let mut e = engine_with_streams(&config().concurrency(1), 2, t0);
    e.handle_assignment(t0, S1, false);
    assert_eq!(fetches(&drain(&mut e)), vec![(S0, 1, ms(1000))]);
    e.handle_fetched(t0 + ms(10), S0, vec![]);
    assert!(drain(&mut e).is_empty());
    // Assigning an assigned stream changes nothing.
    e.handle_assignment(t0 + ms(20), S0, true);
    assert!(drain(&mut e).is_empty());
    e.handle_assignment(t0 + ms(30), S1, true);
    assert_eq!(fetches(&drain(&mut e)), vec![(S1, 1, ms(1000))]);
    assert_no_busy_loop(&e, t0 + ms(30));
}

/// A fetch outstanding when its stream is unassigned is answered as usual: what it brings is
/// run, not dropped.
#[test]
fn an_outstanding_fetch_is_answered_as_usual() {
    let t0 = Instant::now();
    let mut e = engine(&config().concurrency(2), t0);
    assert_eq!(fetches(&drain(&mut e)), vec![(S0, 2, ms(1000))]);
    e.handle_assignment(t0 + ms(5), S0, false);
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1), msg(2)]);
    let fx = drain(&mut e);
    assert_eq!(runs(&fx).len(), 2);
    assert!(fetches(&fx).is_empty());
    assert_eq!(e.stats().overflow, 0);
    assert_eq!(e.held(), 2);
}

/// An assignment of a stream the engine does not have is an unexpected input, and nothing else.
#[test]
fn an_unknown_stream_is_unexpected() {
    let t0 = Instant::now();
    let mut e = engine(&config(), t0);
    e.handle_assignment(t0, StreamId(3), false);
    assert!(!e.is_assigned(StreamId(3)));
    assert_eq!(e.stats().unexpected, 1);
    assert_eq!(fetches(&drain(&mut e)), vec![(S0, 1, ms(1000))]);
}
