//! The peers' series: placements exchanged with the other router replicas.

use super::PeerLabels;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Placement messages exchanged with the other routers, and the routers followed.
#[derive(Default)]
pub struct PeerMetrics {
    pub messages: Family<PeerLabels, Counter>,
    pub followed: Gauge,
}

impl PeerMetrics {
    /// Create the series and register them under `registry`'s prefix.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "peer_messages",
            "Placement messages exchanged with the other routers (peers): sent, dropped (send queue full), placed and prefilled (received and applied), and skipped (own, unknown_replica, other_hashing, undecodable, and with peers.key_file unauthenticated: not sealed with the key, stale: sent more than 30 s from this router's clock)",
            m.messages.clone(),
        );
        registry.register(
            "peers_followed",
            "Addresses of other routers this router follows for their placements (peers.routers, resolved)",
            m.followed.clone(),
        );
        m
    }
}
