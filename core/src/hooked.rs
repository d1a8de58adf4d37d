//! A backend wrapped in hooks, for what would otherwise be a hand-written forwarding
//! [`Backend`]: counting calls, timing them, recording their answers, injecting faults.
//!
//! A forwarding wrapper must repeat every method of the trait, and one it forgets (a default
//! method such as [`Backend::enqueued_at`]) silently falls back to the default. [`Hooked`]
//! forwards every method, so a wrapper writes only the hooks it needs, and a new SPI method is
//! forwarded in one place.
//!
//! ```
//! use std::sync::atomic::{AtomicUsize, Ordering};
//! use leasehold_core::{Backend, BackendError, BackendResult, Call, Hooked, Hooks};
//! # use leasehold_core::{DeadLetterReason, FetchAnswer, LeaseRef, MessageId, RenewResult, SettleResult};
//! # use std::time::Duration;
//! # struct Store;
//! # impl Backend for Store {
//! #     type Payload = Vec<u8>;
//! #     async fn publish(&self, _: Vec<u8>) -> BackendResult<MessageId> { Ok("1-0".into()) }
//! #     async fn fetch(&self, _: usize, _: Duration) -> BackendResult<FetchAnswer<Vec<u8>>> { Ok(FetchAnswer::default()) }
//! #     async fn renew(&self, l: &[LeaseRef]) -> BackendResult<Vec<RenewResult>> { Ok(vec![RenewResult::Kept; l.len()]) }
//! #     async fn ack(&self, l: &[LeaseRef]) -> BackendResult<Vec<SettleResult>> { Ok(vec![SettleResult::Ok; l.len()]) }
//! #     async fn release(&self, _: &LeaseRef, _: Duration) -> BackendResult<SettleResult> { Ok(SettleResult::Ok) }
//! #     async fn dead_letter(&self, _: &LeaseRef, _: &DeadLetterReason) -> BackendResult<SettleResult> { Ok(SettleResult::Ok) }
//! #     async fn stream_len(&self) -> BackendResult<u64> { Ok(0) }
//! #     async fn pending(&self) -> BackendResult<u64> { Ok(0) }
//! # }
//!
//! /// Counts renews, and fails every ack: what a test of lost acks needs.
//! #[derive(Default)]
//! struct Faults {
//!     renews: AtomicUsize,
//! }
//!
//! impl<P> Hooks<P> for Faults {
//!     async fn before(&self, call: Call<'_>) -> BackendResult<()> {
//!         match call {
//!             Call::Renew(_) => {
//!                 self.renews.fetch_add(1, Ordering::Relaxed);
//!                 Ok(())
//!             }
//!             Call::Ack(_) => Err(BackendError::transient("ack failed (injected)")),
//!             _ => Ok(()),
//!         }
//!     }
//! }
//!
//! # fn block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
//! #     match std::pin::pin!(f).poll(&mut cx) {
//! #         std::task::Poll::Ready(out) => out,
//! #         std::task::Poll::Pending => unreachable!("the toy store answers at once"),
//! #     }
//! # }
//! let backend = Hooked::new(Store, Faults::default());
//! block_on(async {
//!     assert!(backend.ack(&[]).await.is_err());
//!     backend.renew(&[]).await.unwrap();
//! });
//! assert_eq!(backend.hooks().renews.load(Ordering::Relaxed), 1);
//! ```

use std::future::Future;
use std::time::{Duration, SystemTime};

use crate::backend::{Backend, BackendResult, FetchAnswer, LeaseRef};
use crate::membership::Members;
use crate::types::{DeadLetterReason, MessageId, RenewResult, SettleResult};

