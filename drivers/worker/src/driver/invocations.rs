//! The invocations the driver has running, by id.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use leasehold_core::{InvocationId, StreamId};

use crate::cancel::Cancellation;

/// A hasher for the driver's invocation ids (a few small integers, never chosen by anyone
/// outside the engine): one multiply per word (FxHash) instead of SipHash.
#[derive(Default)]
pub(super) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.write_u64(u64::from(byte));
        }
    }

    fn write_u32(&mut self, word: u32) {
        self.write_u64(u64::from(word));
    }

    fn write_u64(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// A running invocation: its cancellation (which carries the lease's validity) and its stream.
pub(super) struct Running {
    pub(super) cancellation: Cancellation,
    pub(super) stream: StreamId,
}

/// The running invocations.
pub(super) type Invocations = HashMap<InvocationId, Running, BuildHasherDefault<IdHasher>>;
