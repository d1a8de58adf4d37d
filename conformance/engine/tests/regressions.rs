//! Engine defects the checker found, each minimized into a named test. They must keep passing.

use std::time::{Duration, Instant};

use leasehold_core::{Config, Effect, Fence, Fetched, LeaseEngine, LeaseId, MessageId, StreamId};
use leasehold_engine_check::{check, run, Finish, Item, Jump, Scenario, SettleAnswer, Setup, Step};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn fetched(id: &str) -> Fetched<()> {
    Fetched::new(MessageId::from(id), (), 1, Fence(1))
}

fn drain(engine: &mut LeaseEngine<()>) -> Vec<Effect<()>> {
    std::iter::from_fn(|| engine.poll_effect()).collect()
}

fn released(effects: &[Effect<()>]) -> Vec<LeaseId> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Release { lease, .. } => Some(*lease),
            _ => None,
        })
        .collect()
}

/// A fetch answer nobody asked for (the late result of a fetch the driver gave up on) arriving
/// with a `now` older than the engine's clock opened an epoch dated before the newer ones. Expiry
/// scans epochs in send order and stops at the first one sent after the cutoff, and
/// `poll_timeout` looks at the oldest *live* epoch only, so the lease dated in the past outlived
/// its `valid_until`: no timer woke the driver for it, and it was still held after that instant
/// (invariant 5). Cause: `handle_fetched` calls `self.epochs.open(now)` with the input's `now`
/// instead of the engine clock `self.now`.
#[test]
fn unsolicited_delivery_with_an_older_now_expires_on_time() {
    let config = Config::default()
        .claim_timeout(ms(100)) // heartbeat 33 ms, margin 10 ms, TTL 90 ms
        .poll_interval(ms(5))
        .max_leases(2);
    let t0 = Instant::now();
    let mut engine = LeaseEngine::<()>::new(&config, t0).unwrap();
    drain(&mut engine); // Fetch { max 1 } sent at t0
                        // Empty answer at t0 + 50: the next fetch goes out at once, dated t0 + 50; it delivers "x".
    engine.handle_fetched(t0 + ms(50), StreamId(0), vec![]);
    drain(&mut engine);
    engine.handle_fetched(t0 + ms(50), StreamId(0), vec![fetched("x")]);
    drain(&mut engine); // Run x
                        // An unsolicited delivery, reported with an older `now`: released at once, held meanwhile.
    engine.handle_fetched(t0 + ms(20), StreamId(0), vec![fetched("y")]);
    let y = released(&drain(&mut engine))[0];
    let deadline = engine
        .valid_until(y)
        .expect("held while its release is in flight");

    // A driver: fire every timer up to y's expiry.
    while let Some(t) = engine.poll_timeout().filter(|t| *t <= deadline) {
        engine.handle_timeout(t);
        drain(&mut engine);
    }
    assert!(
        engine.valid_until(y).is_none() || engine.poll_timeout().is_some_and(|t| t <= deadline),
        "no timer at y's expiry {:?}: poll_timeout {:?}",
        deadline - t0,
        engine.poll_timeout().map(|t| t - t0)
    );
    engine.handle_timeout(deadline);
    drain(&mut engine);
    assert_eq!(
        engine.valid_until(y),
        None,
        "y is still held at its own valid_until"
    );
}

/// The same defect as the harness sees it: the unsolicited delivery must be dated at the
/// engine's clock, like every other confirmation, not at the input's older `now`.
#[test]
fn unsolicited_answer_dated_at_the_engine_clock() {
    let scenario = Scenario {
        setup: Setup {
            concurrency: 1,
            max_leases: 2,
            streams: 1,
            claim_ms: 100,
            ..Setup::default()
        },
        steps: vec![
            Step::Wait(Jump::Long(64)), // +50 ms, the first fetch still outstanding
            Step::Fetched {
                pick: 0,
                items: vec![],
            },
            Step::Fetched {
                pick: 0,
                items: vec![Item::Fresh { count: 0 }],
            },
            Step::Skew { back_ms: 30 },
            Step::Unsolicited {
                stream: 0,
                count: 1,
            },
            Step::Wait(Jump::Long(255)),
        ],
    };
    if let Err(violation) = check(&scenario) {
        panic!("{violation}");
    }
}

