//! Stream configuration and the errors of setting a stream or consumer up.

use std::time::Duration;

use leasehold_core::MAX_DURATION;

/// How a [`MemoryStream`](crate::MemoryStream) behaves.
///
/// ```
/// # use std::time::Duration;
/// # use leasehold_memory::StreamConfig;
/// let config = StreamConfig { claim_timeout: Duration::from_secs(30), ..StreamConfig::default() };
/// # let _ = config;
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamConfig {
    /// How long a delivered message may go without a renew before another consumer may take it
    /// (the `min-idle` of Redis's `XAUTOCLAIM`). Also the cap on release delays. Use the same
    /// value as the engine's `claim_timeout`. Default 60 s; must be non-zero and at most
    /// [`MAX_DURATION`].
    pub claim_timeout: Duration,
}

impl StreamConfig {
    /// A configuration with the given claim timeout.
    pub fn new(claim_timeout: Duration) -> Self {
        Self { claim_timeout }
    }

    pub(crate) fn validate(&self) -> Result<(), MemoryError> {
        if self.claim_timeout.is_zero() {
            return Err(MemoryError::ZeroClaimTimeout);
        }
        if self.claim_timeout > MAX_DURATION {
            return Err(MemoryError::ClaimTimeoutTooLong {
                claim_timeout: self.claim_timeout,
                max: MAX_DURATION,
            });
        }
        Ok(())
    }
}

impl Default for StreamConfig {
    fn default() -> Self {
        Self::new(Duration::from_secs(60))
    }
}

/// Setting up a stream or a consumer failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MemoryError {
    /// `claim_timeout` is zero: every lease would lapse at once.
    #[error("claim_timeout must be greater than zero")]
    ZeroClaimTimeout,
    /// `claim_timeout` exceeds the supported maximum.
    #[error("claim_timeout {claim_timeout:?} exceeds the maximum {max:?}")]
    ClaimTimeoutTooLong {
        /// The configured value.
        claim_timeout: Duration,
        /// The largest accepted value.
        max: Duration,
    },
    /// A consumer needs a non-empty name.
    #[error("consumer name must not be empty")]
    EmptyConsumerName,
    /// A live consumer of this stream already has that name. Names identify lease owners, so
    /// each live worker needs its own; the name is free again once that consumer is dropped.
    #[error("consumer name {0:?} is already in use on this stream")]
    ConsumerNameTaken(String),
}
