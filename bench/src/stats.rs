//! Percentiles and summaries of latency samples, and the spread of a figure over seeds.
//!
//! Percentiles interpolate linearly between the two nearest ranks (the "linear" method of
//! NumPy and of most benchmark tools), so p50 of an even-sized sample is the mean of the two
//! middle values. Empty samples have no percentiles (`None`), not zero.
//!
//! Over seeds, a figure (say one run's TTFT p90) has one value per seed; [`Estimate::of`] gives
//! their median and a percentile-bootstrap 95 % confidence interval of that median: the values
//! are resampled with replacement [`RESAMPLES`] times by a seeded generator (so a report is the
//! same every time it is regenerated), and the interval runs from the 2.5th to the 97.5th
//! percentile of the resamples' medians. With few seeds the interval is wide and coarse (with
//! five it can only end on one of the five values), which is the honest answer: five runs do not
//! pin a figure down any finer.

use serde::{Deserialize, Serialize};

use crate::rng::Rng64;

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

/// Bootstrap resamples behind every interval.
pub const RESAMPLES: usize = 2000;

/// Seed of the bootstrap's generator: fixed, so the same results give the same report.
const BOOTSTRAP_SEED: u64 = 0xB007_5742_0095;

/// The median of `values` (NaNs ignored).
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
    v.sort_by(f64::total_cmp);
    quantile(&v, 0.5)
}

/// One figure over seeds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    pub median: f64,
    /// Seeds (values) behind it.
    pub n: usize,
    /// Bootstrap 95 % confidence interval of the median; `None` with one seed.
    pub interval: Option<(f64, f64)>,
}

/// Where an estimate lies against a bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The whole interval is on the good side.
    Clears,
    /// The whole interval is on the bad side.
    Fails,
    /// The interval contains the bound: the data cannot tell.
    Straddles,
    /// One seed: no interval; says which side the single value is on.
    Point { clears: bool },
}

impl Side {
    /// The verdict on a target as the reports word it: met only when the whole interval clears
    /// the bound.
    pub fn verdict(self) -> &'static str {
        match self {
            Side::Clears => "met",
            Side::Fails => "**missed**",
            Side::Straddles => "not shown (the interval straddles the bound)",
            Side::Point { clears: true } => "1 seed, no interval (the point meets it)",
            Side::Point { clears: false } => "1 seed, no interval (the point **misses** it)",
        }
    }
}

impl Estimate {
    /// The median of `values` and, with two or more, the bootstrap interval of it.
    pub fn of(values: &[f64]) -> Option<Self> {
        Self::bootstrap(values, RESAMPLES, BOOTSTRAP_SEED)
    }

    pub fn bootstrap(values: &[f64], resamples: usize, seed: u64) -> Option<Self> {
        let values: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
        let median = median(&values)?;
        let n = values.len();
        if n < 2 || resamples == 0 {
            return Some(Self {
                median,
                n,
                interval: None,
            });
        }
        let mut rng = Rng64::new(seed);
        let mut sample = vec![0.0; n];
        let mut medians: Vec<f64> = (0..resamples)
            .map(|_| {
                for x in sample.iter_mut() {
                    *x = values[rng.below(n as u64) as usize];
                }
                sample.sort_by(f64::total_cmp);
                quantile(&sample, 0.5).unwrap_or(median)
            })
            .collect();
        medians.sort_by(f64::total_cmp);
        let lo = quantile(&medians, 0.025).unwrap_or(median);
        let hi = quantile(&medians, 0.975).unwrap_or(median);
        Some(Self {
            median,
            n,
            interval: Some((lo, hi)),
        })
    }

    /// Against "at least `bound`".
    pub fn at_least(&self, bound: f64) -> Side {
        match self.interval {
            None => Side::Point {
                clears: self.median >= bound,
            },
            Some((lo, _)) if lo >= bound => Side::Clears,
            Some((_, hi)) if hi < bound => Side::Fails,
            Some(_) => Side::Straddles,
        }
    }

    /// Against "at most `bound`".
    pub fn at_most(&self, bound: f64) -> Side {
        match self.interval {
            None => Side::Point {
                clears: self.median <= bound,
            },
            Some((_, hi)) if hi <= bound => Side::Clears,
            Some((lo, _)) if lo > bound => Side::Fails,
            Some(_) => Side::Straddles,
        }
    }
}

