//! Conformance suite for leasehold backends: the lease guarantees of the
//! [`Backend`] SPI, one property per function, runnable from a backend author's own tests.
//!
//! Implement [`BackendFactory`] for your backend (it opens N handles, one per replica, on one
//! fresh stream, and lets time pass), then expand [`backend_suite!`] in a test file:
//!
//! ```text
//! use leasehold_conformance::backend_suite;
//! backend_suite!(MyFactory::new());
//! ```
//!
//! That yields one plain `#[test]` per property, run on a current-thread tokio runtime the
//! suite builds: your crate needs no `tokio` dependency for the macros (only for what your
//! factory does itself, such as sleeping in `advance`). Each property is also a plain
//! `pub async fn` taking `&impl BackendFactory`, and each suite has a `run_all`-style function
//! running all of its properties in turn ([`run_all`], [`run_all_publisher`],
//! [`run_all_groups`], [`run_all_worker`]), so you may run them under any executor (the
//! worker-level ones run `leasehold-tokio` workers, so they need a tokio runtime). A violated
//! property panics with a message naming the property and what happened
//! ("property `round_trip` violated: ...").
//!
//! The properties are written to hold on real-time backends (Redis: claim timeout ~1 s, `advance`
//! sleeps) as well as on virtual time (memory backend with a manual clock): "not before the
//! claim timeout" is checked at half the claim timeout or immediately after a fetch, and "after"
//! with a quarter claim timeout of margin.
//!
//! Besides the lease operations, the backend properties pin down what a backend is most easily
//! wrong about: a fetch shares itself between lapsed leases and new messages, so neither kind
//! starves the other ([`reclaims_and_new_share_fetches`], [`reclaim_does_not_starve`]);
//! `pending()` counts delivered, unsettled messages only ([`pending_counts_only_delivered`]); and
//! a lease that lapsed but that no peer took is still its owner's, so its renew is `Kept`
//! ([`lapsed_lease_untaken_is_still_owned`]). `tests/broken.rs` shows each property failing on
//! a backend broken the way it guards against.
//!
//! The worker-level properties (`worker_*`, [`consume_compat`]) run a real `leasehold-tokio`
//! worker over the backend and need a real-time factory; expand [`backend_worker_suite!`] for them.
//!
//! A backend whose stream also takes delayed and deduplicated messages implements
//! [`PublisherFactory`] too and expands [`publisher_suite!`]. One whose streams may have several
//! consumer groups implements [`GroupsFactory`] and expands [`groups_suite!`]: no group ever
//! loses an entry to another group's ack.
//!
//! With the `commands` feature, the `commands` module does the same for a command-queue store
//! (`leasehold_commands::CommandStore`): expand `command_store_suite!`. Without it the suite
//! needs neither the command queue nor a Redis client.
//!
//! See `conformance/GUIDE.md` for the SPI contract method by method.

#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

/// The backend guide's code blocks, compiled and run as doc tests so they cannot drift from the
/// API. Only in doc tests: the guide is outside this crate's folder, so it is not packaged.
#[cfg(doctest)]
#[doc = include_str!("../../GUIDE.md")]
pub struct GuideExamples;

#[cfg(feature = "commands")]
pub mod commands;

use std::collections::HashSet;
use std::future::Future;
use std::task::Poll;
use std::time::Duration;

use leasehold_core::{
    Backend, DeadLetterReason, Fetched, LeaseRef, MessageId, RenewResult, SettleResult,
};

/// Opens handles on fresh streams of the backend under test and lets time pass.
pub trait BackendFactory: Sync {
    /// The backend under test. Payloads are built from bytes and compared as bytes.
    type Backend: Backend<Payload: From<Vec<u8>> + AsRef<[u8]>>;

    /// The claim timeout the properties use. Virtual-time backends may use anything (e.g. 30 s);
    /// real-time ones should keep it short (~1 s) so the suite stays fast, but long enough that
    /// a round trip is a small fraction of it.
    fn claim_timeout(&self) -> Duration;

    /// `replicas` handles (distinct consumers of one consumer group) on one fresh, empty stream
    /// whose claim timeout is `claim_timeout`.
    fn open(
        &self,
        claim_timeout: Duration,
        replicas: usize,
    ) -> impl Future<Output = Vec<Self::Backend>> + Send;

    /// Lets `d` pass on the backend's clock: advance a manual clock, or sleep for real.
    fn advance(&self, d: Duration) -> impl Future<Output = ()> + Send;

    /// Optional inspection: the dead letters of the stream most recently opened by
    /// [`open`](Self::open), in order of arrival, or `None` (the default) if the factory cannot
    /// inspect them. When `Some`, the properties check each dead letter's original id, reason
    /// text and delivery count.
    fn dead_letters(&self) -> impl Future<Output = Option<Vec<DeadLetterInfo>>> + Send {
        async { None }
    }
}

/// One dead-lettered message as the backend recorded it, for
/// [`BackendFactory::dead_letters`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetterInfo {
    /// Its id in the stream it came from.
    pub original_id: MessageId,
    /// Why it was dead-lettered: the `Display` text of the [`DeadLetterReason`].
    pub reason: String,
    /// Its delivery count when it was dead-lettered.
    pub delivery_count: u32,
}

/// Fails the current property with a clear message.
macro_rules! ensure {
    ($prop:expr, $cond:expr, $($msg:tt)+) => {
        if !$cond {
            panic!("property `{}` violated: {}", $prop, format!($($msg)+));
        }
    };
}

