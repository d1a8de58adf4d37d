//! The backward-compatible one-shot `consume(backend, codec, |message| -> bool)`.

use leasehold_worker::{consume, Json};

use crate::support::{memory_stream, publish, LONG_CLAIM};
use crate::TestRuntime;

/// `consume` on an empty stream consumes nothing and says so (`Ok(false)`), without waiting.
pub async fn consume_on_empty_stream_returns_false<T: TestRuntime>(rt: T) {
    let stream = memory_stream(&rt.clock(), LONG_CLAIM);
    let consumer = stream.consumer("c1").expect("fresh name");
    let mut called = false;
    let consumed = consume(&consumer, &Json::<String>::default(), |_: String| {
        called = true;
        true
    })
    .await
    .expect("the memory backend does not fail");
    assert!(!consumed && !called);
}

/// `consume` whose closure returns `true` acks the message: it is gone from the stream.
pub async fn consume_true_acks<T: TestRuntime>(rt: T) {
    let stream = memory_stream(&rt.clock(), LONG_CLAIM);
    let consumer = stream.consumer("c1").expect("fresh name");
    publish(&stream, "job");
    let mut seen = Vec::new();
    let codec = Json::<String>::default();
    let consumed = consume(&consumer, &codec, |m: String| {
        seen.push(m);
        true
    })
    .await
    .expect("no backend failure");
    assert!(consumed);
    assert_eq!(seen, ["job"]);
    assert!(stream.is_empty(), "acked");
    let again = consume(&consumer, &codec, |_: String| true).await;
    assert!(!again.expect("no backend failure"), "nothing left");
}

/// `consume` whose closure returns `false` keeps the message: the next `consume` gets the same
/// message again, at once.
pub async fn consume_false_keeps_the_message_for_the_next_consume<T: TestRuntime>(rt: T) {
    let stream = memory_stream(&rt.clock(), LONG_CLAIM);
    let consumer = stream.consumer("c1").expect("fresh name");
    let id = publish(&stream, "job");
    let codec = Json::<String>::default();
    let mut seen = Vec::new();
    let first = consume(&consumer, &codec, |m: String| {
        seen.push(m);
        false
    })
    .await;
    assert!(first.expect("no backend failure"), "a message was consumed");
    assert!(stream.contains(&id), "kept");
    let second = consume(&consumer, &codec, |m: String| {
        seen.push(m);
        true
    })
    .await;
    assert!(second.expect("no backend failure"));
    assert_eq!(seen, ["job", "job"], "the same message, twice");
    assert!(stream.is_empty(), "acked the second time");
}

/// An error or a panic in the `consume` closure releases the message: it is never lost, and the
/// next `consume` (on any consumer) gets it.
pub async fn consume_error_or_panic_releases_the_message<T: TestRuntime>(rt: T) {
    let stream = memory_stream(&rt.clock(), LONG_CLAIM);
    let (first, second) = (
        stream.consumer("c1").expect("fresh name"),
        stream.consumer("c2").expect("fresh name"),
    );
    let id = publish(&stream, "job");
    let codec = Json::<String>::default();
    let mut seen = Vec::new();

    let failed = consume(&first, &codec, |m: String| {
        seen.push(m);
        Err::<bool, _>("cannot handle it now")
    })
    .await;
    assert!(failed.expect("no backend failure"));
    assert!(stream.contains(&id), "an error keeps the message");

    let panicked = consume(&second, &codec, |m: String| -> bool {
        seen.push(m);
        panic!("a deliberate test panic in a consume closure")
    })
    .await;
    assert!(panicked.expect("no backend failure"));
    assert!(stream.contains(&id), "a panic keeps the message");

    let done = consume(&first, &codec, |m: String| {
        seen.push(m);
        true
    })
    .await;
    assert!(done.expect("no backend failure"));
    assert_eq!(seen, ["job"; 3], "the same message each time");
    let info = stream.pending_info(&id);
    assert!(info.is_none() && stream.is_empty(), "acked at last");
}
