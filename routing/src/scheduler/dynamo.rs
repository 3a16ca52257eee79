//! Peer baseline `dynamo`: NVIDIA Dynamo's KV-router worker cost at its default temperature 0,
//! without warmpath's additions (no engine metrics, no TTFT model, no stickiness rule, no
//! hot-spot guard).
//!
//! The cost of sending the request to a replica, in KV blocks, lowest wins:
//!
//! ```text
//! cost = overlap_score_weight × (pending prefill tokens + uncached prompt tokens) / tokens per block
//!      + (active uncached tokens on the replica + uncached prompt tokens) / tokens per block
//! ```
//!
//! What was read, in `ai-dynamo/dynamo`:
//! - `lib/kv-router/src/scheduling/selector/default.rs`, `worker_logit`: `logit =
//!   prefill_load_scale × max(0, raw_prefill_blocks − overlap_credit_blocks) + decode_blocks +
//!   decode_active_request_weight × active_requests`, with `overlap_credit_blocks =
//!   overlap_score_credit × device overlap blocks` (plus host/disk tiers and a shared cache,
//!   which a vLLM fleet without offloading does not have). `minimum_cost_index`: at temperature
//!   0 the lowest logit wins, ties at random; above 0, softmax sampling.
//! - The selector's input rows: `raw_prefill_blocks = (active prefill tokens on the worker +
//!   uncached tokens + cached tokens) / block_size`, so that after the overlap credit the
//!   prefill term is `(active prefill tokens + uncached tokens) / block_size`;
//!   `decode_blocks = potential_decode_blocks() = active blocks + the request's blocks not
//!   already shared with an active sequence on that worker`. Active prefill tokens are each
//!   request's `isl − overlap × block_size` until its prefill completes; active blocks are the
//!   prompt blocks of every live request (shared blocks once), output blocks only with
//!   `router_track_output_blocks`.
//! - `lib/kv-router/src/scheduling/config.rs`, `KvRouterConfig::default`: `overlap_score_credit
//!   1.0`, `prefill_load_scale 1.0`, `router_temperature 0.0`, `router_track_prefill_tokens`
//!   and `router_track_active_blocks` true, `router_track_output_blocks` false; the deprecated
//!   `overlap_score_weight` (the `--kv-overlap-score-weight` flag) sets `prefill_load_scale`, and
//!   0 also zeroes the overlap credit. `decode_active_request_weight` and
//!   `overlap_score_credit_decay` default to 0.
//! - The earlier `lib/llm/src/kv_router/scheduler.rs`: `logit = overlap_score_weight ×
//!   potential_prefill_block + decode_block`, `potential_prefill_block = (worker prefill tokens
//!   + isl − overlap × block_size) / block_size`, the same cost in its original form. With the
//!   defaults both reduce to the formula above, whose one knob is `overlap_score_weight`.
//!
//! Where this differs, and why:
//! - Pending prefill is the view's `pending_prefill_tokens` (this router's uncached prompt
//!   tokens not yet past their first token), Dynamo's active prefill tokens by another name.
//! - Active blocks are the view's `inflight_uncached_tokens / tokens_per_block`: each live
//!   request counts the prompt tokens the replica did not hold when it was sent, so a prefix
//!   shared by live requests counts once (its first request paid for it) and output blocks not
//!   at all, as in Dynamo's defaults. Where a live request reused blocks that no live request
//!   held (cached, idle), Dynamo counts them as active again and this version does not.
//! - The request's own blocks not already on the replica (`potential_decode_blocks`'s second
//!   part) are its uncached tokens over the block size: the index's match stands for "shared
//!   with an active sequence", which it approximates.
//! - Blocks are warmpath's (the router's `index.block_bytes` on the canonical prompt) and the
//!   overlap is warmpath's prefix index, where Dynamo uses engine-token blocks and KV events.
//! - Ties within a relative 1e-9 (float noise), broken by the seeded tie-break.

use super::config::Dynamo;
use super::tiebreak::{Best, TieBreak};
use super::view::{ReplicaView, RequestView};
use super::weighted::weight;

/// The cost of choosing `c`, in blocks: (prefill blocks, decode blocks), before weighting.
pub(super) fn blocks(request: &RequestView, c: &ReplicaView<'_>) -> (f64, f64) {
    let tpb = f64::from(request.tokens_per_block.max(1));
    let uncached = f64::from(request.uncached_tokens(c.matched_blocks));
    let prefill = c.pending_prefill_tokens as f64 + uncached;
    let decode = c.inflight_uncached_tokens as f64 + uncached;
    (prefill / tpb, decode / tpb)
}

