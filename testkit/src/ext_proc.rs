//! A Gateway's side of Envoy's external processing protocol (ext_proc), from Envoy's own protos
//! (`envoy-types`): per request it sends what Envoy sends (request headers with `:method` and
//! `:path`, the body in chunks, then the upstream's response), forwards the request to the
//! endpoint the picker named, as Envoy would, and records what the picker said. For the tests
//! of warmpath's endpoint-picker mode, in process and on a cluster.

use envoy_types::pb::envoy::config::core::v3::{
    HeaderMap as EnvoyHeaders, HeaderValue as EnvoyHeader, Metadata,
};
pub use envoy_types::pb::envoy::extensions::filters::http::ext_proc::v3::processing_mode::BodySendMode;
use envoy_types::pb::envoy::service::ext_proc::v3::external_processor_client::ExternalProcessorClient;
pub use envoy_types::pb::envoy::service::ext_proc::v3::{
    body_mutation, processing_request, processing_response, CommonResponse, HttpBody, HttpHeaders,
    ProcessingRequest, ProcessingResponse, ProtocolConfiguration,
};
use envoy_types::pb::google::protobuf::{value::Kind, ListValue, Struct, Value};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::sync::mpsc;
use tonic::transport::Channel;
pub use tonic::{Code, Status, Streaming};

pub type Client = ExternalProcessorClient<Channel>;

/// One HTTP request as a client sends it through the Gateway.
#[derive(Clone)]
pub struct Call {
    pub method: &'static str,
    pub path: &'static str,
    pub body: Vec<u8>,
    /// The body's chunks as the Gateway reads them off the client.
    pub chunks: usize,
    /// `envoy.lb.subset_hint`.
    pub subset: Option<Vec<String>>,
    pub mode: BodySendMode,
    /// More request headers.
    pub headers: Vec<(&'static str, String)>,
}

impl Call {
    pub fn post(path: &'static str, body: impl Into<Vec<u8>>) -> Call {
        Call {
            method: "POST",
            path,
            body: body.into(),
            chunks: 3,
            subset: None,
            mode: BodySendMode::FullDuplexStreamed,
            headers: Vec::new(),
        }
    }

