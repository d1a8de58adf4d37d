//! What the Redis conformance tests share: reading a dead-letter stream's entries.

use leasehold_conformance::DeadLetterInfo;
use leasehold_redis_harness::Reply;

/// One `XRANGE` entry of the dead-letter stream: `[entry id, [field, value, …]]`.
pub fn dead_letter(entry: &Reply) -> DeadLetterInfo {
    let fields = entry
        .as_array()
        .and_then(|e| e.get(1))
        .and_then(Reply::as_array)
        .unwrap_or_else(|| panic!("malformed dead-letter entry {entry:?}"));
    let field = |name: &str| {
        fields
            .chunks(2)
            .find(|pair| pair[0].as_str() == Some(name))
            .and_then(|pair| pair.get(1))
            .and_then(Reply::as_str)
            .unwrap_or_else(|| panic!("dead-letter entry without `{name}`: {entry:?}"))
            .to_owned()
    };
    DeadLetterInfo {
        original_id: field("id").into(),
        reason: field("reason"),
        delivery_count: field("deliveries")
            .parse()
            .unwrap_or_else(|e| panic!("dead-letter `deliveries` not a count ({e}): {entry:?}")),
    }
}
