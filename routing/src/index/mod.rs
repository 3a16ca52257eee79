//! The prefix index: which replica holds which prompt blocks.
//!
//! [`PrefixIndex`] is the seam between the two ways of knowing: [`ApproxIndex`] learns from the
//! router's own decisions (a replica that was sent a prompt is assumed to hold its blocks), and
//! [`PreciseIndex`] answers from what the engines report in their KV events, with
//! [`PendingIndex`] covering the time between a choice and the engine's report. All are bounded
//! in memory by configuration: peers shipped unbounded indexes, we don't.
//!
//! The approximate index is built from three parts: `holders` (per block, the replicas holding
//! it, with a bitset for the bisection), `lru` (per replica, its blocks in recency order: the
//! workspace's one LRU, `warmpath_lru`, which the precise index uses too) and
//! `block_key` (the keyed hasher of the block map); `approx` puts them together and documents
//! the layout, the key invariant and the memory accounting.

mod approx;
mod block_key;
mod holders;
mod lru;
mod pending;
mod precise;

pub use approx::{ApproxIndex, ENTRY_BYTES};
pub use holders::INLINE_REPLICAS;
pub use pending::{PendingId, PendingIndex, PendingLimits};
pub use precise::{
    block_key, engine_digest, is_cached_medium, prompt_keys, prompt_keys_by, Applied, ApplyError,
    PreciseIndex, PreciseLimits, PreciseStats, StoredBlocks, PRECISE_ENTRY_BYTES, REPLICA_BYTES,
    ROOT_KEY,
};

use crate::{BlockHash, ReplicaId};

/// Memory bound of an index, in bytes of index state per replica (estimated from the structures'
/// sizes, including per-entry overhead).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexLimits {
    pub max_bytes_per_replica: usize,
}

/// How much a replica's cache can take before it evicts, and how cold what it would evict is
/// ([`ApproxIndex::room`]): what the scheduler weighs when it places a new prefix, so that the
/// fleet's caches evict as one cache would (the least recently used block of all of them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheRoom {
    /// Blocks the replica can take before it evicts anything.
    pub free_blocks: u32,
    /// Routings (to any replica) since its least recently used block was last used:
    /// `u32::MAX` when it holds nothing.
    pub idle_routings: u32,
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
/// Two implementations: [`ApproxIndex`] keys blocks of the canonical prompt text and learns
/// from [`PrefixIndex::on_routed`]; [`PreciseIndex`] keys token blocks by the router's own
/// chained hash of their token ids (so the engine's hash seed and algorithm need not be known;
/// the engine's hashes are kept only to apply removals), is fed by engine KV events, and ignores
/// `on_routed`. The contract for any implementation: `longest_prefix` answers at most
/// `hashes.len()` for every candidate and 0 for unknown ones, memory stays within its
/// configured bound, and no method panics on any input.
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
