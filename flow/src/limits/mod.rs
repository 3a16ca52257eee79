//! Per-tenant limits: requests per second and tokens per second (token buckets with bursts)
//! and requests in flight at once.
//!
//! [`Limits`] is one tenant's state; [`TenantLimiters`] keeps it for many tenants within a
//! bound. A check is all-or-nothing: a refused request takes nothing from any bucket. A
//! [`Refusal`] says which limit refused (the one that will pass last) and how long until a
//! retry would pass, for `retry-after`. An admitted request holds a permit until it ends;
//! releasing it frees its concurrency slot and corrects the tokens bucket to the tokens
//! actually used.
//!
//! With N router replicas each replica limits on its own: a tenant spread evenly over them
//! gets up to N times each rate and N times the concurrency. A caller that knows N can pass
//! limits divided by N (see the crate README).

mod bucket;
mod tenants;
#[cfg(test)]
mod tests;

pub use bucket::TokenBucket;
pub use tenants::{TenantLimiters, TenantPermit};

use crate::{Reason, TenantLimitsConfig};
use std::time::{Duration, Instant};

/// Which limit refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Limit {
    Requests,
    Tokens,
    Concurrency,
    /// [`crate::TenantLimiters`] is full of tenants with requests in flight and cannot track a
    /// new one.
    Tenants,
}

impl Limit {
    /// The setting that refused (for logs; the wire says `rate-limited`).
    pub const fn field(self) -> &'static str {
        match self {
            Limit::Requests => "requests_per_second",
            Limit::Tokens => "tokens_per_second",
            Limit::Concurrency => "max_concurrent_requests",
            Limit::Tenants => "max_tenants",
        }
    }
}

/// A request refused by a limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    pub limit: Limit,
    /// How long until a retry would pass, as far as the buckets know (a concurrency slot frees
    /// when some request ends: we cannot know when, and say one second).
    pub retry_after: Duration,
}

impl Refusal {
    /// Always [`Reason::RateLimited`].
    pub fn reason(&self) -> Reason {
        Reason::RateLimited
    }

    /// `retry-after` in whole seconds: rounded up, at least 1. Less than a microsecond over a
    /// whole second is rounding (the buckets add a nanosecond so that waiting exactly
    /// `retry_after` passes), not another second.
    pub fn retry_after_secs(&self) -> u64 {
        let d = self.retry_after.saturating_sub(Duration::from_micros(1));
        let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
        secs.max(1)
    }
}

/// Held by an admitted request; give it back to [`Limits::release`]. Not `Clone`: a request
/// ends once.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "release the permit when the request ends, or its concurrency slot leaks"]
pub struct LimitPermit {
    pub(super) tokens: u64,
}

impl LimitPermit {
    /// Tokens charged to the tokens bucket at admission.
    pub fn tokens(&self) -> u64 {
        self.tokens
    }
}

/// What a refused concurrency check tells the client to wait.
const CONCURRENCY_RETRY: Duration = Duration::from_secs(1);

/// One tenant's limits and their state.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    requests: Option<TokenBucket>,
    tokens: Option<TokenBucket>,
    max_concurrent: Option<u32>,
    in_flight: u32,
}

impl Limits {
    /// Full buckets, nothing in flight. Limits absent from `config` are not checked.
    pub fn new(config: &TenantLimitsConfig, now: Instant) -> Self {
        let mut limits = Self {
            requests: None,
            tokens: None,
            max_concurrent: None,
            in_flight: 0,
        };
        limits.reconfigure(config, now);
        limits
    }

    /// Follow a changed configuration, keeping bucket levels and the in-flight count (a new
    /// limit starts with a full bucket).
    pub fn reconfigure(&mut self, config: &TenantLimitsConfig, now: Instant) {
        fn bucket(
            b: &mut Option<TokenBucket>,
            rate: Option<f64>,
            burst: Option<f64>,
            now: Instant,
        ) {
            let Some(rate) = rate else {
                *b = None;
                return;
            };
            // Absent burst: one second of the rate.
            let burst = burst.unwrap_or(rate);
            match b {
                Some(b) => b.reconfigure(rate, burst, now),
                None => *b = Some(TokenBucket::new(rate, burst, now)),
            }
        }
        bucket(
            &mut self.requests,
            config.requests_per_second,
            config.burst,
            now,
        );
        bucket(
            &mut self.tokens,
            config.tokens_per_second,
            config.token_burst,
            now,
        );
        self.max_concurrent = config.max_concurrent_requests;
    }

    /// Admit a request estimated at `tokens` (prompt's uncached tokens plus expected output)
    /// at `now`, or refuse it. All-or-nothing: a refusal takes nothing.
    pub fn check(&mut self, now: Instant, tokens: u64) -> Result<LimitPermit, Refusal> {
        let mut worst: Option<Refusal> = None;
        let mut note = |limit, wait: Duration| {
            if wait > Duration::ZERO && worst.is_none_or(|w| wait > w.retry_after) {
                worst = Some(Refusal {
                    limit,
                    retry_after: wait,
                });
            }
        };
        if self.max_concurrent.is_some_and(|max| self.in_flight >= max) {
            note(Limit::Concurrency, CONCURRENCY_RETRY);
        }
        if let Some(b) = &mut self.requests {
            note(Limit::Requests, b.wait(now, 1.0));
        }
        if let Some(b) = &mut self.tokens {
            note(Limit::Tokens, b.wait(now, tokens as f64));
        }
        if let Some(refusal) = worst {
            return Err(refusal);
        }
        if let Some(b) = &mut self.requests {
            b.take(1.0);
        }
        if let Some(b) = &mut self.tokens {
            b.take(tokens as f64);
        }
        self.in_flight = self.in_flight.saturating_add(1);
        Ok(LimitPermit { tokens })
    }

    /// The request ended: free its concurrency slot and, when the tokens it used are known,
    /// charge the difference from the estimate (or give back what it did not use).
    pub fn release(&mut self, permit: LimitPermit, actual_tokens: Option<u64>) {
        self.in_flight = self.in_flight.saturating_sub(1);
        if let (Some(b), Some(actual)) = (&mut self.tokens, actual_tokens) {
            b.take(actual as f64 - permit.tokens as f64);
        }
    }

    /// Requests admitted and not yet released.
    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }

    pub fn requests_bucket(&self) -> Option<&TokenBucket> {
        self.requests.as_ref()
    }

    pub fn tokens_bucket(&self) -> Option<&TokenBucket> {
        self.tokens.as_ref()
    }
}
