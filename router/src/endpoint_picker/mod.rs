//! Endpoint-picker mode: the router serves Envoy's external processing protocol (ext_proc, gRPC)
//! as the Gateway API Inference Extension's endpoint pickers do, so that a Gateway (Envoy,
//! Istio, kgateway, GKE…) in front of an InferencePool sends each request where warmpath would.
//!
//! Per request (one ext_proc stream), in GIE's processing mode (request and response headers
//! sent, bodies `FULL_DUPLEX_STREAMED`), and in `BUFFERED` request-body mode too:
//!
//! ```text
//! Gateway                                   picker
//! request_headers (:method, :path, …)  ──▶  held (full duplex) / answered CONTINUE (buffered)
//! request_body … end_of_stream         ──▶  parse, admit, choose: the proxy's own stages
//!                                      ◀──  request_headers answer: x-gateway-destination-endpoint
//!                                           = IP:PORT, clear_route_cache, dynamic metadata
//!                                           envoy.lb/x-gateway-destination-endpoint = IP:PORT
//!                                      ◀──  the body handed back in ≤ 62 kB streamed chunks
//!                                           (buffered: the body's answer carries the above)
//! response_headers                     ──▶  ◀── x-warmpath-replica, the session token
//! response_body … end_of_stream        ──▶  ◀── each chunk handed back; first byte, usage,
//!                                           outcome counted as the proxy counts them
//! ```
//!
//! A request the picker cannot route (unknown model, unreadable or too large body, no ready
//! replica, a tenant refused) is answered with the proxy's own error as an ImmediateResponse
//! (status, `retry-after`, OpenAI-shaped JSON) under `failure_mode: closed` (the pools serving its
//! model say, when they do: a GIE pool's `endpointPickerRef.failureMode`; else
//! `endpoint_picker.failure_mode`); under `open` it goes on with no destination (and any client-sent one removed) for the Gateway to route. Flow
//! control's 429 is always answered: it is a verdict, not a failure. A Gateway's
//! `envoy.lb.subset_hint` restricts the pick to its endpoints (none eligible: 503). Requests that
//! are not inference requests (`GET /v1/models`) get a ready replica in turn.
//!
//! Not (yet) done here: the P/D split (a decode replica is picked and serves the whole
//! request); fallback endpoints after the first (the Gateway retries on its own); the gRPC
//! health service (the admin listener's `/readyz` says the same).

mod pick;
mod stream;
pub mod wire;

pub use pick::Parts;

use crate::config::Config;
use envoy_types::pb::envoy::service::ext_proc::v3::external_processor_server::{
    ExternalProcessor, ExternalProcessorServer,
};
use envoy_types::pb::envoy::service::ext_proc::v3::{ProcessingRequest, ProcessingResponse};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch, Semaphore};
use tonic::transport::server::TcpIncoming;
use tonic::{Request, Response, Status, Streaming};

/// What the picker reads from the configuration at start.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    pub max_streams: usize,
    /// Largest ext_proc message accepted: a buffered body arrives whole in one.
    pub max_message_bytes: usize,
    pub body_budget_bytes: usize,
    pub drain: Duration,
    /// Asked of every stream when set (`endpoint_picker.token_file`, read by the caller).
    pub token: Option<crate::admin::AdminToken>,
}

impl Options {
    pub fn of(config: &Config) -> Self {
        Self {
            max_streams: config.endpoint_picker.max_streams,
            // Room for the headers and framing around the largest body (a larger body in one
            // message is refused by the decoder itself, with RESOURCE_EXHAUSTED).
            max_message_bytes: config.limits.max_body_bytes.saturating_add(1 << 20),
            body_budget_bytes: config.limits.max_buffered_body_bytes,
            drain: Duration::from_millis(config.shutdown.drain_ms),
            token: None,
        }
    }
}

/// Messages answered ahead of the Gateway's reading: enough for a body's chunks to flow, few
/// enough that a Gateway that stops reading stops the stream (it then stops being read).
const OUTBOUND_QUEUE: usize = 16;

