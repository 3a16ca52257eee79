//! The HTTP side: accept client requests, ask the picker over ext_proc (or take the fixed
//! endpoint), forward over pooled keep-alive connections and stream the answer back.

use crate::extproc::{self, BodyChunk};
use crate::GatewayError;
use bytes::{Bytes, BytesMut};
use envoy_types::pb::envoy::service::ext_proc::v3::external_processor_client::ExternalProcessorClient;
use envoy_types::pb::envoy::service::ext_proc::v3::{
    processing_response, ProcessingRequest, ProcessingResponse,
};
use futures_util::stream;
use http::header::{HeaderValue, CONTENT_LENGTH, CONTENT_TYPE, HOST};
use http::{Request, Response, StatusCode, Uri};
use http_body::{Body as _, Frame};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tonic::transport::{Channel, Endpoint};
use tonic::Streaming;

/// Errors inside a body stream.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// Every body the gateway sends, to the client or upstream.
pub type GatewayBody = BoxBody<Bytes, BoxError>;

/// The response header naming the endpoint that served the request.
pub const REPLICA_HEADER: &str = "x-warmpath-replica";

/// Where requests go.
#[derive(Debug, Clone)]
pub enum Mode {
    /// Ask the picker at this gRPC address (`host:port` or `http://host:port`).
    Picker(String),
    /// Forward everything to this `host:port`, no picker.
    Fixed(String),
}

enum Route {
    Picker(Channel),
    Fixed(String),
}

/// The gateway: a route and a pooled HTTP client to the engines.
pub struct Gateway {
    route: Route,
    client: Client<HttpConnector, GatewayBody>,
    next_id: AtomicU64,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway").finish_non_exhaustive()
    }
}

impl Gateway {
    /// A gateway for `mode`. The picker's channel connects lazily (one HTTP/2 connection
    /// multiplexing every request's stream, as Envoy's ext_proc cluster does), so a picker
    /// that is not up yet makes requests fail with 503 rather than the gateway.
    pub fn new(mode: Mode) -> Result<Self, GatewayError> {
        let route = match mode {
            Mode::Fixed(endpoint) => Route::Fixed(endpoint),
            Mode::Picker(address) => {
                let uri = if address.contains("://") {
                    address
                } else {
                    format!("http://{address}")
                };
                let endpoint = Endpoint::from_shared(uri)
                    .map_err(|e| GatewayError::PickerProtocol(format!("picker address: {e}")))?
                    .tcp_nodelay(true)
                    .connect_timeout(Duration::from_secs(2))
                    .http2_keep_alive_interval(Duration::from_secs(30));
                Route::Picker(endpoint.connect_lazy())
            }
        };
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_max_idle_per_host(1024)
            .build(connector);
        Ok(Gateway {
            route,
            client,
            next_id: AtomicU64::new(0),
        })
    }

