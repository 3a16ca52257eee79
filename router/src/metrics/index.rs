//! The prefix indexes' series: how much of the prompts they matched, their size against their
//! bounds (the approximate index, and the one fed by the engines' KV events), and what those
//! events did.

use super::KvEventLabels;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

/// The prefix indexes: matches, size against the bounds, and the engines' KV events that feed
/// one of them. The gauges are sampled when the metrics are read, not kept up on the request
/// path.
#[derive(Default)]
pub struct IndexMetrics {
    pub blocks_queried: Counter,
    pub blocks_matched: Counter,
    pub hit_ratio: Gauge<f64, AtomicU64>,
    pub bytes: Gauge,
    pub capacity_bytes: Gauge,
    pub entries: Gauge,
    pub evictions: Gauge,
    /// The KV-event index's size (entries, estimated bytes) and the pending blocks.
    pub kv_entries: Gauge,
    pub kv_bytes: Gauge,
    pub kv_pending_blocks: Gauge,
    /// KV-cache events from the engines, by what they did or what was wrong with them.
    pub kv_events: Family<KvEventLabels, Counter>,
}

impl IndexMetrics {
    /// Create the series and register them under `registry`'s prefix.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "prefix_blocks_queried",
            "Prompt blocks looked up in the prefix index",
            m.blocks_queried.clone(),
        );
        registry.register(
            "prefix_blocks_matched",
            "Prompt blocks found cached on the chosen replica",
            m.blocks_matched.clone(),
        );
        registry.register(
            "prefix_hit_ratio",
            "prefix_blocks_matched / prefix_blocks_queried since start",
            m.hit_ratio.clone(),
        );
        registry.register(
            "prefix_index_bytes",
            "Estimated memory held by the prefix index",
            m.bytes.clone(),
        );
        registry.register(
            "prefix_index_capacity_bytes",
            "Configured memory bound of the prefix index, all replicas",
            m.capacity_bytes.clone(),
        );
        registry.register(
            "prefix_index_entries",
            "(replica, block) entries in the prefix index",
            m.entries.clone(),
        );
        registry.register(
            "prefix_index_evictions",
            "Entries evicted from the prefix index to stay within its bound, since start",
            m.evictions.clone(),
        );
        registry.register(
            "kv_index_entries",
            "(replica, engine block) entries in the index fed by KV events",
            m.kv_entries.clone(),
        );
        registry.register(
            "kv_index_bytes",
            "Estimated memory held by the index fed by KV events",
            m.kv_bytes.clone(),
        );
        registry.register(
            "kv_pending_blocks",
            "Blocks of requests routed to event-followed replicas that their engines have not reported yet",
            m.kv_pending_blocks.clone(),
        );
        registry.register(
            "kv_events",
            "KV-cache events from the engines by what they did: stored, removed, cleared, and what went wrong (gap, restart, unknown_parent, malformed, undecodable)",
            m.kv_events.clone(),
        );
        m
    }
}
