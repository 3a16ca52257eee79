//! Oracles: what hit rate the workload allows, computed offline from the exact requests that
//! were sent, so that a measured hit rate can be read against a ceiling.
//!
//! How they are computed. The exact request sequence that was sent (the workload replayed with
//! the run's seed, as many requests as were sent) is tokenized as the simulator tokenizes (4 bytes
//! per token, see [`crate::text`]) and cut into chained blocks of `block_size` tokens, as vLLM
//! does (only full blocks are cached; a block's identity is its whole prefix). The requests are
//! then played in order against ONE cache:
//! - a request hits the longest run of its leading blocks present in the cache, counted in
//!   tokens and capped at `prompt_tokens − 1` (vLLM always recomputes the last prompt token);
//!   queries count every prompt token; hit rate = Σ hits / Σ queries, as vLLM's counters;
//! - after it, all its full blocks are in the cache, and blocks are evicted down to capacity.
//!
//! Three ceilings, from the loosest down, so that "× oracle" says which one a router falls
//! short of:
//! - `infinite`: a cache that never evicts, so every repeated block hits and only first uses
//!   (compulsory misses) miss. The workload's own ceiling, whatever the memory.
//! - `belady` (the oracle): one cache of the fleet's total blocks (`replicas × blocks`), as if a
//!   perfect router had placed every prefix where it would be found again and never duplicated
//!   one on two replicas, with optimal offline eviction (the block whose next use is furthest in
//!   the future first; never-used-again first; among equals the deepest block, so the cache stays
//!   prefix-closed). No router and no replica policy can beat it with this much memory.
//! - `lru_perfect_placement`: the same fleet-sized cache with least-recently-used eviction, the
//!   engines' own policy: what a router that always finds the warm copy gets when the engines
//!   evict as they do. A router above it is doing better than perfect placement with engine-like
//!   eviction could (possible: duplication on purpose, lucky timing); one far below it loses hits
//!   to placement. When the working set fits (the default workloads) all three coincide, which
//!   is why workloads sized past the fleet's cache (`--working-set`) are the ones that separate
//!   routers.
//!
//! `one_replica` is LRU with a single replica's capacity, which shows the workload does not fit
//! one replica.
//!
//! They are upper bounds in three more ways, said plainly: they ignore the blocks that requests
//! in flight and generated tokens occupy, they ignore chat-template tokens the server adds beyond
//! the approximation in [`tokens_of`], and the engine's own tokenizer may cut text differently
//! from 4-byte tokens (exact for the simulator's default approximation).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use crate::workload::{Prompt, WorkRequest};

/// Token ids the simulator's byte-level approximation sees: 4 bytes per token, the last one
/// zero-padded. Chat messages are rendered as the simulator's default template does (also the
/// tiny vLLM peer model's): `role: content\n` per message, then `assistant:`.
pub fn tokens_of(prompt: &Prompt) -> Vec<u32> {
    fn bytes4(bytes: &[u8]) -> Vec<u32> {
        bytes
            .chunks(4)
            .map(|c| {
                let mut b = [0u8; 4];
                b[..c.len()].copy_from_slice(c);
                u32::from_le_bytes(b)
            })
            .collect()
    }
    match prompt {
        Prompt::Text(t) => bytes4(t.as_bytes()),
        Prompt::Chat(messages) => {
            let mut s = String::new();
            for m in messages {
                s.push_str(&m.role);
                s.push_str(": ");
                s.push_str(&m.content);
                s.push('\n');
            }
            s.push_str("assistant:");
            bytes4(s.as_bytes())
        }
    }
}

/// Chained hashes of the full blocks of `tokens` (FNV-1a style mixing; collisions are
/// irrelevant at these sizes, and the chain makes equal hashes mean equal prefixes).
pub fn block_hashes(tokens: &[u32], block_size: usize) -> Vec<u64> {
    let mut out = Vec::with_capacity(tokens.len() / block_size.max(1));
    let mut prev: u64 = 0xcbf2_9ce4_8422_2325;
    for block in tokens.chunks_exact(block_size.max(1)) {
        let mut h = prev ^ 0x9e37_79b9_7f4a_7c15;
        for t in block {
            h ^= u64::from(*t);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
            h ^= h >> 29;
        }
        out.push(h);
        prev = h;
    }
    out
}

/// One request as the oracle sees it.
#[derive(Debug, Clone)]
pub struct OracleRequest {
    pub prompt_tokens: u64,
    pub blocks: Vec<u64>,
}

impl OracleRequest {
    pub fn new(tokens: &[u32], block_size: usize) -> Self {
        Self {
            prompt_tokens: tokens.len() as u64,
            blocks: block_hashes(tokens, block_size),
        }
    }

