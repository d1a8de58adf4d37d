//! Engine benchmarks, with their baseline in the same run.
//!
//! - `lifecycle/<held>`: one message's whole life (fetch answered → `Run` → `Done` → `Ack` →
//!   acked → next `Fetch`, plus one `poll_timeout`) while `held` other leases are held, pending
//!   a re-poll (see `leasehold_benches::fixture` for why no timer fires inside the timed part).
//! - `floor_std_hashmap/<held>`: the minimal bookkeeping a message needs, one insert and one
//!   remove in a `std::collections::HashMap` already holding `held` entries, keyed by the same
//!   19-byte message ids. `floor_foldhash/<held>`: the same with hashbrown + foldhash, the table
//!   and hasher the engine itself uses (a stricter floor).
//! - `heartbeat/<held>`: one heartbeat tick: `handle_timeout` emitting the renew round for all
//!   held leases plus `handle_renewed` answering every lease `Kept`.
//!
//! Message ids (and the one-message delivery vector a backend decoder would produce) are built
//! outside the timed sections, for the lifecycle and the floors alike; dropping them (one id per
//! message) is timed in both. After the run, the table of medians and ratios is printed.
#![forbid(unsafe_code)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion};
use leasehold_benches::fixture::{message_id, Driver};
use leasehold_benches::report::{self, HEARTBEAT_SIZES, LIFECYCLE_SIZES};
use leasehold_core::MessageId;

/// Messages prepared (untimed) per timed section; a heartbeat runs between sections when this
/// many lifecycles went by since the last one.
const CHUNK: u64 = 8192;

fn lifecycle(c: &mut Criterion, held: usize) {
    let mut group = c.benchmark_group(report::LIFECYCLE);
    let mut driver = Driver::with_pending(held, 1, |_| ());
    driver.heartbeat();
    let mut acked = 0u64;
    let mut since_heartbeat = 0u64;
    group.bench_function(BenchmarkId::from_parameter(held), |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                let n = left.min(CHUNK);
                let mut deliveries: Vec<_> =
                    (0..n).map(|_| driver.next_delivery(1, |_| ())).collect();
                let start = Instant::now();
                for delivery in deliveries.drain(..) {
                    driver.lifecycle(delivery);
                }
                total += start.elapsed();
                drop(deliveries);
                left -= n;
                acked += n;
                since_heartbeat += n;
                driver.verify(acked);
                if since_heartbeat >= CHUNK {
                    driver.heartbeat();
                    since_heartbeat = 0;
                }
            }
            total
        });
    });
    group.finish();
}

/// The floor on a map type: insert one fresh id and remove it again, with `held` ids held.
fn floor<M: Floor>(c: &mut Criterion, name: &str, held: usize) {
    let mut group = c.benchmark_group(name);
    let mut map = M::default();
    for i in 0..held as u64 {
        map.insert(message_id(i), i);
    }
    let mut next = 1_000_000_000u64;
    group.bench_function(BenchmarkId::from_parameter(held), |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                let n = left.min(CHUNK);
                let mut ids: Vec<MessageId> = (next..next + n).map(message_id).collect();
                // Equal but separately allocated: removing the map's key frees it in the timed
                // section, as the lifecycle frees its lease's id (a clone would share it).
                let keys: Vec<MessageId> = (next..next + n).map(message_id).collect();
                next += n;
                let start = Instant::now();
                for (id, key) in ids.drain(..).zip(&keys) {
                    map.insert(id, next);
                    black_box(map.remove(key));
                }
                total += start.elapsed();
                left -= n;
            }
            assert_eq!(map.len(), held);
            total
        });
    });
    group.finish();
}

/// The two maps of the floor.
trait Floor: Default {
    fn insert(&mut self, id: MessageId, value: u64);
    fn remove(&mut self, id: &MessageId) -> Option<u64>;
    fn len(&self) -> usize;
}

macro_rules! impl_floor {
    ($($map:ty),*) => {$(
        impl Floor for $map {
            #[inline]
            fn insert(&mut self, id: MessageId, value: u64) {
                <$map>::insert(self, id, value);
            }
            #[inline]
            fn remove(&mut self, id: &MessageId) -> Option<u64> {
                <$map>::remove(self, id)
            }
            fn len(&self) -> usize {
                <$map>::len(self)
            }
        }
    )*};
}

impl_floor!(
    std::collections::HashMap<MessageId, u64>,
    hashbrown::HashMap<MessageId, u64>
);

fn heartbeat(c: &mut Criterion) {
    let mut group = c.benchmark_group(report::HEARTBEAT);
    group.sample_size(20);
    for held in HEARTBEAT_SIZES {
        let mut driver = Driver::with_pending(held, 0, |_| ());
        driver.heartbeat();
        group.bench_function(BenchmarkId::from_parameter(held), |b| {
            b.iter(|| assert_eq!(driver.heartbeat(), held));
        });
    }
    group.finish();
}

fn main() {
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(50)
        .configure_from_args();
    // Each size's lifecycle and floors run back to back, so a change in the machine's load
    // between them skews their ratio as little as possible.
    for held in LIFECYCLE_SIZES {
        lifecycle(&mut c, held);
        floor::<std::collections::HashMap<MessageId, u64>>(&mut c, report::FLOOR_STD, held);
        floor::<hashbrown::HashMap<MessageId, u64>>(&mut c, report::FLOOR_FOLDHASH, held);
    }
    heartbeat(&mut c);
    c.final_summary();
    // `cargo bench` passes `--bench`; `cargo test --benches` runs each benchmark once, no table.
    if std::env::args().any(|arg| arg == "--bench") {
        let dir = report::criterion_dir();
        println!("\n{}", report::table(&dir));
    }
}
