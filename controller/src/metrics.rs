//! The controller's Prometheus metrics (served on the admin port's `/metrics`).

use prometheus_client::encoding::{text::encode, EncodeLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReconcileLabels {
    /// `pool`, `replica` or `tenant`.
    pub controller: &'static str,
    /// `ok`, `error` or `standby` (not the leader: nothing done).
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabel {
    pub controller: &'static str,
}

pub struct Metrics {
    registry: Registry,
    pub reconciles: Family<ReconcileLabels, Counter>,
    pub reconcile_duration: Family<ControllerLabel, Histogram>,
    pub replicas_created: Counter,
    pub replicas_updated: Counter,
    pub replicas_deleted: Counter,
    pub status_writes: Family<ControllerLabel, Counter>,
    pub is_leader: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("warmpath_controller");
        let reconciles = Family::<ReconcileLabels, Counter>::default();
        registry.register(
            "reconciles",
            "Reconciles by controller and result",
            reconciles.clone(),
        );
        let reconcile_duration = Family::<ControllerLabel, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0005, 2.0, 16))
        });
        registry.register(
            "reconcile_duration_seconds",
            "Time spent in one reconcile, API calls included",
            reconcile_duration.clone(),
        );
        let replicas_created = Counter::default();
        registry.register(
            "replicas_created",
            "InferenceReplicas created for ready pods",
            replicas_created.clone(),
        );
        let replicas_updated = Counter::default();
        registry.register(
            "replicas_updated",
            "Managed InferenceReplicas rewritten (address, port, labels or owner changed)",
            replicas_updated.clone(),
        );
        let replicas_deleted = Counter::default();
        registry.register(
            "replicas_deleted",
            "Managed InferenceReplicas deleted (pod unready, gone or unselected; pool deleted)",
            replicas_deleted.clone(),
        );
        let status_writes = Family::<ControllerLabel, Counter>::default();
        registry.register(
            "status_writes",
            "Status subresource writes (only when the status changed)",
            status_writes.clone(),
        );
        let is_leader = Gauge::default();
        registry.register(
            "is_leader",
            "1 while this process holds the leader Lease",
            is_leader.clone(),
        );
        Metrics {
            registry,
            reconciles,
            reconcile_duration,
            replicas_created,
            replicas_updated,
            replicas_deleted,
            status_writes,
            is_leader,
        }
    }

    /// OpenMetrics text.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_every_metric() {
        let m = Metrics::new();
        m.reconciles
            .get_or_create(&ReconcileLabels {
                controller: "pool",
                result: "ok",
            })
            .inc();
        m.is_leader.set(1);
        let text = m.encode();
        for name in [
            "warmpath_controller_reconciles_total{controller=\"pool\",result=\"ok\"} 1",
            "warmpath_controller_is_leader 1",
            "warmpath_controller_replicas_created_total 0",
            "warmpath_controller_replicas_deleted_total 0",
            "# TYPE warmpath_controller_reconcile_duration_seconds histogram",
        ] {
            assert!(text.contains(name), "missing {name} in\n{text}");
        }
    }
}
