//! In-process backend.
