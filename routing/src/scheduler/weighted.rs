//! The weighted-sum policy: four scorers (prefix overlap, in-flight load, engine queue, KV-cache
//! use), each in `0..=1`, summed with the configured [`Weights`], and the stickiness rule
//! ([`stay_warm`]) that keeps the load scorers from moving a request off its warm replica for
//! less than the prefill the move repeats.

use super::config::{Placement, Weights};
use super::predicted::Predictor;
use super::tiebreak::{Best, TieBreak};
use super::view::{ReplicaView, RequestView};
use crate::BlockHash;

/// Below this many in-flight requests the load scorer does not treat a replica as loaded.
pub const LOAD_FLOOR: f64 = 16.0;
/// Below this many waiting requests the queue scorer does not treat a replica as queued
/// (llm-d's saturation threshold is a queue depth of 5).
pub const QUEUE_FLOOR: f64 = 5.0;

/// The weighted pick, unless it prefills more of the prompt than the warmest candidate and
/// costs more than that candidate ([`Predictor::prior_cost`]): the load scorers may move a
/// request off its warm replica only when the wait there outweighs the prefill the move
/// repeats.
///
/// Without this, normal load imbalance (a replica holding two busy prefixes has twice the
/// requests and KV use of one holding one) was enough for the load, queue and KV scorers to
/// outvote a full prefix match, so documents wandered between replicas and each move was a
/// cold prefill and an eviction (the long-document workload held 0.78 of its oracle hit rate).
pub(super) fn stay_warm(
    ttft: &Predictor<'_>,
    candidates: &[ReplicaView<'_>],
    pick: usize,
) -> usize {
    let Some(p) = candidates.get(pick) else {
        return pick;
    };
    let most = warmest(candidates);
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

/// How many times cheaper (its [`Predictor::leave_cost`]) another candidate must be before
/// [`leave_backed_up`] moves a request off the weighted pick, by default
/// (`placement.leave_factor`): twice, so that the two rules (this and [`stay_warm`], which
/// moves back only to a cheaper warm replica) never undo each other and noise in the load
/// signals does not move anything.
///
/// Not higher: at light load the rule moves a request whose warm replica is
/// busy with one long prefill, a shorter TTFT bought with a cache miss, and a higher factor buys
/// some of those hits back; under load it is what spreads conversations. Tuning seeds
/// (`bench/leave-factor.sh`, `bench/results-diagnosis/leave-factor`): on the Mooncake trace
/// where the cache fits, 2 held 0.90-0.94 of the infinite cache's hit rate, 4 held 0.95-0.97
/// and off 0.98-0.99, TTFT p90 alike (110-125 ms); on multi-turn chat 4 instead of 2 fell from
/// 0.74-0.75 to 0.58-0.62 (p90 71 → 324-445 ms, 93 → 71 req/s) and agents from 67-75 to 45-49
/// req/s; off fell further.
pub const LEAVE_FACTOR: f64 = 2.0;

/// The mirror of [`stay_warm`]: the weighted pick, unless waiting there costs more than
/// `factor` times (twice by default) what the cheapest candidate costs, the prefill that
/// candidate would repeat included ([`Predictor::leave_cost`] prices both: the queue and
/// pending prefill ahead, the part of the prompt the replica lacks, and the repeated prefill
/// when it delays anyone).
///
/// The prefix scorer is relative: a 256-token system prompt that every conversation shares is
/// 80 % of a conversation's first turn, worth three times as much as the load scorer can ever
/// take away. So when 32 conversations began at once, all went to the two or three replicas
/// that held the system prompt first, 10-14 queued on each while five replicas idled, and
/// stayed there by session affinity: those replicas' caches could not hold a dozen growing
/// conversations each, and multi-turn chat hit 0.48 of its prompts against 0.78 for LRU with
/// perfect placement (tuning seeds 1-2). A long prefix is worth a short wait and stays (its
/// prefill is what a move costs); a short one is not.
///
/// With `leave_over_share` set, only a pick over its share of the candidates' requests is left
/// ([`over_share`]).
pub(super) fn leave_backed_up(
    placement: &Placement,
    ttft: &Predictor<'_>,
    candidates: &[ReplicaView<'_>],
    pick: usize,
) -> usize {
    let factor = placement.leave_factor;
    // Off (`inf`), or not a number: no candidate is cheap enough, so skip pricing them.
    if !factor.is_finite() {
        return pick;
    }
    let Some(p) = candidates.get(pick) else {
        return pick;
    };
    if !over_share(placement.leave_over_share, candidates, p) {
        return pick;
    }
    let pick_cost = ttft.leave_cost(p);
    let mut cheapest = (pick, pick_cost);
    for (i, c) in candidates.iter().enumerate() {
        let cost = ttft.leave_cost(c);
        if cost < cheapest.1 {
            cheapest = (i, cost);
        }
    }
    if cheapest.1 * factor.max(1.0) < pick_cost {
        cheapest.0
    } else {
        pick
    }
}

/// Whether `p` holds more than `share` times the candidates' mean of requests queued or
/// running ([`ReplicaView::queued_ahead`]) and at least one more than that mean; always, when
/// `share` is 0 (or not a number).
fn over_share(share: f64, candidates: &[ReplicaView<'_>], p: &ReplicaView<'_>) -> bool {
    if share.is_nan() || share <= 0.0 || candidates.is_empty() {
        return true;
    }
    let mean = candidates
        .iter()
        .map(ReplicaView::queued_ahead)
        .sum::<f64>()
        / candidates.len() as f64;
    let own = p.queued_ahead();
    own > share * mean && own >= mean + 1.0
}

/// The longest prefix any candidate holds, in blocks.
fn warmest(candidates: &[ReplicaView<'_>]) -> u32 {
    candidates
        .iter()
        .map(|c| c.matched_blocks)
        .max()
        .unwrap_or(0)
}

/// A configured weight as the policies use it: invalid (NaN, negative, infinite) counts as 0.
pub(super) fn weight(w: f64) -> f64 {
    if w.is_finite() && w > 0.0 {
        w
    } else {
        0.0
    }
}

/// The weighted-sum score of each candidate (higher is better).
pub(super) fn weighted_scores(
    weights: &Weights,
    request: &RequestView,
    candidates: &[ReplicaView<'_>],
) -> Vec<f64> {
    let sum = WeightedSum::new(weights);
    let scorers = Scorers::new(candidates);
    candidates
        .iter()
        .map(|c| sum.of(scorers.of(request, c)))
        .collect()
}

/// The configured weights in the scorers' order, each as [`weight`] reads it: the one
/// definition of the weighted policy's score, which the explanation shows as the policy saw it.
pub(super) struct WeightedSum([f64; 4]);

impl WeightedSum {
    pub(super) fn new(weights: &Weights) -> Self {
        Self([
            weight(weights.prefix),
            weight(weights.load),
            weight(weights.queue),
            weight(weights.kv_cache),
        ])
    }

    /// The score of one candidate's `[prefix, load, queue, kv_cache]` parts.
    pub(super) fn of(&self, parts: [f64; 4]) -> f64 {
        let [w, s] = [self.0, parts];
        w[0] * s[0] + w[1] * s[1] + w[2] * s[2] + w[3] * s[3]
    }
}

/// The four scorers' normalisers, taken over all candidates: each candidate's scores are
/// relative to the others'.
pub(super) struct Scorers {
    max_inflight: f64,
    max_waiting: f64,
    /// What an unknown KV use counts as: the known candidates' mean.
    kv_unknown: f64,
}

impl Scorers {
    pub(super) fn new(candidates: &[ReplicaView<'_>]) -> Self {
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
        Self {
            max_inflight,
            max_waiting,
            kv_unknown,
        }
    }

    /// `[prefix, load, queue, kv_cache]`, each in `0..=1`, unweighted.
    pub(super) fn of(&self, request: &RequestView, c: &ReplicaView<'_>) -> [f64; 4] {
        let prefix = if request.blocks == 0 {
            0.0
        } else {
            (f64::from(c.matched_blocks) / f64::from(request.blocks)).min(1.0)
        };
        let load = 1.0 - f64::from(c.inflight_requests) / self.max_inflight;
        let queue = 1.0 - c.waiting() / self.max_waiting;
        let kv = 1.0 - c.kv_usage().unwrap_or(self.kv_unknown);
        [prefix, load, queue, kv]
    }
}

/// The best score, ties at random.
pub(super) fn best_score(scores: &[f64], rng: &mut TieBreak) -> usize {
    let mut best = Best::new();
    for (i, &score) in scores.iter().enumerate() {
        best.offer_min(i, -score, rng);
    }
    best.get().unwrap_or(0)
}

/// A replica whose next victim was last used at least this share as long ago as the fleet's
/// coldest is as good a home for a new prefix (tuning seeds 1-3 of the binding shared-prefix
/// workload and 1-2 of multi-turn, agent and the trace).
pub const COLD_ENOUGH: f64 = 0.75;

/// Where the new part of a prompt goes: when the pick is among the warmest candidates, one of
/// the candidates as warm and scoring within `slack` of the pick, chosen so that the fleet's
/// caches together behave as one cache:
/// - when some of them can take the new blocks without evicting anything, the one among those
///   that the prompt's first unmatched block names (highest random weight of that block's hash
///   and the replica's stable key);
/// - when every one of them must evict, the hash's choice among those whose least recently
///   used block was used nearly as long ago as the coldest one's (within [`COLD_ENOUGH`]):
///   the new blocks displace the coldest blocks of the whole fleet, as one cache of the
///   fleet's size with LRU eviction would, instead of whatever happens to be coldest on the
///   replica a hash names (which, when one replica holds hot groups and another stale ones,
///   evicts a hot group while a stale one stays);
/// - when no candidate's room is known, the hash's choice among all of them.
///
/// The hash choice is what lets routers that do not talk to each other agree on a new
/// prefix's home (their load views differ a little, their hashes not at all), so that N
/// routers place a prefix group as one would; and requests for a new prefix that arrive before
/// the engine has reported its blocks follow each other; distinct new prefixes spread evenly
/// over the fleet by their hashes while the caches have room. Once caches are full, the
/// coldest-victim rule reads the index, which routers with `peers` share. Load still rules
/// beyond the slack (and the hot-spot guard after this). Negative or NaN `slack`: the pick
/// stands.
pub(super) fn new_prefix_home(
    slack: f64,
    scores: &[f64],
    request: &RequestView,
    candidates: &[ReplicaView<'_>],
    hashes: &[BlockHash],
    pick: usize,
) -> usize {
    if slack.is_nan() || slack < 0.0 {
        return pick;
    }
    let (Some(p), Some(&pick_score)) = (candidates.get(pick), scores.get(pick)) else {
        return pick;
    };
    let most = warmest(candidates);
    if p.matched_blocks < most {
        return pick;
    }
    let Some(&block) = hashes.get(most as usize) else {
        return pick;
    };
    let new_blocks = request.blocks.saturating_sub(most);
    let floor = pick_score - slack;
    let eligible = || {
        candidates
            .iter()
            .zip(scores)
            .enumerate()
            .filter(move |(_, (c, &score))| c.matched_blocks == most && score >= floor)
            .map(|(i, (c, _))| (i, c))
    };
    let fits = |c: &ReplicaView<'_>| c.room.is_none_or(|r| r.free_blocks >= new_blocks);
    let must_evict = eligible().all(|(_, c)| !fits(c));
    // Every eligible candidate's room is known (an unknown one fits). When all must evict, the
    // ones whose next victim is nearly as cold as the coldest (within COLD_ENOUGH of its age)
    // are equally good homes, and the hash chooses among them: a burst of new prefixes would
    // otherwise all go to the one replica with the oldest block, each prefill behind the last.
    let cold_enough = if must_evict {
        let oldest = eligible()
            .map(|(_, c)| c.room.map_or(0, |r| r.idle_routings))
            .max()
            .unwrap_or(0);
        (f64::from(oldest) * COLD_ENOUGH) as u32
    } else {
        0
    };
    let usable = |c: &ReplicaView<'_>| {
        if must_evict {
            c.room.is_some_and(|r| r.idle_routings >= cold_enough)
        } else {
            fits(c)
        }
    };
    let mut home: Option<(usize, u64)> = None;
    for (i, c) in eligible() {
        if !usable(c) {
            continue;
        }
        let weight = rendezvous(block, c.key);
        if home.is_none_or(|(_, w)| weight > w) {
            home = Some((i, weight));
        }
    }
    home.map_or(pick, |(i, _)| i)
}

/// A block's weight on a replica for highest-random-weight hashing (the SplitMix64 finaliser
/// of both keys: every replica's weights for a block are independent and uniform).
fn rendezvous(block: BlockHash, replica: u64) -> u64 {
    let mut z = block ^ replica.rotate_left(29) ^ 0x9e37_79b9_7f4a_7c15;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
