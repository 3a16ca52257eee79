//! The prefix index: which replica holds which prompt blocks.
//!
//! [`PrefixIndex`] is the seam between the two ways of knowing: [`ApproxIndex`] learns from the
//! router's own decisions (a replica that was sent a prompt is assumed to hold its blocks), and a
//! later implementation fed by engine KV events will answer the same queries from what the engines
//! report. Both are bounded in memory by configuration: peers shipped unbounded indexes, we don't.
//!
//! The approximate index is built from three parts: `holders` (per block, the replicas holding
//! it, with a bitset for the bisection), `lru` (per replica, its blocks in recency order) and
//! `block_key` (the keyed hasher of the block map); `approx` puts them together and documents
//! the layout, the key invariant and the memory accounting.

mod approx;
mod block_key;
mod holders;
mod lru;

pub use approx::{ApproxIndex, ENTRY_BYTES};
pub use holders::INLINE_REPLICAS;

use crate::{BlockHash, ReplicaId};

/// Memory bound of an index, in bytes of index state per replica (estimated from the structures'
/// sizes, including per-entry overhead).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexLimits {
    pub max_bytes_per_replica: usize,
}

/// What the index holds now, for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IndexStats {
    /// Estimated bytes in use, all replicas together.
    pub bytes: usize,
    /// The configured bound, all replicas together.
    pub capacity_bytes: usize,
    /// (replica, block) entries held.
    pub entries: usize,
    /// Entries dropped to stay within the bound since creation.
    pub evictions: u64,
}

/// What the scheduler needs to know about cached prefixes, whoever maintains it.
///
/// The second implementation this seam is for, an index fed by engine KV events
/// (`warmpath-kv-events` decodes vLLM's `BlockStored` / `BlockRemoved` / `AllBlocksCleared`),
/// answers the same question from the engines' own block hashes: the caller passes the
/// request's hashes in the engine's scheme (token blocks hashed the engine's way, which needs the
/// model's tokenizer, as llm-d's precise scorer does), the index treats `BlockStored` as
/// insertion, `BlockRemoved` as eviction and `AllBlocksCleared` as
/// [`PrefixIndex::remove_replica`], ignores
/// [`PrefixIndex::on_routed`], and keeps the same byte bound. The contract for any implementation:
/// `longest_prefix` answers at most `hashes.len()` for every candidate and 0 for unknown ones,
/// memory stays within `stats().capacity_bytes`, and no method panics on any input.
pub trait PrefixIndex: Send + Sync {
    /// For each candidate, the number of leading blocks of `hashes` it holds; `out[i]` answers
    /// `candidates[i]`. `out.len() == candidates.len()`.
    fn longest_prefix(&self, hashes: &[BlockHash], candidates: &[ReplicaId], out: &mut [u32]);

    /// The router sent a prompt with these blocks to `replica`. The approximate index records
    /// them (most recently used); an index fed by engine events ignores this.
    fn on_routed(&mut self, replica: ReplicaId, hashes: &[BlockHash]);

    /// Forget everything about `replica` (it left the pool, or its engine cleared its cache).
    fn remove_replica(&mut self, replica: ReplicaId);

    fn stats(&self) -> IndexStats;
}

#[cfg(test)]
mod tests;