/// Setup of the settle regressions: a 1 ms poll interval (the settle retry delay) and retry.
fn settle_setup() -> Setup {
    Setup {
        poll_ms: 1,
        ..Setup::default()
    }
}

/// A settle retry sent at the start of an input, then settled by that same input (a second,
/// stale answer to the earlier send arriving once the retry was due): the `Ack` queued for the
/// retry was still flushed at the end of the input, naming a lease the backend had just
/// reported lost, which the engine no longer knows (invariant 3: never ack a lease reported
/// lost; a driver cannot even look the lease up). Cause: `advance` re-sends due settles into
/// `self.acks` / `self.effects`, `settled` then removes the lease, and `finish` flushes the
/// queued ids without checking they are still settling.
#[test]
fn no_ack_for_a_lease_a_stale_answer_reported_lost_in_the_same_input() {
    let scenario = Scenario {
        setup: settle_setup(),
        steps: vec![
            Step::Fetched {
                pick: 0,
                items: vec![Item::Fresh { count: 0 }],
            },
            Step::Finish {
                pick: 0,
                outcome: Finish::Done,
            }, // Ack sent at +0
            Step::Wait(Jump::Tiny(3)), // clock +3 ms, nothing due
            Step::Skew { back_ms: 3 },
            Step::Acked {
                pick: 0,
                answers: vec![SettleAnswer::Failed],
            }, // reported at +0: retry due at +1 ms
            // At +3 ms: the retry goes out first, then a second answer to the first send.
            Step::SettleStale {
                pick: 0,
                answer: SettleAnswer::Lost,
            },
        ],
    };
    if let Err(violation) = check(&scenario) {
        panic!("{violation}");
    }
}

/// The same defect with a release: the re-sent `Release` is emitted for a lease the same input
/// removed (settled by a stale `Ok`), so the driver finds no lease behind the effect.
#[test]
fn no_release_for_a_lease_settled_in_the_same_input() {
    let scenario = Scenario {
        setup: settle_setup(),
        steps: vec![
            Step::Fetched {
                pick: 0,
                items: vec![Item::Fresh { count: 0 }, Item::Fresh { count: 0 }],
            }, // the second is overflow: Release sent at +0
            Step::Wait(Jump::Tiny(3)),
            Step::Skew { back_ms: 3 },
            Step::Released {
                pick: 0,
                answer: SettleAnswer::Failed,
            },
            Step::SettleStale {
                pick: 0,
                answer: SettleAnswer::Ok,
            },
        ],
    };
    if let Err(violation) = check(&scenario) {
        panic!("{violation}");
    }
}

/// A release answered `Lost` for a stale fence (the message was redelivered meanwhile) is
/// re-sent with the new fence while the answer is applied, before the input's timers run; when
/// the answer arrives after the lease's local expiry (the driver was busy), the expiry then
/// drops the lease, but the re-sent `Release` stays queued: a release for a lease already
/// expired, which the engine no longer knows (invariant 5). Cause: `settled` re-sends on a
/// stale `Lost` before `begin` expires leases, and queued `Release` / `DeadLetter` effects are
/// not withdrawn when their lease is dropped (acks are, in `flush_acks`).
#[test]
fn no_release_resent_for_a_lease_that_expired_before_the_answer() {
    let scenario = Scenario {
        setup: Setup {
            concurrency: 1,
            max_leases: 2,
            streams: 1,
            claim_ms: 20, // TTL 18 ms
            poll_ms: 1,
            ..Setup::default()
        },
        steps: vec![
            // "f1" runs; "f2" is overflow (Release sent), then delivered again: new fence.
            Step::Fetched {
                pick: 0,
                items: vec![
                    Item::Fresh { count: 0 },
                    Item::Fresh { count: 0 },
                    Item::Duplicate,
                ],
            },
            Step::Stall(Jump::Long(255)), // +40 ms with no timeout fired: both leases lapsed
            Step::Released {
                pick: 0,
                answer: SettleAnswer::Lost,
            },
        ],
    };
    if let Err(violation) = check(&scenario) {
        panic!("{violation}");
    }
}

