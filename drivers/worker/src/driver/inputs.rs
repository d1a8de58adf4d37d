//! What comes back to the driver — a call's result, a handler's outcome, a request of the
//! worker handle — handed to the engine as the input it is.

use std::time::Instant;

use leasehold_core::{Backend, FetchAnswer, RenewResult, SettleResult};

use crate::event::Event;
use crate::meters::{seconds, Op};
use crate::runtime::Runtime;

use super::Driver;

impl<R: Runtime, B: Backend> Driver<R, B> {
    pub(super) fn handle(&mut self, now: Instant, event: Event<B::Payload>) {
        match event {
            Event::Fetched(stream, sent, result) => {
                let meters = &self.streams[usize::from(stream.0)].meters;
                meters
                    .fetch_rtt
                    .record(seconds(now.saturating_duration_since(sent)));
                match result {
                    Ok(answer) => {
                        let FetchAnswer {
                            messages,
                            next_due,
                            undeliverable,
                            ..
                        } = answer;
                        meters.deliveries.increment(messages.len() as u64);
                        self.engine.handle_fetched(now, stream, messages);
                        if let Some(due) = next_due {
                            self.engine.handle_due(now, stream, Some(now + due));
                        }
                        self.undeliverable(stream, &undeliverable);
                    }
                    Err(error) => {
                        let kind = self.failed(now, stream, Op::Fetch, &error);
                        self.engine.handle_fetch_failed(now, stream, kind);
                    }
                }
            }
            Event::Outcome(invocation, outcome) => {
                // Its handler task recorded how it ended (`HandlerMeters`).
                self.invocations.remove(&invocation);
                self.engine.handle_outcome(now, invocation, outcome);
            }
            Event::Renewed(batch, stream, sent, leases, result) => {
                let meters = &self.streams[usize::from(stream.0)].meters;
                meters
                    .renew_rtt
                    .record(seconds(now.saturating_duration_since(sent)));
                match result {
                    Ok(results) => {
                        // How close the confirmed leases came to expiring locally.
                        let margin = leases
                            .iter()
                            .zip(&results)
                            .filter(|(_, result)| **result == RenewResult::Kept)
                            .filter_map(|(id, _)| self.engine.valid_until(*id))
                            .min()
                            .map(|until| until.saturating_duration_since(now));
                        if let Some(margin) = margin {
                            meters.lease_margin.record(seconds(margin));
                        }
                        self.engine
                            .handle_renewed(now, batch, leases.into_iter().zip(results));
                    }
                    Err(error) => {
                        let kind = self.failed(now, stream, Op::Renew, &error);
                        self.engine.handle_renew_failed(now, batch, kind);
                    }
                }
            }
            Event::Acked(batch, stream, leases, Ok(results)) => {
                let acked = results.iter().filter(|r| **r == SettleResult::Ok).count();
                self.streams[usize::from(stream.0)]
                    .meters
                    .acks
                    .increment(acked as u64);
                self.engine
                    .handle_acked(now, batch, leases.into_iter().zip(results));
            }
            Event::Acked(batch, stream, _, Err(error)) => {
                let kind = self.failed(now, stream, Op::Ack, &error);
                self.engine.handle_ack_failed(now, batch, kind);
            }
            Event::Released(lease, stream, result) => {
                let result = result.map_err(|error| self.failed(now, stream, Op::Release, &error));
                self.engine.handle_released(now, lease, result);
            }
            Event::DeadLettered(lease, stream, dead, result) => {
                if let Ok(SettleResult::Ok) = result {
                    self.streams[usize::from(stream.0)]
                        .meters
                        .dead_lettered(dead);
                }
                let result =
                    result.map_err(|error| self.failed(now, stream, Op::DeadLetter, &error));
                self.engine.handle_dead_lettered(now, lease, result);
            }
            Event::Shutdown(grace, reply) => {
                self.waiters.extend(reply);
                self.engine.handle_shutdown(now, now + grace);
                self.leave();
                // No more fetches are needed: stop the ones waiting for new entries.
                self.fetch_abandon
                    .iter_mut()
                    .for_each(|abandon| drop(abandon.take()));
            }
            Event::Snapshot(reply) => {
                let _ = reply.send(self.snapshot());
            }
            Event::Members(result) => self.members_answered(now, result),
        }
        // Every input this driver gives is one the engine asked for, exactly once.
        debug_assert_eq!(
            self.engine.stats().unexpected,
            0,
            "the driver gave the engine an input it never asked for"
        );
    }
}
