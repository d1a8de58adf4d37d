//! Many generated scenarios, each checked after every input against the invariants and the
//! reference model, and run twice for determinism.

use leasehold_engine_check::{check, Scenario};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 6000,
        max_shrink_iters: 20_000,
        // Failures print the shrunk scenario; regressions go to tests/regressions.rs by hand.
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Bytes decode into a scenario (setup and steps) through `arbitrary`, as in the fuzz target;
    /// proptest shrinks the bytes, which shrinks the scenario.
    #[test]
    fn engine_keeps_its_invariants(bytes in proptest::collection::vec(any::<u8>(), 0..1200)) {
        let scenario = Scenario::from_bytes(&bytes);
        if let Err(violation) = check(&scenario) {
            return Err(TestCaseError::fail(format!("{violation}\nscenario: {scenario:#?}")));
        }
    }
}
