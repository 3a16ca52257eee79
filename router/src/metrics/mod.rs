//! The router's Prometheus metrics (served on the admin listener).
//!
//! Label values come from the configuration (model, pool and replica names) or from fixed sets
//! (status codes, reasons), never from raw client input, so the number of series is bounded by
//! the configuration: an unknown model is counted as `model="(unknown)"`.
//!
//! Each group registers its own families ([`ChoiceMetrics`], [`IndexMetrics`],
//! [`ReplicaMetrics`], [`PeerMetrics`], [`KubernetesMetrics`], [`PdMetrics`], [`FlowMetrics`],
//! [`SidecarMetrics`]); [`Metrics::new`] registers the request path's own (answers, their
//! durations, upstream errors, retries, refusals) and the sources' (KV events, reloads,
//! connections).

mod choice;
mod flow;
mod index;
mod kubernetes;
mod labels;
mod pd;
mod peers;
mod replica;
mod route;
mod sidecar;

pub use choice::ChoiceMetrics;
pub use flow::{
    DispatchLabels, FlowMetrics, ObjectiveLabels, RefusalLabels, TenantLabels, OTHER_TENANT,
};
pub use index::IndexMetrics;
pub use kubernetes::KubernetesMetrics;
pub use labels::*;
pub use pd::{PdDecisionLabels, PdFailureLabels, PdMetrics};
pub use peers::PeerMetrics;
pub use replica::ReplicaMetrics;
pub use route::RouteMetrics;
pub use sidecar::{SidecarFailureLabels, SidecarMetrics, SidecarOutcomeLabels};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    // 1 ms .. ~130 s
    Histogram::new(exponential_buckets(0.001, 2.0, 18))
}

pub struct Metrics {
    pub registry: Registry,
    pub requests: Family<RequestLabels, Counter>,
    pub request_duration: HistogramFamily<RouteLabels>,
    pub time_to_first_byte: HistogramFamily<RouteLabels>,
    pub upstream_errors: Family<UpstreamErrorLabels, Counter>,
    /// Tries sent to another replica, by why (`refused`, `unavailable`), and retries the budget
    /// refused (`budget_exhausted`).
    pub retries: Family<ReasonLabels, Counter>,
    /// Requests refused because the bodies held at once would pass their budget.
    pub body_budget_refusals: Counter,
    pub client_disconnects: Counter,
    pub client_write_stalls: Counter,
    pub config_reloads: Family<ResultLabels, Counter>,
    pub choice: ChoiceMetrics,
    pub index: IndexMetrics,
    pub replicas: ReplicaMetrics,
    pub peers: PeerMetrics,
    pub kubernetes: KubernetesMetrics,
    pub pd: PdMetrics,
    pub flow: FlowMetrics,
    pub kv_events: Family<KvEventLabels, Counter>,
    /// Client connections of the API listener: open, and refused at `limits.max_connections`.
    pub connections: crate::server::ConnectionCounters,
    /// Label sets with a replica among other labels, as created: a family cannot list its
    /// series, and a removed replica's must all go (or every rollout adds series for good).
    replica_series: parking_lot::Mutex<ReplicaSeries>,
}

