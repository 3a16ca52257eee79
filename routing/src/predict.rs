//! Online TTFT prediction per replica.
//!
//! TTFT ≈ wait + uncached_tokens × prefill_cost. Each replica's wait-per-queued-request and
//! per-token prefill cost are learned from the TTFTs the router observes, so a mixed fleet
//! (accelerator generations side by side) gets traffic in proportion to real speed. Time is
//! passed in as seconds (f64); this module reads no clock.
//!
//! The model is linear, `ttft = base + per_token × uncached + per_queued × queued_ahead`, fitted
//! by a three-parameter Kalman filter (recursive least squares with an explicit prior):
//! - the prior ([`TtftPrior`]) is the starting estimate, and its uncertainty decides how fast the
//!   first observations move it, so predictions are sensible before any observation and become
//!   the replica's own after a few dozen;
//! - a small process noise lets the coefficients drift (a replica that slows down under thermal
//!   throttling, a new engine version) and its growth is capped so that long runs of identical
//!   inputs cannot wind the covariance up;
//! - the innovation is clipped at [`OUTLIER_SIGMAS`] predicted standard deviations (a Huber
//!   update), so a single multi-second stall does not wreck the fit;
//! - coefficients are projected back to `>= 0` after each update (a negative prefill cost would
//!   make the scheduler prefer cold replicas), and the per-token cost keeps a floor of 1 % of its
//!   prior because prefill is never free.
//!
//! Cost per observation: a few dozen floating-point operations.

/// Innovations beyond this many predicted standard deviations are clipped (Huber).
pub const OUTLIER_SIGMAS: f64 = 3.0;

/// Features are scaled so that the three coefficients have comparable magnitudes: tokens are
/// counted in thousands.
const TOKEN_SCALE: f64 = 1e-3;
/// Process noise per observation, as a fraction of the prior variance.
const DRIFT: f64 = 1e-4;
/// Measurement noise estimate: EWMA weight, and floor (seconds²).
const NOISE_ALPHA: f64 = 0.05;
const NOISE_FLOOR: f64 = 1e-6;

/// One replica's learned latency model.
#[derive(Debug, Clone)]
pub struct TtftModel {
    prior: TtftPrior,
    /// [base_s, per_ktoken_s, per_queued_s]
    theta: [f64; 3],
    p: [[f64; 3]; 3],
    p0: [f64; 3],
    noise_var: f64,
    observations: u64,
}

impl Default for TtftModel {
    fn default() -> Self {
        Self::new(TtftPrior::default())
    }
}

/// Starting beliefs before any observation (documented defaults). Deserializable so that a
/// front end's configuration (the router's `predictor` section) is this type, checked by
/// [`TtftPrior::validate`].
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TtftPrior {
    /// Fixed overhead per request, seconds.
    pub base_s: f64,
    /// Prefill cost per uncached token, seconds.
    pub per_token_s: f64,
    /// Added wait per request already running or queued on the replica, seconds.
    pub per_queued_s: f64,
}

impl Default for TtftPrior {
    fn default() -> Self {
        Self {
            base_s: 0.005,
            per_token_s: 0.000_05,
            per_queued_s: 0.01,
        }
    }
}

impl TtftPrior {
    /// Check that every field is a finite number >= 0.
    pub fn validate(&self) -> Result<(), crate::ConfigError> {
        for (name, value) in [
            ("base_s", self.base_s),
            ("per_token_s", self.per_token_s),
            ("per_queued_s", self.per_queued_s),
        ] {
            if !(value.is_finite() && value >= 0.0) {
                return Err(crate::ConfigError::Prior { name, value });
            }
        }
        Ok(())
    }

    /// Non-finite or negative fields replaced by the defaults' values.
    fn sanitized(self) -> Self {
        let d = Self::default();
        let ok = |v: f64, dv: f64| if v.is_finite() && v >= 0.0 { v } else { dv };
        Self {
            base_s: ok(self.base_s, d.base_s),
            per_token_s: ok(self.per_token_s, d.per_token_s),
            per_queued_s: ok(self.per_queued_s, d.per_queued_s),
        }
    }
}

impl TtftModel {
    pub fn new(prior: TtftPrior) -> Self {
        let prior = prior.sanitized();
        let theta = [
            prior.base_s,
            prior.per_token_s / TOKEN_SCALE,
            prior.per_queued_s,
        ];
        // Prior standard deviation: four times the prior value (hardware differs by that much
        // and more), with a floor so that a zero prior can still learn.
        let sd = |v: f64, floor: f64| (4.0 * v).max(floor);
        let p0 = [
            sd(theta[0], 0.02).powi(2),
            sd(theta[1], 0.05).powi(2),
            sd(theta[2], 0.02).powi(2),
        ];
        let mut p = [[0.0; 3]; 3];
        for (i, row) in p.iter_mut().enumerate() {
            row[i] = p0[i];
        }
        Self {
            prior,
            theta,
            p,
            p0,
            noise_var: (0.25 * (prior.base_s + 1000.0 * prior.per_token_s)).powi(2) + NOISE_FLOOR,
            observations: 0,
        }
    }

