//! The gateway against a tiny in-test picker (a tonic ext_proc server that answers the way
//! llm-d's EPP does in `FULL_DUPLEX_STREAMED` mode) and a hyper upstream: the destination is
//! taken from the picker, its mutations are applied, the body it returns is what reaches the
//! upstream, an `immediate_response` is passed through, a picker that is not there is a 503,
//! and a server-sent event stream reaches the client before the upstream has finished it.

use bytes::Bytes;
use envoy_types::pb::envoy::config::core::v3::{HeaderValue as PbHeaderValue, HeaderValueOption};
use envoy_types::pb::envoy::r#type::v3::HttpStatus;
use envoy_types::pb::envoy::service::ext_proc::v3::external_processor_server::{
    ExternalProcessor, ExternalProcessorServer,
};
use envoy_types::pb::envoy::service::ext_proc::v3::{
    body_mutation, processing_request, processing_response, BodyMutation, BodyResponse,
    CommonResponse, HeaderMutation, HeadersResponse, ImmediateResponse, ProcessingRequest,
    ProcessingResponse, StreamedBodyResponse,
};
use envoy_types::pb::google::protobuf::{value, Struct, Value};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, Notify};
use tonic::{Status, Streaming};
use warmpath_extproc_gateway::{serve, Gateway, Mode};

