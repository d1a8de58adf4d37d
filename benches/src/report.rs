//! The results table: reads criterion's `<group>/<held>/new/estimates.json` and prints medians
//! and ratios as markdown.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Held-lease counts of the lifecycle and floor benchmarks.
pub const LIFECYCLE_SIZES: [usize; 3] = [1, 1_000, 100_000];
/// Held-lease counts of the heartbeat benchmark.
pub const HEARTBEAT_SIZES: [usize; 2] = [10_000, 100_000];

/// Criterion group: one message's lifecycle in the engine.
pub const LIFECYCLE: &str = "lifecycle";
/// Criterion group: the floor, `std::collections::HashMap` (SipHash) insert + remove.
pub const FLOOR_STD: &str = "floor_std_hashmap";
/// Criterion group: a stricter floor, the engine's own table (hashbrown + foldhash).
pub const FLOOR_FOLDHASH: &str = "floor_foldhash";
/// Criterion group: one heartbeat tick (renew round emitted and answered).
pub const HEARTBEAT: &str = "heartbeat";

/// The lifecycle target: at most this many floors at every size.
pub const TARGET_RATIO: f64 = 3.0;

/// The heartbeat target for 100 000 leases, "a few milliseconds", read as at most 5 ms.
pub const HEARTBEAT_TARGET_NS: f64 = 5e6;

/// A criterion estimate, in nanoseconds per iteration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    /// The median.
    pub median: f64,
    /// Lower bound of the median's 95 % confidence interval.
    pub lower: f64,
    /// Upper bound of the median's 95 % confidence interval.
    pub upper: f64,
}

/// Where criterion keeps its results: `$CRITERION_HOME`, `$CARGO_TARGET_DIR/criterion`, cargo's
/// target directory, or this workspace's `target/criterion` (criterion's own order).
pub fn criterion_dir() -> PathBuf {
    if let Some(home) = std::env::var_os("CRITERION_HOME") {
        return home.into();
    }
    if let Some(target) = std::env::var_os("CARGO_TARGET_DIR") {
        return Path::new(&target).join("criterion");
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let from_metadata = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .and_then(|out| serde_json::from_slice::<serde_json::Value>(&out.stdout).ok())
        .and_then(|meta| meta["target_directory"].as_str().map(PathBuf::from));
    from_metadata
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"))
        .join("criterion")
}

/// The latest estimate of `group/<held>`, if that benchmark has run.
pub fn read(dir: &Path, group: &str, held: usize) -> Option<Estimate> {
    let path = dir
        .join(group)
        .join(held.to_string())
        .join("new/estimates.json");
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    let median = &json["median"];
    Some(Estimate {
        median: median["point_estimate"].as_f64()?,
        lower: median["confidence_interval"]["lower_bound"].as_f64()?,
        upper: median["confidence_interval"]["upper_bound"].as_f64()?,
    })
}

/// A duration in nanoseconds, in a readable unit.
pub fn human(ns: f64) -> String {
    if ns < 1e3 {
        format!("{ns:.0} ns")
    } else if ns < 1e6 {
        format!("{:.2} µs", ns / 1e3)
    } else if ns < 1e9 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.2} s", ns / 1e9)
    }
}

fn cell(estimate: Option<Estimate>) -> String {
    estimate.map_or_else(|| "—".into(), |e| human(e.median))
}

fn ratio(num: Option<Estimate>, den: Option<Estimate>) -> String {
    match (num, den) {
        (Some(n), Some(d)) => format!("{:.1}×", n.median / d.median),
        _ => "—".into(),
    }
}

/// The markdown table of everything found under `dir`.
pub fn table(dir: &Path) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| held leases | lifecycle | floor: std `HashMap` insert+remove | lifecycle / floor \
         | target ≤ {TARGET_RATIO}× | stricter floor: hashbrown+foldhash \
         | lifecycle / stricter floor |"
    );
    let _ = writeln!(out, "|---:|---:|---:|---:|:---:|---:|---:|");
    for held in LIFECYCLE_SIZES {
        let life = read(dir, LIFECYCLE, held);
        let std = read(dir, FLOOR_STD, held);
        let fold = read(dir, FLOOR_FOLDHASH, held);
        let verdict = match (life, std) {
            (Some(l), Some(f)) if l.median <= TARGET_RATIO * f.median => "met",
            (Some(_), Some(_)) => "**missed**",
            _ => "—",
        };
        let _ = writeln!(
            out,
            "| {held} | {} | {} | **{}** | {verdict} | {} | {} |",
            cell(life),
            cell(std),
            ratio(life, std),
            cell(fold),
            ratio(life, fold),
        );
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "| held leases | heartbeat tick (renew round + all answered `Kept`) | per lease \
         | target: a few ms at 100 000 |"
    );
    let _ = writeln!(out, "|---:|---:|---:|:---:|");
    for held in HEARTBEAT_SIZES {
        let beat = read(dir, HEARTBEAT, held);
        let per = beat.map_or_else(|| "—".into(), |e| human(e.median / held as f64));
        let verdict = match beat {
            Some(e) if held == 100_000 && e.median <= HEARTBEAT_TARGET_NS => "met",
            Some(_) if held == 100_000 => "**missed**",
            _ => "",
        };
        let _ = writeln!(out, "| {held} | {} | {per} | {verdict} |", cell(beat));
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "Medians of criterion's samples (`{}`); ratios are what to compare across machines.",
        dir.display()
    );
    out
}
