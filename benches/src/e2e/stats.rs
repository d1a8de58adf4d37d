//! Small statistics helpers of the end-to-end benchmarks: medians, grouped rates, CPU time.

use std::time::Duration;

/// The median of `values` (the mean of the middle two for an even count); 0 when empty.
pub(crate) fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => 0.0,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

/// A rate for tables, with thousands separators: `1 234 567`.
pub(crate) fn grouped(value: f64) -> String {
    let digits = format!("{:.0}", value.max(0.0));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

/// CPU time used so far by every thread of this process (Linux: the first field of
/// `/proc/self/task/*/schedstat`, in nanoseconds); `None` elsewhere. On a machine shared with
/// other work, CPU time per message is steadier than throughput. A thread that ends takes its
/// time with it, so a difference of two readings can come out negative.
pub(crate) fn cpu_time() -> Option<Duration> {
    let mut total = 0u64;
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let path = task.ok()?.path().join("schedstat");
        // A thread may end between listing and reading: it no longer runs, skip it.
        if let Ok(text) = std::fs::read_to_string(path) {
            total += text.split_whitespace().next()?.parse::<u64>().ok()?;
        }
    }
    Some(Duration::from_nanos(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_grouping() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
        assert_eq!(grouped(1234567.4), "1 234 567");
        assert_eq!(grouped(999.0), "999");
    }

    #[test]
    fn cpu_time_is_read_on_linux() {
        if cfg!(target_os = "linux") {
            assert!(cpu_time().is_some_and(|cpu| cpu > Duration::ZERO));
        }
    }
}
