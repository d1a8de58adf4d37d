//! A worker serving a sharded queue: it heartbeats its membership, and tells the engine (and
//! the backends) which shards to fetch from, as the core's [`Membership`] decides.
//!
//! Membership I/O never stops held work: a failed heartbeat is logged (rate-limited) and the
//! last assignment stays; the engine keeps renewing, running and acking every shard's leases
//! whatever is assigned.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_core::{Backend, BackendResult, Members, Membership, StreamId};

use crate::event::Event;
use crate::runtime::Runtime;

use super::notices::Throttle;
use super::Driver;

type Call<T> = Pin<Box<dyn Future<Output = BackendResult<T>> + Send>>;

/// A [`Members`] store with its futures boxed, so the driver need not know its type.
pub(crate) trait MemberIo: Send + Sync + 'static {
    fn heartbeat(&self, queue: &str, ttl: Duration) -> Call<Vec<String>>;
    fn leave(&self, queue: &str) -> Call<()>;
}

impl<M: Members> MemberIo for Arc<M> {
    fn heartbeat(&self, queue: &str, ttl: Duration) -> Call<Vec<String>> {
        let (store, queue) = (self.clone(), queue.to_owned());
        Box::pin(async move { Members::heartbeat(&*store, &queue, ttl).await })
    }

    fn leave(&self, queue: &str) -> Call<()> {
        let (store, queue) = (self.clone(), queue.to_owned());
        Box::pin(async move { Members::leave(&*store, &queue).await })
    }
}

/// The sharded queue a worker serves.
pub(crate) struct Sharding {
    pub(crate) membership: Membership,
    pub(crate) io: Arc<dyn MemberIo>,
    /// The worker's stream index of shard 0; shard `i` is stream `first + i`.
    pub(crate) first: usize,
    throttle: Throttle,
}

impl Sharding {
    pub(crate) fn new(membership: Membership, io: Arc<dyn MemberIo>, first: usize) -> Self {
        Self {
            membership,
            io,
            first,
            throttle: Throttle::default(),
        }
    }
}

impl<R: Runtime, B: Backend> Driver<R, B> {
    /// Applies assignment changes and sends a heartbeat when one is due.
    pub(super) fn membership(&mut self) {
        let Some(sharding) = &mut self.sharding else {
            return;
        };
        let now = self.rt.now();
        let heartbeat = sharding.membership.poll_heartbeat(now).then(|| {
            let queue = sharding.membership.shards().queue();
            let ttl = sharding.membership.settings().member_ttl;
            sharding.io.heartbeat(queue, ttl)
        });
        let first = sharding.first;
        let mut changed = false;
        while let Some((shard, fetching)) = sharding.membership.poll_assignment() {
            changed = true;
            let stream = first + usize::from(shard);
            let s = &self.streams[stream];
            tracing::debug!(stream = %s.name, fetching, "shard assignment changed");
            s.backend.set_fetching(fetching);
            self.engine
                .handle_assignment(now, StreamId(stream as u16), fetching);
        }
        if changed {
            let m = &sharding.membership;
            tracing::info!(
                queue = m.shards().queue(),
                fetching = m.assigned().len(),
                shards = m.shards().count(),
                known = m.is_known(now),
                "shard assignment changed; the leases of every shard are still served"
            );
        }
        if let Some(call) = heartbeat {
            self.call(call, Event::Members);
        }
    }

    /// A heartbeat's answer.
    pub(super) fn members_answered(&mut self, now: Instant, result: BackendResult<Vec<String>>) {
        let Some(sharding) = &mut self.sharding else {
            return;
        };
        match result {
            Ok(members) => sharding.membership.handle_members(now, &members),
            Err(error) => {
                sharding.membership.handle_failed(now);
                if let Some(suppressed) = sharding.throttle.admit(now) {
                    tracing::warn!(
                        queue = sharding.membership.shards().queue(),
                        %error,
                        suppressed,
                        fetching = sharding.membership.assigned().len(),
                        "membership heartbeat failed; keeping the last shard assignment"
                    );
                }
            }
        }
    }

    /// Shutdown: leave the membership at once, so the others take this worker's shards at
    /// their next heartbeat rather than a ttl later. Best effort: not waited for.
    pub(super) fn leave(&mut self) {
        let Some(sharding) = &mut self.sharding else {
            return;
        };
        sharding.membership.leave();
        let leave = sharding.io.leave(sharding.membership.shards().queue());
        let (rt, timeout) = (self.rt.clone(), self.options.call_timeout);
        self.rt.spawn(Box::pin(async move {
            let deadline = rt.sleep_until(rt.now() + timeout);
            let _ = futures::future::select(leave, std::pin::pin!(deadline)).await;
        }));
    }

    /// When membership needs the driver next.
    pub(super) fn membership_timeout(&self) -> Option<Instant> {
        self.sharding.as_ref()?.membership.poll_timeout()
    }
}
