//! Lease semantics: delivery, renew, reclaim, fencing, release, dead-letter. All on a manual
//! clock, so every timing is exact.
#![cfg(not(loom))]

mod common;

use std::time::Duration;

use common::*;
use futures_lite::future::block_on;
use leasehold_core::{Backend, DeadLetterReason, RenewResult, SettleResult};
use leasehold_memory::{MemoryError, MemoryStream, StreamConfig};

#[test]
fn round_trip_through_the_backend_trait() {
    let (stream, _clock) = stream();
    let worker = stream.consumer("a").unwrap();
    block_on(async {
        let id = worker.publish("hello".into()).await.unwrap();
        assert_eq!(id.as_str(), "0-1");
        assert_eq!(worker.stream_len().await.unwrap(), 1);
        assert_eq!(worker.pending().await.unwrap(), 0);

        let batch = worker.fetch(10, Duration::from_secs(5)).await.unwrap();
        assert_eq!(batch.len(), 1);
        let message = &batch[0];
        assert_eq!(message.id, id);
        assert_eq!(&message.payload[..], b"hello");
        assert_eq!((message.delivery_count, message.fence.0), (1, 1));
        assert_eq!(worker.pending().await.unwrap(), 1);
        assert_eq!(holder(&stream, &id), Some(("a".into(), 1)));

        let renewed = worker.renew(&[lease_ref(message)]).await.unwrap();
        assert_eq!(renewed, [RenewResult::Kept]);
        assert_eq!(
            worker.ack(&[lease_ref(message)]).await.unwrap(),
            [SettleResult::Ok]
        );
        assert_eq!(worker.stream_len().await.unwrap(), 0);
        assert_eq!(worker.pending().await.unwrap(), 0);
        assert!(!stream.contains(&id));
        // Nothing left: an empty fetch (the manual clock never waits).
        assert!(worker
            .fetch(10, Duration::from_secs(5))
            .await
            .unwrap()
            .is_empty());
    });
}

#[test]
fn equal_payloads_are_distinct_messages() {
    let (stream, _clock) = stream();
    let a = stream.publish("same");
    let b = stream.publish("same");
    assert_ne!(a, b);
    assert_eq!(stream.len(), 2);

    let worker = stream.consumer("a").unwrap();
    let batch = worker.fetch_now(10);
    assert_eq!(ids(&batch), ["0-1", "0-2"]);
    // Acking one leaves the other.
    assert_eq!(worker.ack_now(&[lease_ref(&batch[0])]), [SettleResult::Ok]);
    assert!(!stream.contains(&a));
    assert!(stream.contains(&b));
    assert_eq!(holder(&stream, &b), Some(("a".into(), 1)));
}

#[test]
fn ids_increase_in_publish_order_and_are_never_reused() {
    let (stream, _clock) = stream();
    let worker = stream.consumer("a").unwrap();
    let first = stream.publish("x");
    let batch = worker.fetch_now(1);
    worker.ack_now(&[lease_ref(&batch[0])]);
    let second = stream.publish("x");
    assert_eq!((first.as_str(), second.as_str()), ("0-1", "0-2"));
}

#[test]
fn renew_keeps_a_lease_past_the_claim_timeout() {
    let (stream, clock) = stream();
    let (a, b) = (stream.consumer("a").unwrap(), stream.consumer("b").unwrap());
    let id = stream.publish("job");
    let message = a.fetch_now(1).messages.remove(0);

    // Renewed every 20 s for 10 minutes: never reclaimable.
    for _ in 0..30 {
        clock.advance(secs(20));
        assert_eq!(a.renew_now(&[lease_ref(&message)]), [RenewResult::Kept]);
        assert!(b.fetch_now(10).is_empty());
    }
    let info = stream.pending_info(&id).unwrap();
    assert_eq!(
        (info.owner.as_str(), info.delivery_count, info.idle),
        ("a", 1, Duration::ZERO)
    );
    assert_eq!(a.ack_now(&[lease_ref(&message)]), [SettleResult::Ok]);
}

#[test]
fn an_unrenewed_lease_is_reclaimable_after_the_claim_timeout_and_not_before() {
    let (stream, clock) = stream();
    let (a, b) = (stream.consumer("a").unwrap(), stream.consumer("b").unwrap());
    let id = stream.publish("job");
    a.fetch_now(1);

    clock.advance(TIMEOUT - Duration::from_nanos(1));
    assert_eq!(
        stream.pending_info(&id).unwrap().idle,
        TIMEOUT - Duration::from_nanos(1)
    );
    assert!(
        b.fetch_now(10).is_empty(),
        "reclaimed before the claim timeout"
    );

    clock.advance(Duration::from_nanos(1));
    let batch = b.fetch_now(10);
    assert_eq!(ids(&batch), ["0-1"]);
    assert_eq!((batch[0].delivery_count, batch[0].fence.0), (2, 2));
    assert_eq!(&batch[0].payload[..], b"job");
    let info = stream.pending_info(&id).unwrap();
    assert_eq!(
        (info.owner.as_str(), info.delivery_count, info.idle),
        ("b", 2, Duration::ZERO)
    );
}

