//! Properties of a [`CommandStore`]: what the command queue relies on from a store of its own.
//!
//! Implement [`CommandStoreFactory`] (a fresh, empty queue per call) and expand
//! [`command_store_suite!`](crate::command_store_suite) in a test file:
//!
//! ```text
//! leasehold_conformance::command_store_suite!(MyStoreFactory::new());
//! ```

use std::collections::HashSet;
use std::future::Future;
use std::time::Duration;

use futures::StreamExt;
use leasehold_commands::{CommandState, CommandStore, Status, Submit};
use leasehold_core::{Backend, LeaseRef};
use serde_json::json;

/// How long a property waits for something that must happen.
const PATIENCE: Duration = Duration::from_secs(10);
/// Claim timeout of the consumers the properties open.
const CLAIM: Duration = Duration::from_secs(1);

/// Opens fresh, empty queues of the store under test.
pub trait CommandStoreFactory: Sync {
    /// The store under test.
    type Store: CommandStore + Clone;

    /// A store on a fresh, empty queue whose stream consumers take a claim timeout of 1 s.
    fn open(&self) -> impl Future<Output = Self::Store> + Send;
}

macro_rules! ensure {
    ($prop:expr, $cond:expr, $($msg:tt)+) => {
        if !$cond {
            panic!("property `{}` violated: {}", $prop, format!($($msg)+));
        }
    };
}

fn submitted(id: &str) -> CommandState {
    // A record as `CommandQueue::submit` makes it (the constructor is the queue's own).
    serde_json::from_value(json!({
        "id": id,
        "kind": "kind",
        "status": "SUBMITTED",
        "params": {"n": 1},
        "created_at": 1,
        "version": 1,
    }))
    .expect("a valid record")
}

fn next(state: &CommandState) -> CommandState {
    let mut next = state.clone();
    next.version += 1;
    next
}

/// Every entry on the queue's stream, fetched (and acked) by one fresh consumer.
async fn drain<S: CommandStore>(prop: &str, store: &S) -> Vec<Vec<u8>> {
    let consumer = store.consumer(CLAIM).await.expect("a stream consumer");
    let mut entries = Vec::new();
    loop {
        let batch = consumer.fetch(100, Duration::ZERO).await.expect("fetch");
        if batch.is_empty() {
            return entries;
        }
        let leases: Vec<_> = batch.iter().map(LeaseRef::from).collect();
        consumer.ack(&leases).await.expect("ack");
        entries.extend(batch.into_iter().map(|m| m.payload.as_ref().to_vec()));
        ensure!(prop, entries.len() < 10_000, "the stream never runs dry");
    }
}

/// Submit writes the state and exactly one stream entry; a second submit of the id returns the
/// existing state and writes nothing.
pub async fn store_submit_is_atomic_and_idempotent(factory: &impl CommandStoreFactory) {
    const PROP: &str = "store_submit_is_atomic_and_idempotent";
    let store = factory.open().await;
    let state = submitted("a");
    let first = store.submit(&state, b"entry-a").await.expect("submit");
    ensure!(PROP, first == Submit::Created, "first submit: {first:?}");
    let loaded = store.load("a").await.expect("load");
    ensure!(PROP, loaded.as_ref() == Some(&state), "stored: {loaded:?}");
    let mut changed = submitted("a");
    changed.params = json!("other");
    let again = store.submit(&changed, b"entry-a2").await.expect("submit");
    ensure!(
        PROP,
        again == Submit::Exists(Box::new(state.clone())),
        "a second submit must return the existing state: {again:?}"
    );
    let entries = drain(PROP, &store).await;
    ensure!(
        PROP,
        entries == [b"entry-a".to_vec()],
        "one entry, the first submit's: {entries:?}"
    );
}

