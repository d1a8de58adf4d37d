//! Decodes the input bytes into a scenario (a small engine configuration and a list of steps)
//! and runs it through the invariant-checking harness, as decoded and with every run of
//! consecutive inputs fed as one burst; any violation is a crash.
#![no_main]

use leasehold_engine_check::{run, Scenario};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    for scenario in [
        Scenario::from_bytes(data),
        Scenario::from_bytes_in_bursts(data),
    ] {
        if let Err(violation) = run(&scenario) {
            panic!("{violation}\n{scenario:#?}");
        }
    }
});