    /// Handles one client request; never fails (errors become OpenAI-shaped responses).
    pub async fn handle(&self, req: Request<Incoming>) -> Response<GatewayBody> {
        let result = match &self.route {
            Route::Fixed(endpoint) => self.forward_fixed(req, endpoint).await,
            Route::Picker(channel) => self.via_picker(req, channel.clone()).await,
        };
        result.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "request failed");
            error_response(e.status(), &e.to_string())
        })
    }

    async fn forward_fixed(
        &self,
        req: Request<Incoming>,
        endpoint: &str,
    ) -> Result<Response<GatewayBody>, GatewayError> {
        let (mut parts, body) = req.into_parts();
        parts.uri = upstream_uri(endpoint, parts.uri.path_and_query().map(|p| p.as_str()))?;
        strip_hop_by_hop(&mut parts.headers);
        let upstream = Request::from_parts(parts, body.map_err(BoxError::from).boxed());
        let response = self.send(upstream, endpoint).await?;
        let (mut parts, body) = response.into_parts();
        strip_hop_by_hop(&mut parts.headers);
        insert_replica(&mut parts.headers, endpoint);
        Ok(Response::from_parts(
            parts,
            body.map_err(BoxError::from).boxed(),
        ))
    }

    async fn send(
        &self,
        req: Request<GatewayBody>,
        endpoint: &str,
    ) -> Result<Response<Incoming>, GatewayError> {
        self.client
            .request(req)
            .await
            .map_err(|source| GatewayError::Upstream {
                endpoint: endpoint.to_owned(),
                source,
            })
    }

    async fn via_picker(
        &self,
        req: Request<Incoming>,
        channel: Channel,
    ) -> Result<Response<GatewayBody>, GatewayError> {
        let (mut parts, body) = req.into_parts();
        if !parts.headers.contains_key("x-request-id") {
            let id = format!(
                "wpgw-{}-{}",
                std::process::id(),
                self.next_id.fetch_add(1, Ordering::Relaxed)
            );
            if let Ok(value) = HeaderValue::from_str(&id) {
                parts.headers.insert("x-request-id", value);
            }
        }
        let path = parts
            .uri
            .path_and_query()
            .map_or_else(|| "/".to_owned(), |p| p.as_str().to_owned());
        let authority = parts
            .headers
            .get(HOST)
            .and_then(|h| h.to_str().ok())
            .map(str::to_owned)
            .or_else(|| parts.uri.authority().map(|a| a.to_string()))
            .unwrap_or_default();
        let body_empty = body.is_end_stream();

        // The stream to the picker: headers now, the body as it arrives (a task of its own,
        // since the picker answers only once it has the whole body).
        let (tx, rx) = mpsc::channel::<ProcessingRequest>(64);
        let headers_msg =
            extproc::request_headers(&parts.method, &path, &authority, &parts.headers, body_empty);
        tx.send(headers_msg)
            .await
            .map_err(|_| GatewayError::PickerProtocol("request stream closed".into()))?;
        if !body_empty {
            tokio::spawn(pump_request_body(body, tx.clone()));
        }
        let mut rx = rx;
        let outbound = stream::poll_fn(move |cx| rx.poll_recv(cx));
        let mut client = ExternalProcessorClient::new(channel)
            .max_decoding_message_size(64 << 20)
            .max_encoding_message_size(64 << 20);
        let mut inbound = client
            .process(outbound)
            .await
            .map_err(GatewayError::PickerUnreachable)?
            .into_inner();

        // Request phase: the headers response (the decision), then the body back.
        let mut destination = None;
        let mut headers_done = false;
        let mut body_done = body_empty;
        let mut forward_body = BytesMut::new();
        while !(headers_done && body_done) {
            let msg = next(&mut inbound).await?;
            match msg.response {
                Some(processing_response::Response::ImmediateResponse(ir)) => {
                    return Ok(immediate(&ir));
                }
                Some(processing_response::Response::RequestHeaders(h)) => {
                    let mutation = extproc::mutation_of(h.response.as_ref());
                    destination = extproc::destination(msg.dynamic_metadata.as_ref(), mutation);
                    if let Some(mutation) = mutation {
                        if let Some(new_path) =
                            extproc::apply_header_mutation(&mut parts.headers, mutation)
                        {
                            parts.uri = new_path.parse().map_err(|e| {
                                GatewayError::BadUpstreamRequest(format!("path {new_path}: {e}"))
                            })?;
                        }
                    }
                    headers_done = true;
                }
                Some(processing_response::Response::RequestBody(b)) => {
                    match extproc::body_chunk(b.response.as_ref()) {
                        BodyChunk::Streamed(chunk, eos) => {
                            forward_body.extend_from_slice(&chunk);
                            body_done = eos;
                        }
                        BodyChunk::Replaced(all) => {
                            forward_body = BytesMut::from(&all[..]);
                            body_done = true;
                        }
                        BodyChunk::Cleared => {
                            forward_body.clear();
                            body_done = true;
                        }
                        BodyChunk::Missing => {
                            return Err(GatewayError::PickerProtocol(
                                "a request body response without a streamed body".into(),
                            ));
                        }
                    }
                }
                other => {
                    tracing::debug!(?other, "ignored picker message in the request phase");
                }
            }
        }
        let endpoint = destination.ok_or_else(|| {
            GatewayError::PickerProtocol(format!("no {}", extproc::DESTINATION_ENDPOINT))
        })?;

        // Forward the request as the picker left it.
        let path = parts.uri.path_and_query().map(|p| p.as_str().to_owned());
        parts.uri = upstream_uri(&endpoint, path.as_deref())?;
        strip_hop_by_hop(&mut parts.headers);
        parts.headers.remove(extproc::DESTINATION_ENDPOINT);
        let forward_body = forward_body.freeze();
        if body_empty {
            parts.headers.remove(CONTENT_LENGTH);
        } else {
            parts
                .headers
                .insert(CONTENT_LENGTH, HeaderValue::from(forward_body.len()));
        }
        let upstream = Request::from_parts(
            parts,
            Full::new(forward_body).map_err(BoxError::from).boxed(),
        );
        let response = self.send(upstream, &endpoint).await?;

        // Response phase: headers to the picker and its mutation back.
        let (mut rparts, rbody) = response.into_parts();
        strip_hop_by_hop(&mut rparts.headers);
        let sent = tx
            .send(extproc::response_headers(
                rparts.status,
                &rparts.headers,
                &endpoint,
            ))
            .await
            .is_ok();
        let answer = if sent {
            inbound
                .message()
                .await
                .map_err(GatewayError::PickerStream)?
        } else {
            None
        };
        insert_replica(&mut rparts.headers, &endpoint);
        let Some(answer) = answer else {
            // The picker skipped response processing and closed its stream: pass through.
            drop(tx);
            return Ok(Response::from_parts(
                rparts,
                rbody.map_err(BoxError::from).boxed(),
            ));
        };
        match answer.response {
            Some(processing_response::Response::ImmediateResponse(ir)) => {
                return Ok(immediate(&ir));
            }
            Some(processing_response::Response::ResponseHeaders(h)) => {
                if let Some(mutation) = extproc::mutation_of(h.response.as_ref()) {
                    extproc::apply_header_mutation(&mut rparts.headers, mutation);
                }
            }
            other => {
                return Err(GatewayError::PickerProtocol(format!(
                    "expected a response headers answer, got {other:?}"
                )));
            }
        }
        // The body the client sees is the picker's streamed body, which may differ in length.
        rparts.headers.remove(CONTENT_LENGTH);
        let (client_tx, mut client_rx) = mpsc::channel::<Result<Frame<Bytes>, BoxError>>(64);
        tokio::spawn(relay_response(rbody, tx, inbound, client_tx));
        let body = StreamBody::new(stream::poll_fn(move |cx| client_rx.poll_recv(cx)));
        Ok(Response::from_parts(rparts, BodyExt::boxed(body)))
    }
}