mod publish;
pub use publish::{
    dedupe_within_ttl_not_after, delayed_and_deduplicated, delayed_delivered_soon_after_due,
    delayed_not_before_due, delayed_promoted_once_under_racing_consumers, due_times_checked,
    run_all_publisher, PublisherFactory,
};

mod groups;
pub use groups::{
    ack_in_one_group_leaves_the_others_entries, crashed_groups_entries_wait_for_it,
    groups_each_get_every_entry, late_group_gets_what_follows, GroupsFactory,
};

mod worker;
pub use worker::{
    consume_compat, worker_backpressure_and_serial, worker_crash_failover,
    worker_no_reclaim_of_live_work, worker_pending_repoll, worker_prefetch_hands_back,
    worker_shutdown_hands_back,
};

fn lease_ref<P>(message: &Fetched<P>) -> LeaseRef {
    LeaseRef::from(message)
}

fn payload<B: Backend<Payload: From<Vec<u8>>>>(bytes: &[u8]) -> B::Payload {
    B::Payload::from(bytes.to_vec())
}

async fn open<F: BackendFactory>(f: &F, replicas: usize) -> (Duration, Vec<F::Backend>) {
    let claim = f.claim_timeout();
    let handles = f.open(claim, replicas).await;
    assert_eq!(
        handles.len(),
        replicas,
        "factory opened {} handles, {replicas} asked",
        handles.len()
    );
    (claim, handles)
}

async fn publish<B: Backend<Payload: From<Vec<u8>>>>(b: &B, bytes: &[u8]) -> MessageId {
    b.publish(payload::<B>(bytes))
        .await
        .expect("publish failed")
}

async fn fetch<B: Backend>(b: &B, max: usize) -> Vec<Fetched<B::Payload>> {
    b.fetch(max, Duration::ZERO)
        .await
        .expect("fetch failed")
        .messages
}

async fn renew<B: Backend>(b: &B, lease_refs: &[LeaseRef]) -> Vec<RenewResult> {
    b.renew(lease_refs).await.expect("renew failed")
}

async fn ack<B: Backend>(b: &B, lease_refs: &[LeaseRef]) -> Vec<SettleResult> {
    b.ack(lease_refs).await.expect("ack failed")
}

async fn stream_len<B: Backend>(b: &B) -> u64 {
    b.stream_len().await.expect("stream_len failed")
}

async fn pending<B: Backend>(b: &B) -> u64 {
    b.pending().await.expect("pending failed")
}

/// Margin added to "after the claim timeout / delay" so real-time backends are not flaky.
fn margin(claim: Duration) -> Duration {
    claim / 4
}

/// Publishes one message on `a`, fetches it on `a`, lets the claim timeout lapse and has `b`
/// take it over. Returns (a's stale delivery, b's delivery).
async fn taken_over<F: BackendFactory>(
    prop: &str,
    f: &F,
    a: &F::Backend,
    b: &F::Backend,
    claim: Duration,
) -> (
    Fetched<<F::Backend as Backend>::Payload>,
    Fetched<<F::Backend as Backend>::Payload>,
) {
    publish(a, b"job").await;
    let mut first = fetch(a, 1).await;
    ensure!(
        prop,
        first.len() == 1,
        "a fetched {} of 1 new message",
        first.len()
    );
    f.advance(claim + margin(claim)).await;
    let mut second = fetch(b, 1).await;
    ensure!(
        prop,
        second.len() == 1,
        "replica b could not take over a lease left unrenewed past the claim timeout"
    );
    let (old, new) = (first.remove(0), second.remove(0));
    ensure!(prop, old.id == new.id, "b took a different message");
    ensure!(
        prop,
        old.fence != new.fence,
        "a takeover must change the fence (both {:?})",
        new.fence
    );
    (old, new)
}

/// Publishes `n` messages on `a`, fetches them all on `a` and lets their leases lapse
/// unrenewed. Returns their ids.
async fn lapsed_backlog<F: BackendFactory>(
    prop: &str,
    f: &F,
    a: &F::Backend,
    claim: Duration,
    n: usize,
) -> HashSet<MessageId> {
    for i in 0..n {
        publish(a, format!("stale {i}").as_bytes()).await;
    }
    let mut stale = HashSet::new();
    while stale.len() < n {
        let batch = fetch(a, 5).await;
        ensure!(
            prop,
            !batch.is_empty(),
            "a got {} of {n} new messages",
            stale.len()
        );
        stale.extend(batch.into_iter().map(|m| m.id));
    }
    f.advance(claim + margin(claim)).await;
    stale
}

