//! Properties of a [`Publisher`]: delayed messages and deduplication, seen through the
//! consumers of the same stream.
//!
//! Implement [`PublisherFactory`] (a publisher on the stream a [`BackendFactory`] opened last)
//! and expand [`publisher_suite!`](crate::publisher_suite). The delays are fractions of the
//! claim timeout, so the properties hold on real time (Redis, ~2 s) and on virtual time alike.

use std::collections::HashSet;
use std::future::Future;
use std::time::{Duration, Instant, SystemTime};

use futures::future::join_all;
use leasehold_core::{
    Backend, DelayedSummary, Due, FetchAnswer, Outgoing, Published, Publisher, MAX_DELAY,
};

use crate::{fetch, margin, open, stream_len, BackendFactory};

/// A [`BackendFactory`] that can also publish to the stream it opened last.
pub trait PublisherFactory: BackendFactory {
    /// The publisher under test, on the consumers' stream.
    type Publisher: Publisher<Payload = <Self::Backend as Backend>::Payload>;

    /// A publisher on the stream most recently opened by [`open`](BackendFactory::open).
    fn publisher(&self) -> impl Future<Output = Self::Publisher> + Send;
}

fn outgoing<F: PublisherFactory>(
    bytes: &[u8],
    due: Option<Due>,
    dedupe: Option<(&str, Duration)>,
) -> Outgoing<<F::Backend as Backend>::Payload> {
    Outgoing::new(bytes.to_vec().into())
        .with_due(due)
        .with_dedupe(dedupe.map(|(key, ttl)| leasehold_core::Dedupe::new(key.to_owned(), ttl)))
}

async fn send<P: Publisher>(p: &P, batch: Vec<Outgoing<P::Payload>>) -> Vec<Published> {
    let n = batch.len();
    let published = p.publish_batch(batch).await.expect("publish_batch failed");
    assert_eq!(published.len(), n, "one result per message");
    published
}

async fn delayed<P: Publisher>(p: &P) -> DelayedSummary {
    p.delayed().await.expect("delayed failed")
}

/// A message delayed by `d` is not fetched before `d` has passed (checked at once and at half
/// of it), is counted as delayed meanwhile, and is fetched after it with delivery count 1 and
/// its payload intact.
pub async fn delayed_not_before_due<F: PublisherFactory>(f: &F) {
    const P: &str = "delayed_not_before_due";
    let (claim, r) = open(f, 1).await;
    let p = f.publisher().await;
    let d = claim;
    let [published] = &send(&p, vec![outgoing::<F>(b"later", Some(Due::After(d)), None)]).await[..]
    else {
        unreachable!("one result checked")
    };
    ensure!(P, !published.duplicate, "a first publish is no duplicate");
    ensure!(
        P,
        fetch(&r[0], 10).await.is_empty(),
        "fetched before its due time"
    );
    let summary = delayed(&p).await;
    ensure!(P, summary.len == 1, "delayed() counts {} of 1", summary.len);
    ensure!(
        P,
        summary.next_due.is_some_and(|next| next <= d),
        "next due {:?}, published with a delay of {d:?}",
        summary.next_due
    );
    ensure!(
        P,
        stream_len(&r[0]).await == 0,
        "a delayed message is in the stream early"
    );
    f.advance(d / 2).await;
    ensure!(
        P,
        fetch(&r[0], 10).await.is_empty(),
        "fetched at half its delay"
    );
    f.advance(d / 2 + margin(claim)).await;
    let got = fetch(&r[0], 10).await;
    ensure!(
        P,
        got.len() == 1,
        "{} fetched after the due time, 1 expected",
        got.len()
    );
    ensure!(
        P,
        got[0].payload.as_ref() == b"later",
        "the payload changed"
    );
    ensure!(
        P,
        got[0].delivery_count == 1,
        "the first delivery of a delayed message has delivery count {}, 1 expected",
        got[0].delivery_count
    );
    ensure!(
        P,
        delayed(&p).await == DelayedSummary::default(),
        "still counted as delayed"
    );
}

