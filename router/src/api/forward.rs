//! The innermost service: send the request to its chosen replica over a pooled connection,
//! wait for the response head, and stream the body back through the wrappers of
//! [`crate::body`]: idle timeout, first chunk (TTFT, prefill done), accounting (metrics, the
//! in-flight counters, the admission permit).

use super::served::{Served, ServedAs};
use super::{Chosen, StageFuture};
use crate::body::{
    Accounting, ErrorPeek, FirstChunk, IdleTimedOut, IdleTimeout, Outcome, ReadAhead, SseError,
    StallWatch, UsageScan,
};
use crate::config::TimeoutsConfig;
use crate::errors::{BodyError, RespBody};
use crate::metrics::Metrics;
use crate::pd_wire::PREFILLER_HEADER;
use crate::state::replica::FirstByteOwed;
use crate::state::replica::ReplicaState;
use crate::tenants::PeerAddr;
use crate::upstream::{strip_hop_by_hop, PooledBody, SendError};
use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};
use http::{Request, Response, Version};
use http_body_util::{BodyExt, Full};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tower::Service;

pub const REPLICA_HEADER: HeaderName = HeaderName::from_static("x-warmpath-replica");
pub const DECISION_HEADER: HeaderName = HeaderName::from_static("x-warmpath-decision");
/// With `response_headers.decision`: prompt tokens the chosen engine holds, by its KV events.
pub const CACHED_TOKENS_HEADER: HeaderName = HeaderName::from_static("x-warmpath-cached-tokens");

/// Why forwarding failed before a response head arrived.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// Nothing was sent: safe to try another replica.
    #[error("connect: {0}")]
    Connect(std::io::Error),
    #[error("no response headers within {0:?}")]
    Timeout(Duration),
    /// The replica showed no progress (no answer, no first byte, no token counted by its engine)
    /// for this long while the request waited for its first byte; nothing had reached the
    /// client, and the request was taken back (its connection closed, which makes the engine
    /// drop it).
    #[error("no progress for {0:?} while the request waited for its first byte")]
    Stalled(Duration),
    #[error("{0}")]
    Other(hyper::Error),
}

impl UpstreamError {
    pub fn kind(&self) -> &'static str {
        match self {
            UpstreamError::Connect(_) => "connect",
            UpstreamError::Timeout(_) => "timeout",
            UpstreamError::Stalled(_) => "stalled",
            UpstreamError::Other(_) => "other",
        }
    }
}

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// Send the request to the replica over a pooled connection and wait for its response head.
/// The request's headers (with its `x-request-id`) go as they came, less hop-by-hop ones.
pub async fn send(
    replica: &ReplicaState,
    head: &http::request::Parts,
    body: Bytes,
    timeouts: &TimeoutsConfig,
) -> Result<Response<PooledBody>, UpstreamError> {
    // The client's address appended to what proxies before us said (engines log it).
    let forwarded_for = PeerAddr::ip_of(&head.extensions).and_then(|ip| {
        let ip = ip.to_string();
        let value = match head.headers.get(X_FORWARDED_FOR).map(|v| v.to_str()) {
            Some(Ok(before)) if !before.trim().is_empty() => format!("{before}, {ip}"),
            _ => ip,
        };
        HeaderValue::from_str(&value).ok()
    });
    let path = head
        .uri
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| http::uri::PathAndQuery::from_static("/"));
    let make = || {
        let mut req = Request::new(Full::new(body.clone()));
        *req.method_mut() = head.method.clone();
        *req.uri_mut() = http::Uri::from(path.clone());
        *req.version_mut() = Version::HTTP_11;
        let mut headers = head.headers.clone();
        strip_hop_by_hop(&mut headers, false);
        headers.remove(header::CONTENT_LENGTH);
        headers.insert(header::HOST, replica.host.clone());
        if let Some(v) = &forwarded_for {
            headers.insert(X_FORWARDED_FOR, v.clone());
        }
        *req.headers_mut() = headers;
        req
    };
    let send = replica.pool.send(
        &replica.authority,
        make,
        timeouts.connect(),
        Duration::from_millis(timeouts.pool_idle_ms),
    );
    match tokio::time::timeout(timeouts.header(), send).await {
        Err(_) => Err(UpstreamError::Timeout(timeouts.header())),
        Ok(Ok(ok)) => Ok(ok),
        Ok(Err(SendError::Connect(e))) => Err(UpstreamError::Connect(e)),
        Ok(Err(SendError::Http(e))) => Err(UpstreamError::Other(e)),
    }
}

