//! The OpenAI API listener's request handler: `/v1/completions`, `/v1/chat/completions`
//! (proxied) and `/v1/models` (answered locally from the configuration).

use crate::admission::{self, AdmissionRequest};
use crate::errors::{full_body, ApiError, RespBody};
use crate::metrics::{ReasonLabels, RequestLabels};
use crate::pd::PdPlan;
use crate::proxy::{self, Completion, UpstreamError, REQUEST_ID_HEADER};
use crate::request::{self, Endpoint};
use crate::table::Table;
use crate::Shared;
use http::{header, HeaderValue, Method, Request, Response};
use std::sync::Arc;
use std::time::Instant;
use warmpath_routing::index::PrefixIndex;
use warmpath_routing::ReplicaId;

/// Replicas tried per request when connections are refused (nothing was sent, so it is safe).
const MAX_ATTEMPTS: usize = 2;

/// Longest client-supplied request id forwarded as is.
const MAX_REQUEST_ID_LEN: usize = 128;

pub async fn handle<B>(shared: Arc<Shared>, req: Request<B>) -> Response<RespBody>
where
    B: http_body::Body<Data = bytes::Bytes>,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let started = Instant::now();
    let request_id = req
        .headers()
        .get(REQUEST_ID_HEADER)
        .filter(|v| !v.is_empty() && v.len() <= MAX_REQUEST_ID_LEN)
        .cloned()
        .unwrap_or_else(new_request_id);
    let table = shared.table();
    let endpoint = match req.uri().path() {
        "/v1/completions" => Some(Endpoint::Completions),
        "/v1/chat/completions" => Some(Endpoint::ChatCompletions),
        _ => None,
    };
    let result = match (endpoint, req.method(), req.uri().path()) {
        (Some(ep), &Method::POST, _) => {
            completions(&shared, &table, ep, req, &request_id, started).await
        }
        (None, &Method::GET, "/v1/models") => {
            let mut resp = Response::new(full_body(table.models_json.clone()));
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            Ok(resp)
        }
        // vLLM answers `/health` on its API port and OpenAI-compatible tools (guidellm, the
        // SGLang gateway) probe it before sending load: answer it as readiness does.
        (None, &Method::GET, "/health") => Ok(crate::admin::readiness(&shared)),
        (Some(_), m, p) | (None, m, p @ ("/v1/models" | "/health")) => {
            Err((ApiError::method_not_allowed(m, p), String::new()))
        }
        (None, _, p) => Err((ApiError::not_found(p), String::new())),
    };
    let mut resp = match result {
        Ok(resp) => resp,
        Err((e, model)) => {
            if e.status.is_server_error() {
                tracing::warn!(request_id = ?request_id, "{e}");
            } else {
                tracing::debug!(request_id = ?request_id, "{e}");
            }
            shared
                .metrics
                .requests
                .get_or_create(&RequestLabels {
                    model,
                    pool: String::new(),
                    replica: String::new(),
                    status: e.status.as_u16(),
                })
                .inc();
            e.into_response()
        }
    };
    resp.headers_mut().insert(REQUEST_ID_HEADER, request_id);
    resp
}

fn new_request_id() -> HeaderValue {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut id = [0u8; 35];
    id[..3].copy_from_slice(b"wp-");
    let mut x = rand::random::<u128>();
    for b in id[3..].iter_mut().rev() {
        *b = HEX[(x & 0xf) as usize];
        x >>= 4;
    }
    HeaderValue::from_bytes(&id).expect("hex is a valid header value")
}

/// The model label for a request that failed before a replica was chosen: bounded by the
/// configuration, never the raw client string.
fn model_label(table: &Table, model: &str) -> String {
    if table.serves(model) {
        model.to_owned()
    } else {
        "(unknown)".to_owned()
    }
}