#[derive(Default)]
struct ReplicaSeries {
    routes: std::collections::HashSet<RouteLabels>,
    /// Statuses other than 200 counted on any route.
    statuses: std::collections::BTreeSet<u16>,
    /// Kinds of upstream errors counted on any replica.
    error_kinds: std::collections::BTreeSet<&'static str>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("warmpath");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "requests",
            "Requests answered, by model, pool, replica (empty when none was chosen) and status",
            requests.clone(),
        );
        let request_duration: HistogramFamily<RouteLabels> =
            Family::new_with_constructor(latency_histogram);
        registry.register(
            "request_duration_seconds",
            "Time from request arrival to the end of the response body",
            request_duration.clone(),
        );
        let time_to_first_byte: HistogramFamily<RouteLabels> =
            Family::new_with_constructor(latency_histogram);
        registry.register(
            "time_to_first_byte_seconds",
            "Time from forwarding to the first response body chunk (TTFT for streams)",
            time_to_first_byte.clone(),
        );
        let upstream_errors = Family::<UpstreamErrorLabels, Counter>::default();
        registry.register(
            "upstream_errors",
            "Failures talking to replicas, by kind",
            upstream_errors.clone(),
        );
        let client_disconnects = Counter::default();
        registry.register(
            "client_disconnects",
            "Responses abandoned by the client before their end (upstream request cancelled)",
            client_disconnects.clone(),
        );
        let client_write_stalls = Counter::default();
        registry.register(
            "client_write_stalls",
            "Responses cut because their client took no data for timeouts.write_stall_ms (an HTTP/2 window left at 0, a full socket): their replicas are freed",
            client_write_stalls.clone(),
        );
        let config_reloads = Family::<ResultLabels, Counter>::default();
        registry.register(
            "config_reloads",
            "Configuration reloads by result",
            config_reloads.clone(),
        );
        let choice = ChoiceMetrics::register(&mut registry);
        let index = IndexMetrics::register(&mut registry);
        let replicas = ReplicaMetrics::register(&mut registry);
        let peers = PeerMetrics::register(&mut registry);
        let kubernetes = KubernetesMetrics::register(&mut registry);
        let pd = PdMetrics::register(&mut registry);
        let flow = FlowMetrics::register(&mut registry);
        let kv_events = Family::<KvEventLabels, Counter>::default();
        registry.register(
            "kv_events",
            "KV-cache events from the engines by what they did: stored, removed, cleared, and what went wrong (gap, restart, unknown_parent, malformed, undecodable)",
            kv_events.clone(),
        );
        let connections = crate::server::ConnectionCounters::default();
        registry.register(
            "connections_open",
            "Client connections open on the API listener",
            connections.open.clone(),
        );
        registry.register(
            "connections_refused",
            "Client connections answered 503 and closed because limits.max_connections were open",
            connections.refused.clone(),
        );
        registry.register(
            "tls_handshake_failures",
            "TLS handshakes on the API listener that failed or did not finish within timeouts.client_ms",
            connections.tls_failed.clone(),
        );
        let body_budget_refusals = Counter::default();
        registry.register(
            "body_budget_refusals",
            "Requests answered 503 overloaded because the request bodies held at once would pass limits.max_buffered_body_bytes",
            body_budget_refusals.clone(),
        );
        let retries = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "retries",
            "Requests tried again on another replica, by reason (refused, unavailable: a 502/503 answer, server_error: another 5xx that does not blame the request, stalled: taken back from a replica showing no progress), and retries the retry budget refused (budget_exhausted)",
            retries.clone(),
        );
        Self {
            registry,
            requests,
            request_duration,
            time_to_first_byte,
            upstream_errors,
            client_disconnects,
            client_write_stalls,
            config_reloads,
            choice,
            index,
            replicas,
            peers,
            kubernetes,
            pd,
            flow,
            kv_events,
            retries,
            body_budget_refusals,
            connections,
            replica_series: Default::default(),
        }
    }

    pub fn encode(&self) -> String {
        let mut out = String::with_capacity(8192);
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// Count a failure talking to `replica`.
    pub fn upstream_error(&self, replica: &str, kind: &'static str) {
        self.replica_series.lock().error_kinds.insert(kind);
        self.upstream_errors
            .get_or_create(&UpstreamErrorLabels {
                replica: replica.to_owned(),
                kind,
            })
            .inc();
    }

    /// Forget a replica's series when it leaves the configuration.
    pub fn remove_replica(&self, name: &str) {
        let l = ReplicaLabels {
            replica: name.to_owned(),
        };
        self.replicas.remove(&l);
        let mut series = self.replica_series.lock();
        for &kind in &series.error_kinds {
            self.upstream_errors.remove(&UpstreamErrorLabels {
                replica: name.to_owned(),
                kind,
            });
        }
        let ReplicaSeries {
            routes, statuses, ..
        } = &mut *series;
        routes.retain(|route| {
            if route.replica != name {
                return true;
            }
            self.request_duration.remove(route);
            self.time_to_first_byte.remove(route);
            for &status in std::iter::once(&200).chain(statuses.iter()) {
                self.requests.remove(&RequestLabels {
                    model: route.model.clone(),
                    pool: route.pool.clone(),
                    replica: route.replica.clone(),
                    status,
                });
            }
            false
        });
    }
}