/// publish → fetch → ack: the payload comes back intact with delivery count 1, and after the
/// ack the message is gone (`stream_len` and `pending` 0, never fetched again).
pub async fn round_trip<F: BackendFactory>(f: &F) {
    const P: &str = "round_trip";
    let (claim, r) = open(f, 1).await;
    let a = &r[0];
    let id = publish(a, b"hello").await;
    ensure!(P, stream_len(a).await == 1, "stream_len after one publish");
    let batch = fetch(a, 10).await;
    ensure!(
        P,
        batch.len() == 1,
        "fetched {} messages, 1 published",
        batch.len()
    );
    let m = &batch[0];
    ensure!(P, m.id == id, "fetched id {} but published {}", m.id, id);
    ensure!(
        P,
        m.payload.as_ref() == b"hello",
        "payload changed on the way"
    );
    ensure!(
        P,
        m.delivery_count == 1,
        "first delivery count is {}",
        m.delivery_count
    );
    ensure!(
        P,
        pending(a).await == 1,
        "a fetched message must be pending"
    );
    ensure!(
        P,
        ack(a, &[lease_ref(m)]).await == [SettleResult::Ok],
        "owner's ack refused"
    );
    ensure!(
        P,
        stream_len(a).await == 0,
        "acked message still in the stream"
    );
    ensure!(P, pending(a).await == 0, "acked message still pending");
    f.advance(claim + margin(claim)).await;
    ensure!(
        P,
        fetch(a, 10).await.is_empty(),
        "acked message delivered again"
    );
}

/// Two publishes of the same payload are two messages with distinct ids, each delivered and
/// acked on its own.
pub async fn identical_payloads_stay_distinct<F: BackendFactory>(f: &F) {
    const P: &str = "identical_payloads_stay_distinct";
    let (_, r) = open(f, 1).await;
    let a = &r[0];
    let id1 = publish(a, b"same").await;
    let id2 = publish(a, b"same").await;
    ensure!(P, id1 != id2, "equal payloads got the same id {id1}");
    ensure!(
        P,
        stream_len(a).await == 2,
        "stream_len after two equal publishes"
    );
    let batch = fetch(a, 10).await;
    ensure!(
        P,
        batch.len() == 2,
        "fetched {} of 2 equal messages",
        batch.len()
    );
    ensure!(
        P,
        ack(a, &[lease_ref(&batch[0])]).await == [SettleResult::Ok],
        "ack of the first"
    );
    ensure!(
        P,
        stream_len(a).await == 1,
        "acking one of two equal messages removed both"
    );
    ensure!(
        P,
        ack(a, &[lease_ref(&batch[1])]).await == [SettleResult::Ok],
        "ack of the second"
    );
}

/// Renewing every half claim timeout keeps a lease alive well past the claim timeout: no other
/// replica can take it, and the owner can still ack it.
pub async fn renew_keeps_lease_alive<F: BackendFactory>(f: &F) {
    const P: &str = "renew_keeps_lease_alive";
    let (claim, r) = open(f, 2).await;
    let (a, b) = (&r[0], &r[1]);
    publish(a, b"job").await;
    let m = fetch(a, 1).await.remove(0);
    for round in 1..=3 {
        f.advance(claim / 2).await;
        ensure!(
            P,
            renew(a, &[lease_ref(&m)]).await == [RenewResult::Kept],
            "renew {round} lost"
        );
        ensure!(
            P,
            fetch(b, 1).await.is_empty(),
            "b took a lease renewed every half claim timeout (after {round} renews)"
        );
    }
    ensure!(
        P,
        ack(a, &[lease_ref(&m)]).await == [SettleResult::Ok],
        "ack after renews refused"
    );
}

/// An unrenewed lease is not reclaimable right after the fetch nor at half the claim timeout,
/// and is reclaimable by another replica after the claim timeout, with delivery count 2.
pub async fn unrenewed_lease_reclaimable_after_timeout<F: BackendFactory>(f: &F) {
    const P: &str = "unrenewed_lease_reclaimable_after_timeout";
    let (claim, r) = open(f, 2).await;
    let (a, b) = (&r[0], &r[1]);
    publish(a, b"job").await;
    let m = fetch(a, 1).await.remove(0);
    ensure!(
        P,
        fetch(b, 1).await.is_empty(),
        "b took a lease right after a fetched it"
    );
    f.advance(claim / 2).await;
    ensure!(
        P,
        fetch(b, 1).await.is_empty(),
        "b took a lease at half the claim timeout"
    );
    f.advance(claim / 2 + margin(claim)).await;
    let taken = fetch(b, 1).await;
    ensure!(
        P,
        taken.len() == 1,
        "b could not take a lease idle past the claim timeout"
    );
    ensure!(P, taken[0].id == m.id, "b took a different message");
    ensure!(
        P,
        taken[0].delivery_count == 2,
        "delivery count after one takeover is {}",
        taken[0].delivery_count
    );
}

/// After a takeover, renew by the former owner (stale fence) and by a non-owner presenting the
/// current fence both report `Lost` and leave the entry with the new owner.
pub async fn renew_by_non_owner_is_lost<F: BackendFactory>(f: &F) {
    const P: &str = "renew_by_non_owner_is_lost";
    let (claim, r) = open(f, 2).await;
    let (a, b) = (&r[0], &r[1]);
    let (old, new) = taken_over(P, f, a, b, claim).await;
    ensure!(
        P,
        renew(a, &[lease_ref(&old)]).await == [RenewResult::Lost],
        "stale renew kept"
    );
    ensure!(
        P,
        renew(a, &[lease_ref(&new)]).await == [RenewResult::Lost],
        "renew by a non-owner with the current fence kept"
    );
    ensure!(
        P,
        renew(b, &[lease_ref(&new)]).await == [RenewResult::Kept],
        "owner lost its lease"
    );
    ensure!(
        P,
        fetch(a, 1).await.is_empty(),
        "a non-owner's renew moved the entry to it"
    );
    ensure!(
        P,
        ack(b, &[lease_ref(&new)]).await == [SettleResult::Ok],
        "owner's ack refused"
    );
}

