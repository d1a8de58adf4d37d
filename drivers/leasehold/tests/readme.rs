//! The README and the guide show the examples as they are: each example that one of them links
//! to appears in it verbatim (its opening doc comment aside), so the code people copy is the
//! code CI builds and runs (`cargo build --all-targets`, and both files' blocks run as doc
//! tests).

use std::path::Path;

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

#[test]
fn the_readme_shows_its_examples_verbatim() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (document, names) in [
        ("../../README.md", &["quickstart.rs", "redis_worker.rs"][..]),
        (
            "GUIDE.md",
            &["producer.rs", "commands.rs", "metrics.rs", "sharded.rs"][..],
        ),
    ] {
        let text = read(&crate_dir.join(document));
        for name in names {
            let example = read(&crate_dir.join("examples").join(name));
            let code: String = example
                .lines()
                .skip_while(|line| line.starts_with("//!") || line.is_empty())
                .map(|line| format!("{line}\n"))
                .collect();
            assert!(
                text.contains(&code),
                "{document} does not show examples/{name} as it is: copy the file's code (below \
                 its doc comment) into the {document}'s block"
            );
            assert!(
                text.contains(&format!("drivers/leasehold/examples/{name}")),
                "{document} does not link examples/{name}"
            );
        }
    }
}