    pub fn from_work(req: &WorkRequest, block_size: usize) -> Self {
        Self::new(&tokens_of(&req.prompt), block_size)
    }

    /// Tokens credited for `matched` leading cached blocks.
    fn hit_tokens(&self, matched: usize, block_size: usize) -> u64 {
        (matched as u64 * block_size as u64).min(self.prompt_tokens.saturating_sub(1))
    }
}

/// Hits and queries in tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct HitCount {
    pub hits: u64,
    pub queries: u64,
    pub hit_rate: Option<f64>,
}

impl HitCount {
    fn new(hits: u64, queries: u64) -> Self {
        Self {
            hits,
            queries,
            hit_rate: (queries > 0).then(|| hits as f64 / queries as f64),
        }
    }
}

/// Everything the report says about the oracle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OracleResult {
    pub requests: usize,
    /// Block size in 4-byte tokens (the engine's block size scaled by its bytes per token).
    pub block_size: usize,
    pub fleet_blocks: usize,
    pub replica_blocks: usize,
    /// The oracle: optimal eviction in the fleet's total cache.
    pub belady: HitCount,
    /// LRU eviction in the fleet's total cache (perfect placement, engine-like eviction).
    #[serde(alias = "lru")]
    pub lru_perfect_placement: HitCount,
    /// No eviction: the workload's ceiling.
    pub infinite: HitCount,
    pub one_replica: HitCount,
    pub method: String,
}

/// The oracle's block size in 4-byte tokens for an engine whose blocks hold `engine_block`
/// tokens of about `bytes_per_token` bytes each: a real tokenizer cuts the workload's text finer
/// than 4 bytes, so a block covers fewer bytes (exact for the simulator: 4 bytes per token).
pub fn scaled_block_size(engine_block: usize, bytes_per_token: f64) -> usize {
    let bytes = engine_block as f64 * bytes_per_token;
    ((bytes / crate::text::BYTES_PER_TOKEN as f64).round() as usize).max(1)
}

/// Runs every variant.
pub fn evaluate(
    reqs: &[OracleRequest],
    block_size: usize,
    replica_blocks: usize,
    replicas: usize,
) -> OracleResult {
    let fleet_blocks = replica_blocks * replicas;
    OracleResult {
        requests: reqs.len(),
        block_size,
        fleet_blocks,
        replica_blocks,
        belady: belady(reqs, block_size, fleet_blocks),
        lru_perfect_placement: lru(reqs, block_size, fleet_blocks),
        infinite: lru(reqs, block_size, usize::MAX),
        one_replica: lru(reqs, block_size, replica_blocks),
        method: "requests replayed in sent order against one cache: infinite = never evicts; \
                 belady = the fleet's total blocks, optimal offline eviction (the oracle); \
                 lru_perfect_placement = the fleet's total blocks, LRU eviction; \
                 see bench/src/oracle.rs"
            .to_owned(),
    }
}

/// Optimal offline eviction (furthest next use first).
pub fn belady(reqs: &[OracleRequest], block_size: usize, capacity: usize) -> HitCount {
    // For every block, the indices of the requests that contain it, in order.
    let mut uses: HashMap<u64, Vec<u32>> = HashMap::new();
    for (i, r) in reqs.iter().enumerate() {
        for b in &r.blocks {
            let v = uses.entry(*b).or_default();
            if v.last() != Some(&(i as u32)) {
                v.push(i as u32);
            }
        }
    }
    let mut cursor: HashMap<u64, usize> = HashMap::new();
    // Cached blocks: hash → (next use, depth); eviction picks the greatest (next use, depth).
    let mut cached: HashMap<u64, (u32, u32)> = HashMap::new();
    let mut order: BTreeSet<(u32, u32, u64)> = BTreeSet::new();
    let (mut hits, mut queries) = (0u64, 0u64);
    for (i, r) in reqs.iter().enumerate() {
        let matched = r
            .blocks
            .iter()
            .take_while(|b| cached.contains_key(*b))
            .count();
        hits += r.hit_tokens(matched, block_size);
        queries += r.prompt_tokens;
        for (depth, b) in r.blocks.iter().enumerate() {
            let list = &uses[b];
            let c = cursor.entry(*b).or_insert(0);
            while *c < list.len() && list[*c] as usize <= i {
                *c += 1;
            }
            let next = list.get(*c).copied().unwrap_or(u32::MAX);
            if let Some(old) = cached.insert(*b, (next, depth as u32)) {
                order.remove(&(old.0, old.1, *b));
            }
            order.insert((next, depth as u32, *b));
        }
        while cached.len() > capacity {
            let Some((_, _, victim)) = order.pop_last() else {
                break;
            };
            cached.remove(&victim);
        }
    }
    HitCount::new(hits, queries)
}

