//! Small statistics helpers of the demos: percentiles, human-readable durations, grouped rates.

use std::fmt;
use std::time::Duration;

/// p50 / p99 / max of a set of durations (nearest-rank percentiles).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Percentiles {
    /// How many samples.
    pub count: usize,
    /// The median.
    pub p50: Duration,
    /// The 99th percentile.
    pub p99: Duration,
    /// The largest sample.
    pub max: Duration,
}

impl Percentiles {
    /// The percentiles of `samples` (all zero when there are none).
    pub fn of(mut samples: Vec<Duration>) -> Self {
        samples.sort_unstable();
        Self {
            count: samples.len(),
            p50: nearest_rank(&samples, 0.50),
            p99: nearest_rank(&samples, 0.99),
            max: samples.last().copied().unwrap_or_default(),
        }
    }
}

/// The nearest-rank percentile `p` (0..=1) of sorted `samples`.
fn nearest_rank(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// A duration for tables: `850 µs`, `12.3 ms`, `4.21 s`.
pub(crate) struct Human(pub Duration);

impl fmt::Display for Human {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.0.as_secs_f64();
        let text = if secs >= 1.0 {
            format!("{secs:.2} s")
        } else if secs >= 0.01 {
            format!("{:.0} ms", secs * 1e3)
        } else if secs >= 0.001 {
            format!("{:.1} ms", secs * 1e3)
        } else {
            format!("{:.0} µs", secs * 1e6)
        };
        f.pad(&text)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn nearest_rank_percentiles() {
        let p = Percentiles::of((1..=100).rev().map(ms).collect());
        assert_eq!(
            (p.count, p.p50, p.p99, p.max),
            (100, ms(50), ms(99), ms(100))
        );
        let one = Percentiles::of(vec![ms(7)]);
        assert_eq!((one.p50, one.p99, one.max), (ms(7), ms(7), ms(7)));
        assert_eq!(Percentiles::of(Vec::new()), Percentiles::default());
    }

    #[test]
    fn formatting() {
        assert_eq!(grouped(1234567.4), "1 234 567");
        assert_eq!(grouped(999.0), "999");
        assert_eq!(Human(ms(4210)).to_string(), "4.21 s");
        assert_eq!(Human(ms(12)).to_string(), "12 ms");
        assert_eq!(Human(Duration::from_micros(1500)).to_string(), "1.5 ms");
        assert_eq!(Human(Duration::from_micros(850)).to_string(), "850 µs");
    }
}
