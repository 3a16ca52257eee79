//! Predicted TTFT as the scheduler uses it: the per-replica [`TtftModel`] prediction made
//! optimistic for replicas that have not answered yet, plus the prefill a choice repeats
//! ([`Predictor::cost`]), and the argmin over it that the predicted-TTFT policy and the hot-spot
//! guard share.

use super::tiebreak::{Best, TieBreak};
use super::view::{ReplicaView, RequestView};
use crate::predict::TtftModel;

/// Predicted TTFT per candidate, optimistic about replicas it has not seen answer yet.
///
/// A replica with no observed TTFT only has the prior, which is usually pessimistic next to what
/// faster replicas have shown; left alone, argmin would never try it and a fast newcomer in a
/// mixed fleet would get no traffic. So an unobserved replica is predicted as the most
/// optimistic of its prior and the fastest learned model among the candidates (optimism in the
/// face of uncertainty): it gets tried, and its own observations take over from then on.
pub(super) struct Predictor<'a> {
    pub(super) request: &'a RequestView,
    fastest_learned: Option<&'a TtftModel>,
    /// The fewest uncached prompt tokens on any candidate (the warmest one's).
    min_uncached: u32,
}

impl<'a> Predictor<'a> {
    pub(super) fn new(request: &'a RequestView, candidates: &'a [ReplicaView<'a>]) -> Self {
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

    pub(super) fn of(&self, c: &ReplicaView<'_>) -> f64 {
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
    /// prefill it would repeat, counted once for itself and once for each request queued on
    /// the replica it goes to: each of those waits that much longer. Counting the others only
    /// once (as this did before) let a saturated fleet trade hits for this request's TTFT until
    /// it ran cold: on multi-turn chat at 32 in flight over 8 replicas, one seed in three fell
    /// to a 0.37 hit rate and 45 % of `prefix`'s throughput (bench/results-predicted).
    pub(super) fn cost(&self, c: &ReplicaView<'_>) -> f64 {
        let extra = self.request.uncached_tokens(c.matched_blocks) - self.min_uncached;
        let delayed = 1.0 + c.queued_ahead();
        self.of(c) + delayed * c.ttft.per_token_s() * f64::from(extra)
    }

    /// [`Predictor::cost`] from the replica's prior instead of what it learned: the weighted
    /// policy's stickiness rule. It must hold even where the learned model is misled (a
    /// server that streams a chunk before its prefill, as the simulator does for chat, teaches
    /// it that prefill is free, and a rule trusting that pins every conversation to the
    /// replica that taught it).
    pub(super) fn prior_cost(&self, c: &ReplicaView<'_>) -> f64 {
        self.prior_cost_at(c, c.ttft.prior().per_token_s)
    }

    /// [`Predictor::prior_cost`] at the higher of the prior's and the learned per-token prefill
    /// cost: what leaving a warm replica is judged by. The learned cost may be misled low
    /// (see above), the prior may be far below a slow accelerator's: at 300 µs per token, with
    /// the prior's 50 µs, moves looked six times cheaper than they were and cost hit rate and
    /// throughput on the binding workload (tuning seeds 1-2). Both sides of the comparison use
    /// it, so on a slow fleet the queue ahead (its pending prefill) weighs more as well.
    pub(super) fn leave_cost(&self, c: &ReplicaView<'_>) -> f64 {
        self.prior_cost_at(c, c.ttft.cautious_per_token_s())
    }

    /// The prior's TTFT and repeated prefill, with prefill priced at `per_token_s`.
    fn prior_cost_at(&self, c: &ReplicaView<'_>, per_token_s: f64) -> f64 {
        let p = c.ttft.prior();
        let tokens = c.prefill_tokens(self.request.uncached_tokens(c.matched_blocks));
        let ttft = p.base_s + per_token_s * f64::from(tokens) + p.per_queued_s * c.queued_ahead();
        ttft + self.repeated_prefill(c, per_token_s)
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
pub(super) fn min_cost(
    ttft: &Predictor<'_>,
    candidates: &[ReplicaView<'_>],
    exclude: Option<(usize, f64)>,
    rng: &mut TieBreak,
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
