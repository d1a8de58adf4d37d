//! Shared helpers for leasehold benchmarks.
