//! Engine configuration: every knob with its default, validated once at construction.

use std::time::Duration;

/// Longest duration any knob may take. Bounding durations keeps `Instant + Duration` from
/// overflowing, so a wild configuration is an error here rather than a panic hours later.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

/// Largest value of any count knob (`concurrency`, `prefetch`, `max_leases`, the batch sizes):
/// 16 Mi, far beyond what one worker can hold, small enough that sums of knobs never overflow.
pub const MAX_COUNT: usize = 1 << 24;

/// The ceiling of the adaptive prefetch, in fetch batches: room for a batch in flight, one
/// arrived and being started, and as many again for handlers that speed up.
pub const ADAPTIVE_PREFETCH_BATCHES: usize = 4;

/// The claim timeout when neither the configuration nor the backend says otherwise.
pub const DEFAULT_CLAIM_TIMEOUT: Duration = Duration::from_secs(60);

/// The shortest claim timeout a worker can keep its leases under. Within one claim timeout a
/// worker waits a heartbeat, sends a renew and gets its answer over the network, and still has
/// the expiry margin left, in which a cancelled handler gets its cancel grace; drivers' timers
/// tick in milliseconds (and Redis counts idle time in them), rounding every sleep up. At 20 ms
/// the defaults give a 6.7 ms heartbeat, about 11 ms for a renew's round trip, a 2 ms margin
/// and a 1 ms grace: one tick each, so a grace rounded up still ends within the margin.
/// Shorter, a single late timer lets a lease lapse before it is renewed, or a cancelled
/// handler run on while a peer takes its message over: messages run again and again.
pub const MIN_CLAIM_TIMEOUT: Duration = Duration::from_millis(20);

/// Exponential backoff applied after a failed attempt.
///
/// The delay after the `n`-th delivery failed is `initial × multiplier^(n-1)`, capped at `max`,
/// then shortened by a random fraction of at most `jitter` (drawn from the engine's seeded
/// generator, so the same inputs always give the same delays).
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Delay after the first failed delivery.
    pub initial: Duration,
    /// Growth factor per further failed delivery (≥ 1).
    pub multiplier: f64,
    /// Upper bound of the delay before jitter.
    pub max: Duration,
    /// Fraction (0..=1) by which a delay may be randomly shortened, to spread retries of a burst.
    pub jitter: f64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            initial: Duration::from_secs(1),
            multiplier: 2.0,
            max: Duration::from_secs(300),
            jitter: 0.2,
        }
    }
}

/// Engine configuration. Build it with the setters, then hand it to
/// [`LeaseEngine::new`](crate::LeaseEngine::new), which validates it.
///
/// ```
/// use std::time::Duration;
/// use leasehold_core::Config;
///
/// let config = Config::default()
///     .concurrency(8)
///     .claim_timeout(Duration::from_secs(30)); // heartbeat follows: 10 s
/// assert_eq!(config.validate().unwrap().heartbeat_interval, Duration::from_secs(10));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    concurrency: usize,
    prefetch: Option<usize>,
    fetch_batch_size: usize,
    max_leases: Option<usize>,
    claim_timeout: Option<Duration>,
    heartbeat_interval: Option<Duration>,
    expiry_margin: Option<Duration>,
    poll_interval: Duration,
    repoll_interval: Option<Duration>,
    repoll_spread: f64,
    max_processing_time: Duration,
    retry: RetryPolicy,
    max_deliveries: u32,
    shutdown_grace: Duration,
    cancel_grace: Option<Duration>,
    renew_batch_size: usize,
    fetch_backoff_max: Duration,
    seed: u64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            concurrency: 1,
            prefetch: None,
            fetch_batch_size: 500,
            max_leases: None,
            claim_timeout: None,
            heartbeat_interval: None,
            expiry_margin: None,
            poll_interval: Duration::from_secs(1),
            repoll_interval: None,
            repoll_spread: 0.0,
            max_processing_time: Duration::from_secs(15 * 60),
            retry: RetryPolicy::default(),
            max_deliveries: 10,
            shutdown_grace: Duration::from_secs(30),
            cancel_grace: None,
            renew_batch_size: 1000,
            fetch_backoff_max: Duration::from_secs(30),
            seed: 0x1ea5_e401d,
        }
    }
}

