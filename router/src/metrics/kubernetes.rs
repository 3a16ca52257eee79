//! Kubernetes mode's series: how the watches of warmpath's resources are doing.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Kubernetes mode: how the watches of warmpath's resources are doing.
#[derive(Default)]
pub struct KubernetesMetrics {
    pub watch_errors: Counter,
    pub table_rebuilds: Counter,
    pub synced: Gauge,
    pub replicas: Gauge,
    pub skipped_replicas: Gauge,
    pub tenant_policies: Gauge,
}

impl KubernetesMetrics {
    /// Create the series and register them under `registry`'s prefix.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
        "kubernetes_watch_errors",
        "Errors of the watches on InferencePools, InferenceReplicas and TenantPolicies (each is retried with backoff; the last good table keeps serving)",
        metrics.watch_errors.clone(),
    );
        registry.register(
            "kubernetes_table_rebuilds",
            "Routing tables rebuilt because the watched resources changed",
            metrics.table_rebuilds.clone(),
        );
        registry.register(
            "kubernetes_synced",
            "1 once every watch has delivered its first full list",
            metrics.synced.clone(),
        );
        registry.register(
            "kubernetes_replicas",
            "InferenceReplicas in the routing table",
            metrics.replicas.clone(),
        );
        registry.register(
            "kubernetes_skipped_replicas",
            "InferenceReplicas left out: their pool is missing or does not serve their models",
            metrics.skipped_replicas.clone(),
        );
        registry.register(
            "kubernetes_tenant_policies",
            "TenantPolicies known",
            metrics.tenant_policies.clone(),
        );
        metrics
    }
}
