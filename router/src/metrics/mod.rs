//! The router's Prometheus metrics (served on the admin listener).
//!
//! Label values come from the configuration (model, pool and replica names) or from fixed sets
//! (status codes, reasons), never from raw client input, so the number of series is bounded by
//! the configuration: an unknown model is counted as `model="(unknown)"`.
//!
//! Each group registers its own families: the request path's ([`RequestMetrics`]: answers,
//! their durations, upstream errors, retries), the API listener's clients'
//! ([`ConnectionMetrics`]), the configuration's reloads ([`ConfigMetrics`]), and
//! [`ChoiceMetrics`], [`IndexMetrics`], [`ReplicaMetrics`], [`PeerMetrics`],
//! [`KubernetesMetrics`], [`PdMetrics`], [`FlowMetrics`]; [`Metrics::new`] only puts them under
//! one registry. The P/D sidecar serves its own ([`SidecarMetrics`]).

mod choice;
mod config;
mod connections;
mod flow;
mod index;
mod kubernetes;
mod labels;
mod pd;
mod peers;
mod replica;
mod requests;
mod route;
mod sidecar;

pub use choice::ChoiceMetrics;
pub use config::ConfigMetrics;
pub use connections::ConnectionMetrics;
pub use flow::{
    DispatchLabels, FlowMetrics, ObjectiveLabels, RefusalLabels, TenantLabels, OTHER_TENANT,
};
pub use index::IndexMetrics;
pub use kubernetes::KubernetesMetrics;
pub use labels::*;
pub use pd::{PdDecisionLabels, PdFailureLabels, PdMetrics};
pub use peers::PeerMetrics;
pub use replica::ReplicaMetrics;
pub use requests::RequestMetrics;
pub use route::RouteMetrics;
pub use sidecar::{SidecarFailureLabels, SidecarMetrics, SidecarOutcomeLabels};

use prometheus_client::registry::Registry;

pub struct Metrics {
    pub registry: Registry,
    pub requests: RequestMetrics,
    pub connections: ConnectionMetrics,
    pub config: ConfigMetrics,
    pub choice: ChoiceMetrics,
    pub index: IndexMetrics,
    pub replicas: ReplicaMetrics,
    pub peers: PeerMetrics,
    pub kubernetes: KubernetesMetrics,
    pub pd: PdMetrics,
    pub flow: FlowMetrics,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("warmpath");
        let requests = RequestMetrics::register(&mut registry);
        let connections = ConnectionMetrics::register(&mut registry);
        let config = ConfigMetrics::register(&mut registry);
        let choice = ChoiceMetrics::register(&mut registry);
        let index = IndexMetrics::register(&mut registry);
        let replicas = ReplicaMetrics::register(&mut registry);
        let peers = PeerMetrics::register(&mut registry);
        let kubernetes = KubernetesMetrics::register(&mut registry);
        let pd = PdMetrics::register(&mut registry);
        let flow = FlowMetrics::register(&mut registry);
        Self {
            registry,
            requests,
            connections,
            config,
            choice,
            index,
            replicas,
            peers,
            kubernetes,
            pd,
            flow,
        }
    }

    pub fn encode(&self) -> String {
        let mut out = String::with_capacity(8192);
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// Forget a replica's series when it leaves the configuration.
    pub fn remove_replica(&self, name: &str) {
        self.replicas.remove(&ReplicaLabels {
            replica: name.to_owned(),
        });
        self.requests.remove_replica(name);
    }
}
