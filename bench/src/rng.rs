//! The seeded random generator of workloads: SplitMix64 (from `rand_xoshiro`) behind the few
//! draws the workloads make.
//!
//! A workload is defined by its seed, so the sequence must be the same on every machine and in
//! every future build; `pinned_outputs_never_change` fails if a dependency update ever changes it.

use rand_xoshiro::rand_core::{RngCore, SeedableRng};
use rand_xoshiro::SplitMix64;

/// SplitMix64: 64 bits of state, full period, good enough statistical quality for workloads.
#[derive(Debug, Clone)]
pub struct Rng64 {
    inner: SplitMix64,
}

impl Rng64 {
    pub fn new(seed: u64) -> Self {
        Self {
            inner: SplitMix64::seed_from_u64(seed),
        }
    }

    /// A generator for a named sub-stream, so that adding draws to one part of a workload does
    /// not shift every other part's numbers.
    pub fn derive(seed: u64, stream: u64) -> Self {
        let mut r = Self::new(seed ^ stream.wrapping_mul(0xA24B_AED4_963E_E407));
        r.next_u64();
        r
    }

    pub fn next_u64(&mut self) -> u64 {
        self.inner.next_u64()
    }

    /// Uniform in `0..n` (`n > 0`), by multiply-shift (bias below 2^-32 for the sizes used).
    pub fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0);
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Exponentially distributed with the given rate (mean `1 / rate`): Poisson inter-arrivals.
    pub fn exponential(&mut self, rate: f64) -> f64 {
        // 1 - unit() is in (0, 1], so the logarithm is finite.
        -(1.0 - self.unit()).ln() / rate
    }

    /// Fisher–Yates shuffle.
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_sequence_and_different_seed_differs() {
        let a: Vec<u64> = (0..8)
            .map({
                let mut r = Rng64::new(7);
                move |_| r.next_u64()
            })
            .collect();
        let mut r = Rng64::new(7);
        let b: Vec<u64> = (0..8).map(|_| r.next_u64()).collect();
        assert_eq!(a, b);
        let mut r = Rng64::new(8);
        assert_ne!(a[0], r.next_u64());
    }

    /// Outputs of the hand-written SplitMix64 this crate had before it used `rand_xoshiro`: every
    /// published workload was generated from them.
    #[test]
    fn pinned_outputs_never_change() {
        let take = |mut r: Rng64, n: usize| (0..n).map(|_| r.next_u64()).collect::<Vec<_>>();
        assert_eq!(
            take(Rng64::new(0), 4),
            [
                0xe220_a839_7b1d_cdaf,
                0x6e78_9e6a_a1b9_65f4,
                0x06c4_5d18_8009_454f,
                0xf88b_b8a8_724c_81ec
            ]
        );
        assert_eq!(
            take(Rng64::new(42), 4),
            [
                0xbdd7_3226_2feb_6e95,
                0x28ef_e333_b266_f103,
                0x4752_6757_130f_9f52,
                0x581c_e1ff_0e4a_e394
            ]
        );
        assert_eq!(
            take(Rng64::derive(42, 1), 3),
            [
                0xf34b_3763_afdb_baab,
                0xa4f2_957c_892e_3396,
                0x1d98_a38a_fdc5_b22a
            ]
        );
        assert_eq!(
            take(Rng64::derive(7, 3), 3),
            [
                0xc98b_9c8f_bb19_b9f6,
                0x0e98_42c0_7fd6_bde4,
                0xf98f_85f3_e04a_b635
            ]
        );
        let mut r = Rng64::new(5);
        assert_eq!(
            [r.below(1000), r.below(1000), r.below(1000)],
            [386, 752, 232]
        );
        assert_eq!(Rng64::new(5).unit().to_bits(), 4_600_639_013_628_994_160);
        let mut v: Vec<u32> = (0..10).collect();
        Rng64::new(9).shuffle(&mut v);
        assert_eq!(v, [8, 4, 3, 7, 0, 1, 5, 2, 9, 6]);
    }

    #[test]
    fn below_stays_in_range_and_covers_it() {
        let mut r = Rng64::new(1);
        let mut seen = [false; 5];
        for _ in 0..1000 {
            let v = r.below(5);
            assert!(v < 5);
            seen[v as usize] = true;
        }
        assert!(seen.iter().all(|s| *s));
    }

    #[test]
    fn exponential_mean_is_close_to_inverse_rate() {
        let mut r = Rng64::new(3);
        let n = 20_000;
        let mean: f64 = (0..n).map(|_| r.exponential(4.0)).sum::<f64>() / n as f64;
        assert!((mean - 0.25).abs() < 0.01, "mean {mean}");
    }

    #[test]
    fn shuffle_is_a_permutation() {
        let mut v: Vec<u32> = (0..100).collect();
        Rng64::new(9).shuffle(&mut v);
        assert_ne!(v, (0..100).collect::<Vec<_>>());
        v.sort();
        assert_eq!(v, (0..100).collect::<Vec<_>>());
    }
}
