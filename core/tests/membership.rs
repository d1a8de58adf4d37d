//! The membership of a sharded queue on explicit instants: when a worker heartbeats, what an
//! answer assigns it, that failures keep the last assignment, and that a membership unknown
//! for longer than its ttl falls back to every shard.

mod common;

use std::time::{Duration, Instant};

use common::TestRng;
use leasehold_core::{Membership, MembershipConfig, MembershipError, Shards};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Claim timeout 3 s: ttl 3 s, heartbeat every second, 2 owners.
fn membership(member: &str, t0: Instant) -> Membership {
    let settings = MembershipConfig::default().validate(ms(3000)).unwrap();
    Membership::new(Shards::new("q", 8).unwrap(), member, settings, t0)
}

fn changes(m: &mut Membership) -> Vec<(u16, bool)> {
    std::iter::from_fn(|| m.poll_assignment()).collect()
}

#[test]
fn defaults_follow_the_claim_timeout_and_bad_values_are_errors() {
    let s = MembershipConfig::default().validate(ms(60_000)).unwrap();
    assert_eq!(
        (s.owners, s.member_ttl, s.refresh_interval),
        (2, ms(60_000), ms(20_000))
    );
    let s = MembershipConfig::default()
        .owners(3)
        .member_ttl(ms(9000))
        .validate(ms(60_000))
        .unwrap();
    assert_eq!((s.owners, s.refresh_interval), (3, ms(3000)));
    let c = MembershipConfig::default();
    assert_eq!(
        c.clone().owners(0).validate(ms(60_000)),
        Err(MembershipError::Owners(0))
    );
    assert_eq!(
        c.clone().member_ttl(ms(1)).validate(ms(60_000)),
        Err(MembershipError::Ttl(ms(1)))
    );
    assert_eq!(
        c.clone().refresh_interval(ms(40_000)).validate(ms(60_000)),
        Err(MembershipError::Refresh {
            refresh: ms(40_000),
            ttl: ms(60_000)
        })
    );
    assert!(c
        .refresh_interval(Duration::ZERO)
        .validate(ms(60_000))
        .is_err());
}

/// Nothing is fetched before the first answer; an answer assigns what `Shards::assign` says;
/// the heartbeat comes every refresh interval, one at a time.
#[test]
fn an_answer_assigns_the_rendezvous_shards() {
    let t0 = Instant::now();
    let mut m = membership("w0", t0);
    assert_eq!(
        changes(&mut m),
        (0..8).map(|s| (s, false)).collect::<Vec<_>>()
    );
    assert!(m.poll_heartbeat(t0));
    assert!(!m.poll_heartbeat(t0 + ms(500)), "one in flight at a time");
    assert!(!m.is_known(t0));
    let members = ["w0", "w1", "w2"];
    m.handle_members(t0 + ms(10), &members);
    assert!(m.is_known(t0 + ms(10)));
    let expected = Shards::new("q", 8).unwrap().assign("w0", &members, 2);
    assert_eq!(m.assigned(), expected);
    assert_eq!(
        changes(&mut m),
        expected.iter().map(|&s| (s, true)).collect::<Vec<_>>()
    );
    assert_eq!(m.poll_timeout(), Some(t0 + ms(1000)));
    assert!(!m.poll_heartbeat(t0 + ms(999)));
    assert!(m.poll_heartbeat(t0 + ms(1000)));
    // w2 left: w0 gains only what w2 fetched.
    m.handle_members(t0 + ms(1010), &["w0", "w1"]);
    assert_eq!(
        m.assigned().len(),
        8,
        "two members, two owners: everyone fetches all"
    );
    assert!(changes(&mut m)
        .iter()
        .all(|&(s, on)| on && !expected.contains(&s)));
}

/// Failed heartbeats keep the last assignment until the ttl has passed since the last answered
/// one was sent; then every shard is fetched from, until an answer comes again.
#[test]
fn failures_keep_the_assignment_then_fall_back_to_every_shard() {
    let t0 = Instant::now();
    let mut m = membership("w0", t0);
    let members = ["w0", "w1", "w2", "w3"];
    assert!(m.poll_heartbeat(t0));
    m.handle_members(t0 + ms(20), &members);
    let mine = m.assigned();
    assert!(mine.len() < 8, "{mine:?}");
    changes(&mut m);
    for i in 1..=2 {
        assert!(m.poll_heartbeat(t0 + ms(1000 * i)));
        m.handle_failed(t0 + ms(1000 * i + 5));
        assert_eq!(m.assigned(), mine, "kept after {i} failures");
        assert!(changes(&mut m).is_empty());
    }
    // The ttl (3 s) after the last answered heartbeat was sent (t0).
    assert_eq!(m.poll_timeout(), Some(t0 + ms(3000)));
    m.handle_timeout(t0 + ms(2999));
    assert_eq!(m.assigned(), mine);
    m.handle_timeout(t0 + ms(3000));
    assert!(!m.is_known(t0 + ms(3000)));
    assert_eq!(m.assigned().len(), 8, "unknown for a ttl: every shard");
    assert!(changes(&mut m)
        .iter()
        .all(|&(s, on)| on && !mine.contains(&s)));
    assert!(m.poll_heartbeat(t0 + ms(3000)));
    m.handle_members(t0 + ms(3010), &members);
    assert_eq!(m.assigned(), mine, "back to its share");
    assert!(changes(&mut m).iter().all(|&(_, on)| !on));
}