/// Ack by a former owner (stale fence), by a non-owner with the current fence, and by the same
/// consumer with the fence of an earlier delivery never removes the entry; the current owner's
/// ack does.
pub async fn ack_by_non_owner_keeps_entry<F: BackendFactory>(f: &F) {
    const P: &str = "ack_by_non_owner_keeps_entry";
    let (claim, r) = open(f, 2).await;
    let (a, b) = (&r[0], &r[1]);
    let (old, new) = taken_over(P, f, a, b, claim).await;
    ensure!(
        P,
        ack(a, &[lease_ref(&old)]).await == [SettleResult::Lost],
        "stale ack accepted"
    );
    ensure!(
        P,
        ack(a, &[lease_ref(&new)]).await == [SettleResult::Lost],
        "ack by a non-owner with the current fence accepted"
    );
    ensure!(
        P,
        stream_len(a).await == 1,
        "a refused ack removed the entry"
    );
    ensure!(P, pending(a).await == 1, "a refused ack settled the entry");
    // The same consumer, reclaiming its own lapsed lease: the earlier fence is stale.
    f.advance(claim + margin(claim)).await;
    let again = fetch(b, 1).await;
    ensure!(
        P,
        again.len() == 1,
        "b could not reclaim its own lapsed lease"
    );
    ensure!(
        P,
        ack(b, &[lease_ref(&new)]).await == [SettleResult::Lost],
        "the owner's ack with the fence of an earlier delivery accepted"
    );
    ensure!(
        P,
        stream_len(b).await == 1,
        "a stale-fence ack removed the entry"
    );
    ensure!(
        P,
        ack(b, &[lease_ref(&again[0])]).await == [SettleResult::Ok],
        "owner's ack refused"
    );
    ensure!(
        P,
        stream_len(b).await == 0,
        "owner's ack did not remove the entry"
    );
}

/// Release with a delay makes the message claimable by any replica after the delay and not at
/// once; release with delay 0 makes it claimable at once. A stale release is `Lost`.
pub async fn release_with_delay<F: BackendFactory>(f: &F) {
    const P: &str = "release_with_delay";
    let (claim, r) = open(f, 2).await;
    let (a, b) = (&r[0], &r[1]);
    publish(a, b"job").await;
    let m = fetch(a, 1).await.remove(0);
    let delay = claim / 2;
    let released = a
        .release(&lease_ref(&m), delay)
        .await
        .expect("release failed");
    ensure!(
        P,
        released == SettleResult::Ok,
        "owner's release refused: {released:?}"
    );
    ensure!(
        P,
        fetch(b, 1).await.is_empty(),
        "released message claimable before its delay"
    );
    f.advance(delay + margin(claim)).await;
    let taken = fetch(b, 1).await;
    ensure!(
        P,
        taken.len() == 1,
        "released message not claimable after its delay"
    );
    ensure!(P, taken[0].id == m.id, "b took a different message");
    let stale = a
        .release(&lease_ref(&m), Duration::ZERO)
        .await
        .expect("release failed");
    ensure!(
        P,
        stale == SettleResult::Lost,
        "stale release accepted: {stale:?}"
    );
    let now = b
        .release(&lease_ref(&taken[0]), Duration::ZERO)
        .await
        .expect("release failed");
    ensure!(
        P,
        now == SettleResult::Ok,
        "owner's release(0) refused: {now:?}"
    );
    let again = fetch(a, 1).await;
    ensure!(
        P,
        again.len() == 1,
        "message released with delay 0 not claimable at once"
    );
    ensure!(
        P,
        ack(a, &[lease_ref(&again[0])]).await == [SettleResult::Ok],
        "ack refused"
    );
}

/// Dead-lettering removes the message from the stream and from pending, and it is never
/// delivered again; a stale dead-letter is `Lost` and changes nothing. Where the dead letter
/// lands is backend-specific, outside the SPI; if the factory can inspect it
/// ([`BackendFactory::dead_letters`]), the stale dead-letter recorded nothing and the owner's
/// recorded exactly one, with the original id, the reason's text and the delivery count (2).
pub async fn dead_letter_removes_message<F: BackendFactory>(f: &F) {
    const P: &str = "dead_letter_removes_message";
    let (claim, r) = open(f, 2).await;
    let (a, b) = (&r[0], &r[1]);
    let (old, new) = taken_over(P, f, a, b, claim).await;
    let reason = DeadLetterReason::Rejected("conformance".into());
    let stale = a
        .dead_letter(&lease_ref(&old), &reason)
        .await
        .expect("dead_letter failed");
    ensure!(
        P,
        stale == SettleResult::Lost,
        "stale dead-letter accepted: {stale:?}"
    );
    ensure!(
        P,
        stream_len(a).await == 1,
        "a stale dead-letter removed the entry"
    );
    if let Some(dead) = f.dead_letters().await {
        ensure!(
            P,
            dead.is_empty(),
            "a stale dead-letter recorded dead letters: {dead:?}"
        );
    }
    let done = b
        .dead_letter(&lease_ref(&new), &reason)
        .await
        .expect("dead_letter failed");
    ensure!(
        P,
        done == SettleResult::Ok,
        "owner's dead-letter refused: {done:?}"
    );
    ensure!(
        P,
        stream_len(a).await == 0,
        "dead-lettered message still in the stream"
    );
    ensure!(
        P,
        pending(a).await == 0,
        "dead-lettered message still pending"
    );
    if let Some(dead) = f.dead_letters().await {
        let expected = DeadLetterInfo {
            original_id: new.id.clone(),
            reason: reason.to_string(),
            delivery_count: new.delivery_count,
        };
        ensure!(
            P,
            new.delivery_count == 2,
            "delivery count after one takeover is {}",
            new.delivery_count
        );
        ensure!(
            P,
            dead == [expected.clone()],
            "dead letters are {dead:?}, expected just {expected:?}"
        );
    }
    f.advance(claim + margin(claim)).await;
    ensure!(
        P,
        fetch(a, 10).await.is_empty(),
        "dead-lettered message delivered to a"
    );
    ensure!(
        P,
        fetch(b, 10).await.is_empty(),
        "dead-lettered message delivered to b"
    );
}