/// Least-recently-used eviction; within one request the tail is older than the head, as vLLM
/// frees a request's blocks tail first.
pub fn lru(reqs: &[OracleRequest], block_size: usize, capacity: usize) -> HitCount {
    let mut tick_of: HashMap<u64, u64> = HashMap::new();
    let mut by_tick: BTreeMap<u64, u64> = BTreeMap::new();
    let mut tick = 0u64;
    let (mut hits, mut queries) = (0u64, 0u64);
    for r in reqs {
        let matched = r
            .blocks
            .iter()
            .take_while(|b| tick_of.contains_key(*b))
            .count();
        hits += r.hit_tokens(matched, block_size);
        queries += r.prompt_tokens;
        for b in r.blocks.iter().rev() {
            tick += 1;
            if let Some(old) = tick_of.insert(*b, tick) {
                by_tick.remove(&old);
            }
            by_tick.insert(tick, *b);
        }
        while tick_of.len() > capacity {
            let Some((_, victim)) = by_tick.pop_first() else {
                break;
            };
            tick_of.remove(&victim);
        }
    }
    HitCount::new(hits, queries)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request of `n` blocks of 4 tokens: shared block ids `prefix` then unique ones.
    fn req(prefix: &[u32], unique: u32, tag: u32) -> OracleRequest {
        let mut tokens = Vec::new();
        for p in prefix {
            tokens.extend([*p; 4]);
        }
        for u in 0..unique {
            tokens.extend([1_000_000 + tag * 1000 + u; 4]);
        }
        OracleRequest::new(&tokens, 4)
    }

    #[test]
    fn block_size_scales_with_bytes_per_token() {
        assert_eq!(scaled_block_size(16, 4.0), 16);
        assert_eq!(scaled_block_size(128, 2.0), 64);
        assert_eq!(scaled_block_size(128, 1.5), 48);
        assert_eq!(scaled_block_size(1, 0.1), 1);
    }

    #[test]
    fn block_hashes_are_chained() {
        let a = block_hashes(&[1, 2, 3, 4, 5, 6], 2);
        let b = block_hashes(&[9, 9, 3, 4, 5, 6, 7], 2);
        assert_eq!(a.len(), 3);
        assert_eq!(b.len(), 3);
        // Same block content after a different prefix: different hash.
        assert_ne!(a[1], b[1]);
        assert_eq!(a, block_hashes(&[1, 2, 3, 4, 5, 6, 7], 2));
    }

    #[test]
    fn repeats_hit_all_but_the_last_token() {
        let r = req(&[1, 2, 3], 0, 0);
        let reqs = vec![r.clone(), r];
        let h = belady(&reqs, 4, 100);
        assert_eq!(h.queries, 24);
        // The second request matches 3 blocks = 12 tokens, capped at 11.
        assert_eq!(h.hits, 11);
        assert_eq!(lru(&reqs, 4, 100), h);
    }

    #[test]
    fn belady_beats_lru_on_a_cyclic_pattern() {
        // Three 2-block prefixes cycled with room for 4 blocks: LRU always evicts the one needed
        // next and never hits; Belady keeps one prefix and hits it every cycle.
        let a = req(&[1, 2], 1, 0);
        let b = req(&[3, 4], 1, 1);
        let c = req(&[5, 6], 1, 2);
        let seq: Vec<_> = (0..6)
            .flat_map(|_| [a.clone(), b.clone(), c.clone()])
            .collect();
        let l = lru(&seq, 4, 6);
        let o = belady(&seq, 4, 6);
        assert_eq!(l.hits, 0, "{l:?}");
        assert!(o.hits > 0, "{o:?}");
        // With room for everything both are the compulsory-miss bound.
        assert_eq!(lru(&seq, 4, 100), belady(&seq, 4, 100));
        assert_eq!(lru(&seq, 4, 100).hits, 15 * 11);
    }

    /// A B C A B C, each a 2-block prefix plus a unique block (12 tokens), 4 blocks of room:
    /// all three ceilings differ, and by hand:
    /// - infinite: the second round hits both prefix blocks of all three (3 × 8 tokens);
    /// - Belady: after A B C it keeps A's and B's prefixes (used next) and drops C's, so A and B
    ///   hit in the second round (2 × 8);
    /// - LRU: C's blocks push out A's, A's push out B's, and so on: nothing ever hits.
    #[test]
    fn the_three_ceilings_differ_where_capacity_binds() {
        let a = || req(&[1, 2], 1, 0);
        let b = || req(&[3, 4], 1, 1);
        let c = || req(&[5, 6], 1, 2);
        let seq = vec![
            a(),
            b(),
            c(),
            req(&[1, 2], 1, 3),
            req(&[3, 4], 1, 4),
            req(&[5, 6], 1, 5),
        ];
        let o = evaluate(&seq, 4, 2, 2);
        assert_eq!(o.fleet_blocks, 4);
        assert_eq!((o.infinite.hits, o.infinite.queries), (24, 72));
        assert_eq!((o.belady.hits, o.belady.queries), (16, 72));
        assert_eq!(
            (
                o.lru_perfect_placement.hits,
                o.lru_perfect_placement.queries
            ),
            (0, 72)
        );
        // One replica (2 blocks) holds one prefix at a time: A's blocks evicted before A returns.
        assert_eq!(o.one_replica.hits, 0);
        assert!((o.infinite.hit_rate.unwrap() - 1.0 / 3.0).abs() < 1e-12);
    }

    /// Room for two of the three prefixes and their tails: LRU keeps the most recent two, so
    /// under a pattern that revisits recent prefixes it matches Belady, while the infinite cache
    /// still counts the revisit of the oldest.
    #[test]
    fn lru_matches_belady_on_recency_friendly_streams() {
        // A B B A C A: each revisit is of one of the two most recent prefixes.
        let seq = vec![
            req(&[1, 2], 1, 0),
            req(&[3, 4], 1, 1),
            req(&[3, 4], 1, 2),
            req(&[1, 2], 1, 3),
            req(&[5, 6], 1, 4),
            req(&[1, 2], 1, 5),
        ];
        let o = evaluate(&seq, 4, 3, 2);
        assert_eq!(o.belady, o.lru_perfect_placement);
        assert_eq!(o.belady.hits, 3 * 8);
        assert_eq!(o.infinite.hits, 3 * 8);
        // With room for one prefix and its tail (3 blocks) recency is not enough: Belady keeps
        // the blocks used soonest and beats LRU, and neither reaches the infinite cache.
        let tight = evaluate(&seq, 4, 3, 1);
        assert!(
            tight.belady.hits > tight.lru_perfect_placement.hits,
            "{tight:?}"
        );
        assert!(tight.infinite.hits > tight.belady.hits, "{tight:?}");
    }

    #[test]
    fn old_result_files_name_the_lru_ceiling_lru() {
        let json = serde_json::to_value(evaluate(&[req(&[1], 1, 0)], 4, 1, 1)).unwrap();
        assert!(json.get("lru_perfect_placement").is_some());
        let mut old = json.clone();
        let v = old["lru_perfect_placement"].take();
        old.as_object_mut().unwrap().remove("lru_perfect_placement");
        old["lru"] = v;
        let back: OracleResult = serde_json::from_value(old).unwrap();
        assert_eq!(serde_json::to_value(back).unwrap(), json);
    }

    #[test]
    fn belady_is_never_worse_than_lru_and_grows_with_capacity() {
        let mut rng = crate::rng::Rng64::new(4);
        let seq: Vec<_> = (0..300)
            .map(|i| {
                let g = rng.below(10) as u32;
                req(&[g * 10, g * 10 + 1, g * 10 + 2], 2, i)
            })
            .collect();
        let mut last = 0;
        for cap in [2, 5, 10, 20, 40, 2000] {
            let o = belady(&seq, 4, cap);
            assert!(o.hits >= lru(&seq, 4, cap).hits, "cap {cap}");
            assert!(o.hits >= last, "cap {cap}");
            last = o.hits;
        }
        // Everything fits: only the first use of each group misses its prefix.
        assert_eq!(last, (300 - 10) * 12);
    }

    #[test]
    fn text_and_chat_tokenization() {
        assert_eq!(tokens_of(&Prompt::Text(" the cat".into())).len(), 2);
        let t = tokens_of(&Prompt::Text(" ab".into()));
        assert_eq!(t, vec![u32::from_le_bytes([b' ', b'a', b'b', 0])]);
        let chat = |n: usize| {
            Prompt::Chat(
                (0..n)
                    .map(|i| crate::workload::Message::new("user", format!(" m{i:02}")))
                    .collect(),
            )
        };
        // A longer conversation starts with the shorter one's messages.
        let short = tokens_of(&chat(2));
        let long = tokens_of(&chat(3));
        let common = short.iter().zip(&long).take_while(|(a, b)| a == b).count();
        assert!(common >= short.len() - 4);
    }
}
