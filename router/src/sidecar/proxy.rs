//! The sidecar's request path: read the body (bounded), then either proxy to the local engine
//! or, for a completion that names an allowed prefill host, run the NIXL prefill there and the
//! decode here.
//!
//! Everything a request does runs inside the one future hyper polls for it: no leg is spawned.
//! A client that goes away drops that future, and with it the prefill request in flight (its
//! connection is closed) and the decode request that would have followed.

use super::guard::{PrefillTarget, TargetError};
use super::{EngineUrl, SidecarTimeouts, UpstreamClient};
use crate::body::read_body;
use crate::body::IdleTimeout;
use crate::config::PrefillFailure;
use crate::errors::{ApiError, RespBody};
use crate::metrics::SidecarMetrics;
use crate::pd_wire::nixl::{self, NixlError};
use crate::pd_wire::{prefill_headers, read_prefill_answer, AnswerError};
use crate::upstream::strip_hop_by_hop;
use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode, Version};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use serde_json::{Map, Value};
use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// The header an llm-d-style scheduler names the prefill pod with (warmpath's router sends it
/// too, with `pd.connector: sidecar`).
pub use crate::pd_wire::PREFILLER_HEADER;
const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The paths whose requests are split; the NIXL bodies are those of the OpenAI completion APIs.
const SPLIT_PATHS: [&str; 2] = ["/v1/completions", "/v1/chat/completions"];

/// The engine paths the sidecar serves (each with what lies under it, `/v1/models/ID`):
/// inference, tokenizing, the model list, and the health and metrics a scheduler reads through
/// the pool's target port. An engine's administrative paths (vLLM's `/reset_prefix_cache`,
/// `/sleep`, `/v1/load_lora_adapter`, `/collective_rpc`, profiling) are not reachable through
/// it: a client must not get them by naming this pod. `--engine-path` adds others.
pub const ENGINE_PATHS: [&str; 17] = [
    "/v1/completions",
    "/v1/chat/completions",
    "/v1/embeddings",
    "/v1/responses",
    "/v1/models",
    "/v1/score",
    "/v1/rerank",
    "/v1/audio",
    "/score",
    "/rerank",
    "/pooling",
    "/classify",
    "/tokenize",
    "/detokenize",
    "/health",
    "/metrics",
    "/version",
];

/// The client headers a prefill host gets besides the protocol's own (content type, a request
/// id of its own): what an engine needs to authenticate and trace the request. Nothing else
/// a client sent (cookies, tenant or routing headers, anything meant for this pod) leaves the
/// pod for a host the client named.
const PREFILL_CLIENT_HEADERS: [HeaderName; 4] = [
    header::AUTHORIZATION,
    header::ACCEPT,
    HeaderName::from_static("traceparent"),
    HeaderName::from_static("tracestate"),
];

/// What every request reads.
pub(crate) struct Shared {
    pub(crate) client: UpstreamClient,
    pub(crate) engine: EngineUrl,
    pub(crate) allow: watch::Receiver<Arc<super::AllowList>>,
    pub(crate) on_prefill_failure: PrefillFailure,
    pub(crate) max_body_bytes: usize,
    pub(crate) timeouts: SidecarTimeouts,
    pub(crate) metrics: Arc<SidecarMetrics>,
    /// Served besides [`ENGINE_PATHS`] (`--engine-path`).
    pub(crate) extra_paths: Vec<String>,
}

impl Shared {
    /// Whether `path` is one the sidecar passes to its engine. Dot segments, empty segments
    /// and percent-escapes are refused outright: a server that normalizes them would read
    /// `/health/../sleep` as `/sleep`.
    fn serves(&self, path: &str) -> bool {
        let plain = !path.contains('%')
            && path
                .split('/')
                .skip(1)
                .all(|seg| !matches!(seg, "" | "." | ".."));
        if !plain {
            return false;
        }
        let under = |base: &str| {
            path.strip_prefix(base)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        };
        ENGINE_PATHS.iter().any(|p| under(p)) || self.extra_paths.iter().any(|p| under(p.as_str()))
    }
}

/// The request path as the tower service [`crate::server::serve`] takes.
pub(crate) fn service(
    shared: Arc<Shared>,
) -> impl tower::Service<
    Request<Incoming>,
    Response = Response<RespBody>,
    Error = Infallible,
    Future = impl Future<Output = Result<Response<RespBody>, Infallible>> + Send + 'static,
> + Clone
       + Send
       + 'static {
    tower::service_fn(move |req: Request<Incoming>| {
        let shared = shared.clone();
        async move { Ok(handle(&shared, req).await) }
    })
}

