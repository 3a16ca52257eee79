//! The router's Prometheus metrics (served on the admin listener).
//!
//! Label values come from the configuration (model, pool and replica names) or from fixed sets
//! (status codes, reasons), never from raw client input, so the number of series is bounded by
//! the configuration: an unknown model is counted as `model="(unknown)"`.

mod flow;
mod kubernetes;
mod labels;
mod pd;
mod route;
mod sidecar;

pub use flow::{
    DispatchLabels, FlowMetrics, ObjectiveLabels, RefusalLabels, TenantLabels, OTHER_TENANT,
};
pub use kubernetes::KubernetesMetrics;
pub use labels::*;
pub use pd::{PdDecisionLabels, PdFailureLabels, PdMetrics};
pub use route::RouteMetrics;
pub use sidecar::{SidecarFailureLabels, SidecarMetrics, SidecarOutcomeLabels};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

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
    pub decision_duration: Histogram,
    pub decisions: Family<ReasonLabels, Counter>,
    pub spills: Counter,
    pub upstream_errors: Family<UpstreamErrorLabels, Counter>,
    /// Tries sent to another replica, by why (`refused`, `unavailable`), and retries the budget
    /// refused (`budget_exhausted`).
    pub retries: Family<ReasonLabels, Counter>,
    /// Requests refused because the bodies held at once would pass their budget.
    pub body_budget_refusals: Counter,
    pub client_disconnects: Counter,
    pub prefix_blocks_queried: Counter,
    pub prefix_blocks_matched: Counter,
    pub prefix_hit_ratio: Gauge<f64, AtomicU64>,
    pub index_bytes: Gauge,
    pub index_capacity_bytes: Gauge,
    pub index_entries: Gauge,
    pub index_evictions: Gauge,
    pub inflight: Family<ReplicaLabels, Gauge>,
    pub inflight_limit: Family<ReplicaLabels, Gauge>,
    pub scrape_interval: Family<ReplicaLabels, Gauge<f64, AtomicU64>>,
    pub ready: Family<ReplicaLabels, Gauge>,
    pub prefill_per_token: Family<ReplicaLabels, Gauge<f64, AtomicU64>>,
    pub scrapes: Family<ResultLabels, Counter>,
    pub health_checks: Family<ResultLabels, Counter>,
    pub client_write_stalls: Counter,
    pub config_reloads: Family<ResultLabels, Counter>,
    pub kubernetes: KubernetesMetrics,
    pub pd: PdMetrics,
    pub flow: FlowMetrics,
    pub kv_events: Family<KvEventLabels, Counter>,
    /// Placement messages exchanged with the other routers, and the routers followed.
    pub peer_messages: Family<PeerLabels, Counter>,
    pub peers_followed: Gauge,
    /// The KV-event index's size (entries, estimated bytes) and the pending blocks.
    pub kv_index_entries: Gauge,
    pub kv_index_bytes: Gauge,
    pub kv_pending_blocks: Gauge,
    /// Sessions in the server-side map; what became of sessions' affinity.
    pub sessions: Gauge,
    pub session_affinity: Family<ResultLabels, Counter>,
    /// Requests of models routed from KV events by where their prompt was tokenized: `pooled`,
    /// or `busy` (too many waiting: routed without tokens).
    pub tokenize: Family<ResultLabels, Counter>,
    pub kv_mode: Family<ReplicaLabels, Gauge>,
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
        // 1 µs .. ~16 ms
        let decision_duration = Histogram::new(exponential_buckets(1e-6, 2.0, 15));
        registry.register(
            "decision_duration_seconds",
            "Time to pick a replica: candidates, prefix-index lookup, scoring (prompt hashing is done while parsing)",
            decision_duration.clone(),
        );
        let decisions = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "decisions",
            "Scheduling decisions by reason",
            decisions.clone(),
        );
        let spills = Counter::default();
        registry.register(
            "hotspot_spills",
            "Requests moved off their best-matching replica by the hot-spot guard",
            spills.clone(),
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
        let prefix_blocks_queried = Counter::default();
        registry.register(
            "prefix_blocks_queried",
            "Prompt blocks looked up in the prefix index",
            prefix_blocks_queried.clone(),
        );
        let prefix_blocks_matched = Counter::default();
        registry.register(
            "prefix_blocks_matched",
            "Prompt blocks found cached on the chosen replica",
            prefix_blocks_matched.clone(),
        );
        let prefix_hit_ratio = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "prefix_hit_ratio",
            "prefix_blocks_matched / prefix_blocks_queried since start",
            prefix_hit_ratio.clone(),
        );
        let index_bytes = Gauge::default();
        registry.register(
            "prefix_index_bytes",
            "Estimated memory held by the prefix index",
            index_bytes.clone(),
        );
        let index_capacity_bytes = Gauge::default();
        registry.register(
            "prefix_index_capacity_bytes",
            "Configured memory bound of the prefix index, all replicas",
            index_capacity_bytes.clone(),
        );
        let index_entries = Gauge::default();
        registry.register(
            "prefix_index_entries",
            "(replica, block) entries in the prefix index",
            index_entries.clone(),
        );
        let index_evictions = Gauge::default();
        registry.register(
            "prefix_index_evictions",
            "Entries evicted from the prefix index to stay within its bound, since start",
            index_evictions.clone(),
        );
        let inflight = Family::<ReplicaLabels, Gauge>::default();
        registry.register(
            "inflight_requests",
            "Requests this router has in flight per replica",
            inflight.clone(),
        );
        let inflight_limit = Family::<ReplicaLabels, Gauge>::default();
        registry.register(
            "replica_inflight_limit",
            "The in-flight bound learned from the replica's engine (flow.saturation.learn_inflight_requests; its batch when it queues); absent until learned",
            inflight_limit.clone(),
        );
        let scrape_interval = Family::<ReplicaLabels, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "replica_scrape_interval_seconds",
            "The pause between two scrapes of the replica's metrics (scrape.interval_ms, stretched where a scrape costs its engine more than scrape.engine_share of its time)",
            scrape_interval.clone(),
        );
        let ready = Family::<ReplicaLabels, Gauge>::default();
        registry.register(
            "replica_ready",
            "1 when the replica is a routing candidate: not ejected, not failing its scrapes, not stalled (owing first bytes long past their predicted TTFT)",
            ready.clone(),
        );
        let prefill_per_token = Family::<ReplicaLabels, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "replica_prefill_seconds_per_token",
            "Learned prefill cost per uncached token",
            prefill_per_token.clone(),
        );
        let scrapes = Family::<ResultLabels, Counter>::default();
        registry.register(
            "engine_scrapes",
            "Engine metric scrapes by result",
            scrapes.clone(),
        );
        let client_write_stalls = Counter::default();
        registry.register(
            "client_write_stalls",
            "Responses cut because their client took no data for timeouts.write_stall_ms (an HTTP/2 window left at 0, a full socket): their replicas are freed",
            client_write_stalls.clone(),
        );
        let health_checks = Family::<ResultLabels, Counter>::default();
        registry.register(
            "health_checks",
            "Active checks of the engines' health endpoint (health.active_path) by result",
            health_checks.clone(),
        );
        let config_reloads = Family::<ResultLabels, Counter>::default();
        registry.register(
            "config_reloads",
            "Configuration reloads by result",
            config_reloads.clone(),
        );
        let kubernetes = KubernetesMetrics::register(&mut registry);
        let pd = PdMetrics::register(&mut registry);
        let flow = FlowMetrics::register(&mut registry);
        let kv_events = Family::<KvEventLabels, Counter>::default();
        registry.register(
            "kv_events",
            "KV-cache events from the engines by what they did: stored, removed, cleared, and what went wrong (gap, restart, unknown_parent, malformed, undecodable)",
            kv_events.clone(),
        );
        let peer_messages = Family::<PeerLabels, Counter>::default();
        registry.register(
            "peer_messages",
            "Placement messages exchanged with the other routers (peers): sent, dropped (send queue full), placed and prefilled (received and applied), and skipped (own, unknown_replica, other_hashing, undecodable, and with peers.key_file unauthenticated: not sealed with the key, stale: sent more than 30 s from this router's clock)",
            peer_messages.clone(),
        );
        let peers_followed = Gauge::default();
        registry.register(
            "peers_followed",
            "Addresses of other routers this router follows for their placements (peers.routers, resolved)",
            peers_followed.clone(),
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
        let kv_mode = Family::<ReplicaLabels, Gauge>::default();
        registry.register(
            "kv_events_mode",
            "How far the router's view of the replica's KV cache is complete: 0 no events, 1 uncertain (missed some; the approximate index helps), 2 fresh",
            kv_mode.clone(),
        );
        let kv_index_entries = Gauge::default();
        registry.register(
            "kv_index_entries",
            "(replica, engine block) entries in the index fed by KV events",
            kv_index_entries.clone(),
        );
        let kv_index_bytes = Gauge::default();
        registry.register(
            "kv_index_bytes",
            "Estimated memory held by the index fed by KV events",
            kv_index_bytes.clone(),
        );
        let kv_pending_blocks = Gauge::default();
        registry.register(
            "kv_pending_blocks",
            "Blocks of requests routed to event-followed replicas that their engines have not reported yet",
            kv_pending_blocks.clone(),
        );
        let sessions = Gauge::default();
        registry.register(
            "sessions",
            "Sessions remembered server-side (by session id)",
            sessions.clone(),
        );
        let session_affinity = Family::<ResultLabels, Counter>::default();
        registry.register(
            "session_affinity",
            "Requests of a session by what became of its affinity: new (no home yet), kept, moved_unavailable, moved_prefix, moved_overload",
            session_affinity.clone(),
        );
        let tokenize = Family::<ResultLabels, Counter>::default();
        registry.register(
            "tokenize",
            "Requests of models routed from KV events by where their prompt was tokenized: pooled (a tokenizing thread), busy (too many waiting: routed without tokens)",
            tokenize.clone(),
        );
        Self {
            registry,
            requests,
            request_duration,
            time_to_first_byte,
            decision_duration,
            decisions,
            spills,
            upstream_errors,
            client_disconnects,
            prefix_blocks_queried,
            prefix_blocks_matched,
            prefix_hit_ratio,
            index_bytes,
            index_capacity_bytes,
            index_entries,
            index_evictions,
            inflight,
            inflight_limit,
            scrape_interval,
            ready,
            prefill_per_token,
            scrapes,
            health_checks,
            client_write_stalls,
            config_reloads,
            kubernetes,
            pd,
            flow,
            kv_events,
            peer_messages,
            peers_followed,
            kv_index_entries,
            kv_index_bytes,
            kv_pending_blocks,
            sessions,
            session_affinity,
            tokenize,
            kv_mode,
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
        self.inflight.remove(&l);
        self.inflight_limit.remove(&l);
        self.scrape_interval.remove(&l);
        self.ready.remove(&l);
        self.prefill_per_token.remove(&l);
        self.kv_mode.remove(&l);
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
