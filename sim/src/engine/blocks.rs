//! A sequence's blocks in the cache: reserved anonymously while their tokens are computed,
//! made findable (and published as `BlockStored`) once full and computed, released when the
//! sequence finishes, is preempted or is abandoned. Evictions the reservations cause are
//! published as `BlockRemoved`.

use warmpath_kv_events::{BlockHash as WireHash, KvEvent, MEDIUM_GPU};

use super::{Engine, Seq};
use crate::kv_cache::BlockHash;

impl Engine {
    /// Gives back every block of `s`; if it runs again, it recomputes from its prompt.
    pub(super) fn free(&mut self, s: &mut Seq) {
        self.cache.release(&s.hashes[..s.held], s.anon);
        s.held = 0;
        s.anon = 0;
        s.computed = 0;
        s.allocated = false;
    }

    /// Publishes the blocks a reservation evicted.
    pub(super) fn removed(&mut self, evicted: Vec<BlockHash>) {
        if let Some(ev) = &mut self.events {
            // vLLM sends one BlockRemoved per evicted block.
            ev.extend(evicted.into_iter().map(|h| KvEvent::BlockRemoved {
                block_hashes: vec![WireHash::Int(h)],
                medium: Some(MEDIUM_GPU.into()),
            }));
        }
    }

    /// Makes the computed full blocks of `s` findable, publishing the ones new to the cache.
    pub(super) fn commit_computed(&mut self, s: &mut Seq) {
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
                    lora_name: None,
                    medium: Some(MEDIUM_GPU.into()),
                    extra_keys: Vec::new(),
                });
            }
        }
    }
}
