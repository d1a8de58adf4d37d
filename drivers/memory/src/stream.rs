//! [`MemoryStream`]: the shared store, its configuration, clock and wake-ups.

use std::fmt;
use std::time::{Duration, Instant};

use bytes::Bytes;
use leasehold_core::MessageId;

use crate::clock::{Clock, SystemClock};
use crate::config::{MemoryError, StreamConfig};
use crate::inspect::{DeadLetter, PendingInfo};
use crate::store::Store;
use crate::sync::{lock, Arc, Mutex, MutexGuard};
use crate::wakeup::{Listener, Wakeup};

/// One in-process stream with one consumer group: a cheap, clone-able handle to the shared
/// store. Workers get their [`MemoryBackend`](crate::MemoryBackend) from [`consumer`](MemoryStream::consumer).
///
/// It is also the stream's [`Publisher`](leasehold_core::Publisher): messages delayed until
/// they are due and deduplicated by key (see [`publish_with_now`](MemoryStream::publish_with_now)).
/// Besides publishing it offers read-only inspection (who holds a
/// message, its delivery count and idle time, the dead letters) for tests and tools; a
/// [`MemoryInspector`](crate::MemoryInspector) given the stream is its
/// [`Inspector`](leasehold_core::Inspector), paged and able to requeue or purge dead letters.
#[derive(Clone)]
pub struct MemoryStream {
    shared: Arc<Shared>,
}

struct Shared {
    store: Mutex<Store>,
    clock: Box<dyn Clock>,
    /// Notified when something may have become fetchable, or due sooner than a waiting fetch
    /// knows: a publish (delayed ones too) or a release.
    wakeup: Wakeup,
    claim_timeout: Duration,
}

impl MemoryStream {
    /// An empty stream on the system clock.
    ///
    /// # Errors
    ///
    /// If the configuration is invalid (e.g. a zero claim timeout).
    pub fn new(config: StreamConfig) -> Result<Self, MemoryError> {
        Self::with_clock(config, SystemClock)
    }

    /// An empty stream on the given clock (e.g. a [`ManualClock`](crate::ManualClock)).
    ///
    /// # Errors
    ///
    /// If the configuration is invalid (e.g. a zero claim timeout).
    pub fn with_clock(config: StreamConfig, clock: impl Clock) -> Result<Self, MemoryError> {
        config.validate()?;
        Ok(Self {
            shared: Arc::new(Shared {
                store: Mutex::new(Store::new(config.claim_timeout)),
                clock: Box::new(clock),
                wakeup: Wakeup::new(),
                claim_timeout: config.claim_timeout,
            }),
        })
    }

    /// Appends a message and returns its id (`"0-1"`, `"0-2"`, …). Equal payloads are distinct
    /// messages. Wakes fetches waiting for messages.
    pub fn publish(&self, payload: impl Into<Bytes>) -> MessageId {
        let now = self.now();
        let id = self.store().publish(now, payload.into());
        self.wake();
        id
    }

    /// Messages in the stream, pending ones included (Redis `XLEN`).
    pub fn len(&self) -> usize {
        self.store().len()
    }

    /// Whether the stream holds no message.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Messages delivered and not yet acknowledged or dead-lettered.
    pub fn pending_len(&self) -> usize {
        self.store().pending_len()
    }

    /// Whether the message is still in the stream (not acked, not dead-lettered).
    pub fn contains(&self, id: &MessageId) -> bool {
        self.store().contains(id.as_str())
    }

    /// The pending-list row of a delivered, unacknowledged message; `None` if it was never
    /// delivered or is gone.
    pub fn pending_info(&self, id: &MessageId) -> Option<PendingInfo> {
        self.store().pending_info(self.now(), id.as_str())
    }

    /// Every pending message with its row, in id order.
    pub fn pending_entries(&self) -> Vec<(MessageId, PendingInfo)> {
        self.store().pending_entries(self.now())
    }

    /// The dead-letter stream, oldest first.
    pub fn dead_letters(&self) -> Vec<DeadLetter> {
        self.store().dead_letters().cloned().collect()
    }

    /// The configured claim timeout.
    pub fn claim_timeout(&self) -> Duration {
        self.shared.claim_timeout
    }

    /// The current instant on the stream's clock.
    pub fn now(&self) -> Instant {
        self.shared.clock.now()
    }

    pub(crate) fn is_real_time(&self) -> bool {
        self.shared.clock.is_real_time()
    }

    pub(crate) fn store(&self) -> MutexGuard<'_, Store> {
        lock(&self.shared.store)
    }

    /// A listener to register *before* checking for work, so a publish in between is not missed.
    pub(crate) fn listen(&self) -> Listener {
        self.shared.wakeup.listen()
    }

    /// Wakes every waiting fetch to look again.
    pub(crate) fn wake(&self) {
        self.shared.wakeup.notify_all();
    }
}

impl fmt::Debug for MemoryStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let store = self.store();
        f.debug_struct("MemoryStream")
            .field("claim_timeout", &self.shared.claim_timeout)
            .field("len", &store.len())
            .field("pending", &store.pending_len())
            .field("delayed", &store.delayed_len())
            .field("dead_letters", &store.dead_len())
            .finish()
    }
}
