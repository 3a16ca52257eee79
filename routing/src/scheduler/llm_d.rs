//! Peer baseline `llm_d`: the llm-d router's default scheduling profile, without warmpath's
//! additions (no load scorer, no score floors, no router-side queue correction, no stickiness
//! rule, no hot-spot guard).
//!
//! What was read, in `llm-d/llm-d-inference-scheduler` (Go module `github.com/llm-d/llm-d-router`),
//! commit `520af478` (2026-05-17):
//! - `pkg/epp/config/loader/defaults.go`, `loadDefaultConfig`: with no configuration the profile
//!   is `queue-scorer` weight 2, `kv-cache-utilization-scorer` weight 2, `prefix-cache-scorer`
//!   weight 3, and `ensureSchedulingLayer` adds the `max-score-picker`. The Helm chart
//!   (`config/charts/epplib/templates/_config.yaml`) ships the same three weights.
//! - `pkg/epp/scheduling/scheduler_profile.go`, `runScorerPlugins`: a replica's score is the sum
//!   of `weight × clamp(score, 0, 1)` over the scorers.
//! - `.../scorer/prefix/plugin.go`: `matched blocks / total blocks` (0 when the prompt has no
//!   block). `.../dataproducer/approximateprefix/hashing.go`, `types.go`, `plugin.go`: the
//!   prompt is cut into blocks of 16 tokens (× 4 characters); a trailing partial block is hashed
//!   too and counts in the total; a prompt shorter than one block has no blocks; at most 256
//!   blocks (4096 tokens) are hashed, so longer prompts are cut there.
//! - `.../scorer/queuedepth/queue.go`: min-max normalised waiting queue over the candidates,
//!   `(max − waiting) / (max − min)`, and 1 for every replica when all queues are equal.
//! - `.../scorer/kvcacheutilization/kvcache_utilization.go`: `1 − KV-cache usage`.
//! - `.../picker/maxscore/picker.go`: shuffle, then stable sort by score: the highest score
//!   wins, ties at random.
//!
//! Where this differs, and why:
//! - Blocks are warmpath's (the router's `index.block_bytes`, hashed on the canonical prompt),
//!   matched by warmpath's prefix index, where llm-d hashes the request's JSON messages in
//!   64-character blocks. The 4096-token cap is kept in tokens (`max_prefix_tokens`) and
//!   converted to warmpath blocks. The trailing partial block counts in the total as in llm-d,
//!   but the index holds only full blocks, so an exact repeat of a prompt scores
//!   `blocks / (blocks + 1)` where llm-d would score 1.
//! - Metrics: llm-d scores the last scraped `num_requests_waiting` and `kv_cache_usage_perc`
//!   whatever their age, zero before the first scrape. Warmpath keeps no value once metrics are
//!   stale (or garbage), so a replica without fresh metrics is scored as llm-d scores one that
//!   was never scraped: queue 0, KV usage 0. The router's own in-flight count, which warmpath's
//!   `prefix` policy falls back to, is not used.
//! - Ties: exact ties in llm-d, ties within a relative 1e-9 here (float noise between equal
//!   states); the pick among them is the seeded tie-break, uniform as llm-d's shuffle is.
//! - llm-d's flow control and saturation detector admit or queue requests before scheduling;
//!   they are admission, not replica choice, and are not part of this policy.

use super::config::LlmD;
use super::tiebreak::{Best, TieBreak};
use super::view::{ReplicaView, RequestView};
use super::weighted::weight;

/// The prompt's block count as llm-d's prefix scorer divides by it: full blocks, plus a
/// trailing partial block when there is at least one full block, at most `max_prefix_tokens`
/// worth of blocks (0: no cap).
pub(super) fn scored_blocks(config: &LlmD, request: &RequestView) -> u32 {
    let tpb = request.tokens_per_block;
    if request.blocks == 0 {
        return 0;
    }
    let full_tokens = u64::from(request.blocks) * u64::from(tpb);
    let partial = u32::from(u64::from(request.prompt_tokens) > full_tokens);
    let hashed = request.blocks.saturating_add(partial);
    if config.max_prefix_tokens == 0 || tpb == 0 {
        return hashed;
    }
    hashed.min((config.max_prefix_tokens / tpb).max(1))
}

