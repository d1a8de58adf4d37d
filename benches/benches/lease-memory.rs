//! Memory per held lease: a counting global allocator measures the bytes an engine keeps
//! allocated (net: allocated minus freed, as requested from the allocator) while it holds
//! 1 000 and 100 000 leases, minus the payload's own bytes, and prints a table.
//!
//! Message ids are Redis-like (`1700000000000-00042`, 19 bytes) and count as part of the lease.
//! Allocator overhead (malloc's rounding and headers) is not included: these are the bytes the
//! engine asks for.
//!
//! Run: `cargo bench -p leasehold-benches --bench lease-memory`.

// The one place in the workspace with `unsafe`: implementing `GlobalAlloc` requires it.
// benches/Cargo.toml sets `unsafe_code = "deny"` (not the workspace's `forbid`) so this file can
// allow it; the code only forwards to `System` and counts.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering::Relaxed};

use leasehold_benches::fixture::Driver;
use leasehold_core::{Effect, Lease};

/// Forwards to the system allocator and keeps the net number of bytes allocated.
struct Counting;

static NET: AtomicIsize = AtomicIsize::new(0);
static CALLS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so it upholds
// `GlobalAlloc`'s contract exactly as `System` does; the counter has no effect on the memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged (see the impl).
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            NET.fetch_add(layout.size() as isize, Relaxed);
            CALLS.fetch_add(1, Relaxed);
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged (see the impl).
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            NET.fetch_add(layout.size() as isize, Relaxed);
            CALLS.fetch_add(1, Relaxed);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged (see the impl).
        unsafe { System.dealloc(ptr, layout) };
        NET.fetch_sub(layout.size() as isize, Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded unchanged (see the impl).
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            NET.fetch_add(new_size as isize - layout.size() as isize, Relaxed);
            CALLS.fetch_add(1, Relaxed);
        }
        new
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn net() -> isize {
    NET.load(Relaxed)
}

/// Sizes just past a growth, where memory per lease is at its worst: the lease slab grows by
/// half (16, 32, 48, ... 70 803, 106 204, 159 306 slots), so 106 205 leases have just grown it;
/// the message index (hashbrown, 7/8 load) doubles its 131 072 buckets at 114 689 leases; the
/// timer and epoch queues double at 131 073.
const GROWTH_POINTS: [usize; 3] = [106_205, 114_689, 131_073];

/// A tiny payload with heap bytes, to show they are subtracted correctly.
const PAYLOAD_BYTES: usize = 32;

/// Net bytes left allocated by `build` (which returns the driver holding the engine), minus
/// `payload_per_lease` bytes per lease. The driver's own bookkeeping (the list of running
/// invocations) is freed before the count: only the engine is measured.
fn measure<P>(leases: usize, payload_per_lease: usize, build: impl FnOnce() -> Driver<P>) -> Row {
    let before = net();
    let mut driver = build();
    drop(std::mem::take(&mut driver.running));
    let after = net();
    assert_eq!(driver.engine.held(), leases);
    let total = after - before - (leases * payload_per_lease) as isize;
    drop(driver);
    Row {
        leases,
        total,
        per_lease: total as f64 / leases as f64,
    }
}

/// A named way to fill an engine, with the payload bytes per lease it subtracts.
type Scenario<'a> = (&'a str, usize, &'a dyn Fn(usize) -> Row);

struct Row {
    leases: usize,
    total: isize,
    per_lease: f64,
}

