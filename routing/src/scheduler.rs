//! The scheduler: (request features, candidate replica states) → a decision with its reasons.
//!
//! Policies: round-robin and least-load (baselines), a weighted sum of scorers (prefix overlap,
//! in-flight load, engine queue, KV-cache use; llm-d's shape), and predicted TTFT (argmin of
//! [`crate::predict::TtftModel::predict`] plus the prefill a choice repeats; see `Predictor::cost`).
//! Ties break at random. The weighted policy may leave the warmest replica only when that costs
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

use crate::predict::TtftModel;
use crate::{ConfigError, ReplicaId};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Policy {
    RoundRobin,
    LeastLoad,
    /// Weighted sum of scorers.
    /// The default: on the shared-prefix benchmark (BENCHMARKS.md) it has the best hit rate and
    /// TTFT of the four, in closed and open loop.
    #[default]
    Prefix,
    /// Argmin of predicted TTFT. Best where replicas differ in speed (a mixed fleet).
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
    /// …and another replica's predicted wait is at most `1 / spill_factor` of it (the hot spot
    /// is relative to the fleet), and that replica's predicted TTFT is within this factor of
    /// the best's.
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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct SchedulerConfig {
    pub policy: Policy,
    pub weights: Weights,
    pub hotspot: HotspotGuard,
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
    /// Uncached prompt tokens of this router's requests on the replica that have not produced a
    /// first token yet: prefill work queued ahead of a new request. A queue of cache hits is
    /// cheap and a queue of misses is not; counting requests alone cannot tell them apart.
    pub pending_prefill_tokens: u64,
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
    /// Which rule picked: `round_robin`, `least_load`, `weighted_score`, `predicted_ttft`, or
    /// `hotspot_spill` (a stable, low-cardinality label for metrics).
    pub reason: &'static str,
}

impl SchedulerConfig {
    /// Check the values the scheduler would otherwise quietly neutralise.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let w = &self.weights;
        for (name, value) in [
            ("prefix", w.prefix),
            ("load", w.load),
            ("queue", w.queue),
            ("kv_cache", w.kv_cache),
        ] {
            if !(value.is_finite() && value >= 0.0) {
                return Err(ConfigError::Weight { name, value });
            }
        }
        if self.policy == Policy::Prefix && w.prefix + w.load + w.queue + w.kv_cache <= 0.0 {
            return Err(ConfigError::AllWeightsZero);
        }
        let h = &self.hotspot;
        if h.max_wait_s.is_nan() || h.max_wait_s < 0.0 {
            return Err(ConfigError::MaxWait(h.max_wait_s));
        }
        if !(h.spill_factor.is_finite() && h.spill_factor >= 1.0) {
            return Err(ConfigError::SpillFactor(h.spill_factor));
        }
        Ok(())
    }
}

/// Below this many in-flight requests the load scorer does not treat a replica as loaded.
pub const LOAD_FLOOR: f64 = 16.0;
/// Below this many waiting requests the queue scorer does not treat a replica as queued
/// (llm-d's saturation threshold is a queue depth of 5).
pub const QUEUE_FLOOR: f64 = 5.0;

/// Engine-reported counts above this are treated as garbage (unknown), not as load.
pub const MAX_ENGINE_COUNT: f64 = 1e9;

impl ReplicaView<'_> {
    /// Requests ahead of a new one on this replica: the engine's running + waiting when its
    /// metrics are fresh (never less than the router's own in-flight count, which may be newer
    /// than the last scrape), else the router's own in-flight count. The router should pass this
    /// same value to [`TtftModel::observe`].
    pub fn queued_ahead(&self) -> f64 {
        let own = f64::from(self.inflight_requests);
        match self.fresh_engine() {
            Some(e) => (e.running + e.waiting).max(own),
            None => own,
        }
    }

    /// Tokens a new request's prefill waits for on this replica plus its own `uncached`: what
    /// the TTFT model's per-token term multiplies. The router passes the same sum to
    /// [`TtftModel::observe`].
    pub fn prefill_tokens(&self, uncached: u32) -> u32 {
        self.pending_prefill_tokens
            .saturating_add(u64::from(uncached))
            .min(u64::from(u32::MAX)) as u32
    }

    /// Predicted wait before the replica starts a new request: requests ahead of it plus the
    /// prefill work they still need, seconds.
    pub fn predicted_wait(&self) -> f64 {
        self.ttft.predict_wait(self.queued_ahead())
            + self.ttft.per_token_s() * self.pending_prefill_tokens.min(u64::from(u32::MAX)) as f64
    }

    /// Engine metrics if present and sane: non-finite, negative or absurd (over
    /// [`MAX_ENGINE_COUNT`]) values make them unknown.
    fn fresh_engine(&self) -> Option<EngineLoad> {
        self.engine.filter(|e| {
            [e.running, e.waiting, e.kv_cache_usage]
                .iter()
                .all(|v| v.is_finite() && (0.0..=MAX_ENGINE_COUNT).contains(v))
        })
    }

    /// Requests waiting on the replica. A scrape is up to one interval old, so during a burst
    /// the router's own in-flight requests beyond what the engine reports running are counted
    /// as waiting too: a burst must not all land on one replica before the next scrape.
    fn waiting(&self) -> f64 {
        let own = f64::from(self.inflight_requests);
        match self.fresh_engine() {
            Some(e) => e.waiting.max(own - e.running),
            None => own,
        }
    }

    fn kv_usage(&self) -> Option<f64> {
        self.fresh_engine().map(|e| e.kv_cache_usage.min(1.0))
    }
}

