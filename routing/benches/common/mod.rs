//! Fleet and prompt builders shared by the criterion benches and the latency/memory examples, so
//! that every figure is measured on the same crafted state.
#![allow(dead_code)]

use warmpath_routing::index::{ApproxIndex, IndexLimits, PrefixIndex};
use warmpath_routing::predict::{TtftModel, TtftPrior};
use warmpath_routing::prompt::{estimate_tokens, BlockHasher, BlockHashes};
use warmpath_routing::scheduler::{Decision, EngineLoad, ReplicaView, RequestView, Scheduler};
use warmpath_routing::ReplicaId;

/// 64-byte blocks ≈ 16 tokens, the router's default; `WARMPATH_BLOCK_BYTES` overrides it (e.g.
/// 256, llm-d's 64-token blocks) to measure the cost of the block size.
pub fn block_bytes() -> usize {
    std::env::var("WARMPATH_BLOCK_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&b| b >= 4)
        .unwrap_or(64)
}

/// Deterministic word salad of `bytes` bytes (content does not matter to xxh3's speed, but
/// realistic text keeps the chat escaping scan honest).
pub fn text(seed: u64, bytes: usize) -> String {
    const WORDS: [&str; 16] = [
        "the ", "router ", "prefix ", "cache ", "token ", "replica ", "warm ", "path ", "latency ",
        "of ", "a ", "request ", "model ", "kv ", "block ", "queue ",
    ];
    let mut s = String::with_capacity(bytes + 16);
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    while s.len() < bytes {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.push_str(WORDS[(x % 16) as usize]);
    }
    s.truncate(bytes);
    s
}

/// How the fleet's index relates to the measured prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// A shared system prompt (first quarter of the prompt) held by every replica, the rest held
    /// to various depths by three replicas, plus unrelated history everywhere.
    Typical,
    /// Every replica holds the prompt to a different depth: 256 distinct match lengths, the
    /// bisection's worst case.
    Staircase,
}

pub struct Fleet {
    pub index: ApproxIndex,
    pub models: Vec<TtftModel>,
    pub ids: Vec<ReplicaId>,
    pub inflight: Vec<u32>,
    pub engine: Vec<Option<EngineLoad>>,
    pub matched: Vec<u32>,
    pub hasher: BlockHasher,
}

impl Fleet {
    pub fn new(replicas: u32, max_bytes_per_replica: usize) -> Self {
        let ids: Vec<ReplicaId> = (0..replicas).collect();
        let models = ids
            .iter()
            .map(|&i| {
                // Two accelerator generations side by side.
                let per_token_s = if i % 2 == 0 { 0.000_05 } else { 0.000_15 };
                TtftModel::new(TtftPrior {
                    per_token_s,
                    ..TtftPrior::default()
                })
            })
            .collect();
        let inflight = ids.iter().map(|&i| i % 7).collect();
        let engine = ids
            .iter()
            .map(|&i| {
                (i % 5 != 0).then_some(EngineLoad {
                    running: f64::from(i % 7),
                    waiting: f64::from(i % 3),
                    kv_cache_usage: f64::from(i % 10) / 10.0,
                })
            })
            .collect();
        Self {
            index: ApproxIndex::new(IndexLimits {
                max_bytes_per_replica,
            }),
            models,
            matched: vec![0; ids.len()],
            ids,
            inflight,
            engine,
            hasher: BlockHasher::new(block_bytes()),
        }
    }

    /// Fill the index for `scenario` around `prompt`.
    pub fn populate(&mut self, scenario: Scenario, prompt: &BlockHashes, history_prompts: u32) {
        let n = prompt.hashes.len();
        for &r in &self.ids.clone() {
            for p in 0..history_prompts {
                let h = self
                    .hasher
                    .hash_text(&text(u64::from(r) * 1000 + u64::from(p), 16 * 1024));
                self.index.on_routed(r, &h.hashes);
            }
            match scenario {
                Scenario::Typical => {
                    self.index.on_routed(r, &prompt.hashes[..n / 4]);
                }
                Scenario::Staircase => {
                    let depth = (n * (r as usize + 1) / self.ids.len()).max(1);
                    self.index.on_routed(r, &prompt.hashes[..depth]);
                }
            }
        }
        if scenario == Scenario::Typical {
            for (r, depth) in [(7, n), (100, n * 6 / 10), (200, n * 3 / 10)] {
                if (r as usize) < self.ids.len() {
                    self.index.on_routed(r, &prompt.hashes[..depth]);
                }
            }
        }
    }

    /// Load follows decisions: the pick gets one more request in flight and some replica
    /// finishes one, so that traffic spreads over the fleet as it would live.
    pub fn feedback(&mut self, picked: usize, step: u64) {
        self.inflight[picked] += 1;
        let done = (step as usize).wrapping_mul(7).wrapping_add(3) % self.inflight.len();
        self.inflight[done] = self.inflight[done].saturating_sub(1);
    }

    /// Forget the static engine metrics and in-flight counts (for closed-loop runs).
    pub fn idle(&mut self) {
        self.inflight.iter_mut().for_each(|x| *x = 0);
        self.engine.iter_mut().for_each(|e| *e = None);
    }

    /// Index lookup + scheduler decision, as the router does it per request.
    pub fn decide(&mut self, scheduler: &Scheduler, prompt: &BlockHashes, seed: u64) -> Decision {
        self.index
            .longest_prefix(&prompt.hashes, &self.ids, &mut self.matched);
        let request = RequestView {
            prompt_tokens: estimate_tokens(prompt.total_bytes),
            blocks: prompt.hashes.len() as u32,
            tokens_per_block: (self.hasher.block_bytes / 4) as u32,
        };
        let views: Vec<ReplicaView<'_>> = self
            .ids
            .iter()
            .enumerate()
            .map(|(i, &id)| ReplicaView {
                id,
                key: u64::from(id),
                inflight_requests: self.inflight[i],
                inflight_tokens: u64::from(self.inflight[i]) * 4096,
                engine: self.engine[i],
                matched_blocks: self.matched[i],
                pending_prefill_tokens: u64::from(self.inflight[i]) * 1024,
                inflight_uncached_tokens: u64::from(self.inflight[i]) * 1024,
                // Read per candidate as the router reads it, so that its cost is measured.
                room: Some(self.index.room(id)),
                ttft: &self.models[i],
            })
            .collect();
        scheduler
            .decide_with_hashes(&request, &prompt.hashes, &views, seed)
            .expect("candidates are not empty")
    }
}
