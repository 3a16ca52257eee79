//! The clients' side of the API listener: connections open, refused and failing their TLS
//! handshake, responses their clients abandoned or stopped reading, and requests refused for
//! the bodies held at once.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;

/// The API listener's clients and what they cost to hold.
#[derive(Default)]
pub struct ConnectionMetrics {
    /// Client connections of the API listener: open, refused at `limits.max_connections`, and
    /// failed TLS handshakes (counted by the server).
    pub listener: crate::server::ConnectionCounters,
    pub client_disconnects: Counter,
    pub client_write_stalls: Counter,
    /// Requests refused because the bodies held at once would pass their budget.
    pub body_budget_refusals: Counter,
}

impl ConnectionMetrics {
    /// Create the series and register them under `registry`'s prefix.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "connections_open",
            "Client connections open on the API listener",
            m.listener.open.clone(),
        );
        registry.register(
            "connections_refused",
            "Client connections answered 503 and closed because limits.max_connections were open",
            m.listener.refused.clone(),
        );
        registry.register(
            "tls_handshake_failures",
            "TLS handshakes on the API listener that failed or did not finish within timeouts.client_ms",
            m.listener.tls_failed.clone(),
        );
        registry.register(
            "client_disconnects",
            "Responses abandoned by the client before their end (upstream request cancelled)",
            m.client_disconnects.clone(),
        );
        registry.register(
            "client_write_stalls",
            "Responses cut because their client took no data for timeouts.write_stall_ms (an HTTP/2 window left at 0, a full socket): their replicas are freed",
            m.client_write_stalls.clone(),
        );
        registry.register(
            "body_budget_refusals",
            "Requests answered 503 overloaded because the request bodies held at once would pass limits.max_buffered_body_bytes",
            m.body_budget_refusals.clone(),
        );
        m
    }
}