macro_rules! setters {
    ($($(#[$doc:meta])* $name:ident: $ty:ty => $field:ident = $wrap:expr;)*) => {
        $(
            $(#[$doc])*
            #[must_use]
            pub fn $name(mut self, value: $ty) -> Self {
                self.$field = $wrap(value);
                self
            }
        )*
    };
}

impl Config {
    setters! {
        /// Max handler invocations running at once (default 1).
        concurrency: usize => concurrency = std::convert::identity;
        /// Messages fetched ahead of free invocation slots, fixed. They are held (leased and
        /// heartbeated) and start the moment a slot frees, so handling never waits for a fetch
        /// round trip; the next fetch can go out while every slot is busy. They count against
        /// `max_leases`, which grows to fit them unless it is set. 0 holds nothing ahead.
        ///
        /// Unset (the default), the prefetch **adapts** to what the engine observes: by
        /// Little's law, enough to keep every slot busy through one fetch round trip, four
        /// times over: `4 × concurrency × fetch round trip / handler time` (both smoothed over recent
        /// fetches and invocations, the handler time never below the age of the oldest running
        /// invocation), at most [`Settings::prefetch`] (`4 × fetch_batch_size`, within
        /// `max_leases - concurrency`). A fetch asks for it only if an invocation ended since
        /// the previous fetch was sent, so an idle worker, or one that has just started a batch,
        /// takes no more than its free slots on an estimate that may be stale. Nothing is held
        /// ahead before a handler has finished and a fetch was answered, nor while handlers are
        /// long against the round trip: a prefetched message would wait in this worker while
        /// an idle replica could run it.
        prefetch: usize => prefetch = Some;
        /// Largest number of messages one fetch asks for (default 500, like Kafka's
        /// `max.poll.records`). Room beyond it is fetched by the next fetch, which goes out as
        /// soon as this one is answered, while its messages are being handled: with `prefetch`
        /// well above it, fetching and handling overlap. Also bounds one reply's size.
        fetch_batch_size: usize => fetch_batch_size = std::convert::identity;
        /// Max leases held at once: running, waiting for a re-poll, prefetched, or being
        /// settled (default: 1000, or `concurrency + prefetch` when that is more, the adaptive
        /// prefetch counting with its ceiling). Set below `concurrency + prefetch` (a set
        /// prefetch), it is an error rather than a silent cap on the prefetch; set with the
        /// prefetch unset, it bounds the adaptive prefetch to `max_leases - concurrency`.
        max_leases: usize => max_leases = Some;
        /// A lease not renewed for this long may be taken by another replica. Usually left
        /// unset: a worker then takes it from its backend, which must know it anyway (it decides
        /// when a peer may take a message over); set here it must equal the backend's. Without
        /// either, 60 s. At least [`MIN_CLAIM_TIMEOUT`] (20 ms): a renew must fit in it, with
        /// its network round trip and a margin, on timers that tick in milliseconds.
        claim_timeout: Duration => claim_timeout = Some;
        /// Cadence of the batched renew (default `claim_timeout / 3`; at most `claim_timeout / 2`).
        heartbeat_interval: Duration => heartbeat_interval = Some;
        /// Safety margin: a lease is considered lost locally once `claim_timeout - margin` has
        /// passed since the send time of its last successful renew (default `claim_timeout / 10`).
        expiry_margin: Duration => expiry_margin = Some;
        /// How long an empty fetch waits before the next; a backend may block that long, but
        /// never longer than `heartbeat_interval`, so a delivery taken at the end of the wait
        /// still has most of its lease (default 1 s).
        poll_interval: Duration => poll_interval = std::convert::identity;
        /// Delay before re-invoking a `Pending` message (default: `poll_interval`).
        repoll_interval: Duration => repoll_interval = Some;
        /// Fraction (0..=1) of `repoll_interval` by which a delivery's *first* re-poll may be
        /// brought forward, drawn from the seeded generator, so a burst of `Pending` messages is
        /// re-polled spread over the interval; later re-polls keep the exact cadence (default 0).
        repoll_spread: f64 => repoll_spread = std::convert::identity;
        /// Bound on one handler invocation; exceeded → cancelled, a failed attempt (default 15 min).
        max_processing_time: Duration => max_processing_time = std::convert::identity;
        /// Backoff after a failed attempt.
        retry: RetryPolicy => retry = std::convert::identity;
        /// Deliveries after which a failing message is dead-lettered (default 10).
        max_deliveries: u32 => max_deliveries = std::convert::identity;
        /// How long shutdown waits for running invocations (default 30 s).
        shutdown_grace: Duration => shutdown_grace = std::convert::identity;
        /// How long a cancelled invocation may run on before the driver drops it (default:
        /// 1 s, or half the `expiry_margin` when that is less). A lease that expired locally may
        /// lapse on the backend `expiry_margin` later, so the grace must end before that:
        /// longer is an error, since a peer could then run the message while it still runs here.
        cancel_grace: Duration => cancel_grace = Some;
        /// Largest number of leases in one `Renew` effect; bigger heartbeats are chunked (default 1000).
        renew_batch_size: usize => renew_batch_size = std::convert::identity;
        /// Cap of the backoff after failed fetches (default 30 s).
        fetch_backoff_max: Duration => fetch_backoff_max = std::convert::identity;
        /// Seed of the generator behind retry jitter: same seed and inputs, same outputs.
        seed: u64 => seed = std::convert::identity;
    }

    /// The claim timeout if one was set (a worker otherwise takes its backend's).
    pub fn configured_claim_timeout(&self) -> Option<Duration> {
        self.claim_timeout
    }

    /// Checks every knob and resolves the derived defaults.
    pub fn validate(&self) -> Result<Settings, ConfigError> {
        use ConfigError as E;
        if self.concurrency == 0 {
            return Err(E::ZeroConcurrency);
        }
        for (knob, value) in [
            ("concurrency", self.concurrency),
            ("prefetch", self.prefetch.unwrap_or(0)),
            ("max_leases", self.max_leases.unwrap_or(0)),
            ("fetch_batch_size", self.fetch_batch_size),
            ("renew_batch_size", self.renew_batch_size),
        ] {
            if value > MAX_COUNT {
                return Err(E::CountTooLarge { knob, value });
            }
        }
        // The prefetch, or the ceiling of the adaptive one (within what `max_leases` leaves).
        let prefetch = self
            .prefetch
            .unwrap_or(ADAPTIVE_PREFETCH_BATCHES * self.fetch_batch_size);
        let wanted = self.concurrency + prefetch;
        let (max_leases, prefetch) = match self.max_leases {
            None => (wanted.max(1000), prefetch),
            Some(max_leases) if max_leases < self.concurrency => {
                return Err(E::MaxLeasesBelowConcurrency {
                    max_leases,
                    concurrency: self.concurrency,
                })
            }
            Some(max_leases) if max_leases < wanted && self.prefetch.is_some() => {
                return Err(E::PrefetchBeyondMaxLeases {
                    max_leases,
                    concurrency: self.concurrency,
                    prefetch,
                })
            }
            Some(max_leases) => (max_leases, prefetch.min(max_leases - self.concurrency)),
        };
        if self.renew_batch_size == 0 {
            return Err(E::ZeroRenewBatch);
        }
        if self.fetch_batch_size == 0 {
            return Err(E::ZeroFetchBatch);
        }
        if self.max_deliveries == 0 {
            return Err(E::ZeroMaxDeliveries);
        }
        let claim_timeout = self.claim_timeout.unwrap_or(DEFAULT_CLAIM_TIMEOUT);
        // Zero is refused below with the other zero durations.
        if !claim_timeout.is_zero() && claim_timeout < MIN_CLAIM_TIMEOUT {
            return Err(E::ClaimTimeoutTooShort {
                claim_timeout,
                minimum: MIN_CLAIM_TIMEOUT,
            });
        }
        let heartbeat_interval = self.heartbeat_interval.unwrap_or(claim_timeout / 3);
        let expiry_margin = self.expiry_margin.unwrap_or(claim_timeout / 10);
        let repoll_interval = self.repoll_interval.unwrap_or(self.poll_interval);
        for (knob, value) in [
            ("claim_timeout", claim_timeout),
            ("heartbeat_interval", heartbeat_interval),
            ("poll_interval", self.poll_interval),
            ("repoll_interval", repoll_interval),
            ("max_processing_time", self.max_processing_time),
            ("retry.initial", self.retry.initial),
            ("retry.max", self.retry.max),
            ("fetch_backoff_max", self.fetch_backoff_max),
            ("expiry_margin", expiry_margin),
        ] {
            if value.is_zero() {
                return Err(E::ZeroDuration { knob });
            }
        }
        for (knob, value) in [
            ("claim_timeout", claim_timeout),
            ("heartbeat_interval", heartbeat_interval),
            ("expiry_margin", expiry_margin),
            ("poll_interval", self.poll_interval),
            ("repoll_interval", repoll_interval),
            ("max_processing_time", self.max_processing_time),
            ("retry.initial", self.retry.initial),
            ("retry.max", self.retry.max),
            ("shutdown_grace", self.shutdown_grace),
            ("fetch_backoff_max", self.fetch_backoff_max),
        ] {
            if value > MAX_DURATION {
                return Err(E::DurationTooLong { knob, value });
            }
        }
        if heartbeat_interval > claim_timeout / 2 {
            return Err(E::HeartbeatTooSlow {
                heartbeat: heartbeat_interval,
                claim_timeout,
            });
        }
        // A renew sent on schedule must land before the local expiry: heartbeat + margin < claim.
        if expiry_margin + heartbeat_interval >= claim_timeout {
            return Err(E::MarginTooWide {
                margin: expiry_margin,
                heartbeat: heartbeat_interval,
                claim_timeout,
            });
        }
        // A cancelled invocation must be gone before its lease can lapse on the backend.
        let cancel_grace = match self.cancel_grace {
            None => (expiry_margin / 2).min(Duration::from_secs(1)),
            Some(grace) if grace >= expiry_margin => {
                return Err(E::CancelGraceBeyondMargin {
                    grace,
                    margin: expiry_margin,
                })
            }
            Some(grace) => grace,
        };
        if !(self.retry.multiplier.is_finite() && self.retry.multiplier >= 1.0) {
            return Err(E::BadMultiplier(self.retry.multiplier));
        }
        if !(0.0..=1.0).contains(&self.retry.jitter) {
            return Err(E::BadJitter(self.retry.jitter));
        }
        if !(0.0..=1.0).contains(&self.repoll_spread) {
            return Err(E::BadRepollSpread(self.repoll_spread));
        }
        if self.retry.max < self.retry.initial {
            return Err(E::RetryMaxBelowInitial {
                initial: self.retry.initial,
                max: self.retry.max,
            });
        }
        Ok(Settings {
            concurrency: self.concurrency,
            prefetch,
            adaptive_prefetch: self.prefetch.is_none(),
            fetch_batch_size: self.fetch_batch_size,
            max_leases,
            claim_timeout,
            heartbeat_interval,
            expiry_margin,
            poll_interval: self.poll_interval,
            repoll_interval,
            repoll_spread: self.repoll_spread,
            max_processing_time: self.max_processing_time,
            retry: self.retry.clone(),
            max_deliveries: self.max_deliveries,
            shutdown_grace: self.shutdown_grace,
            cancel_grace,
            renew_batch_size: self.renew_batch_size,
            fetch_backoff_max: self.fetch_backoff_max.max(self.poll_interval),
            seed: self.seed,
        })
    }
}

/// A validated configuration with every derived default resolved.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Settings {
    /// See [`Config::concurrency`].
    pub concurrency: usize,
    /// The prefetch set with [`Config::prefetch`]; unset, the ceiling of the adaptive one:
    /// `4 × fetch_batch_size`, at most `max_leases - concurrency`.
    pub prefetch: usize,
    /// Whether the prefetch adapts (it was not set): see [`Config::prefetch`].
    pub adaptive_prefetch: bool,
    /// See [`Config::fetch_batch_size`].
    pub fetch_batch_size: usize,
    /// See [`Config::max_leases`].
    pub max_leases: usize,
    /// See [`Config::claim_timeout`].
    pub claim_timeout: Duration,
    /// See [`Config::heartbeat_interval`].
    pub heartbeat_interval: Duration,
    /// See [`Config::expiry_margin`].
    pub expiry_margin: Duration,
    /// See [`Config::poll_interval`].
    pub poll_interval: Duration,
    /// See [`Config::repoll_interval`].
    pub repoll_interval: Duration,
    /// See [`Config::repoll_spread`].
    pub repoll_spread: f64,
    /// See [`Config::max_processing_time`].
    pub max_processing_time: Duration,
    /// See [`Config::retry`].
    pub retry: RetryPolicy,
    /// See [`Config::max_deliveries`].
    pub max_deliveries: u32,
    /// See [`Config::shutdown_grace`].
    pub shutdown_grace: Duration,
    /// See [`Config::cancel_grace`].
    pub cancel_grace: Duration,
    /// See [`Config::renew_batch_size`].
    pub renew_batch_size: usize,
    /// See [`Config::fetch_backoff_max`] (never below `poll_interval`).
    pub fetch_backoff_max: Duration,
    /// See [`Config::seed`].
    pub seed: u64,
}

impl Settings {
    /// How long a lease stays valid locally after the send time of its last successful renew.
    pub fn lease_ttl(&self) -> Duration {
        self.claim_timeout - self.expiry_margin
    }

    /// The longest a `Fetch` lets the backend block: `poll_interval`, capped at
    /// `heartbeat_interval`. A fetch's deliveries are leased from its *send* time, so an entry
    /// taken at the end of a longer wait would arrive with its lease (`lease_ttl`) nearly or
    /// wholly spent, and be handed back unrun; capped, it arrives by the time its first renew
    /// is due, with the slack any renewed lease has (`lease_ttl - heartbeat_interval`).
    pub fn max_fetch_wait(&self) -> Duration {
        self.poll_interval.min(self.heartbeat_interval)
    }
}

/// What is wrong with a [`Config`], and how to fix it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// `concurrency` is 0.
    #[error("concurrency must be at least 1 (it bounds the handler invocations running at once)")]
    ZeroConcurrency,
    /// `max_leases` is smaller than `concurrency`.
    #[error(
        "max_leases ({max_leases}) must be at least concurrency ({concurrency}): every running \
         invocation holds a lease; raise max_leases or lower concurrency"
    )]
    MaxLeasesBelowConcurrency {
        /// The configured `max_leases`.
        max_leases: usize,
        /// The configured `concurrency`.
        concurrency: usize,
    },
    /// `max_leases` leaves no room for the prefetch.
    #[error(
        "max_leases ({max_leases}) must be at least concurrency + prefetch ({concurrency} + \
         {prefetch}): prefetched messages are held too; raise max_leases (or leave it unset, \
         and it grows to fit) or lower prefetch"
    )]
    PrefetchBeyondMaxLeases {
        /// The configured `max_leases`.
        max_leases: usize,
        /// The configured `concurrency`.
        concurrency: usize,
        /// The configured `prefetch`.
        prefetch: usize,
    },
    /// A count knob exceeds [`MAX_COUNT`].
    #[error("{knob} is {value}; counts are limited to {MAX_COUNT}")]
    CountTooLarge {
        /// The knob's name.
        knob: &'static str,
        /// The configured value.
        value: usize,
    },
    /// The cancel grace outlasts the expiry margin.
    #[error(
        "cancel_grace ({grace:?}) must be shorter than expiry_margin ({margin:?}): a cancelled \
         handler of an expired lease could still run when a peer takes the message over; \
         shorten the grace or widen the margin"
    )]
    CancelGraceBeyondMargin {
        /// The configured grace.
        grace: Duration,
        /// The resolved expiry margin.
        margin: Duration,
    },
    /// `renew_batch_size` is 0.
    #[error("renew_batch_size must be at least 1")]
    ZeroRenewBatch,
    /// `fetch_batch_size` is 0.
    #[error("fetch_batch_size must be at least 1 (a fetch asks for at most that many messages)")]
    ZeroFetchBatch,
    /// `max_deliveries` is 0.
    #[error("max_deliveries must be at least 1 (a message is delivered at least once)")]
    ZeroMaxDeliveries,
    /// A duration knob that must be positive is zero.
    #[error("{knob} must be greater than zero")]
    ZeroDuration {
        /// The knob's name.
        knob: &'static str,
    },
    /// A duration knob exceeds [`MAX_DURATION`].
    #[error("{knob} is {value:?}; durations are limited to one year")]
    DurationTooLong {
        /// The knob's name.
        knob: &'static str,
        /// The configured value.
        value: Duration,
    },
    /// The claim timeout is below [`MIN_CLAIM_TIMEOUT`]: too short to renew a lease in time.
    #[error(
        "claim_timeout ({claim_timeout:?}) is below the minimum of {minimum:?}: within one claim \
         timeout a worker waits a heartbeat (claim_timeout / 3 by default), sends a renew and \
         gets its answer over the network, and keeps an expiry margin (claim_timeout / 10) that \
         holds a cancelled handler's grace, on timers that tick in milliseconds; shorter, leases \
         lapse before they are renewed and messages run again and again; lengthen claim_timeout"
    )]
    ClaimTimeoutTooShort {
        /// The configured claim timeout.
        claim_timeout: Duration,
        /// [`MIN_CLAIM_TIMEOUT`].
        minimum: Duration,
    },
    /// The heartbeat is too slow to keep leases alive reliably.
    #[error(
        "heartbeat_interval ({heartbeat:?}) must be at most claim_timeout / 2 ({:?}) so a \
         missed renew can be retried before the lease lapses; shorten the heartbeat or \
         lengthen claim_timeout", *claim_timeout / 2
    )]
    HeartbeatTooSlow {
        /// The resolved heartbeat interval.
        heartbeat: Duration,
        /// The configured claim timeout.
        claim_timeout: Duration,
    },
    /// Heartbeat plus margin leave no room before the claim timeout.
    #[error(
        "expiry_margin ({margin:?}) + heartbeat_interval ({heartbeat:?}) must be less than \
         claim_timeout ({claim_timeout:?}), or leases would expire locally between two renews; \
         shrink the margin or the heartbeat"
    )]
    MarginTooWide {
        /// The resolved margin.
        margin: Duration,
        /// The resolved heartbeat interval.
        heartbeat: Duration,
        /// The configured claim timeout.
        claim_timeout: Duration,
    },
    /// The retry multiplier is below 1 or not finite.
    #[error("retry.multiplier must be a finite number ≥ 1, got {0}")]
    BadMultiplier(f64),
    /// The retry jitter is outside 0..=1.
    #[error("retry.jitter must be between 0 and 1, got {0}")]
    BadJitter(f64),
    /// The re-poll spread is outside 0..=1.
    #[error("repoll_spread must be between 0 and 1, got {0}")]
    BadRepollSpread(f64),
    /// The retry cap is below the first delay.
    #[error("retry.max ({max:?}) must be at least retry.initial ({initial:?})")]
    RetryMaxBelowInitial {
        /// The configured first delay.
        initial: Duration,
        /// The configured cap.
        max: Duration,
    },
    /// The engine was asked to serve no stream.
    #[error("an engine needs at least one stream to fetch from")]
    NoStreams,
}
