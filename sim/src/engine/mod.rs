//! The engine: a vLLM-like continuous-batching scheduler over the simulated KV cache, with
//! a timing model.
//!
//! Pure apart from the channels it answers on: the caller owns the clock and calls
//! [`Engine::step`] with the time a step starts; the step says when it ends and what it
//! produced, and the caller delivers the outputs at that time ([`crate::replica`] sleeps until
//! then). Like vLLM v1:
//! - each step has a token budget (`max_num_batched_tokens`): running sequences first (one
//!   token per decoding sequence, the next chunk of a chunked prefill), then waiting requests in
//!   arrival order while fewer than `max_num_seqs` run and the budget lasts;
//! - admission looks up the longest cached prefix (at most all but the last token), allocates
//!   blocks for the rest of the prompt, and stops at the first request that does not fit;
//! - a decoding sequence that needs a block when none is free preempts the most recently
//!   admitted sequence, which recomputes later;
//! - full blocks become findable (and are published as `BlockStored`) once computed;
//! - a request pulling its prefix from a prefill replica (P/D) waits for the transfer
//!   without holding back the requests behind it.
//!
//! The step itself is in `step.rs`; how a sequence's blocks move through the cache, and the KV
//! events that movement publishes, in `blocks.rs`.
//!
//! Step time = uncached prefill tokens × per-token cost + (if any sequence decodes)
//! decode base + per-running-sequence cost × running sequences; TTFT is measured from arrival
//! to the end of the step that computes the last prompt token.

use std::collections::VecDeque;
use std::sync::Arc;

use tokio::sync::mpsc::UnboundedSender;
use warmpath_kv_events::KvEvent;

use crate::config::EngineConfig;
use crate::kv_cache::{extend_hashes, BlockHash, KvCache};
use crate::metrics::Histogram;
use crate::tokens::Tokenizer;

mod blocks;
mod step;
#[cfg(test)]
mod tests;

/// Where the engine sends a request's outputs.
pub type Sink = UnboundedSender<Output>;

/// A request as the engine sees it.
#[derive(Debug)]
pub struct Request {
    pub tokens: Vec<u32>,
    pub max_tokens: usize,
    /// Seeds the simulated completion text.
    pub seed: u64,
    /// P/D prefill side (`do_remote_decode`): compute the prompt, sample one token, finish,
    /// and report the prompt's blocks.
    pub prefill_only: bool,
    /// P/D decode side: leading full blocks of the prompt to pull from a prefill replica
    /// instead of computing them.
    pub remote_blocks: usize,
    pub out: Sink,
}

/// What a request gets back, in order: tokens, then `Done` (or `Error`).
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    Token { id: u32 },
    Done(Summary),
    Error(String),
}

/// How a finished request went.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    /// Prompt tokens not computed: local prefix-cache hits plus blocks pulled (P/D).
    pub cached_tokens: usize,
    pub finish_reason: &'static str,
    pub ttft: f64,
    /// P/D prefill side: slot ids and hashes of the prompt's full blocks.
    pub prefill_blocks: Option<(Vec<u32>, Vec<BlockHash>)>,
}

/// Counters behind `/metrics`.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    pub prefix_cache_queries: u64,
    pub prefix_cache_hits: u64,
    pub prompt_tokens: u64,
    pub generation_tokens: u64,
    pub success_length: u64,
    pub success_abort: u64,
    pub preemptions: u64,
    pub ttft: Histogram,
    pub e2e: Histogram,
}

#[derive(Debug)]
struct Seq {
    req: Request,
    prompt_len: usize,
    hashes: Vec<BlockHash>,
    /// Leading blocks of `hashes` held in the cache.
    held: usize,
    /// Blocks allocated but not findable yet.
    anon: usize,
    computed: usize,
    generated: usize,
    cached_tokens: Option<usize>,
    arrival: f64,
    ttft: f64,
    /// Blocks still to pull from the prefill replica, and when the pull completes.
    pull: usize,
    pull_done_at: Option<f64>,
    allocated: bool,
}

/// The outcome of one step.
#[derive(Debug, Default)]
pub struct Step {
    /// Whether the step did any work; when false, nothing changed and `end == start`.
    pub busy: bool,
    pub end: f64,
    /// Outputs to deliver at `end`.
    pub deliveries: Vec<(Sink, Output)>,
    /// The earliest time a waiting transfer completes, when idle because of it.
    pub wake_at: Option<f64>,
}

/// One replica's scheduler, cache and counters.
#[derive(Debug)]
pub struct Engine {
    cfg: EngineConfig,
    cache: KvCache,
    tokenizer: Arc<Tokenizer>,
    waiting: VecDeque<Seq>,
    running: Vec<Seq>,
    pub stats: Stats,
    events: Option<Vec<KvEvent>>,
}

impl Engine {
    pub fn new(cfg: EngineConfig, tokenizer: Arc<Tokenizer>, publish_events: bool) -> Self {
        Engine {
            cache: KvCache::new(cfg.kv_blocks, cfg.block_size),
            cfg,
            tokenizer,
            waiting: VecDeque::new(),
            running: Vec::new(),
            stats: Stats::default(),
            events: publish_events.then(Vec::new),
        }
    }

    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    pub fn cache(&self) -> &KvCache {
        &self.cache
    }

    pub fn num_running(&self) -> usize {
        self.running.len()
    }

    pub fn num_waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Events since the last call (empty unless publishing was enabled).
    pub fn take_events(&mut self) -> Vec<KvEvent> {
        self.events.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// Queues a request that arrived at `now`. `hashes` may hold the chained hashes of the
    /// prompt's full blocks if the caller computed them outside the engine's lock.
    pub fn submit(&mut self, req: Request, hashes: Option<Vec<BlockHash>>, now: f64) {
        let mut hashes = hashes.unwrap_or_default();
        extend_hashes(&mut hashes, &req.tokens, self.cfg.block_size);
        self.waiting.push_back(Seq {
            prompt_len: req.tokens.len(),
            req,
            hashes,
            held: 0,
            anon: 0,
            computed: 0,
            generated: 0,
            cached_tokens: None,
            arrival: now,
            ttft: 0.0,
            pull: 0,
            pull_done_at: None,
            allocated: false,
        });
    }

    /// Whether there is anything to do.
    pub fn has_work(&self) -> bool {
        !self.running.is_empty() || !self.waiting.is_empty()
    }

    /// Drops every free cached block (vLLM's `/reset_prefix_cache`); false while blocks are held.
    pub fn reset_prefix_cache(&mut self) -> bool {
        let ok = self.cache.reset();
        if ok {
            if let Some(ev) = &mut self.events {
                ev.push(KvEvent::AllBlocksCleared);
            }
        }
        ok
    }

    /// P/D: slot ids of the leading full blocks of `hashes` this replica holds now.
    pub fn slots_of(&self, hashes: &[BlockHash]) -> Option<Vec<u32>> {
        self.cache.slots_of(hashes)
    }

    /// P/D: whether the given slots still hold the given blocks.
    pub fn slots_hold(&self, slots: &[u32], hashes: &[BlockHash]) -> bool {
        self.cache.slots_hold(slots, hashes)
    }
}
