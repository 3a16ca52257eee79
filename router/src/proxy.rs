//! Forwarding to a replica over pooled connections, and streaming its answer back.
//!
//! The response body is passed through frame by frame ([`TrackedBody`]): SSE chunks reach the
//! client as the engine sends them. The wrapper notices the first chunk (TTFT, fed to the
//! replica's predictor for streams), cuts a stream that stays silent longer than the idle
//! timeout, and on drop (end, error or client disconnect) records metrics and releases the
//! in-flight counters. A client that goes away drops the body, which drops the upstream
//! response and closes that connection: the engine sees the cancel and stops generating.

use crate::admission::Permit;
use crate::config::{ResponseHeadersConfig, TimeoutsConfig};
use crate::errors::{BodyError, RespBody};
use crate::metrics::UpstreamErrorLabels;
use crate::route::Routed;
use crate::upstream::{Lease, SendError};
use crate::Shared;
use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Request, Response, Version};
use http_body::{Body, Frame, SizeHint};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::time::Sleep;

pub const REPLICA_HEADER: &str = "x-warmpath-replica";
pub const DECISION_HEADER: &str = "x-warmpath-decision";
pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// The general-purpose client used for scraping engine metrics (the data path uses
/// [`crate::upstream::ConnPool`]).
pub type UpstreamClient = Client<HttpConnector, Full<Bytes>>;

pub fn build_client(t: &TimeoutsConfig) -> UpstreamClient {
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(Some(t.connect()));
    connector.set_nodelay(true);
    connector.enforce_http(true);
    Client::builder(TokioExecutor::new())
        .timer(TokioTimer::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(Duration::from_millis(t.pool_idle_ms))
        .pool_max_idle_per_host(1024)
        .build(connector)
}

/// Why forwarding failed before a response head arrived.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// Nothing was sent: safe to try another replica.
    #[error("connect: {0}")]
    Connect(std::io::Error),
    #[error("no response headers within {0:?}")]
    Timeout(Duration),
    #[error("{0}")]
    Other(hyper::Error),
}

impl UpstreamError {
    pub fn kind(&self) -> &'static str {
        match self {
            UpstreamError::Connect(_) => "connect",
            UpstreamError::Timeout(_) => "timeout",
            UpstreamError::Other(_) => "other",
        }
    }
}

/// Headers that describe one hop, not the message (RFC 9110 §7.6.1), plus `host`, which is
/// set for the replica.
fn is_hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
            | "host"
    )
}

fn copy_end_to_end(from: &HeaderMap, to: &mut HeaderMap) {
    to.reserve(from.len());
    for (name, value) in from {
        if !is_hop_by_hop(name) {
            to.append(name.clone(), value.clone());
        }
    }
}

