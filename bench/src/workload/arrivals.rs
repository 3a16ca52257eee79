//! Open-loop arrival times: a Poisson process at the offered rate, or a bursty on/off one with
//! the same mean rate.
//!
//! Bursty arrivals are an interrupted Poisson process: during a burst requests arrive at
//! `factor × rate`, between bursts none arrive; burst and quiet lengths are exponential with
//! means `period / factor` and `period × (1 − 1/factor)`, so bursts take `1/factor` of the time
//! and the mean rate stays `rate`. Offered load is therefore comparable with plain Poisson at
//! the same `--rate`; what changes is how often the fleet sees `factor` times that for a while,
//! which is when queues build and a router must spill hot prefixes.

use serde::{Deserialize, Serialize};

use crate::rng::Rng64;

/// The on/off modulation of an open loop.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Burst {
    /// Rate during a burst over the mean rate (> 1); bursts take `1 / factor` of the time.
    pub factor: f64,
    /// Mean length of one burst plus the quiet gap after it, seconds.
    pub period_s: f64,
}

/// Seeded arrival times, in seconds from the start of the run.
#[derive(Debug, Clone)]
pub struct Arrivals {
    gaps: Rng64,
    periods: Rng64,
    rate: f64,
    burst: Option<Burst>,
    /// The last arrival.
    t: f64,
    /// End of the current burst (bursty only).
    on_end: f64,
}

impl Arrivals {
    pub fn new(seed: u64, rate: f64, burst: Option<Burst>) -> Self {
        // The same sub-stream as before bursts existed, so plain Poisson runs keep their
        // arrival times.
        let gaps = Rng64::derive(seed, 0xA441_5A15);
        let mut periods = Rng64::derive(seed, 0xB045_7000);
        let burst = burst.filter(|b| b.factor > 1.0 && b.period_s > 0.0);
        // A run starts in a burst: the first seconds are the same kind of load every time.
        let on_end = burst.map_or(0.0, |b| periods.exponential(b.factor / b.period_s));
        Self {
            gaps,
            periods,
            rate: rate.max(1e-9),
            burst,
            t: 0.0,
            on_end,
        }
    }

    /// Seconds from the start of the run to the next arrival.
    pub fn next_arrival(&mut self) -> f64 {
        let Some(b) = self.burst else {
            self.t += self.gaps.exponential(self.rate);
            return self.t;
        };
        let on_rate = 1.0 / (b.period_s / b.factor);
        let off_rate = 1.0 / (b.period_s * (1.0 - 1.0 / b.factor));
        // The gap is drawn at the burst rate; the part of it that runs past the burst's end
        // continues in the next burst (memorylessness makes that exact).
        let mut gap = self.gaps.exponential(self.rate * b.factor);
        while self.t + gap > self.on_end {
            gap -= self.on_end - self.t;
            self.t = self.on_end + self.periods.exponential(off_rate);
            self.on_end = self.t + self.periods.exponential(on_rate);
        }
        self.t += gap;
        self.t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn times(seed: u64, rate: f64, burst: Option<Burst>, n: usize) -> Vec<f64> {
        let mut a = Arrivals::new(seed, rate, burst);
        (0..n).map(|_| a.next_arrival()).collect()
    }

    /// Squared coefficient of variation of the counts in `bin`-second windows: 1/mean for
    /// Poisson, much larger for bursty arrivals.
    fn count_dispersion(t: &[f64], bin: f64) -> f64 {
        let bins = (t.last().unwrap() / bin) as usize;
        let mut c = vec![0f64; bins];
        for x in t {
            if let Some(b) = c.get_mut((x / bin) as usize) {
                *b += 1.0;
            }
        }
        let mean = c.iter().sum::<f64>() / bins as f64;
        let var = c.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / bins as f64;
        var / mean
    }

    #[test]
    fn poisson_keeps_the_arrival_stream_it_always_had() {
        let mut rng = Rng64::derive(9, 0xA441_5A15);
        let mut t = 0.0;
        let expected: Vec<f64> = (0..50)
            .map(|_| {
                t += rng.exponential(20.0);
                t
            })
            .collect();
        assert_eq!(times(9, 20.0, None, 50), expected);
        // factor 1 is no modulation at all.
        let flat = Burst {
            factor: 1.0,
            period_s: 2.0,
        };
        assert_eq!(times(9, 20.0, Some(flat), 50), expected);
    }

    #[test]
    fn bursts_keep_the_mean_rate_and_are_seeded() {
        let b = Burst {
            factor: 4.0,
            period_s: 2.0,
        };
        let t = times(3, 50.0, Some(b), 50_000);
        let rate = t.len() as f64 / t.last().unwrap();
        assert!((rate - 50.0).abs() < 2.5, "{rate}");
        assert!(t.windows(2).all(|w| w[1] > w[0]));
        assert_eq!(t[..100], times(3, 50.0, Some(b), 100)[..]);
        assert_ne!(t[..100], times(4, 50.0, Some(b), 100)[..]);
    }

    #[test]
    fn bursts_are_burstier_than_poisson() {
        let b = Burst {
            factor: 4.0,
            period_s: 2.0,
        };
        let poisson = count_dispersion(&times(5, 50.0, None, 50_000), 0.25);
        let bursty = count_dispersion(&times(5, 50.0, Some(b), 50_000), 0.25);
        // Poisson counts have variance = mean; on/off ones many times that.
        assert!((0.8..1.2).contains(&poisson), "{poisson}");
        assert!(bursty > 5.0, "{bursty}");
    }
}