#[derive(Clone)]
struct Picker {
    shared: Arc<stream::Shared>,
    streams: Arc<Semaphore>,
    token: Option<crate::admin::AdminToken>,
}

/// The answers of one stream; its slot among the open streams goes when the Gateway drops it.
struct Outbound {
    rx: mpsc::Receiver<Result<ProcessingResponse, Status>>,
    _slot: tokio::sync::OwnedSemaphorePermit,
}

impl futures_util::Stream for Outbound {
    type Item = Result<ProcessingResponse, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx)
    }
}

#[tonic::async_trait]
impl ExternalProcessor for Picker {
    type ProcessStream = Outbound;

    async fn process(
        &self,
        request: Request<Streaming<ProcessingRequest>>,
    ) -> Result<Response<Outbound>, Status> {
        // Before anything is held or read: a caller without the token gets nothing.
        if let Some(token) = &self.token {
            let authorization = request
                .metadata()
                .get("authorization")
                .map(|v| v.as_bytes());
            if !token.matches(authorization) {
                return Err(Status::unauthenticated(
                    "the endpoint picker asks for `authorization: Bearer <token>` in the stream's metadata",
                ));
            }
        }
        let slot = self.streams.clone().try_acquire_owned().map_err(|_| {
            Status::resource_exhausted("the endpoint picker has as many streams open as it may")
        })?;
        let peer = request.remote_addr();
        let (tx, rx) = mpsc::channel(OUTBOUND_QUEUE);
        // Its own task: the stream reads the Gateway's messages while answers wait to be sent,
        // and ends (with its guards) when the Gateway goes.
        tokio::spawn(stream::run(
            self.shared.clone(),
            request.into_inner(),
            tx,
            peer,
        ));
        Ok(Response::new(Outbound { rx, _slot: slot }))
    }
}

/// Serve ext_proc on `listener` until `shutdown`; then open streams have `options.drain` to end
/// before they are cut.
pub async fn serve(
    listener: TcpListener,
    parts: Parts,
    options: Options,
    shutdown: watch::Receiver<bool>,
) {
    let (cut, cut_rx) = watch::channel(false);
    let kib = options
        .body_budget_bytes
        .div_ceil(1024)
        .clamp(1, Semaphore::MAX_PERMITS);
    let picker = Picker {
        shared: Arc::new(stream::Shared {
            core: pick::Core::new(parts),
            body_budget: Arc::new(Semaphore::new(kib)),
            cut: cut_rx,
        }),
        streams: Arc::new(Semaphore::new(options.max_streams)),
        token: options.token,
    };
    let service =
        ExternalProcessorServer::new(picker).max_decoding_message_size(options.max_message_bytes);
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    let stopping = {
        let mut shutdown = shutdown.clone();
        async move {
            let _ = shutdown.wait_for(|s| *s).await;
        }
    };
    let server = tonic::transport::Server::builder()
        // Envoy multiplexes its requests' streams over few connections.
        .max_concurrent_streams(u32::try_from(options.max_streams).unwrap_or(u32::MAX))
        // A Gateway that vanished without closing its connections is noticed.
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .http2_keepalive_timeout(Some(Duration::from_secs(10)))
        .serve_with_incoming_shutdown(service, incoming, stopping);
    let mut server = std::pin::pin!(server);
    let mut shutdown = shutdown;
    tokio::select! {
        result = &mut server => return report(result),
        _ = shutdown.wait_for(|s| *s) => {}
    }
    // Accepting has stopped; streams in flight finish their requests.
    if let Ok(result) = tokio::time::timeout(options.drain, &mut server).await {
        return report(result);
    }
    let _ = cut.send(true);
    if tokio::time::timeout(Duration::from_secs(1), &mut server)
        .await
        .is_err()
    {
        tracing::warn!("endpoint picker: connections still open after the drain; leaving them");
    }
}

fn report(result: Result<(), tonic::transport::Error>) {
    if let Err(e) = result {
        tracing::error!("endpoint picker stopped: {e}");
    }
}
