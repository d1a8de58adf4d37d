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
use leasehold_commands::{CommandState, CommandStore, Cursor, Page, Status, Submit};
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

/// `state`'s next version, moved to `status` at status time `at`.
fn moved(state: &CommandState, status: Status, at: u64) -> CommandState {
    let mut next = next(state);
    next.status = status;
    next.status_changed_at = at;
    next
}

/// A fresh SUBMITTED record that entered its status at `at`.
fn submitted_at(id: &str, at: u64) -> CommandState {
    let mut state = submitted(id);
    state.status_changed_at = at;
    state
}

/// Every page of the listing of `status`, `limit` at a time, checking each page's order and
/// size; the states and the number of pages.
async fn list_all<S: CommandStore>(
    prop: &str,
    store: &S,
    status: Status,
    limit: usize,
) -> (Vec<CommandState>, usize) {
    let mut states: Vec<CommandState> = Vec::new();
    let mut page = Page::first(limit);
    for pages in 1..=10_000 {
        let listing = store.list(status, &page).await.expect("list");
        ensure!(
            prop,
            listing.states.len() <= limit,
            "a page of {limit} held {}",
            listing.states.len()
        );
        for state in listing.states {
            ensure!(
                prop,
                state.status == status,
                "{} listed under {status} is {}",
                state.id,
                state.status
            );
            if let Some(previous) = states.last() {
                ensure!(
                    prop,
                    Cursor::of(previous) < Cursor::of(&state),
                    "{status} listed out of (status time, id) order: {} then {}",
                    Cursor::of(previous),
                    Cursor::of(&state)
                );
            }
            states.push(state);
        }
        match listing.next {
            Some(cursor) => page = Page::first(limit).starting_after(cursor),
            None => return (states, pages),
        }
    }
    panic!("property `{prop}` violated: the listing of {status} never ends");
}

