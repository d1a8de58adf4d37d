//! Who fetches from which shard of a sharded queue: the membership policy and a sans-IO
//! tracker of it.
//!
//! Every worker serving a sharded queue heartbeats its name into the queue's membership
//! ([`Members`]: a sorted set on Redis scored by the server's clock, a table
//! in memory), reads the live members back, and fetches from the shards that
//! [`Shards::assign`] gives it. It holds every shard's leases whatever it fetches from: a
//! shard that moves to another worker is handed over gracefully (the engine serves its leases
//! to the end, see [`LeaseEngine::handle_assignment`](crate::LeaseEngine::handle_assignment)).
//!
//! [`Membership`] decides when to heartbeat and what the answers mean; the driver does the
//! I/O and tells the engine. Like the engine, it never reads a clock.

use std::future::Future;
use std::time::{Duration, Instant};

use crate::backend::BackendResult;
use crate::config::MAX_DURATION;
use crate::shard::Shards;

/// The membership store of sharded queues: the I/O half of [`Membership`], implemented by the
/// backends (a handle of a sharded queue's backend is one).
///
/// Live is decided by the store's own clock (Redis: the server's `TIME`), so workers with
/// skewed clocks agree on who is live.
pub trait Members: Send + Sync + 'static {
    /// This worker's name in the membership: unique per live worker (on Redis, the consumer
    /// name, which must be unique anyway).
    fn member(&self) -> &str;

    /// The queue and shard this handle serves, when it knows (a Redis stream named like a
    /// shard, a memory queue's consumer): a worker checks it against the shard it is given
    /// for, so a list of backends in the wrong order is an error, not shards fetched twice and
    /// others never.
    fn shard(&self) -> Option<(&str, u16)> {
        None
    }

    /// Records this member as live in `queue` now, forgets members not heard of for `ttl`, and
    /// answers the live ones (this one included).
    fn heartbeat(
        &self,
        queue: &str,
        ttl: Duration,
    ) -> impl Future<Output = BackendResult<Vec<String>>> + Send;

    /// Removes this member from `queue` at once (a graceful leave: its shards move to the
    /// others at their next heartbeat, not a ttl later).
    fn leave(&self, queue: &str) -> impl Future<Output = BackendResult<()>> + Send;
}

/// How a worker of a sharded queue takes part in its membership. Validated against the claim
/// timeout by [`validate`](Self::validate).
///
/// ```
/// use std::time::Duration;
/// use leasehold_core::MembershipConfig;
///
/// let settings = MembershipConfig::default().validate(Duration::from_secs(60)).unwrap();
/// assert_eq!(settings.owners, 2);
/// assert_eq!(settings.member_ttl, Duration::from_secs(60)); // the claim timeout
/// assert_eq!(settings.refresh_interval, Duration::from_secs(20)); // a third of it
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MembershipConfig {
    owners: Option<usize>,
    member_ttl: Option<Duration>,
    refresh_interval: Option<Duration>,
}

impl MembershipConfig {
    /// How many workers fetch from each shard (default 2, when there are that many). With two,
    /// a worker that crashes leaves each of its shards a fetcher, which reclaims its lapsed
    /// leases as soon as the claim timeout passes, without waiting for the membership to
    /// notice; with one, that waits for the member's ttl too.
    #[must_use]
    pub fn owners(mut self, owners: usize) -> Self {
        self.owners = Some(owners);
        self
    }

    /// How long a member counts as live after its last heartbeat (default: the claim timeout,
    /// so a crashed worker's shards move when its leases lapse, not before, and a worker
    /// paused for less than that keeps them).
    #[must_use]
    pub fn member_ttl(mut self, ttl: Duration) -> Self {
        self.member_ttl = Some(ttl);
        self
    }

    /// How often a member heartbeats and reads the others (default: a third of the ttl, so
    /// two heartbeats in a row may fail before it drops out). At most half the ttl.
    #[must_use]
    pub fn refresh_interval(mut self, interval: Duration) -> Self {
        self.refresh_interval = Some(interval);
        self
    }

