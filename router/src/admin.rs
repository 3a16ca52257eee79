//! The admin listener: `/metrics` (Prometheus/OpenMetrics text), `/healthz` (the process
//! answers) and `/readyz` (at least one replica can take traffic).

use crate::errors::{full_body, ApiError, RespBody};
use crate::metrics::ReplicaLabels;
use crate::Shared;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use std::time::Instant;
use warmpath_routing::index::PrefixIndex;

pub fn handle<B>(shared: &Shared, req: Request<B>) -> Response<RespBody> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return ApiError::method_not_allowed(req.method(), req.uri().path()).into_response();
    }
    match req.uri().path() {
        "/metrics" => {
            refresh_gauges(shared);
            let mut resp = Response::new(full_body(shared.metrics.encode()));
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                ),
            );
            resp
        }
        "/healthz" => text(StatusCode::OK, "ok\n".to_owned()),
        "/readyz" => readiness(shared),
        path => ApiError::not_found(path).into_response(),
    }
}

fn text(status: StatusCode, body: String) -> Response<RespBody> {
    let mut resp = Response::new(full_body(body));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

pub(crate) fn readiness(shared: &Shared) -> Response<RespBody> {
    if !shared.discovery_synced() {
        let mut body = "waiting for the first full list of InferencePools, InferenceReplicas and TenantPolicies from the Kubernetes API\n".to_owned();
        if let Some(e) = shared.discovery_error() {
            body.push_str(&format!("last error: {e}\n"));
        }
        return text(StatusCode::SERVICE_UNAVAILABLE, body);
    }
    let table = shared.table();
    let now = Instant::now();
    let mut any = false;
    let mut lines = String::new();
    let mut models: Vec<_> = table.config.pools.iter().flat_map(|p| &p.models).collect();
    models.sort();
    models.dedup();
    for model in models {
        let (ready, total) = table.candidates(model).map_or((0, 0), |cs| {
            (
                cs.iter().filter(|c| c.replica.health.is_ready(now)).count(),
                cs.len(),
            )
        });
        any |= ready > 0;
        lines.push_str(&format!("{model}: {ready}/{total} replicas ready\n"));
    }
    let status = if any {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    text(status, lines)
}

/// Gauges are sampled when scraped rather than maintained on the request path.
fn refresh_gauges(shared: &Shared) {
    let m = &shared.metrics;
    let stats = shared.index.lock().stats();
    m.index_bytes.set(stats.bytes as i64);
    m.index_capacity_bytes.set(stats.capacity_bytes as i64);
    m.index_entries.set(stats.entries as i64);
    m.index_evictions
        .set(stats.evictions.min(i64::MAX as u64) as i64);
    let queried = m.prefix_blocks_queried.get();
    if queried > 0 {
        m.prefix_hit_ratio
            .set(m.prefix_blocks_matched.get() as f64 / queried as f64);
    }
    let now = Instant::now();
    for r in shared.registry.lock().all() {
        let labels = ReplicaLabels {
            replica: r.name.clone(),
        };
        m.inflight
            .get_or_create(&labels)
            .set(r.inflight_requests() as i64);
        m.ready
            .get_or_create(&labels)
            .set(r.health.is_ready(now) as i64);
        m.prefill_per_token
            .get_or_create(&labels)
            .set(r.ttft.lock().per_token_s());
    }
}
