//! Many generated scenarios, each checked after every input against the invariants and the
//! reference model, and run twice for determinism: as decoded, and fed in bursts.

use leasehold_engine_check::{check, Scenario, MAX_BURST};
use proptest::prelude::*;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 6000,
        max_shrink_iters: 20_000,
        // Failures print the shrunk scenario; regressions go to tests/regressions.rs by hand.
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn verdict(scenario: &Scenario) -> Result<(), TestCaseError> {
    match check(scenario) {
        Ok(()) => Ok(()),
        Err(violation) => Err(TestCaseError::fail(format!(
            "{violation}\nscenario: {scenario:#?}"
        ))),
    }
}

proptest! {
    #![proptest_config(config())]

    /// Bytes decode into a scenario (setup and steps) through `arbitrary`, as in the fuzz target;
    /// proptest shrinks the bytes, which shrinks the scenario.
    #[test]
    fn engine_keeps_its_invariants(bytes in proptest::collection::vec(any::<u8>(), 0..1200)) {
        verdict(&Scenario::from_bytes(&bytes))?;
    }

    /// The same, with every run of consecutive inputs fed as one burst (of at most 2 to
    /// `MAX_BURST` inputs) and the effects drained once after it.
    #[test]
    fn engine_keeps_its_invariants_in_bursts(
        bytes in proptest::collection::vec(any::<u8>(), 0..1200),
        max in 2..=MAX_BURST,
    ) {
        verdict(&Scenario::from_bytes(&bytes).in_bursts(max))?;
    }
}
