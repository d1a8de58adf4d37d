//! Determinism: the same inputs give the same effects and the same timeouts; retry jitter comes
//! from `Config::seed`.
//!
//! This is what lets the engine be tested on explicit instants, and a failing run be replayed from
//! its seed.

mod common;

use std::time::Instant;

use common::*;
use leasehold_core::RetryPolicy;

/// The same input sequence gives the same effect sequence (and the same timeouts).
#[test]
fn same_inputs_same_effects() {
    let t0 = Instant::now();
    for seed in [1, 2, 3] {
        let cfg = config()
            .concurrency(3)
            .max_leases(6)
            .retry(RetryPolicy {
                initial: secs(1),
                multiplier: 2.0,
                max: secs(10),
                jitter: 0.5,
            })
            .seed(seed);
        let mut one = Sim::new(&cfg, 2, seed, t0);
        let mut two = Sim::new(&cfg, 2, seed, t0);
        one.run(1500);
        two.run(1500);
        assert!(
            one.log.len() > 100,
            "a meaningful run: {} effects",
            one.log.len()
        );
        assert_eq!(one.log, two.log, "seed {seed}");
        assert_eq!(one.timeouts, two.timeouts, "seed {seed}");
        assert_eq!(one.engine.stats(), two.engine.stats());
    }
}
