//! Fetch pacing: when the next `Fetch` goes out, and whether the backend may block on it.
//!
//! An empty fetch is followed one `poll_interval` after it was sent, unless it waited out all it
//! was allowed to (a non-blocking one included): then at once, allowed to block; a short one at
//! once, allowed to block; a full one at once, without waiting. Failed fetches back off exponentially up to
//! `fetch_backoff_max`, and a success resets that. An idle worker thus does not spin on the
//! backend, a busy one does not idle, and a failing backend is not hammered.

mod common;

use std::time::{Duration, Instant};

use common::*;
use leasehold_core::{Config, Effect, Outcome, SettleResult};

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

/// A fetch asked not to block (the one before was full) that finds nothing has waited out all it
/// was allowed to: the next fetch goes at once and may block for new entries, instead of the
/// stream pausing a poll interval. At concurrency 1 without prefetch every message is such a
/// full fetch of one, so a pause here would idle the worker up to a poll interval per burst.
/// A blocking fetch the backend answered early, empty, still paces the stream.
#[test]
fn an_empty_answer_to_a_non_blocking_fetch_lets_the_next_block_at_once() {
    let t0 = Instant::now();
    let mut e = engine(&config().concurrency(1), t0);
    assert_eq!(drain(&mut e), vec![fetch(1, ms(1000))]);
    e.handle_fetched(t0 + ms(10), S0, vec![msg(1)]);
    let (inv, a) = one_run(&drain(&mut e));
    e.handle_outcome(t0 + ms(20), inv, Outcome::Done);
    assert_eq!(
        drain(&mut e),
        vec![fetch(1, Duration::ZERO), Seen::Ack { leases: vec![a] }]
    );
    e.handle_acked(t0 + ms(20), [(a, SettleResult::Ok)]);
    assert_eq!(drain(&mut e), vec![]);
    // Drained: the empty answer comes back within the same instant it was sent.
    e.handle_fetched(t0 + ms(20), S0, vec![]);
    assert_eq!(drain(&mut e), vec![fetch(1, ms(1000))]);
    assert_no_busy_loop(&e, t0 + ms(20));
    // That one may block; answered before its wait was over, empty, it paces the stream to a
    // poll interval after it was sent.
    e.handle_fetched(t0 + ms(30), S0, vec![]);
    assert_eq!(drain(&mut e), vec![]);
    assert_eq!(e.poll_timeout(), Some(t0 + ms(1020)));
    e.handle_timeout(t0 + ms(1020));
    assert_eq!(drain(&mut e), vec![fetch(1, ms(1000))]);
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

/// A fetch's deliveries are leased from its send time, so the backend may block no longer than
/// the lease leaves room for: at most `heartbeat_interval`, even when `poll_interval` is longer.
/// With a claim timeout of 1 s (lease valid 900 ms, heartbeat 333 ms) and a poll interval of
/// 1 s, a fetch allowed to block 1 s and answered at its end would bring a delivery already
/// expired: handed back unrun, delivered again after a reclaim. Capped, the backend's latest
/// honest answer runs it, and its first renew goes out with it.
#[test]
fn a_fetch_blocks_no_longer_than_its_deliveries_lease_allows() {
    let t0 = Instant::now();
    let config = Config::default()
        .claim_timeout(secs(1))
        .poll_interval(secs(1))
        .prefetch(0);
    let settings = config.validate().unwrap();
    let heartbeat = settings.heartbeat_interval;
    assert_eq!(settings.max_fetch_wait(), heartbeat);
    let mut e = engine(&config, t0);
    let [(_, 1, wait)] = fetches(&drain(&mut e))[..] else {
        panic!("one fetch for one slot");
    };
    // The backend blocked the whole wait and took an entry at its very end.
    e.handle_fetched(t0 + wait, S0, vec![msg(1)]);
    let fx = drain_all(&mut e);
    assert!(
        !fx.iter().any(|f| matches!(f, Effect::Lost { .. })),
        "a delivery taken within the fetch's wait expired on arrival: {fx:?}"
    );
    let Some(Effect::Run(invocation)) = fx.iter().find(|f| matches!(f, Effect::Run(_))) else {
        panic!("the delivery runs: {fx:?}");
    };
    assert_eq!(invocation.valid_until, t0 + settings.lease_ttl());
    assert!(
        wait <= heartbeat && t0 + wait < invocation.valid_until,
        "the wait ({wait:?}) must fit inside the lease, within a heartbeat ({heartbeat:?})"
    );
    // Its heartbeat is due as it arrives: the renew goes out with the invocation.
    assert!(
        fx.iter().any(|f| matches!(f, Effect::Renew { .. })),
        "{fx:?}"
    );
    // The last fetch was full: the next asks without blocking; once it came back empty, the
    // next goes at once and may block again, capped again.
    let freed = t0 + wait + ms(10);
    e.handle_outcome(freed, invocation.id, Outcome::Done);
    assert_eq!(fetches(&drain(&mut e)), vec![(S0, 1, Duration::ZERO)]);
    e.handle_fetched(freed + ms(1), S0, vec![]);
    assert_eq!(fetches(&drain(&mut e)), vec![(S0, 1, heartbeat)]);
}
