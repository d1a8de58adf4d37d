//! Configuration: the documented defaults, derived values, and a clear error (never a panic) for
//! every bad value.

use std::time::{Duration, Instant};

use leasehold_core::{
    Config, ConfigError, LeaseEngine, RetryPolicy, MAX_DURATION, MIN_CLAIM_TIMEOUT,
};

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// Asserts `config` is refused with `expected`, whose message names every word of `says`; the
/// engine constructors refuse it the same way.
fn refused(config: Config, expected: ConfigError, says: &[&str]) {
    let err = config.validate().expect_err("a bad config must be refused");
    assert_eq!(err, expected);
    let message = err.to_string();
    for word in says {
        assert!(
            message.contains(word),
            "message {message:?} should mention {word:?}"
        );
    }
    let now = Instant::now();
    assert_eq!(
        LeaseEngine::<()>::new(&config, now).err(),
        Some(expected.clone())
    );
    assert_eq!(
        LeaseEngine::<()>::with_streams(&config, 3, now).err(),
        Some(expected)
    );
}

/// The documented defaults: concurrency 1, an adaptive prefetch of at most 4 fetch batches of
/// 500, max_leases room for both (2001, at least 1000), claim 60 s, heartbeat 20 s
/// (claim / 3), poll 1 s, re-poll = poll, max processing 15 min, retry 1 s ×2 capped at 5 min
/// with jitter, max_deliveries 10, shutdown grace 30 s.
#[test]
fn defaults_are_the_documented_ones() {
    let s = Config::default().validate().expect("defaults are valid");
    assert_eq!(s.concurrency, 1);
    assert_eq!(s.fetch_batch_size, 500);
    assert!(s.adaptive_prefetch);
    assert_eq!(s.prefetch, 2000, "the adaptive prefetch's ceiling");
    assert_eq!(s.max_leases, 2001);
    assert_eq!(s.claim_timeout, secs(60));
    assert_eq!(s.heartbeat_interval, secs(20));
    assert_eq!(s.poll_interval, secs(1));
    assert_eq!(s.repoll_interval, secs(1));
    assert_eq!(s.max_processing_time, secs(15 * 60));
    assert_eq!(s.retry.initial, secs(1));
    assert_eq!(s.retry.multiplier, 2.0);
    assert_eq!(s.retry.max, secs(5 * 60));
    assert!(
        s.retry.jitter > 0.0 && s.retry.jitter <= 1.0,
        "jitter on by default"
    );
    assert_eq!(s.max_deliveries, 10);
    assert_eq!(s.shutdown_grace, secs(30));
    assert!(s.expiry_margin > Duration::ZERO && s.expiry_margin < s.claim_timeout);
    assert!(s.heartbeat_interval + s.expiry_margin < s.claim_timeout);
    assert_eq!(s.lease_ttl(), s.claim_timeout - s.expiry_margin);
    assert!(s.renew_batch_size >= 1);
    assert!(s.fetch_backoff_max >= s.poll_interval);
    assert!(LeaseEngine::<()>::new(&Config::default(), Instant::now()).is_ok());
}

/// The heartbeat is derived from `claim_timeout` (a third) when not set; an explicit one is kept;
/// the re-poll follows `poll_interval` when not set.
#[test]
fn derived_values_follow_their_knobs() {
    let s = Config::default()
        .claim_timeout(secs(30))
        .validate()
        .unwrap();
    assert_eq!(s.heartbeat_interval, secs(10));
    let s = Config::default()
        .claim_timeout(secs(30))
        .heartbeat_interval(secs(5))
        .validate()
        .unwrap();
    assert_eq!(s.heartbeat_interval, secs(5));
    let s = Config::default().poll_interval(secs(2)).validate().unwrap();
    assert_eq!(s.repoll_interval, secs(2));
    let s = Config::default()
        .poll_interval(secs(2))
        .repoll_interval(Duration::from_millis(300))
        .validate()
        .unwrap();
    assert_eq!(s.repoll_interval, Duration::from_millis(300));
}

