//! The ext_proc messages the gateway sends and the parts of the picker's answers it applies,
//! shaped as Envoy shapes them in `FULL_DUPLEX_STREAMED` mode. Pure functions over the
//! generated types, so that they are tested without a picker.

use bytes::Bytes;
use envoy_types::pb::envoy::config::core::v3::{
    HeaderMap as PbHeaderMap, HeaderValue as PbHeaderValue, Metadata,
};
use envoy_types::pb::envoy::service::ext_proc::v3::{
    body_mutation, processing_request, BodyMutation, CommonResponse, HeaderMutation, HttpBody,
    HttpHeaders, ImmediateResponse, ProcessingRequest,
};
use envoy_types::pb::google::protobuf::{value, Struct, Value};
use http::header::{HeaderName, HeaderValue};
use http::HeaderMap;

/// The header (and `envoy.lb` metadata key) naming the endpoint the picker chose.
pub const DESTINATION_ENDPOINT: &str = "x-gateway-destination-endpoint";
/// The metadata key Envoy reports the endpoint that served the request under.
pub const DESTINATION_ENDPOINT_SERVED: &str = "x-gateway-destination-endpoint-served";
/// The dynamic-metadata namespace the destination is written in.
pub const LB_NAMESPACE: &str = "envoy.lb";

/// Headers that belong to one hop and are never forwarded nor shown to the picker.
pub fn is_hop_by_hop(name: &str) -> bool {
    matches!(
        name,
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "transfer-encoding"
            | "te"
            | "trailer"
            | "upgrade"
    )
}

fn header(key: &str, value: &[u8]) -> PbHeaderValue {
    PbHeaderValue {
        key: key.to_owned(),
        raw_value: value.to_vec(),
        ..Default::default()
    }
}

/// The request-headers message: pseudo-headers first, as Envoy sends them, then every client
/// header but `host` (which is `:authority`) and the hop-by-hop ones.
pub fn request_headers(
    method: &http::Method,
    path: &str,
    authority: &str,
    headers: &HeaderMap,
    end_of_stream: bool,
) -> ProcessingRequest {
    let mut list = Vec::with_capacity(headers.len() + 4);
    list.push(header(":method", method.as_str().as_bytes()));
    list.push(header(":path", path.as_bytes()));
    list.push(header(":authority", authority.as_bytes()));
    list.push(header(":scheme", b"http"));
    for (name, value) in headers {
        let name = name.as_str();
        if name == "host" || is_hop_by_hop(name) {
            continue;
        }
        list.push(header(name, value.as_bytes()));
    }
    ProcessingRequest {
        request: Some(processing_request::Request::RequestHeaders(HttpHeaders {
            headers: Some(PbHeaderMap { headers: list }),
            end_of_stream,
            ..Default::default()
        })),
        ..Default::default()
    }
}

