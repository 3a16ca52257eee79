//! The scheduler: (request features, candidate replica states) → a decision with its reasons.
//!
//! Policies: round-robin and least-load (baselines), a weighted sum of scorers (prefix overlap,
//! in-flight load, engine queue, KV-cache use; llm-d's shape), and predicted TTFT (argmin of
//! [`crate::predict::TtftModel::predict`]). Ties break at random. A hot-spot guard spills a popular
//! prefix to the next-best replica when the best one's predicted wait is too long, which then
//! becomes warm there too (the router records the spill in the index like any decision).

use crate::predict::TtftModel;
use crate::ReplicaId;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Policy {
    RoundRobin,
    LeastLoad,
    /// Weighted sum of scorers.
    Prefix,
    /// Argmin of predicted TTFT.
    #[default]
    PredictedTtft,
}

/// Weights of the weighted-sum policy (llm-d's defaults: prefix 3, queue 2, kv 2).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Weights {
    pub prefix: f64,
    pub load: f64,
    pub queue: f64,
    pub kv_cache: f64,
}

impl Default for Weights {
    fn default() -> Self {
        Self {
            prefix: 3.0,
            load: 1.0,
            queue: 2.0,
            kv_cache: 2.0,
        }
    }
}

/// Hot-spot guard settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HotspotGuard {
    /// Spill when the best replica's predicted wait (queueing only, seconds) exceeds this…
    pub max_wait_s: f64,
    /// …and the next-best replica's predicted TTFT is within this factor of the best's.
    pub spill_factor: f64,
}

impl Default for HotspotGuard {
    fn default() -> Self {
        Self {
            max_wait_s: 0.5,
            spill_factor: 2.0,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SchedulerConfig {
    pub policy: Policy,
    pub weights: Weights,
    pub hotspot: HotspotGuard,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            policy: Policy::default(),
            weights: Weights::default(),
            hotspot: HotspotGuard::default(),
        }
    }
}

/// Engine-reported load, from scraped metrics; `None` in [`ReplicaView::engine`] when the last
/// scrape is stale or failed (unknown, not zero).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct EngineLoad {
    pub running: f64,
    pub waiting: f64,
    /// 0.0..=1.0
    pub kv_cache_usage: f64,
}

/// What the scheduler knows about one candidate replica.
#[derive(Debug, Clone)]
pub struct ReplicaView<'a> {
    pub id: ReplicaId,
    /// Requests this router has in flight to the replica.
    pub inflight_requests: u32,
    /// Prompt + max output tokens of those requests.
    pub inflight_tokens: u64,
    pub engine: Option<EngineLoad>,
    /// Leading prompt blocks the replica holds (from the prefix index).
    pub matched_blocks: u32,
    pub ttft: &'a TtftModel,
}

/// The request as the scheduler sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RequestView {
    /// Estimated prompt tokens.
    pub prompt_tokens: u32,
    /// Full blocks in the prompt.
    pub blocks: u32,
    /// Estimated tokens per block.
    pub tokens_per_block: u32,
}

/// The pick, with the reasons (returned in a debug header and counted in metrics).
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// Index into the candidate slice.
    pub index: usize,
    pub replica: ReplicaId,
    pub matched_blocks: u32,
    pub predicted_ttft_s: f64,
    /// The hot-spot guard moved the request off the best-matching replica.
    pub spilled: bool,
    pub reason: &'static str,
}

#[derive(Debug)]
pub struct Scheduler {
    config: SchedulerConfig,
}

impl Scheduler {
    pub fn new(config: SchedulerConfig) -> Self {
        Self { config }
    }

    pub fn config(&self) -> &SchedulerConfig {
        &self.config
    }

    /// Pick one of `candidates` (all already healthy and serving the model), or `None` when the
    /// slice is empty. `rng_seed` drives tie-breaks and round-robin position so that the function
    /// stays pure and testable (the router passes a per-request counter/random value).
    pub fn decide(
        &self,
        request: &RequestView,
        candidates: &[ReplicaView<'_>],
        rng_seed: u64,
    ) -> Option<Decision> {
        let _ = (request, candidates, rng_seed);
        todo!("routing core")
    }
}
