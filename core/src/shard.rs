//! Sharded queues: one logical queue over several shard streams, and who fetches from which.
//!
//! A queue of `n` shards is `n` streams, each with its own group and dead letters, so that on a
//! Redis Cluster the shards spread over the masters while each shard's keys share one slot.
//! Everything here is a pure function of its inputs, shared by producers, workers, backends
//! and inspectors so that they agree without talking:
//!
//! - [`Shards::stream`]: the stream of shard `i` is `{queue:i}`, its own hash tag;
//! - [`Shards::for_key`]: a keyed message always goes to the same shard (jump consistent
//!   hashing of the key's FNV-1a hash: growing `n` moves only about `1/n` of the keys);
//! - [`Shards::assign`]: given the live members of a queue, the shards a member fetches from
//!   (rendezvous hashing: each shard goes to the `owners` members that weigh most for it, so
//!   a member joining or leaving moves only the shards it gains or loses).
//!
//! The hashes are part of the wire format: producers and workers of different versions must
//! route alike, so the tests pin their values.

use std::fmt;

/// The most shards one queue may have: far more than masters in any Redis Cluster.
pub const MAX_SHARDS: u16 = 1024;

/// Why a sharded queue's name or size is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ShardError {
    /// The queue name is empty.
    #[error("a sharded queue needs a name")]
    EmptyName,
    /// The queue name holds a brace, which would change the shards' hash tags.
    #[error(
        "sharded queue {0:?}: a name may not contain '{{' or '}}' (each shard's stream is \
         `{{name:i}}`, its own hash tag)"
    )]
    Brace(String),
    /// Zero shards, or more than [`MAX_SHARDS`].
    #[error("a sharded queue has 1 to {MAX_SHARDS} shards, not {0}")]
    Count(u32),
}

/// A logical queue of `count` shard streams.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Shards {
    queue: String,
    count: u16,
}

impl fmt::Debug for Shards {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Shards({:?} × {})", self.queue, self.count)
    }
}

impl Shards {
    /// The queue `queue` of `count` shards.
    ///
    /// # Errors
    ///
    /// An empty name, a name with a brace, or a count outside `1..=MAX_SHARDS`.
    pub fn new(queue: impl Into<String>, count: u32) -> Result<Self, ShardError> {
        let queue = queue.into();
        if queue.is_empty() {
            return Err(ShardError::EmptyName);
        }
        if queue.contains(['{', '}']) {
            return Err(ShardError::Brace(queue));
        }
        match u16::try_from(count) {
            Ok(count @ 1..=MAX_SHARDS) => Ok(Self { queue, count }),
            _ => Err(ShardError::Count(count)),
        }
    }

    /// The logical queue's name.
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// How many shards.
    pub fn count(&self) -> u16 {
        self.count
    }

    /// The stream of shard `shard` (`< count`): `{queue:shard}`.
    pub fn stream(&self, shard: u16) -> String {
        debug_assert!(shard < self.count);
        format!("{{{}:{shard}}}", self.queue)
    }

