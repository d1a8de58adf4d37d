//! A ready lease (fetched ahead, or a re-invocation) starts as soon as an invocation slot is free,
//! even while a fetch is out that reserved room when the adaptive prefetch was larger: that
//! fetch may block for new entries a whole poll interval, and a slot promised to it would idle
//! all that time while a message in hand waits.

mod common;

use std::time::Instant;

use common::*;
use leasehold_core::{Config, Outcome};

#[test]
fn a_ready_lease_takes_a_free_slot_while_a_blocking_fetch_is_out() {
    let t0 = Instant::now();
    // The adaptive prefetch (the default), otherwise the common test configuration.
    let config = Config::default()
        .concurrency(2)
        .claim_timeout(secs(3))
        .heartbeat_interval(ms(1000))
        .expiry_margin(ms(300))
        .poll_interval(ms(1000));
    let mut e = engine(&config, t0);
    // Nothing observed yet: the free slots only.
    assert_eq!(drain(&mut e), vec![fetch(2, ms(1000))]);
    // A full answer after 2 ms (the fetch round trip), handlers of 1 ms.
    e.handle_fetched(t0 + ms(2), S0, vec![msg(1), msg(2)]);
    let first = runs(&drain(&mut e));
    assert_eq!(first.len(), 2);
    for (inv, _) in first {
        e.handle_outcome(t0 + ms(3), inv, Outcome::Done);
    }
    let fx = drain(&mut e);
    let [(_, ahead, _)] = fetches(&fx)[..] else {
        panic!("one fetch, ahead of the free slots: {fx:?}")
    };
    assert!(ahead > 4, "{fx:?}");
    // A short answer: two run (3, 4), two wait ready (5, 6).
    e.handle_fetched(t0 + ms(5), S0, vec![msg(3), msg(4), msg(5), msg(6)]);
    let started = runs(&drain(&mut e));
    assert_eq!(started.len(), 2);
    // 3 ends: 5 starts, and the stream, found short, is fetched again, waiting for entries.
    e.handle_outcome(t0 + ms(6), started[0].0, Outcome::Done);
    let fx = drain(&mut e);
    let five = runs(&fx);
    assert_eq!(five.len(), 1, "{fx:?}");
    let [(_, max, wait)] = fetches(&fx)[..] else {
        panic!("one blocking fetch: {fx:?}")
    };
    assert_eq!(wait, ms(1000));
    assert!(max > 1, "{fx:?}");
    // 5 ends while 4 still runs (it grows old, so the prefetch shrinks): 6 takes the free
    // slot now, not when the blocking fetch comes back up to a poll interval later.
    e.handle_outcome(t0 + ms(7), five[0].0, Outcome::Done);
    let fx = drain(&mut e);
    assert_eq!(runs(&fx).len(), 1, "the ready message starts: {fx:?}");
    assert_eq!(e.running(), 2);
}