/// A renew chunk still out when shutdown completed, answered with a fatal error afterwards,
/// made the engine emit `Halt` after `Drained` (invariant 6: nothing follows `Drained`; a driver
/// may be gone by then). Cause: `halt` pushed its effect whether or not the engine had drained.
#[test]
fn no_halt_after_drained() {
    let scenario = Scenario {
        setup: Setup {
            concurrency: 1,
            max_leases: 1,
            streams: 1,
            ..Setup::default()
        },
        steps: vec![
            Step::Fetched {
                pick: 0,
                items: vec![Item::Fresh { count: 0 }],
            },
            Step::Tick, // the heartbeat round
            Step::Finish {
                pick: 0,
                outcome: Finish::Done,
            },
            Step::Acked {
                pick: 0,
                answers: vec![],
            }, // room again: a fetch goes out
            Step::Shutdown { grace_ms: 10 },
            Step::Fetched {
                pick: 0,
                items: vec![],
            }, // Drained
            Step::RenewFailed {
                pick: 0,
                fatal: true,
            },
        ],
    };
    let effects = run(&scenario).unwrap_or_else(|v| panic!("{v}"));
    assert_eq!(effects.last(), Some(&Effect::Drained), "{effects:?}");
    if let Err(violation) = check(&scenario) {
        panic!("{violation}");
    }
}

/// A handler returned `Done`, the backend then failed the ack and answered no renew until the
/// lease expired locally, and came back: the engine used to drop the lease at its local expiry
/// (reporting it expired) and never ack it, so the finished work ran again after a reclaim.
/// Its ack is now kept as a late ack and confirmed when the backend answers (invariant 3);
/// the model predicts every step of it.
#[test]
fn a_done_outliving_its_lease_in_an_outage_is_acked_late() {
    let scenario = Scenario {
        setup: Setup {
            concurrency: 1,
            max_leases: 1,
            streams: 1,
            ..Setup::default()
        },
        steps: vec![
            Step::Fetched {
                pick: 0,
                items: vec![Item::Fresh { count: 0 }],
            },
            Step::Finish {
                pick: 0,
                outcome: Finish::Done,
            },
            Step::Acked {
                pick: 0,
                answers: vec![SettleAnswer::CallFailed],
            },
            // Two claim timeouts with every renew unanswered: the lease expires locally, and
            // the late ack goes out again (its retry timer fires on the way).
            Step::Wait(Jump::Long(255)),
            Step::Acked {
                pick: 0,
                answers: vec![SettleAnswer::Ok],
            },
            Step::Wait(Jump::Long(255)),
        ],
    };
    let effects = run(&scenario).unwrap_or_else(|v| panic!("{v}"));
    let count = |f: fn(&Effect<u64>) -> bool| effects.iter().filter(|e| f(e)).count();
    assert_eq!(count(|e| matches!(e, Effect::Run(_))), 1, "{effects:?}");
    assert_eq!(
        count(|e| matches!(e, Effect::Lost { .. })),
        0,
        "{effects:?}"
    );
    assert!(
        count(|e| matches!(e, Effect::Ack { .. })) >= 2,
        "{effects:?}"
    );
    if let Err(violation) = check(&scenario) {
        panic!("{violation}");
    }
}