fn set(key: &str, value: &str) -> HeaderValueOption {
    HeaderValueOption {
        header: Some(PbHeaderValue {
            key: key.into(),
            raw_value: value.as_bytes().to_vec(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn streamed(body: Vec<u8>, end_of_stream: bool) -> Option<CommonResponse> {
    Some(CommonResponse {
        body_mutation: Some(BodyMutation {
            mutation: Some(body_mutation::Mutation::StreamedResponse(
                StreamedBodyResponse {
                    body,
                    end_of_stream,
                    ..Default::default()
                },
            )),
        }),
        ..Default::default()
    })
}

fn reply(r: processing_response::Response) -> Result<ProcessingResponse, Status> {
    Ok(ProcessingResponse {
        response: Some(r),
        ..Default::default()
    })
}

/// A picker that routes everything to `destination`, rewrites `model-a` to `model-b` in the
/// request body, refuses bodies containing `reject` with a 429, and echoes the response.
#[derive(Clone)]
struct FakePicker {
    destination: String,
    seen_request_headers: Arc<Mutex<Vec<String>>>,
}

type Outbound =
    Pin<Box<dyn futures_util::Stream<Item = Result<ProcessingResponse, Status>> + Send>>;

#[tonic::async_trait]
impl ExternalProcessor for FakePicker {
    type ProcessStream = Outbound;

    async fn process(
        &self,
        request: tonic::Request<Streaming<ProcessingRequest>>,
    ) -> Result<tonic::Response<Outbound>, Status> {
        let mut inbound = request.into_inner();
        let (tx, mut rx) = mpsc::channel(16);
        let picker = self.clone();
        tokio::spawn(async move {
            let mut body = Vec::new();
            let mut path = String::new();
            while let Ok(Some(msg)) = inbound.message().await {
                match msg.request {
                    Some(processing_request::Request::RequestHeaders(h)) => {
                        for header in h.headers.unwrap_or_default().headers {
                            if header.key == ":path" {
                                path = String::from_utf8_lossy(&header.raw_value).into_owned();
                            }
                            picker.seen_request_headers.lock().unwrap().push(header.key);
                        }
                    }
                    Some(processing_request::Request::RequestBody(b)) => {
                        body.extend_from_slice(&b.body);
                        if !b.end_of_stream {
                            continue;
                        }
                        if String::from_utf8_lossy(&body).contains("reject") {
                            let ir = ImmediateResponse {
                                status: Some(HttpStatus { code: 429 }),
                                headers: Some(HeaderMutation {
                                    set_headers: vec![set(
                                        "x-llm-d-request-dropped-reason",
                                        "test",
                                    )],
                                    ..Default::default()
                                }),
                                body: b"dropped".to_vec(),
                                ..Default::default()
                            };
                            let _ = tx
                                .send(reply(processing_response::Response::ImmediateResponse(ir)))
                                .await;
                            return;
                        }
                        let rewritten =
                            String::from_utf8_lossy(&body).replace("model-a", "model-b");
                        let lb = Struct {
                            fields: [(
                                "x-gateway-destination-endpoint".to_owned(),
                                Value {
                                    kind: Some(value::Kind::StringValue(
                                        picker.destination.clone(),
                                    )),
                                },
                            )]
                            .into_iter()
                            .collect(),
                        };
                        let headers = ProcessingResponse {
                            response: Some(processing_response::Response::RequestHeaders(
                                HeadersResponse {
                                    response: Some(CommonResponse {
                                        header_mutation: Some(HeaderMutation {
                                            set_headers: vec![
                                                set(
                                                    "x-gateway-destination-endpoint",
                                                    &picker.destination,
                                                ),
                                                set("content-length", &rewritten.len().to_string()),
                                                set("x-picker-saw-path", &path),
                                                set(":path", &path),
                                            ],
                                            ..Default::default()
                                        }),
                                        clear_route_cache: true,
                                        ..Default::default()
                                    }),
                                },
                            )),
                            dynamic_metadata: Some(Struct {
                                fields: [(
                                    "envoy.lb".to_owned(),
                                    Value {
                                        kind: Some(value::Kind::StructValue(lb)),
                                    },
                                )]
                                .into_iter()
                                .collect(),
                            }),
                            ..Default::default()
                        };
                        let _ = tx.send(Ok(headers)).await;
                        let _ = tx
                            .send(reply(processing_response::Response::RequestBody(
                                BodyResponse {
                                    response: streamed(rewritten.into_bytes(), true),
                                },
                            )))
                            .await;
                    }
                    Some(processing_request::Request::ResponseHeaders(h)) => {
                        let status = h
                            .headers
                            .unwrap_or_default()
                            .headers
                            .into_iter()
                            .find(|h| h.key == ":status")
                            .map(|h| String::from_utf8_lossy(&h.raw_value).into_owned())
                            .unwrap_or_default();
                        let _ = tx
                            .send(reply(processing_response::Response::ResponseHeaders(
                                HeadersResponse {
                                    response: Some(CommonResponse {
                                        header_mutation: Some(HeaderMutation {
                                            set_headers: vec![
                                                set("x-went-into-resp-headers", "true"),
                                                set("x-picker-saw-status", &status),
                                            ],
                                            ..Default::default()
                                        }),
                                        ..Default::default()
                                    }),
                                },
                            )))
                            .await;
                    }
                    Some(processing_request::Request::ResponseBody(b)) => {
                        let _ = tx
                            .send(reply(processing_response::Response::ResponseBody(
                                BodyResponse {
                                    response: streamed(b.body, b.end_of_stream),
                                },
                            )))
                            .await;
                    }
                    _ => {}
                }
            }
        });
        let outbound: Outbound =
            Box::pin(futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx)));
        Ok(tonic::Response::new(outbound))
    }
}

async fn start_picker(destination: String) -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let picker = FakePicker {
        destination,
        seen_request_headers: Arc::clone(&seen),
    };
    tokio::spawn(
        tonic::transport::Server::builder().serve_with_incoming_shutdown(
            ExternalProcessorServer::new(picker),
            tonic::transport::server::TcpIncoming::from(listener),
            std::future::pending::<()>(),
        ),
    );
    (address, seen)
}

type TestBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

/// An upstream: `/stream` sends one event, waits for `release`, then sends the rest; any other
/// path echoes the body with the picker's header in `x-upstream-saw`.
async fn start_upstream(release: Arc<Notify>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        loop {
            let (socket, _) = listener.accept().await.unwrap();
            let release = Arc::clone(&release);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let release = Arc::clone(&release);
                    async move {
                        let saw = req
                            .headers()
                            .get("x-picker-saw-path")
                            .cloned()
                            .unwrap_or(http::HeaderValue::from_static("-"));
                        let length = req.headers().get("content-length").cloned();
                        if req.uri().path() == "/stream" {
                            let (tx, mut rx) = mpsc::channel::<Result<Frame<Bytes>, Infallible>>(4);
                            tokio::spawn(async move {
                                let _ =
                                    tx.send(Ok(Frame::data(Bytes::from("data: one\n\n")))).await;
                                release.notified().await;
                                let _ =
                                    tx.send(Ok(Frame::data(Bytes::from("data: two\n\n")))).await;
                                let _ = tx
                                    .send(Ok(Frame::data(Bytes::from("data: [DONE]\n\n"))))
                                    .await;
                            });
                            let body: TestBody =
                                StreamBody::new(futures_util::stream::poll_fn(move |cx| {
                                    rx.poll_recv(cx)
                                }))
                                .boxed();
                            return Ok::<_, Infallible>(
                                Response::builder()
                                    .header("content-type", "text/event-stream")
                                    .body(body)
                                    .unwrap(),
                            );
                        }
                        let body = req.into_body().collect().await.unwrap().to_bytes();
                        let mut response = Response::builder()
                            .header("content-type", "application/json")
                            .header("x-upstream-saw", saw);
                        if let Some(length) = length {
                            response = response.header("x-upstream-length", length);
                        }
                        Ok(response.body(Full::new(body).boxed()).unwrap())
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(socket), service)
                    .await;
            });
        }
    });
    address
}

async fn start_gateway(mode: Mode) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let gateway = Arc::new(Gateway::new(mode).unwrap());
    tokio::spawn(serve(listener, gateway));
    address
}

