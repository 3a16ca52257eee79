//! The scheduler: (request features, candidate replica states) → a decision with its reasons.
//!
//! Policies: round-robin and least-load (baselines), a weighted sum of scorers (prefix overlap,
//! in-flight load, engine queue, KV-cache use; llm-d's shape), and predicted TTFT (argmin of
//! [`crate::predict::TtftModel::predict`] plus the prefill a choice repeats; see `Predictor::cost`).
//! Three more re-implement peers' published algorithms as they ship them, so that benchmarks can
//! compare against them on warmpath's own data path: `consistent_hash` (bounded-load consistent
//! hashing on the first blocks, as Envoy and HAProxy ship it), `llm_d` (llm-d's default scorers
//! and weights) and `dynamo` (Dynamo's KV-router cost); each file says what was read at the
//! source and where the re-implementation differs. None of the three gets the hot-spot guard or
//! the stickiness rule. Ties break at random. The weighted policy may leave the warmest replica only when that costs
//! less than staying (`stay_warm`). A hot-spot guard spills a popular prefix to another replica
//! when the best one's predicted wait is too long *relative to the fleet*, which then becomes
//! warm there too (the router records the spill in the index like any decision).
//!
//! Both rules exist because a cache miss is not only this request's cost: it occupies the
//! replica for the prefill and evicts other prefixes. A scheduler that trades hits for shorter
//! queues under load turns a fleet that keeps up from its cache into one that cannot keep up
//! cold (`tests/fleet_sim.rs` reproduces that collapse and checks it stays fixed).
//!
//! Load signals: the router's own in-flight counts are always fresh; engine metrics
//! ([`EngineLoad`]) are `None` when stale, which means *unknown*, never *idle*: every scorer then
//! falls back to the router's own counts ([`ReplicaView::queued_ahead`]).
//!
//! Weighted-sum scorers, each in `0..=1`, higher is better:
//! - prefix: `matched_blocks / blocks`;
//! - load: `1 − inflight / max(max inflight over candidates, LOAD_FLOOR)`;
//! - queue: `1 − waiting / max(max waiting over candidates, QUEUE_FLOOR)`, where waiting is the
//!   engine's when known, else the router's in-flight count;
//! - kv_cache: `1 − kv_cache_usage`, unknown usage taken as the known candidates' mean.
//!
//! The floors keep tiny absolute differences (one request more) from looking like a 100 %
//! difference at light load, which is what makes a warm prefix stick at light load and spread at
//! heavy load.
//!
//! Where things are: `config` (the policy, weights, hot-spot guard and peer baselines' knobs,
//! and their checks), `explain` (each candidate's scores, for operators), `view` (what the scheduler sees of a replica and the request), `weighted`
//! (the weighted-sum policy and its stickiness rule), `predicted` (predicted TTFT and the cost
//! argmin), `consistent_hash`, `llm_d`, `dynamo` (the peer baselines), `tiebreak` (seeded
//! random tie-breaks); the decision itself and the hot-spot guard are here.

mod config;
mod consistent_hash;
mod dynamo;
mod explain;
mod llm_d;
mod predicted;
mod tiebreak;
mod view;
mod weighted;

pub use config::{
    ConsistentHash, Dynamo, HotspotGuard, LlmD, Placement, Policy, SchedulerConfig, Weights,
    MAX_VIRTUAL_NODES,
};
pub use consistent_hash::{capacity, ring_key, EMPTY_PROMPT_KEY};
pub use explain::CandidateScores;
pub use view::{replica_key, EngineLoad, ReplicaView, RequestView, MAX_ENGINE_COUNT};
pub use weighted::{LEAVE_FACTOR, LOAD_FLOOR, QUEUE_FLOOR};

use crate::{BlockHash, ReplicaId};
use consistent_hash::{consistent_hash, RingCache};
use dynamo::dynamo;
use llm_d::llm_d;
use predicted::{min_cost, Predictor};
use tiebreak::{Best, TieBreak};
use weighted::{best_score, leave_backed_up, new_prefix_home, stay_warm, weighted_scores};

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
    /// Which rule picked: `round_robin`, `least_load`, `weighted_score`, `predicted_ttft`,
    /// `left_backed_up` (the weighted pick was more than twice as costly as another replica),
    /// `hotspot_spill`, `consistent_hash`, `llm_d` or `dynamo` (a stable, low-cardinality label
    /// for metrics).
    pub reason: &'static str,
}

#[derive(Debug)]
pub struct Scheduler {
    config: SchedulerConfig,
    /// `consistent_hash`'s rings, per candidate list (a cache: decisions do not depend on it).
    rings: RingCache,
}

impl Scheduler {
    pub fn new(config: SchedulerConfig) -> Self {
        Self {
            config,
            rings: RingCache::default(),
        }
    }

    pub fn config(&self) -> &SchedulerConfig {
        &self.config
    }

