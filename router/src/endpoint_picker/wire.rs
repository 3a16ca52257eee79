//! The ext_proc messages the picker reads and writes, in the Gateway API Inference Extension's
//! endpoint-picker protocol: what Envoy sends (headers, metadata, body modes) read into plain
//! types, and the answers built from plain values.

use crate::errors::ApiError;
use bytes::Bytes;
use envoy_types::pb::envoy::config::core::v3::{
    header_value_option::HeaderAppendAction, HeaderValue, HeaderValueOption,
};
use envoy_types::pb::envoy::extensions::filters::http::ext_proc::v3::processing_mode::BodySendMode;
use envoy_types::pb::envoy::r#type::v3::HttpStatus;
use envoy_types::pb::envoy::service::ext_proc::v3::{
    body_mutation, processing_response, BodyMutation, BodyResponse, CommonResponse, HeaderMutation,
    HeadersResponse, HttpHeaders, ImmediateResponse, ProcessingRequest, ProcessingResponse,
    StreamedBodyResponse, TrailersResponse,
};
use envoy_types::pb::google::protobuf::{value::Kind, Struct, Value};
use http::{HeaderMap, HeaderName};

/// The header a Gateway routes by: `IP:PORT` of the chosen endpoint.
pub const DESTINATION: &str = "x-gateway-destination-endpoint";
/// The dynamic-metadata namespace the destination is also published in (Envoy's subset load
/// balancer reads host metadata from it).
pub const DESTINATION_NAMESPACE: &str = "envoy.lb";
/// Where a Gateway may restrict the endpoints to pick from (request metadata).
pub const SUBSET_NAMESPACE: &str = "envoy.lb.subset_hint";
pub const SUBSET_KEY: &str = "x-gateway-destination-endpoint-subset";
/// Body bytes per streamed body response: under the 64 KiB Envoy recommends per chunk.
pub const CHUNK_BYTES: usize = 62_000;

/// How Envoy sends the request body, from the stream's `protocol_config`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestBodyMode {
    /// GIE's mode: headers and body chunks come without waiting for answers; the picker holds
    /// the headers' answer until the body has ended, then streams the body back.
    FullDuplex,
    /// The headers wait for their answer, then the whole body comes in one message; the
    /// destination rides on the body's answer.
    Buffered,
}

/// How Envoy sends the response body: full duplex wants every chunk streamed back; the other
/// modes want one empty answer per message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseBodyMode {
    FullDuplex,
    Other,
}

/// The stream's processing modes, from its first message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Modes {
    pub request: RequestBodyMode,
    pub response: ResponseBodyMode,
}

/// Why a stream's modes cannot serve as an endpoint picker.
#[derive(Debug, thiserror::Error)]
pub enum ModeError {
    #[error("observability_mode: the picker's answers would be ignored, so it cannot route")]
    Observability,
    #[error(
        "request_body_mode {0}: the picker needs the whole body before the request goes on \
         (configure FULL_DUPLEX_STREAMED, as the Inference Extension does, or BUFFERED)"
    )]
    RequestBody(&'static str),
}

impl Modes {
    /// From the stream's first message. An Envoy that sends no `protocol_config` (before 1.33)
    /// is taken to stream in full duplex, as GIE's pickers assume.
    pub fn of(first: &ProcessingRequest) -> Result<Modes, ModeError> {
        if first.observability_mode {
            return Err(ModeError::Observability);
        }
        let Some(config) = &first.protocol_config else {
            return Ok(Modes {
                request: RequestBodyMode::FullDuplex,
                response: ResponseBodyMode::FullDuplex,
            });
        };
        let request = match BodySendMode::try_from(config.request_body_mode) {
            Ok(BodySendMode::FullDuplexStreamed) => RequestBodyMode::FullDuplex,
            // A partial body fails to parse when it was cut: answered as a bad body.
            Ok(BodySendMode::Buffered | BodySendMode::BufferedPartial) => RequestBodyMode::Buffered,
            Ok(other) => return Err(ModeError::RequestBody(other.as_str_name())),
            Err(_) => return Err(ModeError::RequestBody("(unknown)")),
        };
        let response = match BodySendMode::try_from(config.response_body_mode) {
            Ok(BodySendMode::FullDuplexStreamed) => ResponseBodyMode::FullDuplex,
            _ => ResponseBodyMode::Other,
        };
        Ok(Modes { request, response })
    }
}

/// A request head as Envoy sends it: pseudo-headers apart, the rest as an `http::HeaderMap`
/// (entries that are not valid HTTP are left out: nothing reads them).
#[derive(Debug, Default)]
pub struct Head {
    pub method: String,
    /// Without its query.
    pub path: String,
    pub headers: HeaderMap,
}

