//! Redis Cluster hash slots, computed as Redis computes them (`CLUSTER KEYSLOT`): CRC16-XMODEM
//! of the key's hash tag, or of the whole key when it has none, modulo 16384.

/// The number of hash slots of a Redis Cluster.
pub const SLOTS: u16 = 16384;

/// The part of `key` Redis Cluster hashes when it is not the whole key: the bytes between the
/// first `{` and the first `}` after it, if there are any. `None` when there is no `{`, no `}`
/// after it, or nothing between the two (`a{}b` is hashed whole).
pub fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|&b| b == b'{')?;
    let rest = &key[open + 1..];
    let close = rest.iter().position(|&b| b == b'}')?;
    (close > 0).then(|| &rest[..close])
}

/// The hash slot of `key` (0 ..= 16383), as `CLUSTER KEYSLOT` answers it: keys in one slot
/// live on one node, and one script or transaction may only touch keys of one slot.
pub fn key_slot(key: &[u8]) -> u16 {
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
