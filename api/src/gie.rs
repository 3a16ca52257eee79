//! Reading types for the Gateway API Inference Extension's `InferencePool`
//! (`inference.networking.k8s.io/v1`, the CRD in GIE's `config/crd/bases/`), so that the
//! controller can serve GIE pools without users writing warmpath resources.
//!
//! Client-side only: just the spec fields warmpath reads, unknown fields tolerated (GIE adds
//! fields in minor releases, and a reader must not break on them), no status, and no schema:
//! GIE owns this CRD, so it is never generated into warmpath's `crds/` ([`crate::crds::all`]
//! lists warmpath's own kinds only).

use kube::CustomResource;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The API group of GIE's resources.
pub const GROUP: &str = "inference.networking.k8s.io";
/// The GIE API version read here.
pub const VERSION: &str = "v1";
/// The plural of the kind, as API discovery lists it.
pub const PLURAL: &str = "inferencepools";
/// The `appProtocol` that asks for HTTP/2 over cleartext.
pub const APP_PROTOCOL_H2C: &str = "kubernetes.io/h2c";

/// The spec of a GIE InferencePool, as far as warmpath reads it.
#[derive(CustomResource, Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[kube(
    group = "inference.networking.k8s.io",
    version = "v1",
    kind = "InferencePool",
    plural = "inferencepools",
    namespaced,
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct InferencePoolSpec {
    /// The pods of the pool (GIE requires `matchLabels` with at least one label).
    #[serde(default)]
    pub selector: LabelSelector,
    /// The engine ports in each pod (1 to 8; several for data-parallel engines).
    #[serde(default)]
    pub target_ports: Vec<Port>,
    /// `http` (the default) or `kubernetes.io/h2c`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_protocol: Option<String>,
    /// The endpoint picker a GIE gateway would call; warmpath is its own picker and only
    /// mentions it in logs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_picker_ref: Option<EndpointPickerRef>,
}

/// GIE's label selector: equality only, like warmpath's own `selector`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelector {
    #[serde(default)]
    pub match_labels: BTreeMap<String, String>,
}

/// One port of the pool's pods.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Port {
    #[serde(default)]
    pub number: i32,
}

/// The endpoint picker extension of a GIE pool.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointPickerRef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `FailOpen` or `FailClose`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_mode: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource;

    #[test]
    fn reads_a_gie_pool_and_tolerates_unknown_fields() {
        let pool: InferencePool = serde_json::from_value(serde_json::json!({
            "apiVersion": "inference.networking.k8s.io/v1",
            "kind": "InferencePool",
            "metadata": { "name": "llama", "namespace": "ns" },
            "spec": {
                "selector": { "matchLabels": { "app": "vllm" } },
                "targetPorts": [{ "number": 8000 }, { "number": 8001 }],
                "appProtocol": "kubernetes.io/h2c",
                "endpointPickerRef": { "name": "epp", "port": { "number": 9002 }, "failureMode": "FailClose" },
                "someFutureField": true
            },
            "status": { "parents": [] }
        }))
        .unwrap();
        assert_eq!(pool.spec.selector.match_labels["app"], "vllm");
        assert_eq!(pool.spec.target_ports[1].number, 8001);
        assert_eq!(pool.spec.app_protocol.as_deref(), Some(APP_PROTOCOL_H2C));
        assert_eq!(
            pool.spec
                .endpoint_picker_ref
                .unwrap()
                .failure_mode
                .as_deref(),
            Some("FailClose")
        );
        assert_eq!(
            InferencePool::api_version(&()),
            "inference.networking.k8s.io/v1"
        );
        assert_eq!(InferencePool::plural(&()), PLURAL);
    }
}
