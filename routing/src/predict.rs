//! Online TTFT prediction per replica.
//!
//! TTFT ≈ wait + uncached_tokens × prefill_cost. Each replica's wait-per-queued-request and
//! per-token prefill cost are learned from the TTFTs the router observes, so a mixed fleet
//! (accelerator generations side by side) gets traffic in proportion to real speed. Time is
//! passed in as seconds (f64); this module reads no clock.

/// One replica's learned latency model.
#[derive(Debug, Clone)]
pub struct TtftModel {
    _private: (),
}

impl Default for TtftModel {
    fn default() -> Self {
        Self::new(TtftPrior::default())
    }
}

/// Starting beliefs before any observation (documented defaults; the router's config may set them).
#[derive(Debug, Clone, Copy, PartialEq)]
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

impl TtftModel {
    pub fn new(prior: TtftPrior) -> Self {
        let _ = prior;
        todo!("routing core")
    }

    /// Predicted TTFT in seconds for a request with `uncached_tokens` to prefill on a replica with
    /// `queued_ahead` requests (running + waiting) in front of it.
    pub fn predict(&self, uncached_tokens: u32, queued_ahead: f64) -> f64 {
        let _ = (uncached_tokens, queued_ahead);
        todo!("routing core")
    }

    /// Learn from one observed TTFT.
    pub fn observe(&mut self, uncached_tokens: u32, queued_ahead: f64, ttft_s: f64) {
        let _ = (uncached_tokens, queued_ahead, ttft_s);
        todo!("routing core")
    }

    /// Current per-token prefill cost estimate, seconds (exported as a metric).
    pub fn per_token_s(&self) -> f64 {
        todo!("routing core")
    }
}