/// `ConfigError::ZeroConcurrency`.
#[test]
fn zero_concurrency_is_refused() {
    refused(
        Config::default().concurrency(0),
        ConfigError::ZeroConcurrency,
        &["concurrency", "at least 1"],
    );
}

/// `ConfigError::MaxLeasesBelowConcurrency`.
#[test]
fn max_leases_below_concurrency_is_refused() {
    refused(
        Config::default().concurrency(8).max_leases(4),
        ConfigError::MaxLeasesBelowConcurrency {
            max_leases: 4,
            concurrency: 8,
        },
        &["max_leases", "concurrency", "4", "8", "raise max_leases"],
    );
    assert!(Config::default()
        .concurrency(8)
        .max_leases(8)
        .validate()
        .is_ok());
}

/// `ConfigError::ZeroRenewBatch`.
#[test]
fn zero_renew_batch_is_refused() {
    refused(
        Config::default().renew_batch_size(0),
        ConfigError::ZeroRenewBatch,
        &["renew_batch_size", "at least 1"],
    );
}

/// `ConfigError::ZeroFetchBatch`.
#[test]
fn zero_fetch_batch_is_refused() {
    refused(
        Config::default().fetch_batch_size(0),
        ConfigError::ZeroFetchBatch,
        &["fetch_batch_size", "at least 1"],
    );
}

/// `ConfigError::ZeroMaxDeliveries`.
#[test]
fn zero_max_deliveries_is_refused() {
    refused(
        Config::default().max_deliveries(0),
        ConfigError::ZeroMaxDeliveries,
        &["max_deliveries", "at least 1"],
    );
}

/// `ConfigError::ZeroDuration`, for every duration that must be positive.
#[test]
fn zero_durations_are_refused() {
    let zero = Duration::ZERO;
    let retry = RetryPolicy::default();
    let cases: Vec<(&str, Config)> = vec![
        ("claim_timeout", Config::default().claim_timeout(zero)),
        (
            "heartbeat_interval",
            Config::default().heartbeat_interval(zero),
        ),
        ("poll_interval", Config::default().poll_interval(zero)),
        ("repoll_interval", Config::default().repoll_interval(zero)),
        (
            "max_processing_time",
            Config::default().max_processing_time(zero),
        ),
        (
            "retry.initial",
            Config::default().retry(RetryPolicy {
                initial: zero,
                ..retry.clone()
            }),
        ),
        (
            "retry.max",
            Config::default().retry(RetryPolicy {
                max: zero,
                ..retry.clone()
            }),
        ),
        (
            "fetch_backoff_max",
            Config::default().fetch_backoff_max(zero),
        ),
    ];
    for (knob, config) in cases {
        refused(
            config,
            ConfigError::ZeroDuration { knob },
            &[knob, "greater than zero"],
        );
    }
}

/// `ConfigError::DurationTooLong`: durations are bounded, so `Instant + Duration` cannot overflow.
#[test]
fn overlong_durations_are_refused() {
    let long = MAX_DURATION + secs(1);
    refused(
        Config::default().claim_timeout(long),
        ConfigError::DurationTooLong {
            knob: "claim_timeout",
            value: long,
        },
        &["claim_timeout", "one year"],
    );
    refused(
        Config::default().shutdown_grace(long),
        ConfigError::DurationTooLong {
            knob: "shutdown_grace",
            value: long,
        },
        &["shutdown_grace", "one year"],
    );
    refused(
        Config::default().max_processing_time(long),
        ConfigError::DurationTooLong {
            knob: "max_processing_time",
            value: long,
        },
        &["max_processing_time"],
    );
    assert!(Config::default()
        .max_processing_time(MAX_DURATION)
        .validate()
        .is_ok());
}

/// `ConfigError::HeartbeatTooSlow`: heartbeat above claim_timeout / 2.
#[test]
fn heartbeat_slower_than_half_the_claim_timeout_is_refused() {
    refused(
        Config::default()
            .claim_timeout(secs(60))
            .heartbeat_interval(secs(31)),
        ConfigError::HeartbeatTooSlow {
            heartbeat: secs(31),
            claim_timeout: secs(60),
        },
        &["heartbeat_interval", "claim_timeout / 2", "30s", "shorten"],
    );
}

