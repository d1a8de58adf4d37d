//! Several streams on one engine: they share one concurrency budget (guarantee 1 of the crate
//! docs), are fetched round-robin, and the same message id on two streams is two messages.
//!
//! One stream that is busy, or whose messages are waiting, must not starve the others.

mod common;

use std::time::Instant;

use common::*;
use leasehold_core::{Fence, Outcome, StreamId};

/// Streams share one concurrency budget.
#[test]
fn streams_share_one_concurrency_budget() {
    let t0 = Instant::now();
    let mut e = engine_with_streams(&config().concurrency(2), 2, t0);
    let s1 = StreamId(1);
    assert_eq!(
        drain(&mut e),
        vec![
            fetch(1, ms(1000)),
            Seen::Fetch {
                stream: s1,
                max: 1,
                wait: ms(1000)
            }
        ]
    );
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1)]);
    let (ia, _) = one_run(&drain(&mut e));
    e.handle_fetched(t0 + ms(10), s1, vec![msg(2)]);
    let fx = drain(&mut e);
    assert_eq!(
        fx.len(),
        1,
        "both slots used, no fetch on either stream: {fx:?}"
    );
    assert_eq!(e.running(), 2);
    e.handle_outcome(t0 + ms(20), ia, Outcome::Done);
    let fx = drain(&mut e);
    assert_eq!(fetches(&fx).len(), 1, "one free slot, one fetch: {fx:?}");
    assert_eq!(fetches(&fx)[0].1, 1);
}

/// Fetches are spread round-robin over the streams.
#[test]
fn fetches_go_round_robin() {
    let t0 = Instant::now();
    let mut e = engine_with_streams(&config().concurrency(1), 3, t0);
    let mut order = Vec::new();
    let mut fx = drain(&mut e);
    for i in 0..6u64 {
        let [(stream, max, _)] = fetches(&fx)[..] else {
            panic!("{fx:?}")
        };
        assert_eq!(max, 1);
        order.push(stream.0);
        let at = t0 + ms(10 * i + 5);
        e.handle_fetched(at, stream, vec![msg(i)]);
        let (inv, _) = one_run(&drain(&mut e));
        e.handle_outcome(at, inv, Outcome::Done);
        fx = drain(&mut e);
    }
    assert_eq!(order, vec![0, 1, 2, 0, 1, 2]);
}

/// With more streams due than free slots, fetches do not block (a blocking one would hold the
/// slot while another stream has messages), and a stream whose non-blocking fetch found nothing
/// waits a poll interval from its send time: the others get their turns, and empty streams are
/// not fetched in a loop of non-blocking fetches.
#[test]
fn a_starved_stream_that_found_nothing_waits_a_poll_interval() {
    let t0 = Instant::now();
    let mut e = engine_with_streams(&config().concurrency(1), 2, t0);
    let s1 = StreamId(1);
    // Two streams due, one slot: stream 0 first, without blocking.
    assert_eq!(drain(&mut e), vec![fetch(1, ms(0))]);
    e.handle_fetched(t0 + ms(5), S0, vec![]);
    // Stream 0 pauses; stream 1, now the only one due, gets the slot and may block.
    assert_eq!(
        drain(&mut e),
        vec![Seen::Fetch {
            stream: s1,
            max: 1,
            wait: ms(1000)
        }]
    );
    e.handle_fetched(t0 + ms(10), s1, vec![]);
    assert_eq!(drain(&mut e), vec![]);
    assert_eq!(e.poll_timeout(), Some(t0 + ms(1000)));
    e.handle_timeout(t0 + ms(999));
    assert_eq!(drain(&mut e), vec![]);
    // Stream 0's pause is over (stream 1's comes 5 ms later): alone due, it may block.
    e.handle_timeout(t0 + ms(1000));
    assert_eq!(drain(&mut e), vec![fetch(1, ms(1000))]);
}

/// A `Pending` message on stream 0 does not block stream 1; equal ids on two streams are two
/// messages.
#[test]
fn pending_on_one_stream_does_not_block_another() {
    let t0 = Instant::now();
    let mut e = engine_with_streams(&config().concurrency(1), 2, t0);
    let s1 = StreamId(1);
    let fx = drain(&mut e);
    assert_eq!(fetches(&fx).len(), 1);
    assert_eq!(fetches(&fx)[0].0, S0);
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1)]);
    let (ia, a) = one_run(&drain(&mut e));
    e.handle_outcome(t0 + ms(100), ia, Outcome::Pending);
    let fx = drain(&mut e);
    assert_eq!(fetches(&fx).len(), 1, "{fx:?}");
    assert_eq!(fetches(&fx)[0].0, s1);
    e.handle_fetched(t0 + ms(110), s1, vec![delivery(1, 1, 9)]);
    let fx = drain(&mut e);
    let (_, b) = one_run(&fx);
    assert_ne!(a, b);
    assert_eq!(e.lease(b).unwrap().stream(), s1);
    assert_eq!(
        e.lease(a).unwrap().fence(),
        Fence(1),
        "not adopted across streams"
    );
    assert_eq!(e.stats().redelivered, 0);
    assert_eq!(e.held(), 2);
}
