//! A token bucket: a sustained rate with a burst, refilled from the time elapsed between the
//! instants it is shown. Amounts are real numbers so one type serves requests (1 each) and
//! tokens (a request's estimate, corrected later).

use std::time::{Duration, Instant};

/// Smallest rate a bucket accepts; configurations are validated to be above 0, this only keeps
/// an unvalidated value from dividing by zero.
const MIN_RATE: f64 = 1e-9;

/// `rate` per second, holding at most `burst`. An amount passes when the bucket holds it, or
/// when it is larger than the whole bucket and the bucket is full; taking it may leave the
/// level negative (debt), which later refills pay back. Requests larger than the bucket are
/// thus slowed to the rate, never refused forever.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    level: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket. `rate` is per second; values out of range are clamped (rate to a tiny
    /// positive number, burst to at least 1).
    pub fn new(rate_per_s: f64, burst: f64, now: Instant) -> Self {
        let (rate, burst) = sanitize(rate_per_s, burst);
        Self {
            rate,
            burst,
            level: burst,
            last: now,
        }
    }

    pub fn rate(&self) -> f64 {
        self.rate
    }

    pub fn burst(&self) -> f64 {
        self.burst
    }

    /// What the bucket holds at `now` (negative while in debt).
    pub fn level(&mut self, now: Instant) -> f64 {
        self.refill(now);
        self.level
    }

    /// How long until `amount` would pass; zero when it passes now. Takes nothing.
    pub fn wait(&mut self, now: Instant, amount: f64) -> Duration {
        self.refill(now);
        let need = amount.min(self.burst);
        if self.level >= need {
            return Duration::ZERO;
        }
        // Round up by a nanosecond so that waiting exactly this long passes despite rounding.
        Duration::try_from_secs_f64((need - self.level) / self.rate)
            .map_or(Duration::MAX, |d| d.saturating_add(Duration::from_nanos(1)))
    }

    /// Take `amount` if it passes at `now`; otherwise how long until it would.
    pub fn try_take(&mut self, now: Instant, amount: f64) -> Result<(), Duration> {
        match self.wait(now, amount) {
            Duration::ZERO => {
                self.take(amount);
                Ok(())
            }
            wait => Err(wait),
        }
    }

    /// Take `amount` unconditionally (after a check, or to charge more than estimated); a
    /// negative amount gives back, up to the bucket's size.
    pub fn take(&mut self, amount: f64) {
        if amount.is_finite() {
            self.level = (self.level - amount).min(self.burst);
        }
    }

    /// Change rate and size; the level is kept (cut to the new size).
    pub fn reconfigure(&mut self, rate_per_s: f64, burst: f64, now: Instant) {
        self.refill(now);
        (self.rate, self.burst) = sanitize(rate_per_s, burst);
        self.level = self.level.min(self.burst);
    }

    fn refill(&mut self, now: Instant) {
        // An instant older than the last one counts as no time passing.
        let elapsed = now.saturating_duration_since(self.last);
        if elapsed > Duration::ZERO {
            self.level = (self.level + elapsed.as_secs_f64() * self.rate).min(self.burst);
            self.last = now;
        }
    }
}

fn sanitize(rate: f64, burst: f64) -> (f64, f64) {
    let rate = if rate.is_finite() && rate > MIN_RATE {
        rate
    } else if rate == f64::INFINITY {
        f64::MAX
    } else {
        MIN_RATE
    };
    let burst = if burst.is_nan() {
        1.0
    } else {
        burst.clamp(1.0, f64::MAX)
    };
    (rate, burst)
}