/// An idle consumer picks a delayed message up soon after its due time without any new publish:
/// a blocking fetch returns it (a real-time store wakes for it), or an empty fetch's
/// answer says when the next one is due, to fetch again then (a virtual-time store does not
/// block).
pub async fn delayed_delivered_soon_after_due<F: PublisherFactory>(f: &F) {
    const P: &str = "delayed_delivered_soon_after_due";
    let (claim, r) = open(f, 1).await;
    let p = f.publisher().await;
    let d = claim / 2;
    let started = Instant::now();
    send(&p, vec![outgoing::<F>(b"soon", Some(Due::After(d)), None)]).await;
    let mut advanced = Duration::ZERO;
    let mut got = FetchAnswer::default();
    for _ in 0..20 {
        got = r[0].fetch(1, 2 * d).await.expect("fetch failed");
        if !got.is_empty() {
            break;
        }
        let next = got.next_due;
        ensure!(
            P,
            next.is_some_and(|next| next <= d),
            "an empty fetch with a message due within {d:?} reports next_due {next:?}"
        );
        let next = next.unwrap_or_default();
        f.advance(next).await;
        advanced += next;
    }
    let waited = started.elapsed() + advanced;
    ensure!(P, got.len() == 1, "the due message never came");
    // The due time has a millisecond resolution on some stores.
    ensure!(
        P,
        waited + Duration::from_millis(2) >= d,
        "delivered after {waited:?}, before its delay of {d:?}"
    );
    ensure!(
        P,
        waited <= d + margin(claim),
        "delivered {waited:?} after publish, delay {d:?}: an idle consumer must not wait for a poll"
    );
}

/// Many delayed messages due at once, several consumers fetching at the same time: each enters
/// the stream exactly once and is delivered exactly once.
pub async fn delayed_promoted_once_under_racing_consumers<F: PublisherFactory>(f: &F) {
    const P: &str = "delayed_promoted_once_under_racing_consumers";
    const N: usize = 300;
    let (claim, r) = open(f, 4).await;
    let p = f.publisher().await;
    let d = claim / 4;
    let batch = (0..N)
        .map(|i| outgoing::<F>(format!("m{i}").as_bytes(), Some(Due::After(d)), None))
        .collect();
    send(&p, batch).await;
    f.advance(d + margin(claim)).await;
    let mut seen = HashSet::new();
    for _ in 0..N {
        let rounds = join_all(r.iter().map(|b| fetch(b, 16))).await;
        let mut took = 0;
        for message in rounds.into_iter().flatten() {
            took += 1;
            let payload = String::from_utf8_lossy(message.payload.as_ref()).into_owned();
            ensure!(P, message.delivery_count == 1, "{payload} redelivered");
            ensure!(P, seen.insert(payload.clone()), "{payload} delivered twice");
        }
        if took == 0 && seen.len() == N {
            break;
        }
    }
    ensure!(P, seen.len() == N, "{} of {N} delivered", seen.len());
    let len = stream_len(&r[0]).await;
    ensure!(
        P,
        len == N as u64,
        "the stream holds {len} entries for {N} messages"
    );
}

/// A second publish with the key of a first one within its time to live enqueues nothing and
/// answers the first id; once the time to live is over, the key publishes again.
pub async fn dedupe_within_ttl_not_after<F: PublisherFactory>(f: &F) {
    const P: &str = "dedupe_within_ttl_not_after";
    let (claim, r) = open(f, 1).await;
    let p = f.publisher().await;
    let ttl = claim / 2;
    let once = || outgoing::<F>(b"charge", None, Some(("order-7", ttl)));
    let first = send(&p, vec![once()]).await.remove(0);
    let again = send(&p, vec![once(), once()]).await;
    for second in &again {
        ensure!(P, second.duplicate, "a repeat within the ttl was published");
        ensure!(
            P,
            second.id == first.id,
            "a duplicate answers {} not {}",
            second.id,
            first.id
        );
    }
    ensure!(P, stream_len(&r[0]).await == 1, "duplicates were enqueued");
    let other = send(
        &p,
        vec![outgoing::<F>(b"charge", None, Some(("order-8", ttl)))],
    )
    .await;
    ensure!(P, !other[0].duplicate, "another key is another message");
    f.advance(ttl + margin(claim)).await;
    let later = send(&p, vec![once()]).await.remove(0);
    ensure!(
        P,
        !later.duplicate && later.id != first.id,
        "the key outlived its ttl"
    );
    ensure!(P, stream_len(&r[0]).await == 3, "three messages expected");
}

