//! Redis Cluster hash slots, computed as Redis computes them (`CLUSTER KEYSLOT`): CRC16-XMODEM
//! of the key's hash tag, or of the whole key when it has none, modulo 16384.

/// The number of hash slots of a Redis Cluster.
const SLOTS: u16 = 16384;

/// The part of `key` Redis Cluster hashes when it is not the whole key: the bytes between the
/// first `{` and the first `}` after it, if there are any. `None` when there is no `{`, no `}`
/// after it, or nothing between the two (`a{}b` is hashed whole).
pub(crate) fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|&b| b == b'{')?;
    let rest = &key[open + 1..];
    let close = rest.iter().position(|&b| b == b'}')?;
    (close > 0).then(|| &rest[..close])
}

/// The hash slot of `key` (0 ..= 16383), as `CLUSTER KEYSLOT` answers it: keys in one slot
/// live on one node, and one script or transaction may only touch keys of one slot.
pub(crate) fn key_slot(key: &[u8]) -> u16 {
    crc16_xmodem(hash_tag(key).unwrap_or(key)) % SLOTS
}

/// CRC16 with polynomial 0x1021, initial value 0, no reflection, no final xor (the variant
/// Redis calls CRC16-CCITT/XMODEM). Bitwise: slots are computed a few times per connect.
fn crc16_xmodem(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 == 0 {
                crc << 1
            } else {
                (crc << 1) ^ 0x1021
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_matches_the_reference_check_value() {
        // The CRC catalogue's check value for CRC-16/XMODEM, and Redis's own test vector.
        assert_eq!(crc16_xmodem(b"123456789"), 0x31c3);
        assert_eq!(crc16_xmodem(b""), 0);
    }

    #[test]
    fn tags_follow_the_first_open_and_the_first_close_after_it() {
        assert_eq!(hash_tag(b"{user1000}.following"), Some(&b"user1000"[..]));
        assert_eq!(hash_tag(b"foo{}{bar}"), None);
        assert_eq!(hash_tag(b"foo{{bar}}zap"), Some(&b"{bar"[..]));
        assert_eq!(hash_tag(b"foo{bar}{zap}"), Some(&b"bar"[..]));
        assert_eq!(hash_tag(b"a}b{c}"), Some(&b"c"[..]));
        assert_eq!(hash_tag(b"a}b"), None);
        assert_eq!(hash_tag(b"a{b"), None);
        assert_eq!(hash_tag(b""), None);
    }

    #[test]
    fn slots_of_known_keys() {
        // What `CLUSTER KEYSLOT` answers (the last two are in its documentation).
        assert_eq!(key_slot(b"123456789"), 12739);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"somekey"), 11058);
        assert_eq!(key_slot(b"foo{hash_tag}"), 2515);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"foo{}{bar}"), crc16_xmodem(b"foo{}{bar}") % SLOTS);
        assert_eq!(key_slot(b""), 0);
    }
}

/// Against a real, cluster-enabled `redis-server`: `key_slot` answers what `CLUSTER KEYSLOT`
/// answers, for names rich in braces.
#[cfg(test)]
mod against_a_server {
    use leasehold_redis_harness::RedisServer;

    use super::*;

    /// A cluster-enabled server that owns no slots: enough for `CLUSTER KEYSLOT`.
    fn cluster_node() -> RedisServer {
        RedisServer::builder()
            .args(["--cluster-enabled", "yes"])
            .start()
            .unwrap_or_else(|e| panic!("these tests need redis-server: {e}"))
    }

    fn server_slot(server: &RedisServer, key: &[u8]) -> u16 {
        let reply = server
            .command([b"CLUSTER".as_slice(), b"KEYSLOT".as_slice(), key])
            .unwrap();
        let slot = reply
            .as_int()
            .unwrap_or_else(|| panic!("CLUSTER KEYSLOT {key:?}: {reply:?}"));
        u16::try_from(slot).unwrap()
    }

    /// Names rich in what the hash-tag rule looks at: braces in every arrangement, empty and nested
    /// tags, non-ASCII and non-UTF-8 bytes. Deterministic (xorshift from a fixed state).
    fn names() -> Vec<Vec<u8>> {
        let mut names: Vec<Vec<u8>> = [
            "",
            "{",
            "}",
            "{}",
            "}{",
            "{{}}",
            "{a}",
            "a}b",
            "odd{}name",
            "{a}b}",
            "a{b",
            "x}{a}",
            "foo{}{bar}",
            "foo{{bar}}zap",
            "foo{bar}{zap}",
            "{user1000}.following",
            "orders",
            "{app}:orders",
            "é{ü}",
            "\u{1F600}",
            "{\u{1F600}}",
        ]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
        let pieces: [&[u8]; 12] = [
            b"{",
            b"}",
            b"{}",
            b"a",
            b"b",
            b":",
            b"orders",
            "é".as_bytes(),
            b"\xff",
            b"\x00",
            b" ",
            b"\xc3",
        ];
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut random = |max: u64| -> Vec<u8> {
            let len = next() % (max + 1);
            (0..len)
                .flat_map(|_| {
                    pieces[(next() % pieces.len() as u64) as usize]
                        .iter()
                        .copied()
                })
                .collect()
        };
        for _ in 0..200 {
            names.push(random(8));
            // Often a tag: prefix `{` content `}` suffix, each part random (the content may be
            // empty or hold braces itself).
            let mut name = random(3);
            name.push(b'{');
            name.extend(random(3));
            name.push(b'}');
            name.extend(random(3));
            names.push(name);
        }
        names
    }

    #[test]
    fn key_slot_agrees_with_cluster_keyslot() {
        let server = cluster_node();
        let names = names();
        let mut tagged = 0;
        for name in &names {
            assert_eq!(
                key_slot(name),
                server_slot(&server, name),
                "{:?}",
                String::from_utf8_lossy(name)
            );
            tagged += usize::from(hash_tag(name).is_some());
        }
        // The generated names cover both rules.
        assert!(
            tagged > 100 && names.len() - tagged > 100,
            "{tagged} of {}",
            names.len()
        );
    }
}
