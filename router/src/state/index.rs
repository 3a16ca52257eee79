//! The router's own prefix index: what it sent where (the approximate index), and which of
//! those requests' blocks an engine followed through KV events has not yet reported (the
//! pending blocks), under one lock so that a choice sees the ones made just before it.

use std::time::Instant;
use warmpath_routing::index::{
    ApproxIndex, CacheRoom, IndexLimits, IndexStats, PendingId, PendingIndex, PendingLimits,
    PrefixIndex,
};
use warmpath_routing::{BlockHash, ReplicaId};

#[derive(Debug)]
pub struct RouterIndex {
    approx: ApproxIndex,
    pending: PendingIndex,
}

impl RouterIndex {
    pub fn approximate(max_bytes_per_replica: usize) -> Self {
        Self::new(max_bytes_per_replica, PendingLimits::default())
    }

    pub fn new(max_bytes_per_replica: usize, pending: PendingLimits) -> Self {
        Self {
            approx: ApproxIndex::new(IndexLimits {
                max_bytes_per_replica,
            }),
            pending: PendingIndex::new(pending),
        }
    }

    /// Apply a new memory bound (shrinking evicts at once).
    pub fn set_limits(&mut self, max_bytes_per_replica: usize) {
        self.approx.set_limits(IndexLimits {
            max_bytes_per_replica,
        })
    }

    /// What `replica`'s cache can take before it evicts, once its entries are bounded by its
    /// engine's KV capacity (`entries`, in index blocks, when known).
    pub fn room(&mut self, replica: ReplicaId, entries: Option<usize>) -> CacheRoom {
        self.approx.set_replica_capacity(replica, entries);
        self.approx.room(replica)
    }

    /// The blocks routed to replicas whose engines have not yet reported them.
    pub fn pending(&mut self) -> &mut PendingIndex {
        &mut self.pending
    }
}

/// A routed request's pending blocks: they count on its replica until its prefill is done
/// (this guard is dropped at the first byte, or when the request ends) and a grace after, in
/// this router and in its peers (told of the placement, then of the end).
pub struct PendingGuard {
    index: SharedIndex,
    id: PendingId,
    peers: Option<std::sync::Arc<dyn PrefillListener>>,
}

/// Told when a pending request's prefill is done (the router's peers, `crate::peers`).
pub trait PrefillListener: Send + Sync {
    fn prefilled(&self, id: PendingId);
}

impl PendingGuard {
    pub fn new(
        index: SharedIndex,
        id: PendingId,
        peers: Option<std::sync::Arc<dyn PrefillListener>>,
    ) -> Self {
        Self { index, id, peers }
    }

    pub fn id(&self) -> PendingId {
        self.id
    }
}

impl Drop for PendingGuard {
    fn drop(&mut self) {
        self.index.lock().pending.prefilled(self.id, Instant::now());
        if let Some(peers) = &self.peers {
            peers.prefilled(self.id);
        }
    }
}

impl std::fmt::Debug for PendingGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingGuard")
            .field("id", &self.id)
            .finish()
    }
}

impl PrefixIndex for RouterIndex {
    fn longest_prefix(&self, hashes: &[BlockHash], candidates: &[ReplicaId], out: &mut [u32]) {
        self.approx.longest_prefix(hashes, candidates, out)
    }
    fn on_routed(&mut self, replica: ReplicaId, hashes: &[BlockHash]) {
        self.approx.on_routed(replica, hashes)
    }
    fn remove_replica(&mut self, replica: ReplicaId) {
        self.approx.remove_replica(replica);
        self.pending.remove_replica(replica);
    }
    fn stats(&self) -> IndexStats {
        self.approx.stats()
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
