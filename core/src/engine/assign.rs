//! Which streams the engine fetches from: `handle_assignment`, for the shards of a sharded
//! queue that a worker shares with others ([`Shards::assign`](crate::Shards::assign)).

use std::time::Instant;

use super::LeaseEngine;
use crate::types::StreamId;

impl<P: Clone> LeaseEngine<P> {
    /// From now on, fetch from `stream` (`fetching`) or not. Every stream starts assigned.
    ///
    /// An unassigned stream issues no `Fetch` (so no blocking read waits on it), and that is
    /// all that changes: the leases it holds keep being renewed, run, re-polled, retried and
    /// acked until each is settled, so a shard handed to another worker loses nothing and
    /// runs nothing twice. A fetch already outstanding is answered as usual. A stream assigned
    /// again fetches at once (unless its failures are backing off): it may hold lapsed leases
    /// of a worker that left.
    pub fn handle_assignment(&mut self, now: Instant, stream: StreamId, fetching: bool) {
        self.begin(now);
        let now = self.now;
        match self.streams.get_mut(usize::from(stream.0)) {
            None => self.stats.unexpected += 1,
            Some(src) => {
                if fetching && !src.assigned && src.failures == 0 {
                    src.next_at = src.next_at.min(now);
                }
                src.assigned = fetching;
            }
        }
        self.finish();
    }

    /// Whether the engine fetches from `stream` ([`handle_assignment`](Self::handle_assignment));
    /// false for a stream it does not have.
    pub fn is_assigned(&self, stream: StreamId) -> bool {
        self.streams
            .get(usize::from(stream.0))
            .is_some_and(|s| s.assigned)
    }
}