/// Without any answer from the start, it falls back to every shard a ttl after starting.
#[test]
fn never_answered_falls_back_after_a_ttl() {
    let t0 = Instant::now();
    let mut m = membership("w0", t0);
    changes(&mut m);
    assert!(m.poll_heartbeat(t0));
    m.handle_failed(t0 + ms(10));
    assert!(m.assigned().is_empty());
    // The next heartbeat at 1 s comes before the fallback at 3 s.
    assert_eq!(m.poll_timeout(), Some(t0 + ms(1000)));
    for i in 1..=2 {
        assert!(m.poll_heartbeat(t0 + ms(1000 * i)));
        m.handle_failed(t0 + ms(1000 * i + 10));
    }
    assert_eq!(m.poll_timeout(), Some(t0 + ms(3000)));
    assert!(m.poll_heartbeat(t0 + ms(3000)));
    assert_eq!(m.assigned().len(), 8);
    assert_eq!(changes(&mut m).len(), 8);
    // Once everything is fetched, only the heartbeat is pending.
    assert_eq!(m.poll_timeout(), None, "in flight, nothing to fall back to");
    m.handle_failed(t0 + ms(3010));
    assert_eq!(m.poll_timeout(), Some(t0 + ms(4000)));
}

/// A member that left heartbeats no more; a late answer of a heartbeat not in flight is
/// ignored.
#[test]
fn leaving_stops_heartbeats_and_stray_answers_are_ignored() {
    let t0 = Instant::now();
    let mut m = membership("w0", t0);
    m.handle_members(t0, &["w0", "w1", "w2"]);
    assert!(m.assigned().is_empty(), "not asked: ignored");
    assert!(m.poll_heartbeat(t0));
    m.handle_members(t0 + ms(5), &["w0"]);
    assert_eq!(m.assigned().len(), 8);
    m.leave();
    assert!(!m.poll_heartbeat(t0 + ms(5000)));
    assert_eq!(m.poll_timeout(), None);
}

/// Random runs (reproducible, one generator per run number) of heartbeats, answers with random live sets, failures and time
/// passing: at every step the assignment is what the rules say — nothing before the first
/// answer, every shard once no answer came for a ttl, else `Shards::assign` of the last
/// answer — the changes polled add up to it, and nothing is due in the past.
#[test]
fn random_runs_follow_the_rules() {
    let names = ["w0", "w1", "w2", "w3", "w4"];
    for run in 1..=300u64 {
        let mut rng = TestRng::new(run);
        let t0 = Instant::now();
        let owners = 1 + rng.below(3) as usize;
        let settings = MembershipConfig::default()
            .owners(owners)
            .validate(ms(3000))
            .unwrap();
        let shards = Shards::new("q", 1 + rng.below(12) as u32).unwrap();
        let mut m = Membership::new(shards.clone(), "w0", settings, t0);
        let mut told = vec![true; usize::from(shards.count())];
        let mut now = t0;
        // Send time of the heartbeat in flight; of the last answered one; its live set.
        let mut in_flight: Option<Instant> = None;
        let mut answered: Option<(Instant, Vec<&str>)> = None;
        for step in 0..200 {
            now += ms(rng.below(1200));
            match rng.below(4) {
                0 | 1 if m.poll_heartbeat(now) => in_flight = Some(now),
                2 if in_flight.is_some() => {
                    let live: Vec<&str> =
                        names.iter().copied().filter(|_| rng.chance(60)).collect();
                    m.handle_members(now, &live);
                    let sent = in_flight.take().unwrap();
                    answered = Some((sent, live));
                }
                3 if in_flight.is_some() => {
                    m.handle_failed(now);
                    in_flight = None;
                }
                _ => m.handle_timeout(now),
            }
            let expected: Vec<u16> = match &answered {
                _ if now >= answered.as_ref().map_or(t0, |(sent, _)| *sent) + ms(3000) => {
                    (0..shards.count()).collect()
                }
                Some((_, live)) => shards.assign("w0", live, owners),
                None => Vec::new(),
            };
            assert_eq!(m.assigned(), expected, "run {run} step {step}");
            while let Some((shard, on)) = m.poll_assignment() {
                assert_ne!(
                    told[usize::from(shard)],
                    on,
                    "a change that changes nothing"
                );
                told[usize::from(shard)] = on;
            }
            let fetching: Vec<u16> = (0..shards.count())
                .filter(|&s| told[usize::from(s)])
                .collect();
            assert_eq!(fetching, expected, "run {run} step {step}: changes add up");
            if let Some(at) = m.poll_timeout() {
                assert!(at > now || in_flight.is_none(), "run {run} step {step}");
            }
        }
    }
}