    pub fn with(mut self, name: &'static str, value: &str) -> Call {
        self.headers.push((name, value.to_owned()));
        self
    }
}

/// What the picker told the Gateway, and what came of it.
#[derive(Debug, Default)]
pub struct Told {
    /// `x-gateway-destination-endpoint` as set on the request.
    pub destination: Option<String>,
    /// `envoy.lb` / `x-gateway-destination-endpoint` in the dynamic metadata.
    pub metadata: Option<String>,
    pub removed: Vec<String>,
    /// Other request headers the picker set (a new body's `content-length`).
    pub set: HashMap<String, String>,
    pub clear_route_cache: bool,
    /// The request body as handed back (full duplex), or as it replaced a buffered one.
    pub body: Vec<u8>,
    /// A local reply: status, headers, JSON body.
    pub immediate: Option<(u16, HashMap<String, String>, serde_json::Value)>,
    pub upstream_status: Option<u16>,
    /// Headers the picker set on the response.
    pub response_headers: HashMap<String, String>,
    /// The response body as handed back.
    pub response_body: Vec<u8>,
}

pub fn header(key: &str, value: &str) -> EnvoyHeader {
    EnvoyHeader {
        key: key.to_owned(),
        raw_value: value.as_bytes().to_vec(),
        ..Default::default()
    }
}

pub fn string(s: &str) -> Value {
    Value {
        kind: Some(Kind::StringValue(s.to_owned())),
    }
}

pub fn headers_message(call: &Call) -> ProcessingRequest {
    let mut headers = vec![
        header(":method", call.method),
        header(":path", call.path),
        header(":authority", "gateway.example"),
        header(":scheme", "http"),
        header("x-request-id", "0f1e2d3c"),
    ];
    headers.extend(call.headers.iter().map(|(k, v)| header(k, v)));
    if !call.body.is_empty() {
        headers.push(header("content-type", "application/json"));
        headers.push(header("content-length", &call.body.len().to_string()));
    }
    let metadata_context = call.subset.as_ref().map(|subset| Metadata {
        filter_metadata: [(
            "envoy.lb.subset_hint".to_owned(),
            Struct {
                fields: [(
                    "x-gateway-destination-endpoint-subset".to_owned(),
                    Value {
                        kind: Some(Kind::ListValue(ListValue {
                            values: subset.iter().map(|e| string(e)).collect(),
                        })),
                    },
                )]
                .into_iter()
                .collect(),
            },
        )]
        .into_iter()
        .collect(),
        ..Default::default()
    });
    ProcessingRequest {
        request: Some(processing_request::Request::RequestHeaders(HttpHeaders {
            headers: Some(EnvoyHeaders { headers }),
            end_of_stream: call.body.is_empty(),
            ..Default::default()
        })),
        // Envoy says its modes on a stream's first message.
        protocol_config: Some(ProtocolConfiguration {
            request_body_mode: call.mode as i32,
            response_body_mode: call.mode as i32,
            ..Default::default()
        }),
        metadata_context,
        ..Default::default()
    }
}

pub fn body_message(response: bool, chunk: &[u8], end_of_stream: bool) -> ProcessingRequest {
    let body = HttpBody {
        body: chunk.to_vec(),
        end_of_stream,
        ..Default::default()
    };
    ProcessingRequest {
        request: Some(if response {
            processing_request::Request::ResponseBody(body)
        } else {
            processing_request::Request::RequestBody(body)
        }),
        ..Default::default()
    }
}

pub fn response_headers_message(status: u16, content_type: &str) -> ProcessingRequest {
    ProcessingRequest {
        request: Some(processing_request::Request::ResponseHeaders(HttpHeaders {
            headers: Some(EnvoyHeaders {
                headers: vec![
                    header(":status", &status.to_string()),
                    header("content-type", content_type),
                ],
            }),
            ..Default::default()
        })),
        ..Default::default()
    }
}

/// `body` in `n` nearly equal chunks (at least one).
pub fn chunks(body: &[u8], n: usize) -> Vec<&[u8]> {
    let size = body.len().div_ceil(n.max(1)).max(1);
    let mut out: Vec<&[u8]> = body.chunks(size).collect();
    if out.is_empty() {
        out.push(&[]);
    }
    out
}

pub type Sender = mpsc::Sender<ProcessingRequest>;

/// A new ext_proc stream: the Gateway's side to send on, the picker's answers.
pub async fn open(client: &mut Client) -> Result<(Sender, Streaming<ProcessingResponse>), Status> {
    open_as(client, None).await
}

/// [`open`], with `authorization` in the stream's metadata as a Gateway configured with a
/// token sends it.
pub async fn open_as(
    client: &mut Client,
    authorization: Option<&str>,
) -> Result<(Sender, Streaming<ProcessingResponse>), Status> {
    let (tx, rx) = mpsc::channel(64);
    let outbound =
        futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|m| (m, rx)) });
    let mut request = tonic::Request::new(outbound);
    if let Some(value) = authorization {
        request
            .metadata_mut()
            .insert("authorization", value.parse().expect("ASCII metadata"));
    }
    let inbound = client.process(request).await?.into_inner();
    Ok((tx, inbound))
}

pub async fn next(
    inbound: &mut Streaming<ProcessingResponse>,
) -> Result<Option<ProcessingResponse>, Status> {
    tokio::time::timeout(Duration::from_secs(10), inbound.message())
        .await
        .expect("the picker answers within 10 s")
}

/// The destination and the rest of a request-side answer.
pub fn read_common(told: &mut Told, common: Option<&CommonResponse>, metadata: Option<&Struct>) {
    if let Some(m) = common.and_then(|c| c.header_mutation.as_ref()) {
        for h in &m.set_headers {
            let h = h.header.as_ref().expect("a header");
            let value = String::from_utf8(h.raw_value.clone()).unwrap();
            if h.key == "x-gateway-destination-endpoint" {
                told.destination = Some(value);
            } else {
                told.set.insert(h.key.clone(), value);
            }
        }
        told.removed.extend(m.remove_headers.iter().cloned());
    }
    told.clear_route_cache |= common.is_some_and(|c| c.clear_route_cache);
    if let Some(Kind::StructValue(lb)) = metadata
        .and_then(|m| m.fields.get("envoy.lb"))
        .and_then(|v| v.kind.as_ref())
    {
        if let Some(Kind::StringValue(e)) = lb
            .fields
            .get("x-gateway-destination-endpoint")
            .and_then(|v| v.kind.as_ref())
        {
            told.metadata = Some(e.clone());
        }
    }
}

