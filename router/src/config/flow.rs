//! The `flow:` section: what happens to requests when demand exceeds capacity (queueing by
//! tenant and priority, when a pool counts as saturated, the replicas' in-flight bounds).
//!
//! The queue's and the limiters' numbers are the flow core's own types ([`warmpath_flow`]),
//! checked by its `validate` methods.

use super::FieldPath;
use serde::Deserialize;
use warmpath_flow::{FlowQueueConfig, LimitersConfig};

/// How fair shares are counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fairness {
    /// By tokens: a request costs its prompt plus its expected output, corrected at
    /// completion to the uncached prompt plus the output it produced.
    #[default]
    Tokens,
    /// By requests, as llm-d's flow control shares: every request costs 1 (kept to compare).
    Requests,
}

/// `flow:` queueing when a pool is saturated. Tenant limits apply whether or not it is
/// enabled.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FlowConfig {
    /// Hold requests in per-tenant queues while the pool is saturated (otherwise they go
    /// straight to a replica and wait in its engine's queue, first come first served).
    pub enabled: bool,
    pub fairness: Fairness,
    /// Output tokens a request is expected to produce when charged at dispatch: its
    /// `max_tokens` (or `limits.default_max_tokens`), at most this.
    pub expected_output_tokens: u32,
    pub saturation: SaturationConfig,
    pub queue: FlowQueueConfig,
    pub limiters: LimitersConfig,
    /// Tenants with their own metric series; the others are counted as `other`.
    pub metric_tenants: usize,
}

impl Default for FlowConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            fairness: Fairness::Tokens,
            expected_output_tokens: 256,
            saturation: SaturationConfig::default(),
            queue: FlowQueueConfig::default(),
            limiters: LimitersConfig::default(),
            metric_tenants: 20,
        }
    }
}

/// When a pool counts as saturated: every ready replica serving the model is past one of these
/// bounds (a bound left out is not checked).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SaturationConfig {
    /// Requests the router has in flight to one replica. The exact, instant signal: set it to
    /// what one engine runs at once (its batch) and queued work waits in the router, in fair
    /// order, instead of in the engine.
    pub max_inflight_requests: Option<u32>,
    /// Slots per replica above `max_inflight_requests` kept for tenants under their fair share
    /// of the pool: a tenant with nothing queued and fewer requests in flight than its share
    /// starts at once beside a flood instead of waiting for a slot to free (latency isolation).
    /// Set `max_inflight_requests` this much below what an engine runs at once, so that the
    /// headroom is real capacity; 0 turns it off.
    pub headroom_requests: u32,
    /// Prompt tokens per replica of admitted requests that have no first token yet (their
    /// prefill is still ahead in an engine). Queued work is dispatched only while the pool is
    /// under this bound times its ready replicas (counted at admission, so a burst cannot slip
    /// through) and some replica is under it by its own count; the replica choice then sends
    /// work of a tenant at or over its share only to a replica under it while one is. Tenants
    /// under their fair share (the headroom rule) are not held by it. An engine's step computes
    /// every prefill waiting for it, so a light tenant's first token waits for the flood's
    /// prefills that share its step: this bounds them per engine (latency isolation), at the
    /// cost of admitting a backlog more slowly.
    pub max_pending_prefill_tokens: Option<u64>,
    /// Queued work of tenants at or over their fair share also waits while a request of a
    /// tenant under its share has no first token yet: the light request's prefill then shares
    /// its engine step only with backlog prefills dispatched before it. The backlog waits about
    /// one prefill per light request, and not at all while no light tenant is sending.
    pub light_prefill_first: bool,
    /// Without `max_inflight_requests`, learn each replica's bound from its engine (the
    /// engine's batch: the requests it runs when its own queue is not empty), starting at
    /// `learned_inflight_initial` and growing while the bound holds back work the engine does
    /// not queue, at most `learned_inflight_max`. The router's own count against it holds
    /// between scrapes, so a burst waits in the router (in fair order, answered by its TTL)
    /// rather than in the engine's queue. Replicas whose metrics say nothing of their load are
    /// not bound by it.
    pub learn_inflight_requests: bool,
    pub learned_inflight_initial: u32,
    pub learned_inflight_max: u32,
    /// Prompt and expected output tokens the router has in flight to one replica.
    pub max_inflight_tokens: Option<u64>,
    /// The engine's own queue (`vllm:num_requests_waiting`), from the last scrape.
    pub max_waiting_requests: Option<f64>,
    /// The engine's KV cache use (0-1), from the last scrape.
    pub max_kv_usage: Option<f64>,
    /// A replica whose metrics are scraped but older than `scrape.stale_after_ms` counts as
    /// saturated (its load is unknown).
    pub stale_metrics_saturate: bool,
}