impl RequestView {
    /// Tokens left to prefill on a replica that holds `matched_blocks` leading blocks.
    pub fn uncached_tokens(&self, matched_blocks: u32) -> u32 {
        let cached = u64::from(matched_blocks.min(self.blocks)) * u64::from(self.tokens_per_block);
        (u64::from(self.prompt_tokens).saturating_sub(cached)) as u32
    }
}

/// A small PRNG (SplitMix64) so a decision is a pure function of its inputs and seed.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0); the modulo bias is negligible for candidate counts.
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Running arg-best with uniform random choice among ties (reservoir sampling).
struct Best {
    index: usize,
    value: f64,
    ties: u64,
}

impl Best {
    fn new() -> Self {
        Self {
            index: usize::MAX,
            value: f64::NAN,
            ties: 0,
        }
    }

    /// Offer a candidate whose value is to be *minimised*.
    fn offer_min(&mut self, index: usize, value: f64, rng: &mut SplitMix) {
        let value = if value.is_nan() { f64::INFINITY } else { value };
        if self.ties == 0 {
            (self.index, self.value, self.ties) = (index, value, 1);
            return;
        }
        // Relative tolerance so that float noise between equal states still ties; none when a
        // value is infinite (an infinite tolerance would tie everything).
        let scale = self.value.abs().max(value.abs());
        let tol = if scale.is_finite() { 1e-9 * scale } else { 0.0 };
        if value < self.value - tol {
            (self.index, self.value, self.ties) = (index, value, 1);
        } else if (value - self.value).abs() <= tol || value == self.value {
            self.ties += 1;
            if rng.below(self.ties) == 0 {
                self.index = index;
            }
        }
    }