async fn handle(shared: &Shared, req: Request<Incoming>) -> Response<RespBody> {
    let (mut head, body) = req.into_parts();
    // Before the body is read: nothing of a request for another path is taken in.
    if !shared.serves(head.uri.path()) {
        let e = ApiError::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            "path_not_served",
            format!(
                "The P/D sidecar passes only the engine's inference, health and metrics paths; `{}` is not one (--engine-path adds one).",
                head.uri.path()
            ),
        );
        return answer(shared, "not_served", e.into_response());
    }
    let body = match read_body(
        &head.headers,
        body,
        shared.max_body_bytes,
        shared.timeouts.client,
    )
    .await
    {
        Ok(b) => b,
        Err(e) => return answer(shared, "bad_request", e.into_response()),
    };
    let named = PrefillTarget::from_header(head.headers.get_all(&PREFILLER_HEADER));
    // Meant for this sidecar, never for an engine.
    head.headers.remove(&PREFILLER_HEADER);
    let splittable = head.method == Method::POST && SPLIT_PATHS.contains(&head.uri.path());
    let target = match named {
        // Other paths are proxied as they are, header or not.
        _ if !splittable => None,
        Ok(t) => t,
        Err(e) => return answer(shared, "bad_request", bad_header(&e).into_response()),
    };
    let Some(target) = target else {
        return match forward_local(shared, head, body).await {
            Ok(resp) => answer(shared, "local", resp),
            Err(e) => answer(shared, "failed", e.into_response()),
        };
    };
    if !shared.allow.borrow().allows(&target) {
        tracing::warn!(prefill = %target, "x-prefiller-host-port names a host that is not allowed");
        return answer(shared, "forbidden", forbidden(&target).into_response());
    }
    let original = match serde_json::from_slice::<Value>(&body) {
        Ok(Value::Object(m)) => m,
        _ => {
            let e = ApiError::bad_request(
                "invalid_json",
                "The request body must be a JSON object to be split into prefill and decode.",
            );
            return answer(shared, "bad_request", e.into_response());
        }
    };
    split(shared, head, body, original, target).await
}

/// Count the outcome and pass the response on.
fn answer(shared: &Shared, outcome: &'static str, resp: Response<RespBody>) -> Response<RespBody> {
    shared.metrics.answered(outcome);
    resp
}

/// The prefill on `target`, then the decode here; on a failed prefill, by the flag.
async fn split(
    shared: &Shared,
    mut head: http::request::Parts,
    body: Bytes,
    original: Map<String, Value>,
    target: PrefillTarget,
) -> Response<RespBody> {
    let started = Instant::now();
    let prefill = prefill_leg(shared, &head, &original, &target).await;
    shared
        .metrics
        .prefill_duration
        .observe(started.elapsed().as_secs_f64());
    let (outcome, decode_body) = match prefill {
        Ok(params) => {
            head.headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            ("split", Bytes::from(nixl::decode_body(&original, params)))
        }
        Err(failure) => {
            shared.metrics.prefill_failed(failure.kind());
            tracing::warn!(prefill = %target, kind = failure.kind(), error = %failure, "prefill leg failed");
            match shared.on_prefill_failure {
                // The client's own body: the engine prefills the prompt itself.
                PrefillFailure::Decode => ("fallback_decode", body),
                PrefillFailure::Fail => {
                    // The same words whatever went wrong (refused, timed out, answered
                    // something): the cause is in the log and the failure metric, never told
                    // to a client, who could otherwise map which ports of a network answer.
                    let e = ApiError::new(
                        StatusCode::BAD_GATEWAY,
                        "upstream_error",
                        "prefill_failed",
                        "The prefill leg failed; the sidecar's log says why.".to_owned(),
                    );
                    return answer(shared, "failed", e.into_response());
                }
            }
        }
    };
    match forward_local(shared, head, decode_body).await {
        Ok(resp) => answer(shared, outcome, resp),
        Err(e) => answer(shared, "failed", e.into_response()),
    }
}

/// Why a prefill leg failed.
#[derive(Debug, thiserror::Error)]
enum PrefillError {
    #[error("cannot connect: {0}")]
    Connect(String),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("it {0}")]
    Answer(#[from] AnswerError),
    #[error(transparent)]
    NoParams(#[from] NixlError),
    #[error("{0}")]
    Other(String),
}

impl PrefillError {
    /// The metric label.
    fn kind(&self) -> &'static str {
        match self {
            Self::Connect(_) => "connect",
            Self::Timeout(_) => "timeout",
            Self::Answer(e) => e.kind(),
            Self::NoParams(_) => "no_kv_transfer_params",
            Self::Other(_) => "other",
        }
    }
}