/// The delivery count is 1 on first delivery, is unchanged by renews, and grows by one on each
/// takeover; every takeover has a new fence.
pub async fn delivery_count_grows_on_takeover_not_renew<F: BackendFactory>(f: &F) {
    const P: &str = "delivery_count_grows_on_takeover_not_renew";
    let (claim, r) = open(f, 2).await;
    let (a, b) = (&r[0], &r[1]);
    publish(a, b"job").await;
    let m1 = fetch(a, 1).await.remove(0);
    ensure!(
        P,
        m1.delivery_count == 1,
        "first delivery count {}",
        m1.delivery_count
    );
    for _ in 0..2 {
        f.advance(claim / 2).await;
        ensure!(
            P,
            renew(a, &[lease_ref(&m1)]).await == [RenewResult::Kept],
            "renew lost"
        );
    }
    f.advance(claim + margin(claim)).await;
    let m2 = fetch(b, 1).await;
    ensure!(P, m2.len() == 1, "b could not take over");
    ensure!(
        P,
        m2[0].delivery_count == 2,
        "delivery count after two renews and one takeover is {} (renews must not count)",
        m2[0].delivery_count
    );
    f.advance(claim + margin(claim)).await;
    let m3 = fetch(a, 1).await;
    ensure!(P, m3.len() == 1, "a could not take back over");
    ensure!(
        P,
        m3[0].delivery_count == 3,
        "count after two takeovers {}",
        m3[0].delivery_count
    );
    let fences: HashSet<_> = [m1.fence, m2[0].fence, m3[0].fence].into_iter().collect();
    ensure!(
        P,
        fences.len() == 3,
        "fences repeat across deliveries: {fences:?}"
    );
}

/// In a batch mixing held and lost leases, renew and ack answer per lease, in order: the held
/// ones succeed, the lost one is `Lost`, and nothing is all-or-nothing.
pub async fn results_are_per_lease<F: BackendFactory>(f: &F) {
    const P: &str = "results_are_per_lease";
    let (claim, r) = open(f, 2).await;
    let (a, b) = (&r[0], &r[1]);
    let (old, new) = taken_over(P, f, a, b, claim).await;
    publish(a, b"two").await;
    publish(a, b"three").await;
    let held = fetch(a, 10).await;
    ensure!(
        P,
        held.len() == 2,
        "a fetched {} of 2 new messages",
        held.len()
    );
    let batch = [lease_ref(&held[0]), lease_ref(&old), lease_ref(&held[1])];
    let renewed = renew(a, &batch).await;
    ensure!(
        P,
        renewed == [RenewResult::Kept, RenewResult::Lost, RenewResult::Kept],
        "mixed renew answered {renewed:?}"
    );
    let acked = ack(a, &batch).await;
    ensure!(
        P,
        acked == [SettleResult::Ok, SettleResult::Lost, SettleResult::Ok],
        "mixed ack answered {acked:?}"
    );
    ensure!(
        P,
        pending(a).await == 1 && stream_len(a).await >= 1,
        "the lost lease's entry must remain, pending for its owner"
    );
    ensure!(
        P,
        ack(b, &[lease_ref(&new)]).await == [SettleResult::Ok],
        "owner's ack refused"
    );
}

/// `fetch(max)` never returns more than `max` messages, whether new or reclaimed, and
/// `fetch(0)` returns none.
pub async fn fetch_never_exceeds_max<F: BackendFactory>(f: &F) {
    const P: &str = "fetch_never_exceeds_max";
    let (claim, r) = open(f, 2).await;
    let (a, b) = (&r[0], &r[1]);
    for i in 0..10u8 {
        publish(a, &[i]).await;
    }
    let zero = fetch(a, 0).await.len();
    ensure!(P, zero == 0, "fetch(0) returned {zero} messages");
    let mut seen = HashSet::new();
    for _ in 0..10 {
        let batch = fetch(a, 3).await;
        ensure!(
            P,
            batch.len() <= 3,
            "fetch(3) of new messages returned {}",
            batch.len()
        );
        seen.extend(batch.into_iter().map(|m| m.id));
    }
    ensure!(
        P,
        seen.len() == 10,
        "a got {} distinct of 10 messages",
        seen.len()
    );
    f.advance(claim + margin(claim)).await;
    let zero = fetch(b, 0).await.len();
    ensure!(
        P,
        zero == 0,
        "fetch(0) with reclaimable messages returned {zero}"
    );
    let mut taken = HashSet::new();
    for _ in 0..10 {
        let batch = fetch(b, 4).await;
        ensure!(
            P,
            batch.len() <= 4,
            "fetch(4) of reclaimable messages returned {}",
            batch.len()
        );
        taken.extend(batch.into_iter().map(|m| m.id));
    }
    ensure!(
        P,
        taken == seen,
        "b reclaimed {} of 10 lapsed messages",
        taken.len()
    );
}

