#![allow(missing_docs)]
// LOCAL ONLY, never committed: explores with the known unsolicited+skew defect filtered out.
use leasehold_engine_check::{check, Scenario, Step};
use proptest::prelude::*;
proptest! {
    #![proptest_config(ProptestConfig { cases: 6000, max_shrink_iters: 20_000, failure_persistence: None, ..ProptestConfig::default() })]
    #[test]
    fn explore(bytes in proptest::collection::vec(any::<u8>(), 0..1500)) {
        let mut scenario = Scenario::from_bytes(&bytes);
        for s in &mut scenario.steps { if matches!(s, Step::Unsolicited{..} | Step::SettleStale{..}) { *s = Step::Tick; } }
        if let Err(v) = check(&scenario) {
            return Err(TestCaseError::fail(format!("{v}\nSETUP {:?}\nSTEPS {:?}", scenario.setup, scenario.steps)));
        }
    }
}
