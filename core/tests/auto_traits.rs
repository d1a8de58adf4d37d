//! The engine's auto traits are part of its API: drivers move it between threads and share it
//! behind locks. Internal changes (a `Cell` or `Rc` cache, say) must not take them away.

use leasehold_core::{Effect, Lease, LeaseEngine};

fn send_sync<T: Send + Sync>() {}

#[test]
fn engine_effects_and_leases_are_send_and_sync() {
    send_sync::<LeaseEngine<String>>();
    send_sync::<LeaseEngine<Vec<u8>>>();
    send_sync::<Effect<String>>();
    send_sync::<Lease<String>>();
}
