//! The prefix index: which replica holds which prompt blocks.
//!
//! [`PrefixIndex`] is the seam between the two ways of knowing: [`ApproxIndex`] learns from the
//! router's own decisions (a replica that was sent a prompt is assumed to hold its blocks), and a
//! later implementation fed by engine KV events will answer the same queries from what the engines
//! report. Both are bounded in memory by configuration: peers shipped unbounded indexes, we don't.

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

/// The approximate index: per replica, an LRU of block hashes bounded in bytes.
#[derive(Debug)]
pub struct ApproxIndex {
    limits: IndexLimits,
}

impl ApproxIndex {
    pub fn new(limits: IndexLimits) -> Self {
        Self { limits }
    }

    /// Change the bound (configuration reload); shrinking evicts at once.
    pub fn set_limits(&mut self, limits: IndexLimits) {
        self.limits = limits;
        todo!("routing core")
    }
}

impl PrefixIndex for ApproxIndex {
    fn longest_prefix(&self, _hashes: &[BlockHash], _candidates: &[ReplicaId], _out: &mut [u32]) {
        todo!("routing core")
    }
    fn on_routed(&mut self, _replica: ReplicaId, _hashes: &[BlockHash]) {
        todo!("routing core")
    }
    fn remove_replica(&mut self, _replica: ReplicaId) {
        todo!("routing core")
    }
    fn stats(&self) -> IndexStats {
        todo!("routing core")
    }
}