/// Many lapsed leases and a small `max`, with new messages arriving meanwhile: successive
/// fetches reclaim every lapsed one (the scan moves on) and still deliver the new ones.
pub async fn reclaim_does_not_starve<F: BackendFactory>(f: &F) {
    const P: &str = "reclaim_does_not_starve";
    const STALE: usize = 20;
    let (claim, r) = open(f, 2).await;
    let (a, b) = (&r[0], &r[1]);
    let stale = lapsed_backlog(P, f, a, claim, STALE).await;
    let (mut reclaimed, mut fresh, mut published) = (HashSet::new(), HashSet::new(), 0);
    // 3 per fetch, one new message per round: 20 reclaims + up to 30 new ones fit in 17 rounds.
    for _ in 0..30 {
        if reclaimed.len() == STALE {
            break;
        }
        publish(a, format!("fresh {published}").as_bytes()).await;
        published += 1;
        for m in fetch(b, 3).await {
            if stale.contains(&m.id) {
                ensure!(
                    P,
                    m.delivery_count == 2,
                    "reclaim count {}",
                    m.delivery_count
                );
                reclaimed.insert(m.id);
            } else {
                fresh.insert(m.id);
            }
        }
    }
    ensure!(
        P,
        reclaimed.len() == STALE,
        "after 30 fetches of 3, b reclaimed {} of {STALE} lapsed messages",
        reclaimed.len()
    );
    for _ in 0..published {
        if fresh.len() == published {
            break;
        }
        fresh.extend(fetch(b, 3).await.into_iter().map(|m| m.id));
    }
    ensure!(
        P,
        fresh.len() == published,
        "new messages starved: b got {} of {published}",
        fresh.len()
    );
}

/// How many fetches in a row one kind of delivery (reclaims, new messages) may go without one
/// while it is available: a fetch of 1 serves one kind only, so the kinds alternate, and a
/// backend may notice that leases lapsed one fetch late (the Redis backend's fetch without a
/// script reads new entries only, and tells the next fetch to share).
const TURN: usize = 2;

/// A backlog of lapsed leases, and new messages published faster than they are fetched, so
/// both kinds are always available: over fetches of 1 and then of 2, neither kind goes more
/// than two fetches in a row without a delivery, and every lapsed lease is reclaimed. Serving
/// new messages first whenever there are any starves the reclaims while new messages keep
/// coming; serving reclaims first starves the new messages while there is a backlog.
pub async fn reclaims_and_new_share_fetches<F: BackendFactory>(f: &F) {
    const P: &str = "reclaims_and_new_share_fetches";
    const STALE: usize = 8;
    let (claim, r) = open(f, 2).await;
    let (a, b) = (&r[0], &r[1]);
    let stale = lapsed_backlog(P, f, a, claim, STALE).await;
    let (mut reclaimed, mut fresh, mut published) = (HashSet::new(), 0, 0);
    // Fetches without a delivery of each kind, in a row.
    let (mut reclaims_waited, mut new_waited) = (0, 0);
    // 1 per fetch at first, then 2: the 8 lapsed ones take about 10 fetches when shared.
    for round in 0..4 * STALE {
        if reclaimed.len() == STALE {
            break;
        }
        // Two new messages per fetch, more than it takes: new ones never run out.
        for _ in 0..2 {
            publish(a, format!("new {published}").as_bytes()).await;
            published += 1;
        }
        let max = if round < 4 { 1 } else { 2 };
        let (mut got_reclaim, mut got_new) = (false, false);
        for m in fetch(b, max).await {
            if stale.contains(&m.id) {
                reclaimed.insert(m.id);
                got_reclaim = true;
            } else {
                fresh += 1;
                got_new = true;
            }
        }
        reclaims_waited = if got_reclaim { 0 } else { reclaims_waited + 1 };
        new_waited = if got_new { 0 } else { new_waited + 1 };
        ensure!(
            P,
            reclaims_waited <= TURN,
            "lapsed messages waited {reclaims_waited} fetches of {max} in a row while new ones \
             were served ({} of {STALE} reclaimed)",
            reclaimed.len()
        );
        ensure!(
            P,
            new_waited <= TURN,
            "new messages waited {new_waited} fetches of {max} in a row while lapsed ones were \
             reclaimed ({fresh} of {published} delivered)"
        );
    }
    ensure!(
        P,
        reclaimed.len() == STALE,
        "after {} fetches b reclaimed {} of {STALE} lapsed messages",
        4 * STALE,
        reclaimed.len()
    );
}

