//! `InferenceReplica`: one serving endpoint of a pool. The controller keeps one per ready pod
//! of each pool (owned by the pool, so deleting the pool deletes them); users write their own
//! for endpoints outside the cluster (a TPU VM, another cluster). Routers read only these, so
//! they need no access to pods.

use super::pool::InferencePoolSpec;
use super::shared::{Engine, Role};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The desired state of an InferenceReplica.
#[derive(CustomResource, KubeSchema, Debug, Clone, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "warmpath.dev",
    version = "v1",
    kind = "InferenceReplica",
    plural = "inferencereplicas",
    namespaced,
    doc = "An InferenceReplica: one model-server endpoint of an InferencePool.",
    status = "InferenceReplicaStatus",
    shortname = "irep",
    category = "warmpath",
    printcolumn = r#"{"name":"Pool","type":"string","jsonPath":".spec.pool"}"#,
    printcolumn = r#"{"name":"Address","type":"string","jsonPath":".spec.address"}"#,
    printcolumn = r#"{"name":"Port","type":"integer","jsonPath":".spec.port"}"#,
    printcolumn = r#"{"name":"Models","type":"string","jsonPath":".spec.models","description":"Models served (empty: all of the pool's)"}"#,
    printcolumn = r#"{"name":"Role","type":"string","jsonPath":".spec.role","description":"Empty: the pool's"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct InferenceReplicaSpec {
    /// Name of the InferencePool (same namespace) this endpoint belongs to.
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = Rule::new(r"self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')").message("spec.pool must be the name of an InferencePool in this namespace (lowercase letters, digits, '-' and '.')"))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("spec.pool is immutable: create a new InferenceReplica for the other pool and delete this one"))]
    pub pool: String,
    /// IP address or DNS name of the engine, without scheme or port (e.g. `10.0.0.7`,
    /// `tpu-vm-3.example.com`).
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = Rule::new(r"isIP(self) || self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')").message("spec.address must be an IP address or a lowercase DNS name, without scheme or port (e.g. 10.0.0.7 or vllm-0.example.com); put the port in spec.port"))]
    pub address: String,
    /// Port of the engine's OpenAI-compatible server.
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
    /// Models this endpoint serves; absent: every model of its pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64), inner(length(min = 1, max = 256)))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub models: Option<Vec<String>>,
    /// Role in a prefill/decode split; absent: the pool's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    /// Model server; absent: the pool's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<Engine>,
    /// The Pod this replica stands for (set by the controller; absent for hand-written
    /// endpoints).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub pod: Option<String>,
}

impl InferenceReplicaSpec {
    /// The role the replica serves in: its own, or its pool's.
    pub fn effective_role(&self, pool: &InferencePoolSpec) -> Role {
        self.role.unwrap_or(pool.role)
    }

    /// The engine the replica runs: its own, or its pool's.
    pub fn effective_engine(&self, pool: &InferencePoolSpec) -> Engine {
        self.engine.unwrap_or(pool.engine)
    }

    /// The models the replica serves: its own list, or every model of its pool.
    pub fn effective_models<'a>(&'a self, pool: &'a InferencePoolSpec) -> &'a [String] {
        self.models.as_deref().unwrap_or(&pool.models)
    }

    /// What the schema cannot check because it needs the pool: every model the replica names
    /// is one the pool serves (a router looks replicas up through their pool's models, so
    /// another model would never be routed to). `Err` carries the message for the replica's
    /// `Accepted` condition.
    pub fn check_against(&self, pool_name: &str, pool: &InferencePoolSpec) -> Result<(), String> {
        let foreign: Vec<&str> = self
            .models
            .iter()
            .flatten()
            .filter(|m| !pool.models.contains(m))
            .map(String::as_str)
            .collect();
        if foreign.is_empty() {
            return Ok(());
        }
        Err(format!(
            "spec.models names {} that InferencePool {pool_name:?} does not serve ({}): add {} to the pool's spec.models or remove {} from this replica",
            if foreign.len() == 1 { "a model" } else { "models" },
            foreign.join(", "),
            if foreign.len() == 1 { "it" } else { "them" },
            if foreign.len() == 1 { "it" } else { "them" },
        ))
    }

    /// `http://address:port`, with IPv6 addresses in brackets.
    pub fn url(&self) -> String {
        if self.address.contains(':') {
            format!("http://[{}]:{}", self.address, self.port)
        } else {
            format!("http://{}:{}", self.address, self.port)
        }
    }
}

/// What the controller observed of an InferenceReplica.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InferenceReplicaStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Accepted`, `ResolvedRefs` (the pool exists) and `Ready`; messages say what to fix.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}