    /// Predicted TTFT in seconds for a request with `uncached_tokens` to prefill on a replica with
    /// `queued_ahead` requests (running + waiting) in front of it.
    pub fn predict(&self, uncached_tokens: u32, queued_ahead: f64) -> f64 {
        let x = features(uncached_tokens, queued_ahead);
        dot(&self.theta, &x).max(0.0)
    }

    /// The queueing part of [`TtftModel::predict`]: `per_queued × queued_ahead`, seconds.
    pub fn predict_wait(&self, queued_ahead: f64) -> f64 {
        self.theta[2] * sanitize_queue(queued_ahead)
    }

    /// Learn from one observed TTFT. Non-finite or negative inputs are ignored.
    pub fn observe(&mut self, uncached_tokens: u32, queued_ahead: f64, ttft_s: f64) {
        if !ttft_s.is_finite() || ttft_s < 0.0 || !queued_ahead.is_finite() {
            return;
        }
        let x = features(uncached_tokens, queued_ahead);
        // Drift, with the covariance capped at the prior so it cannot wind up.
        for i in 0..3 {
            self.p[i][i] = (self.p[i][i] + DRIFT * self.p0[i]).min(self.p0[i]);
        }
        let px = mat_vec(&self.p, &x);
        let s = dot(&x, &px) + self.noise_var;
        let innovation = ttft_s - dot(&self.theta, &x);
        let limit = OUTLIER_SIGMAS * s.sqrt();
        let clipped = innovation.clamp(-limit, limit);
        for (t, k) in self.theta.iter_mut().zip(px.iter()) {
            *t += k / s * clipped;
        }
        for i in 0..3 {
            for j in 0..3 {
                self.p[i][j] -= px[i] * px[j] / s;
            }
        }
        // Keep P symmetric positive semi-definite despite rounding.
        for i in 0..3 {
            self.p[i][i] = self.p[i][i].max(1e-12 * self.p0[i]);
            for j in 0..i {
                let m = 0.5 * (self.p[i][j] + self.p[j][i]);
                let bound = (self.p[i][i] * self.p[j][j]).sqrt();
                let m = m.clamp(-bound, bound);
                self.p[i][j] = m;
                self.p[j][i] = m;
            }
        }
        let floors = [0.0, 0.01 * self.prior.per_token_s / TOKEN_SCALE, 0.0];
        for (t, f) in self.theta.iter_mut().zip(floors) {
            *t = t.max(f);
        }
        let residual = ttft_s - dot(&self.theta, &x);
        let r2 = residual.clamp(-limit, limit).powi(2);
        self.noise_var = ((1.0 - NOISE_ALPHA) * self.noise_var + NOISE_ALPHA * r2).max(NOISE_FLOOR);
        self.observations += 1;
    }

    /// Current per-token prefill cost estimate, seconds (exported as a metric).
    pub fn per_token_s(&self) -> f64 {
        self.theta[1] * TOKEN_SCALE
    }

    /// The per-token cost that errs slow: the higher of the prior's and the learned one (the
    /// learned cost can be misled low, the prior far below a slow accelerator's). What leaving
    /// a warm replica is priced at, and how fast a replica's pending prefill is taken to drain.
    pub fn cautious_per_token_s(&self) -> f64 {
        self.prior.per_token_s.max(self.per_token_s())
    }

    /// Current fixed-overhead estimate, seconds.
    pub fn base_s(&self) -> f64 {
        self.theta[0]
    }

    /// Current wait-per-queued-request estimate, seconds.
    pub fn per_queued_s(&self) -> f64 {
        self.theta[2]
    }

    /// Observations learned from so far.
    pub fn observations(&self) -> u64 {
        self.observations
    }

    /// The prior this model started from.
    pub fn prior(&self) -> TtftPrior {
        self.prior
    }
}

fn sanitize_queue(q: f64) -> f64 {
    if q.is_finite() {
        q.max(0.0)
    } else {
        0.0
    }
}

fn features(uncached_tokens: u32, queued_ahead: f64) -> [f64; 3] {
    [
        1.0,
        f64::from(uncached_tokens) * TOKEN_SCALE,
        sanitize_queue(queued_ahead),
    ]
}

fn dot(a: &[f64; 3], b: &[f64; 3]) -> f64 {
    a[0] * b[0] + a[1] * b[1] + a[2] * b[2]
}

