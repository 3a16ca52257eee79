//! Reading types for llm-d's `InferenceObjective` (`llm-d.ai/v1alpha2`, namespaced; the CRD in
//! llm-d-router's `config/crd/bases/llm-d.ai_inferenceobjectives.yaml`, types in
//! `apix/v1alpha2/inferenceobjective_types.go`), so that the router can give requests naming one
//! its priority.
//!
//! Client-side only, as [`crate::gie`]: the spec fields warmpath reads, unknown fields tolerated,
//! no status, no schema (llm-d owns this CRD; it is never generated into warmpath's `crds/`).

use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// The API group of llm-d's resources.
pub const GROUP: &str = "llm-d.ai";
/// The llm-d API version read here.
pub const VERSION: &str = "v1alpha2";
/// The plural of the kind, as API discovery lists it.
pub const PLURAL: &str = "inferenceobjectives";

/// The spec of an InferenceObjective, as far as warmpath reads it.
#[derive(CustomResource, Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[kube(
    group = "llm-d.ai",
    version = "v1alpha2",
    kind = "InferenceObjective",
    plural = "inferenceobjectives",
    namespaced,
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct InferenceObjectiveSpec {
    /// The priority band of requests naming it; absent: llm-d's default, 0. Negative is
    /// sheddable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// The pool (same namespace) whose requests it applies to.
    #[serde(default)]
    pub pool_ref: PoolObjectReference,
}

/// A pool in the objective's namespace (llm-d's `PoolObjectReference`: the group defaults to
/// `inference.networking.k8s.io`, the kind to `InferencePool`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct PoolObjectReference {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default)]
    pub name: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource;

    #[test]
    fn reads_an_objective_and_tolerates_unknown_fields() {
        let o: InferenceObjective = serde_json::from_value(serde_json::json!({
            "apiVersion": "llm-d.ai/v1alpha2",
            "kind": "InferenceObjective",
            "metadata": { "name": "chat", "namespace": "ns" },
            "spec": {
                "priority": -3,
                "poolRef": { "group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "llama" },
                "someFutureField": 1
            },
            "status": { "conditions": [] }
        }))
        .unwrap();
        assert_eq!(o.spec.priority, Some(-3));
        assert_eq!(o.spec.pool_ref.name, "llama");
        let bare: InferenceObjective = serde_json::from_value(serde_json::json!({
            "apiVersion": "llm-d.ai/v1alpha2",
            "kind": "InferenceObjective",
            "metadata": { "name": "batch", "namespace": "ns" },
            "spec": { "poolRef": { "name": "llama" } }
        }))
        .unwrap();
        assert_eq!(bare.spec.priority, None, "absent: the default priority");
        assert_eq!(InferenceObjective::api_version(&()), "llm-d.ai/v1alpha2");
        assert_eq!(InferenceObjective::plural(&()), PLURAL);
    }
}