/// `pending()` counts the messages delivered and not yet settled, whoever holds them: none
/// while messages are only published, one more per delivery, still counted while released or
/// lapsed, one less per ack.
pub async fn pending_counts_only_delivered<F: BackendFactory>(f: &F) {
    const P: &str = "pending_counts_only_delivered";
    let (claim, r) = open(f, 2).await;
    let (a, b) = (&r[0], &r[1]);
    for i in 0..3u8 {
        publish(a, &[i]).await;
    }
    ensure!(P, stream_len(a).await == 3, "stream_len after 3 publishes");
    let n = pending(a).await;
    ensure!(
        P,
        n == 0,
        "pending() is {n} with 3 messages published and none delivered"
    );
    let first = fetch(a, 1).await;
    ensure!(P, first.len() == 1, "a fetched {} of 1", first.len());
    let n = pending(b).await;
    ensure!(
        P,
        n == 1,
        "pending() is {n} after one delivery (2 messages undelivered)"
    );
    let second = fetch(b, 1).await;
    ensure!(P, second.len() == 1, "b fetched {} of 1", second.len());
    let n = pending(a).await;
    ensure!(
        P,
        n == 2,
        "pending() is {n} after a delivery to each of two consumers (1 message undelivered)"
    );
    let released = b
        .release(&lease_ref(&second[0]), claim / 2)
        .await
        .expect("release failed");
    ensure!(
        P,
        released == SettleResult::Ok,
        "owner's release refused: {released:?}"
    );
    let n = pending(a).await;
    ensure!(
        P,
        n == 2,
        "pending() is {n} after a release: a released message is pending until it is settled"
    );
    ensure!(
        P,
        ack(a, &[lease_ref(&first[0])]).await == [SettleResult::Ok],
        "owner's ack refused"
    );
    let n = pending(a).await;
    ensure!(P, n == 1, "pending() is {n} after one of two was acked");
    f.advance(claim + margin(claim)).await;
    let n = pending(a).await;
    ensure!(
        P,
        n == 1,
        "pending() is {n} with one released delivery past its delay: it is still pending"
    );
    // A backend may serve the new one first and notice the released one a fetch later.
    let mut rest = Vec::new();
    for _ in 0..3 {
        if rest.len() == 2 {
            break;
        }
        rest.extend(fetch(a, 10).await);
    }
    ensure!(
        P,
        rest.len() == 2,
        "a fetched {} of 2 (one released, one new) in 3 fetches",
        rest.len()
    );
    let n = pending(a).await;
    ensure!(P, n == 2, "pending() is {n} with two delivered, none acked");
    let lease_refs: Vec<_> = rest.iter().map(lease_ref).collect();
    ensure!(
        P,
        ack(a, &lease_refs).await == [SettleResult::Ok, SettleResult::Ok],
        "owner's ack refused"
    );
    let n = pending(a).await;
    ensure!(P, n == 0, "pending() is {n} with everything acked");
}

/// A lease left unrenewed past the claim timeout that no peer took is still its owner's, with
/// the same fence (as the owner-checked `XCLAIM … JUSTID` of Redis treats it): the owner's
/// renew answers `Kept` and resets its idle time, so a peer can take it neither at once nor at
/// half the claim timeout; and once it lapsed again, untaken, the owner's ack succeeds.
pub async fn lapsed_lease_untaken_is_still_owned<F: BackendFactory>(f: &F) {
    const P: &str = "lapsed_lease_untaken_is_still_owned";
    let (claim, r) = open(f, 2).await;
    let (a, b) = (&r[0], &r[1]);
    publish(a, b"job").await;
    let m = fetch(a, 1).await.remove(0);
    f.advance(claim + margin(claim)).await;
    let renewed = renew(a, &[lease_ref(&m)]).await;
    ensure!(
        P,
        renewed == [RenewResult::Kept],
        "renew of a lapsed lease no peer took answered {renewed:?}: it is still the owner's, \
         with the same fence"
    );
    ensure!(
        P,
        fetch(b, 1).await.is_empty(),
        "b took a lapsed lease right after its owner renewed it"
    );
    f.advance(claim / 2).await;
    ensure!(
        P,
        fetch(b, 1).await.is_empty(),
        "b took a lapsed lease at half the claim timeout after its owner renewed it"
    );
    f.advance(claim / 2 + margin(claim)).await;
    ensure!(
        P,
        ack(a, &[lease_ref(&m)]).await == [SettleResult::Ok],
        "the owner's ack of a lapsed lease no peer took was refused"
    );
    ensure!(
        P,
        stream_len(a).await == 0,
        "acked message still in the stream"
    );
    ensure!(P, pending(a).await == 0, "acked message still pending");
}

/// A `fetch` dropped while it may be waiting loses nothing: a message published before it and
/// one published after it are both delivered, at the latest once the claim timeout has passed
/// (if the dropped fetch took them, they stay pending and are reclaimed), and the handle still
/// works afterwards.
pub async fn dropped_fetch_loses_nothing<F: BackendFactory>(f: &F) {
    const P: &str = "dropped_fetch_loses_nothing";
    let (claim, r) = open(f, 2).await;
    let (a, b) = (&r[0], &r[1]);
    let before = publish(a, b"before").await;
    {
        // Poll a long fetch once, then drop it mid-flight.
        let mut fetching = std::pin::pin!(a.fetch(1, claim));
        std::future::poll_fn(|cx| {
            let _ = fetching.as_mut().poll(cx);
            Poll::Ready(())
        })
        .await;
    }
    let after = publish(a, b"after").await;
    let mut seen = HashSet::new();
    for m in fetch(a, 10).await {
        seen.insert(m.id);
    }
    f.advance(claim + margin(claim)).await;
    for replica in [b, a] {
        for m in fetch(replica, 10).await {
            seen.insert(m.id);
        }
    }
    ensure!(
        P,
        seen.contains(&before),
        "the message published before the dropped fetch was lost"
    );
    ensure!(
        P,
        seen.contains(&after),
        "the message published after the dropped fetch was lost"
    );
    ensure!(
        P,
        stream_len(a).await == 2,
        "stream_len after a dropped fetch"
    );
}

