//! Atomics from `std`, or from `loom` under `--cfg loom` so the loom tests explore every
//! interleaving of the completion race.

#[cfg(loom)]
pub(crate) use loom::sync::{
    atomic::{AtomicU8, Ordering},
    Arc,
};
#[cfg(not(loom))]
pub(crate) use std::sync::{
    atomic::{AtomicU8, Ordering},
    Arc,
};