#[test]
fn a_late_heartbeat_cannot_steal_back_a_reclaimed_message() {
    let (stream, clock) = stream();
    let (a, b) = (stream.consumer("a").unwrap(), stream.consumer("b").unwrap());
    let id = stream.publish("job");
    let old = a.fetch_now(1).messages.remove(0);
    clock.advance(TIMEOUT);
    let new = b.fetch_now(1).messages.remove(0);
    clock.advance(secs(10));

    // A's late renew (old fence) is refused and moves nothing: B's idle time keeps running.
    assert_eq!(a.renew_now(&[lease_ref(&old)]), [RenewResult::Lost]);
    let info = stream.pending_info(&id).unwrap();
    assert_eq!(
        (info.owner.as_str(), info.delivery_count, info.idle),
        ("b", 2, secs(10))
    );
    // Even with the current fence, A is not the owner.
    assert_eq!(a.renew_now(&[lease_ref(&new)]), [RenewResult::Lost]);
    assert_eq!(holder(&stream, &id), Some(("b".into(), 2)));
    assert_eq!(stream.pending_info(&id).unwrap().idle, secs(10));
}

#[test]
fn a_stale_ack_never_removes_the_new_owners_delivery() {
    let (stream, clock) = stream();
    let (a, b) = (stream.consumer("a").unwrap(), stream.consumer("b").unwrap());
    let id = stream.publish("job");
    let old = a.fetch_now(1).messages.remove(0);
    clock.advance(TIMEOUT);
    let new = b.fetch_now(1).messages.remove(0);

    assert_eq!(a.ack_now(&[lease_ref(&old)]), [SettleResult::Lost]);
    assert_eq!(a.ack_now(&[lease_ref(&new)]), [SettleResult::Lost]);
    assert!(stream.contains(&id));
    assert_eq!(holder(&stream, &id), Some(("b".into(), 2)));

    // The new owner with an old fence is refused too: the fence is the delivery count.
    assert_eq!(b.ack_now(&[lease_ref(&old)]), [SettleResult::Lost]);
    assert!(stream.contains(&id));
    assert_eq!(b.ack_now(&[lease_ref(&new)]), [SettleResult::Ok]);
    assert!(!stream.contains(&id));
}

#[test]
fn a_stale_fence_is_lost_even_when_the_same_consumer_reclaimed_it() {
    // The owner alone is not enough: A's first delivery lapsed and A itself reclaimed it.
    let (stream, clock) = stream();
    let a = stream.consumer("a").unwrap();
    let id = stream.publish("job");
    let first = a.fetch_now(1).messages.remove(0);
    clock.advance(TIMEOUT);
    let second = a.fetch_now(1).messages.remove(0);
    assert_eq!((second.id.clone(), second.fence.0), (id.clone(), 2));

    assert_eq!(a.renew_now(&[lease_ref(&first)]), [RenewResult::Lost]);
    assert_eq!(
        a.release_now(&lease_ref(&first), Duration::ZERO),
        SettleResult::Lost
    );
    let reason = DeadLetterReason::Rejected("stale".into());
    assert_eq!(
        a.dead_letter_now(&lease_ref(&first), &reason),
        SettleResult::Lost
    );
    assert_eq!(a.ack_now(&[lease_ref(&first)]), [SettleResult::Lost]);
    assert!(stream.dead_letters().is_empty());
    assert_eq!(holder(&stream, &id), Some(("a".into(), 2)));
    assert_eq!(a.ack_now(&[lease_ref(&second)]), [SettleResult::Ok]);
}

#[test]
fn release_and_dead_letter_by_a_non_owner_change_nothing() {
    let (stream, clock) = stream();
    let (a, b) = (stream.consumer("a").unwrap(), stream.consumer("b").unwrap());
    let id = stream.publish("job");
    let message = a.fetch_now(1).messages.remove(0);
    clock.advance(secs(5));

    assert_eq!(
        b.release_now(&lease_ref(&message), Duration::ZERO),
        SettleResult::Lost
    );
    let reason = DeadLetterReason::Rejected("not mine".into());
    assert_eq!(
        b.dead_letter_now(&lease_ref(&message), &reason),
        SettleResult::Lost
    );
    assert!(stream.dead_letters().is_empty());
    let info = stream.pending_info(&id).unwrap();
    assert_eq!(
        (info.owner.as_str(), info.delivery_count, info.idle),
        ("a", 1, secs(5))
    );
    // Not released: B still cannot take it.
    assert!(b.fetch_now(1).is_empty());
}