fn mat_vec(m: &[[f64; 3]; 3], v: &[f64; 3]) -> [f64; 3] {
    [dot(&m[0], v), dot(&m[1], v), dot(&m[2], v)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    fn truth(u: u32, q: f64) -> f64 {
        0.02 + 0.000_2 * f64::from(u) + 0.03 * q
    }

    fn close(a: f64, b: f64, rel: f64) -> bool {
        (a - b).abs() <= rel * b.abs()
    }

    #[test]
    fn predicts_the_prior_before_observing() {
        let m = TtftModel::default();
        let p = TtftPrior::default();
        let want = p.base_s + 1000.0 * p.per_token_s + 2.0 * p.per_queued_s;
        assert!((m.predict(1000, 2.0) - want).abs() < 1e-12);
        assert_eq!(m.observations(), 0);
        assert!((m.per_token_s() - p.per_token_s).abs() < 1e-15);
    }

    #[test]
    fn learns_a_noisy_linear_replica() {
        let mut rng = SmallRng::seed_from_u64(7);
        let mut m = TtftModel::default();
        for _ in 0..2000 {
            let u = rng.random_range(0..8000u32);
            let q = f64::from(rng.random_range(0..20u32));
            let noise = 1.0 + rng.random_range(-0.1..0.1);
            m.observe(u, q, truth(u, q) * noise);
        }
        assert!(close(m.per_token_s(), 0.000_2, 0.1), "{}", m.per_token_s());
        assert!(close(m.per_queued_s(), 0.03, 0.15), "{}", m.per_queued_s());
        assert!(close(m.predict(4000, 5.0), truth(4000, 5.0), 0.05));
    }

    #[test]
    fn outliers_do_not_wreck_the_fit() {
        let mut rng = SmallRng::seed_from_u64(11);
        let mut m = TtftModel::default();
        for i in 0..3000 {
            let u = rng.random_range(0..8000u32);
            let q = f64::from(rng.random_range(0..20u32));
            let y = if i % 10 == 3 {
                truth(u, q) * 20.0 + 5.0
            } else {
                truth(u, q)
            };
            m.observe(u, q, y);
        }
        assert!(close(m.per_token_s(), 0.000_2, 0.25), "{}", m.per_token_s());
        assert!(close(m.predict(4000, 5.0), truth(4000, 5.0), 0.25));
    }

    #[test]
    fn coefficients_never_go_negative() {
        let mut m = TtftModel::default();
        // Adversarial data: bigger prompts and longer queues answer faster.
        for i in 0..500u32 {
            let u = (i % 50) * 200;
            let q = f64::from(i % 7);
            m.observe(u, q, (2.0 - 0.0002 * f64::from(u) - 0.1 * q).max(0.0));
        }
        assert!(m.per_token_s() > 0.0);
        assert!(m.per_queued_s() >= 0.0);
        assert!(m.base_s() >= 0.0);
        assert!(m.predict(0, 0.0) >= 0.0);
    }

    #[test]
    fn bad_inputs_are_ignored() {
        let mut m = TtftModel::default();
        let before = m.predict(100, 1.0);
        m.observe(100, 1.0, f64::NAN);
        m.observe(100, 1.0, -1.0);
        m.observe(100, f64::INFINITY, 1.0);
        m.observe(100, 1.0, f64::INFINITY);
        assert_eq!(m.observations(), 0);
        assert_eq!(m.predict(100, 1.0), before);
        assert!(m.predict(100, f64::NAN).is_finite());
        let bad = TtftModel::new(TtftPrior {
            base_s: f64::NAN,
            per_token_s: -1.0,
            per_queued_s: f64::INFINITY,
        });
        assert_eq!(bad.prior(), TtftPrior::default());
        assert!(TtftPrior::default().validate().is_ok());
        let err = TtftPrior {
            per_token_s: -1.0,
            ..TtftPrior::default()
        }
        .validate()
        .unwrap_err();
        assert!(err.to_string().contains("per_token_s"), "{err}");
        assert_eq!(err.field(), ["per_token_s"]);
        let parsed: TtftPrior = serde_json::from_str(r#"{"base_s":0.02}"#).unwrap();
        assert_eq!(
            parsed,
            TtftPrior {
                base_s: 0.02,
                ..TtftPrior::default()
            }
        );
        assert!(serde_json::from_str::<TtftPrior>(r#"{"per_tokens_s":1}"#).is_err());
    }

    #[test]
    fn tracks_a_replica_that_slows_down() {
        let mut rng = SmallRng::seed_from_u64(3);
        let mut m = TtftModel::default();
        for _ in 0..1000 {
            let u = rng.random_range(0..8000u32);
            m.observe(u, 0.0, 0.01 + 0.000_1 * f64::from(u));
        }
        assert!(close(m.per_token_s(), 0.000_1, 0.1));
        for _ in 0..3000 {
            let u = rng.random_range(0..8000u32);
            m.observe(u, 0.0, 0.01 + 0.000_4 * f64::from(u));
        }
        assert!(close(m.per_token_s(), 0.000_4, 0.15), "{}", m.per_token_s());
    }
}
