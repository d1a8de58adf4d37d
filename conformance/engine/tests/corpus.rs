//! Replays the committed fuzz seed corpus (`fuzz/corpus/engine/`) through the harness, as the
//! fuzz target runs it (as decoded and in bursts), so every `cargo test` re-checks the inputs the
//! fuzzer found interesting.

use std::path::PathBuf;

use leasehold_engine_check::{check, Scenario};

#[test]
fn fuzz_corpus_replays_without_violation() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/engine");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read the fuzz corpus {}: {e}", dir.display()))
        .map(|entry| entry.expect("corpus entry").path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "the fuzz corpus {} is empty",
        dir.display()
    );
    let mut failures = Vec::new();
    for path in &files {
        let bytes = std::fs::read(path).expect("readable corpus file");
        // Both ways the fuzz target runs an input: as decoded, and fed in bursts.
        for (how, scenario) in [
            ("", Scenario::from_bytes(&bytes)),
            (" (in bursts)", Scenario::from_bytes_in_bursts(&bytes)),
        ] {
            if let Err(violation) = check(&scenario) {
                failures.push(format!("{}{how}: {violation}", path.display()));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} corpus files violate the invariants:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
}