fn ids(states: &[CommandState]) -> Vec<String> {
    states.iter().map(|s| s.id.clone()).collect()
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

/// Each status lists exactly the commands in it, with their stored states, in (status time, id)
/// order, whatever the page size: a command appears under its current status only, and ties
/// of status time page correctly.
pub async fn store_lists_commands_by_status(factory: &impl CommandStoreFactory) {
    const PROP: &str = "store_lists_commands_by_status";
    let store = factory.open().await;
    let mut expected: Vec<Vec<CommandState>> = vec![Vec::new(); Status::ALL.len()];
    for i in 0..30u64 {
        // Three commands per status time: ties are ordered by id.
        let state = submitted_at(&format!("c{:02}", 29 - i), 1000 + i / 3);
        store.submit(&state, b"entry").await.expect("submit");
        let state = if i < 12 {
            let running = moved(&state, Status::Running, 2000 + i / 2);
            ensure!(
                PROP,
                store.compare_and_set(&running).await.expect("cas"),
                "RUNNING"
            );
            let status = match i {
                0..=3 => Status::Succeeded,
                4 | 5 => Status::Failed,
                6 => Status::Cancelled,
                _ => Status::Running,
            };
            if status == Status::Running {
                running
            } else {
                let done = moved(&running, status, 3000 + i % 2);
                ensure!(
                    PROP,
                    store.compare_and_set(&done).await.expect("cas"),
                    "{status}"
                );
                done
            }
        } else {
            state
        };
        let slot = Status::ALL
            .iter()
            .position(|s| *s == state.status)
            .expect("a status");
        expected[slot].push(state);
    }
    for (status, expected) in Status::ALL.into_iter().zip(&mut expected) {
        expected.sort_by_key(Cursor::of);
        for limit in [1, 2, 3, 7, 100] {
            let (listed, pages) = list_all(PROP, &store, status, limit).await;
            ensure!(
                PROP,
                listed == *expected,
                "{status} by pages of {limit}: listed {:?}, stored {:?}",
                ids(&listed),
                ids(expected)
            );
            ensure!(
                PROP,
                pages <= expected.len() / limit + 2,
                "{status}: {pages} pages of {limit} for {} commands",
                expected.len()
            );
        }
    }
    // A cursor of a command no longer listed (c18 is RUNNING), or of none at all, still pages
    // on from its place.
    for (at, id, expected) in [
        (1003, "c18", ["c15", "c16"]),
        (1004, "c155", ["c16", "c17"]),
    ] {
        let cursor = Cursor { at, id: id.into() };
        let listing = store
            .list(Status::Submitted, &Page::first(2).starting_after(cursor))
            .await
            .expect("list");
        ensure!(
            PROP,
            ids(&listing.states) == expected,
            "after ({at}, {id}): {:?}",
            ids(&listing.states)
        );
    }
}

/// Paging through a status while commands leave it, and new ones enter it, sees every command
/// that stays exactly once, never one after it left, and the newcomers (they sort last).
pub async fn store_paging_survives_moves(factory: &impl CommandStoreFactory) {
    const PROP: &str = "store_paging_survives_moves";
    let store = factory.open().await;
    let mut states = Vec::new();
    for i in 0..40u64 {
        let state = submitted_at(&format!("p{i:02}"), 1000 + i / 4);
        store.submit(&state, b"entry").await.expect("submit");
        states.push(state);
    }
    let mut seen: Vec<String> = Vec::new();
    let mut left = HashSet::new();
    let mut page = Page::first(6);
    let mut round = 0u64;
    loop {
        let listing = store.list(Status::Submitted, &page).await.expect("list");
        for state in &listing.states {
            ensure!(
                PROP,
                !left.contains(&state.id),
                "{} listed after it left",
                state.id
            );
            ensure!(PROP, !seen.contains(&state.id), "{} listed twice", state.id);
            seen.push(state.id.clone());
        }
        // Between pages: one listed and one not yet listed command leave, one enters.
        round += 1;
        let mut leavers: Vec<usize> = Vec::new();
        if let Some(last) = listing.states.first() {
            leavers.push(states.iter().position(|s| s.id == last.id).expect("known"));
        }
        if let Some(ahead) = states
            .iter()
            .rposition(|s| s.status == Status::Submitted && !seen.contains(&s.id))
        {
            leavers.push(ahead);
        }
        for index in leavers {
            let running = moved(&states[index], Status::Running, 5000 + round);
            ensure!(
                PROP,
                store.compare_and_set(&running).await.expect("cas"),
                "leave"
            );
            left.insert(running.id.clone());
            states[index] = running;
        }
        if round <= 5 {
            let newcomer = submitted_at(&format!("n{round}"), 9000 + round);
            store.submit(&newcomer, b"entry").await.expect("submit");
            states.push(newcomer);
        }
        match listing.next {
            Some(cursor) => page = Page::first(6).starting_after(cursor),
            None => break,
        }
        ensure!(PROP, round < 1000, "the listing never ends");
    }
    for state in &states {
        if state.status == Status::Submitted {
            ensure!(
                PROP,
                seen.contains(&state.id),
                "{} stayed SUBMITTED, never listed",
                state.id
            );
        }
    }
    let (now, _) = list_all(PROP, &store, Status::Submitted, 1000).await;
    let mut expected: Vec<_> = states
        .iter()
        .filter(|s| s.status == Status::Submitted)
        .cloned()
        .collect();
    expected.sort_by_key(Cursor::of);
    ensure!(
        PROP,
        now == expected,
        "afterwards: {:?}, stored {:?}",
        ids(&now),
        ids(&expected)
    );
}

/// A requeue writes the state with compare-and-set and enqueues its entry with it: a stale
/// version writes and enqueues nothing, and of concurrent requeues of one version exactly one
/// writes and exactly one entry is added. The command moves to its new status's listing.
pub async fn store_requeue_is_one_compare_and_set_with_its_entry(
    factory: &impl CommandStoreFactory,
) {
    const PROP: &str = "store_requeue_is_one_compare_and_set_with_its_entry";
    let store = factory.open().await;
    let base = submitted_at("r", 10);
    store.submit(&base, b"submitted").await.expect("submit");
    let failed = moved(&base, Status::Failed, 20);
    ensure!(
        PROP,
        store.compare_and_set(&failed).await.expect("cas"),
        "FAILED"
    );
    ensure!(
        PROP,
        drain(PROP, &store).await == [b"submitted".to_vec()],
        "the submit's entry"
    );
    let stale = moved(&base, Status::Submitted, 30);
    ensure!(
        PROP,
        !store.requeue(&stale, b"stale").await.expect("requeue"),
        "a requeue of a stale version must lose"
    );
    let ghost = moved(&submitted("ghost"), Status::Submitted, 30);
    ensure!(
        PROP,
        !store.requeue(&ghost, b"ghost").await.expect("requeue"),
        "a requeue of a missing state must lose"
    );
    let racers: Vec<_> = (0..8)
        .map(|i| {
            let store = store.clone();
            let mut write = moved(&failed, Status::Submitted, 40 + i);
            write.retries = 1;
            let entry = format!("retry-{i}");
            async move {
                let won = store
                    .requeue(&write, entry.as_bytes())
                    .await
                    .expect("requeue");
                (won, write, entry)
            }
        })
        .collect();
    let results = futures::future::join_all(racers).await;
    let winners: Vec<_> = results.iter().filter(|(won, ..)| *won).collect();
    ensure!(
        PROP,
        winners.len() == 1,
        "{} of 8 concurrent requeues of one version won",
        winners.len()
    );
    let (_, written, entry) = winners[0];
    let entries = drain(PROP, &store).await;
    ensure!(
        PROP,
        entries == [entry.as_bytes().to_vec()],
        "one entry, the winner's: {:?}",
        entries
            .iter()
            .map(|e| String::from_utf8_lossy(e).into_owned())
            .collect::<Vec<_>>()
    );
    let stored = store.load("r").await.expect("load");
    ensure!(PROP, stored.as_ref() == Some(written), "stored: {stored:?}");
    let (failed_now, _) = list_all(PROP, &store, Status::Failed, 10).await;
    let (submitted_now, _) = list_all(PROP, &store, Status::Submitted, 10).await;
    ensure!(
        PROP,
        failed_now.is_empty(),
        "still FAILED: {:?}",
        ids(&failed_now)
    );
    ensure!(
        PROP,
        submitted_now == [written.clone()],
        "SUBMITTED: {:?}",
        ids(&submitted_now)
    );
}

/// Runs every command-store property, in order, against `factory`: the
/// [`run_all`](crate::run_all) of [`command_store_suite!`](crate::command_store_suite). Some
/// properties wait with tokio's timer, so this must run inside a tokio runtime.
pub async fn run_all<F: CommandStoreFactory>(factory: &F) {
    store_submit_is_atomic_and_idempotent(factory).await;
    store_compare_and_set_is_a_true_cas(factory).await;
    store_missing_state_is_a_conflict(factory).await;
    store_cancel_feed_delivers(factory).await;
    store_consumers_share_the_stream(factory).await;
    store_lists_commands_by_status(factory).await;
    store_paging_survives_moves(factory).await;
    store_requeue_is_one_compare_and_set_with_its_entry(factory).await;
}

/// Expands to one `#[test]` per command-store property, run on a current-thread tokio runtime
/// the suite provides (as [`backend_suite!`](crate::backend_suite) runs its own): the calling
/// crate needs no `tokio` dependency for it.
#[macro_export]
macro_rules! command_store_suite {
    ($factory:expr) => {
        $crate::command_store_suite!(@each $factory;
            store_submit_is_atomic_and_idempotent,
            store_compare_and_set_is_a_true_cas,
            store_missing_state_is_a_conflict,
            store_cancel_feed_delivers,
            store_consumers_share_the_stream,
            store_lists_commands_by_status,
            store_paging_survives_moves,
            store_requeue_is_one_compare_and_set_with_its_entry
        );
    };
    (@each $factory:expr; $($property:ident),+) => {
        $(
            #[test]
            fn $property() {
                $crate::__block_on(async {
                    let factory = $factory;
                    $crate::commands::$property(&factory).await;
                });
            }
        )+
    };
}