/// The forwarding service. Cheap to clone: one `Arc`.
#[derive(Clone)]
pub struct Forward {
    metrics: Arc<Metrics>,
    stall_watch: Arc<StallWatch>,
}

impl Forward {
    pub fn new(metrics: Arc<Metrics>, stall_watch: Arc<StallWatch>) -> Self {
        Self {
            metrics,
            stall_watch,
        }
    }
}

impl Service<Chosen> for Forward {
    type Response = Response<RespBody>;
    type Error = UpstreamError;
    type Future = StageFuture<Response<RespBody>, UpstreamError>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), UpstreamError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, chosen: Chosen) -> Self::Future {
        let metrics = self.metrics.clone();
        let stall_watch = self.stall_watch.clone();
        Box::pin(async move {
            let replica = chosen.routed.candidate.replica.clone();
            let read = &chosen.request.parsed.read;
            let timeouts = read.ctx.table.config.timeouts;
            let forwarded = Instant::now();
            let stream = chosen.request.features().stream;
            let allowance = read
                .ctx
                .table
                .config
                .health
                .overdue_after(chosen.routed.decision.predicted_ttft_s);
            // A stream's first byte is what shows the engine working (a hung one may still
            // send the head, and answer its metrics).
            let owed = allowance
                .filter(|_| stream)
                .map(|allowance| FirstByteOwed::new(replica.clone(), allowance, forwarded));
            // A request is taken back from a replica that shows no progress for that long:
            // a stream until its first byte, any other request until its head when the engine
            // counts its tokens (without that, a long generation shows nothing until it ends).
            // Not one whose prefill a decode pod's sidecar runs elsewhere first: its replica
            // has nothing to show until that prefill is done.
            let rescue = allowance
                .filter(|_| chosen.prefiller.is_none())
                .filter(|_| stream || replica.health.counts_work());
            let body = chosen.body.clone().unwrap_or_else(|| read.body.clone());
            let head = match &chosen.prefiller {
                None => std::borrow::Cow::Borrowed(&read.head),
                Some(prefiller) => {
                    let mut head = read.head.clone();
                    head.headers.insert(PREFILLER_HEADER, prefiller.clone());
                    std::borrow::Cow::Owned(head)
                }
            };
            let sent = until_stalled(
                send(&replica, &head, body, &timeouts),
                &replica,
                rescue,
                forwarded,
            )
            .await?;
            let (parts, mut pooled) = sent.into_parts();
            // A stream's head may come at once from an engine that then hangs: its first frame
            // is waited for too, so that the request can still go elsewhere.
            let first = match rescue.filter(|_| stream && parts.status.is_success()) {
                Some(_) => {
                    let frame = until_stalled(
                        async { Ok(pooled.frame().await) },
                        &replica,
                        rescue,
                        forwarded,
                    )
                    .await?;
                    match frame {
                        Some(Ok(frame)) => Some(frame),
                        // The body's end or error comes again from the body itself.
                        _ => None,
                    }
                }
                None => None,
            };
            let upstream = Response::from_parts(parts, ReadAhead::new(first, pooled));
            let mut resp = respond(upstream, chosen, forwarded, owed, metrics);
            let body = std::mem::take(resp.body_mut());
            *resp.body_mut() = stall_watch.watch(body).boxed_unsync();
            Ok(resp)
        })
    }
}

/// `answer`, unless the replica shows no progress ([`Health::last_progress`]) for a whole
/// `allowance` while it is awaited (counted from `sent`, then from each sign of progress):
/// then [`UpstreamError::Stalled`], and `answer` is dropped (its connection with it).
///
/// [`Health::last_progress`]: crate::state::health::Health::last_progress
async fn until_stalled<T>(
    answer: impl std::future::Future<Output = Result<T, UpstreamError>>,
    replica: &ReplicaState,
    allowance: Option<Duration>,
    sent: Instant,
) -> Result<T, UpstreamError> {
    let Some(allowance) = allowance else {
        return answer.await;
    };
    tokio::pin!(answer);
    let mut since = sent;
    loop {
        tokio::select! {
            biased;
            r = &mut answer => return r,
            _ = tokio::time::sleep_until((since + allowance).into()) => {
                match replica.health.last_progress() {
                    Some(p) if p > since => since = p,
                    _ => return Err(UpstreamError::Stalled(allowance)),
                }
            }
        }
    }
}

