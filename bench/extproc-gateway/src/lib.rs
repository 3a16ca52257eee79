//! An ext_proc gateway for the benchmark: the part of Envoy that an Envoy-protocol endpoint
//! picker (llm-d's EPP) needs in front of it, so that the real picker can be measured beside
//! warmpath on the same engines without a cluster or an Envoy build.
//!
//! Per request the gateway opens one bidirectional `ExternalProcessor.Process` stream and
//! speaks it as Envoy does with `request_body_mode` and `response_body_mode` both
//! `FULL_DUPLEX_STREAMED`:
//!
//! 1. request headers (`:method`, `:path`, `:authority`, `:scheme`, `x-request-id` and the
//!    client's headers), then the request body chunk by chunk, the last one `end_of_stream`;
//! 2. the picker answers with a headers response whose mutation (and dynamic metadata
//!    `envoy.lb`) carries `x-gateway-destination-endpoint`, then the (possibly rewritten)
//!    body as `streamed_response` chunks, or at any point an `immediate_response`;
//! 3. the gateway forwards the mutated request to that endpoint over pooled keep-alive
//!    connections, sends the response headers (`:status` first) and each response body chunk
//!    to the picker, and streams the picker's `streamed_response` chunks to the client as they
//!    come (a server-sent event stream is never buffered here).
//!
//! `--fixed-endpoint` skips the picker and forwards everything to one endpoint: the gateway's
//! own overhead is that path measured against the engine directly.

#![forbid(unsafe_code)]

pub mod extproc;
pub mod proxy;

pub use proxy::{serve, Gateway, Mode};

/// What can go wrong while a request crosses the gateway; each maps to one client status.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// The picker could not be reached (no connection, or the stream was refused).
    #[error("endpoint picker unreachable: {0}")]
    PickerUnreachable(tonic::Status),
    /// The picker's stream failed or ended before it had decided.
    #[error("endpoint picker stream failed: {0}")]
    PickerStream(tonic::Status),
    /// The picker broke the protocol (no destination, an unexpected message, a closed stream).
    #[error("endpoint picker protocol: {0}")]
    PickerProtocol(String),
    /// The chosen endpoint could not be reached or failed mid-request.
    #[error("upstream {endpoint}: {source}")]
    Upstream {
        /// `host:port` of the endpoint.
        endpoint: String,
        /// What the HTTP client reported.
        source: hyper_util::client::legacy::Error,
    },
    /// A request could not be built (an invalid destination or path).
    #[error("bad request to upstream: {0}")]
    BadUpstreamRequest(String),
}

impl GatewayError {
    /// The status the client sees for this error.
    pub fn status(&self) -> http::StatusCode {
        match self {
            GatewayError::PickerUnreachable(_) => http::StatusCode::SERVICE_UNAVAILABLE,
            GatewayError::PickerStream(status) if status.code() == tonic::Code::Unavailable => {
                http::StatusCode::SERVICE_UNAVAILABLE
            }
            GatewayError::PickerStream(_) | GatewayError::PickerProtocol(_) => {
                http::StatusCode::INTERNAL_SERVER_ERROR
            }
            GatewayError::Upstream { .. } | GatewayError::BadUpstreamRequest(_) => {
                http::StatusCode::BAD_GATEWAY
            }
        }
    }
}