/// Sends the client's body to the picker chunk by chunk, the last chunk `end_of_stream`.
async fn pump_request_body(mut body: Incoming, tx: mpsc::Sender<ProcessingRequest>) {
    loop {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    let eos = body.is_end_stream();
                    if tx.send(extproc::request_body(data, eos)).await.is_err() || eos {
                        return;
                    }
                }
            }
            Some(Err(e)) => {
                tracing::debug!(error = %e, "client body failed");
                return;
            }
            None => {
                let _ = tx.send(extproc::request_body(Bytes::new(), true)).await;
                return;
            }
        }
    }
}

/// Sends the upstream's body to the picker and the picker's body to the client, both chunk by
/// chunk and at the same time. Ends when the picker's last chunk is out (or the client or the
/// picker went away: the upstream body is then dropped, which closes its connection); only then
/// is the stream to the picker closed, as Envoy keeps it open until the last answer.
async fn relay_response(
    mut upstream: Incoming,
    to_picker: mpsc::Sender<ProcessingRequest>,
    mut inbound: Streaming<ProcessingResponse>,
    to_client: mpsc::Sender<Result<Frame<Bytes>, BoxError>>,
) {
    let _open = to_picker.clone();
    let feed = async move {
        loop {
            match upstream.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        if to_picker
                            .send(extproc::response_body(data, false))
                            .await
                            .is_err()
                        {
                            return;
                        }
                    }
                }
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "upstream body failed");
                    return;
                }
                None => {
                    let _ = to_picker
                        .send(extproc::response_body(Bytes::new(), true))
                        .await;
                    return;
                }
            }
        }
    };
    let relay = async move {
        loop {
            let msg = match inbound.message().await {
                Ok(Some(msg)) => msg,
                Ok(None) => {
                    let _ = to_client
                        .send(Err("picker closed its stream before the body ended".into()))
                        .await;
                    return;
                }
                Err(status) => {
                    let _ = to_client.send(Err(Box::new(status))).await;
                    return;
                }
            };
            let Some(processing_response::Response::ResponseBody(b)) = msg.response else {
                tracing::debug!(?msg, "ignored picker message in the response phase");
                continue;
            };
            let (chunk, eos) = match extproc::body_chunk(b.response.as_ref()) {
                BodyChunk::Streamed(chunk, eos) => (chunk, eos),
                BodyChunk::Replaced(all) => (all, true),
                BodyChunk::Cleared => (Bytes::new(), true),
                BodyChunk::Missing => {
                    let _ = to_client
                        .send(Err("a response body answer without a streamed body".into()))
                        .await;
                    return;
                }
            };
            if !chunk.is_empty() && to_client.send(Ok(Frame::data(chunk))).await.is_err() {
                return;
            }
            if eos {
                return;
            }
        }
    };
    tokio::pin!(feed, relay);
    tokio::select! {
        () = &mut relay => {}
        () = &mut feed => relay.await,
    }
}

