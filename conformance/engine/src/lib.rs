//! Reference model and invariant checker for the LeaseEngine.