    /// Every shard's stream, shard 0 first.
    pub fn streams(&self) -> impl ExactSizeIterator<Item = String> + '_ {
        (0..self.count).map(|i| self.stream(i))
    }

    /// The queue and shard a stream name belongs to, if it is named like a shard: how an
    /// inspector groups the streams it finds into queues.
    pub fn parse(stream: &str) -> Option<(&str, u16)> {
        let inner = stream.strip_prefix('{')?.strip_suffix('}')?;
        let (queue, shard) = inner.rsplit_once(':')?;
        let valid = !queue.is_empty()
            && !queue.contains(['{', '}'])
            && !shard.is_empty()
            && shard.bytes().all(|b| b.is_ascii_digit())
            && (shard == "0" || !shard.starts_with('0'));
        let shard: u16 = shard.parse().ok().filter(|_| valid)?;
        (shard < MAX_SHARDS).then_some((queue, shard))
    }

    /// The shard a message with routing key `key` goes to: the same for a key as long as the
    /// count stays, so messages of one key keep their order.
    pub fn for_key(&self, key: &[u8]) -> u16 {
        jump(fnv1a(key), self.count)
    }

    /// The shards `member` fetches from when `members` are live: those of which it is one of
    /// the `owners` heaviest members, ascending. `member` counts as live whether listed or
    /// not; duplicates in `members` count once. With at least `owners` members, every shard
    /// has exactly `owners` fetchers; with fewer, every member fetches from every shard.
    pub fn assign<S: AsRef<str>>(&self, member: &str, members: &[S], owners: usize) -> Vec<u16> {
        let mut others: Vec<&str> = members
            .iter()
            .map(AsRef::as_ref)
            .filter(|m| *m != member)
            .collect();
        others.sort_unstable();
        others.dedup();
        let owners = owners.max(1);
        if others.len() < owners {
            return (0..self.count).collect();
        }
        (0..self.count)
            .filter(|&shard| {
                let mine = self.weight(member, shard);
                // Ties (a 64-bit collision) go to the smaller name, so every member agrees.
                let heavier = others
                    .iter()
                    .filter(|m| (self.weight(m, shard), member) > (mine, **m))
                    .count();
                heavier < owners
            })
            .collect()
    }

    /// Rendezvous weight of `member` for `shard`.
    fn weight(&self, member: &str, shard: u16) -> u64 {
        let mut h = Fnv::default();
        h.write(self.queue.as_bytes());
        h.write(&[0]);
        h.write(member.as_bytes());
        // Mixed twice: FNV of names differing in one byte would order alike for every shard.
        mix(mix(h.0) ^ u64::from(shard).wrapping_mul(0x9e37_79b9_7f4a_7c15))
    }
}

impl fmt::Display for Shards {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({} shards)", self.queue, self.count)
    }
}

/// 64-bit FNV-1a: tiny, stable, and good enough for keys once [`mix`]ed or jumped.
#[derive(Clone, Copy)]
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h = Fnv::default();
    h.write(bytes);
    h.0
}