/// A header entry's value: Envoy sends `raw_value`; older data planes `value`.
fn value_bytes(h: &HeaderValue) -> &[u8] {
    if h.raw_value.is_empty() {
        h.value.as_bytes()
    } else {
        &h.raw_value
    }
}

impl Head {
    pub fn of(headers: &HttpHeaders) -> Head {
        let mut head = Head::default();
        for h in headers.headers.iter().flat_map(|m| &m.headers) {
            let value = value_bytes(h);
            match h.key.as_str() {
                ":method" => head.method = String::from_utf8_lossy(value).into_owned(),
                ":path" => {
                    let path = String::from_utf8_lossy(value);
                    head.path = path.split('?').next().unwrap_or_default().to_owned();
                }
                k if k.starts_with(':') => {}
                k => {
                    if let (Ok(name), Ok(v)) = (
                        HeaderName::from_bytes(k.as_bytes()),
                        http::HeaderValue::from_bytes(value),
                    ) {
                        head.headers.append(name, v);
                    }
                }
            }
        }
        head
    }

    /// The `:status` of a response head.
    pub fn status(headers: &HttpHeaders) -> Option<u16> {
        headers
            .headers
            .iter()
            .flat_map(|m| &m.headers)
            .find(|h| h.key == ":status")
            .and_then(|h| std::str::from_utf8(value_bytes(h)).ok()?.parse().ok())
    }
}

/// The endpoints a Gateway allows for this request (`envoy.lb.subset_hint`), as `IP:PORT` or
/// bare `IP` (any port); `None` when it sets no subset. A list or one comma-separated string,
/// as Envoy's header-to-metadata filter writes it.
pub fn subset(request: &ProcessingRequest) -> Option<Vec<String>> {
    let value = request
        .metadata_context
        .as_ref()?
        .filter_metadata
        .get(SUBSET_NAMESPACE)?
        .fields
        .get(SUBSET_KEY)?;
    let mut out = Vec::new();
    let mut push = |s: &str| {
        out.extend(
            s.split(',')
                .map(str::trim)
                .filter(|e| !e.is_empty())
                .map(str::to_owned),
        )
    };
    match &value.kind {
        Some(Kind::StringValue(s)) => push(s),
        Some(Kind::ListValue(list)) => {
            for v in &list.values {
                if let Some(Kind::StringValue(s)) = &v.kind {
                    push(s);
                }
            }
        }
        _ => {}
    }
    Some(out)
}

/// Whether `authority` (`host:port`) is in `subset`.
pub fn in_subset(subset: &[String], authority: &http::uri::Authority) -> bool {
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']');
    subset
        .iter()
        .any(|e| e == authority.as_str() || e.trim_start_matches('[').trim_end_matches(']') == host)
}

fn header(key: &str, value: &[u8]) -> HeaderValueOption {
    HeaderValueOption {
        header: Some(HeaderValue {
            key: key.to_owned(),
            raw_value: value.to_vec(),
            ..Default::default()
        }),
        // A client's own value of the header must not survive (it would choose the endpoint).
        append_action: HeaderAppendAction::OverwriteIfExistsOrAdd as i32,
        ..Default::default()
    }
}

/// What the picker does to the request's headers.
#[derive(Debug, Default)]
pub struct RequestMutation {
    /// The chosen endpoint's `IP:PORT`; `None`: no pick (the Gateway routes it).
    pub destination: Option<String>,
    /// Headers to remove before the request reaches an engine (a client's API key, an
    /// untrusted client's prefill/decode header).
    pub remove: Vec<http::HeaderName>,
    /// The body to hand on instead of the client's (less an untrusted client's P/D fields).
    pub body: Option<Bytes>,
}

impl RequestMutation {
    fn common(&self) -> CommonResponse {
        let mut mutation = HeaderMutation::default();
        match &self.destination {
            Some(d) => mutation.set_headers.push(header(DESTINATION, d.as_bytes())),
            // Nor may a client name its own endpoint when the picker names none.
            None => mutation.remove_headers.push(DESTINATION.to_owned()),
        }
        mutation
            .remove_headers
            .extend(self.remove.iter().map(|h| h.as_str().to_owned()));
        if let Some(body) = &self.body {
            mutation.set_headers.push(header(
                http::header::CONTENT_LENGTH.as_str(),
                body.len().to_string().as_bytes(),
            ));
        }
        CommonResponse {
            header_mutation: Some(mutation),
            // The route (and so the cluster) may depend on the new header.
            clear_route_cache: self.destination.is_some(),
            ..Default::default()
        }
    }