#[test]
fn unknown_and_malformed_ids_are_lost() {
    let (stream, _clock) = stream();
    let a = stream.consumer("a").unwrap();
    let id = stream.publish("job");
    a.fetch_now(1);
    for bad in ["0-2", "0-01", "1-1", "nonsense", ""] {
        let bad = lease_ref_of(&bad.into(), 1);
        assert_eq!(a.renew_now(std::slice::from_ref(&bad)), [RenewResult::Lost]);
        assert_eq!(a.ack_now(std::slice::from_ref(&bad)), [SettleResult::Lost]);
    }
    assert_eq!(holder(&stream, &id), Some(("a".into(), 1)));
}

#[test]
fn release_with_delay_makes_it_claimable_by_anyone_after_the_delay() {
    let (stream, clock) = stream();
    let (a, b) = (stream.consumer("a").unwrap(), stream.consumer("b").unwrap());
    let id = stream.publish("job");
    let message = a.fetch_now(1).messages.remove(0);

    assert_eq!(
        a.release_now(&lease_ref(&message), secs(10)),
        SettleResult::Ok
    );
    // Owner and count stay until someone takes it; idle is claim_timeout - delay.
    let info = stream.pending_info(&id).unwrap();
    assert_eq!(
        (info.owner.as_str(), info.delivery_count, info.idle),
        ("a", 1, TIMEOUT - secs(10))
    );

    clock.advance(secs(10) - Duration::from_nanos(1));
    assert!(b.fetch_now(1).is_empty(), "claimable before the delay");
    clock.advance(Duration::from_nanos(1));
    let again = b.fetch_now(1);
    assert_eq!(ids(&again), ["0-1"]);
    assert_eq!(again[0].delivery_count, 2);
    assert_eq!(holder(&stream, &id), Some(("b".into(), 2)));
}

#[test]
fn release_without_delay_is_claimable_at_once_even_by_the_releaser() {
    let (stream, _clock) = stream();
    let a = stream.consumer("a").unwrap();
    stream.publish("job");
    let message = a.fetch_now(1).messages.remove(0);
    assert_eq!(
        a.release_now(&lease_ref(&message), Duration::ZERO),
        SettleResult::Ok
    );
    let again = a.fetch_now(1);
    assert_eq!(
        (again[0].id.clone(), again[0].fence.0),
        (message.id.clone(), 2)
    );
}

#[test]
fn release_delays_are_capped_at_the_claim_timeout() {
    let (stream, clock) = stream();
    let (a, b) = (stream.consumer("a").unwrap(), stream.consumer("b").unwrap());
    let id = stream.publish("job");
    let message = a.fetch_now(1).messages.remove(0);
    assert_eq!(
        a.release_now(&lease_ref(&message), secs(3600)),
        SettleResult::Ok
    );
    assert_eq!(stream.pending_info(&id).unwrap().idle, Duration::ZERO);
    clock.advance(TIMEOUT - Duration::from_nanos(1));
    assert!(b.fetch_now(1).is_empty());
    clock.advance(Duration::from_nanos(1));
    assert_eq!(ids(&b.fetch_now(1)), ["0-1"]);
}

#[test]
fn dead_letter_records_reason_and_count_and_acks() {
    let (stream, clock) = stream();
    let (a, b) = (stream.consumer("a").unwrap(), stream.consumer("b").unwrap());
    let id = stream.publish("poison");
    stream.publish("fine");
    a.fetch_now(1);
    clock.advance(TIMEOUT);
    let message = b.fetch_now(1).messages.remove(0);
    assert_eq!(
        (message.id.clone(), message.delivery_count),
        (id.clone(), 2)
    );

    let reason = DeadLetterReason::MaxDeliveries {
        deliveries: 2,
        last_error: "boom".into(),
    };
    assert_eq!(
        b.dead_letter_now(&lease_ref(&message), &reason),
        SettleResult::Ok
    );
    assert!(!stream.contains(&id));
    assert_eq!(stream.pending_info(&id), None);
    assert_eq!(stream.len(), 1);

    let dead = stream.dead_letters();
    assert_eq!(dead.len(), 1);
    let letter = &dead[0];
    assert_eq!(letter.id.as_str(), "0-1");
    assert_eq!(letter.original_id, id);
    assert_eq!(&letter.payload[..], b"poison");
    assert_eq!(letter.reason, reason.to_string());
    assert!(letter.reason.contains("boom"));
    assert_eq!(letter.delivery_count, 2);
    assert_eq!(letter.consumer, "b");

    // Settled once: a second dead-letter or an ack of the same lease is lost.
    assert_eq!(
        b.dead_letter_now(&lease_ref(&message), &reason),
        SettleResult::Lost
    );
    assert_eq!(b.ack_now(&[lease_ref(&message)]), [SettleResult::Lost]);
    assert_eq!(stream.dead_letters().len(), 1);
}

