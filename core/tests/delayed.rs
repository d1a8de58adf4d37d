//! Delayed messages: a fetch tells when the stream's next delayed message is due
//! (`handle_due`), and the engine fetches then — no later, and never blocking past it — so an
//! idle worker picks it up on time without polling for it.

mod common;

use std::time::Instant;

use common::*;
use leasehold_core::StreamId;

const S1: StreamId = StreamId(1);

/// An empty fetch would be followed after `poll_interval`; a delayed message due sooner brings
/// the next fetch forward to its due time.
#[test]
fn a_due_time_brings_the_next_fetch_forward() {
    let t0 = Instant::now();
    let mut e = engine(&config().concurrency(1), t0);
    assert_eq!(drain(&mut e), vec![fetch(1, ms(1000))]);
    e.handle_fetched(t0 + ms(10), S0, vec![]);
    e.handle_due(t0 + ms(10), S0, Some(t0 + ms(250)));
    assert_eq!(drain(&mut e), vec![]);
    assert_eq!(e.poll_timeout(), Some(t0 + ms(250)));
    e.handle_timeout(t0 + ms(249));
    assert_eq!(drain(&mut e), vec![]);
    e.handle_timeout(t0 + ms(250));
    // Due now: the fetch must not block (the message is there to take).
    assert_eq!(drain(&mut e), vec![fetch(1, ms(0))]);
}

/// A fetch sent while a delayed message is due later blocks at most until then, so a backend
/// that only wakes for new entries still returns when the message is due.
#[test]
fn a_fetch_never_blocks_past_the_due_time() {
    let t0 = Instant::now();
    let mut e = engine(&config().concurrency(1), t0);
    assert_eq!(drain(&mut e), vec![fetch(1, ms(1000))]);
    // The fetch blocked its whole wait: the next goes out at once, blocking until the due time.
    e.handle_fetched(t0 + ms(1000), S0, vec![]);
    e.handle_due(t0 + ms(1000), S0, Some(t0 + ms(1300)));
    e.handle_timeout(t0 + ms(1000));
    assert_eq!(drain(&mut e), vec![fetch(1, ms(300))]);
}

/// A later due time than the pacing's next fetch changes nothing, and a fetch's answer forgets
/// what the previous one reported: the new answer says afresh (here: nothing delayed).
#[test]
fn a_later_due_time_changes_nothing_and_a_new_fetch_forgets_it() {
    let t0 = Instant::now();
    let mut e = engine(&config().concurrency(1), t0);
    assert_eq!(drain(&mut e), vec![fetch(1, ms(1000))]);
    e.handle_fetched(t0 + ms(10), S0, vec![]);
    e.handle_due(t0 + ms(10), S0, Some(t0 + secs(5)));
    assert_eq!(e.poll_timeout(), Some(t0 + ms(1000)));
    e.handle_timeout(t0 + ms(1000));
    assert_eq!(drain(&mut e), vec![fetch(1, ms(1000))]);
    e.handle_fetched(t0 + ms(2000), S0, vec![]);
    assert_eq!(drain(&mut e), vec![fetch(1, ms(1000))]);
    e.handle_fetched(t0 + ms(2010), S0, vec![]);
    // Nothing delayed any more: back to the poll interval from the send time.
    assert_eq!(e.poll_timeout(), Some(t0 + ms(3000)));
}

/// While every slot is busy no fetch goes out, due or not; when one frees, the fetch comes.
#[test]
fn a_due_time_does_not_fetch_into_full_slots() {
    let t0 = Instant::now();
    let mut e = engine(&config().concurrency(1), t0);
    drain(&mut e);
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1)]);
    let (invocation, _) = one_run(&drain(&mut e));
    e.handle_due(t0 + ms(10), S0, Some(t0 + ms(20)));
    e.handle_timeout(t0 + ms(20));
    assert!(fetches(&drain(&mut e)).is_empty());
    e.handle_outcome(t0 + ms(30), invocation, leasehold_core::Outcome::Done);
    let fx = drain(&mut e);
    assert_eq!(fetches(&fx), vec![(S0, 1, ms(0))], "{fx:?}");
}

/// With several streams, each keeps its own due time.
#[test]
fn due_times_are_per_stream() {
    let t0 = Instant::now();
    let mut e = engine_with_streams(&config().concurrency(2), 2, t0);
    assert_eq!(fetches(&drain(&mut e)).len(), 2);
    e.handle_fetched(t0 + ms(10), S0, vec![]);
    e.handle_fetched(t0 + ms(10), S1, vec![]);
    e.handle_due(t0 + ms(10), S1, Some(t0 + ms(100)));
    assert_eq!(e.poll_timeout(), Some(t0 + ms(100)));
    e.handle_timeout(t0 + ms(100));
    let fx = drain(&mut e);
    assert_eq!(fetches(&fx), vec![(S1, 2, ms(0))], "{fx:?}");
    assert_no_busy_loop(&e, t0 + ms(100));
}