    /// `envoy.lb: { x-gateway-destination-endpoint: IP:PORT }`, beside the header: a Gateway
    /// may read either, and both must agree.
    fn metadata(&self) -> Option<Struct> {
        let d = self.destination.as_ref()?;
        let inner = Struct {
            fields: [(DESTINATION.to_owned(), string(d))].into_iter().collect(),
        };
        Some(Struct {
            fields: [(
                DESTINATION_NAMESPACE.to_owned(),
                Value {
                    kind: Some(Kind::StructValue(inner)),
                },
            )]
            .into_iter()
            .collect(),
        })
    }

    /// The answer to the request headers carrying the mutation.
    pub fn on_headers(&self) -> ProcessingResponse {
        ProcessingResponse {
            response: Some(processing_response::Response::RequestHeaders(
                HeadersResponse {
                    response: Some(self.common()),
                },
            )),
            dynamic_metadata: self.metadata(),
            ..Default::default()
        }
    }

    /// The answer to a buffered body carrying the mutation (its headers waited for it). A new
    /// body replaces it whole here; in full duplex it is handed back as it goes instead.
    pub fn on_body(&self) -> ProcessingResponse {
        let common = CommonResponse {
            body_mutation: self.body.as_ref().map(|b| BodyMutation {
                mutation: Some(body_mutation::Mutation::Body(b.to_vec())),
            }),
            ..self.common()
        };
        ProcessingResponse {
            response: Some(processing_response::Response::RequestBody(BodyResponse {
                response: Some(common),
            })),
            dynamic_metadata: self.metadata(),
            ..Default::default()
        }
    }
}

fn string(s: &str) -> Value {
    Value {
        kind: Some(Kind::StringValue(s.to_owned())),
    }
}

/// The request headers' answer that changes nothing (buffered mode: the body comes next).
pub fn headers_continue() -> ProcessingResponse {
    ProcessingResponse {
        response: Some(processing_response::Response::RequestHeaders(
            HeadersResponse::default(),
        )),
        ..Default::default()
    }
}

/// The answer to a response head, with headers to set on it.
pub fn response_headers(set: &[(&str, Vec<u8>)]) -> ProcessingResponse {
    let mutation = (!set.is_empty()).then(|| HeaderMutation {
        set_headers: set.iter().map(|(k, v)| header(k, v)).collect(),
        ..Default::default()
    });
    ProcessingResponse {
        response: Some(processing_response::Response::ResponseHeaders(
            HeadersResponse {
                response: Some(CommonResponse {
                    header_mutation: mutation,
                    ..Default::default()
                }),
            },
        )),
        ..Default::default()
    }
}

/// Which way a body goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Request,
    Response,
}

fn body_response(direction: Direction, common: CommonResponse) -> ProcessingResponse {
    let body = BodyResponse {
        response: Some(common),
    };
    ProcessingResponse {
        response: Some(match direction {
            Direction::Request => processing_response::Response::RequestBody(body),
            Direction::Response => processing_response::Response::ResponseBody(body),
        }),
        ..Default::default()
    }
}

/// A body chunk handed back in full-duplex mode (Envoy forwards only what it is given back).
pub fn streamed(direction: Direction, chunk: &[u8], end_of_stream: bool) -> ProcessingResponse {
    body_response(
        direction,
        CommonResponse {
            body_mutation: Some(BodyMutation {
                mutation: Some(body_mutation::Mutation::StreamedResponse(
                    StreamedBodyResponse {
                        body: chunk.to_vec(),
                        end_of_stream,
                        ..Default::default()
                    },
                )),
            }),
            ..Default::default()
        },
    )
}

/// `body` handed back as streamed chunks of at most [`CHUNK_BYTES`] (one empty chunk for an
/// empty body, so that its end is said).
pub fn streamed_all(
    direction: Direction,
    body: &[u8],
    end_of_stream: bool,
) -> impl Iterator<Item = ProcessingResponse> + '_ {
    let chunks = body.len().div_ceil(CHUNK_BYTES).max(1);
    (0..chunks).map(move |i| {
        let chunk =
            &body[(i * CHUNK_BYTES).min(body.len())..((i + 1) * CHUNK_BYTES).min(body.len())];
        streamed(direction, chunk, end_of_stream && i + 1 == chunks)
    })
}

/// A body message's answer that changes nothing (modes other than full duplex).
pub fn body_continue(direction: Direction) -> ProcessingResponse {
    body_response(direction, CommonResponse::default())
}