fn main() {
    // `cargo test --benches` runs bench targets too; keep that quick and quiet.
    let sizes: &[usize] = if std::env::args().any(|arg| arg == "--bench") {
        &[1_000, 100_000, 106_205, 114_689, 131_073]
    } else {
        &[1_000]
    };
    let vec_payload = PAYLOAD_BYTES + std::mem::size_of::<Vec<u8>>();
    let scenarios: [Scenario<'_>; 4] = [
        (
            "pending (waiting for re-poll), after a heartbeat — steady state",
            0,
            &|n| {
                measure(n, 0, || {
                    let mut d = Driver::with_pending(n, 0, |_| ());
                    d.heartbeat();
                    d
                })
            },
        ),
        (
            "pending, before the first heartbeat (one fetch epoch per lease)",
            0,
            &|n| measure(n, 0, || Driver::with_pending(n, 0, |_| ())),
        ),
        (
            "running (one fetch of n, all invocations running)",
            0,
            &|n| measure(n, 0, || Driver::with_running(n, |_| ())),
        ),
        (
            "pending, after a heartbeat, 32-byte `Vec<u8>` payload",
            vec_payload,
            &|n| {
                measure(n, vec_payload, || {
                    let mut d = Driver::with_pending(n, 0, |i| vec![i as u8; PAYLOAD_BYTES]);
                    d.heartbeat();
                    d
                })
            },
        ),
    ];

    println!("# Engine memory per held lease (net bytes allocated, payload subtracted)\n");
    println!(
        "`size_of::<Lease<()>>()` = {} B, `size_of::<Effect<()>>()` = {} B; message ids are 19-byte \
         Redis-like ids and count as part of the lease.\n",
        std::mem::size_of::<Lease<()>>(),
        std::mem::size_of::<Effect<()>>(),
    );
    println!(
        "| scenario | leases | payload subtracted per lease | bytes total | bytes per lease |"
    );
    println!("|---|---:|---:|---:|---:|");
    // (worst at the sizes the target names, worst at a size just past a growth)
    let (mut worst, mut worst_unlucky): (f64, f64) = (0.0, 0.0);
    for (name, payload, run) in scenarios {
        for &n in sizes {
            let row = run(n);
            if GROWTH_POINTS.contains(&n) {
                worst_unlucky = worst_unlucky.max(row.per_lease);
            } else {
                worst = worst.max(row.per_lease);
            }
            println!(
                "| {name} | {} | {payload} B | {} | **{:.0}** |",
                row.leases, row.total, row.per_lease
            );
        }
    }
    let verdict = |bytes: f64| if bytes <= 256.0 { "met" } else { "MISSED" };
    println!(
        "\nworst at 1 000 and 100 000 leases: {worst:.0} B per lease (target ≤ 256 B): {}",
        verdict(worst)
    );
    if worst_unlucky > 0.0 {
        println!(
            "worst just past a growth (106 205: the lease slab grew by half; 114 689: the \
             message index doubled; 131 073: the timer and epoch queues doubled): \
             {worst_unlucky:.0} B per lease: {}",
            verdict(worst_unlucky)
        );
    }

    // Allocator calls (alloc, alloc_zeroed, realloc) per event: each one is ~20-50 ns of the
    // lifecycle's budget. The floor (insert + remove of a pre-built id) makes none.
    println!("\n# Allocator calls per event (alloc + realloc; frees not counted)\n");
    println!("| event | held leases | allocator calls per event |");
    println!("|---|---:|---:|");
    for &held in &[1, 1_000] {
        let mut driver = Driver::with_pending(held, 1, |_| ());
        driver.heartbeat();
        let rounds = 10_000;
        let deliveries: Vec<_> = (0..rounds)
            .map(|_| driver.next_delivery(1, |_| ()))
            .collect();
        let before = CALLS.load(Relaxed);
        for delivery in deliveries {
            driver.lifecycle(delivery);
        }
        let calls = CALLS.load(Relaxed) - before;
        driver.verify(rounds as u64);
        println!(
            "| lifecycle (deliver, run, Done, ack) | {held} | {:.1} |",
            calls as f64 / rounds as f64
        );
    }
    for &held in sizes {
        let mut driver = Driver::with_pending(held, 0, |_| ());
        driver.heartbeat();
        let before = CALLS.load(Relaxed);
        driver.heartbeat();
        let calls = CALLS.load(Relaxed) - before;
        println!("| heartbeat tick | {held} | {calls} |");
    }
}
