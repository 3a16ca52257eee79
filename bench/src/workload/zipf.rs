//! Zipf-skewed popularity: item `k` (from 0) is drawn with probability proportional to
//! `1 / (k + 1)^s`, so a few prefixes are hot and a long tail is cold, as in real prompt
//! traffic (a handful of popular system prompts, many rare ones). `s = 0` is uniform.

use crate::rng::Rng64;

/// A sampler over `0..n` with Zipf weights, by inverse CDF (binary search), so one draw costs
/// one random number whatever `n` is.
#[derive(Debug, Clone)]
pub struct Zipf {
    /// Cumulative probabilities; the last is 1.
    cdf: Vec<f64>,
}

impl Zipf {
    /// `n` items (at least one) with exponent `s ≥ 0`.
    pub fn new(n: u32, s: f64) -> Self {
        let weights: Vec<f64> = (1..=n.max(1)).map(|k| f64::from(k).powf(-s)).collect();
        let total: f64 = weights.iter().sum();
        let mut acc = 0.0;
        let mut cdf: Vec<f64> = weights
            .iter()
            .map(|w| {
                acc += w / total;
                acc
            })
            .collect();
        // Rounding can leave the last entry a hair below 1; a draw must always land somewhere.
        if let Some(last) = cdf.last_mut() {
            *last = 1.0;
        }
        Self { cdf }
    }

    pub fn sample(&self, rng: &mut Rng64) -> u32 {
        let u = rng.unit();
        let i = self.cdf.partition_point(|c| *c <= u);
        i.min(self.cdf.len() - 1) as u32
    }

    /// Probability of the `k` most popular items together.
    pub fn top_share(&self, k: usize) -> f64 {
        match k {
            0 => 0.0,
            k => self.cdf[k.min(self.cdf.len()) - 1],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(z: &Zipf, n: usize, draws: usize, seed: u64) -> Vec<usize> {
        let mut rng = Rng64::new(seed);
        let mut c = vec![0; n];
        for _ in 0..draws {
            c[z.sample(&mut rng) as usize] += 1;
        }
        c
    }

    #[test]
    fn zero_exponent_is_uniform() {
        let z = Zipf::new(4, 0.0);
        assert!((z.top_share(1) - 0.25).abs() < 1e-12);
        for c in counts(&z, 4, 40_000, 1) {
            assert!((9_500..10_500).contains(&c), "{c}");
        }
    }

    #[test]
    fn exponent_one_follows_the_harmonic_weights() {
        let z = Zipf::new(10, 1.0);
        let h: f64 = (1..=10).map(|k| 1.0 / f64::from(k)).sum();
        assert!((z.top_share(1) - 1.0 / h).abs() < 1e-12);
        assert_eq!(z.top_share(10), 1.0);
        assert_eq!(z.top_share(99), 1.0);
        let c = counts(&z, 10, 100_000, 2);
        // Item 0 twice as often as item 1, ten times as often as item 9 (within noise).
        let r01 = c[0] as f64 / c[1] as f64;
        let r09 = c[0] as f64 / c[9] as f64;
        assert!((1.9..2.1).contains(&r01), "{r01}");
        assert!((9.0..11.0).contains(&r09), "{r09}");
    }

    #[test]
    fn draws_are_seeded_and_in_range() {
        let z = Zipf::new(7, 1.3);
        assert_eq!(counts(&z, 7, 500, 3), counts(&z, 7, 500, 3));
        assert_ne!(counts(&z, 7, 500, 3), counts(&z, 7, 500, 4));
        // One item: always it.
        let one = Zipf::new(1, 2.0);
        assert_eq!(counts(&one, 1, 10, 5), vec![10]);
    }
}
