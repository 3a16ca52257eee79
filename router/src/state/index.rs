//! The router's prefix index: the implementations of `warmpath_routing::index::PrefixIndex` it
//! can run, behind one type so that configuration reloads can re-bound them.
//!
//! Today that is the approximate index (learned from the router's own decisions). An index fed
//! by engine KV events is the second variant to come; it answers the same queries.

use warmpath_routing::index::{ApproxIndex, IndexLimits, IndexStats, PrefixIndex};
use warmpath_routing::{BlockHash, ReplicaId};

#[derive(Debug)]
pub enum RouterIndex {
    Approximate(ApproxIndex),
}

impl RouterIndex {
    pub fn approximate(max_bytes_per_replica: usize) -> Self {
        RouterIndex::Approximate(ApproxIndex::new(IndexLimits {
            max_bytes_per_replica,
        }))
    }

    /// Apply a new memory bound (shrinking evicts at once).
    pub fn set_limits(&mut self, max_bytes_per_replica: usize) {
        match self {
            RouterIndex::Approximate(i) => i.set_limits(IndexLimits {
                max_bytes_per_replica,
            }),
        }
    }

    /// Bound `replica`'s entries by its engine's KV capacity (in index blocks).
    pub fn set_replica_capacity(&mut self, replica: ReplicaId, entries: Option<usize>) {
        match self {
            RouterIndex::Approximate(i) => i.set_replica_capacity(replica, entries),
        }
    }

    fn inner(&self) -> &dyn PrefixIndex {
        match self {
            RouterIndex::Approximate(i) => i,
        }
    }

    fn inner_mut(&mut self) -> &mut dyn PrefixIndex {
        match self {
            RouterIndex::Approximate(i) => i,
        }
    }
}

impl PrefixIndex for RouterIndex {
    fn longest_prefix(&self, hashes: &[BlockHash], candidates: &[ReplicaId], out: &mut [u32]) {
        self.inner().longest_prefix(hashes, candidates, out)
    }
    fn on_routed(&mut self, replica: ReplicaId, hashes: &[BlockHash]) {
        self.inner_mut().on_routed(replica, hashes)
    }
    fn remove_replica(&mut self, replica: ReplicaId) {
        self.inner_mut().remove_replica(replica)
    }
    fn stats(&self) -> IndexStats {
        self.inner().stats()
    }
}

/// The index as the router shares it: the replica choice looks up and records under one lock
/// (so two requests with the same new prefix see each other), the publisher forgets removed
/// replicas, the passive health check forgets a replica that refused a connection, `/metrics`
/// reads its size.
pub type SharedIndex = std::sync::Arc<parking_lot::Mutex<RouterIndex>>;

/// The index of what the engines report in their KV events (pools with `kv_events`): written
/// by the replicas' event tasks (`sources::kv_events`), read by the replica choice.
pub type SharedPrecise = std::sync::Arc<parking_lot::Mutex<warmpath_routing::index::PreciseIndex>>;

/// A precise index bounded by the configuration.
pub fn precise(config: &crate::config::IndexConfig) -> SharedPrecise {
    std::sync::Arc::new(parking_lot::Mutex::new(
        warmpath_routing::index::PreciseIndex::new(warmpath_routing::index::PreciseLimits {
            max_blocks_per_replica: config.precise_max_blocks_per_replica,
            max_blocks_total: config.precise_max_blocks_total,
        }),
    ))
}
