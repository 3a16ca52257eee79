//! Each candidate's match in the engine's own blocks, from the KV events its engine publishes
//! (the precise index), keyed as the engine keys the request's blocks.

use super::{BlockExtras, Indexes};
use crate::request::RequestFeatures;
use crate::state::replica::KvMode;
use crate::state::table::{Candidate, Table};
use warmpath_routing::index::prompt_keys_by;

/// A candidate's match in the engine's own blocks.
#[derive(Debug, Clone, Copy)]
pub(super) struct PreciseMatch {
    pub(super) mode: KvMode,
    /// The match in the approximate index's units (its share of the prompt's blocks), so
    /// that the scheduler compares replicas with and without events alike.
    pub(super) blocks: u32,
    /// Prompt tokens the engine holds.
    pub(super) tokens: u32,
}

/// Each of `ready`'s match for a request whose prompt is `tokens` as the engine tokenizes it
/// (up to its first multimodal item); `blocks` is the prompt's length in approximate-index
/// blocks.
pub(super) fn precise(
    indexes: &Indexes,
    table: &Table,
    ready: &[&Candidate],
    features: &RequestFeatures,
    tokens: &[u32],
    blocks: u32,
) -> Vec<PreciseMatch> {
    let statuses: Vec<_> = ready.iter().map(|c| *c.replica.kv.lock()).collect();
    // Keys per block size (one in practice: a pool's engines share it).
    let mut keys: Vec<(usize, Vec<u64>)> = Vec::new();
    let index = indexes.precise.lock();
    let model = features.model.as_str();
    // `pools[].lora_adapters` names the model, or the engines' events say it is an adapter.
    let adapter = (table.is_adapter(model)
        || index.is_adapter_on(model, ready.iter().map(|c| c.replica.id)))
    .then_some(model);
    let extras = BlockExtras::new(adapter, features.cache_salt.as_deref());
    // The prompt goes on after `tokens` when a multimodal item follows.
    let continues = features.media;
    let mut out = [0u32];
    ready
        .iter()
        .zip(&statuses)
        .map(|(c, status)| {
            let off = PreciseMatch {
                mode: KvMode::Off,
                blocks: 0,
                tokens: 0,
            };
            if status.mode == KvMode::Off {
                return off;
            }
            // No block stored yet since the router connected: it knows of none.
            let Some(bs) = status.block_size.filter(|&b| b > 0) else {
                return PreciseMatch {
                    mode: status.mode,
                    ..off
                };
            };
            let at = match keys.iter().position(|(b, _)| *b == bs) {
                Some(i) => i,
                None => {
                    keys.push((bs, prompt_keys_by(tokens, bs, |i| extras.block(i))));
                    keys.len() - 1
                }
            };
            index.longest_prefix(&keys[at].1, &[c.replica.id], &mut out);
            // An engine computes at least the prompt's last token (vLLM's rule): a fully cached
            // prompt reuses all but its last block.
            let usable = match continues {
                true => tokens.len() / bs,
                false => tokens.len().saturating_sub(1) / bs,
            };
            let cached = (out[0] as usize).min(usable) * bs;
            let share = cached as f64 / tokens.len().max(1) as f64;
            PreciseMatch {
                mode: status.mode,
                blocks: (share * f64::from(blocks)).floor() as u32,
                tokens: u32::try_from(cached).unwrap_or(u32::MAX),
            }
        })
        .collect()
}
