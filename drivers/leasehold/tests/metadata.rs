//! The `rust-version` the crates state is true: it is the newest `rust-version` any package in
//! the locked dependency tree asks for (a toolchain older than that cannot build them), so it
//! must be updated whenever `Cargo.lock` brings a dependency that needs a newer Rust.

use std::process::Command;

use serde_json::Value;

/// `major.minor[.patch]` as numbers, for comparing (`1.88` is `1.88.0`).
fn version(text: &str) -> Vec<u64> {
    let mut parts: Vec<u64> = text
        .split('.')
        .map(|part| part.parse().unwrap_or(0))
        .collect();
    parts.resize(3, 0);
    parts
}

#[test]
fn rust_version_is_the_newest_the_dependency_tree_needs() {
    let output = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--locked"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        output.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: Value = serde_json::from_slice(&output.stdout).expect("cargo metadata is JSON");
    let packages = metadata["packages"].as_array().expect("a package list");
    let ours = env!("CARGO_PKG_RUST_VERSION");
    assert!(!ours.is_empty(), "leasehold states no rust-version");
    let (needs, by) = packages
        .iter()
        .filter(|p| !p["source"].is_null()) // dependencies, not the workspace's own crates
        .filter_map(|p| Some((p["rust_version"].as_str()?, p["name"].as_str()?)))
        .max_by_key(|(v, _)| version(v))
        .expect("some dependency states a rust-version");
    assert_eq!(
        version(ours),
        version(needs),
        "rust-version is {ours}, but {by} needs {needs}: set the workspace's rust-version to \
         {needs} (or pick a version of {by} that needs less)"
    );
    for package in packages.iter().filter(|p| p["source"].is_null()) {
        let name = package["name"].as_str().unwrap_or("?");
        assert_eq!(
            package["rust_version"].as_str(),
            Some(ours),
            "{name} states another rust-version than the workspace's"
        );
    }
}
