//! Loom models of two consumers racing on one message: every interleaving of the store's
//! critical sections (and of the manual clock) is explored.
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p leasehold-memory --test loom --release`
#![cfg(loom)]

use std::time::Duration;

use leasehold_core::{
    Dedupe, Due, Fence, Fetched, LeaseRef, MessageId, Outgoing, RenewResult, SettleResult,
};
use leasehold_memory::{Bytes, ManualClock, MemoryBackend, MemoryStream, StreamConfig};
use loom::thread;

const TIMEOUT: Duration = Duration::from_secs(60);

fn lease_ref(message: &Fetched<Bytes>) -> LeaseRef {
    LeaseRef::from(message)
}

/// A stream with one message, delivered to `a` (fence 1), and a second consumer `b`.
fn setup() -> (
    MemoryStream,
    ManualClock,
    MemoryBackend,
    MemoryBackend,
    LeaseRef,
) {
    let clock = ManualClock::new();
    let stream = MemoryStream::with_clock(StreamConfig::new(TIMEOUT), clock.clone()).unwrap();
    let (a, b) = (stream.consumer("a").unwrap(), stream.consumer("b").unwrap());
    stream.publish("job");
    let held = a.fetch_now(1);
    assert_eq!(held.len(), 1);
    (stream, clock, a, b, lease_ref(&held[0]))
}

/// How many of the given (consumer, lease) pairs the store currently honours, asked without
/// changing anything observable: a renew at the current instant by each presumed holder.
fn holders(pairs: &[(&MemoryBackend, &LeaseRef)]) -> usize {
    pairs
        .iter()
        .filter(|(consumer, lease)| {
            consumer.renew_now(std::slice::from_ref(lease)) == [RenewResult::Kept]
        })
        .count()
}

fn owner(stream: &MemoryStream, id: &MessageId) -> Option<(String, u32)> {
    stream
        .pending_info(id)
        .map(|info| (info.owner, info.delivery_count))
}

#[test]
fn exactly_one_of_two_racing_claims_wins() {
    loom::model(|| {
        let (stream, clock, a, b, first) = setup();
        let c = stream.consumer("c").unwrap();
        drop(a); // A crashed; its lease lapses
        clock.advance(TIMEOUT);

        let tb = thread::spawn(move || (b.fetch_now(1), b));
        let got_c = c.fetch_now(1);
        let (got_b, b) = tb.join().unwrap();

        assert_eq!(got_b.len() + got_c.len(), 1, "both or neither claimed it");
        let (winner, got) = if got_b.is_empty() {
            ("c", &got_c)
        } else {
            ("b", &got_b)
        };
        assert_eq!((got[0].delivery_count, got[0].fence), (2, Fence(2)));
        assert_eq!(owner(&stream, &first.id), Some((winner.to_string(), 2)));
        let lease_b = got_b.first().map(lease_ref);
        let lease_c = got_c.first().map(lease_ref);
        let mut pairs = vec![];
        pairs.extend(lease_b.as_ref().map(|l| (&b, l)));
        pairs.extend(lease_c.as_ref().map(|l| (&c, l)));
        assert_eq!(holders(&pairs), 1);
    });
}

#[test]
fn a_late_renew_and_a_reclaim_never_both_hold() {
    // A's heartbeat races B's reclaim of A's lapsed lease (the steal-back defect).
    loom::model(|| {
        let (stream, clock, a, b, held) = setup();
        clock.advance(TIMEOUT);

        let renew = {
            let held = held.clone();
            thread::spawn(move || (a.renew_now(&[held]), a))
        };
        let got = b.fetch_now(1);
        let (renewed, a) = renew.join().unwrap();

        match (renewed[0], got.len()) {
            // Renew first: B found nothing to reclaim.
            (RenewResult::Kept, 0) => assert_eq!(owner(&stream, &held.id), Some(("a".into(), 1))),
            // Reclaim first: the late renew was refused and moved nothing.
            (RenewResult::Lost, 1) => {
                assert_eq!(owner(&stream, &held.id), Some(("b".into(), 2)));
                assert_eq!(holders(&[(&a, &held)]), 0);
                assert_eq!(holders(&[(&b, &lease_ref(&got[0]))]), 1);
            }
            other => panic!("impossible outcome {other:?}"),
        }
    });
}

#[test]
fn a_stale_ack_never_removes_the_other_consumers_delivery() {
    // A's late ack races B's reclaim; then B acks what it got.
    loom::model(|| {
        let (stream, clock, a, b, held) = setup();
        clock.advance(TIMEOUT);

        let ack = {
            let held = held.clone();
            thread::spawn(move || a.ack_now(&[held]))
        };
        let got = b.fetch_now(1);
        let acked = ack.join().unwrap();

        match (acked[0], got.len()) {
            // A's ack came first: the message is gone, nothing to reclaim.
            (SettleResult::Ok, 0) => assert!(!stream.contains(&held.id)),
            // B reclaimed first: A's ack was refused, B's delivery is intact.
            (SettleResult::Lost, 1) => {
                assert!(stream.contains(&held.id));
                assert_eq!(owner(&stream, &held.id), Some(("b".into(), 2)));
                assert_eq!(b.ack_now(&[lease_ref(&got[0])]), [SettleResult::Ok]);
                assert!(!stream.contains(&held.id));
            }
            other => panic!("impossible outcome {other:?}"),
        }
        assert_eq!(stream.pending_len(), 0);
    });
}

#[test]
fn a_release_racing_a_fetch_hands_over_at_most_once() {
    // A releases (no delay) while B fetches, with the clock moving in a third thread.
    loom::model(|| {
        let (stream, clock, a, b, held) = setup();

        let release = {
            let held = held.clone();
            thread::spawn(move || (a.release_now(&held, Duration::ZERO), a))
        };
        let tick = thread::spawn(move || clock.advance(Duration::from_secs(1)));
        let got = b.fetch_now(1);
        let (released, a) = release.join().unwrap();
        tick.join().unwrap();

        assert_eq!(released, SettleResult::Ok);
        let info = owner(&stream, &held.id);
        if got.is_empty() {
            // Fetched before the release: A still owns it, and it is claimable now.
            assert_eq!(info, Some(("a".into(), 1)));
            let again = b.fetch_now(1);
            assert_eq!(again.len(), 1);
            assert_eq!(holders(&[(&a, &held), (&b, &lease_ref(&again[0]))]), 1);
        } else {
            assert_eq!(info, Some(("b".into(), 2)));
            assert_eq!(holders(&[(&a, &held), (&b, &lease_ref(&got[0]))]), 1);
        }
    });
}

#[test]
fn renew_and_ack_by_the_owner_race_a_reclaim_and_ack_by_another() {
    // Both consumers try to finish the message: A with its (possibly lapsed) fence 1, B by
    // reclaiming and acking. Exactly one ack succeeds; the message is then gone for good.
    loom::model(|| {
        let (stream, clock, a, b, held) = setup();
        clock.advance(TIMEOUT);

        let owner_side = {
            let held = held.clone();
            thread::spawn(move || {
                let renewed = a.renew_now(std::slice::from_ref(&held))[0];
                let acked = a.ack_now(&[held])[0];
                (renewed, acked)
            })
        };
        let got = b.fetch_now(1);
        let b_acked = got.first().map(|m| b.ack_now(&[lease_ref(m)])[0]);
        let (renewed, a_acked) = owner_side.join().unwrap();

        let a_won = a_acked == SettleResult::Ok;
        let b_won = b_acked == Some(SettleResult::Ok);
        assert!(
            a_won != b_won,
            "acks: a {a_acked:?}, b {b_acked:?} (renew {renewed:?})"
        );
        // Whoever reclaimed it finishes it: A's stale ack never removed B's delivery.
        assert_eq!(b_won, !got.is_empty(), "B's delivery was removed under it");
        if renewed == RenewResult::Kept {
            // Once renewed, the lease was not claimable: B never got it.
            assert!(a_won && got.is_empty());
        }
        assert!(!stream.contains(&held.id));
        assert_eq!(stream.pending_len(), 0);
    });
}

#[test]
fn a_due_message_is_promoted_and_delivered_once_to_racing_fetches() {
    // Two consumers fetch while the clock reaches the due time of a delayed message.
    loom::model(|| {
        let clock = ManualClock::new();
        let stream = MemoryStream::with_clock(StreamConfig::new(TIMEOUT), clock.clone()).unwrap();
        let (a, b) = (stream.consumer("a").unwrap(), stream.consumer("b").unwrap());
        let delayed =
            Outgoing::new(Bytes::from("later")).with_due(Due::After(Duration::from_secs(1)));
        stream.publish_with_now(delayed).unwrap();

        let tick = thread::spawn(move || clock.advance(Duration::from_secs(1)));
        let fetch_a = thread::spawn(move || (a.fetch_now(1), a));
        let got_b = b.fetch_now(1);
        let (got_a, _a) = fetch_a.join().unwrap();
        tick.join().unwrap();

        let got: Vec<_> = got_a.iter().chain(&got_b).collect();
        assert!(got.len() <= 1, "delivered twice");
        assert!(got.iter().all(|m| m.delivery_count == 1));
        // Promoted at most once: one entry in the stream, or still waiting.
        assert_eq!(stream.len() + stream.delayed_len(), 1);
        if got.is_empty() {
            assert_eq!(b.fetch_now(1).len(), 1, "due, and never delivered");
        }
        assert_eq!(stream.len(), 1);
    });
}

#[test]
fn racing_publishes_with_one_key_enqueue_one_message() {
    loom::model(|| {
        let stream =
            MemoryStream::with_clock(StreamConfig::new(TIMEOUT), ManualClock::new()).unwrap();
        let keyed = || {
            Outgoing::new(Bytes::from("charge"))
                .with_dedupe(Dedupe::new("order-7", Duration::from_secs(60)))
        };
        let other = {
            let stream = stream.clone();
            thread::spawn(move || stream.publish_with_now(keyed()).unwrap())
        };
        let mine = stream.publish_with_now(keyed()).unwrap();
        let theirs = other.join().unwrap();
        assert!(mine.duplicate != theirs.duplicate, "{mine:?} {theirs:?}");
        assert_eq!(mine.id, theirs.id);
        assert_eq!(stream.len(), 1);
    });
}
