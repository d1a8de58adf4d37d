//! The simulator's only source of randomness: splitmix64.
//!
//! Written out rather than taken from `rand`: a replay must give the same run for a seed forever,
//! on every platform, whatever dependency upgrades happen (`rand` does not promise its `StdRng`
//! stream across versions), and ten lines of a well-studied generator are all a simulation
//! needs. It is not cryptographic and does not need to be.

use std::time::Duration;

/// A splitmix64 generator: every draw advances one 64-bit state.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.0)
    }

    /// A uniform number in `0..n` (`n` > 0), by multiply-shift (no modulo bias worth noting).
    pub fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0);
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// A uniform number in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        debug_assert!(lo <= hi);
        lo + self.below(hi - lo + 1)
    }

    /// A uniform float in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// `true` with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    /// A uniform duration in `lo..=hi`, at nanosecond resolution.
    pub fn duration(&mut self, lo: Duration, hi: Duration) -> Duration {
        let (lo_ns, hi_ns) = (nanos(lo), nanos(hi.max(lo)));
        Duration::from_nanos(self.range(lo_ns, hi_ns))
    }

    /// An exponentially distributed duration with the given mean (for Poisson fault arrivals).
    pub fn exponential(&mut self, mean: Duration) -> Duration {
        let u = 1.0 - self.unit(); // (0, 1]
        mean.mul_f64(-u.ln())
    }

    /// Picks one of `items` uniformly.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }

    /// Shuffles `items` in place (Fisher–Yates).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }
}

/// The splitmix64 output function, also used to derive independent seeds from one.
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream_and_ranges_hold() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        for _ in 0..1000 {
            assert_eq!(a.next_u64(), b.next_u64());
            let x = a.range(3, 9);
            assert!((3..=9).contains(&x));
            b.range(3, 9);
        }
        assert_ne!(Rng::new(1).next_u64(), Rng::new(2).next_u64());
        let mut r = Rng::new(3);
        let mut seen = [false; 4];
        for _ in 0..200 {
            seen[r.below(4) as usize] = true;
        }
        assert_eq!(seen, [true; 4]);
    }
}