/// The lowest cost; ties at random.
pub(super) fn dynamo(
    config: &Dynamo,
    request: &RequestView,
    candidates: &[ReplicaView<'_>],
    rng: &mut TieBreak,
) -> usize {
    let w = weight(config.overlap_score_weight);
    let mut best = Best::new();
    for (i, c) in candidates.iter().enumerate() {
        let (prefill, active) = blocks(request, c);
        best.offer_min(i, w * prefill + active, rng);
    }
    best.get().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::predict::TtftModel;

    fn view(matched: u32, pending: u64, active: u64, m: &TtftModel) -> ReplicaView<'_> {
        ReplicaView {
            id: 0,
            key: 0,
            inflight_requests: 0,
            // Not what this policy reads (prompt and output, shared prefixes once per request).
            inflight_tokens: active * 10,
            engine: None,
            matched_blocks: matched,
            pending_prefill_tokens: pending,
            inflight_uncached_tokens: active,
            room: None,
            ttft: m,
        }
    }

    /// 1024 tokens in 64 blocks of 16.
    fn req() -> RequestView {
        RequestView {
            prompt_tokens: 1024,
            blocks: 64,
            tokens_per_block: 16,
        }
    }

    fn pick(w: f64, cands: &[ReplicaView<'_>], seed: u64) -> usize {
        dynamo(
            &Dynamo {
                overlap_score_weight: w,
            },
            &req(),
            cands,
            &mut TieBreak::new(seed),
        )
    }

    #[test]
    fn cost_is_prefill_plus_active_blocks() {
        let m = TtftModel::default();
        // 48 matched: 16 blocks to prefill, plus 320 pending tokens (20 blocks); 800 active
        // tokens are 50 blocks, plus the request's own 16 new ones.
        assert_eq!(blocks(&req(), &view(48, 320, 800, &m)), (36.0, 66.0));
        assert_eq!(blocks(&req(), &view(64, 0, 0, &m)), (0.0, 0.0));
        // More matched than the prompt has: nothing to prefill, never negative.
        assert_eq!(blocks(&req(), &view(500, 0, 0, &m)), (0.0, 0.0));
        let odd = RequestView {
            prompt_tokens: 10,
            blocks: 0,
            tokens_per_block: 0,
        };
        assert_eq!(blocks(&odd, &view(0, 5, 7, &m)), (15.0, 17.0));
    }

    #[test]
    fn the_warm_replica_wins_until_its_active_blocks_outweigh_the_prefill() {
        let m = TtftModel::default();
        // Warm: nothing to prefill or add + 60 active = 60. Cold and idle: 64 blocks to prefill
        // and 64 new ones to hold = 128.
        let warm = view(64, 0, 960, &m);
        let cold = view(0, 0, 0, &m);
        assert_eq!(pick(1.0, &[cold.clone(), warm.clone()], 1), 1);
        // Warm with 131 active blocks: 131 > 128, the cold one.
        let busy = view(64, 0, 2100, &m);
        assert_eq!(pick(1.0, &[cold.clone(), busy.clone()], 1), 0);
        // Weight 2 doubles the prefill side: 131 < 192, back to the warm one.
        assert_eq!(pick(2.0, &[cold.clone(), busy.clone()], 1), 1);
        // Weight 0: decode blocks only (131 against the cold one's 64).
        assert_eq!(pick(0.0, &[busy, cold], 1), 1);
        // Pending prefill counts: the warm replica still prefilling 2400 tokens (150 blocks).
        let prefilling = view(64, 2400, 0, &m);
        assert_eq!(pick(1.0, &[prefilling, view(0, 0, 0, &m)], 1), 1);
    }

    #[test]
    fn a_prefix_shared_by_live_requests_counts_once() {
        let m = TtftModel::default();
        // Eight live requests on the warm replica shared a 60-block prefix: the first added 64
        // blocks, the other seven 4 each (92 blocks), where counting each request's whole
        // prompt would say 512 and send the ninth to the cold replica.
        let warm = view(60, 0, (64 + 7 * 4) * 16, &m);
        let cold = view(0, 0, 0, &m);
        // Warm: 4 to prefill + 92 + 4 = 100 < cold's 128.
        assert_eq!(pick(1.0, &[cold, warm], 1), 1);
    }

    #[test]
    fn equal_costs_tie_at_random() {
        let m = TtftModel::default();
        let cands: Vec<_> = (0..4).map(|_| view(8, 16, 320, &m)).collect();
        let mut count = [0u32; 4];
        for seed in 0..4000 {
            count[pick(1.0, &cands, seed)] += 1;
        }
        assert!(count.iter().all(|&n| (800..1200).contains(&n)), "{count:?}");
        assert_eq!(pick(1.0, &cands, 77), pick(1.0, &cands, 77));
    }
}
