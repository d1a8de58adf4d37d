//! The README shows the examples as they are: each example that the README links to appears in
//! it verbatim (its opening doc comment aside), so the code people copy is the code CI builds
//! and runs (`cargo build --all-targets`, and the README's blocks run as doc tests).

use std::path::Path;

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

#[test]
fn the_readme_shows_its_examples_verbatim() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = read(&crate_dir.join("../../README.md"));
    for name in [
        "quickstart.rs",
        "producer.rs",
        "redis_worker.rs",
        "commands.rs",
        "metrics.rs",
        "sharded.rs",
    ] {
        let example = read(&crate_dir.join("examples").join(name));
        let code: String = example
            .lines()
            .skip_while(|line| line.starts_with("//!") || line.is_empty())
            .map(|line| format!("{line}\n"))
            .collect();
        assert!(
            readme.contains(&code),
            "README.md does not show examples/{name} as it is: copy the file's code (below its \
             doc comment) into the README's block"
        );
        assert!(
            readme.contains(&format!("drivers/leasehold/examples/{name}")),
            "README.md does not link examples/{name}"
        );
    }
}
