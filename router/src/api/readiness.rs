//! Readiness: whether the router can route, as both the admin listener's `/readyz` and the API
//! listener's `/health` answer it.

use crate::errors::{text, RespBody};
use crate::state::discovery::DiscoveryStatus;
use crate::state::table::Table;
use http::{Response, StatusCode};
use std::time::Instant;

/// Ready once discovery has listed (Kubernetes mode) and some model has a ready replica.
pub(crate) fn readiness(table: &Table, discovery: &DiscoveryStatus) -> Response<RespBody> {
    if !discovery.synced() {
        let mut body = "waiting for the first full list of InferencePools, InferenceReplicas and TenantPolicies from the Kubernetes API\n".to_owned();
        // The error itself goes to the log only: probes and whoever reaches this port need
        // not learn the cluster's addresses or RBAC.
        if discovery.error().is_some() {
            body.push_str("the last attempt failed; the router's log says why\n");
        }
        return text(StatusCode::SERVICE_UNAVAILABLE, body);
    }
    let now = Instant::now();
    let mut any = false;
    let mut lines = String::new();
    let mut models: Vec<_> = table.config.pools.iter().flat_map(|p| &p.models).collect();
    models.sort();
    models.dedup();
    for model in models {
        let (ready, total) = table.candidates(model).map_or((0, 0), |cs| {
            (
                cs.iter().filter(|c| c.replica.health.is_ready(now)).count(),
                cs.len(),
            )
        });
        any |= ready > 0;
        lines.push_str(&format!("{model}: {ready}/{total} replicas ready\n"));
    }
    let status = if any {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    text(status, lines)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;
    use http_body_util::BodyExt;

    async fn body(resp: Response<RespBody>) -> String {
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    /// A Kubernetes error says where the API server is and what the service account may not
    /// do: the log gets it, readiness answers do not.
    #[tokio::test]
    async fn readiness_does_not_echo_kubernetes_errors() {
        let discovery = DiscoveryStatus::new(false);
        discovery.failed(
            "ApiError: pods is forbidden: User \"system:serviceaccount:ns:router\" at https://10.0.0.1:443"
                .to_owned(),
        );
        let config = crate::config::Config::parse("pools: []\n").unwrap();
        let registry = crate::state::replica::ReplicaRegistry::default();
        let table = Table::build(std::sync::Arc::new(config), &registry, &Metrics::new());
        let resp = readiness(&table, &discovery);
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        let text = body(resp).await;
        assert!(text.contains("log"), "{text}");
        for leak in ["forbidden", "10.0.0.1", "serviceaccount"] {
            assert!(!text.contains(leak), "{text}");
        }
    }
}