/// `ConfigError::MarginTooWide`: margin + heartbeat must stay below the claim timeout.
#[test]
fn margin_plus_heartbeat_reaching_claim_timeout_is_refused() {
    refused(
        Config::default()
            .claim_timeout(secs(60))
            .heartbeat_interval(secs(30))
            .expiry_margin(secs(30)),
        ConfigError::MarginTooWide {
            margin: secs(30),
            heartbeat: secs(30),
            claim_timeout: secs(60),
        },
        &[
            "expiry_margin",
            "heartbeat_interval",
            "claim_timeout",
            "shrink",
        ],
    );
}

/// `ConfigError::BadMultiplier`: below 1, NaN or infinite.
#[test]
fn bad_retry_multiplier_is_refused() {
    for multiplier in [0.5, -2.0, f64::INFINITY] {
        let config = Config::default().retry(RetryPolicy {
            multiplier,
            ..RetryPolicy::default()
        });
        refused(
            config,
            ConfigError::BadMultiplier(multiplier),
            &["retry.multiplier", "≥ 1"],
        );
    }
    // NaN != NaN, so match the variant.
    let config = Config::default().retry(RetryPolicy {
        multiplier: f64::NAN,
        ..RetryPolicy::default()
    });
    let err = config.validate().unwrap_err();
    assert!(
        matches!(err, ConfigError::BadMultiplier(m) if m.is_nan()),
        "{err:?}"
    );
    assert!(err.to_string().contains("retry.multiplier"));
    assert!(LeaseEngine::<()>::new(&config, Instant::now()).is_err());
}

/// `ConfigError::BadJitter`: outside 0..=1.
#[test]
fn bad_retry_jitter_is_refused() {
    for jitter in [-0.1, 1.5] {
        let config = Config::default().retry(RetryPolicy {
            jitter,
            ..RetryPolicy::default()
        });
        refused(
            config,
            ConfigError::BadJitter(jitter),
            &["retry.jitter", "between 0 and 1"],
        );
    }
    let config = Config::default().retry(RetryPolicy {
        jitter: f64::NAN,
        ..RetryPolicy::default()
    });
    assert!(matches!(config.validate(), Err(ConfigError::BadJitter(j)) if j.is_nan()));
    for jitter in [0.0, 1.0] {
        let config = Config::default().retry(RetryPolicy {
            jitter,
            ..RetryPolicy::default()
        });
        assert!(config.validate().is_ok(), "jitter {jitter} is allowed");
    }
}

/// `ConfigError::RetryMaxBelowInitial`.
#[test]
fn retry_cap_below_first_delay_is_refused() {
    refused(
        Config::default().retry(RetryPolicy {
            initial: secs(10),
            max: secs(5),
            ..RetryPolicy::default()
        }),
        ConfigError::RetryMaxBelowInitial {
            initial: secs(10),
            max: secs(5),
        },
        &["retry.max", "retry.initial", "at least"],
    );
}

/// `ConfigError::NoStreams`: `LeaseEngine::with_streams(.., 0, ..)` is an error, not a panic.
#[test]
fn an_engine_without_streams_is_refused() {
    let err = LeaseEngine::<()>::with_streams(&Config::default(), 0, Instant::now())
        .expect_err("zero streams must be refused");
    assert_eq!(err, ConfigError::NoStreams);
    assert!(err.to_string().contains("at least one stream"));
    assert!(LeaseEngine::<()>::with_streams(&Config::default(), 1, Instant::now()).is_ok());
}

/// `ConfigError::BadRepollSpread`: outside 0..=1 (or NaN).
#[test]
fn bad_repoll_spread_is_refused() {
    for spread in [-0.1, 1.5] {
        refused(
            Config::default().repoll_spread(spread),
            ConfigError::BadRepollSpread(spread),
            &["repoll_spread", "between 0 and 1"],
        );
    }
    assert!(matches!(
        Config::default().repoll_spread(f64::NAN).validate(),
        Err(ConfigError::BadRepollSpread(s)) if s.is_nan()
    ));
    assert_eq!(Config::default().validate().unwrap().repoll_spread, 0.0);
}