pub fn streamed(common: Option<&CommonResponse>) -> (Vec<u8>, bool) {
    match common
        .and_then(|c| c.body_mutation.as_ref())
        .and_then(|b| b.mutation.as_ref())
    {
        Some(body_mutation::Mutation::StreamedResponse(s)) => (s.body.clone(), s.end_of_stream),
        other => panic!("a streamed body answer, not {other:?}"),
    }
}

pub fn immediate(
    told: &mut Told,
    r: &envoy_types::pb::envoy::service::ext_proc::v3::ImmediateResponse,
) {
    let headers = r
        .headers
        .iter()
        .flat_map(|m| &m.set_headers)
        .filter_map(|h| h.header.as_ref())
        .map(|h| {
            (
                h.key.clone(),
                String::from_utf8(h.raw_value.clone()).unwrap(),
            )
        })
        .collect();
    let body = serde_json::from_slice(&r.body).expect("a JSON body");
    told.immediate = Some((r.status.as_ref().unwrap().code as u16, headers, body));
}

/// After the request phase: Envoy sends the request where it was told, and passes the
/// response through the picker (headers, then the body in two chunks), as in GIE's mode.
pub async fn upstream(
    call: &Call,
    told: &mut Told,
    tx: &Sender,
    inbound: &mut Streaming<ProcessingResponse>,
    full_duplex_response: bool,
) -> Result<(), Status> {
    let Some(destination) = told.destination.clone() else {
        return Ok(());
    };
    let addr: SocketAddr = destination.parse().expect("IP:PORT");
    // The body as the picker handed it back or replaced it, else the client's.
    let body = if full_duplex_response || !told.body.is_empty() {
        told.body.clone()
    } else {
        call.body.clone()
    };
    let reply = crate::send(
        addr,
        call.method,
        call.path,
        &[("content-type", "application/json")],
        body,
        Duration::from_secs(20),
    )
    .await
    .expect("the chosen endpoint answers");
    told.upstream_status = Some(reply.status);
    let content_type = reply.header("content-type").unwrap_or("").to_owned();
    tx.send(response_headers_message(reply.status, &content_type))
        .await
        .unwrap();
    match next(inbound).await?.and_then(|m| m.response) {
        Some(processing_response::Response::ResponseHeaders(h)) => {
            for o in h
                .response
                .iter()
                .flat_map(|c| &c.header_mutation)
                .flat_map(|m| &m.set_headers)
            {
                let h = o.header.as_ref().unwrap();
                told.response_headers.insert(
                    h.key.clone(),
                    String::from_utf8(h.raw_value.clone()).unwrap(),
                );
            }
        }
        other => panic!("a response headers answer, not {other:?}"),
    }
    let parts = chunks(reply.body.as_bytes(), 2);
    let n = parts.len();
    for (i, part) in parts.into_iter().enumerate() {
        tx.send(body_message(true, part, i + 1 == n)).await.unwrap();
        match next(inbound).await?.and_then(|m| m.response) {
            Some(processing_response::Response::ResponseBody(b)) if full_duplex_response => {
                let (chunk, eos) = streamed(b.response.as_ref());
                assert_eq!(eos, i + 1 == n);
                told.response_body.extend_from_slice(&chunk);
            }
            Some(processing_response::Response::ResponseBody(b)) => {
                assert_eq!(b.response, Some(CommonResponse::default()));
            }
            other => panic!("a response body answer, not {other:?}"),
        }
    }
    Ok(())
}

/// One request through the Gateway in GIE's mode (bodies in full duplex).
pub async fn through(client: &mut Client, call: &Call) -> Result<Told, Status> {
    through_as(client, call, None).await
}