/// Runs every property, in order, against `factory` (each on fresh streams): for a single
/// `#[test]` or a custom executor. Prefer [`backend_suite!`], which reports each on its own.
pub async fn run_all<F: BackendFactory>(factory: &F) {
    round_trip(factory).await;
    identical_payloads_stay_distinct(factory).await;
    renew_keeps_lease_alive(factory).await;
    unrenewed_lease_reclaimable_after_timeout(factory).await;
    renew_by_non_owner_is_lost(factory).await;
    ack_by_non_owner_keeps_entry(factory).await;
    release_with_delay(factory).await;
    dead_letter_removes_message(factory).await;
    delivery_count_grows_on_takeover_not_renew(factory).await;
    results_are_per_lease(factory).await;
    fetch_never_exceeds_max(factory).await;
    reclaim_does_not_starve(factory).await;
    reclaims_and_new_share_fetches(factory).await;
    pending_counts_only_delivered(factory).await;
    lapsed_lease_untaken_is_still_owned(factory).await;
    dropped_fetch_loses_nothing(factory).await;
}

/// Runs every fan-out property, in order, against `factory`: the [`run_all`] of
/// [`groups_suite!`].
pub async fn run_all_groups<F: GroupsFactory>(factory: &F) {
    groups_each_get_every_entry(factory).await;
    ack_in_one_group_leaves_the_others_entries(factory).await;
    crashed_groups_entries_wait_for_it(factory).await;
    late_group_gets_what_follows(factory).await;
}

/// Runs every worker-level property, in order, against a real-time `factory`: the [`run_all`]
/// of [`backend_worker_suite!`]. The properties run `leasehold-tokio` workers, so this must
/// run inside a tokio runtime.
pub async fn run_all_worker<F: BackendFactory>(factory: &F) {
    worker_backpressure_and_serial(factory).await;
    worker_no_reclaim_of_live_work(factory).await;
    worker_crash_failover(factory).await;
    worker_pending_repoll(factory).await;
    worker_shutdown_hands_back(factory).await;
    worker_prefetch_hands_back(factory).await;
    consume_compat(factory).await;
}

/// Runs a property to completion on a current-thread tokio runtime with every driver this build
/// of tokio has, as `#[tokio::test]` would: the suite macros expand to plain `#[test]`s calling
/// it, so the calling crate needs no `tokio` of its own.
#[doc(hidden)]
pub fn __block_on<T>(property: impl Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime for the property")
        .block_on(property)
}

/// Expands to one `#[test]` per property, each building its own factory from the expression
/// (evaluated once per test, inside the test's runtime) and running the property on a
/// current-thread tokio runtime the suite provides: the calling crate needs no `tokio`
/// dependency for it.
///
/// ```text
/// leasehold_conformance::backend_suite!(MyFactory::new());
/// ```
#[macro_export]
macro_rules! backend_suite {
    ($factory:expr) => {
        $crate::backend_suite!(@each $factory;
            round_trip,
            identical_payloads_stay_distinct,
            renew_keeps_lease_alive,
            unrenewed_lease_reclaimable_after_timeout,
            renew_by_non_owner_is_lost,
            ack_by_non_owner_keeps_entry,
            release_with_delay,
            dead_letter_removes_message,
            delivery_count_grows_on_takeover_not_renew,
            results_are_per_lease,
            fetch_never_exceeds_max,
            reclaim_does_not_starve,
            reclaims_and_new_share_fetches,
            pending_counts_only_delivered,
            lapsed_lease_untaken_is_still_owned,
            dropped_fetch_loses_nothing
        );
    };
    (@each $factory:expr; $($property:ident),+) => {
        $(
            #[test]
            fn $property() {
                $crate::__block_on(async {
                    let factory = $factory;
                    $crate::$property(&factory).await;
                });
            }
        )+
    };
}

/// Expands to one `#[test]` per fan-out property (several consumer groups on one stream), run
/// as [`backend_suite!`] runs its own; the factory implements [`GroupsFactory`].
///
/// ```text
/// leasehold_conformance::groups_suite!(MyFactory::new());
/// ```
#[macro_export]
macro_rules! groups_suite {
    ($factory:expr) => {
        $crate::backend_suite!(@each $factory;
            groups_each_get_every_entry,
            ack_in_one_group_leaves_the_others_entries,
            crashed_groups_entries_wait_for_it,
            late_group_gets_what_follows
        );
    };
}

/// Expands to one `#[test]` per worker-level property, run as [`backend_suite!`] runs its own: a
/// real `leasehold-tokio` worker over the backend, in real time. The factory's clock must be
/// real time (its `advance` sleeps), and its claim timeout short (~1 s): the worker uses it,
/// with a heartbeat of a third of it.
///
/// ```text
/// leasehold_conformance::backend_worker_suite!(MyRealTimeFactory::new());
/// ```
#[macro_export]
macro_rules! backend_worker_suite {
    ($factory:expr) => {
        $crate::backend_suite!(@each $factory;
            worker_backpressure_and_serial,
            worker_no_reclaim_of_live_work,
            worker_crash_failover,
            worker_pending_repoll,
            worker_shutdown_hands_back,
            worker_prefetch_hands_back,
            consume_compat
        );
    };
}