/// Engine-reported waiting requests; 0 when the metrics are stale or garbage.
fn waiting(c: &ReplicaView<'_>) -> f64 {
    c.fresh_engine().map_or(0.0, |e| e.waiting)
}

fn clamp01(x: f64) -> f64 {
    if x.is_nan() {
        0.0
    } else {
        x.clamp(0.0, 1.0)
    }
}

/// The three scorers of one candidate, each in `0..=1`: (prefix, queue, kv_cache).
pub(super) fn scores<'a>(
    config: &LlmD,
    request: &RequestView,
    candidates: &'a [ReplicaView<'a>],
) -> impl Iterator<Item = (f64, f64, f64)> + 'a {
    let total = scored_blocks(config, request);
    let (mut min_q, mut max_q) = (f64::INFINITY, f64::NEG_INFINITY);
    for c in candidates {
        let q = waiting(c);
        min_q = min_q.min(q);
        max_q = max_q.max(q);
    }
    let request_total = f64::from(total);
    candidates.iter().map(move |c| {
        let prefix = if total == 0 {
            0.0
        } else {
            f64::from(c.matched_blocks.min(total)) / request_total
        };
        let queue = if max_q == min_q {
            1.0
        } else {
            (max_q - waiting(c)) / (max_q - min_q)
        };
        let kv = 1.0 - c.kv_usage().unwrap_or(0.0);
        (clamp01(prefix), clamp01(queue), clamp01(kv))
    })
}