async fn next(
    inbound: &mut Streaming<ProcessingResponse>,
) -> Result<ProcessingResponse, GatewayError> {
    match inbound.message().await {
        Ok(Some(msg)) => Ok(msg),
        Ok(None) => Err(GatewayError::PickerProtocol(
            "stream closed before the picker decided".into(),
        )),
        Err(status) => Err(GatewayError::PickerStream(status)),
    }
}

fn upstream_uri(endpoint: &str, path: Option<&str>) -> Result<Uri, GatewayError> {
    let uri = format!("http://{endpoint}{}", path.unwrap_or("/"));
    uri.parse()
        .map_err(|e| GatewayError::BadUpstreamRequest(format!("{uri}: {e}")))
}

fn strip_hop_by_hop(headers: &mut http::HeaderMap) {
    let names: Vec<_> = headers
        .keys()
        .filter(|k| extproc::is_hop_by_hop(k.as_str()))
        .cloned()
        .collect();
    for name in names {
        headers.remove(name);
    }
}

fn insert_replica(headers: &mut http::HeaderMap, endpoint: &str) {
    if let Ok(value) = HeaderValue::from_str(endpoint) {
        headers.insert(REPLICA_HEADER, value);
    }
}

fn immediate(
    ir: &envoy_types::pb::envoy::service::ext_proc::v3::ImmediateResponse,
) -> Response<GatewayBody> {
    let (status, headers, body) = extproc::immediate_parts(ir);
    let mut response = Response::new(Full::new(body).map_err(BoxError::from).boxed());
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    response
}

fn error_response(status: StatusCode, message: &str) -> Response<GatewayBody> {
    let body = format!(
        "{{\"error\":{{\"message\":{},\"type\":\"gateway_error\",\"code\":{}}}}}",
        json_string(message),
        status.as_u16()
    );
    let mut response = Response::new(Full::new(Bytes::from(body)).map_err(BoxError::from).boxed());
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Serves `gateway` on `listener` until the task is dropped: HTTP/1.1 (keep-alive) and h2c.
pub async fn serve(listener: TcpListener, gateway: Arc<Gateway>) -> std::io::Result<()> {
    loop {
        let (socket, _) = listener.accept().await?;
        let _ = socket.set_nodelay(true);
        let gateway = Arc::clone(&gateway);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let gateway = Arc::clone(&gateway);
                async move { Ok::<_, std::convert::Infallible>(gateway.handle(req).await) }
            });
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            if let Err(e) = builder
                .serve_connection(TokioIo::new(socket), service)
                .await
            {
                tracing::debug!(error = %e, "client connection ended");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::json_string;

    #[test]
    fn json_string_escapes() {
        assert_eq!(json_string("a\"b\\c\n"), "\"a\\\"b\\\\c\\u000a\"");
    }
}