/// Prefetched messages are held too: `max_leases` grows to fit them when it is not set, so
/// `prefetch` is never capped silently.
#[test]
fn max_leases_grows_to_fit_the_prefetch_unless_set() {
    let s = Config::default()
        .concurrency(100)
        .prefetch(3000)
        .validate()
        .unwrap();
    assert_eq!((s.prefetch, s.max_leases), (3000, 3100));
    let s = Config::default()
        .concurrency(10)
        .prefetch(5)
        .validate()
        .unwrap();
    assert_eq!(s.max_leases, 1000, "the default when it is more");
    let s = Config::default()
        .concurrency(2000)
        .prefetch(0)
        .validate()
        .unwrap();
    assert_eq!(s.max_leases, 2000, "every running invocation holds a lease");
}

/// Unset, the prefetch adapts up to a ceiling of 4 fetch batches; `max_leases` grows to fit it
/// unless set, and a set `max_leases` bounds it instead (never an error: nothing was asked).
#[test]
fn the_adaptive_prefetch_is_bounded_by_batches_and_max_leases() {
    let s = Config::default().concurrency(100).validate().unwrap();
    assert!(s.adaptive_prefetch);
    assert_eq!((s.prefetch, s.max_leases), (2000, 2100));
    let s = Config::default()
        .concurrency(100)
        .fetch_batch_size(100)
        .validate()
        .unwrap();
    assert_eq!(
        (s.prefetch, s.max_leases),
        (400, 1000),
        "1000 when it is more"
    );
    let s = Config::default()
        .concurrency(100)
        .max_leases(1000)
        .validate()
        .unwrap();
    assert_eq!((s.prefetch, s.max_leases), (900, 1000));
    let s = Config::default()
        .concurrency(100)
        .max_leases(100)
        .validate()
        .unwrap();
    assert_eq!(s.prefetch, 0, "no room: nothing ahead");
    let s = Config::default()
        .concurrency(100)
        .prefetch(7)
        .validate()
        .unwrap();
    assert!(!s.adaptive_prefetch, "a set prefetch is fixed");
    assert_eq!((s.prefetch, s.max_leases), (7, 1000));
}

/// `ConfigError::PrefetchBeyondMaxLeases`: an explicit `max_leases` below concurrency + prefetch.
#[test]
fn prefetch_beyond_an_explicit_max_leases_is_refused() {
    refused(
        Config::default()
            .concurrency(100)
            .prefetch(3000)
            .max_leases(1000),
        ConfigError::PrefetchBeyondMaxLeases {
            max_leases: 1000,
            concurrency: 100,
            prefetch: 3000,
        },
        &["max_leases", "1000", "100 + 3000", "raise max_leases"],
    );
    assert!(Config::default()
        .concurrency(100)
        .prefetch(3000)
        .max_leases(3100)
        .validate()
        .is_ok());
}

/// `ConfigError::CountTooLarge`: absurd counts are refused, never accepted and overflowed later.
#[test]
fn counts_beyond_the_limit_are_refused() {
    use leasehold_core::MAX_COUNT;
    refused(
        Config::default().prefetch(usize::MAX),
        ConfigError::CountTooLarge {
            knob: "prefetch",
            value: usize::MAX,
        },
        &["prefetch", "limited"],
    );
    refused(
        Config::default().concurrency(MAX_COUNT + 1),
        ConfigError::CountTooLarge {
            knob: "concurrency",
            value: MAX_COUNT + 1,
        },
        &["concurrency"],
    );
    refused(
        Config::default().max_leases(MAX_COUNT + 1),
        ConfigError::CountTooLarge {
            knob: "max_leases",
            value: MAX_COUNT + 1,
        },
        &["max_leases"],
    );
    assert!(Config::default().prefetch(MAX_COUNT - 1).validate().is_ok());
}

