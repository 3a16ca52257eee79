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
//! Step time = uncached prefill tokens × per-token cost + (if any sequence decodes)
//! decode base + per-running-sequence cost × running sequences; TTFT is measured from arrival
//! to the end of the step that computes the last prompt token.

use std::collections::VecDeque;
use std::sync::Arc;

use tokio::sync::mpsc::UnboundedSender;
use warmpath_kv_events::{BlockHash as WireHash, KvEvent, MEDIUM_GPU};

use crate::config::EngineConfig;
use crate::kv_cache::{extend_hashes, BlockHash, KvCache};
use crate::metrics::Histogram;
use crate::tokens::Tokenizer;

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

    fn free(&mut self, s: &mut Seq) {
        self.cache.release(&s.hashes[..s.held], s.anon);
        s.held = 0;
        s.anon = 0;
        s.computed = 0;
        s.allocated = false;
    }

    fn removed(&mut self, evicted: Vec<BlockHash>) {
        if let Some(ev) = &mut self.events {
            // vLLM sends one BlockRemoved per evicted block.
            ev.extend(evicted.into_iter().map(|h| KvEvent::BlockRemoved {
                block_hashes: vec![WireHash::Int(h)],
                medium: Some(MEDIUM_GPU.into()),
            }));
        }
    }

    /// Makes the computed full blocks of `s` findable, publishing the ones new to the cache.
    fn commit_computed(&mut self, s: &mut Seq) {
        let bs = self.cfg.block_size;
        let full = (s.computed / bs).min(s.hashes.len());
        if full <= s.held {
            return;
        }
        let from = s.held;
        let stored = self.cache.commit(&s.hashes[from..full]);
        s.anon -= full - from;
        s.held = full;
        if let Some(ev) = &mut self.events {
            if stored.is_empty() {
                return;
            }
            // Publish runs of newly stored blocks, each chained to the block before it.
            let mut i = from;
            while i < full {
                if !stored.contains(&s.hashes[i]) {
                    i += 1;
                    continue;
                }
                let start = i;
                while i < full && stored.contains(&s.hashes[i]) {
                    i += 1;
                }
                ev.push(KvEvent::BlockStored {
                    block_hashes: s.hashes[start..i]
                        .iter()
                        .map(|h| WireHash::Int(*h))
                        .collect(),
                    parent_block_hash: start.checked_sub(1).map(|p| WireHash::Int(s.hashes[p])),
                    token_ids: s.req.tokens[start * bs..i * bs].to_vec(),
                    block_size: bs as u32,
                    lora_id: None,
                    medium: Some(MEDIUM_GPU.into()),
                });
            }
        }
    }

    /// Aborts requests whose client went away, as vLLM does on disconnect.
    fn drop_abandoned(&mut self) {
        let mut i = 0;
        while i < self.running.len() {
            if self.running[i].req.out.is_closed() {
                let mut s = self.running.remove(i);
                self.free(&mut s);
                self.stats.success_abort += 1;
            } else {
                i += 1;
            }
        }
        let mut i = 0;
        while i < self.waiting.len() {
            if self.waiting[i].req.out.is_closed() {
                let mut s = self.waiting.remove(i).expect("index");
                self.free(&mut s);
                self.stats.success_abort += 1;
            } else {
                i += 1;
            }
        }
    }

    /// Runs one step starting at `start` (seconds on the caller's clock).
    pub fn step(&mut self, start: f64) -> Step {
        self.drop_abandoned();
        let bs = self.cfg.block_size;
        let mut budget = self.cfg.max_num_batched_tokens;
        let mut prefill_tokens = 0usize;
        let mut decodes = 0usize;
        let mut progressed = false;

        // 1. Running sequences, in admission order.
        let mut i = 0;
        while i < self.running.len() && budget > 0 {
            let (need, n, decode) = {
                let s = &self.running[i];
                let n = (s.req.tokens.len() - s.computed).min(budget);
                let blocks = (s.computed + n).div_ceil(bs);
                let decode = s.generated > 0 && s.computed + 1 == s.req.tokens.len();
                (blocks.saturating_sub(s.held + s.anon), n, decode)
            };
            if need > 0 {
                match self.cache.reserve(need) {
                    Ok(evicted) => {
                        self.removed(evicted);
                        self.running[i].anon += need;
                    }
                    Err(_) => {
                        // Preempt the most recently admitted sequence; it recomputes later.
                        let mut victim = self.running.pop().expect("running");
                        self.free(&mut victim);
                        self.stats.preemptions += 1;
                        self.waiting.push_front(victim);
                        continue;
                    }
                }
            }
            let s = &mut self.running[i];
            s.computed += n;
            budget -= n;
            if decode {
                decodes += 1;
            } else {
                prefill_tokens += n;
            }
            progressed = true;
            i += 1;
        }

        // 2. Waiting requests.
        let mut wake_at: Option<f64> = None;
        let mut i = 0;
        while i < self.waiting.len() && self.running.len() < self.cfg.max_num_seqs && budget > 0 {
            let s = &mut self.waiting[i];
            if let Some(t) = s.pull_done_at {
                if t > start {
                    wake_at = Some(wake_at.map_or(t, |w: f64| w.min(t)));
                    i += 1;
                    continue;
                }
            }
            if !s.allocated {
                let len = s.req.tokens.len();
                let max_hit = (len - 1) / bs;
                let hit = self.cache.acquire_prefix(&s.hashes, max_hit);
                let need = len.div_ceil(bs) - hit;
                match self.cache.reserve(need) {
                    Ok(evicted) => {
                        let s = &mut self.waiting[i];
                        s.allocated = true;
                        s.held = hit;
                        s.anon = need;
                        s.computed = hit * bs;
                        self.stats.prefix_cache_queries += len as u64;
                        self.stats.prefix_cache_hits += (hit * bs) as u64;
                        if s.cached_tokens.is_none() {
                            let remote = s.req.remote_blocks.min(max_hit);
                            s.pull = remote.saturating_sub(hit);
                            s.cached_tokens = Some(hit.max(remote) * bs);
                            if s.pull > 0 {
                                let done =
                                    start + s.pull as f64 * self.cfg.timing.transfer_per_block;
                                s.pull_done_at = Some(done);
                            }
                        }
                        self.removed(evicted);
                    }
                    Err(_) => {
                        self.cache.release(&s.hashes[..hit], 0);
                        // First come, first served: nothing behind it jumps ahead.
                        break;
                    }
                }
                let s = &self.waiting[i];
                if let Some(t) = s.pull_done_at {
                    if t > start {
                        wake_at = Some(wake_at.map_or(t, |w: f64| w.min(t)));
                        i += 1;
                        progressed = true;
                        continue;
                    }
                }
            }
            let mut s = self.waiting.remove(i).expect("index");
            if s.pull > 0 {
                // The pulled blocks arrive: they count as computed, like a local hit.
                s.computed = s.computed.max((s.held + s.pull) * bs);
                s.pull = 0;
                s.pull_done_at = None;
                self.commit_computed(&mut s);
            }
            let n = (s.req.tokens.len() - s.computed).min(budget);
            s.computed += n;
            budget -= n;
            prefill_tokens += n;
            progressed = true;
            self.running.push(s);
        }

        if !progressed {
            return Step {
                busy: false,
                end: start,
                deliveries: Vec::new(),
                wake_at,
            };
        }

        let t = self.cfg.timing;
        let mut dur = prefill_tokens as f64 * t.prefill_per_token;
        if decodes > 0 {
            dur += t.decode_base + t.decode_per_seq * self.running.len() as f64;
        }
        let end = start + dur;

        // 3. Results: blocks become findable; sequences that computed all their tokens
        //    sample one; finished ones leave.
        let mut deliveries = Vec::new();
        let running = std::mem::take(&mut self.running);
        let mut keep = Vec::with_capacity(running.len());
        for mut s in running {
            self.commit_computed(&mut s);
            if s.computed < s.req.tokens.len() {
                keep.push(s);
                continue;
            }
            let id = self.tokenizer.sample(s.req.seed, s.generated);
            if s.generated == 0 {
                // A request that arrived within a late timer's slack still never goes back in time.
                s.ttft = (end - s.arrival).max(0.0);
                self.stats.ttft.observe(s.ttft);
                // vLLM counts every prompt token here, cached or not.
                self.stats.prompt_tokens += s.prompt_len as u64;
            }
            s.generated += 1;
            self.stats.generation_tokens += 1;
            s.req.tokens.push(id);
            extend_hashes(&mut s.hashes, &s.req.tokens, bs);
            deliveries.push((s.req.out.clone(), Output::Token { id }));
            let finished = s.req.prefill_only
                || s.generated >= s.req.max_tokens
                || s.req.tokens.len() >= self.cfg.max_model_len;
            if finished {
                let prefill_blocks = s.req.prefill_only.then(|| {
                    let full = s.prompt_len / bs;
                    let hashes = s.hashes[..full.min(s.held)].to_vec();
                    let slots = self.cache.slots_of(&hashes).unwrap_or_default();
                    (slots, hashes)
                });
                self.free(&mut s);
                self.stats.success_length += 1;
                self.stats.e2e.observe((end - s.arrival).max(0.0));
                deliveries.push((
                    s.req.out.clone(),
                    Output::Done(Summary {
                        prompt_tokens: s.prompt_len,
                        completion_tokens: s.generated,
                        cached_tokens: s.cached_tokens.unwrap_or(0).min(s.prompt_len),
                        finish_reason: "length",
                        ttft: s.ttft,
                        prefill_blocks,
                    }),
                ));
            } else {
                keep.push(s);
            }
        }
        self.running = keep;
        Step {
            busy: true,
            end,
            deliveries,
            wake_at,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Timing;
    use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

    fn cfg(blocks: usize, timing: Timing) -> EngineConfig {
        EngineConfig {
            kv_blocks: blocks,
            block_size: 4,
            max_model_len: 1024,
            max_num_seqs: 2,
            max_num_batched_tokens: 64,
            timing,
        }
    }

    fn timing() -> Timing {
        Timing {
            prefill_per_token: 1e-3,
            decode_base: 10e-3,
            decode_per_seq: 1e-3,
            transfer_per_block: 0.5e-3,
        }
    }

    fn engine(blocks: usize) -> Engine {
        Engine::new(cfg(blocks, timing()), Arc::new(Tokenizer::bytes()), true)
    }

    fn req(tokens: Vec<u32>, max_tokens: usize) -> (Request, UnboundedReceiver<Output>) {
        let (tx, rx) = unbounded_channel();
        (
            Request {
                tokens,
                max_tokens,
                seed: 1,
                prefill_only: false,
                remote_blocks: 0,
                out: tx,
            },
            rx,
        )
    }

    /// Steps until idle, delivering outputs; returns the clock at the end.
    fn run(e: &mut Engine, mut now: f64) -> f64 {
        for _ in 0..10_000 {
            let s = e.step(now);
            if !s.busy {
                match s.wake_at {
                    Some(t) => {
                        now = t;
                        continue;
                    }
                    None => return now,
                }
            }
            now = s.end;
            for (tx, o) in s.deliveries {
                let _ = tx.send(o);
            }
        }
        panic!("engine did not go idle");
    }

    fn summary(rx: &mut UnboundedReceiver<Output>) -> Summary {
        while let Ok(o) = rx.try_recv() {
            if let Output::Done(s) = o {
                return s;
            }
        }
        panic!("no summary");
    }

    #[test]
    fn a_cache_hit_is_faster_than_a_miss() {
        let mut e = engine(64);
        let prompt: Vec<u32> = (0..40).collect();
        let (r, mut rx) = req(prompt.clone(), 1);
        e.submit(r, None, 0.0);
        run(&mut e, 0.0);
        let miss = summary(&mut rx);
        assert_eq!(miss.cached_tokens, 0);
        let (r, mut rx) = req(prompt, 1);
        e.submit(r, None, 1.0);
        run(&mut e, 1.0);
        let hit = summary(&mut rx);
        // All but the last block (the last token is always computed).
        assert_eq!(hit.cached_tokens, 36);
        assert!((miss.ttft - 0.040).abs() < 1e-9, "{}", miss.ttft);
        assert!((hit.ttft - 0.004).abs() < 1e-9, "{}", hit.ttft);
        assert_eq!(e.stats.prefix_cache_queries, 80);
        assert_eq!(e.stats.prefix_cache_hits, 36);
    }

    #[test]
    fn load_adds_queueing_and_decode_slows_with_running_sequences() {
        // max_num_seqs = 2: the third request waits for a slot.
        let mut e = engine(256);
        let mut rxs = Vec::new();
        for k in 0..3u32 {
            let (r, rx) = req((k * 100..k * 100 + 8).collect(), 5);
            e.submit(r, None, 0.0);
            rxs.push(rx);
        }
        let first = e.step(0.0);
        assert_eq!((e.num_running(), e.num_waiting()), (2, 1));
        // Two 8-token prefills.
        assert!((first.end - 0.016).abs() < 1e-9);
        run(&mut e, first.end);
        let s: Vec<Summary> = rxs.iter_mut().map(summary).collect();
        assert!(s[2].ttft > s[0].ttft + 0.03, "{s:?}");
        // A decode step with two running costs more than with one.
        let mut e = engine(256);
        let (r, _rx1) = req((0..8).collect(), 3);
        e.submit(r, None, 0.0);
        let t = e.step(0.0).end;
        let one = e.step(t);
        assert!((one.end - t - 0.011).abs() < 1e-9);
        let (r, _rx2) = req((50..58).collect(), 3);
        e.submit(r, None, one.end);
        let both = e.step(one.end);
        // Prefill of 8 plus decode with 2 running.
        assert!((both.end - one.end - (0.008 + 0.012)).abs() < 1e-9);
    }

    #[test]
    fn chunked_prefill_respects_the_step_budget() {
        let mut e = engine(256);
        let (r, mut rx) = req((0..150).collect(), 1);
        e.submit(r, None, 0.0);
        let s1 = e.step(0.0);
        assert!(s1.deliveries.is_empty());
        assert!((s1.end - 0.064).abs() < 1e-9);
        run(&mut e, s1.end);
        assert!((summary(&mut rx).ttft - 0.150).abs() < 1e-9);
    }

    #[test]
    fn events_publish_stored_and_removed_blocks() {
        let mut e = engine(4);
        let (r, mut rx) = req((0..9).collect(), 1);
        e.submit(r, None, 0.0);
        run(&mut e, 0.0);
        summary(&mut rx);
        let ev = e.take_events();
        let KvEvent::BlockStored {
            block_hashes,
            parent_block_hash,
            token_ids,
            ..
        } = &ev[0]
        else {
            panic!("{ev:?}")
        };
        // 9 prompt tokens + 1 sampled: two full blocks.
        assert_eq!(block_hashes.len(), 2);
        assert_eq!(*parent_block_hash, None);
        assert_eq!(token_ids, &(0..8).collect::<Vec<_>>());
        // A different 16-token prompt needs all 4 blocks: both cached ones are evicted.
        let (r, mut rx) = req((100..116).collect(), 1);
        e.submit(r, None, 1.0);
        run(&mut e, 1.0);
        summary(&mut rx);
        let removed = e
            .take_events()
            .iter()
            .filter(|e| matches!(e, KvEvent::BlockRemoved { .. }))
            .count();
        assert_eq!(removed, 2);
    }

    #[test]
    fn a_request_that_does_not_fit_waits_for_blocks() {
        let mut e = engine(4);
        let (a, mut ra) = req((0..12).collect(), 3);
        let (b, mut rb) = req((50..62).collect(), 1);
        e.submit(a, None, 0.0);
        e.submit(b, None, 0.0);
        e.step(0.0);
        assert_eq!((e.num_running(), e.num_waiting()), (1, 1));
        run(&mut e, 0.0);
        assert_eq!(summary(&mut ra).completion_tokens, 3);
        assert_eq!(summary(&mut rb).completion_tokens, 1);
        assert_eq!(e.cache().used_blocks(), 0);
    }

    #[test]
    fn abandoned_requests_free_their_blocks() {
        let mut e = engine(16);
        let (r, rx) = req((0..8).collect(), 100);
        e.submit(r, None, 0.0);
        e.step(0.0);
        assert!(e.cache().used_blocks() > 0);
        drop(rx);
        e.step(1.0);
        assert_eq!(e.cache().used_blocks(), 0);
        assert_eq!(e.stats.success_abort, 1);
    }

    #[test]
    fn pulled_blocks_skip_prefill_but_cost_transfer_time() {
        let mut e = engine(64);
        let (mut r, mut rx) = req((0..40).collect(), 1);
        r.remote_blocks = 9;
        e.submit(r, None, 0.0);
        run(&mut e, 0.0);
        let s = summary(&mut rx);
        assert_eq!(s.cached_tokens, 36);
        // 9 blocks × 0.5 ms, then 4 tokens of prefill.
        assert!((s.ttft - (0.0045 + 0.004)).abs() < 1e-9, "{}", s.ttft);
    }

    #[test]
    fn prefill_only_reports_its_blocks() {
        let mut e = engine(64);
        let (mut r, mut rx) = req((0..10).collect(), 50);
        r.prefill_only = true;
        e.submit(r, None, 0.0);
        run(&mut e, 0.0);
        let s = summary(&mut rx);
        assert_eq!(s.completion_tokens, 1);
        let (slots, hashes) = s.prefill_blocks.unwrap();
        assert_eq!(hashes.len(), 2);
        assert!(e.slots_hold(&slots, &hashes));
    }

    #[test]
    fn decode_short_of_blocks_preempts_the_newest_and_both_finish() {
        // 6 blocks of 4 tokens; two 8-token prompts take 2 blocks each (plus one each for the
        // first sampled token's block later), and 12 tokens of decode each need 3 more.
        let mut e = engine(6);
        let (a, mut ra) = req((0..8).collect(), 12);
        let (b, mut rb) = req((100..108).collect(), 12);
        e.submit(a, None, 0.0);
        e.submit(b, None, 0.0);
        run(&mut e, 0.0);
        assert!(e.stats.preemptions > 0);
        assert_eq!(summary(&mut ra).completion_tokens, 12);
        assert_eq!(summary(&mut rb).completion_tokens, 12);
        assert_eq!(e.cache().used_blocks(), 0);
        assert_eq!(e.num_running() + e.num_waiting(), 0);
    }
}