/// The response-headers message: `:status` first, then the upstream's headers; the metadata
/// context names the endpoint that served the request, as Envoy reports it.
pub fn response_headers(
    status: http::StatusCode,
    headers: &HeaderMap,
    served_by: &str,
) -> ProcessingRequest {
    let mut list = Vec::with_capacity(headers.len() + 1);
    list.push(header(":status", status.as_str().as_bytes()));
    for (name, value) in headers {
        if is_hop_by_hop(name.as_str()) {
            continue;
        }
        list.push(header(name.as_str(), value.as_bytes()));
    }
    let served = Struct {
        fields: [(
            DESTINATION_ENDPOINT_SERVED.to_owned(),
            Value {
                kind: Some(value::Kind::StringValue(served_by.to_owned())),
            },
        )]
        .into_iter()
        .collect(),
    };
    ProcessingRequest {
        request: Some(processing_request::Request::ResponseHeaders(HttpHeaders {
            headers: Some(PbHeaderMap { headers: list }),
            end_of_stream: false,
            ..Default::default()
        })),
        metadata_context: Some(Metadata {
            filter_metadata: [(LB_NAMESPACE.to_owned(), served)].into_iter().collect(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// One request-body chunk.
pub fn request_body(chunk: Bytes, end_of_stream: bool) -> ProcessingRequest {
    ProcessingRequest {
        request: Some(processing_request::Request::RequestBody(HttpBody {
            body: chunk.into(),
            end_of_stream,
            ..Default::default()
        })),
        ..Default::default()
    }
}

/// One response-body chunk.
pub fn response_body(chunk: Bytes, end_of_stream: bool) -> ProcessingRequest {
    ProcessingRequest {
        request: Some(processing_request::Request::ResponseBody(HttpBody {
            body: chunk.into(),
            end_of_stream,
            ..Default::default()
        })),
        ..Default::default()
    }
}

fn header_value(h: &PbHeaderValue) -> &[u8] {
    if h.raw_value.is_empty() {
        h.value.as_bytes()
    } else {
        &h.raw_value
    }
}

/// The endpoint the picker chose: the `envoy.lb` dynamic metadata first (what Envoy's load
/// balancer reads), else the header mutation. A list (`a:1,b:2`, primary then fallbacks)
/// yields its first entry.
pub fn destination(
    dynamic_metadata: Option<&Struct>,
    mutation: Option<&HeaderMutation>,
) -> Option<String> {
    let from_metadata = dynamic_metadata
        .and_then(|m| m.fields.get(LB_NAMESPACE))
        .and_then(|v| match &v.kind {
            Some(value::Kind::StructValue(s)) => s.fields.get(DESTINATION_ENDPOINT),
            _ => None,
        })
        .and_then(|v| match &v.kind {
            Some(value::Kind::StringValue(s)) => Some(s.clone()),
            _ => None,
        });
    let from_header = || {
        mutation?
            .set_headers
            .iter()
            .filter_map(|o| o.header.as_ref())
            .find(|h| h.key.eq_ignore_ascii_case(DESTINATION_ENDPOINT))
            .map(|h| String::from_utf8_lossy(header_value(h)).into_owned())
    };
    from_metadata.or_else(from_header).and_then(|list| {
        list.split(',')
            .map(str::trim)
            .find(|s| !s.is_empty())
            .map(str::to_owned)
    })
}

/// Applies a header mutation to `headers`. Pseudo-headers, `host`, `content-length` and the
/// hop-by-hop headers are left alone (the gateway sets those itself); a `:path` the picker
/// sets is returned so that the caller can rewrite the request's path.
pub fn apply_header_mutation(headers: &mut HeaderMap, mutation: &HeaderMutation) -> Option<String> {
    let mut path = None;
    for name in &mutation.remove_headers {
        if let Ok(name) = HeaderName::from_bytes(name.to_ascii_lowercase().as_bytes()) {
            headers.remove(name);
        }
    }
    for option in &mutation.set_headers {
        let Some(h) = option.header.as_ref() else {
            continue;
        };
        let key = h.key.to_ascii_lowercase();
        if key == ":path" {
            path = Some(String::from_utf8_lossy(header_value(h)).into_owned());
            continue;
        }
        if key.starts_with(':') || key == "host" || key == "content-length" || is_hop_by_hop(&key) {
            continue;
        }
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(key.as_bytes()),
            HeaderValue::from_bytes(header_value(h)),
        ) else {
            continue;
        };
        // Envoy's ext_proc overwrites unless the (deprecated) `append` flag says otherwise;
        // ADD_IF_ABSENT (1) adds only a missing header.
        #[allow(deprecated)]
        let append = option.append.as_ref().is_some_and(|a| a.value);
        if append {
            headers.append(name, value);
        } else if option.append_action == 1 {
            headers.entry(name).or_insert(value);
        } else {
            headers.insert(name, value);
        }
    }
    path
}

/// The header mutation of a common response, if any.
pub fn mutation_of(common: Option<&CommonResponse>) -> Option<&HeaderMutation> {
    common.and_then(|c| c.header_mutation.as_ref())
}

/// What a body response says the body now is.
#[derive(Debug, PartialEq, Eq)]
pub enum BodyChunk {
    /// A chunk of the body, and whether it is the last.
    Streamed(Bytes, bool),
    /// The whole body, replaced.
    Replaced(Bytes),
    /// The body is cleared.
    Cleared,
    /// No mutation: not valid in `FULL_DUPLEX_STREAMED` mode.
    Missing,
}

/// Reads the body mutation of a body response's common response.
pub fn body_chunk(common: Option<&CommonResponse>) -> BodyChunk {
    match common
        .and_then(|c| c.body_mutation.as_ref())
        .and_then(|BodyMutation { mutation }| mutation.as_ref())
    {
        Some(body_mutation::Mutation::StreamedResponse(s)) => {
            BodyChunk::Streamed(Bytes::from(s.body.clone()), s.end_of_stream)
        }
        Some(body_mutation::Mutation::Body(b)) => BodyChunk::Replaced(Bytes::from(b.clone())),
        Some(body_mutation::Mutation::ClearBody(_)) => BodyChunk::Cleared,
        None => BodyChunk::Missing,
    }
}

/// The client response for an `immediate_response`: its status (500 when unset), its headers
/// and its body, as they are.
pub fn immediate_parts(ir: &ImmediateResponse) -> (http::StatusCode, HeaderMap, Bytes) {
    let status = ir
        .status
        .as_ref()
        .and_then(|s| u16::try_from(s.code).ok())
        .and_then(|c| http::StatusCode::from_u16(c).ok())
        .unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
    let mut headers = HeaderMap::new();
    if let Some(mutation) = ir.headers.as_ref() {
        apply_header_mutation(&mut headers, mutation);
    }
    (status, headers, Bytes::from(ir.body.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::config::core::v3::HeaderValueOption;

    fn set(key: &str, value: &str) -> HeaderValueOption {
        HeaderValueOption {
            header: Some(header(key, value.as_bytes())),
            ..Default::default()
        }
    }

    #[test]
    fn destination_prefers_metadata_and_takes_the_first_of_a_list() {
        let mutation = HeaderMutation {
            set_headers: vec![set(DESTINATION_ENDPOINT, "10.0.0.2:8000")],
            ..Default::default()
        };
        assert_eq!(
            destination(None, Some(&mutation)).as_deref(),
            Some("10.0.0.2:8000")
        );
        let inner = Struct {
            fields: [(
                DESTINATION_ENDPOINT.to_owned(),
                Value {
                    kind: Some(value::Kind::StringValue(
                        "10.0.0.1:8000,10.0.0.3:8000".into(),
                    )),
                },
            )]
            .into_iter()
            .collect(),
        };
        let metadata = Struct {
            fields: [(
                LB_NAMESPACE.to_owned(),
                Value {
                    kind: Some(value::Kind::StructValue(inner)),
                },
            )]
            .into_iter()
            .collect(),
        };
        assert_eq!(
            destination(Some(&metadata), Some(&mutation)).as_deref(),
            Some("10.0.0.1:8000")
        );
        assert_eq!(destination(None, None), None);
    }

    #[test]
    fn mutation_sets_headers_but_not_pseudo_or_length() {
        let mut headers = HeaderMap::new();
        headers.insert("x-old", HeaderValue::from_static("1"));
        headers.insert("content-length", HeaderValue::from_static("7"));
        let mutation = HeaderMutation {
            set_headers: vec![
                set("X-New", "2"),
                set(":method", "PUT"),
                set(":path", "/v1/chat/completions"),
                set("content-length", "99"),
            ],
            remove_headers: vec!["x-old".into()],
        };
        let path = apply_header_mutation(&mut headers, &mutation);
        assert_eq!(path.as_deref(), Some("/v1/chat/completions"));
        assert_eq!(headers.get("x-new").unwrap(), "2");
        assert!(headers.get("x-old").is_none());
        assert_eq!(headers.get("content-length").unwrap(), "7");
        assert!(headers.keys().all(|k| !k.as_str().starts_with(':')));
    }

    #[test]
    fn request_headers_carry_pseudo_headers_first_and_no_host() {
        let mut headers = HeaderMap::new();
        headers.insert("host", HeaderValue::from_static("gw:8080"));
        headers.insert("content-type", HeaderValue::from_static("application/json"));
        let msg = request_headers(
            &http::Method::POST,
            "/v1/completions",
            "gw:8080",
            &headers,
            false,
        );
        let Some(processing_request::Request::RequestHeaders(h)) = msg.request else {
            panic!("not request headers");
        };
        let keys: Vec<_> = h
            .headers
            .unwrap()
            .headers
            .into_iter()
            .map(|h| h.key)
            .collect();
        assert_eq!(
            keys,
            [":method", ":path", ":authority", ":scheme", "content-type"]
        );
    }
}
