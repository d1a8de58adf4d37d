//! What waits outside the stream: delayed messages until they are due, and deduplication keys
//! until their time to live is over.
//!
//! A delayed message is kept by `(due, n)`, `n` from a counter (its id is `delayed:<n>`), so
//! messages due at the same instant join the stream in publish order. A fetch moves every due
//! one into the stream before it looks for work ([`Store::promote`](super::Store)): each once,
//! at the cost its publish would have had.
//!
//! A deduplication key remembers the id its first publish answered until `publish + ttl`
//! (excluded). Keys are also kept by expiry, so each publish first drops the expired ones, oldest
//! first: a key costs its insert and one removal, and none outlives its ttl by more than the
//! time to the next publish.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use leasehold_core::MessageId;

use crate::id;

/// Delayed messages by due instant, then publish order.
#[derive(Debug, Default)]
pub(crate) struct Delayed {
    waiting: BTreeMap<(Instant, u64), Bytes>,
    /// The `n` of the last `delayed:<n>` id handed out.
    last: u64,
}

impl Delayed {
    /// Keeps `payload` until `due`; returns its id, `delayed:<n>`.
    pub(crate) fn insert(&mut self, due: Instant, payload: Bytes) -> MessageId {
        self.last += 1;
        self.waiting.insert((due, self.last), payload);
        id::delayed(self.last)
    }

    /// Takes the earliest message if it is due at `now`.
    pub(crate) fn take_due(&mut self, now: Instant) -> Option<Bytes> {
        let entry = self.waiting.first_entry()?;
        (entry.key().0 <= now).then(|| entry.remove())
    }

    /// When the earliest message is due.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.waiting.first_key_value().map(|(&(due, _), _)| due)
    }

    pub(crate) fn len(&self) -> usize {
        self.waiting.len()
    }
}

/// Deduplication keys with the id they answer and when they expire.
#[derive(Debug, Default)]
pub(crate) struct Dedupe {
    keys: HashMap<Arc<str>, (MessageId, Instant)>,
    /// `(expires, key)` of every key in `keys`.
    by_expiry: BTreeSet<(Instant, Arc<str>)>,
}

impl Dedupe {
    /// Forgets the keys expired at `now`, oldest first.
    pub(crate) fn prune(&mut self, now: Instant) {
        while self.by_expiry.first().is_some_and(|(at, _)| *at <= now) {
            if let Some((_, key)) = self.by_expiry.pop_first() {
                self.keys.remove(&key);
            }
        }
    }

    /// The id a live `key` answers (call [`prune`](Self::prune) first: an expired key that
    /// was not pruned still answers).
    pub(crate) fn get(&self, key: &str) -> Option<&MessageId> {
        self.keys.get(key).map(|(id, _)| id)
    }

    /// Remembers `key` for `id` until `expires`.
    pub(crate) fn insert(&mut self, key: &str, id: MessageId, expires: Instant) {
        let key: Arc<str> = key.into();
        if let Some((_, old)) = self.keys.insert(key.clone(), (id, expires)) {
            self.by_expiry.remove(&(old, key.clone()));
        }
        self.by_expiry.insert((expires, key));
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        debug_assert_eq!(self.keys.len(), self.by_expiry.len());
        self.keys.len()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn due_messages_come_out_by_due_time_then_publish_order() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut delayed = Delayed::default();
        assert_eq!(delayed.insert(ms(20), "b".into()).as_str(), "delayed:1");
        assert_eq!(delayed.insert(ms(10), "a".into()).as_str(), "delayed:2");
        assert_eq!(delayed.insert(ms(20), "c".into()).as_str(), "delayed:3");
        assert_eq!(delayed.next_due(), Some(ms(10)));
        assert_eq!(delayed.take_due(ms(9)), None);
        assert_eq!(delayed.take_due(ms(20)).as_deref(), Some(&b"a"[..]));
        assert_eq!(delayed.take_due(ms(20)).as_deref(), Some(&b"b"[..]));
        assert_eq!(delayed.take_due(ms(20)).as_deref(), Some(&b"c"[..]));
        assert_eq!((delayed.take_due(ms(99)), delayed.len()), (None, 0));
        assert_eq!(delayed.next_due(), None);
    }

    #[test]
    fn expired_keys_are_pruned_and_do_not_pile_up() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut dedupe = Dedupe::default();
        for n in 0..10_000u64 {
            let now = ms(n);
            dedupe.prune(now);
            dedupe.insert(
                &format!("k{n}"),
                id::format(n),
                now + Duration::from_millis(5),
            );
            assert!(dedupe.len() <= 5, "{} keys kept at {n} ms", dedupe.len());
        }
        assert_eq!(dedupe.get("k9999").map(MessageId::as_str), Some("0-9999"));
        assert_eq!(dedupe.get("k9994"), None);
        // A key lives until its expiry, excluded.
        dedupe.prune(ms(10_003));
        assert_eq!(dedupe.get("k9998"), None);
        assert!(dedupe.get("k9999").is_some());
        dedupe.prune(ms(10_004));
        assert_eq!(dedupe.get("k9999"), None);
        assert_eq!(dedupe.len(), 0);
    }
}
