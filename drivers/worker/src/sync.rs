//! Synchronization primitives from `std`, or from `loom` under `--cfg loom` so the loom tests
//! explore every interleaving of the completion race and of the handler tasks' invocation
//! queue.

#[cfg(loom)]
pub(crate) use loom::sync::{
    atomic::{AtomicU8, Ordering},
    Arc, Mutex, MutexGuard,
};
#[cfg(not(loom))]
pub(crate) use std::sync::{
    atomic::{AtomicU8, Ordering},
    Arc, Mutex, MutexGuard,
};
