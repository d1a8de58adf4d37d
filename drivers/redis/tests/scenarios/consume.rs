//! The backward-compatible `consume`, one message per call on the Redis backend: `true` acks
//! it, `false` keeps it for the next call, an error or a panic releases it to any consumer, and
//! an empty stream says so.

use leasehold_worker::{consume, Json};

use super::support::{Env, TestRt, STREAM};

/// `consume` on an empty stream consumes nothing and says so.
pub async fn consume_on_empty_stream_returns_false<T: TestRt>(rt: T) {
    let env = Env::start(rt).await;
    let backend = env.backend("c1").await;
    let mut called = false;
    let consumed = consume(&backend, &Json::<u64>::default(), |_: u64| {
        called = true;
        true
    })
    .await
    .expect("consume");
    assert!(!consumed && !called);
}

/// `consume` whose closure returns `true` acks the message: it is gone from the stream and from
/// the pending list.
pub async fn consume_true_acks<T: TestRt>(rt: T) {
    let env = Env::start(rt).await;
    let backend = env.backend("c1").await;
    env.publish(1).await;
    let codec = Json::<u64>::default();
    let mut seen = Vec::new();
    let consumed = consume(&backend, &codec, |m: u64| {
        seen.push(m);
        true
    })
    .await
    .expect("consume");
    assert!(consumed);
    assert_eq!(seen, [1]);
    assert_eq!(env.xlen(STREAM).await, 0);
    assert!(env.pending().await.is_empty());
    let again = consume(&backend, &codec, |_: u64| true).await;
    assert!(!again.expect("consume"), "nothing left");
}

/// `consume` whose closure returns `false` keeps the message: the next `consume` gets the same
/// message again, at once.
pub async fn consume_false_keeps_the_message_for_the_next_consume<T: TestRt>(rt: T) {
    let env = Env::start(rt).await;
    let backend = env.backend("c1").await;
    let id = env.publish(1).await;
    let codec = Json::<u64>::default();
    let mut seen = Vec::new();
    let first = consume(&backend, &codec, |m: u64| {
        seen.push(m);
        false
    })
    .await;
    assert!(first.expect("consume"), "a message was consumed");
    let pending = env.pending().await;
    assert_eq!(pending.len(), 1, "kept: {pending:?}");
    assert_eq!(pending[0].id, id);
    let second = consume(&backend, &codec, |m: u64| {
        seen.push(m);
        true
    })
    .await;
    assert!(
        second.expect("consume"),
        "the next consume got nothing (XPENDING {:?})",
        env.pending().await
    );
    assert_eq!(seen, [1, 1], "the same message, twice");
    assert_eq!(env.xlen(STREAM).await, 0, "acked the second time");
    assert!(env.pending().await.is_empty());
}

/// An error or a panic in the `consume` closure releases the message: it is never lost, and the
/// next `consume` (on any consumer) gets it.
pub async fn consume_error_or_panic_releases_the_message<T: TestRt>(rt: T) {
    let env = Env::start(rt).await;
    let (first, second) = (env.backend("c1").await, env.backend("c2").await);
    let id = env.publish(1).await;
    let codec = Json::<u64>::default();
    let mut seen = Vec::new();

    let failed = consume(&first, &codec, |m: u64| {
        seen.push(m);
        Err::<bool, _>("cannot handle it now")
    })
    .await;
    assert!(failed.expect("consume"));
    assert_eq!(env.pending().await.len(), 1, "an error keeps the message");

    let panicked = consume(&second, &codec, |m: u64| -> bool {
        seen.push(m);
        panic!("a deliberate test panic in a consume closure")
    })
    .await;
    assert!(
        panicked.expect("consume"),
        "the other consumer got nothing (XPENDING {:?})",
        env.pending().await
    );
    let pending = env.pending().await;
    assert_eq!(pending.len(), 1, "a panic keeps the message: {pending:?}");
    assert_eq!((pending[0].id.as_str(), pending[0].count), (id.as_str(), 2));

    let done = consume(&first, &codec, |m: u64| {
        seen.push(m);
        true
    })
    .await;
    assert!(
        done.expect("consume"),
        "the first consumer got nothing back (XPENDING {:?})",
        env.pending().await
    );
    assert_eq!(seen, [1; 3], "the same message each time");
    assert_eq!(env.xlen(STREAM).await, 0, "acked at last");
    assert!(env.pending().await.is_empty());
}
