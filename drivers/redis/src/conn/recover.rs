//! Waiting for a server that went away (killed, restarted, still loading its data) to answer
//! again, without sending it anything that takes entries meanwhile.
//!
//! A fetch dates its deliveries' leases from when it was sent (the engine cannot know when
//! the server acted on it, so it assumes the earliest instant). A read queued behind a
//! reconnection, or behind a server that is loading, would take entries only when the server
//! is back and hand them over with a lease already spent in the queue: after an outage as long
//! as the claim timeout, expired on arrival, thrown away and reclaimed a claim timeout later.
//! So a fetch that finds the server unreachable sends nothing that reads; it probes with
//! `EXISTS` on the stream (each probe waits at most for the connection's next reconnection
//! attempt, at most about 100 ms apart; on a cluster it goes to the node serving the stream;
//! a server still loading its data answers `LOADING`) until the server answers, then reads
//! with whatever is left of its wait.
//! Should the wait end first, the fetch returns nothing, as a wait that found no entry does:
//! the engine fetches again at once, where a failed fetch would back off (a poll interval, then
//! longer), idling the worker after the server is back. The outage is logged once, at WARN,
//! when it begins, and at INFO when it is over.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use leasehold_core::{BackendError, ErrorKind};
use redis::{RedisError, Value};

use super::Connection;
use crate::error::classify;

/// First pause between probes; it doubles up to [`PROBE_MAX`].
const PROBE_MIN: Duration = Duration::from_millis(5);
/// Longest pause between probes. A probe on a connection that is reconnecting waits for its
/// next attempt, so probes are seldom this far apart.
const PROBE_MAX: Duration = Duration::from_millis(50);

/// Whether `e` says the server cannot be reached, or cannot serve yet: the connection failed
/// (refused, reset, closed) or the server is loading its data. A fetch then waits for it (see
/// the module docs) rather than fail.
pub(crate) fn waits_for_the_server(e: &BackendError) -> bool {
    let Some(e) = std::error::Error::source(e).and_then(|s| s.downcast_ref::<RedisError>()) else {
        return false;
    };
    unreachable_now(e)
}

fn unreachable_now(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.code() == Some("LOADING")
}

/// Whether an outage is under way, as a backend's fetches saw it: logged once when it begins
/// and once when it ends.
#[derive(Debug, Default)]
pub(crate) struct Unreachable {
    since: std::sync::Mutex<Option<Instant>>,
    logged: AtomicBool,
}

impl Unreachable {
    fn begin(&self, stream: &str, e: &BackendError) {
        let mut since = self.since.lock().unwrap_or_else(|e| e.into_inner());
        if since.is_none() {
            *since = Some(Instant::now());
        }
        if !self.logged.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                %stream,
                %e,
                "Redis is unreachable: fetches wait for it to answer (renews and acks fail \
                 until then)"
            );
        }
    }

    fn end(&self, stream: &str) {
        let since = self.since.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(since) = since {
            self.logged.store(false, Ordering::Relaxed);
            tracing::info!(
                %stream,
                unreachable_for = ?since.elapsed(),
                "Redis answers again: fetching"
            );
        }
    }
}

impl Connection {
    /// After a fetch failed with `e`, which [`waits_for_the_server`]: probes until the server
    /// answers (true) or `deadline` passes (false). A fatal error (the credentials refused on
    /// reconnection) ends the wait as that error. `pause` is the fetch's own, zero at first:
    /// a fetch that fails again after the server answered (its blocking connection may fail
    /// where the command connection does not) waits before probing again, so it never loops
    /// without a pause.
    pub(crate) async fn wait_for_the_server(
        &self,
        e: &BackendError,
        deadline: Option<Instant>,
        outage: &Unreachable,
        stream: &str,
        pause: &mut Duration,
    ) -> Result<bool, BackendError> {
        outage.begin(stream, e);
        let left = || {
            deadline.map_or(Duration::MAX, |at| {
                at.saturating_duration_since(Instant::now())
            })
        };
        if !pause.is_zero() {
            async_io::Timer::after((*pause).min(left())).await;
        }
        *pause = (*pause * 2).clamp(PROBE_MIN, PROBE_MAX);
        loop {
            let left = left();
            if left.is_zero() {
                return Ok(false);
            }
            let probe = async {
                Some(
                    redis::cmd("EXISTS")
                        .arg(stream)
                        .query_async::<Value>(&mut self.clone())
                        .await,
                )
            };
            let timer = async {
                async_io::Timer::after(left).await;
                None
            };
            match futures_lite::future::or(probe, timer).await {
                None => return Ok(false),
                Some(Ok(_)) => {
                    outage.end(stream);
                    return Ok(true);
                }
                Some(Err(e)) if classify(&e) == ErrorKind::Fatal && !unreachable_now(&e) => {
                    return Err(crate::error::error("reconnect", e));
                }
                Some(Err(_)) => {}
            }
            async_io::Timer::after((*pause).min(left)).await;
            *pause = (*pause * 2).min(PROBE_MAX);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wrapped(e: RedisError) -> BackendError {
        crate::error::error("fetch", e)
    }

    #[test]
    fn a_gone_or_loading_server_is_waited_for() {
        for e in [
            RedisError::from(std::io::Error::new(
                std::io::ErrorKind::ConnectionRefused,
                "refused",
            )),
            RedisError::from(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "reset",
            )),
            RedisError::from(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "closed",
            )),
            redis::make_extension_error("LOADING".into(), Some("loading the dataset".into())),
        ] {
            assert!(waits_for_the_server(&wrapped(e)));
        }
        for e in [
            redis::make_extension_error("NOGROUP".into(), None),
            redis::make_extension_error("BUSY".into(), None),
            redis::make_extension_error("WRONGTYPE".into(), None),
            // Credentials refused on reconnection: no wait can help.
            RedisError::from((redis::ErrorKind::AuthenticationFailed, "bad password")),
            RedisError::from((redis::ErrorKind::Parse, "garbled reply")),
        ] {
            assert!(!waits_for_the_server(&wrapped(e)));
        }
        assert!(!waits_for_the_server(&BackendError::transient("no source")));
    }
}