/// The splitmix64 finalizer: spreads FNV's weak high bits over the whole word.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Jump consistent hash (Lamping and Veach): a bucket in `0..buckets` such that growing
/// `buckets` by one moves only the keys that land in the new bucket.
fn jump(mut key: u64, buckets: u16) -> u16 {
    let (mut b, mut j) = (0i64, 0i64);
    while j < i64::from(buckets) {
        b = j;
        key = key.wrapping_mul(2_862_933_555_777_941_757).wrapping_add(1);
        j = ((b + 1) as f64 * ((1u64 << 31) as f64 / ((key >> 33) + 1) as f64)) as i64;
    }
    b as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(n: u32) -> Shards {
        Shards::new("orders", n).unwrap()
    }

    #[test]
    fn names_are_one_hash_tag_per_shard_and_parse_back() {
        let s = q(3);
        let names: Vec<String> = s.streams().collect();
        assert_eq!(names, ["{orders:0}", "{orders:1}", "{orders:2}"]);
        for (i, name) in names.iter().enumerate() {
            assert_eq!(Shards::parse(name), Some(("orders", i as u16)));
        }
        let s = Shards::new("a:b", 12).unwrap();
        assert_eq!(Shards::parse(&s.stream(11)), Some(("a:b", 11)));
        for not in [
            "orders",
            "{orders}",
            "{orders:}",
            "{:1}",
            "{a:01}",
            "{a:x}",
            "x{a:1}",
            "{a:1024}",
        ] {
            assert_eq!(Shards::parse(not), None, "{not}");
        }
    }

    #[test]
    fn bad_names_and_counts_are_errors() {
        assert_eq!(Shards::new("", 2), Err(ShardError::EmptyName));
        assert_eq!(Shards::new("a{b", 2), Err(ShardError::Brace("a{b".into())));
        assert_eq!(Shards::new("a}", 2), Err(ShardError::Brace("a}".into())));
        assert_eq!(Shards::new("a", 0), Err(ShardError::Count(0)));
        assert_eq!(Shards::new("a", 1025), Err(ShardError::Count(1025)));
        assert_eq!(Shards::new("a", 70_000), Err(ShardError::Count(70_000)));
        assert!(Shards::new("a", 1024).is_ok());
    }

    #[test]
    fn key_routing_is_pinned() {
        // Producers and workers of every version must route alike: these values are fixed.
        let s = q(8);
        let got: Vec<u16> = ["", "a", "customer-1", "customer-2", "customer-3"]
            .iter()
            .map(|k| s.for_key(k.as_bytes()))
            .collect();
        assert_eq!(got, PINNED_KEYS);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        let members = ["w0", "w1", "w2"];
        let got: Vec<Vec<u16>> = members
            .iter()
            .map(|m| q(6).assign(m, &members, 1))
            .collect();
        assert_eq!(got, PINNED_OWNERS);
    }
    const PINNED_KEYS: [u16; 5] = [1, 2, 0, 3, 2];
    const PINNED_OWNERS: [&[u16]; 3] = [&[], &[0, 1, 2], &[3, 4, 5]];

    #[test]
    fn keys_spread_and_growing_moves_few() {
        let (eight, nine) = (q(8), q(9));
        let mut per = [0u32; 8];
        let mut moved = 0;
        for i in 0..90_000u32 {
            let key = format!("key-{i}");
            let a = eight.for_key(key.as_bytes());
            per[usize::from(a)] += 1;
            let b = nine.for_key(key.as_bytes());
            if a != b {
                assert_eq!(b, 8, "a key only ever moves to the new shard");
                moved += 1;
            }
        }
        for n in per {
            assert!((10_500..12_000).contains(&n), "{per:?}");
        }
        assert!((9_000..11_000).contains(&moved), "{moved}");
    }

    #[test]
    fn every_shard_has_owners_fetchers() {
        let s = q(24);
        let members: Vec<String> = (0..5).map(|i| format!("w{i}")).collect();
        let mut fetchers = [0usize; 24];
        for m in &members {
            for shard in s.assign(m, &members, 2) {
                fetchers[usize::from(shard)] += 1;
            }
        }
        assert_eq!(fetchers, [2; 24]);
        // Fewer members than owners: everyone fetches everything.
        assert_eq!(s.assign("w0", &["w0"], 2).len(), 24);
        assert_eq!(s.assign("w0", &[] as &[&str], 2).len(), 24);
        // Duplicates and the member itself listed or not make no difference.
        let with_dups = ["w1", "w1", "w2", "w0", "w3", "w4"];
        assert_eq!(
            s.assign("w0", &with_dups, 2),
            s.assign("w0", &members[1..], 2)
        );
    }

    #[test]
    fn shards_spread_evenly_over_members() {
        let s = q(64);
        let members: Vec<String> = (0..8).map(|i| format!("worker-{i}")).collect();
        for m in &members {
            let n = s.assign(m, &members, 2).len();
            assert!((8..=26).contains(&n), "{m}: {n} of 64 shards");
        }
    }

    #[test]
    fn a_member_leaving_moves_only_its_shards() {
        let s = q(64);
        let all: Vec<String> = (0..6).map(|i| format!("w{i}")).collect();
        let left: Vec<String> = all.iter().filter(|m| *m != "w5").cloned().collect();
        let before: Vec<Vec<u16>> = all.iter().map(|m| s.assign(m, &all, 2)).collect();
        let after: Vec<Vec<u16>> = left.iter().map(|m| s.assign(m, &left, 2)).collect();
        let leaver = &before[5];
        for (i, (b, a)) in before.iter().zip(&after).enumerate() {
            // A survivor keeps all it had and gains only shards the leaver fetched.
            assert!(b.iter().all(|x| a.contains(x)), "w{i} lost a shard");
            assert!(
                a.iter().all(|x| b.contains(x) || leaver.contains(x)),
                "w{i}"
            );
        }
        let gained: usize = before
            .iter()
            .zip(&after)
            .map(|(b, a)| a.len() - b.len())
            .sum();
        assert_eq!(gained, leaver.len());
    }
}