    /// Pick one of `candidates` (all already healthy and serving the model), or `None` when the
    /// slice is empty. `rng_seed` drives tie-breaks and round-robin position so that the function
    /// stays pure and testable (the router passes a per-request counter/random value).
    ///
    /// Round-robin picks `candidates[rng_seed % len]`: with a per-request counter as the seed
    /// that is exact rotation, with a random seed it is uniform.
    ///
    /// The prompt's block hashes are not passed here, so the `consistent_hash` policy keys every
    /// request as a prompt without a full block (all on one ring position); callers that may
    /// run it use [`Scheduler::decide_with_hashes`].
    pub fn decide(
        &self,
        request: &RequestView,
        candidates: &[ReplicaView<'_>],
        rng_seed: u64,
    ) -> Option<Decision> {
        self.decide_with_hashes(request, &[], candidates, rng_seed)
    }

    /// [`Scheduler::decide`] with the prompt's chained block hashes (`BlockHashes::hashes`),
    /// which the `consistent_hash` policy keys on; the other policies ignore them.
    pub fn decide_with_hashes(
        &self,
        request: &RequestView,
        hashes: &[BlockHash],
        candidates: &[ReplicaView<'_>],
        rng_seed: u64,
    ) -> Option<Decision> {
        if candidates.is_empty() {
            return None;
        }
        let mut rng = TieBreak::new(rng_seed);
        let ttft = Predictor::new(request, candidates);
        let (mut index, mut reason) = match self.config.policy {
            Policy::RoundRobin => ((rng_seed % candidates.len() as u64) as usize, "round_robin"),
            Policy::LeastLoad => (least_load(candidates, &mut rng), "least_load"),
            Policy::Prefix => {
                let scores = weighted_scores(&self.config.weights, request, candidates);
                let pick = stay_warm(&ttft, candidates, best_score(&scores, &mut rng));
                let left = leave_backed_up(&self.config.placement, &ttft, candidates, pick);
                if left != pick {
                    (left, "left_backed_up")
                } else {
                    let home = new_prefix_home(
                        self.config.placement.new_prefix_slack,
                        &scores,
                        request,
                        candidates,
                        hashes,
                        pick,
                    );
                    (home, "weighted_score")
                }
            }
            Policy::PredictedTtft => (
                min_cost(&ttft, candidates, None, &mut rng).unwrap_or(0),
                "predicted_ttft",
            ),
            Policy::ConsistentHash => (
                consistent_hash(
                    &self.config.consistent_hash,
                    &self.rings,
                    hashes,
                    candidates,
                ),
                "consistent_hash",
            ),
            Policy::LlmD => (
                llm_d(&self.config.llm_d, request, candidates, &mut rng),
                "llm_d",
            ),
            Policy::Dynamo => (
                dynamo(&self.config.dynamo, request, candidates, &mut rng),
                "dynamo",
            ),
        };
        let mut spilled = false;
        if matches!(self.config.policy, Policy::Prefix | Policy::PredictedTtft) {
            if let Some(alt) = self.hotspot_spill(&ttft, candidates, index, &mut rng) {
                index = alt;
                spilled = true;
                reason = "hotspot_spill";
            }
        }
        let chosen = &candidates[index];
        Some(Decision {
            index,
            replica: chosen.id,
            matched_blocks: chosen.matched_blocks,
            predicted_ttft_s: ttft.of(chosen),
            spilled,
            reason,
        })
    }

    /// The hot-spot guard: `Some(alternative)` when `best`'s predicted queueing wait exceeds
    /// `max_wait_s`, another candidate's wait is at most `1 / spill_factor` of it and within
    /// `max_wait_s` itself, and the best such candidate (by [`Predictor::cost`]) is predicted to
    /// answer within `spill_factor` of `best`'s TTFT.
    ///
    /// The wait conditions make the hot spot relative to the fleet: when every replica is
    /// backed up (sustained overload, or the burst of cold misses at a cold start), moving a
    /// request to a replica that does not hold its prefix only adds prefill work to a fleet that
    /// has none to spare, and the spilled prefix then evicts others there. Spilling on an
    /// absolute wait alone fed itself until the fleet served everything cold; so did spilling
    /// to any replica with half the wait: in a saturated fleet whose caches bind (4 replicas,
    /// 32 requests in flight, `bench/replicas.sh`), every replica waits longer than the bound
    /// and the hot prefix's replica twice as long as some other, and the guard, firing on 12%
    /// of the decisions of one router and 25% of four, cut the hit rate from 0.70 to 0.58 and
    /// the throughput by 28%. A spill goes only to a replica that is not backed up itself.
    fn hotspot_spill(
        &self,
        ttft: &Predictor<'_>,
        candidates: &[ReplicaView<'_>],
        best: usize,
        rng: &mut TieBreak,
    ) -> Option<usize> {
        let guard = &self.config.hotspot;
        if candidates.len() < 2
            || guard.max_wait_s.is_nan()
            || guard.spill_factor.is_nan()
            || guard.spill_factor < 1.0
        {
            return None;
        }
        let b = &candidates[best];
        let wait = b.predicted_wait();
        if wait.is_nan() || wait <= guard.max_wait_s {
            return None;
        }
        // The alternative must not be a hot spot itself: a spill is for spare capacity.
        let alt = min_cost(
            ttft,
            candidates,
            Some((best, (wait / guard.spill_factor).min(guard.max_wait_s))),
            rng,
        )?;
        let best_ttft = ttft.of(b);
        let alt_ttft = ttft.of(&candidates[alt]);
        (alt_ttft <= guard.spill_factor * best_ttft).then_some(alt)
    }
}

fn least_load(candidates: &[ReplicaView<'_>], rng: &mut TieBreak) -> usize {
    let mut best = Best::new();
    for (i, c) in candidates.iter().enumerate() {
        // Tokens break ties between equal request counts: 1e-12 per token stays far below one
        // request for any realistic token count (< 1e11).
        let load = c.queued_ahead() + 1e-12 * c.inflight_tokens as f64;
        best.offer_min(i, load, rng);
    }
    best.get().unwrap_or(0)
}

#[cfg(test)]
mod tests;
