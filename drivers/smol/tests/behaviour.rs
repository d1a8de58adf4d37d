//! The behavioural suite (`leasehold-worker-suite`) on smol: the global executor and real time,
//! with the suite's short intervals (poll 20 ms, re-poll 50 ms, claim timeout 0.5-1 s where
//! leases must lapse).

use leasehold_smol::SmolRuntime;
use leasehold_worker_suite::TestRuntime;

/// Workers run on smol's global executor; time is the system's.
#[derive(Clone)]
struct Smol;

impl TestRuntime for Smol {
    type Runtime = SmolRuntime;

    fn runtime(&self) -> SmolRuntime {
        SmolRuntime::global()
    }

    fn is_virtual(&self) -> bool {
        false
    }
}

leasehold_worker_suite::worker_suite!(Smol, smol::block_on);
