//! Fetch pacing: when the next `Fetch` goes out, and whether the backend may block on it.
//!
//! An empty fetch is followed one `poll_interval` after it was sent; a short one at once, allowed
//! to block; a full one at once, without waiting. Failed fetches back off exponentially up to
//! `fetch_backoff_max`, and a success resets that. An idle worker thus does not spin on the
//! backend, a busy one does not idle, and a failing backend is not hammered.

mod common;

use std::time::{Duration, Instant};

use common::*;
use leasehold_core::Outcome;

/// An empty fetch → the next `Fetch` not before its send time + `poll_interval` (`poll_timeout()`
/// names it); an empty answer that took that long already → fetch at once.
#[test]
fn empty_fetch_waits_poll_interval_from_its_send_time() {
    let t0 = Instant::now();
    let mut e = engine(&config().concurrency(1), t0);
    assert_eq!(drain(&mut e), vec![fetch(1, ms(1000))]);
    e.handle_fetched(t0 + ms(300), S0, vec![]);
    assert_eq!(drain(&mut e), vec![]);
    assert_eq!(e.poll_timeout(), Some(t0 + ms(1000)));
    e.handle_timeout(t0 + ms(999));
    assert_eq!(drain(&mut e), vec![]);
    e.handle_timeout(t0 + ms(1000));
    assert_eq!(drain(&mut e), vec![fetch(1, ms(1000))]);
    // This one blocked the whole poll interval in the backend: fetch again at once.
    e.handle_fetched(t0 + ms(2000), S0, vec![]);
    assert_eq!(drain(&mut e), vec![fetch(1, ms(1000))]);
}

/// A short fetch (non-empty, fewer than `max`) → next fetch at once with `wait = poll_interval`; a
/// full one → next fetch at once (when a slot is free) with `wait = 0`.
#[test]
fn short_fetch_refetches_waiting_full_fetch_without_waiting() {
    let t0 = Instant::now();
    let mut e = engine(&config().concurrency(3), t0);
    assert_eq!(drain(&mut e), vec![fetch(3, ms(1000))]);
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1)]);
    let fx = drain(&mut e);
    let (_, a) = one_run(&fx);
    assert_eq!(
        fx,
        vec![
            Seen::Run {
                invocation: one_run(&fx).0,
                lease: a
            },
            fetch(2, ms(1000))
        ]
    );
    // Full: 2 of 2. No slot left, so nothing now...
    e.handle_fetched(t0 + ms(20), S0, vec![msg(2), msg(3)]);
    let fx = drain(&mut e);
    assert_eq!(runs(&fx).len(), 2);
    assert_eq!(fx.len(), 2, "{fx:?}");
    let (inv_b, _) = runs(&fx)[0];
    // ...and as soon as one frees, a fetch without waiting.
    e.handle_outcome(t0 + ms(30), inv_b, Outcome::Done);
    let fx = drain(&mut e);
    assert_eq!(fetches(&fx), vec![(S0, 1, Duration::ZERO)]);
}

/// Failed fetches back off `poll_interval × 2^(n-1)` per consecutive failure, capped at
/// `fetch_backoff_max`, reset after a success.
#[test]
fn failed_fetches_back_off_exponentially_capped_and_reset() {
    let t0 = Instant::now();
    let mut e = engine(&config().concurrency(1).fetch_backoff_max(secs(5)), t0);
    assert_eq!(drain(&mut e), vec![fetch(1, ms(1000))]);
    let mut now = t0;
    for backoff in [1000, 2000, 4000, 5000, 5000] {
        now += ms(10);
        e.handle_fetch_failed(now, S0);
        assert_eq!(drain(&mut e), vec![]);
        let due = now + ms(backoff);
        assert_eq!(e.poll_timeout(), Some(due), "backoff {backoff} ms");
        e.handle_timeout(due - ms(1));
        assert_eq!(drain(&mut e), vec![]);
        e.handle_timeout(due);
        assert_eq!(drain(&mut e), vec![fetch(1, ms(1000))]);
        now = due;
    }
    // A success (empty) resets the count: the next failure backs off one poll interval again.
    e.handle_fetched(now + ms(10), S0, vec![]);
    assert_eq!(drain(&mut e), vec![]);
    now += ms(1000);
    e.handle_timeout(now);
    assert_eq!(drain(&mut e), vec![fetch(1, ms(1000))]);
    e.handle_fetch_failed(now + ms(10), S0);
    assert_eq!(e.poll_timeout(), Some(now + ms(1010)));
}