/// Compare-and-set writes only on the previous version, and among concurrent writers of one
/// version exactly one wins.
pub async fn store_compare_and_set_is_a_true_cas(factory: &impl CommandStoreFactory) {
    const PROP: &str = "store_compare_and_set_is_a_true_cas";
    let store = factory.open().await;
    let base = submitted("b");
    store.submit(&base, b"b").await.expect("submit");
    ensure!(
        PROP,
        !store.compare_and_set(&base).await.expect("cas"),
        "a write of the stored version itself must lose"
    );
    ensure!(
        PROP,
        !store
            .compare_and_set(&next(&next(&base)))
            .await
            .expect("cas"),
        "a write that skips a version must lose"
    );
    let writers: Vec<_> = (0..8)
        .map(|i| {
            let store = store.clone();
            let mut write = next(&base);
            write.status = Status::Running;
            write.last_error = Some(format!("writer {i}"));
            async move { (store.compare_and_set(&write).await.expect("cas"), write) }
        })
        .collect();
    let results = futures::future::join_all(writers).await;
    let winners: Vec<_> = results.iter().filter(|(won, _)| *won).collect();
    ensure!(
        PROP,
        winners.len() == 1,
        "{} of 8 concurrent writers of version 2 won",
        winners.len()
    );
    let stored = store.load("b").await.expect("load");
    ensure!(
        PROP,
        stored.as_ref() == Some(&winners[0].1),
        "the winner's write is stored: {stored:?}"
    );
}

/// A compare-and-set on a missing state loses and creates nothing.
pub async fn store_missing_state_is_a_conflict(factory: &impl CommandStoreFactory) {
    const PROP: &str = "store_missing_state_is_a_conflict";
    let store = factory.open().await;
    let ghost = next(&submitted("ghost"));
    ensure!(
        PROP,
        !store.compare_and_set(&ghost).await.expect("cas"),
        "a write to a missing state must lose"
    );
    let loaded = store.load("ghost").await.expect("load");
    ensure!(
        PROP,
        loaded.is_none(),
        "a write must never create a state: {loaded:?}"
    );
}

/// An announced cancel reaches a subscriber.
pub async fn store_cancel_feed_delivers(factory: &impl CommandStoreFactory) {
    const PROP: &str = "store_cancel_feed_delivers";
    let store = factory.open().await;
    let mut feed = store.cancels().await.expect("subscribe");
    store.announce_cancel("c1").await.expect("announce");
    let got = tokio::time::timeout(PATIENCE, feed.next()).await;
    ensure!(
        PROP,
        matches!(&got, Ok(Some(id)) if id == "c1"),
        "the subscriber got {got:?}"
    );
}

/// The stream is a consumer group: two consumers between them get every entry exactly once.
pub async fn store_consumers_share_the_stream(factory: &impl CommandStoreFactory) {
    const PROP: &str = "store_consumers_share_the_stream";
    let store = factory.open().await;
    for i in 0..20 {
        let state = submitted(&format!("s{i}"));
        store
            .submit(&state, format!("s{i}").as_bytes())
            .await
            .expect("submit");
    }
    let a = store.consumer(CLAIM).await.expect("consumer a");
    let b = store.consumer(CLAIM).await.expect("consumer b");
    let mut seen = HashSet::new();
    for consumer in [&a, &b, &a, &b] {
        for message in consumer.fetch(7, Duration::ZERO).await.expect("fetch") {
            let entry = String::from_utf8_lossy(message.payload.as_ref()).into_owned();
            ensure!(PROP, seen.insert(entry.clone()), "{entry} delivered twice");
        }
    }
    ensure!(
        PROP,
        seen.len() == 20,
        "{} of 20 entries delivered",
        seen.len()
    );
}

/// Expands to one `#[tokio::test]` per command-store property. Needs `tokio` (features `rt`,
/// `macros`) in the calling crate.
#[macro_export]
macro_rules! command_store_suite {
    ($factory:expr) => {
        $crate::command_store_suite!(@each $factory;
            store_submit_is_atomic_and_idempotent,
            store_compare_and_set_is_a_true_cas,
            store_missing_state_is_a_conflict,
            store_cancel_feed_delivers,
            store_consumers_share_the_stream
        );
    };
    (@each $factory:expr; $($property:ident),+) => {
        $(
            #[tokio::test]
            async fn $property() {
                let factory = $factory;
                $crate::commands::$property(&factory).await;
            }
        )+
    };
}
