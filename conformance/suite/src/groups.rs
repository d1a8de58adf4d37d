//! Fan-out: a stream read by several consumer groups. Each group must receive every entry,
//! exactly as if it read the stream alone, however the others ack, crash or lag: no group ever
//! loses an entry to another group's ack.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use leasehold_core::MessageId;

use crate::{ack, fetch, lease_ref, margin, publish, BackendFactory};

/// A [`BackendFactory`] whose streams may have several consumer groups. Expand
/// [`groups_suite!`](crate::groups_suite) with it. A backend whose streams have one group
/// (such as the in-memory one) has no such factory, and says so in its docs.
pub trait GroupsFactory: BackendFactory {
    /// One handle per name in `groups`, on one fresh, empty stream: each a distinct consumer of
    /// the group it names (a name given twice: two consumers of that group). Every group
    /// exists when this returns.
    fn open_groups(
        &self,
        claim_timeout: Duration,
        groups: &[&str],
    ) -> impl Future<Output = Vec<Self::Backend>> + Send;

    /// A consumer of `group`, made now (created from the stream's start) on the stream most
    /// recently opened by [`open_groups`](Self::open_groups).
    fn join(
        &self,
        claim_timeout: Duration,
        group: &str,
    ) -> impl Future<Output = Self::Backend> + Send;
}

/// Ids each group received, in order.
type Received = BTreeMap<usize, Vec<MessageId>>;

/// Fetches up to `max` for handle `h`, acks all, and records them.
async fn take<B: leasehold_core::Backend>(b: &B, h: usize, max: usize, got: &mut Received) {
    let batch = fetch(b, max).await;
    if batch.is_empty() {
        return;
    }
    let lease_refs: Vec<_> = batch.iter().map(lease_ref).collect();
    ack(b, &lease_refs).await;
    got.entry(h)
        .or_default()
        .extend(batch.iter().map(|m| m.id.clone()));
}

/// Three groups on one stream, reading at different paces and interleaved, each acking what
/// it takes: every group receives every entry once, in order, and the stream keeps what the
/// slowest group has not taken yet.
pub async fn groups_each_get_every_entry<F: GroupsFactory>(f: &F) {
    const PROP: &str = "groups_each_get_every_entry";
    let claim = f.claim_timeout();
    let handles = f.open_groups(claim, &["billing", "emails", "audit"]).await;
    let mut published = Vec::new();
    let mut got = Received::new();
    // Paces: billing takes 5 a round, emails 2, audit 1; publishing goes on meanwhile.
    for round in 0..12 {
        for _ in 0..3 {
            published.push(publish(&handles[round % 3], b"fan-out").await);
        }
        for (h, pace) in [(0, 5), (1, 2), (2, 1)] {
            take(&handles[h], h, pace, &mut got).await;
        }
        let slowest = got.get(&2).map_or(0, Vec::len);
        let left = crate::stream_len(&handles[0]).await;
        ensure!(
            PROP,
            left >= (published.len() - slowest) as u64,
            "round {round}: the stream holds {left} entries, but group `audit` has {} still to \
             read",
            published.len() - slowest
        );
    }
    for (h, name) in ["billing", "emails", "audit"].iter().enumerate() {
        loop {
            let before = got.get(&h).map_or(0, Vec::len);
            take(&handles[h], h, 10, &mut got).await;
            if got.get(&h).map_or(0, Vec::len) == before {
                break;
            }
        }
        ensure!(
            PROP,
            got.get(&h).map(Vec::as_slice).unwrap_or_default() == published.as_slice(),
            "group `{name}` received {:?}, but {:?} were published",
            got.get(&h),
            published
        );
    }
}

/// One group acks everything before another reads anything: the other still gets it all.
pub async fn ack_in_one_group_leaves_the_others_entries<F: GroupsFactory>(f: &F) {
    const PROP: &str = "ack_in_one_group_leaves_the_others_entries";
    let claim = f.claim_timeout();
    let handles = f.open_groups(claim, &["billing", "emails"]).await;
    let mut published = Vec::new();
    for _ in 0..10 {
        published.push(publish(&handles[0], b"x").await);
    }
    let mut got = Received::new();
    take(&handles[0], 0, 100, &mut got).await;
    take(&handles[1], 1, 100, &mut got).await;
    ensure!(
        PROP,
        got.get(&1).map(Vec::as_slice).unwrap_or_default() == published.as_slice(),
        "after `billing` acked all {} entries, `emails` received {:?}",
        published.len(),
        got.get(&1)
    );
}

/// A consumer of one group crashes holding entries while the other group acks them: they stay
/// until its group's other consumer reclaims them after the claim timeout.
pub async fn crashed_groups_entries_wait_for_it<F: GroupsFactory>(f: &F) {
    const PROP: &str = "crashed_groups_entries_wait_for_it";
    let claim = f.claim_timeout();
    let handles = f.open_groups(claim, &["billing", "emails", "emails"]).await;
    let mut published = Vec::new();
    for _ in 0..6 {
        published.push(publish(&handles[0], b"x").await);
    }
    let crashed = fetch(&handles[1], 6).await;
    ensure!(
        PROP,
        crashed.len() == 6,
        "the doomed consumer fetched {}",
        crashed.len()
    );
    let mut got = Received::new();
    take(&handles[0], 0, 100, &mut got).await;
    f.advance(claim + margin(claim)).await;
    take(&handles[2], 2, 100, &mut got).await;
    ensure!(
        PROP,
        got.get(&2).map(Vec::as_slice).unwrap_or_default() == published.as_slice(),
        "after `billing` acked all and an `emails` consumer crashed holding them, the other \
         `emails` consumer reclaimed {:?} of {:?}",
        got.get(&2),
        published
    );
}

/// A group made after another group acked entries receives every entry published after it
/// was made, however soon the other group acks them.
pub async fn late_group_gets_what_follows<F: GroupsFactory>(f: &F) {
    const PROP: &str = "late_group_gets_what_follows";
    let claim = f.claim_timeout();
    let handles = f.open_groups(claim, &["billing"]).await;
    let mut got = Received::new();
    for _ in 0..5 {
        publish(&handles[0], b"before").await;
    }
    take(&handles[0], 0, 100, &mut got).await;
    let late = f.join(claim, "emails").await;
    let mut after = Vec::new();
    for _ in 0..5 {
        after.push(publish(&handles[0], b"after").await);
        take(&handles[0], 0, 100, &mut got).await;
    }
    take(&late, 1, 100, &mut got).await;
    let received = got.get(&1).cloned().unwrap_or_default();
    ensure!(
        PROP,
        received.ends_with(&after),
        "a group made after `billing` acked 5 entries received {received:?}, which misses some \
         of the {after:?} published after it was made"
    );
}
