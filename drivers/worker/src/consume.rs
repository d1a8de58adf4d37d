//! The backward-compatible one-shot `consume`: fetch one message, run a closure, ack or release.

use std::fmt::Display;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use leasehold_core::{Backend, BackendResult, DeadLetterReason, LeaseRef};

use crate::codec::Decode;

/// What a `consume` closure may return: `bool`, or a `Result<bool, E>` whose error releases
/// the message like `false` does.
pub trait IntoAck {
    /// `Ok(true)`: ack; `Ok(false)`: release; `Err`: release (and the error is logged).
    fn into_ack(self) -> Result<bool, String>;
}

impl IntoAck for bool {
    fn into_ack(self) -> Result<bool, String> {
        Ok(self)
    }
}

impl<E: Display> IntoAck for Result<bool, E> {
    fn into_ack(self) -> Result<bool, String> {
        self.map_err(|e| e.to_string())
    }
}

/// Fetches at most one message, runs `f` on it, acks it when `f` returns `true` and releases it
/// (at once, for the next `consume`) when `f` returns `false`, fails or panics — it is never
/// lost. Returns whether a message was consumed. A payload that does not decode is
/// dead-lettered, since no retry can fix it.
pub async fn consume<B, M, C, F, A>(backend: &B, codec: &C, f: F) -> BackendResult<bool>
where
    B: Backend,
    B::Payload: AsRef<[u8]>,
    C: Decode<M>,
    F: FnOnce(M) -> A,
    A: IntoAck,
{
    let Some(message) = backend.fetch(1, Duration::ZERO).await?.into_iter().next() else {
        return Ok(false);
    };
    let lease_ref = LeaseRef::from(&message);
    let decoded = match codec.decode(message.payload.as_ref()) {
        Ok(decoded) => decoded,
        Err(error) => {
            let reason = DeadLetterReason::Rejected(format!("cannot decode payload: {error}"));
            backend.dead_letter(&lease_ref, &reason).await?;
            return Ok(true);
        }
    };
    let verdict = std::panic::catch_unwind(AssertUnwindSafe(|| f(decoded).into_ack()))
        .unwrap_or_else(|_| Err("consume closure panicked".into()));
    match verdict {
        Ok(true) => {
            backend.ack(std::slice::from_ref(&lease_ref)).await?;
        }
        Ok(false) => {
            backend.release(&lease_ref, Duration::ZERO).await?;
        }
        Err(error) => {
            tracing::warn!(id = %lease_ref.id, %error, "consume closure failed; message released");
            backend.release(&lease_ref, Duration::ZERO).await?;
        }
    }
    Ok(true)
}
