//! Helpers shared by the integration tests (included with `mod common;`).
#![allow(dead_code)]

use std::time::Duration;

use leasehold_core::{Fence, Fetched, LeaseRef, MessageId};
use leasehold_memory::{Bytes, ManualClock, MemoryStream, StreamConfig};

pub const TIMEOUT: Duration = Duration::from_secs(60);

/// A stream with a 60 s claim timeout on a manual clock.
pub fn stream() -> (MemoryStream, ManualClock) {
    let clock = ManualClock::new();
    let stream = MemoryStream::with_clock(StreamConfig::new(TIMEOUT), clock.clone()).unwrap();
    (stream, clock)
}

pub fn lease_ref(message: &Fetched<Bytes>) -> LeaseRef {
    LeaseRef::from(message)
}

pub fn lease_ref_of(id: &MessageId, fence: u64) -> LeaseRef {
    LeaseRef::new(id.clone(), Fence(fence))
}

pub fn ids(batch: &[Fetched<Bytes>]) -> Vec<String> {
    batch.iter().map(|m| m.id.to_string()).collect()
}

/// (owner, delivery count) of a pending message.
pub fn holder(stream: &MemoryStream, id: &MessageId) -> Option<(String, u32)> {
    stream
        .pending_info(id)
        .map(|info| (info.owner, info.delivery_count))
}

pub fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}