/// Two `Done`s whose acks the backend had not confirmed expired in the same instant, with room
/// for one more late ack only. The engine let go of the leases in the order of its slab, where
/// a reused slot puts a later delivery first, and the model in the order of delivery: they kept
/// different ones. Both now let go of expired leases in the order of their latest delivery, so
/// the earlier delivery keeps its late ack. (Found by `proptest.rs`; the bytes decode into the
/// scenario: three streams, `max_leases` 2, 20 ms claim timeout, 54 steps.)
#[test]
fn leases_expiring_together_go_in_delivery_order() {
    let bytes: &[u8] = &[
        124, 101, 0, 0, 56, 8, 0, 77, 0, 11, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        192, 0, 74, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 90, 0, 0, 0, 0, 0, 0, 33, 0, 0, 0, 0, 0, 0,
        90, 0, 144, 0, 86, 0, 25, 90, 0, 25, 96, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 214, 0,
        0, 0, 0, 0, 0, 0, 69, 50, 47, 81, 0, 0, 0, 0, 0, 0, 0, 0, 192, 0, 0, 0, 128, 0, 0, 0, 0,
        64, 0, 0, 90, 0, 0, 0, 0, 0, 0, 0, 45, 0, 0, 0, 0, 0, 0, 0, 0, 0, 171, 95, 50, 0, 182, 45,
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 50, 0, 70, 90, 0, 144,
        0, 88, 0, 0, 0, 45, 0, 0, 0, 0, 0, 25, 214, 0, 0, 144, 0, 189, 0, 0, 0, 0, 144, 0, 114, 0,
        0, 0, 0, 90, 0, 0, 0, 0, 0, 0, 43, 99, 0, 0, 0, 0, 0, 50, 0, 6, 0, 0, 0, 128, 0, 0, 0, 0,
        0, 0, 0, 0, 0, 192, 0, 0, 0, 192, 0, 0, 0, 192, 0, 0, 0, 128, 0, 0, 0, 0, 0, 171, 180, 50,
        0, 152, 0, 0, 0, 64, 0, 0, 0, 0, 0, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 64, 0, 0, 0, 0, 0,
        128, 0, 90, 0, 144, 0, 216, 0, 99, 0, 0, 0, 0, 0, 99, 0, 0, 0, 0, 0, 214, 0, 0, 0, 0, 0, 0,
        86, 68, 0, 0, 0, 0, 171, 111, 50, 0, 190, 0, 0, 0, 0, 0, 50, 0, 193, 0, 0, 0, 192, 0, 0, 0,
        192, 0, 0, 0, 0, 0, 0, 0, 0, 192, 0, 0, 0, 0, 86, 72, 99, 0, 0, 0, 0, 0, 99, 0, 0, 0, 0, 0,
        0, 0, 0, 0, 0, 0, 99, 0, 0, 0, 0, 0, 90, 0, 0, 0, 0, 0, 86, 65,
    ];
    if let Err(violation) = check(&Scenario::from_bytes(bytes)) {
        panic!("{violation}");
    }
}

/// A handler still running when its lease expired locally (no renew answered) returned `Done`
/// within the cancel grace after the expiry: its result used to be void, and the finished work
/// ran again a claim timeout later although nobody had taken the message over. Its ack is now
/// sent fenced, as a late ack, and confirmed (invariant 3); the model predicts every step.
#[test]
fn a_done_within_the_cancel_grace_after_expiry_is_acked_late() {
    let scenario = Scenario {
        setup: Setup {
            concurrency: 1,
            max_leases: 1,
            streams: 1,
            // TTL 40 ms, cancel grace 10 ms (half the margin).
            margin_ms: Some(20),
            ..Setup::default()
        },
        steps: vec![
            Step::Fetched {
                pick: 0,
                items: vec![Item::Fresh { count: 0 }],
            },
            // 42 ms, every renew unanswered: expired at 40 ms, the invocation cancelled.
            Step::Wait(Jump::Long(90)),
            Step::Finish {
                pick: 0,
                outcome: Finish::Done,
            },
            Step::Acked {
                pick: 0,
                answers: vec![SettleAnswer::Ok],
            },
        ],
    };
    let effects = run(&scenario).unwrap_or_else(|v| panic!("{v}"));
    let cancelled = effects
        .iter()
        .position(|e| {
            matches!(
                e,
                Effect::Cancel {
                    reason: leasehold_core::CancelReason::LeaseExpired,
                    ..
                }
            )
        })
        .unwrap_or_else(|| panic!("expired while running: {effects:?}"));
    assert!(
        effects[cancelled..]
            .iter()
            .any(|e| matches!(e, Effect::Ack { .. })),
        "{effects:?}"
    );
    if let Err(violation) = check(&scenario) {
        panic!("{violation}");
    }
}
