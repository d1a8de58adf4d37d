//! What operators see of the driver: failures logged (rate-limited while they go on), halts
//! surfaced in health and the report, the gauges, the live snapshot.

use std::time::{Duration, Instant};

use leasehold_core::{Backend, BackendError, ErrorKind, StreamId, Undeliverable};

use crate::health::Health;
use crate::meters::{Dead, Op};
use crate::report::{HaltedStream, Snapshot, StreamSnapshot};
use crate::runtime::Runtime;

use super::Driver;

/// How often a failing call of one stream is logged while it keeps failing: an outage must
/// not flood the log, but must show up in it.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// Rate-limits the log lines of one kind of failing call.
#[derive(Debug, Default)]
pub(crate) struct Throttle {
    /// When a line was last written.
    logged: Option<Instant>,
    /// Failures since, not logged.
    suppressed: u64,
}

impl Throttle {
    /// Whether to log a failure at `now`; if so, how many went unlogged since the last line.
    pub(super) fn admit(&mut self, now: Instant) -> Option<u64> {
        match self.logged {
            Some(at) if now.saturating_duration_since(at) < LOG_EVERY => {
                self.suppressed += 1;
                None
            }
            _ => {
                self.logged = Some(now);
                Some(std::mem::take(&mut self.suppressed))
            }
        }
    }
}

impl<R: Runtime, B: Backend> Driver<R, B> {
    /// A call of `stream` failed: count it, log it (a transient failure at most once every
    /// [`LOG_EVERY`] per stream and call while it keeps failing; a fatal one always, and it is
    /// remembered for the `Halt` it causes), and tell the engine what kind of failure it was.
    pub(super) fn failed(
        &mut self,
        now: Instant,
        stream: StreamId,
        op: Op,
        error: &BackendError,
    ) -> ErrorKind {
        let kind = error.kind();
        let s = &mut self.streams[usize::from(stream.0)];
        s.meters.backend_error(op, kind);
        match kind {
            ErrorKind::Transient => {
                if let Some(suppressed) = s.throttles[op as usize].admit(now) {
                    tracing::warn!(
                        stream = %s.name,
                        op = op.label(),
                        %error,
                        suppressed,
                        "backend call failed; retrying with backoff (suppressed: failures not logged since the last line)"
                    );
                }
            }
            ErrorKind::Fatal => {
                tracing::error!(
                    stream = %s.name,
                    op = op.label(),
                    %error,
                    "backend call failed fatally; not retried"
                );
                self.first_fatal[usize::from(stream.0)]
                    .get_or_insert_with(|| format!("{}: {error}", op.label()));
            }
        }
        kind
    }

    pub(super) fn snapshot(&self) -> Snapshot {
        let streams = self
            .streams
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let load = self.engine.load(StreamId(i as u16));
                StreamSnapshot {
                    stream: s.name.to_string(),
                    running: load.running,
                    held: load.held,
                    waiting: load.waiting,
                    halted: self
                        .halted
                        .iter()
                        .find(|h| *h.stream == *s.name)
                        .map(|h| h.error.clone()),
                    fetching: self.engine.is_assigned(StreamId(i as u16)),
                }
            })
            .collect();
        Snapshot {
            streams,
            stats: *self.engine.stats(),
        }
    }

    /// Sets each stream's gauges to what it occupies now.
    pub(super) fn publish_load(&self) {
        for (i, s) in self.streams.iter().enumerate() {
            let load = self.engine.load(StreamId(i as u16));
            s.meters.load(load.running, load.held);
        }
    }

    /// Counts and logs what the backend of `stream` dead-lettered by itself while fetching.
    pub(super) fn undeliverable(&mut self, stream: StreamId, dead: &[Undeliverable]) {
        let s = &self.streams[usize::from(stream.0)];
        if dead.is_empty() {
            return;
        }
        for entry in dead {
            s.meters.dead_lettered(Dead::Undeliverable);
            tracing::warn!(
                stream = %s.name,
                message_id = %entry.id,
                reason = %entry.reason,
                "the backend dead-lettered an entry it cannot deliver"
            );
        }
        self.engine.handle_undeliverable(dead.len());
    }

    /// A fatal error stopped `stream`'s intake: logged once, with its cause, and surfaced in
    /// the worker's health and shutdown report.
    pub(super) fn halt(&mut self, stream: StreamId) {
        let name = self.streams[usize::from(stream.0)].name.to_string();
        let error = self.first_fatal[usize::from(stream.0)]
            .clone()
            .unwrap_or_else(|| "a fatal backend error".into());
        tracing::error!(stream = %name, %error, "stream halted: a fatal backend error stopped its intake");
        self.halted.push(HaltedStream {
            stream: name.clone(),
            error: error.clone(),
        });
        let health = if self.halted.len() == self.streams.len() {
            Health::Stopped(format!("every stream halted; {name}: {error}"))
        } else {
            Health::Degraded(format!("stream {name} halted: {error}"))
        };
        self.health.set(health);
    }
}
