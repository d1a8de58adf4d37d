//! What tests and tools can see of a stream: pending entries and dead letters.

use std::time::Duration;

use bytes::Bytes;
use leasehold_core::MessageId;

/// A delivered, unacknowledged message: its row in the pending list (Redis `XPENDING`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PendingInfo {
    /// The consumer that holds it.
    pub owner: String,
    /// How often it has been delivered; also the fence of the current delivery.
    pub delivery_count: u32,
    /// Time since it was last delivered or renewed. A released message reports
    /// `claim_timeout - delay` at release, so it reaches the claim timeout when the delay ends.
    pub idle: Duration,
}

/// A message moved to the dead-letter stream.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeadLetter {
    /// Its id in the dead-letter stream (`"0-1"`, `"0-2"`, … in order of arrival; never reused,
    /// even after dead letters were requeued or purged).
    pub id: MessageId,
    /// Its id in the stream it came from.
    pub original_id: MessageId,
    /// The payload, as published.
    pub payload: Bytes,
    /// Why it was dead-lettered (the `Display` text of the reason).
    pub reason: String,
    /// Its delivery count when it was dead-lettered.
    pub delivery_count: u32,
    /// The consumer that dead-lettered it.
    pub consumer: String,
}