/// Delayed and deduplicated together: a repeat before the due time answers the delayed
/// message's id, and exactly one message is delivered once it is due.
pub async fn delayed_and_deduplicated<F: PublisherFactory>(f: &F) {
    const P: &str = "delayed_and_deduplicated";
    let (claim, r) = open(f, 1).await;
    let p = f.publisher().await;
    let d = claim / 2;
    let once = || {
        outgoing::<F>(
            b"remind",
            Some(Due::After(d)),
            Some(("remind-3", claim * 4)),
        )
    };
    let first = send(&p, vec![once()]).await.remove(0);
    let second = send(&p, vec![once()]).await.remove(0);
    ensure!(
        P,
        second.duplicate && second.id == first.id,
        "a repeat of a delayed publish enqueued"
    );
    ensure!(
        P,
        delayed(&p).await.len == 1,
        "one delayed message expected"
    );
    f.advance(d + margin(claim)).await;
    let got = fetch(&r[0], 10).await;
    ensure!(P, got.len() == 1, "{} delivered, 1 expected", got.len());
    let third = send(&p, vec![once()]).await.remove(0);
    ensure!(
        P,
        third.duplicate && third.id == first.id,
        "the key lapsed with the delay"
    );
}

/// A due time in the past is due at once; a delay beyond a year is refused whole, with
/// nothing published.
pub async fn due_times_checked<F: PublisherFactory>(f: &F) {
    const P: &str = "due_times_checked";
    let (_, r) = open(f, 1).await;
    let p = f.publisher().await;
    let past = SystemTime::now() - Duration::from_secs(60);
    send(
        &p,
        vec![outgoing::<F>(b"overdue", Some(Due::At(past)), None)],
    )
    .await;
    ensure!(
        P,
        fetch(&r[0], 10).await.len() == 1,
        "a past due time is not at once"
    );
    let refused = p
        .publish_batch(vec![
            outgoing::<F>(b"fine", None, None),
            outgoing::<F>(b"too late", Some(Due::After(MAX_DELAY * 2)), None),
        ])
        .await;
    ensure!(P, refused.is_err(), "a delay of two years was accepted");
    ensure!(
        P,
        refused.is_err_and(|e| !e.is_transient()),
        "refusing a message is no transient error"
    );
    ensure!(
        P,
        stream_len(&r[0]).await == 1,
        "a refused batch published something"
    );
}

/// Runs every publisher property, in order, against `factory` (each on fresh streams): the
/// [`run_all`](crate::run_all) of [`publisher_suite!`](crate::publisher_suite), for a single
/// test or an executor of your own.
pub async fn run_all_publisher<F: PublisherFactory>(factory: &F) {
    delayed_not_before_due(factory).await;
    delayed_delivered_soon_after_due(factory).await;
    delayed_promoted_once_under_racing_consumers(factory).await;
    dedupe_within_ttl_not_after(factory).await;
    delayed_and_deduplicated(factory).await;
    due_times_checked(factory).await;
}

/// Expands to one `#[test]` per publisher property, run as
/// [`backend_suite!`](crate::backend_suite) runs its own.
///
/// ```text
/// leasehold_conformance::publisher_suite!(MyFactory::new());
/// ```
#[macro_export]
macro_rules! publisher_suite {
    ($factory:expr) => {
        $crate::backend_suite!(@each $factory;
            delayed_not_before_due,
            delayed_delivered_soon_after_due,
            delayed_promoted_once_under_racing_consumers,
            dedupe_within_ttl_not_after,
            delayed_and_deduplicated,
            due_times_checked
        );
    };
}
