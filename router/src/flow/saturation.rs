//! When a model's pool is saturated: the question flow control asks before letting a request
//! through, and again before each dispatch from the queue.
//!
//! Saturated means no ready replica can take more without queueing inside its engine:
//! - the router's own count of requests (or tokens) it has admitted for the model has reached
//!   the bound per replica times the ready replicas (exact and instant: the admission itself
//!   counts, so a burst cannot slip through between two scrapes), or
//! - every ready replica is past one of its own bounds: the router's in-flight requests or
//!   tokens to it, or its engine's reported queue or KV use; an engine whose load series have
//!   gone stale counts as past them (unknown load is not spare capacity), one that never
//!   reported any does not (it cannot say).
//!
//! With no ready replica the pool is not saturated: the request goes on and is answered 503,
//! instead of waiting for a fleet that is not there.

use crate::config::SaturationConfig;
use crate::state::replica::ReplicaState;
use crate::state::table::Candidate;
use std::time::{Duration, Instant};

/// What the router has admitted for one model and not yet seen finish.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Admitted {
    pub requests: u32,
    pub tokens: u64,
}

/// Ready replicas among `candidates`.
pub fn ready(candidates: &[Candidate], now: Instant) -> usize {
    candidates
        .iter()
        .filter(|c| c.replica.health.is_ready(now))
        .count()
}

/// Whether the pool behind `candidates` is saturated (module documentation).
pub fn saturated(
    candidates: &[Candidate],
    bounds: &SaturationConfig,
    admitted: Admitted,
    stale_after: Duration,
    now: Instant,
) -> bool {
    let ready = || {
        candidates
            .iter()
            .map(|c| &*c.replica)
            .filter(|r| r.health.is_ready(now))
    };
    let n = ready().count() as u64;
    if n == 0 {
        return false;
    }
    if bounds
        .max_inflight_requests
        .is_some_and(|max| u64::from(admitted.requests) >= u64::from(max) * n)
    {
        return true;
    }
    if bounds
        .max_inflight_tokens
        .is_some_and(|max| admitted.tokens >= max.saturating_mul(n))
    {
        return true;
    }
    ready().all(|r| replica_saturated(r, bounds, stale_after, now))
}

/// Whether one replica is past any of its bounds.
pub fn replica_saturated(
    r: &ReplicaState,
    bounds: &SaturationConfig,
    stale_after: Duration,
    now: Instant,
) -> bool {
    if bounds
        .max_inflight_requests
        .is_some_and(|max| r.inflight_requests() >= max)
    {
        return true;
    }
    if bounds
        .max_inflight_tokens
        .is_some_and(|max| r.inflight_tokens() >= max)
    {
        return true;
    }
    if bounds.max_waiting_requests.is_none() && bounds.max_kv_usage.is_none() {
        return false;
    }
    match r.engine_load(now, stale_after) {
        Some(load) => {
            bounds
                .max_waiting_requests
                .is_some_and(|max| load.waiting > max)
                || bounds
                    .max_kv_usage
                    .is_some_and(|max| load.kv_cache_usage > max)
        }
        None => bounds.stale_metrics_saturate && r.has_reported_load(),
    }
}
