//! One engine step, in vLLM v1's order: running sequences take their share of the token budget
//! first, waiting requests are admitted with what is left, then every sequence that computed
//! its whole prompt samples a token and the finished ones leave.

use super::{Engine, Output, Seq, Sink, Step, Summary};
use crate::kv_cache::extend_hashes;

/// What a step has scheduled so far.
#[derive(Debug)]
struct Batch {
    /// Tokens the step may still compute.
    budget: usize,
    /// Tokens of prompts computed in this step (decodes are costed apart).
    prefill_tokens: usize,
    decodes: usize,
    progressed: bool,
    /// The earliest completion of a transfer a waiting request is blocked on.
    wake_at: Option<f64>,
}

impl Batch {
    fn wake_at(&mut self, t: f64) {
        self.wake_at = Some(self.wake_at.map_or(t, |w| w.min(t)));
    }
}

impl Engine {
    /// Runs one step starting at `start` (seconds on the caller's clock).
    pub fn step(&mut self, start: f64) -> Step {
        self.drop_abandoned();
        let mut batch = Batch {
            budget: self.cfg.max_num_batched_tokens,
            prefill_tokens: 0,
            decodes: 0,
            progressed: false,
            wake_at: None,
        };
        self.schedule_running(&mut batch);
        self.admit_waiting(start, &mut batch);
        if !batch.progressed {
            return Step {
                busy: false,
                end: start,
                deliveries: Vec::new(),
                wake_at: batch.wake_at,
            };
        }
        // Costed after admission: a decode step is slower with every sequence that runs in it.
        let end = start + self.duration(&batch);
        let deliveries = self.sample(end);
        Step {
            busy: true,
            end,
            deliveries,
            wake_at: batch.wake_at,
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

    /// Running sequences, in admission order: one token for each decode, the next chunk of
    /// each chunked prefill.
    fn schedule_running(&mut self, batch: &mut Batch) {
        let bs = self.cfg.block_size;
        let mut i = 0;
        while i < self.running.len() && batch.budget > 0 {
            let (need, n, decode) = {
                let s = &self.running[i];
                let n = (s.req.tokens.len() - s.computed).min(batch.budget);
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
            batch.budget -= n;
            if decode {
                batch.decodes += 1;
            } else {
                batch.prefill_tokens += n;
            }
            batch.progressed = true;
            i += 1;
        }
    }

    /// Waiting requests, in arrival order, while a sequence slot and budget are left.
    fn admit_waiting(&mut self, start: f64, batch: &mut Batch) {
        let bs = self.cfg.block_size;
        let mut i = 0;
        while i < self.waiting.len()
            && self.running.len() < self.cfg.max_num_seqs
            && batch.budget > 0
        {
            let s = &mut self.waiting[i];
            if let Some(t) = s.pull_done_at {
                if t > start {
                    batch.wake_at(t);
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
                        // Its blocks stay reserved while the transfer runs; the requests
                        // behind it do not wait for it.
                        batch.wake_at(t);
                        i += 1;
                        batch.progressed = true;
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
            let n = (s.req.tokens.len() - s.computed).min(batch.budget);
            s.computed += n;
            batch.budget -= n;
            batch.prefill_tokens += n;
            batch.progressed = true;
            self.running.push(s);
        }
    }

    /// How long the scheduled batch takes, by the timing model.
    fn duration(&self, batch: &Batch) -> f64 {
        let t = self.cfg.timing;
        let mut dur = batch.prefill_tokens as f64 * t.prefill_per_token;
        if batch.decodes > 0 {
            dur += t.decode_base + t.decode_per_seq * self.running.len() as f64;
        }
        if batch.decodes > 0 || batch.prefill_tokens > 0 {
            dur += t.step_overhead;
        }
        dur
    }

    /// Results of a step ending at `end`: blocks become findable; sequences that computed all
    /// their tokens sample one; finished ones leave.
    fn sample(&mut self, end: f64) -> Vec<(Sink, Output)> {
        let bs = self.cfg.block_size;
        let mut deliveries = Vec::new();
        let running = std::mem::take(&mut self.running);
        let mut keep = Vec::with_capacity(running.len());
        for mut s in running {
            self.commit_computed(&mut s);
            if s.computed < s.req.tokens.len() {
                keep.push(s);
                continue;
            }
            let id = crate::tokens::sample(&self.tokenizer, s.req.seed, s.generated);
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
                let summary = self.finish(&mut s, end);
                deliveries.push((s.req.out.clone(), Output::Done(summary)));
            } else {
                keep.push(s);
            }
        }
        self.running = keep;
        deliveries
    }

    /// Frees a finished sequence and says how it went.
    fn finish(&mut self, s: &mut Seq, end: f64) -> Summary {
        let bs = self.cfg.block_size;
        // Read before `free`: the decode side pulls exactly these slots.
        let prefill_blocks = s.req.prefill_only.then(|| {
            let full = s.prompt_len / bs;
            let hashes = s.hashes[..full.min(s.held)].to_vec();
            let slots = self.cache.slots_of(&hashes).unwrap_or_default();
            (slots, hashes)
        });
        self.free(s);
        self.stats.success_length += 1;
        self.stats.e2e.observe((end - s.arrival).max(0.0));
        Summary {
            prompt_tokens: s.prompt_len,
            completion_tokens: s.generated,
            cached_tokens: s.cached_tokens.unwrap_or(0).min(s.prompt_len),
            finish_reason: "length",
            ttft: s.ttft,
            prefill_blocks,
        }
    }
}