/// [`through`] on a stream opened with [`open_as`].
pub async fn through_as(
    client: &mut Client,
    call: &Call,
    authorization: Option<&str>,
) -> Result<Told, Status> {
    let (tx, mut inbound) = open_as(client, authorization).await?;
    let mut told = Told::default();
    tx.send(headers_message(call)).await.unwrap();
    if !call.body.is_empty() {
        // Full duplex: the body follows without waiting for an answer.
        let parts = chunks(&call.body, call.chunks);
        let n = parts.len();
        for (i, part) in parts.into_iter().enumerate() {
            tx.send(body_message(false, part, i + 1 == n))
                .await
                .unwrap();
        }
    }
    let first = next(&mut inbound).await?.expect("an answer");
    match &first.response {
        Some(processing_response::Response::ImmediateResponse(r)) => {
            immediate(&mut told, r);
            drop(tx);
            assert!(
                next(&mut inbound).await?.is_none(),
                "the stream ends after a local reply"
            );
            return Ok(told);
        }
        Some(processing_response::Response::RequestHeaders(h)) => {
            read_common(
                &mut told,
                h.response.as_ref(),
                first.dynamic_metadata.as_ref(),
            );
        }
        other => panic!("a request headers answer, not {other:?}"),
    }
    if !call.body.is_empty() {
        loop {
            match next(&mut inbound).await?.and_then(|m| m.response) {
                Some(processing_response::Response::RequestBody(b)) => {
                    let (chunk, eos) = streamed(b.response.as_ref());
                    told.body.extend_from_slice(&chunk);
                    if eos {
                        break;
                    }
                }
                other => panic!("the request body handed back, not {other:?}"),
            }
        }
    }
    upstream(call, &mut told, &tx, &mut inbound, true).await?;
    drop(tx);
    assert!(
        next(&mut inbound).await?.is_none(),
        "the stream ends with the Gateway's"
    );
    Ok(told)
}

/// One request in `BUFFERED` mode: the headers wait for their answer, the body comes whole.
pub async fn through_buffered(client: &mut Client, call: &Call) -> Result<Told, Status> {
    let (tx, mut inbound) = open(client).await?;
    let mut told = Told::default();
    tx.send(headers_message(call)).await.unwrap();
    match next(&mut inbound).await?.and_then(|m| m.response) {
        Some(processing_response::Response::RequestHeaders(h)) => {
            assert_eq!(
                h.response, None,
                "headers go on unchanged until the body is read"
            );
        }
        // Refused on its head alone (no tenant proved): the body is never asked for.
        Some(processing_response::Response::ImmediateResponse(r)) => {
            immediate(&mut told, &r);
            return Ok(told);
        }
        other => panic!("a request headers answer, not {other:?}"),
    }
    tx.send(body_message(false, &call.body, true))
        .await
        .unwrap();
    let answer = next(&mut inbound).await?.expect("an answer");
    match &answer.response {
        Some(processing_response::Response::RequestBody(b)) => {
            read_common(
                &mut told,
                b.response.as_ref(),
                answer.dynamic_metadata.as_ref(),
            );
            // A buffered body goes on as it is, or replaced whole.
            match b
                .response
                .as_ref()
                .unwrap()
                .body_mutation
                .as_ref()
                .and_then(|m| m.mutation.as_ref())
            {
                None => {}
                Some(body_mutation::Mutation::Body(body)) => told.body = body.clone(),
                other => panic!("a buffered body replaced whole, not {other:?}"),
            }
        }
        Some(processing_response::Response::ImmediateResponse(r)) => {
            immediate(&mut told, r);
            return Ok(told);
        }
        other => panic!("a request body answer, not {other:?}"),
    }
    upstream(call, &mut told, &tx, &mut inbound, false).await?;
    drop(tx);
    assert!(next(&mut inbound).await?.is_none());
    Ok(told)
}

/// A Gateway's connection to the endpoint picker listening on `addr`.
pub async fn connect(addr: SocketAddr) -> Client {
    ExternalProcessorClient::connect(format!("http://{addr}"))
        .await
        .expect("connect to the endpoint picker")
}