    /// The settings, every default resolved against `claim_timeout`.
    ///
    /// # Errors
    ///
    /// No owners, a zero or over-long ttl, or a refresh interval that is zero or more than
    /// half the ttl.
    pub fn validate(&self, claim_timeout: Duration) -> Result<MembershipSettings, MembershipError> {
        let owners = self.owners.unwrap_or(2);
        if owners == 0 || owners > usize::from(crate::shard::MAX_SHARDS) {
            return Err(MembershipError::Owners(owners));
        }
        let member_ttl = self.member_ttl.unwrap_or(claim_timeout);
        if member_ttl < Duration::from_millis(10) || member_ttl > MAX_DURATION {
            return Err(MembershipError::Ttl(member_ttl));
        }
        let refresh_interval = self.refresh_interval.unwrap_or(member_ttl / 3);
        if refresh_interval.is_zero() || refresh_interval > member_ttl / 2 {
            return Err(MembershipError::Refresh {
                refresh: refresh_interval,
                ttl: member_ttl,
            });
        }
        Ok(MembershipSettings {
            owners,
            member_ttl,
            refresh_interval,
        })
    }
}

/// A validated [`MembershipConfig`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct MembershipSettings {
    /// Fetchers per shard, when there are that many members.
    pub owners: usize,
    /// How long a member counts as live after its last heartbeat.
    pub member_ttl: Duration,
    /// How often a member heartbeats.
    pub refresh_interval: Duration,
}

/// What is wrong with a [`MembershipConfig`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MembershipError {
    /// Owners out of range.
    #[error("owners must be 1 to 1024 (fetchers per shard), not {0}")]
    Owners(usize),
    /// The member ttl is out of range.
    #[error("member_ttl must be 10 ms to a year, not {0:?}")]
    Ttl(Duration),
    /// The refresh interval is zero or more than half the ttl.
    #[error(
        "refresh_interval ({refresh:?}) must be above zero and at most half the member_ttl \
         ({ttl:?}), so one late heartbeat does not drop the member"
    )]
    Refresh {
        /// The refresh interval.
        refresh: Duration,
        /// The member ttl.
        ttl: Duration,
    },
}

/// One worker's view of its sharded queue's membership: when to heartbeat, and which shards
/// to fetch from. Sans-IO: the caller heartbeats when [`poll_heartbeat`](Self::poll_heartbeat)
/// says so, reports the answer, and applies [`poll_assignment`](Self::poll_assignment)'s
/// changes to the engine.
///
/// - It fetches from nothing until the first answer: a worker that has just started does not
///   take shards that others serve.
/// - An answer assigns [`Shards::assign`]`(member, live, owners)`.
/// - A failed heartbeat changes nothing: the last assignment stays, and held work is never
///   stopped by membership I/O.
/// - No answer for longer than the ttl (from the send time of the last answered heartbeat, or
///   from the start): every shard is fetched from. The others may have lost the membership too
///   and kept assignments that count a crashed worker as live; fetching everything is what
///   guarantees that no shard is left without a fetcher, which would leave its messages and
///   its lapsed leases unserved. The cost is a fetcher (a blocking connection on Redis) per
///   shard while it lasts.
#[derive(Debug, Clone)]
pub struct Membership {
    shards: Shards,
    member: String,
    settings: MembershipSettings,
    /// Per shard: fetched from, as decided.
    assigned: Vec<bool>,
    /// Per shard: as last reported by `poll_assignment` (the engine starts with all).
    told: Vec<bool>,
    /// Since when the assignment is known good: the send time of the last heartbeat answered,
    /// or the start.
    known_since: Instant,
    /// Whether a heartbeat was ever answered.
    answered: bool,
    /// The heartbeat in flight, by its send time.
    in_flight: Option<Instant>,
    next_heartbeat: Instant,
    left: bool,
}

