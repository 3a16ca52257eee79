//! The admin listener: `/metrics` (Prometheus/OpenMetrics text), `/healthz` (the process
//! answers), `/readyz` (at least one replica can take traffic), and for operators `/` (the
//! status page, [`page`]), `/api/status` (what the router sees, [`status`]) and
//! `/api/decisions` (recent routing decisions with each candidate's scores).

mod page;
mod status;

pub use status::Status;

use crate::api::readiness::readiness;
use crate::errors::{full_body, text, ApiError, RespBody};
use crate::metrics::{Metrics, ReplicaLabels};
use crate::state::discovery::DiscoveryStatus;
use crate::state::index::{SharedIndex, SharedPrecise};
use crate::state::publish::TableReader;
use crate::state::replica::Replicas;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use sha2::{Digest, Sha256};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;
use warmpath_routing::index::PrefixIndex;

/// What the admin listener reads; it writes nothing the request path depends on.
#[derive(Clone)]
pub struct AdminState {
    pub tables: TableReader,
    pub metrics: Arc<Metrics>,
    pub index: SharedIndex,
    pub precise: SharedPrecise,
    pub sessions: Arc<crate::sessions::Sessions>,
    pub replicas: Replicas,
    pub discovery: Arc<DiscoveryStatus>,
    /// The router is leaving: not ready, whatever the replicas.
    pub draining: Arc<std::sync::atomic::AtomicBool>,
    /// `/metrics` asks for this bearer token when set (its SHA-256: compared whole, never
    /// byte by byte as it arrives).
    pub token: Option<AdminToken>,
    pub decisions: Arc<crate::decisions::DecisionLog>,
    /// Tenants' queues (absent when flow control is replaced, as tests may).
    pub flow: Option<crate::flow::FlowControl>,
    pub started: Instant,
}

/// A bearer token: the admin listener's (`admin_token_file`), the endpoint picker's
/// (`endpoint_picker.token_file`). Kept as its SHA-256, compared as one.
#[derive(Clone, Copy)]
pub struct AdminToken([u8; 32]);

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminToken(..)")
    }
}

impl AdminToken {
    /// From a file holding the token (surrounding whitespace ignored).
    pub fn read(path: &std::path::Path) -> std::io::Result<Self> {
        let token = crate::config::read_secret(path, "token")?;
        Ok(Self(Sha256::digest(token).into()))
    }

    /// Whether `headers` carry `Authorization: Bearer <this token>`.
    fn allows(&self, headers: &http::HeaderMap) -> bool {
        self.matches(headers.get(header::AUTHORIZATION).map(|v| v.as_bytes()))
    }

    /// Whether an `Authorization` value is `Bearer <this token>`.
    pub(crate) fn matches(&self, authorization: Option<&[u8]>) -> bool {
        authorization
            .and_then(|v| v.strip_prefix(b"Bearer "))
            .is_some_and(|t| <[u8; 32]>::from(Sha256::digest(t.trim_ascii())) == self.0)
    }
}

/// The admin listener as a tower service.
pub fn service<B>(
    state: AdminState,
) -> impl tower::Service<
    Request<B>,
    Response = Response<RespBody>,
    Error = Infallible,
    Future = std::future::Ready<Result<Response<RespBody>, Infallible>>,
> + Clone {
    tower::service_fn(move |req| std::future::ready(Ok(handle(&state, req))))
}

pub fn handle<B>(state: &AdminState, req: Request<B>) -> Response<RespBody> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return ApiError::method_not_allowed(req.method(), req.uri().path()).into_response();
    }
    let path = req.uri().path();
    match path {
        "/metrics" | "/api/status" | "/api/decisions"
            if state
                .token
                .as_ref()
                .is_some_and(|t| !t.allows(req.headers())) =>
        {
            let mut resp = ApiError::unauthorized(format!(
                "The admin listener's {path} needs `Authorization: Bearer <admin token>`."
            ))
            .into_response();
            resp.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            resp
        }
        "/metrics" => {
            refresh_gauges(state);
            metrics_response(state.metrics.encode())
        }
        // The page holds no data of its own: it asks the two APIs, with the token if one is
        // set, so it may be served to anyone who reaches the port.
        "/" | "/status" => page::response(),
        "/api/status" => json(&status::status(state)),
        "/api/decisions" => json(&serde_json::json!({
            "decisions": state.decisions.recent(),
        })),
        "/healthz" => text(StatusCode::OK, "ok\n".to_owned()),
        "/readyz" if state.draining.load(std::sync::atomic::Ordering::Relaxed) => text(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting down: finishing open requests\n".to_owned(),
        ),
        "/readyz" => readiness(&state.tables.current(), &state.discovery),
        path => ApiError::not_found(path).into_response(),
    }
}

/// A Prometheus exposition as an admin answer (the router's and the P/D sidecar's).
pub(crate) fn metrics_response(exposition: String) -> Response<RespBody> {
    let mut resp = Response::new(full_body(exposition));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
    );
    resp
}

/// A JSON admin answer, never cached (it is a view of now).
fn json<T: serde::Serialize>(value: &T) -> Response<RespBody> {
    let body = serde_json::to_string(value).expect("status types serialize");
    let mut resp = Response::new(full_body(body));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

/// Gauges are sampled when scraped rather than maintained on the request path.
fn refresh_gauges(state: &AdminState) {
    let m = &state.metrics;
    let (stats, pending) = {
        let mut index = state.index.lock();
        (index.stats(), index.pending().blocks())
    };
    m.index.kv_pending_blocks.set(pending as i64);
    m.choice
        .sessions
        .set(state.sessions.map.lock().len() as i64);
    let precise = state.precise.lock().stats();
    m.index.kv_entries.set(precise.entries as i64);
    m.index.kv_bytes.set(precise.bytes as i64);
    m.index.bytes.set(stats.bytes as i64);
    m.index.capacity_bytes.set(stats.capacity_bytes as i64);
    m.index.entries.set(stats.entries as i64);
    m.index
        .evictions
        .set(stats.evictions.min(i64::MAX as u64) as i64);
    let queried = m.index.blocks_queried.get();
    if queried > 0 {
        m.index
            .hit_ratio
            .set(m.index.blocks_matched.get() as f64 / queried as f64);
    }
    let now = Instant::now();
    for r in state.replicas.snapshot() {
        let labels = ReplicaLabels {
            replica: r.name.clone(),
        };
        m.replicas
            .inflight
            .get_or_create(&labels)
            .set(r.inflight_requests() as i64);
        if let Some(limit) = r.learned_inflight_limit() {
            m.replicas
                .inflight_limit
                .get_or_create(&labels)
                .set(i64::from(limit));
        }
        if let Some(every) = r.scrape_every() {
            m.replicas
                .scrape_interval
                .get_or_create(&labels)
                .set(every.as_secs_f64());
        }
        m.replicas
            .ready
            .get_or_create(&labels)
            .set((r.health.is_ready(now) && !r.health.is_stalled(now, &r.name)) as i64);
        m.replicas
            .prefill_per_token
            .get_or_create(&labels)
            .set(r.ttft.lock().per_token_s());
    }
}