    fn get(&self) -> Option<usize> {
        (self.ties > 0).then_some(self.index)
    }
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
    ///
    /// Round-robin picks `candidates[rng_seed % len]`: with a per-request counter as the seed
    /// that is exact rotation, with a random seed it is uniform.
    pub fn decide(
        &self,
        request: &RequestView,
        candidates: &[ReplicaView<'_>],
        rng_seed: u64,
    ) -> Option<Decision> {
        if candidates.is_empty() {
            return None;
        }
        let mut rng = SplitMix(rng_seed);
        let ttft = Predictor::new(request, candidates);
        let (mut index, mut reason) = match self.config.policy {
            Policy::RoundRobin => ((rng_seed % candidates.len() as u64) as usize, "round_robin"),
            Policy::LeastLoad => (least_load(candidates, &mut rng), "least_load"),
            Policy::Prefix => {
                let pick = weighted(&self.config.weights, request, candidates, &mut rng);
                (stay_warm(&ttft, candidates, pick), "weighted_score")
            }
            Policy::PredictedTtft => (
                min_cost(&ttft, candidates, None, &mut rng).unwrap_or(0),
                "predicted_ttft",
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
    /// `max_wait_s`, another candidate's wait is at most `1 / spill_factor` of it, and the best
    /// such candidate (by [`Predictor::cost`]) is predicted to answer within `spill_factor` of
    /// `best`'s TTFT.
    ///
    /// The wait condition makes the hot spot relative to the fleet: when every replica is
    /// backed up (sustained overload, or the burst of cold misses at a cold start), moving a
    /// request to a replica that does not hold its prefix only adds prefill work to a fleet that
    /// has none to spare, and the spilled prefix then evicts others there. Spilling on an
    /// absolute wait alone fed itself until the fleet served everything cold.
    fn hotspot_spill(
        &self,
        ttft: &Predictor<'_>,
        candidates: &[ReplicaView<'_>],
        best: usize,
        rng: &mut SplitMix,
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
        let alt = min_cost(
            ttft,
            candidates,
            Some((best, wait / guard.spill_factor)),
            rng,
        )?;
        let best_ttft = ttft.of(b);
        let alt_ttft = ttft.of(&candidates[alt]);
        (alt_ttft <= guard.spill_factor * best_ttft).then_some(alt)
    }
}

/// Predicted TTFT per candidate, optimistic about replicas it has not seen answer yet.
///
/// A replica with no observed TTFT only has the prior, which is usually pessimistic next to what
/// faster replicas have shown; left alone, argmin would never try it and a fast newcomer in a
/// mixed fleet would get no traffic. So an unobserved replica is predicted as the most
/// optimistic of its prior and the fastest learned model among the candidates (optimism in the
/// face of uncertainty): it gets tried, and its own observations take over from then on.
struct Predictor<'a> {
    request: &'a RequestView,
    fastest_learned: Option<&'a TtftModel>,
    /// The fewest uncached prompt tokens on any candidate (the warmest one's).
    min_uncached: u32,
}

impl<'a> Predictor<'a> {
    fn new(request: &'a RequestView, candidates: &'a [ReplicaView<'a>]) -> Self {
        let fastest_learned = candidates
            .iter()
            .map(|c| c.ttft)
            .filter(|m| m.observations() > 0)
            .min_by(|a, b| a.per_token_s().total_cmp(&b.per_token_s()));
        let min_uncached = candidates
            .iter()
            .map(|c| request.uncached_tokens(c.matched_blocks))
            .min()
            .unwrap_or(0);
        Self {
            request,
            fastest_learned,
            min_uncached,
        }
    }

    fn of(&self, c: &ReplicaView<'_>) -> f64 {
        let tokens = c.prefill_tokens(self.request.uncached_tokens(c.matched_blocks));
        let queued = c.queued_ahead();
        let own = c.ttft.predict(tokens, queued);
        match self.fastest_learned {
            Some(m) if c.ttft.observations() == 0 => own.min(m.predict(tokens, queued)),
            _ => own,
        }
    }

    /// What choosing `c` costs: its predicted TTFT plus the prefill it repeats, seconds at its
    /// own per-token cost, of the prompt tokens the warmest candidate already holds.
    ///
    /// TTFT alone is what this request sees; the repeated prefill is what the fleet pays for
    /// it: the replica is busy that much longer for every request behind it, and the copy of
    /// the prefix evicts something else there. Ignoring it, a request whose warm replica is
    /// busy prefilling its prefix for the previous request goes cold elsewhere (same TTFT,
    /// double the work), which under load turns hits into misses until the fleet runs cold.
    /// With it, a request leaves the warm replica only when the wait there is longer than the
    /// prefill it would repeat, counted twice: once for itself, once for the others.
    fn cost(&self, c: &ReplicaView<'_>) -> f64 {
        let extra = self.request.uncached_tokens(c.matched_blocks) - self.min_uncached;
        self.of(c) + c.ttft.per_token_s() * f64::from(extra)
    }

    /// [`Predictor::cost`] from the replica's prior instead of what it learned: the weighted
    /// policy's stickiness rule. It must hold even where the learned model is misled (a
    /// server that streams a chunk before its prefill, as the simulator does for chat, teaches
    /// it that prefill is free, and a rule trusting that pins every conversation to the
    /// replica that taught it).
    fn prior_cost(&self, c: &ReplicaView<'_>) -> f64 {
        let p = c.ttft.prior();
        let tokens = c.prefill_tokens(self.request.uncached_tokens(c.matched_blocks));
        let ttft = p.base_s + p.per_token_s * f64::from(tokens) + p.per_queued_s * c.queued_ahead();
        ttft + self.repeated_prefill(c, p.per_token_s)
    }

    /// Seconds of prefill choosing `c` repeats, at `per_token_s`, of the prompt tokens the
    /// warmest candidate already holds; nothing on an idle replica, where it delays nobody.
    /// That exception is what lets the weighted policy's load scorers give idle replicas
    /// their share (and the prefixes they need) as warm ones fill up; without it conversation
    /// workloads piled onto the replicas that happened to hold the shared system prompt.
    fn repeated_prefill(&self, c: &ReplicaView<'_>, per_token_s: f64) -> f64 {
        let extra = self.request.uncached_tokens(c.matched_blocks) - self.min_uncached;
        let delayed = c.queued_ahead().min(1.0);
        delayed * per_token_s * f64::from(extra)
    }
}

/// Argmin of [`Predictor::cost`]; with `exclude = Some((i, wait))`, over candidates other than
/// `i` whose predicted wait is at most `wait`.
fn min_cost(
    ttft: &Predictor<'_>,
    candidates: &[ReplicaView<'_>],
    exclude: Option<(usize, f64)>,
    rng: &mut SplitMix,
) -> Option<usize> {
    let mut best = Best::new();
    for (i, c) in candidates.iter().enumerate() {
        if let Some((skip, wait)) = exclude {
            let w = c.predicted_wait();
            if i == skip || w.is_nan() || w > wait {
                continue;
            }
        }
        best.offer_min(i, ttft.cost(c), rng);
    }
    best.get()
}

/// The weighted pick, unless it prefills more of the prompt than the warmest candidate and
/// costs more than that candidate ([`Predictor::prior_cost`]): the load scorers may move a
/// request off its warm replica only when the wait there outweighs the prefill the move
/// repeats.
///
/// Without this, normal load imbalance (a replica holding two busy prefixes has twice the
/// requests and KV use of one holding one) was enough for the load, queue and KV scorers to
/// outvote a full prefix match, so documents wandered between replicas and each move was a
/// cold prefill and an eviction (the long-document workload held 0.78 of its oracle hit rate).
fn stay_warm(ttft: &Predictor<'_>, candidates: &[ReplicaView<'_>], pick: usize) -> usize {
    let Some(p) = candidates.get(pick) else {
        return pick;
    };
    let most = candidates
        .iter()
        .map(|c| c.matched_blocks)
        .max()
        .unwrap_or(0);
    if p.matched_blocks >= most {
        return pick;
    }
    // The cheapest of the warmest (first on ties: deterministic, and they tie on prefix).
    let mut warm = pick;
    let mut warm_cost = f64::INFINITY;
    for (i, c) in candidates.iter().enumerate() {
        if c.matched_blocks == most {
            let cost = ttft.prior_cost(c);
            if cost < warm_cost || warm == pick {
                (warm, warm_cost) = (i, cost);
            }
        }
    }
    let w = &candidates[warm];
    if ttft.request.uncached_tokens(w.matched_blocks)
        >= ttft.request.uncached_tokens(p.matched_blocks)
    {
        return pick;
    }
    if ttft.prior_cost(p) > warm_cost {
        warm
    } else {
        pick
    }
}

fn least_load(candidates: &[ReplicaView<'_>], rng: &mut SplitMix) -> usize {
    let mut best = Best::new();
    for (i, c) in candidates.iter().enumerate() {
        // Tokens break ties between equal request counts: 1e-12 per token stays far below one
        // request for any realistic token count (< 1e11).
        let load = c.queued_ahead() + 1e-12 * c.inflight_tokens as f64;
        best.offer_min(i, load, rng);
    }
    best.get().unwrap_or(0)
}

fn weight(w: f64) -> f64 {
    if w.is_finite() && w > 0.0 {
        w
    } else {
        0.0
    }
}

fn weighted(
    weights: &Weights,
    request: &RequestView,
    candidates: &[ReplicaView<'_>],
    rng: &mut SplitMix,
) -> usize {
    let (wp, wl, wq, wk) = (
        weight(weights.prefix),
        weight(weights.load),
        weight(weights.queue),
        weight(weights.kv_cache),
    );
    let mut max_inflight = LOAD_FLOOR;
    let mut max_waiting = QUEUE_FLOOR;
    let (mut kv_sum, mut kv_known) = (0.0, 0u32);
    for c in candidates {
        max_inflight = max_inflight.max(f64::from(c.inflight_requests));
        max_waiting = max_waiting.max(c.waiting());
        if let Some(u) = c.kv_usage() {
            kv_sum += u;
            kv_known += 1;
        }
    }
    let kv_unknown = if kv_known > 0 {
        kv_sum / f64::from(kv_known)
    } else {
        0.5
    };
    let mut best = Best::new();
    for (i, c) in candidates.iter().enumerate() {
        let prefix = if request.blocks == 0 {
            0.0
        } else {
            (f64::from(c.matched_blocks) / f64::from(request.blocks)).min(1.0)
        };
        let load = 1.0 - f64::from(c.inflight_requests) / max_inflight;
        let queue = 1.0 - c.waiting() / max_waiting;
        let kv = 1.0 - c.kv_usage().unwrap_or(kv_unknown);
        let score = wp * prefix + wl * load + wq * queue + wk * kv;
        best.offer_min(i, -score, rng);
    }
    best.get().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::predict::TtftPrior;

    fn sched(policy: Policy) -> Scheduler {
        Scheduler::new(SchedulerConfig {
            policy,
            ..SchedulerConfig::default()
        })
    }

    fn view(
        id: ReplicaId,
        inflight: u32,
        engine: Option<EngineLoad>,
        matched: u32,
        ttft: &TtftModel,
    ) -> ReplicaView<'_> {
        ReplicaView {
            id,
            inflight_requests: inflight,
            inflight_tokens: u64::from(inflight) * 1000,
            engine,
            matched_blocks: matched,
            pending_prefill_tokens: 0,
            ttft,
        }
    }

    fn engine(running: f64, waiting: f64, kv: f64) -> Option<EngineLoad> {
        Some(EngineLoad {
            running,
            waiting,
            kv_cache_usage: kv,
        })
    }

    /// An 8k-token prompt in 512 blocks of 16 tokens.
    fn request() -> RequestView {
        RequestView {
            prompt_tokens: 8192,
            blocks: 512,
            tokens_per_block: 16,
        }
    }

    const BOTH: [Policy; 2] = [Policy::Prefix, Policy::PredictedTtft];

    #[test]
    fn empty_candidates_give_none() {
        for p in [
            Policy::RoundRobin,
            Policy::LeastLoad,
            Policy::Prefix,
            Policy::PredictedTtft,
        ] {
            assert_eq!(sched(p).decide(&request(), &[], 1), None);
        }
    }

    #[test]
    fn prefix_affinity_at_low_load() {
        let m = TtftModel::default();
        let cands = [
            view(0, 1, engine(1.0, 0.0, 0.05), 0, &m),
            view(1, 2, engine(2.0, 0.0, 0.10), 512, &m),
            view(2, 0, engine(0.0, 0.0, 0.01), 100, &m),
        ];
        for p in BOTH {
            for seed in 0..20 {
                let d = sched(p).decide(&request(), &cands, seed).unwrap();
                assert_eq!(d.replica, 1, "{p:?}");
                assert_eq!(d.matched_blocks, 512);
                assert!(!d.spilled);
            }
        }
    }

    #[test]
    fn spreads_at_high_load() {
        let m = TtftModel::default();
        let cands = [
            view(0, 4, engine(4.0, 0.0, 0.2), 0, &m),
            view(1, 90, engine(64.0, 30.0, 0.95), 512, &m),
            view(2, 6, engine(6.0, 0.0, 0.25), 0, &m),
        ];
        for p in BOTH {
            let d = sched(p).decide(&request(), &cands, 5).unwrap();
            assert_eq!(d.replica, 0, "{p:?}: {d:?}");
        }
    }

    #[test]
    fn hot_prefix_spills_and_then_sticks_to_both() {
        // A 32k-token shared prefix: cold prefill (1.6 s at the prior's 50 µs/token) is long,
        // so the plain argmin keeps queueing on the warm replica.
        let m = TtftModel::default();
        let req = RequestView {
            prompt_tokens: 32_768,
            blocks: 2048,
            tokens_per_block: 16,
        };
        let s = sched(Policy::PredictedTtft);
        let calm = [
            view(0, 10, engine(10.0, 0.0, 0.3), 2048, &m),
            view(1, 0, engine(0.0, 0.0, 0.0), 0, &m),
        ];
        let d = s.decide(&req, &calm, 1).unwrap();
        assert_eq!(
            (d.replica, d.spilled, d.reason),
            (0, false, "predicted_ttft")
        );
        // 0.9 s of predicted wait (> max_wait_s 0.5) while cold TTFT 1.64 s < 2 × 0.9 s.
        let hot = [
            view(0, 90, engine(60.0, 30.0, 0.6), 2048, &m),
            view(1, 0, engine(0.0, 0.0, 0.0), 0, &m),
        ];
        let d = s.decide(&req, &hot, 1).unwrap();
        assert_eq!((d.replica, d.spilled, d.reason), (1, true, "hotspot_spill"));
        // Without the guard the warm replica would have been chosen.
        let no_guard = Scheduler::new(SchedulerConfig {
            policy: Policy::PredictedTtft,
            hotspot: HotspotGuard {
                max_wait_s: f64::INFINITY,
                spill_factor: 2.0,
            },
            ..SchedulerConfig::default()
        });
        assert_eq!(no_guard.decide(&req, &hot, 1).unwrap().replica, 0);
        // Once warm on both, requests go to the less loaded warm one without spilling.
        let both_warm = [
            view(0, 90, engine(60.0, 30.0, 0.6), 2048, &m),
            view(1, 3, engine(3.0, 0.0, 0.1), 2048, &m),
        ];
        let d = s.decide(&req, &both_warm, 1).unwrap();
        assert_eq!((d.replica, d.spilled), (1, false));
        // No spill to a replica whose predicted TTFT is beyond spill_factor.
        let far = [
            view(0, 60, engine(50.0, 10.0, 0.6), 2048, &m),
            view(1, 0, engine(0.0, 0.0, 0.0), 0, &m),
        ];
        let d = s.decide(&req, &far, 1).unwrap();
        assert_eq!((d.replica, d.spilled), (0, false));
    }

    #[test]
    fn weighted_policy_spills_too() {
        let m = TtftModel::default();
        let req = RequestView {
            prompt_tokens: 32_768,
            blocks: 2048,
            tokens_per_block: 16,
        };
        let cands = [
            view(0, 12, engine(12.0, 0.0, 0.3), 2048, &m),
            view(1, 0, engine(0.0, 0.0, 0.0), 0, &m),
        ];
        // Warm replica has 12 requests ahead (0.12 s wait): sticks.
        assert_eq!(
            sched(Policy::Prefix)
                .decide(&req, &cands, 1)
                .unwrap()
                .replica,
            0
        );
        let hot = [
            view(0, 90, engine(90.0, 0.0, 0.3), 2048, &m),
            view(1, 0, engine(0.0, 0.0, 0.0), 0, &m),
        ];
        // 0.9 s predicted wait; cold TTFT 1.64 s is within 2 × 0.905 s.
        let d = sched(Policy::Prefix).decide(&req, &hot, 1).unwrap();
        assert_eq!((d.replica, d.spilled), (1, true), "{d:?}");
    }

    #[test]
    fn stale_metrics_are_unknown_not_idle() {
        let m = TtftModel::default();
        // Replica 0's scrape is stale but the router itself has 40 requests in flight to it.
        let cands = [
            view(0, 40, None, 0, &m),
            view(1, 3, engine(3.0, 1.0, 0.3), 0, &m),
        ];
        for p in [Policy::LeastLoad, Policy::Prefix, Policy::PredictedTtft] {
            let d = sched(p).decide(&request(), &cands, 9).unwrap();
            assert_eq!(d.replica, 1, "{p:?}");
        }
        assert_eq!(cands[0].queued_ahead(), 40.0);
        // Stale and idle by our own counts: not avoided either.
        let cands = [
            view(0, 0, None, 0, &m),
            view(1, 20, engine(20.0, 8.0, 0.7), 0, &m),
        ];
        for p in [Policy::LeastLoad, Policy::Prefix, Policy::PredictedTtft] {
            assert_eq!(
                sched(p).decide(&request(), &cands, 9).unwrap().replica,
                0,
                "{p:?}"
            );
        }
        // Garbage metrics count as stale.
        let v = view(0, 7, engine(f64::NAN, 1.0, 0.1), 0, &m);
        assert_eq!(v.queued_ahead(), 7.0);
        // Fresh engine counts below our own in-flight count (scrape older than our sends).
        let v = view(0, 7, engine(2.0, 1.0, 0.1), 0, &m);
        assert_eq!(v.queued_ahead(), 7.0);
    }

    fn trained(per_token_s: f64) -> TtftModel {
        let mut m = TtftModel::default();
        for i in 0..400u32 {
            let u = (i * 97) % 8000;
            let q = f64::from(i % 9);
            m.observe(u, q, 0.01 + per_token_s * f64::from(u) + 0.02 * q);
        }
        m
    }

    #[test]
    fn predicted_ttft_prefers_the_faster_replica() {
        let slow = trained(0.000_4);
        let fast = trained(0.000_1);
        let cands = [
            view(0, 2, engine(2.0, 0.0, 0.2), 0, &slow),
            view(1, 2, engine(2.0, 0.0, 0.2), 0, &fast),
        ];
        let d = sched(Policy::PredictedTtft)
            .decide(&request(), &cands, 3)
            .unwrap();
        assert_eq!(d.replica, 1);
        assert!((d.predicted_ttft_s - fast.predict(8192, 2.0)).abs() < 1e-12);
        // But not at any price: a long queue on the fast one sends work to the slow one.
        let cands = [
            view(0, 0, engine(0.0, 0.0, 0.0), 0, &slow),
            view(1, 150, engine(100.0, 50.0, 0.9), 0, &fast),
        ];
        assert_eq!(
            sched(Policy::PredictedTtft)
                .decide(&request(), &cands, 3)
                .unwrap()
                .replica,
            0
        );
    }

    #[test]
    fn a_queue_of_cache_hits_waits_less_than_a_queue_of_misses() {
        // Same model, same number of requests ahead, same (zero) prefix match: the replica whose
        // queue still has 40k tokens to prefill is the slower choice.
        let m = trained(0.000_1);
        let mut hits = view(0, 4, engine(4.0, 0.0, 0.2), 0, &m);
        hits.pending_prefill_tokens = 200;
        let mut misses = view(1, 4, engine(4.0, 0.0, 0.2), 0, &m);
        misses.pending_prefill_tokens = 40_000;
        assert!(misses.predicted_wait() > hits.predicted_wait() + 3.0);
        for cands in [
            [hits.clone(), misses.clone()],
            [misses.clone(), hits.clone()],
        ] {
            let d = sched(Policy::PredictedTtft)
                .decide(&request(), &cands, 5)
                .unwrap();
            assert_eq!(d.replica, 0, "{d:?}");
        }
        // The pending work counts in the prediction exactly as the request's own tokens do.
        assert_eq!(misses.prefill_tokens(8192), 48_192);
        assert_eq!(
            ReplicaView {
                pending_prefill_tokens: u64::MAX,
                ..misses
            }
            .prefill_tokens(1),
            u32::MAX
        );
    }

    #[test]
    fn an_unobserved_replica_is_tried_when_the_observed_one_beats_the_prior() {
        // The observed replica learned 10 µs/token, well under the prior's 50 µs: judged by its
        // prior alone, the new replica would never be picked. Optimism makes it look as fast
        // as the fastest learned one, so the lighter queue decides.
        let learned = trained(0.000_01);
        let fresh = TtftModel::default();
        assert!(fresh.predict(8192, 0.0) > learned.predict(8192, 1.0));
        let cands = [
            view(0, 1, engine(1.0, 0.0, 0.2), 0, &learned),
            view(1, 0, engine(0.0, 0.0, 0.0), 0, &fresh),
        ];
        let d = sched(Policy::PredictedTtft)
            .decide(&request(), &cands, 3)
            .unwrap();
        assert_eq!(d.replica, 1, "{d:?}");
        // Once it has answered, its own model takes over: here a slow one loses again.
        let slow = trained(0.000_4);
        let cands = [
            view(0, 1, engine(1.0, 0.0, 0.2), 0, &learned),
            view(1, 0, engine(0.0, 0.0, 0.0), 0, &slow),
        ];
        let d = sched(Policy::PredictedTtft)
            .decide(&request(), &cands, 3)
            .unwrap();
        assert_eq!(d.replica, 0, "{d:?}");
    }

    /// A mixed fleet in a small closed-loop simulation: each replica prefills at its own speed
    /// (one request at a time); the scheduler learns the speeds from observed TTFTs. Near
    /// saturation the work splits roughly in proportion to speed (4 : 1 here).
    #[test]
    fn mixed_fleet_gets_traffic_in_proportion_to_speed() {
        let per_token = [0.000_05, 0.000_05, 0.000_2, 0.000_2];
        let mut models: Vec<TtftModel> = (0..4)
            .map(|_| TtftModel::new(TtftPrior::default()))
            .collect();
        // Each replica serves one prefill at a time: `busy_until` is when its queue drains.
        let mut busy_until = [0.0f64; 4];
        let mut served = [0u32; 4];
        let s = sched(Policy::PredictedTtft);
        let tokens = 2000u32;
        let req = RequestView {
            prompt_tokens: tokens,
            blocks: 0,
            tokens_per_block: 16,
        };
        let mut now = 0.0;
        for n in 0..4000u64 {
            // 24 requests/s against a capacity of 2 × 10/s (fast) + 2 × 2.5/s (slow) = 25/s:
            // the fast pair alone cannot keep up, so a speed-proportional split is 4 : 1.
            now += 1.0 / 24.0;
            let queued: Vec<u32> = (0..4)
                .map(|i| {
                    ((busy_until[i] - now).max(0.0) / (per_token[i] * f64::from(tokens))).ceil()
                        as u32
                })
                .collect();
            let cands: Vec<ReplicaView<'_>> = (0..4)
                .map(|i| view(i as u32, queued[i], None, 0, &models[i]))
                .collect();
            let d = s.decide(&req, &cands, n).unwrap();
            let i = d.index;
            let start = busy_until[i].max(now);
            busy_until[i] = start + per_token[i] * f64::from(tokens);
            let ttft = busy_until[i] - now;
            let q = f64::from(queued[i]);
            models[i].observe(tokens, q, ttft);
            served[i] += 1;
        }
        let fast = served[0] + served[1];
        let slow = served[2] + served[3];
        eprintln!(
            "mixed fleet: served {served:?}, learned per-token {:?}",
            models
                .iter()
                .map(TtftModel::per_token_s)
                .collect::<Vec<_>>()
        );
        let share = f64::from(fast) / f64::from(fast + slow);
        assert!((0.72..=0.88).contains(&share), "{served:?}");
        assert!(models[0].per_token_s() < models[2].per_token_s() / 2.0);
    }

    #[test]
    fn a_follower_waits_for_its_leaders_prefill_instead_of_going_cold() {
        // The leader of a new prefix is still prefilling its 2112 tokens on replica 0; the
        // follower matches the prefix there. Waiting for the leader gives about the same TTFT
        // as prefilling cold on idle replica 1, but going cold doubles the fleet's work (and
        // under load, repeated, turned the whole fleet cold).
        let m = trained(0.000_2);
        let req = RequestView {
            prompt_tokens: 2112,
            blocks: 132,
            tokens_per_block: 16,
        };
        let mut warm = view(0, 1, None, 128, &m);
        warm.pending_prefill_tokens = 2112;
        // Busy with one request that is a cache hit: work put here delays it.
        let mut cold = view(1, 1, None, 0, &m);
        cold.pending_prefill_tokens = 64;
        for p in BOTH {
            for seed in 0..10 {
                let d = sched(p)
                    .decide(&req, &[warm.clone(), cold.clone()], seed)
                    .unwrap();
                assert_eq!((d.replica, d.spilled), (0, false), "{p:?}: {d:?}");
            }
        }
        // Once the wait there is longer than the prefill a move repeats, counted for the
        // request and for the fleet, it leaves.
        let mut backed_up = warm.clone();
        backed_up.pending_prefill_tokens = 4 * 2112;
        backed_up.inflight_requests = 4;
        let d = sched(Policy::PredictedTtft)
            .decide(&req, &[backed_up, cold], 1)
            .unwrap();
        assert_eq!(d.replica, 1, "{d:?}");
    }

    #[test]
    fn idle_replicas_take_their_share_from_a_busy_warm_one() {
        // Twenty requests on the warm replica: the load scorers want the idle one. Moving
        // repeats 2048 tokens of prefill, but on an idle replica that delays nobody, so the
        // stickiness rule lets it go (a replica that is busy at all would have kept it).
        let m = TtftModel::default();
        let req = RequestView {
            prompt_tokens: 2112,
            blocks: 132,
            tokens_per_block: 16,
        };
        let warm = view(0, 16, engine(16.0, 4.0, 0.8), 128, &m);
        let idle = view(1, 0, engine(0.0, 0.0, 0.0), 0, &m);
        let d = sched(Policy::Prefix)
            .decide(&req, &[warm.clone(), idle], 1)
            .unwrap();
        assert_eq!(d.replica, 1, "{d:?}");
        let busy = view(1, 1, engine(1.0, 0.0, 0.0), 0, &m);
        let d = sched(Policy::Prefix)
            .decide(&req, &[warm, busy], 1)
            .unwrap();
        assert_eq!(d.replica, 0, "{d:?}");
    }

    #[test]
    fn no_spill_when_the_whole_fleet_is_backed_up() {
        // Every replica has most of a second of prefill queued: the warm one a little more. A
        // spill would add a cold prefill to a fleet without spare capacity.
        let m = trained(0.000_1);
        let req = RequestView {
            prompt_tokens: 2112,
            blocks: 132,
            tokens_per_block: 16,
        };
        let mut warm = view(0, 6, None, 128, &m);
        warm.pending_prefill_tokens = 8000;
        let mut cold = view(1, 5, None, 0, &m);
        cold.pending_prefill_tokens = 6000;
        assert!(warm.predicted_wait() > 0.5 && cold.predicted_wait() > 0.5);
        for p in BOTH {
            let d = sched(p)
                .decide(&req, &[warm.clone(), cold.clone()], 1)
                .unwrap();
            assert_eq!((d.replica, d.spilled), (0, false), "{p:?}: {d:?}");
        }
        // A replica with little queued is another matter: that is a hot spot.
        cold.pending_prefill_tokens = 0;
        cold.inflight_requests = 0;
        let d = sched(Policy::Prefix)
            .decide(&req, &[warm, cold], 1)
            .unwrap();
        assert_eq!((d.replica, d.spilled), (1, true), "{d:?}");
    }

    #[test]
    fn load_scorers_do_not_move_a_document_off_its_warm_replica() {
        // Replica 0 holds the 3000-token document and serves six questions on it (KV 75 %
        // used, three waiting); replica 1 is idle and cold. The load, queue and KV scorers
        // together outweigh the prefix scorer, but the wait on replica 0 (~0.07 s) is far
        // below the 0.15 s cold prefill a move would add, twice.
        let m = TtftModel::default();
        let req = RequestView {
            prompt_tokens: 3040,
            blocks: 190,
            tokens_per_block: 16,
        };
        let warm = view(0, 6, engine(3.0, 3.0, 0.75), 188, &m);
        let cold = view(1, 0, engine(0.0, 0.0, 0.0), 0, &m);
        let d = sched(Policy::Prefix)
            .decide(&req, &[warm.clone(), cold.clone()], 1)
            .unwrap();
        assert_eq!((d.replica, d.reason), (0, "weighted_score"), "{d:?}");
        // A real backlog there does move it.
        let backed_up = view(0, 40, engine(8.0, 32.0, 1.0), 188, &m);
        let d = sched(Policy::Prefix)
            .decide(&req, &[backed_up, cold], 1)
            .unwrap();
        assert_eq!(d.replica, 1, "{d:?}");
    }

    #[test]
    fn round_robin_is_fair() {
        let m = TtftModel::default();
        let cands: Vec<_> = (0..5).map(|i| view(i, i * 10, None, i * 100, &m)).collect();
        let mut count = [0u32; 5];
        for seed in 0..500 {
            let d = sched(Policy::RoundRobin)
                .decide(&request(), &cands, seed)
                .unwrap();
            assert_eq!(d.index as u32, d.replica);
            count[d.index] += 1;
        }
        assert_eq!(count, [100; 5]);
    }

    #[test]
    fn least_load_picks_the_emptiest() {
        let m = TtftModel::default();
        let cands = [
            view(0, 5, engine(9.0, 2.0, 0.5), 512, &m),
            view(1, 5, engine(3.0, 0.0, 0.5), 0, &m),
            view(2, 8, None, 0, &m),
        ];
        let d = sched(Policy::LeastLoad)
            .decide(&request(), &cands, 0)
            .unwrap();
        assert_eq!((d.replica, d.reason), (1, "least_load"));
        // Equal requests: fewer in-flight tokens wins.
        let mut a = view(0, 4, None, 0, &m);
        let mut b = view(1, 4, None, 0, &m);
        a.inflight_tokens = 9000;
        b.inflight_tokens = 100;
        assert_eq!(
            sched(Policy::LeastLoad)
                .decide(&request(), &[a, b], 0)
                .unwrap()
                .replica,
            1
        );
    }

    #[test]
    fn ties_break_at_random() {
        let m = TtftModel::default();
        let cands: Vec<_> = (0..4)
            .map(|i| view(i, 1, engine(1.0, 0.0, 0.1), 0, &m))
            .collect();
        for p in [Policy::LeastLoad, Policy::Prefix, Policy::PredictedTtft] {
            let mut count = [0u32; 4];
            for seed in 0..4000 {
                count[sched(p).decide(&request(), &cands, seed).unwrap().index] += 1;
            }
            assert!(
                count.iter().all(|&c| (800..1200).contains(&c)),
                "{p:?}: {count:?}"
            );
            // Same seed, same decision.
            let a = sched(p).decide(&request(), &cands, 77);
            assert_eq!(a, sched(p).decide(&request(), &cands, 77));
        }
    }

    #[test]
    fn odd_inputs_still_decide() {
        let m = TtftModel::default();
        let req = RequestView {
            prompt_tokens: 0,
            blocks: 0,
            tokens_per_block: 0,
        };
        let cands = [view(0, 0, engine(f64::INFINITY, -1.0, 7.0), 3, &m)];
        let weird = Scheduler::new(SchedulerConfig {
            policy: Policy::Prefix,
            weights: Weights {
                prefix: f64::NAN,
                load: -1.0,
                queue: 0.0,
                kv_cache: f64::INFINITY,
            },
            hotspot: HotspotGuard {
                max_wait_s: f64::NAN,
                spill_factor: -1.0,
            },
        });
        let d = weird.decide(&req, &cands, 0).unwrap();
        assert_eq!(d.index, 0);
        // Absurd engine counts are unknown: the router's own count (here 9) is used instead.
        let huge = [
            view(0, 9, engine(f64::MAX, f64::MAX, 0.5), 0, &m),
            view(1, 3, engine(3.0, 0.0, 0.5), 0, &m),
        ];
        assert_eq!(huge[0].queued_ahead(), 9.0);
        for p in [Policy::LeastLoad, Policy::Prefix, Policy::PredictedTtft] {
            let d = sched(p).decide(&request(), &huge, 1).unwrap();
            assert_eq!(d.replica, 1, "{p:?}");
            assert!(d.predicted_ttft_s.is_finite());
        }
        assert!(d.predicted_ttft_s.is_finite());
        assert_eq!(req.uncached_tokens(5), 0);
        assert_eq!(request().uncached_tokens(10_000), 0);
        assert_eq!(request().uncached_tokens(2), 8192 - 32);
    }

    fn any_f64() -> impl proptest::strategy::Strategy<Value = f64> {
        use proptest::prelude::*;
        prop_oneof![
            4 => 0.0f64..100.0,
            1 => Just(f64::NAN),
            1 => Just(f64::INFINITY),
            1 => Just(-1.0),
            1 => Just(f64::MAX),
        ]
    }

    proptest::proptest! {
        #[test]
        fn any_input_gives_an_in_range_decision(
            views in proptest::collection::vec(
                (0u32..1000, any_f64(), any_f64(), any_f64(), proptest::option::of(proptest::arbitrary::any::<bool>()), 0u32..5000),
                1..40,
            ),
            prompt_tokens in 0u32..200_000,
            blocks in 0u32..5000,
            tokens_per_block in 0u32..64,
            seed in proptest::arbitrary::any::<u64>(),
            policy in proptest::sample::select(vec![Policy::RoundRobin, Policy::LeastLoad, Policy::Prefix, Policy::PredictedTtft]),
        ) {
            let m = TtftModel::default();
            let cands: Vec<ReplicaView<'_>> = views
                .iter()
                .enumerate()
                .map(|(i, &(inflight, running, waiting, kv, fresh, matched))| ReplicaView {
                    id: i as u32,
                    inflight_requests: inflight,
                    inflight_tokens: u64::from(inflight) * 100,
                    engine: fresh.map(|_| EngineLoad { running, waiting, kv_cache_usage: kv }),
                    matched_blocks: matched,
                    pending_prefill_tokens: u64::from(inflight) * 50,
                    ttft: &m,
                })
                .collect();
            let req = RequestView { prompt_tokens, blocks, tokens_per_block };
            let d = sched(policy).decide(&req, &cands, seed).unwrap();
            proptest::prop_assert!(d.index < cands.len());
            proptest::prop_assert_eq!(d.replica, cands[d.index].id);
            proptest::prop_assert!(d.predicted_ttft_s.is_finite() && d.predicted_ttft_s >= 0.0);
            proptest::prop_assert!(req.uncached_tokens(d.matched_blocks) <= prompt_tokens);
        }
    }

    #[test]
    fn validate_names_the_bad_value() {
        assert_eq!(SchedulerConfig::default().validate(), Ok(()));
        let mut c = SchedulerConfig::default();
        c.weights.queue = -1.0;
        assert_eq!(
            c.validate(),
            Err(ConfigError::Weight {
                name: "queue",
                value: -1.0
            })
        );
        let mut c = SchedulerConfig {
            policy: Policy::Prefix,
            ..SchedulerConfig::default()
        };
        c.weights = Weights {
            prefix: 0.0,
            load: 0.0,
            queue: 0.0,
            kv_cache: 0.0,
        };
        assert_eq!(c.validate(), Err(ConfigError::AllWeightsZero));
        let mut c = SchedulerConfig::default();
        c.hotspot.max_wait_s = f64::INFINITY;
        assert_eq!(c.validate(), Ok(()));
        c.hotspot.spill_factor = 0.5;
        assert_eq!(c.validate(), Err(ConfigError::SpillFactor(0.5)));
        c.hotspot.spill_factor = 2.0;
        c.hotspot.max_wait_s = -1.0;
        assert!(c.validate().unwrap_err().to_string().contains("max_wait_s"));
    }

    #[test]
    fn config_round_trips_through_serde_names() {
        let c: SchedulerConfig = serde_json::from_str(
            r#"{"policy":"round_robin","weights":{"prefix":1.0},"hotspot":{"max_wait_s":1.0}}"#,
        )
        .unwrap();
        assert_eq!(c.policy, Policy::RoundRobin);
        assert_eq!(c.weights.prefix, 1.0);
        assert_eq!(c.weights.queue, 2.0);
        assert_eq!(c.hotspot.spill_factor, 2.0);
        assert!(serde_json::from_str::<SchedulerConfig>(r#"{"bogus":1}"#).is_err());
    }
}
