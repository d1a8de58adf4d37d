//! What Redis answers, parsed: entry ids, `XREAD`/`XREADGROUP` replies, the fetch script's
//! reply, and the look at the delayed set.

use std::time::Duration;

use bytes::Bytes;
use leasehold_core::{Fence, Fetched, Tenure};
use redis::Value;

/// A stream entry id `ms-seq`, ordered as Redis orders them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct EntryId(pub(super) u64, pub(super) u64);

impl EntryId {
    /// Both parts decimal digits; `None` for anything Redis would not accept as an entry id.
    pub(super) fn parse(id: &str) -> Option<Self> {
        let (ms, seq) = Self::halves(id)?;
        Some(Self(decimal(ms)?, decimal(seq)?))
    }

    /// [`parse`](Self::parse), for an id spelled exactly as Redis writes it: no leading zeros.
    pub(super) fn parse_canonical(id: &str) -> Option<Self> {
        let (ms, seq) = Self::halves(id)?;
        let canonical = |s: &[u8]| s.len() == 1 || s.first() != Some(&b'0');
        if !(canonical(ms) && canonical(seq)) {
            return None;
        }
        Some(Self(decimal(ms)?, decimal(seq)?))
    }

    /// The bytes before and after the first `-`.
    fn halves(id: &str) -> Option<(&[u8], &[u8])> {
        let bytes = id.as_bytes();
        let dash = bytes.iter().position(|&b| b == b'-')?;
        Some((&bytes[..dash], &bytes[dash + 1..]))
    }
}

/// One or more ASCII digits as a `u64` (`None` when empty, anything else, or too large): one
/// pass, where a digit check and then `str::parse` take two (ids are parsed once per message
/// on the way in and again per lease in every fenced call).
pub(super) fn decimal(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    // Up to 19 digits cannot overflow: no checked arithmetic per digit then.
    if digits.len() <= 19 {
        let mut n = 0u64;
        for &b in digits {
            let digit = b.wrapping_sub(b'0');
            if digit > 9 {
                return None;
            }
            n = n * 10 + u64::from(digit);
        }
        return Some(n);
    }
    digits.iter().try_fold(0u64, |n, &b| {
        let digit = b.wrapping_sub(b'0');
        if digit > 9 {
            return None;
        }
        n.checked_mul(10)?.checked_add(u64::from(digit))
    })
}

impl std::fmt::Display for EntryId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.0, self.1)
    }
}

pub(super) fn as_u64(value: &Value) -> Option<u64> {
    match value {
        Value::Int(n) => u64::try_from(*n).ok(),
        Value::BulkString(bytes) => std::str::from_utf8(bytes).ok()?.parse().ok(),
        _ => None,
    }
}

pub(super) fn as_string(value: Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes).ok(),
        Value::SimpleString(s) => Some(s),
        _ => None,
    }
}

/// Each stream of an `XREAD`/`XREADGROUP` reply as (key, its entries), in order (RESP2 arrays
/// or RESP3 maps; none when the reply is nil: nothing came).
pub(super) fn parse_streams(reply: Value) -> Option<Vec<(Vec<u8>, Value)>> {
    let key = |key: Value| match key {
        Value::BulkString(key) => Some(key),
        Value::SimpleString(key) => Some(key.into_bytes()),
        _ => None,
    };
    match reply {
        Value::Nil => Some(Vec::new()),
        Value::Array(streams) => streams
            .into_iter()
            .map(|stream| {
                let Value::Array(pair) = stream else {
                    return None;
                };
                let mut pair = pair.into_iter();
                Some((key(pair.next()?)?, pair.next()?))
            })
            .collect(),
        Value::Map(streams) => streams
            .into_iter()
            .map(|(name, entries)| Some((key(name)?, entries)))
            .collect(),
        _ => None,
    }
}

