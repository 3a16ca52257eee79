//! `InferencePool`: a set of model-server endpoints that serve the same models in the same role;
//! written by users. The controller turns each ready pod matching `selector` into an
//! `InferenceReplica` owned by the pool; replicas written by hand join the pool through their
//! `spec.pool`.

use super::shared::{Engine, Role, SchedulingWeights};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The desired state of an InferencePool.
#[derive(CustomResource, KubeSchema, Debug, Clone, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "warmpath.dev",
    version = "v1alpha1",
    deprecated = "warmpath.dev/v1alpha1 InferencePool is deprecated; use warmpath.dev/v1 InferencePool (same fields, same meaning)",
    kind = "InferencePool",
    plural = "inferencepools",
    namespaced,
    doc = "An InferencePool: endpoints serving the same models in the same role, found by pod labels or written as InferenceReplicas.",
    status = "InferencePoolStatus",
    shortname = "ipool",
    category = "warmpath",
    printcolumn = r#"{"name":"Models","type":"string","jsonPath":".spec.models","description":"Models the pool serves"}"#,
    printcolumn = r#"{"name":"Role","type":"string","jsonPath":".spec.role","description":"prefill, decode or both"}"#,
    printcolumn = r#"{"name":"Engine","type":"string","jsonPath":".spec.engine"}"#,
    printcolumn = r#"{"name":"Ready","type":"integer","jsonPath":".status.readyReplicas","description":"Replicas taking traffic"}"#,
    printcolumn = r#"{"name":"Replicas","type":"integer","jsonPath":".status.replicas","description":"Replicas known"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.loraAdapters) || self.loraAdapters.all(a, a in self.models)").message("spec.loraAdapters must name models the pool serves (spec.models)").field_path(".loraAdapters"))]
#[x_kube(validation = Rule::new("!has(self.selector) || has(self.targetPort)").message("spec.targetPort is required when spec.selector is set: the port the engine listens on in each selected pod (vLLM's default is 8000, SGLang's 30000)").field_path(".targetPort"))]
pub struct InferencePoolSpec {
    /// Model names the pool serves, as requests name them in `model`.
    #[schemars(length(min = 1, max = 64), inner(length(min = 1, max = 256)))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub models: Vec<String>,
    /// Which of `models` are LoRA adapters (vLLM `--lora-modules NAME=PATH`): an engine caches
    /// an adapter's blocks apart from the base model's, and so does the router. With
    /// `kvEvents`, adapters the engines' events name are learned without this.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(min = 1, max = 256)))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub lora_adapters: Vec<String>,
    /// Labels of the pods serving the pool (like a Service's selector): each ready pod becomes
    /// an InferenceReplica. Omit it for a pool of hand-written InferenceReplicas only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.size() > 0").message("spec.selector is empty and would select every pod in the namespace: add labels, or omit selector for a pool of hand-written replicas"))]
    pub selector: Option<BTreeMap<String, String>>,
    /// Port of the engine's OpenAI-compatible server in each selected pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub target_port: Option<i32>,
    /// The pool's part in a prefill/decode split.
    #[serde(default)]
    pub role: Role,
    /// The model server the pods run.
    #[serde(default)]
    pub engine: Engine,
    /// Where the engine's Prometheus metrics are scraped (queue depth, KV-cache use).
    #[serde(default)]
    pub metrics: MetricsSpec,
    /// The engine's KV-cache events (precise prefix tracking); when absent the router predicts
    /// cache contents from its own routing decisions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_events: Option<KvEventsSpec>,
    /// How the router scores the pool's replicas.
    #[serde(default)]
    pub scheduling: SchedulingSpec,
    /// The router in endpoint-picker mode (behind a Gateway): how it treats this pool's
    /// requests. The controller copies a mirrored GIE pool's `endpointPickerRef.failureMode`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_picker: Option<EndpointPickerSpec>,
}

/// The router's endpoint-picker settings for one pool.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EndpointPickerSpec {
    /// What the picker does with a request for this pool that it cannot route (no ready
    /// replica, too large, a refused tenant): `FailClose` answers it with the error, `FailOpen`
    /// names no endpoint and the Gateway routes it on its own. GIE's names and default.
    #[serde(default)]
    pub failure_mode: PickerFailureMode,
}

/// GIE's `EndpointPickerFailureMode`, as the picker applies it to requests it cannot route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub enum PickerFailureMode {
    #[default]
    FailClose,
    FailOpen,
}

/// Metrics scraping of a pool's replicas.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetricsSpec {
    /// Scrape the engines' metrics. When false, replicas count as ready unless requests to
    /// them fail.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// HTTP path of the Prometheus endpoint.
    #[serde(default = "default_metrics_path")]
    #[schemars(length(min = 1, max = 1024))]
    #[x_kube(validation = Rule::new(r"self.matches('^/[^\\s?#]*$')").message("spec.metrics.path must be a URL path starting with '/', without query or spaces (e.g. /metrics)"))]
    pub path: String,
    /// Port of the Prometheus endpoint, when not the serving port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: Option<i32>,
}

fn yes() -> bool {
    true
}

fn default_metrics_path() -> String {
    "/metrics".to_owned()
}

impl Default for MetricsSpec {
    fn default() -> Self {
        Self {
            enabled: true,
            path: default_metrics_path(),
            port: None,
        }
    }
}

/// The engines' KV-cache event publisher (vLLM `--kv-events-config` with the ZMQ publisher).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KvEventsSpec {
    /// Port of each engine's ZMQ PUB socket.
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
    /// ZMQ topic the engines publish on (empty: every topic).
    #[serde(default)]
    #[schemars(length(max = 256))]
    pub topic: String,
    /// Tokens per KV block on the engines (vLLM `--block-size`), to match event hashes with
    /// prompts.
    #[serde(default = "default_block_size")]
    #[schemars(range(min = 1, max = 4096))]
    pub block_size: u32,
    /// Port of each engine's replay socket (vLLM `replay_endpoint`), from which a router that
    /// missed messages fetches them again; absent: missed messages make the view uncertain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub replay_port: Option<i32>,
    /// The model's `tokenizer.json`, a path in the router's filesystem (mount it from a
    /// ConfigMap, a volume or the image: the chart's `router.extraVolumes`); absent: the
    /// byte-level approximation, which matches only `warmpath-sim` without `--tokenizer`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096))]
    pub tokenizer: Option<String>,
    /// The chat template (a Jinja file or a `tokenizer_config.json`), likewise a path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096))]
    pub chat_template: Option<String>,
}

fn default_block_size() -> u32 {
    16
}

/// Scoring settings of a pool.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SchedulingSpec {
    #[serde(default)]
    pub weights: SchedulingWeights,
}

/// What the controller observed of an InferencePool.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InferencePoolStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// InferenceReplicas of the pool (from pods and hand-written).
    #[serde(default)]
    pub replicas: i32,
    /// Replicas taking traffic.
    #[serde(default)]
    pub ready_replicas: i32,
    /// `Accepted`, `ResolvedRefs` and `Ready`; messages say what to fix.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}