impl Membership {
    /// `member` of `shards`, starting at `now`, fetching from nothing until the first answer.
    pub fn new(
        shards: Shards,
        member: impl Into<String>,
        settings: MembershipSettings,
        now: Instant,
    ) -> Self {
        let n = usize::from(shards.count());
        Self {
            shards,
            member: member.into(),
            settings,
            assigned: vec![false; n],
            told: vec![true; n],
            known_since: now,
            answered: false,
            in_flight: None,
            next_heartbeat: now,
            left: false,
        }
    }

    /// The queue.
    pub fn shards(&self) -> &Shards {
        &self.shards
    }

    /// This member's name.
    pub fn member(&self) -> &str {
        &self.member
    }

    /// The settings.
    pub fn settings(&self) -> &MembershipSettings {
        &self.settings
    }

    /// Whether a heartbeat is due at `now` (none in flight): if so, it counts as sent now, and
    /// its answer or failure must be reported.
    pub fn poll_heartbeat(&mut self, now: Instant) -> bool {
        self.handle_timeout(now);
        if self.left || self.in_flight.is_some() || now < self.next_heartbeat {
            return false;
        }
        self.in_flight = Some(now);
        self.next_heartbeat = now + self.settings.refresh_interval;
        true
    }

    /// The heartbeat in flight was answered with the live members (this one among them or not).
    pub fn handle_members<S: AsRef<str>>(&mut self, now: Instant, members: &[S]) {
        let Some(sent) = self.in_flight.take() else {
            return;
        };
        self.answered = true;
        self.known_since = self.known_since.max(sent);
        let mine = self
            .shards
            .assign(&self.member, members, self.settings.owners);
        self.assigned.iter_mut().for_each(|a| *a = false);
        for shard in mine {
            self.assigned[usize::from(shard)] = true;
        }
        self.handle_timeout(now);
    }

    /// The heartbeat in flight failed: the last assignment stays.
    pub fn handle_failed(&mut self, now: Instant) {
        self.in_flight = None;
        self.handle_timeout(now);
    }

    /// Time passed: without an answer for longer than the ttl, every shard is fetched from.
    pub fn handle_timeout(&mut self, now: Instant) {
        if now >= self.fallback_at() {
            self.assigned.iter_mut().for_each(|a| *a = true);
        }
    }

    /// The member leaves (shutdown): no more heartbeats.
    pub fn leave(&mut self) {
        self.left = true;
    }

    /// When to call [`poll_heartbeat`](Self::poll_heartbeat) or
    /// [`handle_timeout`](Self::handle_timeout) next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.left {
            return None;
        }
        let fallback = self.fallback_at();
        let fallback = self.assigned.iter().any(|a| !a).then_some(fallback);
        let heartbeat = self.in_flight.is_none().then_some(self.next_heartbeat);
        match (fallback, heartbeat) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The next shard whose assignment changed since last polled: `(shard, fetching)`.
    pub fn poll_assignment(&mut self) -> Option<(u16, bool)> {
        let i = (0..self.assigned.len()).find(|&i| self.assigned[i] != self.told[i])?;
        self.told[i] = self.assigned[i];
        Some((i as u16, self.assigned[i]))
    }

    /// Whether shard `shard` is fetched from, as decided now.
    pub fn fetches(&self, shard: u16) -> bool {
        self.assigned
            .get(usize::from(shard))
            .copied()
            .unwrap_or(false)
    }

    /// The shards fetched from, as decided now.
    pub fn assigned(&self) -> Vec<u16> {
        (0..self.shards.count())
            .filter(|&s| self.fetches(s))
            .collect()
    }

    /// Whether the assignment at `now` follows a live answer: false before the first one,
    /// and while falling back to every shard.
    pub fn is_known(&self, now: Instant) -> bool {
        self.answered && now < self.fallback_at()
    }

    /// Since when the membership counts as unknown: a ttl after it was last known good.
    fn fallback_at(&self) -> Instant {
        self.known_since + self.settings.member_ttl
    }
}