#[test]
fn results_are_per_lease_in_order_in_a_mixed_batch() {
    let (stream, clock) = stream();
    let (a, b) = (stream.consumer("a").unwrap(), stream.consumer("b").unwrap());
    for i in 0..4 {
        stream.publish(format!("m{i}"));
    }
    let mine = a.fetch_now(2); // 0-1, 0-2 held by A
    let theirs = b.fetch_now(1); // 0-3 held by B
    let acked = a.fetch_now(1); // 0-4 held by A, acked below
    a.ack_now(&[lease_ref(&acked[0])]);
    clock.advance(secs(30));

    let batch = [
        lease_ref(&mine[0]),
        lease_ref(&theirs[0]),
        lease_ref_of(&mine[1].id, 7), // wrong fence
        lease_ref(&acked[0]),         // gone
        lease_ref(&mine[1]),
    ];
    assert_eq!(
        a.renew_now(&batch),
        [
            RenewResult::Kept,
            RenewResult::Lost,
            RenewResult::Lost,
            RenewResult::Lost,
            RenewResult::Kept
        ]
    );
    // The refused ones are untouched: B's lease still ages.
    assert_eq!(stream.pending_info(&theirs[0].id).unwrap().idle, secs(30));
    assert_eq!(
        stream.pending_info(&mine[0].id).unwrap().idle,
        Duration::ZERO
    );

    assert_eq!(
        a.ack_now(&batch),
        [
            SettleResult::Ok,
            SettleResult::Lost,
            SettleResult::Lost,
            SettleResult::Lost,
            SettleResult::Ok
        ]
    );
    assert_eq!(stream.len(), 1);
    assert_eq!(holder(&stream, &theirs[0].id), Some(("b".into(), 1)));
}

#[test]
fn a_dropped_consumers_messages_are_reclaimed_after_the_timeout() {
    let (stream, clock) = stream();
    let a = stream.consumer("a").unwrap();
    let id = stream.publish("job");
    a.fetch_now(1);
    drop(a); // a crash
    assert_eq!(holder(&stream, &id), Some(("a".into(), 1)));

    // The name is free again; the restarted worker gets the message only by reclaiming it.
    let a2 = stream.consumer("a").unwrap();
    let b = stream.consumer("b").unwrap();
    assert!(a2.fetch_now(1).is_empty());
    clock.advance(TIMEOUT);
    let batch = b.fetch_now(1);
    assert_eq!((batch[0].id.clone(), batch[0].delivery_count), (id, 2));
}

#[test]
fn consumer_names_are_unique_and_non_empty() {
    let (stream, _clock) = stream();
    let a = stream.consumer("a").unwrap();
    assert_eq!(a.name(), "a");
    assert_eq!(
        stream.consumer("a").unwrap_err(),
        MemoryError::ConsumerNameTaken("a".into())
    );
    assert_eq!(
        stream.consumer("").unwrap_err(),
        MemoryError::EmptyConsumerName
    );
    // Another handle on the same store sees the same names.
    assert!(stream.clone().consumer("a").is_err());
    drop(a);
    assert!(stream.consumer("a").is_ok());
}

#[test]
fn invalid_configuration_is_an_error_not_a_panic() {
    assert_eq!(
        MemoryStream::new(StreamConfig::new(Duration::ZERO)).unwrap_err(),
        MemoryError::ZeroClaimTimeout
    );
    assert!(matches!(
        MemoryStream::new(StreamConfig::new(Duration::MAX)).unwrap_err(),
        MemoryError::ClaimTimeoutTooLong { .. }
    ));
    let stream = MemoryStream::new(StreamConfig::default()).unwrap();
    assert_eq!(stream.claim_timeout(), secs(60));
}

#[test]
fn renew_does_not_change_the_fence_but_every_takeover_does() {
    let (stream, clock) = stream();
    let (a, b) = (stream.consumer("a").unwrap(), stream.consumer("b").unwrap());
    stream.publish("job");
    let mut fences = vec![a.fetch_now(1)[0].fence.0];
    let mut current = a.fetch_now(0);
    assert!(current.is_empty());
    for round in 0..4 {
        clock.advance(TIMEOUT);
        let taker = if round % 2 == 0 { &b } else { &a };
        current = taker.fetch_now(1);
        fences.push(current[0].fence.0);
        assert_eq!(
            taker.renew_now(&[lease_ref(&current[0])]),
            [RenewResult::Kept]
        );
        assert_eq!(
            stream.pending_info(&current[0].id).unwrap().delivery_count,
            current[0].delivery_count
        );
    }
    assert_eq!(fences, [1, 2, 3, 4, 5]);
}