pub fn trailers_continue(direction: Direction) -> ProcessingResponse {
    let t = TrailersResponse::default();
    ProcessingResponse {
        response: Some(match direction {
            Direction::Request => processing_response::Response::RequestTrailers(t),
            Direction::Response => processing_response::Response::ResponseTrailers(t),
        }),
        ..Default::default()
    }
}

/// The proxy's answer to a request it would not serve, as Envoy's local reply: the same status,
/// headers (`content-type`, `retry-after`, flow control's reason) and OpenAI-shaped body.
pub fn immediate(error: &ApiError) -> ProcessingResponse {
    let body = error.body_json();
    let answer = error.clone().into_response();
    let set_headers = answer
        .headers()
        .iter()
        .map(|(k, v)| header(k.as_str(), v.as_bytes()))
        .collect();
    ProcessingResponse {
        response: Some(processing_response::Response::ImmediateResponse(
            ImmediateResponse {
                status: Some(HttpStatus {
                    code: i32::from(error.status.as_u16()),
                }),
                headers: Some(HeaderMutation {
                    set_headers,
                    ..Default::default()
                }),
                body: body.into_bytes(),
                // Access logs' %RESPONSE_CODE_DETAILS%: one token, no spaces.
                details: format!("warmpath_{}", error.code),
                ..Default::default()
            },
        )),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::config::core::v3::{HeaderMap as EnvoyHeaders, Metadata};
    use envoy_types::pb::google::protobuf::ListValue;

    #[test]
    fn a_subset_is_read_as_a_list_or_a_comma_separated_string() {
        let with = |value: Value| ProcessingRequest {
            metadata_context: Some(Metadata {
                filter_metadata: [(
                    SUBSET_NAMESPACE.to_owned(),
                    Struct {
                        fields: [(SUBSET_KEY.to_owned(), value)].into_iter().collect(),
                    },
                )]
                .into_iter()
                .collect(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let list = with(Value {
            kind: Some(Kind::ListValue(ListValue {
                values: vec![string("10.0.0.1:8000"), string("10.0.0.2:8000, 10.0.0.3")],
            })),
        });
        assert_eq!(
            subset(&list).unwrap(),
            ["10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3"]
        );
        assert_eq!(subset(&with(string(" a:1 ,b:2,"))).unwrap(), ["a:1", "b:2"]);
        assert_eq!(subset(&with(string(""))).unwrap(), Vec::<String>::new());
        assert!(subset(&ProcessingRequest::default()).is_none());

        let s = subset(&list).unwrap();
        assert!(in_subset(&s, &"10.0.0.1:8000".parse().unwrap()));
        assert!(!in_subset(&s, &"10.0.0.1:8001".parse().unwrap()));
        assert!(
            in_subset(&s, &"10.0.0.3:9".parse().unwrap()),
            "a bare IP allows any port"
        );
    }

    #[test]
    fn a_head_keeps_pseudo_headers_apart_and_prefers_raw_values() {
        let h = |k: &str, v: &str, raw: &[u8]| HeaderValue {
            key: k.to_owned(),
            value: v.to_owned(),
            raw_value: raw.to_vec(),
        };
        let headers = HttpHeaders {
            headers: Some(EnvoyHeaders {
                headers: vec![
                    h(":method", "", b"POST"),
                    h(":path", "", b"/v1/completions?x=1"),
                    h("content-type", "application/json", b""),
                    h("x-session-id", "", b"s1"),
                    h("bad header", "", b"x"),
                ],
            }),
            ..Default::default()
        };
        let head = Head::of(&headers);
        assert_eq!(head.method, "POST");
        assert_eq!(head.path, "/v1/completions");
        assert_eq!(head.headers["content-type"], "application/json");
        assert_eq!(head.headers["x-session-id"], "s1");
        assert_eq!(head.headers.len(), 2);
    }

    #[test]
    fn bodies_are_handed_back_in_bounded_chunks_ending_once() {
        let body = vec![b'x'; CHUNK_BYTES * 2 + 5];
        let chunks: Vec<_> = streamed_all(Direction::Request, &body, true).collect();
        let parts: Vec<(usize, bool)> = chunks
            .iter()
            .map(|r| match &r.response {
                Some(processing_response::Response::RequestBody(b)) => {
                    match b.response.as_ref().and_then(|c| c.body_mutation.as_ref()) {
                        Some(BodyMutation {
                            mutation: Some(body_mutation::Mutation::StreamedResponse(s)),
                        }) => (s.body.len(), s.end_of_stream),
                        other => panic!("{other:?}"),
                    }
                }
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            parts,
            [(CHUNK_BYTES, false), (CHUNK_BYTES, false), (5, true)]
        );
        assert_eq!(streamed_all(Direction::Request, &[], true).count(), 1);
    }
}