/// The kind an upstream body error is counted as.
fn body_error_kind(e: &BodyError) -> &'static str {
    if e.is::<IdleTimedOut>() {
        "idle"
    } else {
        "body"
    }
}

/// Turn the replica's response into the client's: hop-by-hop headers out, ours in, the body
/// wrapped for its idle timeout, first chunk and accounting.
fn respond(
    upstream: Response<ReadAhead<PooledBody>>,
    chosen: Chosen,
    forwarded: Instant,
    owed: Option<FirstByteOwed>,
    metrics: Arc<Metrics>,
) -> Response<RespBody> {
    let (up, pooled) = upstream.into_parts();
    let Chosen {
        request,
        routed,
        prefill_replica,
        ..
    } = chosen;
    let ctx = request.ctx();
    let config = &ctx.table.config;
    let mut resp = Response::new(RespBody::default());
    *resp.status_mut() = up.status;
    *resp.headers_mut() = up.headers;
    let headers = resp.headers_mut();
    strip_hop_by_hop(headers, true);
    if config.response_headers.replica {
        if let Ok(v) = HeaderValue::from_str(&routed.candidate.replica.name) {
            headers.insert(REPLICA_HEADER, v);
        }
    }
    if let Some((token, _)) = &routed.session {
        if let (Ok(name), Ok(v)) = (
            http::HeaderName::from_bytes(config.sessions.token_header.as_bytes()),
            HeaderValue::from_str(token),
        ) {
            headers.insert(name, v);
        }
    }
    if config.response_headers.decision {
        let d = &routed.decision;
        let text = format!(
            "reason={}; matched_blocks={}; predicted_ttft_ms={:.2}; spilled={}",
            d.reason,
            d.matched_blocks,
            d.predicted_ttft_s * 1e3,
            d.spilled
        );
        if let Ok(v) = HeaderValue::from_str(&text) {
            headers.insert(DECISION_HEADER, v);
        }
        if let Some(n) = routed.cached_tokens {
            headers.insert(CACHED_TOKENS_HEADER, HeaderValue::from(n));
        }
    }

    if let Some(v) = routed.explanation.as_ref().and_then(|e| e.header_value()) {
        headers.insert(crate::decisions::EXPLAIN_HEADER, v);
    }

    let status = up.status.as_u16();
    let idle = config.timeouts.idle();
    let stream = request.features().stream;
    // The permit goes with the body; the request (its body bytes too) goes now.
    let permit = request.permit.clone();
    permit.set_uncached_prompt(u64::from(routed.uncached_tokens));
    let report = permit.wants_usage().then(|| {
        let permit = permit.clone();
        move |tokens| permit.set_output(tokens)
    });
    let mut served = Served::new(
        routed,
        ServedAs {
            permit,
            table: ctx.table.clone(),
            model: request.features().model.clone(),
            metrics,
            stream,
            arrived: ctx.started,
            sent: forwarded,
            prefilled_elsewhere: prefill_replica.is_some(),
            settles_unavailable: false,
        },
    );
    drop(request);
    let peeked = served.on_head(status, owed);
    let counted = UsageScan::new(
        ErrorPeek::new(IdleTimeout::new(pooled, idle), peeked),
        report,
        stream,
    );
    // A stream that breaks after its head (reset, silence) counts against its replica too.
    let (first, end) = served.into_parts();
    let on_first = move || {
        if let Some(first) = first {
            first.arrived(Instant::now());
        }
    };
    let on_end = move |outcome: Outcome| end.settle(outcome);
    let body = Accounting::new(FirstChunk::new(counted, on_first), body_error_kind, on_end);
    let event_stream = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    *resp.body_mut() = if event_stream {
        SseError::new(body).boxed_unsync()
    } else {
        body.boxed_unsync()
    };
    resp
}
