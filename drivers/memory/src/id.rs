//! Entry ids: `"0-{n}"` with `n` = 1, 2, 3, … in publish order, the Redis entry-id format with a
//! zero millisecond part. Ids come from a counter, never from the payload, and are never reused.
//! A delayed message is `"delayed:{n}"` until it is due (`n` from a counter of its own, the form
//! the Redis backend uses too); it gets an entry id when it joins the stream.

use leasehold_core::MessageId;

/// The id of the entry with sequence number `seq` (made once, at publish).
pub(crate) fn format(seq: u64) -> MessageId {
    MessageId::from(std::format!("0-{seq}"))
}

/// The id of the `n`-th delayed message (made once, at publish).
pub(crate) fn delayed(n: u64) -> MessageId {
    MessageId::from(std::format!("delayed:{n}"))
}

/// The sequence number of `id`, if it is an id this store could have issued (canonical form
/// only: `"0-007"` or `"0-+7"` are not ids of entry 7).
pub(crate) fn parse(id: &str) -> Option<u64> {
    let digits = id.strip_prefix("0-")?;
    let canonical = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'));
    if canonical {
        digits.parse().ok()
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_non_canonical_forms() {
        assert_eq!(format(17).as_str(), "0-17");
        for seq in [0, 1, 9, 10, 99, 100, 12_345, u64::MAX / 3, u64::MAX] {
            assert_eq!(format(seq).as_str(), std::format!("0-{seq}"));
            assert_eq!(parse(format(seq).as_str()), Some(seq));
        }
        assert_eq!(parse("0-17"), Some(17));
        for bad in [
            "",
            "0-",
            "17",
            "1-17",
            "0-017",
            "0-+17",
            "0- 17",
            "0-1x",
            "0-99999999999999999999",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }
}
