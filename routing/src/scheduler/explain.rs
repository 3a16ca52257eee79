//! Why a decision went where it did: each candidate's inputs and scores as the scheduler saw
//! them, for operators (the router's `x-warmpath-explain` header, its admin API and status page,
//! `warmpath-router check`). Computed on demand beside [`Scheduler::decide`], never inside it,
//! so that a decision nobody asks about pays nothing for its explanation.

use super::predicted::Predictor;
use super::weighted::{Scorers, WeightedSum};
use super::{ReplicaView, RequestView, Scheduler};
use serde::Serialize;

/// One candidate as the scheduler weighed it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CandidateScores {
    /// Leading prompt blocks the candidate holds, of [`RequestView::blocks`].
    pub matched_blocks: u32,
    /// Requests ahead of a new one ([`ReplicaView::queued_ahead`]).
    pub queued_ahead: f64,
    /// Prompt tokens routed here still waiting for their first token (the prefill ahead).
    pub pending_prefill_tokens: u64,
    /// The weighted policy's four scorers, each in `0..=1`, unweighted (higher is better).
    pub prefix: f64,
    pub load: f64,
    pub queue: f64,
    pub kv_cache: f64,
    /// Their sum with the configured weights: what the weighted policy maximises.
    pub score: f64,
    /// Predicted time to first token, seconds.
    pub predicted_ttft_s: f64,
    /// Predicted TTFT plus the prefill this choice would repeat: what the predicted-TTFT policy
    /// and the hot-spot guard minimise.
    pub cost_s: f64,
    /// The prior's TTFT plus repeated prefill, at the slower of the prior's and the learned
    /// per-token cost: what the weighted policy's `left_backed_up` rule compares.
    pub leave_cost_s: f64,
}

impl Scheduler {
    /// Each candidate's scores for `request`, in `candidates`' order. Whatever the policy, all
    /// are given: the ones it ignores still show the operator what it did not weigh.
    pub fn explain(
        &self,
        request: &RequestView,
        candidates: &[ReplicaView<'_>],
    ) -> Vec<CandidateScores> {
        let sum = WeightedSum::new(&self.config().weights);
        let scorers = Scorers::new(candidates);
        let ttft = Predictor::new(request, candidates);
        candidates
            .iter()
            .map(|c| {
                let parts = scorers.of(request, c);
                let [prefix, load, queue, kv_cache] = parts;
                CandidateScores {
                    matched_blocks: c.matched_blocks,
                    queued_ahead: c.queued_ahead(),
                    pending_prefill_tokens: c.pending_prefill_tokens,
                    prefix,
                    load,
                    queue,
                    kv_cache,
                    score: sum.of(parts),
                    predicted_ttft_s: ttft.of(c),
                    cost_s: ttft.cost(c),
                    leave_cost_s: ttft.leave_cost(c),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::predict::{TtftModel, TtftPrior};
    use crate::scheduler::{EngineLoad, SchedulerConfig};

    /// The explanation scores what the decision weighed: the weighted policy's pick has the
    /// best score, and the parts sum to it with the weights.
    #[test]
    fn the_pick_has_the_best_score_and_parts_add_up() {
        let model = TtftModel::new(TtftPrior::default());
        let view = |id: u32, matched: u32, inflight: u32, kv: f64| ReplicaView {
            id,
            key: u64::from(id),
            inflight_requests: inflight,
            inflight_tokens: 0,
            engine: Some(EngineLoad {
                running: f64::from(inflight),
                waiting: 0.0,
                kv_cache_usage: kv,
            }),
            matched_blocks: matched,
            pending_prefill_tokens: 0,
            inflight_uncached_tokens: 0,
            room: None,
            ttft: &model,
        };
        let candidates = [view(0, 0, 2, 0.2), view(1, 8, 3, 0.6), view(2, 2, 1, 0.1)];
        let request = RequestView {
            prompt_tokens: 200,
            blocks: 10,
            tokens_per_block: 16,
        };
        let scheduler = Scheduler::new(SchedulerConfig::default());
        let decision = scheduler.decide(&request, &candidates, 7).unwrap();
        let scores = scheduler.explain(&request, &candidates);
        assert_eq!(scores.len(), 3);
        let best = (0..3)
            .max_by(|&a, &b| scores[a].score.total_cmp(&scores[b].score))
            .unwrap();
        assert_eq!(decision.index, best, "{scores:#?}");
        assert_eq!(scores[1].matched_blocks, 8);
        assert!((scores[1].prefix - 0.8).abs() < 1e-9);
        let w = &scheduler.config().weights;
        for s in &scores {
            let sum =
                w.prefix * s.prefix + w.load * s.load + w.queue * s.queue + w.kv_cache * s.kv_cache;
            assert!((sum - s.score).abs() < 1e-9, "{s:?}");
            assert!(s.cost_s >= s.predicted_ttft_s);
        }
        assert!(
            (scores[decision.index].predicted_ttft_s - decision.predicted_ttft_s).abs() < 1e-12
        );
    }
}