/// What `warmpath-bench interval` prints: the estimate of per-seed `values` and, with a bound
/// (`at_least` or `at_most`), the verdict: `met` when the whole interval clears it, `missed`
/// when the whole interval is beyond it, `undecided` when it straddles, `met-one-seed` or
/// `missed-one-seed` without an interval.
pub fn interval_json(
    values: &[f64],
    at_least: Option<f64>,
    at_most: Option<f64>,
) -> serde_json::Value {
    let Some(e) = Estimate::of(values) else {
        return serde_json::json!({ "n": 0, "median": null, "interval": null, "verdict": null });
    };
    let side = match (at_least, at_most) {
        (Some(b), _) => Some(e.at_least(b)),
        (None, Some(b)) => Some(e.at_most(b)),
        (None, None) => None,
    };
    let verdict = side.map(|s| match s {
        Side::Clears => "met",
        Side::Fails => "missed",
        Side::Straddles => "undecided",
        Side::Point { clears: true } => "met-one-seed",
        Side::Point { clears: false } => "missed-one-seed",
    });
    serde_json::json!({
        "n": e.n,
        "median": e.median,
        "interval": e.interval.map(|(lo, hi)| [lo, hi]),
        "verdict": verdict,
    })
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

    #[test]
    fn median_of_odd_even_and_empty() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[f64::NAN, 1.0]), Some(1.0));
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn one_value_has_no_interval() {
        let e = Estimate::of(&[7.0]).unwrap();
        assert_eq!((e.median, e.n, e.interval), (7.0, 1, None));
        assert_eq!(e.at_least(5.0), Side::Point { clears: true });
        assert_eq!(e.at_most(5.0), Side::Point { clears: false });
        assert!(Estimate::of(&[]).is_none());
    }

    #[test]
    fn bootstrap_interval_brackets_the_median_and_is_reproducible() {
        let v = [10.0, 11.0, 12.0, 13.0, 30.0];
        let e = Estimate::of(&v).unwrap();
        assert_eq!((e.median, e.n), (12.0, 5));
        let (lo, hi) = e.interval.unwrap();
        // Medians of resamples of five values are always among the five values.
        assert!(v.contains(&lo) && v.contains(&hi), "{lo} {hi}");
        assert!(lo < 12.0 && 12.0 < hi, "{lo} {hi}");
        // The outlier is the median of a resample when it is drawn three times or more: about
        // 5.8 % of resamples, more than the 2.5 % above the upper end, so the upper end is the
        // outlier (five seeds cannot rule out that the figure is that high); likewise below.
        assert_eq!((lo, hi), (10.0, 30.0));
        assert_eq!(Estimate::of(&v), Some(e));
        // Another bootstrap seed may move the ends, never the median.
        let other = Estimate::bootstrap(&v, RESAMPLES, 1).unwrap();
        assert_eq!(other.median, 12.0);
        // Identical values: a zero-width interval.
        let flat = Estimate::of(&[2.0; 4]).unwrap();
        assert_eq!(flat.interval, Some((2.0, 2.0)));
    }

    #[test]
    fn more_seeds_narrow_the_interval() {
        let mut rng = Rng64::new(11);
        let draw = |rng: &mut Rng64, n: usize| -> Vec<f64> {
            (0..n).map(|_| 100.0 + 10.0 * (rng.unit() - 0.5)).collect()
        };
        let width = |e: Estimate| e.interval.map(|(lo, hi)| hi - lo).unwrap();
        let few = width(Estimate::of(&draw(&mut rng, 5)).unwrap());
        let many = width(Estimate::of(&draw(&mut rng, 200)).unwrap());
        assert!(many < few / 3.0, "{many} vs {few}");
    }

    #[test]
    fn sides_of_a_bound() {
        let e = Estimate {
            median: 10.0,
            n: 5,
            interval: Some((8.0, 12.0)),
        };
        assert_eq!(e.at_least(7.0), Side::Clears);
        assert_eq!(e.at_least(8.0), Side::Clears);
        assert_eq!(e.at_least(10.0), Side::Straddles);
        assert_eq!(e.at_least(12.5), Side::Fails);
        assert_eq!(e.at_most(12.0), Side::Clears);
        assert_eq!(e.at_most(9.0), Side::Straddles);
        assert_eq!(e.at_most(7.9), Side::Fails);
    }

    #[test]
    fn interval_json_judges_by_the_whole_interval() {
        let met = interval_json(&[0.98, 0.99, 1.0, 0.985, 0.99], Some(0.97), None);
        assert_eq!(met["verdict"], "met", "{met}");
        assert_eq!(met["n"], 5);
        // Median above the bound, one seed below it: the interval straddles.
        let straddles = interval_json(&[0.963, 0.978, 0.998], Some(0.97), None);
        assert_eq!(straddles["verdict"], "undecided", "{straddles}");
        let missed = interval_json(&[1.3, 1.4, 1.35], None, Some(1.25));
        assert_eq!(missed["verdict"], "missed", "{missed}");
        let one = interval_json(&[1.0], Some(0.97), None);
        assert_eq!(one["verdict"], "met-one-seed");
        assert!(one["interval"].is_null());
        assert!(interval_json(&[], None, None)["median"].is_null());
        assert!(interval_json(&[1.0, 2.0], None, None)["verdict"].is_null());
    }
}