/// `ConfigError::CancelGraceBeyondMargin`: a cancelled handler must be gone before its lease can
/// lapse on the backend, so the grace is shorter than the expiry margin; by default it is 1 s or
/// half the margin, whichever is less.
#[test]
fn cancel_grace_must_end_within_the_expiry_margin() {
    let s = Config::default().validate().unwrap();
    assert_eq!(s.cancel_grace, secs(1), "margin 6 s: the default 1 s");
    let s = Config::default()
        .claim_timeout(Duration::from_millis(30))
        .validate()
        .unwrap();
    assert_eq!(s.expiry_margin, Duration::from_millis(3));
    assert_eq!(
        s.cancel_grace,
        Duration::from_micros(1500),
        "half the margin"
    );
    refused(
        Config::default()
            .claim_timeout(Duration::from_millis(30))
            .cancel_grace(secs(1)),
        ConfigError::CancelGraceBeyondMargin {
            grace: secs(1),
            margin: Duration::from_millis(3),
        },
        &["cancel_grace", "expiry_margin", "shorter"],
    );
    assert!(Config::default()
        .claim_timeout(secs(10))
        .cancel_grace(Duration::from_millis(999))
        .validate()
        .is_ok());
}

/// The claim timeout is said once: unset, the config reports none (a worker takes its
/// backend's) and validates with the default.
#[test]
fn an_unset_claim_timeout_is_the_backends_or_the_default() {
    assert_eq!(Config::default().configured_claim_timeout(), None);
    assert_eq!(
        Config::default().validate().unwrap().claim_timeout,
        secs(60)
    );
    let config = Config::default().claim_timeout(secs(5));
    assert_eq!(config.configured_claim_timeout(), Some(secs(5)));
}

/// `ConfigError::ClaimTimeoutTooShort`: below `MIN_CLAIM_TIMEOUT` (20 ms) a worker cannot renew
/// a lease in time (a heartbeat, a network round trip and a margin holding the cancel grace, on
/// millisecond timers), so such a claim timeout (`demo --claim-timeout 1ms`) is refused, naming
/// the minimum and why, rather than accepted and left to lapse leases over and over. Zero stays
/// a zero duration.
#[test]
fn a_claim_timeout_too_short_to_renew_in_is_refused() {
    assert_eq!(MIN_CLAIM_TIMEOUT, Duration::from_millis(20));
    for short in [
        Duration::from_millis(1),
        Duration::from_nanos(5),
        Duration::from_millis(10),
        MIN_CLAIM_TIMEOUT - Duration::from_nanos(1),
    ] {
        refused(
            Config::default().claim_timeout(short),
            ConfigError::ClaimTimeoutTooShort {
                claim_timeout: short,
                minimum: MIN_CLAIM_TIMEOUT,
            },
            &["claim_timeout", "minimum of 20ms", "renew", "milliseconds"],
        );
    }
    // Also when the other timings are set by hand.
    refused(
        Config::default()
            .claim_timeout(Duration::from_millis(19))
            .heartbeat_interval(Duration::from_millis(5))
            .expiry_margin(Duration::from_millis(4)),
        ConfigError::ClaimTimeoutTooShort {
            claim_timeout: Duration::from_millis(19),
            minimum: MIN_CLAIM_TIMEOUT,
        },
        &["claim_timeout"],
    );
    refused(
        Config::default().claim_timeout(Duration::ZERO),
        ConfigError::ZeroDuration {
            knob: "claim_timeout",
        },
        &["claim_timeout"],
    );
    // At the minimum, the defaults leave one millisecond tick for the grace, and one more
    // before the margin ends.
    let s = Config::default()
        .claim_timeout(MIN_CLAIM_TIMEOUT)
        .validate()
        .expect("the minimum itself is valid");
    assert_eq!(s.expiry_margin, Duration::from_millis(2));
    assert_eq!(s.cancel_grace, Duration::from_millis(1));
    assert!(s.lease_ttl() - s.heartbeat_interval > Duration::from_millis(10));
}
