//! When a model's pool is saturated: the question flow control asks before letting a request
//! through, and again before each dispatch from the queue.
//!
//! Saturated means no ready replica can take more without queueing inside its engine:
//! - the router's own count of requests (or tokens) it has admitted for the model has reached
//!   the bound per replica times the ready replicas, or the sum of the bounds learned from
//!   their engines ([`crate::state::inflight_limit::learn_limit`]) (exact and instant: the
//!   admission itself counts, so a burst cannot slip through between two scrapes), or
//! - every ready replica is past one of its own bounds: the router's in-flight requests or
//!   tokens to it, or its engine's reported queue or KV use; an engine whose load series have
//!   gone stale counts as past them (unknown load is not spare capacity), one that never
//!   reported any does not (it cannot say).
//!
//! With no ready replica the pool is not saturated: the request goes on and is answered 503,
//! instead of waiting for a fleet that is not there.
//!
//! Two rules put tenants under their fair share ([`under_share`]) ahead of a backlog without
//! reordering the queue: they may use `headroom_requests` slots above the regular bound
//! ([`with_headroom`]), and they are not held by the bound on prefill work still ahead in the
//! engines ([`prefill_gated`], and per replica [`every_replica_prefilling`]), which holds back
//! everyone else's queued work. And since the bounds are the pool's, the replica choice passes
//! over a replica at its share of them while another has room
//! ([`crate::config::FlowConfig::replica_full_at`], and for prefill work
//! [`crate::choice::PrefillRule`]).

use crate::config::SaturationConfig;
use crate::state::replica::ReplicaState;
use crate::state::table::Candidate;
use std::time::{Duration, Instant};

/// What the router has admitted for one model and not yet seen finish.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AdmittedLoad {
    pub requests: u32,
    pub tokens: u64,
}

/// Ready replicas among `candidates`.
pub fn ready(candidates: &[Candidate], now: Instant) -> usize {
    ready_ones(candidates, now).count()
}

/// The candidates whose replicas are ready now.
fn ready_ones(candidates: &[Candidate], now: Instant) -> impl Iterator<Item = &Candidate> {
    candidates
        .iter()
        .filter(move |c| c.replica.health.is_ready(now))
}

/// Whether the pool behind `candidates` is saturated (module documentation).
pub fn saturated(
    candidates: &[Candidate],
    bounds: &SaturationConfig,
    admitted: AdmittedLoad,
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
    // Learned bounds, summed over the ready replicas when every one has one (one that cannot
    // say its load is not bounded, so neither is the pool).
    if bounds.max_inflight_requests.is_none() && bounds.learn_inflight_requests {
        let total: Option<u64> = ready()
            .map(|r| r.learned_inflight_limit().map(u64::from))
            .sum();
        if total.is_some_and(|total| u64::from(admitted.requests) >= total) {
            return true;
        }
    }
    if bounds
        .max_inflight_tokens
        .is_some_and(|max| admitted.tokens >= max.saturating_mul(n))
    {
        return true;
    }
    ready().all(|r| replica_saturated(r, bounds, stale_after, now))
}

/// A replica's in-flight bound: the configured one, else the one learned from its engine when
/// learning is on (`None`: unbounded).
pub fn inflight_limit(r: &ReplicaState, bounds: &SaturationConfig) -> Option<u32> {
    bounds.max_inflight_requests.or_else(|| {
        bounds
            .learn_inflight_requests
            .then(|| r.learned_inflight_limit())
            .flatten()
    })
}

/// Whether one replica is past any of its bounds.
pub fn replica_saturated(
    r: &ReplicaState,
    bounds: &SaturationConfig,
    stale_after: Duration,
    now: Instant,
) -> bool {
    if inflight_limit(r, bounds).is_some_and(|max| r.inflight_requests() >= max) {
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

/// `bounds` with `headroom_requests` more requests per replica: the bound tenants under their
/// fair share are held to. `None` when there is no headroom (no request bound, or 0).
pub fn with_headroom(bounds: &SaturationConfig) -> Option<SaturationConfig> {
    let wider = bounds.bound_with_headroom()?;
    (bounds.headroom_requests > 0).then(|| SaturationConfig {
        max_inflight_requests: Some(wider),
        ..bounds.clone()
    })
}

/// Whether a tenant with `in_flight` requests is under its fair share of the pool's regular
/// slots (`max_inflight_requests` per ready replica), split evenly among `sharing` tenants
/// (those with requests in flight, counting this one). Always false without a request bound:
/// there are no slots to share.
pub fn under_share(bounds: &SaturationConfig, ready: usize, in_flight: u32, sharing: u64) -> bool {
    let Some(max) = bounds.max_inflight_requests else {
        return false;
    };
    u64::from(in_flight) < (u64::from(max) * ready as u64 / sharing.max(1)).max(1)
}

/// Whether queued work of a tenant at or over its share must wait because `pending_tokens`
/// prompt tokens admitted to the pool still wait for their first token: at most
/// `max_pending_prefill_tokens` per ready replica. The check is before the dispatch, so one
/// prompt longer than the bound still goes when the pool has no prefill pending below it.
/// With `light_prefill_first`, also while `light_pending` requests of tenants under their share
/// wait for their first token.
pub fn prefill_gated(
    bounds: &SaturationConfig,
    pending_tokens: u64,
    light_pending: u32,
    ready: usize,
) -> bool {
    if ready == 0 {
        return false;
    }
    (bounds.light_prefill_first && light_pending > 0)
        || bounds
            .max_pending_prefill_tokens
            .is_some_and(|max| pending_tokens >= max.saturating_mul(ready as u64))
}

/// Whether every ready replica among `candidates` has `max_pending_prefill_tokens` or more
/// pending prefill tokens of its own (sent there, no first token yet): queued work of a tenant
/// at or over its share then has no replica the choice would send it to
/// ([`crate::choice::PrefillRule::PrefillBelow`]), so it waits. The pool's bound
/// ([`prefill_gated`]) still applies: these counts move only once a replica is chosen.
pub fn every_replica_prefilling(
    candidates: &[Candidate],
    bounds: &SaturationConfig,
    now: Instant,
) -> bool {
    let Some(max) = bounds.max_pending_prefill_tokens else {
        return false;
    };
    let mut ready = ready_ones(candidates, now).peekable();
    ready.peek().is_some() && ready.all(|c| c.replica.pending_prefill_tokens() >= max)
}
