//! Flow control's series, per tenant: queued, dispatched, refused by reason, time in queue,
//! tokens served.
//!
//! Tenant names come from clients (trusted headers name any tenant), so the label is bounded:
//! the first `flow.metric_tenants` tenants seen get their own series, every later one is
//! counted as `other`. Reasons and paths are fixed sets. Objectives are labelled only when known
//! (configured or found in the cluster, a bounded set); requests naming an unknown one are
//! counted in one series.

use parking_lot::Mutex;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::collections::HashSet;
use std::sync::Arc;

/// The label every tenant beyond the bound shares.
pub const OTHER_TENANT: &str = "other";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TenantLabels {
    pub tenant: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DispatchLabels {
    pub tenant: String,
    /// `direct` (the pool was not saturated) or `queued`.
    pub path: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusalLabels {
    pub tenant: String,
    /// `saturated`, `queue-full`, `ttl-expired`, `rate-limited`, `evicted`, `unauthorized`.
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ObjectiveLabels {
    pub objective: String,
    /// The priority band it gave the request.
    pub priority: i32,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn wait_histogram() -> Histogram {
    // 1 ms .. ~65 s
    Histogram::new(exponential_buckets(1e-3, 2.0, 17))
}

pub struct FlowMetrics {
    pub queued: Family<TenantLabels, Gauge>,
    pub dispatched: Family<DispatchLabels, Counter>,
    pub refused: Family<RefusalLabels, Counter>,
    pub queue_wait: HistogramFamily<TenantLabels>,
    pub tokens_served: Family<TenantLabels, Counter>,
    pub queue_requests: Gauge,
    pub queue_bytes: Gauge,
    pub objectives: Family<ObjectiveLabels, Counter>,
    pub unknown_objectives: Counter,
    labels: Mutex<HashSet<Arc<str>>>,
}

impl FlowMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self {
            queued: Family::default(),
            dispatched: Family::default(),
            refused: Family::default(),
            queue_wait: Family::new_with_constructor(wait_histogram),
            tokens_served: Family::default(),
            queue_requests: Gauge::default(),
            queue_bytes: Gauge::default(),
            objectives: Family::default(),
            unknown_objectives: Counter::default(),
            labels: Mutex::new(HashSet::new()),
        };
        registry.register(
            "flow_queued_requests",
            "Requests waiting in flow control's queues now, by tenant",
            m.queued.clone(),
        );
        registry.register(
            "flow_dispatched",
            "Requests admitted, by tenant and path (direct: the pool was not saturated; queued: after waiting)",
            m.dispatched.clone(),
        );
        registry.register(
            "flow_refused",
            "Requests refused by flow control or identity, by tenant and reason",
            m.refused.clone(),
        );
        registry.register(
            "flow_queue_wait_seconds",
            "Time requests spent in flow control's queue before dispatch, by tenant",
            m.queue_wait.clone(),
        );
        registry.register(
            "flow_tokens_served",
            "Tokens served per tenant (uncached prompt tokens plus output tokens, counted at completion)",
            m.tokens_served.clone(),
        );
        registry.register(
            "flow_queue_depth",
            "Requests waiting in flow control's queues, all tenants",
            m.queue_requests.clone(),
        );
        registry.register(
            "flow_queue_bytes",
            "Request bodies waiting in flow control's queues, in bytes",
            m.queue_bytes.clone(),
        );
        registry.register(
            "flow_objective_requests",
            "Requests naming a known objective, by objective and the priority band it gave them",
            m.objectives.clone(),
        );
        registry.register(
            "flow_unknown_objective_requests",
            "Requests naming an objective no configuration or InferenceObjective has (they keep their tenant's priority)",
            m.unknown_objectives.clone(),
        );
        m
    }

    /// The label for `tenant`: its name while fewer than `bound` tenants have one, else
    /// [`OTHER_TENANT`].
    pub fn label(&self, tenant: &Arc<str>, bound: usize) -> String {
        let mut seen = self.labels.lock();
        if seen.contains(tenant) {
            return tenant.to_string();
        }
        if seen.len() < bound {
            seen.insert(tenant.clone());
            return tenant.to_string();
        }
        OTHER_TENANT.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenant_labels_are_bounded() {
        let m = FlowMetrics::register(&mut Registry::default());
        let names: Vec<Arc<str>> = (0..5).map(|i| Arc::from(format!("t{i}"))).collect();
        let labels: Vec<_> = names.iter().map(|n| m.label(n, 3)).collect();
        assert_eq!(
            labels.iter().map(String::as_str).collect::<Vec<_>>(),
            ["t0", "t1", "t2", "other", "other"]
        );
        assert_eq!(
            m.label(&names[1], 3),
            "t1",
            "a known tenant keeps its label"
        );
    }
}