/// `(id, payload)` of each of one stream's entries in a read's reply; the payload is `None` if
/// the entry lacks `field`.
pub(super) fn parse_entries(entries: Value, field: &[u8]) -> Option<Vec<(String, Option<Bytes>)>> {
    let Value::Array(entries) = entries else {
        return None;
    };
    let mut out = Vec::with_capacity(entries.len());
    for entry in entries {
        let Value::Array(parts) = entry else {
            return None;
        };
        let mut parts = parts.into_iter();
        let id = as_string(parts.next()?)?;
        let payload = match parts.next()? {
            Value::Array(fields) => {
                let mut fields = fields.into_iter();
                let mut payload = None;
                while let (Some(name), Some(value)) = (fields.next(), fields.next()) {
                    if matches!(&name, Value::BulkString(name) if name.as_slice() == field) {
                        if let Value::BulkString(value) = value {
                            payload = Some(Bytes::from(value));
                        }
                        break;
                    }
                }
                payload
            }
            Value::Map(fields) => {
                fields
                    .into_iter()
                    .find_map(|(name, value)| match (name, value) {
                        (Value::BulkString(name), Value::BulkString(value))
                            if name.as_slice() == field =>
                        {
                            Some(Bytes::from(value))
                        }
                        _ => None,
                    })
            }
            _ => None,
        };
        out.push((id, payload));
    }
    Some(out)
}

/// How long until the earliest delayed message is due (zero if it is), from
/// `ZRANGE delayed 0 0 WITHSCORES` (RESP2: member, score; RESP3: one pair) and `TIME`; `None`
/// inside when nothing is delayed.
pub(super) fn parse_probe(earliest: Value, time: Value) -> Option<Option<Duration>> {
    let Value::Array(items) = earliest else {
        return None;
    };
    let mut items = items.into_iter();
    let score = match items.next() {
        None => return Some(None),
        Some(Value::Array(pair)) => pair.into_iter().nth(1)?,
        Some(_) => items.next()?,
    };
    let due_ms = match score {
        Value::Double(score) => score,
        Value::BulkString(bytes) => std::str::from_utf8(&bytes).ok()?.parse().ok()?,
        _ => return None,
    };
    let Value::Array(time) = time else {
        return None;
    };
    let (secs, micros) = (as_u64(time.first()?)?, as_u64(time.get(1)?)?);
    let now_ms = secs.saturating_mul(1000).saturating_add(micros / 1000);
    // A score is a whole number of ms the publish script wrote; the cast saturates.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let due_ms = due_ms.max(0.0) as u64;
    Some(Some(Duration::from_millis(due_ms.saturating_sub(now_ms))))
}

/// The fetch script's `ms until the next delayed message is due, -1 if none`.
pub(super) fn parse_due(reply: &Value) -> Option<Option<Duration>> {
    match reply {
        Value::Int(-1) => Some(None),
        due => as_u64(due).map(|ms| Some(Duration::from_millis(ms))),
    }
}

/// What one run of the fetch script returned.
pub(super) struct ScriptFetch {
    /// Where the next reclaim goes on: this entry (`0-0`: the first lapsed one).
    pub(super) cursor: String,
    pub(super) entries: Vec<Fetched<Bytes>>,
    /// Entries without the payload field that the script dead-lettered.
    pub(super) undeliverable: Vec<String>,
    /// Some entry was idle long enough to be reclaimed when the script started.
    pub(super) reclaimable: bool,
    /// The group's last-delivered id, when the script took nothing: where to wait for more.
    pub(super) last_delivered: Option<String>,
    /// How long until the next delayed message is due, as its promotion found.
    pub(super) next_due: Option<Duration>,
    /// The wake stream's last id, when the script took nothing.
    pub(super) wake_id: Option<String>,
    /// This consumer's tenure, under which the entries were delivered.
    pub(super) tenure: Tenure,
}