async fn post(gateway: &str, path: &str, body: &str) -> Response<Incoming> {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let req = Request::post(format!("http://{gateway}{path}"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap();
    tokio::time::timeout(Duration::from_secs(10), client.request(req))
        .await
        .expect("gateway answered in time")
        .expect("request went through")
}

async fn text(response: Response<Incoming>) -> String {
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[tokio::test]
async fn routes_where_the_picker_says_with_its_mutations() {
    let upstream = start_upstream(Arc::new(Notify::new())).await;
    let (picker, seen) = start_picker(upstream.clone()).await;
    let gateway = start_gateway(Mode::Picker(picker)).await;

    let body = r#"{"model":"model-a","prompt":"hello"}"#;
    let response = post(&gateway, "/v1/completions", body).await;
    assert_eq!(response.status(), 200);
    let headers = response.headers().clone();
    assert_eq!(headers["x-warmpath-replica"], upstream.as_str());
    assert_eq!(headers["x-went-into-resp-headers"], "true");
    assert_eq!(headers["x-picker-saw-status"], "200");
    assert_eq!(headers["x-upstream-saw"], "/v1/completions");
    assert_eq!(
        headers["x-upstream-length"],
        body.len().to_string().as_str()
    );
    // The body that reached the upstream (and came back through the picker) is the rewritten one.
    assert_eq!(text(response).await, body.replace("model-a", "model-b"));

    let seen = seen.lock().unwrap().clone();
    assert_eq!(&seen[..4], [":method", ":path", ":authority", ":scheme"]);
    assert!(seen.iter().any(|k| k == "x-request-id"), "{seen:?}");
    assert!(seen.iter().any(|k| k == "content-type"), "{seen:?}");
    assert!(!seen.iter().any(|k| k == "host"), "{seen:?}");
}

#[tokio::test]
async fn an_immediate_response_reaches_the_client_as_is() {
    let upstream = start_upstream(Arc::new(Notify::new())).await;
    let (picker, _) = start_picker(upstream).await;
    let gateway = start_gateway(Mode::Picker(picker)).await;

    let response = post(&gateway, "/v1/completions", r#"{"prompt":"reject me"}"#).await;
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["x-llm-d-request-dropped-reason"], "test");
    assert!(response.headers().get("x-warmpath-replica").is_none());
    assert_eq!(text(response).await, "dropped");
}

#[tokio::test]
async fn a_picker_that_is_not_there_is_a_503() {
    // A port that was free a moment ago: nothing listens there.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().to_string()
    };
    let gateway = start_gateway(Mode::Picker(closed)).await;
    let response = post(&gateway, "/v1/completions", r#"{"prompt":"x"}"#).await;
    assert_eq!(response.status(), 503);
    assert!(text(response).await.contains("\"error\""));
}

#[tokio::test]
async fn fixed_endpoint_forwards_without_a_picker() {
    let upstream = start_upstream(Arc::new(Notify::new())).await;
    let gateway = start_gateway(Mode::Fixed(upstream.clone())).await;
    let response = post(&gateway, "/v1/completions", "{\"model\":\"model-a\"}").await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-warmpath-replica"], upstream.as_str());
    assert_eq!(response.headers()["x-upstream-saw"], "-");
    assert_eq!(text(response).await, "{\"model\":\"model-a\"}");
}

/// The first event reaches the client while the upstream still holds the rest back: the
/// gateway (and the picker's echo of each chunk) do not buffer a stream.
async fn first_event_arrives_before_the_stream_ends(through_picker: bool) {
    let release = Arc::new(Notify::new());
    let upstream = start_upstream(Arc::clone(&release)).await;
    let mode = if through_picker {
        Mode::Picker(start_picker(upstream.clone()).await.0)
    } else {
        Mode::Fixed(upstream.clone())
    };
    let gateway = start_gateway(mode).await;
    let response = post(&gateway, "/stream", r#"{"stream":true}"#).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-warmpath-replica"], upstream.as_str());
    let mut body = response.into_body();
    let first = tokio::time::timeout(Duration::from_secs(5), body.frame())
        .await
        .expect("the first event arrived before the upstream finished")
        .unwrap()
        .unwrap()
        .into_data()
        .unwrap();
    assert_eq!(first, "data: one\n\n");
    release.notify_one();
    let rest = tokio::time::timeout(Duration::from_secs(5), body.collect())
        .await
        .unwrap()
        .unwrap()
        .to_bytes();
    assert_eq!(rest, "data: two\n\ndata: [DONE]\n\n");
}

#[tokio::test]
async fn streams_are_not_buffered_through_the_picker() {
    first_event_arrives_before_the_stream_ends(true).await;
}

#[tokio::test]
async fn streams_are_not_buffered_on_the_fixed_path() {
    first_event_arrives_before_the_stream_ends(false).await;
}