async fn completions<B>(
    shared: &Arc<Shared>,
    table: &Arc<Table>,
    endpoint: Endpoint,
    req: Request<B>,
    request_id: &HeaderValue,
    started: Instant,
) -> Result<Response<RespBody>, (ApiError, String)>
where
    B: http_body::Body<Data = bytes::Bytes>,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let config = &table.config;
    let (parts, body) = req.into_parts();
    let bytes = request::read_body(
        &parts.headers,
        body,
        config.limits.max_body_bytes,
        config.timeouts.client(),
    )
    .await
    .map_err(|e| (e, String::new()))?;
    let features = request::parse(endpoint, &bytes, &parts.headers, &table.hasher)
        .map_err(|e| (e, String::new()))?;
    let label = || model_label(table, &features.model);
    if !table.serves(&features.model) {
        return Err((ApiError::unknown_model(&features.model), label()));
    }
    let permit = admission::resolve(shared.admission.admit(&AdmissionRequest {
        tenant: features.tenant.as_deref(),
        model: &features.model,
        prompt_tokens: warmpath_routing::prompt::estimate_tokens(features.prompt.total_bytes),
        max_tokens: features.max_tokens,
    }))
    .await
    .map_err(|e| (e, label()))?;

    let mut tried: Vec<ReplicaId> = Vec::new();
    let mut last_error = None;
    for _ in 0..MAX_ATTEMPTS {
        let decide_start = Instant::now();
        let routed = match crate::route::choose(shared, table, &features, &tried) {
            Ok(r) => r,
            // After a refused connection, "no other replica" should report the refusal.
            Err(e) => return Err((last_error.unwrap_or(e), label())),
        };
        let m = &shared.metrics;
        m.decision_duration
            .observe(decide_start.elapsed().as_secs_f64());
        m.decisions
            .get_or_create(&ReasonLabels {
                reason: routed.decision.reason,
            })
            .inc();
        if routed.decision.spilled {
            m.spills.inc();
        }
        m.prefix_blocks_queried
            .inc_by(features.prompt.hashes.len() as u64);
        m.prefix_blocks_matched
            .inc_by(routed.decision.matched_blocks as u64);
        match shared
            .pd
            .plan(&features, &routed.decision, routed.uncached_tokens)
        {
            PdPlan::Local => {}
            PdPlan::Split { prefill_replica } => {
                // No splitting policy ships yet; a custom one must not be silently ignored.
                tracing::warn!(%prefill_replica, "P/D split requested but not implemented; serving locally");
            }
        }
        let replica = routed.candidate.replica.clone();
        let forwarded = Instant::now();
        match proxy::forward(&routed, &parts, bytes.clone(), request_id, &config.timeouts).await {
            Ok((upstream, lease)) => {
                replica.health.on_success();
                let status = upstream.status().as_u16();
                return Ok(proxy::respond(
                    upstream,
                    lease,
                    Completion {
                        shared: shared.clone(),
                        headers: config.response_headers,
                        status,
                        started,
                        forwarded,
                        learn_ttft: features.stream,
                        routed,
                        permit,
                    },
                    config.timeouts.idle(),
                    request_id,
                ));
            }
            Err(e) => {
                m.upstream_errors
                    .get_or_create(&crate::metrics::UpstreamErrorLabels {
                        replica: replica.name.clone(),
                        kind: e.kind(),
                    })
                    .inc();
                match e {
                    UpstreamError::Connect(err) => {
                        let backoff = replica
                            .health
                            .on_connect_error(&config.health, Instant::now());
                        // A replica that refuses connections has likely restarted: its cache
                        // is gone, so forget what the index thought it held.
                        shared.index.lock().remove_replica(replica.id);
                        tracing::warn!(replica = %replica.name, ?backoff, error = %err, "replica unreachable; ejected");
                        tried.push(replica.id);
                        last_error = Some(ApiError::upstream_connect(&replica.name, err));
                    }
                    UpstreamError::Timeout(_) => {
                        return Err((ApiError::upstream_timeout(&replica.name), label()));
                    }
                    UpstreamError::Other(err) => {
                        return Err((ApiError::upstream_failed(&replica.name, err), label()));
                    }
                }
            }
        }
    }
    Err((
        last_error.unwrap_or_else(|| ApiError::no_ready_replica(&features.model)),
        label(),
    ))
}