/// `{cursor, {id, count, payload, ...}, last-delivered-id or nil, 1 if reclaimable else 0,
/// {undeliverable id, ...}, ms until the next delayed message is due or -1,
/// wake stream's last id or nil, tenure}`.
pub(super) fn parse_fetch(reply: Value) -> Option<ScriptFetch> {
    let Value::Array(parts) = reply else {
        return None;
    };
    let mut parts = parts.into_iter();
    let cursor = as_string(parts.next()?)?;
    let Value::Array(flat) = parts.next()? else {
        return None;
    };
    let last = as_string(parts.next()?);
    let reclaimable = as_u64(&parts.next()?)? == 1;
    let Value::Array(undeliverable) = parts.next()? else {
        return None;
    };
    let undeliverable = undeliverable
        .into_iter()
        .map(as_string)
        .collect::<Option<Vec<_>>>()?;
    let next_due = parse_due(&parts.next()?)?;
    let wake_id = parts.next().and_then(as_string);
    let tenure = Tenure(as_u64(&parts.next()?)?);
    let mut entries = Vec::with_capacity(flat.len() / 3);
    let mut flat = flat.into_iter();
    while let (Some(id), Some(count), Some(payload)) = (flat.next(), flat.next(), flat.next()) {
        let count = as_u64(&count)?;
        let Value::BulkString(payload) = payload else {
            return None;
        };
        entries.push(
            Fetched::new(
                as_string(id)?.into(),
                Bytes::from(payload),
                u32::try_from(count).unwrap_or(u32::MAX),
                Fence(count),
            )
            .with_tenure(tenure),
        );
    }
    Some(ScriptFetch {
        cursor,
        entries,
        undeliverable,
        reclaimable,
        last_delivered: last,
        next_due,
        wake_id,
        tenure,
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use redis::Value;

    use super::{parse_probe, EntryId};

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn the_probe_reads_the_next_due_time_in_resp2_and_resp3() {
        let time = || Value::Array(vec![bulk("1700000000"), bulk("250999")]);
        assert_eq!(parse_probe(Value::Array(vec![]), time()), Some(None));
        let resp2 = Value::Array(vec![bulk("0000000000000001:x"), bulk("1700000001000")]);
        assert_eq!(
            parse_probe(resp2, time()),
            Some(Some(Duration::from_millis(750)))
        );
        let resp3 = Value::Array(vec![Value::Array(vec![
            bulk("0000000000000001:x"),
            Value::Double(1_699_999_000_000.0),
        ])]);
        assert_eq!(parse_probe(resp3, time()), Some(Some(Duration::ZERO)));
        assert_eq!(parse_probe(Value::Nil, time()), None);
        assert_eq!(
            parse_probe(Value::Array(vec![bulk("m"), bulk("1")]), Value::Nil),
            None
        );
    }

    #[test]
    fn entry_ids_parse_strictly_and_order_numerically() {
        assert_eq!(
            EntryId::parse("1700000000000-7"),
            Some(EntryId(1_700_000_000_000, 7))
        );
        for bad in [
            "",
            "-",
            "1-",
            "-1",
            "1",
            "1-2-3",
            "a-1",
            "1-+2",
            "1 -2",
            "99999999999999999999-0",
            "18446744073709551616-0",
            "0-18446744073709551616",
        ] {
            assert_eq!(EntryId::parse(bad), None, "{bad:?}");
        }
        assert_eq!(EntryId::parse("007-01"), Some(EntryId(7, 1)));
        assert_eq!(
            EntryId::parse("18446744073709551615-3"),
            Some(EntryId(u64::MAX, 3))
        );
        let mut ids = ["10-0", "9-5", "9-10", "0-1"].map(|s| EntryId::parse(s).unwrap());
        ids.sort_unstable();
        assert_eq!(ids.map(|id| id.to_string()), ["0-1", "9-5", "9-10", "10-0"]);
    }

    /// The fenced scripts compare ids as Redis spells them: another spelling of the same id
    /// is sent to no script (its lease is not held).
    #[test]
    fn only_canonical_ids_go_to_the_fenced_scripts() {
        for good in ["0-0", "0-1", "10-0", "1700000000000-17"] {
            let id = EntryId::parse_canonical(good).expect(good);
            assert_eq!(id.to_string(), good);
        }
        for bad in ["01-1", "1-01", "00-0", "0-00", "1-", "x-1"] {
            assert_eq!(EntryId::parse_canonical(bad), None, "{bad:?}");
        }
    }
}