/// Send the request to the replica over a pooled connection and wait for its response head.
pub async fn forward(
    routed: &Routed,
    parts: &http::request::Parts,
    body: Bytes,
    request_id: &HeaderValue,
    timeouts: &TimeoutsConfig,
) -> Result<(Response<Incoming>, Lease), UpstreamError> {
    let replica = &routed.candidate.replica;
    let path = parts
        .uri
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| http::uri::PathAndQuery::from_static("/"));
    let host = HeaderValue::from_str(replica.authority.as_str())
        .expect("a URI authority is a valid header value");
    let make = || {
        let mut req = Request::new(Full::new(body.clone()));
        *req.method_mut() = parts.method.clone();
        *req.uri_mut() = http::Uri::from(path.clone());
        *req.version_mut() = Version::HTTP_11;
        let headers = req.headers_mut();
        copy_end_to_end(&parts.headers, headers);
        headers.remove(header::CONTENT_LENGTH);
        headers.insert(header::HOST, host.clone());
        headers.insert(REQUEST_ID_HEADER, request_id.clone());
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

/// Everything recorded when a proxied response ends.
pub struct Completion {
    pub shared: Arc<Shared>,
    /// Which of our headers to add (from the request's table).
    pub headers: ResponseHeadersConfig,
    pub status: u16,
    pub started: Instant,
    pub forwarded: Instant,
    /// Feed time-to-first-chunk into the replica's TTFT model (streams only: a non-streamed
    /// body arrives after the whole generation, which is not TTFT).
    pub learn_ttft: bool,
    pub routed: Routed,
    pub permit: Permit,
}

/// Turn the replica's response into the client's: hop-by-hop headers out, ours in, body tracked.
pub fn respond(
    upstream: Response<Incoming>,
    lease: Lease,
    completion: Completion,
    idle: Duration,
    request_id: &HeaderValue,
) -> Response<RespBody> {
    let (up, incoming) = upstream.into_parts();
    let config = &completion.routed.candidate;
    let mut resp = Response::new(RespBody::default());
    *resp.status_mut() = up.status;
    let headers = resp.headers_mut();
    copy_end_to_end(&up.headers, headers);
    headers.insert(REQUEST_ID_HEADER, request_id.clone());
    let table_headers = completion.headers;
    if table_headers.replica {
        if let Ok(v) = HeaderValue::from_str(&config.replica.name) {
            headers.insert(REPLICA_HEADER, v);
        }
    }
    if table_headers.decision {
        let d = &completion.routed.decision;
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
    }
    let body = TrackedBody {
        inner: incoming,
        idle,
        idle_timer: None,
        first_seen: false,
        ended: false,
        failed: false,
        lease: Some(lease),
        completion,
    };
    *resp.body_mut() = body.boxed_unsync();
    resp
}

#[derive(Debug, thiserror::Error)]
#[error("replica sent nothing for {0:?}; stream cut")]
struct IdleTimeout(Duration);

/// The replica's body, passed through frame by frame, with bookkeeping.
pub struct TrackedBody {
    inner: Incoming,
    idle: Duration,
    /// Created on the first wait, so bodies that are ready at once never arm a timer.
    idle_timer: Option<Pin<Box<Sleep>>>,
    first_seen: bool,
    ended: bool,
    failed: bool,
    /// The connection, handed back to the pool when the body has been read to its end.
    lease: Option<Lease>,
    completion: Completion,
}

impl TrackedBody {
    fn on_first_chunk(&mut self) {
        self.first_seen = true;
        self.completion.routed.guard.prefill_done();
        let c = &self.completion;
        let ttfb = c.forwarded.elapsed();
        c.routed
            .candidate
            .metrics
            .first_byte
            .observe(ttfb.as_secs_f64());
        if c.learn_ttft && c.status < 300 {
            c.routed.candidate.replica.ttft.lock().observe(
                c.routed.prefill_tokens,
                c.routed.queued_ahead,
                ttfb.as_secs_f64(),
            );
        }
    }

    fn upstream_error(&mut self, kind: &'static str) {
        self.failed = true;
        let c = &self.completion;
        c.shared
            .metrics
            .upstream_errors
            .get_or_create(&UpstreamErrorLabels {
                replica: c.routed.candidate.replica.name.clone(),
                kind,
            })
            .inc();
    }
}

impl Body for TrackedBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        if this.ended || this.failed {
            return Poll::Ready(None);
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if frame.is_data() && !this.first_seen {
                    this.on_first_chunk();
                }
                if let Some(timer) = this.idle_timer.as_mut() {
                    timer
                        .as_mut()
                        .reset(tokio::time::Instant::now() + this.idle);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(None) => {
                this.ended = true;
                if let Some(lease) = this.lease.take() {
                    lease.release();
                }
                if !this.first_seen {
                    this.on_first_chunk();
                }
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(e))) => {
                this.upstream_error("body");
                Poll::Ready(Some(Err(Box::new(e))))
            }
            Poll::Pending => {
                let idle = this.idle;
                let timer = this
                    .idle_timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(idle)));
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => {
                        this.upstream_error("idle");
                        Poll::Ready(Some(Err(Box::new(IdleTimeout(idle)))))
                    }
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended || self.failed || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for TrackedBody {
    fn drop(&mut self) {
        // An empty body the server never polled still ended cleanly.
        if !self.failed && self.inner.is_end_stream() {
            self.ended = true;
            if let Some(lease) = self.lease.take() {
                lease.release();
            }
        }
        let c = &self.completion;
        let m = &c.shared.metrics;
        if !self.ended && !self.failed {
            m.client_disconnects.inc();
        }
        let route = &c.routed.candidate.metrics;
        m.count(route, c.status);
        route.duration.observe(c.started.elapsed().as_secs_f64());
    }
}
