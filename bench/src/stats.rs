//! Percentiles and summaries of latency samples.
//!
//! Percentiles interpolate linearly between the two nearest ranks (the "linear" method of
//! NumPy and of most benchmark tools), so p50 of an even-sized sample is the mean of the two
//! middle values. Empty samples have no percentiles (`None`), not zero.

use serde::{Deserialize, Serialize};

/// The `q`-th quantile (0.0..=1.0) of `sorted` (ascending).
pub fn quantile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() || !(0.0..=1.0).contains(&q) {
        return None;
    }
    let pos = q * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    let frac = pos - lo as f64;
    Some(sorted[lo] + (sorted[hi] - sorted[lo]) * frac)
}

/// Summary of one metric, in the unit of its samples.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Summary {
    pub count: usize,
    pub mean: Option<f64>,
    pub min: Option<f64>,
    pub p50: Option<f64>,
    pub p90: Option<f64>,
    pub p99: Option<f64>,
    pub max: Option<f64>,
}

impl Summary {
    /// Summarises `samples` (sorted in place; NaNs are dropped).
    pub fn of(samples: &mut Vec<f64>) -> Self {
        samples.retain(|v| !v.is_nan());
        samples.sort_by(f64::total_cmp);
        let count = samples.len();
        let mean = (count > 0).then(|| samples.iter().sum::<f64>() / count as f64);
        Self {
            count,
            mean,
            min: samples.first().copied(),
            p50: quantile(samples, 0.5),
            p90: quantile(samples, 0.9),
            p99: quantile(samples, 0.99),
            max: samples.last().copied(),
        }
    }
}

/// `points` evenly spaced quantiles of `sorted` (from 0 to 1 inclusive): a compact CDF to plot.
pub fn cdf_points(sorted: &[f64], points: usize) -> Vec<f64> {
    if sorted.is_empty() || points < 2 {
        return Vec::new();
    }
    (0..points)
        .filter_map(|i| quantile(sorted, i as f64 / (points - 1) as f64))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate_between_ranks() {
        let s = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(quantile(&s, 0.0), Some(1.0));
        assert_eq!(quantile(&s, 1.0), Some(4.0));
        assert_eq!(quantile(&s, 0.5), Some(2.5));
        // pos = 0.9 * 3 = 2.7 → 3 + 0.7 * 1
        assert!((quantile(&s, 0.9).unwrap() - 3.7).abs() < 1e-12);
        assert_eq!(quantile(&[7.0], 0.99), Some(7.0));
        assert_eq!(quantile(&[], 0.5), None);
        assert_eq!(quantile(&s, 1.5), None);
    }

    #[test]
    fn summary_of_one_to_hundred() {
        let mut v: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        v.push(f64::NAN);
        let s = Summary::of(&mut v);
        assert_eq!(s.count, 100);
        assert_eq!(s.mean, Some(50.5));
        assert_eq!(s.min, Some(1.0));
        assert_eq!(s.max, Some(100.0));
        assert!((s.p50.unwrap() - 50.5).abs() < 1e-9);
        assert!((s.p90.unwrap() - 90.1).abs() < 1e-9);
        assert!((s.p99.unwrap() - 99.01).abs() < 1e-9);
    }

    #[test]
    fn empty_summary_has_no_percentiles() {
        let s = Summary::of(&mut Vec::new());
        assert_eq!(s.count, 0);
        assert_eq!(s.p50, None);
        assert_eq!(s.mean, None);
    }

    #[test]
    fn cdf_points_span_min_to_max() {
        let v: Vec<f64> = (0..=10).map(f64::from).collect();
        let c = cdf_points(&v, 3);
        assert_eq!(c, vec![0.0, 5.0, 10.0]);
        assert!(cdf_points(&[], 10).is_empty());
    }
}
