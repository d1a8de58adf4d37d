//! Serving a sharded queue: [`WorkerBuilder::sharded`] adds every shard as a stream of the
//! worker, and the worker shares the shards with the others serving the queue.

use std::future::Future;
use std::sync::Arc;

use leasehold_core::{Backend, Members, MembershipConfig, Shards};
use serde::de::DeserializeOwned;

use crate::codec::{CodecError, Decode, Json};
use crate::delivery::{Delivery, IntoOutcome};
use crate::driver::MemberIo;
use crate::runtime::Runtime;
use crate::worker::{Added, WorkerBuilder, WorkerError};

/// The sharded queue a builder was given.
pub(crate) struct ShardedQueue {
    pub(crate) shards: Shards,
    /// The worker's stream index of shard 0.
    pub(crate) first: usize,
    pub(crate) member: String,
    pub(crate) io: Arc<dyn MemberIo>,
}

/// One codec shared by every shard's dispatcher.
struct Shared<C>(Arc<C>);

impl<M, C: Decode<M>> Decode<M> for Shared<C> {
    fn decode(&self, bytes: &[u8]) -> Result<M, CodecError> {
        self.0.decode(bytes)
    }
}

impl<R: Runtime, B: Backend + Members> WorkerBuilder<R, B>
where
    B::Payload: AsRef<[u8]>,
{
    /// Serves the sharded queue `shards` with `handler`: `backends` holds one backend per
    /// shard, in shard order (the `i`-th serves `shards.stream(i)`), all of one consumer.
    ///
    /// The worker heartbeats its membership of the queue through them
    /// ([`Members`]), fetches from the shards [`Shards::assign`] gives it among the live
    /// members (every shard when it is alone, at least two fetchers per shard when there are
    /// two workers or more), and serves the leases of every shard it holds to the end,
    /// whatever is assigned: a shard moving to another worker drops nothing. One budget
    /// (`concurrency`, `max_leases`) covers all the shards, fetched round-robin.
    ///
    /// A wrong number of backends, backends of different consumers, or a backend that says it
    /// serves another shard make [`start`](Self::start) fail.
    #[must_use]
    pub fn sharded<M, H, F>(
        self,
        shards: Shards,
        backends: impl IntoIterator<Item = B>,
        handler: H,
    ) -> Self
    where
        M: DeserializeOwned + Send + 'static,
        H: Fn(Delivery<M>) -> F + Send + Sync + 'static,
        F: Future + Send + 'static,
        F::Output: IntoOutcome,
    {
        self.sharded_with_codec(shards, backends, Json::<M>::default(), handler)
    }

    /// [`sharded`](Self::sharded), with messages `codec` decodes.
    #[must_use]
    pub fn sharded_with_codec<M, C, H, F>(
        mut self,
        shards: Shards,
        backends: impl IntoIterator<Item = B>,
        codec: C,
        handler: H,
    ) -> Self
    where
        M: Send + 'static,
        C: Decode<M>,
        H: Fn(Delivery<M>) -> F + Send + Sync + 'static,
        F: Future + Send + 'static,
        F::Output: IntoOutcome,
    {
        let backends: Vec<Arc<B>> = backends.into_iter().map(Arc::new).collect();
        if let Err(e) = check(&shards, &backends, self.sharded.is_some()) {
            self.error.get_or_insert(e);
            return self;
        }
        let (codec, handler) = (Arc::new(codec), Arc::new(handler));
        let first = self.streams.len();
        for (shard, backend) in backends.iter().enumerate() {
            let handler = handler.clone();
            self.streams.push(Added {
                name: shards.stream(shard as u16).into(),
                backend: backend.clone(),
                make: crate::dispatch::make(Shared(codec.clone()), move |d| handler(d)),
            });
        }
        self.sharded = Some(ShardedQueue {
            member: backends[0].member().to_owned(),
            io: Arc::new(backends[0].clone()),
            shards,
            first,
        });
        self
    }
}

impl<R: Runtime, B: Backend> WorkerBuilder<R, B>
where
    B::Payload: AsRef<[u8]>,
{
    /// How the worker takes part in its sharded queue's membership: fetchers per shard, member
    /// ttl, heartbeat cadence (defaults: 2, the claim timeout, a third of it). Validated by
    /// [`start`](Self::start).
    #[must_use]
    pub fn membership(mut self, config: MembershipConfig) -> Self {
        self.membership = config;
        self
    }
}

/// Why `backends` cannot serve `shards`.
fn check<B: Members>(shards: &Shards, backends: &[Arc<B>], again: bool) -> Result<(), WorkerError> {
    let sharded = |why: String| Err(WorkerError::Sharded(why));
    if again {
        return sharded(format!(
            "a worker serves one sharded queue; {} was added after another",
            shards.queue()
        ));
    }
    if backends.len() != usize::from(shards.count()) {
        return sharded(format!(
            "{} has {} shards but {} backends were given: one per shard, in shard order",
            shards.queue(),
            shards.count(),
            backends.len()
        ));
    }
    let member = backends[0].member();
    for (i, backend) in backends.iter().enumerate() {
        if backend.member() != member {
            return sharded(format!(
                "the backends of {} are of consumers {member:?} and {:?}: one worker is one \
                 consumer on every shard",
                shards.queue(),
                backend.member()
            ));
        }
        match backend.shard() {
            Some((queue, shard)) if queue != shards.queue() || usize::from(shard) != i => {
                return sharded(format!(
                    "backend {i} of {} serves shard {shard} of {queue:?}: give the backends \
                     in shard order",
                    shards.queue()
                ))
            }
            _ => {}
        }
    }
    Ok(())
}
