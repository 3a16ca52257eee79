//! Each replica's series: the router's own counts of it, what was learned of its engine, and
//! how its scrapes and health checks go.

use super::{ReplicaLabels, ResultLabels};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

/// Per replica (labelled by name; a replica that leaves has its series removed,
/// [`super::Metrics::remove_replica`]), and the scrapes and health checks of all.
#[derive(Default)]
pub struct ReplicaMetrics {
    pub inflight: Family<ReplicaLabels, Gauge>,
    pub inflight_limit: Family<ReplicaLabels, Gauge>,
    pub scrape_interval: Family<ReplicaLabels, Gauge<f64, AtomicU64>>,
    pub ready: Family<ReplicaLabels, Gauge>,
    pub prefill_per_token: Family<ReplicaLabels, Gauge<f64, AtomicU64>>,
    pub kv_mode: Family<ReplicaLabels, Gauge>,
    pub scrapes: Family<ResultLabels, Counter>,
    pub health_checks: Family<ResultLabels, Counter>,
}

impl ReplicaMetrics {
    /// Create the series and register them under `registry`'s prefix.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "inflight_requests",
            "Requests this router has in flight per replica",
            m.inflight.clone(),
        );
        registry.register(
            "replica_inflight_limit",
            "The in-flight bound learned from the replica's engine (flow.saturation.learn_inflight_requests; its batch when it queues); absent until learned",
            m.inflight_limit.clone(),
        );
        registry.register(
            "replica_scrape_interval_seconds",
            "The pause between two scrapes of the replica's metrics (scrape.interval_ms, stretched where a scrape costs its engine more than scrape.engine_share of its time)",
            m.scrape_interval.clone(),
        );
        registry.register(
            "replica_ready",
            "1 when the replica is a routing candidate: not ejected, not failing its scrapes, not stalled (owing first bytes long past their predicted TTFT)",
            m.ready.clone(),
        );
        registry.register(
            "replica_prefill_seconds_per_token",
            "Learned prefill cost per uncached token",
            m.prefill_per_token.clone(),
        );
        registry.register(
            "engine_scrapes",
            "Engine metric scrapes by result",
            m.scrapes.clone(),
        );
        registry.register(
            "health_checks",
            "Active checks of the engines' health endpoint (health.active_path) by result",
            m.health_checks.clone(),
        );
        registry.register(
            "kv_events_mode",
            "How far the router's view of the replica's KV cache is complete: 0 no events, 1 uncertain (missed some; the approximate index helps), 2 fresh",
            m.kv_mode.clone(),
        );
        m
    }

    /// Forget a replica's series.
    pub(super) fn remove(&self, labels: &ReplicaLabels) {
        self.inflight.remove(labels);
        self.inflight_limit.remove(labels);
        self.scrape_interval.remove(labels);
        self.ready.remove(labels);
        self.prefill_per_token.remove(labels);
        self.kv_mode.remove(labels);
    }
}