impl Default for SaturationConfig {
    fn default() -> Self {
        Self {
            max_inflight_requests: None,
            headroom_requests: 0,
            max_pending_prefill_tokens: None,
            light_prefill_first: false,
            learn_inflight_requests: true,
            learned_inflight_initial: 8,
            learned_inflight_max: 1024,
            max_inflight_tokens: None,
            // llm-d's saturation detector's defaults.
            max_waiting_requests: Some(5.0),
            max_kv_usage: Some(0.8),
            stale_metrics_saturate: true,
        }
    }
}

impl SaturationConfig {
    /// The per-replica request bound of tenants under their fair share:
    /// `max_inflight_requests + headroom_requests` (none without a request bound).
    pub fn bound_with_headroom(&self) -> Option<u32> {
        self.max_inflight_requests
            .map(|max| max.saturating_add(self.headroom_requests))
    }
}

impl FlowConfig {
    /// Requests in flight at which the replica choice passes a replica over while another has
    /// room: the request bound with its headroom, when flow control is on.
    pub fn replica_full_at(&self) -> Option<u32> {
        self.enabled
            .then(|| self.saturation.bound_with_headroom())
            .flatten()
    }

    /// Whether replicas' in-flight bounds are learned from their engines (flow control on,
    /// no configured bound).
    pub fn learns_inflight(&self) -> bool {
        self.enabled
            && self.saturation.max_inflight_requests.is_none()
            && self.saturation.learn_inflight_requests
    }

    pub(super) fn validate(&self, at: FieldPath) -> Result<(), (FieldPath, String)> {
        let flow = |e: warmpath_flow::ConfigError, section: &'static str| {
            let field = e.field().into_iter().fold(at.key(section), |p, k| p.key(k));
            (field, e.to_string())
        };
        self.queue.validate().map_err(|e| flow(e, "queue"))?;
        self.limiters.validate().map_err(|e| flow(e, "limiters"))?;
        if self.expected_output_tokens == 0 {
            return Err((at.key("expected_output_tokens"), "must be >= 1".to_owned()));
        }
        if self.metric_tenants > 1000 {
            return Err((
                at.key("metric_tenants"),
                "at most 1000 (each tenant is a set of metric series)".to_owned(),
            ));
        }
        let s = &self.saturation;
        let sat = at.key("saturation");
        if s.max_inflight_requests == Some(0) {
            return Err((sat.key("max_inflight_requests"), "must be >= 1".to_owned()));
        }
        if s.learned_inflight_initial == 0 {
            return Err((
                sat.key("learned_inflight_initial"),
                "must be >= 1".to_owned(),
            ));
        }
        if s.learned_inflight_max < s.learned_inflight_initial {
            return Err((
                sat.key("learned_inflight_max"),
                "must be >= learned_inflight_initial".to_owned(),
            ));
        }
        if s.max_pending_prefill_tokens == Some(0) {
            return Err((
                sat.key("max_pending_prefill_tokens"),
                "must be >= 1 (leave it out for no bound)".to_owned(),
            ));
        }
        if s.max_inflight_tokens == Some(0) {
            return Err((sat.key("max_inflight_tokens"), "must be >= 1".to_owned()));
        }
        if let Some(w) = s.max_waiting_requests {
            if !(w.is_finite() && w >= 0.0) {
                return Err((sat.key("max_waiting_requests"), "must be >= 0".to_owned()));
            }
        }
        if let Some(k) = s.max_kv_usage {
            if !(k > 0.0 && k <= 1.0) {
                return Err((sat.key("max_kv_usage"), "must be in (0, 1]".to_owned()));
            }
        }
        Ok(())
    }
}
