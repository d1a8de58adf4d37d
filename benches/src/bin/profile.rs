//! A fixed amount of work for `valgrind --tool=callgrind`, which counts instructions: stable on a
//! loaded machine where timings are not.
//!
//! `profile lifecycle <held> <n>` runs `n` lifecycles (as the `lifecycle/<held>` benchmark does,
//! heartbeats between chunks of 8 192), `profile floor <held> <n>` runs `n` insert+remove pairs
//! on a `std::collections::HashMap` holding `held` ids (as `floor_std_hashmap/<held>`). Only the
//! timed parts are collected with
//!
//! ```sh
//! valgrind --tool=callgrind --toggle-collect='leasehold_benches::fixture::Driver<P>::lifecycle' \
//!     --toggle-collect='profile::floor_step' target/release/profile lifecycle 1000 100000
//! ```
//!
//! and the instructions per operation are the collected total divided by `n`
//! (`benches/callgrind.sh` does all of it).
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::hint::black_box;

use leasehold_benches::fixture::{message_id, Driver};
use leasehold_core::MessageId;

const CHUNK: u64 = 8192;

/// One floor operation, kept out of line so callgrind can collect exactly it.
#[inline(never)]
fn floor_step(map: &mut HashMap<MessageId, u64>, id: MessageId, key: &MessageId, value: u64) {
    map.insert(id, value);
    black_box(map.remove(key));
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: profile lifecycle|floor <held> <n>";
    let [_, what, held, n] = &args[..] else {
        panic!("{usage}");
    };
    let held: usize = held.parse().expect(usage);
    let n: u64 = n.parse().expect(usage);
    match what.as_str() {
        "lifecycle" => {
            let mut driver = Driver::with_pending(held, 1, |_| ());
            driver.heartbeat();
            let mut done = 0;
            while done < n {
                let chunk = (n - done).min(CHUNK);
                let deliveries: Vec<_> = (0..chunk)
                    .map(|_| driver.next_delivery(1, |_| ()))
                    .collect();
                for delivery in deliveries {
                    driver.lifecycle(delivery);
                }
                done += chunk;
                driver.verify(done);
                driver.heartbeat();
            }
        }
        "floor" => {
            let mut map = HashMap::new();
            for i in 0..held as u64 {
                map.insert(message_id(i), i);
            }
            let mut next = 1_000_000_000u64;
            let mut done = 0;
            while done < n {
                let chunk = (n - done).min(CHUNK);
                let ids: Vec<MessageId> = (next..next + chunk).map(message_id).collect();
                // Separately allocated, as in the criterion floor: the timed remove frees the id.
                let keys: Vec<MessageId> = (next..next + chunk).map(message_id).collect();
                next += chunk;
                for (id, key) in ids.into_iter().zip(&keys) {
                    floor_step(&mut map, id, key, next);
                }
                done += chunk;
            }
            assert_eq!(map.len(), held);
        }
        _ => panic!("{usage}"),
    }
}