/// A backend call about to be made, as [`Hooks::before`] sees it.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Call<'a> {
    /// [`Backend::publish`].
    Publish,
    /// [`Backend::fetch`] of up to `max` messages, waiting up to `wait`.
    Fetch {
        /// The most messages asked for.
        max: usize,
        /// How long the backend may wait for new entries.
        wait: Duration,
    },
    /// [`Backend::renew`] of these leases.
    Renew(&'a [LeaseRef]),
    /// [`Backend::ack`] of these leases.
    Ack(&'a [LeaseRef]),
    /// [`Backend::release`] of this lease, with this delay.
    Release(&'a LeaseRef, Duration),
    /// [`Backend::dead_letter`] of this lease, for this reason.
    DeadLetter(&'a LeaseRef, &'a DeadLetterReason),
    /// [`Backend::stream_len`].
    StreamLen,
    /// [`Backend::pending`].
    Pending,
    /// [`Members::heartbeat`] to this queue.
    Heartbeat(&'a str),
    /// [`Members::leave`] of this queue.
    Leave(&'a str),
}

/// What a [`Hooked`] backend runs around the calls it forwards. Every hook does nothing by
/// default.
pub trait Hooks<P>: Send + Sync + 'static {
    /// Before each call. An error fails the call without reaching the backend; a future that
    /// never completes hangs the call, as a stopped process would.
    fn before(&self, call: Call<'_>) -> impl Future<Output = BackendResult<()>> + Send {
        let _ = call;
        async { Ok(()) }
    }

    /// What a fetch answered (an error included), before the caller sees it; may change it.
    fn fetched(
        &self,
        answer: &mut BackendResult<FetchAnswer<P>>,
    ) -> impl Future<Output = ()> + Send {
        let _ = answer;
        async {}
    }

    /// What a renew of `leases` answered.
    fn renewed(&self, leases: &[LeaseRef], answer: &BackendResult<Vec<RenewResult>>) {
        let _ = (leases, answer);
    }

    /// What an ack of `leases` answered.
    fn acked(&self, leases: &[LeaseRef], answer: &BackendResult<Vec<SettleResult>>) {
        let _ = (leases, answer);
    }
}

/// Hooks shared with the code that reads what they recorded.
impl<P, H: Hooks<P>> Hooks<P> for std::sync::Arc<H> {
    fn before(&self, call: Call<'_>) -> impl Future<Output = BackendResult<()>> + Send {
        (**self).before(call)
    }

    fn fetched(
        &self,
        answer: &mut BackendResult<FetchAnswer<P>>,
    ) -> impl Future<Output = ()> + Send {
        (**self).fetched(answer)
    }

    fn renewed(&self, leases: &[LeaseRef], answer: &BackendResult<Vec<RenewResult>>) {
        (**self).renewed(leases, answer);
    }

    fn acked(&self, leases: &[LeaseRef], answer: &BackendResult<Vec<SettleResult>>) {
        (**self).acked(leases, answer);
    }
}

/// A backend that forwards every call to `inner`, running `hooks` around them; the
/// membership calls too, when `inner` is the handle of a sharded queue.
#[derive(Debug, Default)]
pub struct Hooked<B, H> {
    inner: B,
    hooks: H,
}

impl<B, H> Hooked<B, H> {
    /// `inner`, with `hooks` around its calls.
    pub fn new(inner: B, hooks: H) -> Self {
        Self { inner, hooks }
    }

    /// The wrapped backend.
    pub fn inner(&self) -> &B {
        &self.inner
    }

    /// The hooks.
    pub fn hooks(&self) -> &H {
        &self.hooks
    }
}

impl<B: Backend, H: Hooks<B::Payload>> Backend for Hooked<B, H> {
    type Payload = B::Payload;

    fn claim_timeout(&self) -> Option<Duration> {
        self.inner.claim_timeout()
    }

    fn enqueued_at(&self, id: &MessageId) -> Option<SystemTime> {
        self.inner.enqueued_at(id)
    }

    fn set_fetching(&self, fetching: bool) {
        self.inner.set_fetching(fetching);
    }

    async fn publish(&self, payload: B::Payload) -> BackendResult<MessageId> {
        self.hooks.before(Call::Publish).await?;
        self.inner.publish(payload).await
    }

    async fn fetch(&self, max: usize, wait: Duration) -> BackendResult<FetchAnswer<B::Payload>> {
        self.hooks.before(Call::Fetch { max, wait }).await?;
        let mut answer = self.inner.fetch(max, wait).await;
        self.hooks.fetched(&mut answer).await;
        answer
    }

    async fn renew(&self, leases: &[LeaseRef]) -> BackendResult<Vec<RenewResult>> {
        self.hooks.before(Call::Renew(leases)).await?;
        let answer = self.inner.renew(leases).await;
        self.hooks.renewed(leases, &answer);
        answer
    }

    async fn ack(&self, leases: &[LeaseRef]) -> BackendResult<Vec<SettleResult>> {
        self.hooks.before(Call::Ack(leases)).await?;
        let answer = self.inner.ack(leases).await;
        self.hooks.acked(leases, &answer);
        answer
    }

    async fn release(&self, lease: &LeaseRef, delay: Duration) -> BackendResult<SettleResult> {
        self.hooks.before(Call::Release(lease, delay)).await?;
        self.inner.release(lease, delay).await
    }

    async fn dead_letter(
        &self,
        lease: &LeaseRef,
        reason: &DeadLetterReason,
    ) -> BackendResult<SettleResult> {
        self.hooks.before(Call::DeadLetter(lease, reason)).await?;
        self.inner.dead_letter(lease, reason).await
    }

    async fn stream_len(&self) -> BackendResult<u64> {
        self.hooks.before(Call::StreamLen).await?;
        self.inner.stream_len().await
    }

    async fn pending(&self) -> BackendResult<u64> {
        self.hooks.before(Call::Pending).await?;
        self.inner.pending().await
    }
}

impl<B: Backend + Members, H: Hooks<B::Payload>> Members for Hooked<B, H> {
    fn member(&self) -> &str {
        self.inner.member()
    }

    fn shard(&self) -> Option<(&str, u16)> {
        self.inner.shard()
    }

    async fn heartbeat(&self, queue: &str, ttl: Duration) -> BackendResult<Vec<String>> {
        self.hooks.before(Call::Heartbeat(queue)).await?;
        self.inner.heartbeat(queue, ttl).await
    }

    async fn leave(&self, queue: &str) -> BackendResult<()> {
        self.hooks.before(Call::Leave(queue)).await?;
        self.inner.leave(queue).await
    }
}