/// The highest weighted score; ties at random.
pub(super) fn llm_d(
    config: &LlmD,
    request: &RequestView,
    candidates: &[ReplicaView<'_>],
    rng: &mut TieBreak,
) -> usize {
    let (wp, wq, wk) = (
        weight(config.prefix),
        weight(config.queue),
        weight(config.kv_cache),
    );
    let mut best = Best::new();
    for (i, (prefix, queue, kv)) in scores(config, request, candidates).enumerate() {
        best.offer_min(i, -(wp * prefix + wq * queue + wk * kv), rng);
    }
    best.get().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::predict::TtftModel;
    use crate::scheduler::EngineLoad;

    fn view(
        id: u32,
        matched: u32,
        engine: Option<(f64, f64, f64)>,
        m: &TtftModel,
    ) -> ReplicaView<'_> {
        ReplicaView {
            id,
            key: u64::from(id),
            inflight_requests: 0,
            inflight_tokens: 0,
            engine: engine.map(|(running, waiting, kv)| EngineLoad {
                running,
                waiting,
                kv_cache_usage: kv,
            }),
            matched_blocks: matched,
            pending_prefill_tokens: 0,
            inflight_uncached_tokens: 0,
            room: None,
            ttft: m,
        }
    }

    fn req(prompt_tokens: u32, blocks: u32) -> RequestView {
        RequestView {
            prompt_tokens,
            blocks,
            tokens_per_block: 16,
        }
    }

    #[test]
    fn the_prefix_total_counts_the_partial_block_and_stops_at_the_cap() {
        let c = LlmD::default();
        assert_eq!(scored_blocks(&c, &req(160, 10)), 10);
        assert_eq!(scored_blocks(&c, &req(170, 10)), 11, "partial block");
        assert_eq!(scored_blocks(&c, &req(10, 0)), 0, "shorter than one block");
        // 4096 tokens = 256 blocks of 16.
        assert_eq!(scored_blocks(&c, &req(32_768, 2048)), 256);
        let uncapped = LlmD {
            max_prefix_tokens: 0,
            ..c
        };
        assert_eq!(scored_blocks(&uncapped, &req(32_768, 2048)), 2048);
        let tiny = LlmD {
            max_prefix_tokens: 5,
            ..c
        };
        assert_eq!(scored_blocks(&tiny, &req(32_768, 2048)), 1);
        let odd = RequestView {
            prompt_tokens: 100,
            blocks: 3,
            tokens_per_block: 0,
        };
        assert_eq!(scored_blocks(&c, &odd), 4);
    }

    #[test]
    fn scorers_are_llm_ds() {
        let m = TtftModel::default();
        let c = LlmD::default();
        let cands = [
            view(0, 5, Some((4.0, 2.0, 0.25)), &m),
            view(1, 10, Some((4.0, 6.0, 0.5)), &m),
            view(2, 0, Some((4.0, 4.0, 1.5)), &m),
            view(3, 99, None, &m),
        ];
        let s: Vec<_> = scores(&c, &req(170, 10), &cands).collect();
        // prefix: matched / 11; queue: (6 − w) / (6 − 0), the stale replica's queue read as 0;
        // kv: 1 − usage, over-full usage clamped, stale read as 0.
        assert_eq!(s[0], (5.0 / 11.0, 4.0 / 6.0, 0.75));
        assert_eq!(s[1], (10.0 / 11.0, 0.0, 0.5));
        assert_eq!(s[2], (0.0, 2.0 / 6.0, 0.0));
        assert_eq!(s[3], (1.0, 1.0, 1.0));
        // All queues equal: every queue score is 1.
        let flat = [
            view(0, 0, Some((1.0, 3.0, 0.2)), &m),
            view(1, 0, Some((9.0, 3.0, 0.2)), &m),
        ];
        assert!(scores(&c, &req(160, 10), &flat).all(|(_, q, _)| q == 1.0));
    }

    #[test]
    fn weighted_sum_picks_the_highest() {
        let m = TtftModel::default();
        let c = LlmD::default();
        let r = req(160, 10);
        // Warm: 3 × 1 + 2 × 0 (the longest queue) + 2 × 0.1 = 3.2; cold and idle: 0 + 2 × 1 +
        // 2 × 1 = 4. The full prefix match loses (there is no stickiness rule).
        let warm = view(0, 10, Some((8.0, 4.0, 0.9)), &m);
        let cold = view(1, 0, Some((0.0, 0.0, 0.0)), &m);
        let mut rng = TieBreak::new(1);
        assert_eq!(llm_d(&c, &r, &[warm, cold], &mut rng), 1);
        // The shorter queue on the warm one: 3 + 2 × 1 + 2 × 0.5 = 6 against 0 + 0 + 2 × 0.55.
        let warm = view(0, 10, Some((8.0, 2.0, 0.5)), &m);
        let cold = view(1, 0, Some((0.0, 4.0, 0.45)), &m);
        assert_eq!(llm_d(&c, &r, &[warm, cold], &mut rng), 0);
        // Only the prefix scorer weighted: the warm one, however loaded.
        let prefix_only = LlmD {
            queue: 0.0,
            kv_cache: 0.0,
            ..c
        };
        let warm = view(0, 10, Some((8.0, 40.0, 1.0)), &m);
        let cold = view(1, 0, Some((0.0, 0.0, 0.0)), &m);
        assert_eq!(llm_d(&prefix_only, &r, &[cold, warm], &mut rng), 1);
    }

    #[test]
    fn equal_scores_tie_at_random() {
        let m = TtftModel::default();
        let c = LlmD::default();
        let cands: Vec<_> = (0..4)
            .map(|i| view(i, 3, Some((2.0, 1.0, 0.3)), &m))
            .collect();
        let mut count = [0u32; 4];
        for seed in 0..4000 {
            count[llm_d(&c, &req(160, 10), &cands, &mut TieBreak::new(seed))] += 1;
        }
        assert!(count.iter().all(|&n| (800..1200).contains(&n)), "{count:?}");
    }
}