/// Send the NIXL prefill request to `target` and take `kv_transfer_params` from its whole
/// answer, bounded in size and time.
async fn prefill_leg(
    shared: &Shared,
    head: &http::request::Parts,
    original: &Map<String, Value>,
    target: &PrefillTarget,
) -> Result<Value, PrefillError> {
    let path = head.uri.path_and_query().map_or("/", |p| p.as_str());
    let uri: http::Uri = format!("http://{target}{path}")
        .parse()
        .map_err(|e| PrefillError::Other(format!("no URI for {target}{path}: {e}")))?;
    let mut headers = HeaderMap::new();
    for name in &PREFILL_CLIENT_HEADERS {
        for value in head.headers.get_all(name) {
            headers.append(name.clone(), value.clone());
        }
    }
    prefill_headers(&mut headers);
    let id = headers.get(REQUEST_ID).cloned();
    let req = request(
        Method::POST,
        uri,
        headers,
        Bytes::from(nixl::prefill_body(original)),
    );
    tracing::debug!(prefill = %target, prefill_request_id = ?id, "prefill leg");
    let resp = match send(&shared.client, req, shared.timeouts.header).await {
        Ok(r) => r,
        Err(SendError::Connect(e)) => return Err(PrefillError::Connect(e)),
        Err(SendError::Timeout(d)) => return Err(PrefillError::Timeout(d)),
        Err(SendError::Other(e)) => return Err(PrefillError::Other(e)),
    };
    let bytes = read_prefill_answer(resp, shared.timeouts.idle).await?;
    Ok(nixl::kv_params(&bytes)?)
}

/// Send to the local engine and stream its answer back as it comes, each chunk within the idle
/// timeout.
async fn forward_local(
    shared: &Shared,
    head: http::request::Parts,
    body: Bytes,
) -> Result<Response<RespBody>, ApiError> {
    let uri = shared.engine.uri(head.uri.path_and_query());
    let req = request(head.method, uri, upstream_headers(&head.headers), body);
    let engine = shared.engine.authority().as_str();
    let resp = match send(&shared.client, req, shared.timeouts.header).await {
        Ok(r) => r,
        Err(SendError::Connect(e)) => return Err(ApiError::upstream_connect(engine, e)),
        Err(SendError::Timeout(_)) => return Err(ApiError::upstream_timeout(engine)),
        Err(SendError::Other(e)) => return Err(ApiError::upstream_failed(engine, e)),
    };
    let (mut parts, body) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers, false);
    let body = IdleTimeout::new(body, shared.timeouts.idle).boxed_unsync();
    Ok(Response::from_parts(parts, body))
}

/// The client's headers as an upstream gets them: hop-by-hop ones out, `host` and
/// `content-length` left to the client, which sets them for the new target and body, and no
/// `expect: 100-continue` (the body was read already; it goes at once).
fn upstream_headers(client: &HeaderMap) -> HeaderMap {
    let mut headers = client.clone();
    strip_hop_by_hop(&mut headers, true);
    headers.remove(header::CONTENT_LENGTH);
    headers.remove(header::EXPECT);
    headers
}

fn request(
    method: Method,
    uri: http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Request<Full<Bytes>> {
    let mut req = Request::new(Full::new(body));
    *req.method_mut() = method;
    *req.uri_mut() = uri;
    // The client speaks HTTP/1.1 upstream whatever the client spoke to the sidecar.
    *req.version_mut() = Version::HTTP_11;
    *req.headers_mut() = headers;
    req
}

enum SendError {
    Connect(String),
    Timeout(Duration),
    Other(String),
}

/// Send and wait for the response head, within `header`.
async fn send(
    client: &UpstreamClient,
    req: Request<Full<Bytes>>,
    header: Duration,
) -> Result<Response<Incoming>, SendError> {
    match tokio::time::timeout(header, client.request(req)).await {
        Err(_) => Err(SendError::Timeout(header)),
        Ok(Ok(resp)) => Ok(resp),
        Ok(Err(e)) if e.is_connect() => Err(SendError::Connect(chain(&e))),
        Ok(Err(e)) => Err(SendError::Other(chain(&e))),
    }
}

/// An error and its causes: hyper-util's own message ("client error (Connect)") says little.
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

fn bad_header(e: &TargetError) -> ApiError {
    ApiError::bad_request(
        "invalid_prefill_host",
        format!("Malformed x-prefiller-host-port: {e}; expected HOST:PORT."),
    )
}

fn forbidden(target: &PrefillTarget) -> ApiError {
    ApiError::new(
        StatusCode::FORBIDDEN,
        "permission_error",
        "prefill_host_not_allowed",
        format!(
            "The prefill host `{target}` named by x-prefiller-host-port is not allowed by this sidecar (--prefill-allow, --prefill-host)."
        ),
    )
}
