//! Types shared by the v1 resources: a pool's role and engine, and scheduling weights
//! (the same four terms as warmpath-routing's `Weights`, as small integers: only their ratios
//! matter, and integers keep the API free of floating point).

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What a pool's replicas do in a prefill/decode split.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Computes the prompt's KV cache and hands it to a decode replica.
    Prefill,
    /// Generates tokens, from a prefill replica's KV cache or its own prefill.
    Decode,
    /// Serves whole requests (no split).
    #[default]
    Both,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Prefill => "prefill",
            Role::Decode => "decode",
            Role::Both => "both",
        }
    }
}

/// The model server a pool runs: decides metric names and the KV-event format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    #[default]
    Vllm,
    Sglang,
}

impl Engine {
    pub fn as_str(self) -> &'static str {
        match self {
            Engine::Vllm => "vllm",
            Engine::Sglang => "sglang",
        }
    }
}

/// Relative weights of the scheduler's scores (0–100 each; only ratios matter). Defaults are
/// llm-d's (prefix 3, queue 2, KV cache 2) plus load 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.prefix + self.load + self.queue + self.kvCache > 0").message("scheduling weights are all 0: give at least one score (prefix, load, queue, kvCache) a weight above 0"))]
pub struct SchedulingWeights {
    /// Weight of the predicted prefix-cache hit.
    #[serde(default = "default_prefix")]
    #[schemars(range(min = 0, max = 100))]
    pub prefix: u32,
    /// Weight of in-flight requests routed by warmpath.
    #[serde(default = "default_load")]
    #[schemars(range(min = 0, max = 100))]
    pub load: u32,
    /// Weight of the engine's reported waiting queue.
    #[serde(default = "default_queue")]
    #[schemars(range(min = 0, max = 100))]
    pub queue: u32,
    /// Weight of the engine's reported KV-cache use.
    #[serde(default = "default_kv_cache")]
    #[schemars(range(min = 0, max = 100))]
    pub kv_cache: u32,
}

fn default_prefix() -> u32 {
    3
}
fn default_load() -> u32 {
    1
}
fn default_queue() -> u32 {
    2
}
fn default_kv_cache() -> u32 {
    2
}

impl Default for SchedulingWeights {
    fn default() -> Self {
        Self {
            prefix: default_prefix(),
            load: default_load(),
            queue: default_queue(),
            kv_cache: default_kv_cache(),
        }
    }
}

impl SchedulingWeights {
    /// `(prefix, load, queue, kv_cache)` as floating point, in the order of warmpath-routing's
    /// `Weights` fields.
    pub fn as_f64(self) -> (f64, f64, f64, f64) {
        (
            f64::from(self.prefix),
            f64::from(self.load),
            f64::from(self.queue),
            f64::from(self.kv_cache),
        )
    }
}
