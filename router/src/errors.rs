//! The router's errors: what a client sees (OpenAI-shaped JSON with the right status) and what
//! an operator sees (configuration errors naming file, line and field; startup failures).

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use http_body_util::{combinators::UnsyncBoxBody, BodyExt, Full};
use std::fmt;

/// The response body type every handler returns (proxied streams and local answers alike).
pub type RespBody = UnsyncBoxBody<Bytes, BodyError>;

/// An error surfaced while streaming a body (upstream failed or went idle mid-stream).
pub type BodyError = Box<dyn std::error::Error + Send + Sync>;

/// A local answer with a fixed body.
pub fn full_body(bytes: impl Into<Bytes>) -> RespBody {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// A plain-text admin answer.
pub(crate) fn text(status: StatusCode, body: String) -> Response<RespBody> {
    let mut resp = Response::new(full_body(body));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

/// An error answered to an API client, in OpenAI's shape:
/// `{"error": {"message": ..., "type": ..., "code": ...}}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub kind: &'static str,
    pub code: &'static str,
    pub message: String,
    /// Seconds, for 429 and 503.
    pub retry_after: Option<u32>,
    /// Flow control's reason for refusing, sent in `x-warmpath-dropped-reason` (and llm-d's
    /// `x-llm-d-request-dropped-reason`).
    pub dropped: Option<warmpath_flow::Reason>,
}

impl ApiError {
    pub fn new(
        status: StatusCode,
        kind: &'static str,
        code: &'static str,
        message: String,
    ) -> Self {
        Self {
            status,
            kind,
            code,
            message,
            retry_after: None,
            dropped: None,
        }
    }
    /// 500: the router itself failed (a panic on a worker thread); the details go to the log.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "server_error",
            "internal_error",
            message.into(),
        )
    }
    /// 401: the API key is missing or unknown (never echoed).
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "invalid_request_error",
            "invalid_api_key",
            message.into(),
        )
    }
    /// 429 from flow control, with its reason and when to retry.
    pub fn dropped(
        reason: warmpath_flow::Reason,
        message: impl Into<String>,
        retry_after: u32,
    ) -> Self {
        Self {
            dropped: Some(reason),
            ..Self::over_limit(message, retry_after)
        }
    }
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            code,
            message.into(),
        )
    }
    /// An untrusted client's body that names prefill/decode fields but cannot be re-encoded
    /// without them: it is not passed on as it is.
    pub fn not_reencoded() -> Self {
        Self::bad_request(
            "invalid_body",
            "The request body could not be re-encoded without its prefill/decode fields.",
        )
    }
    pub fn unknown_model(model: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            "model_not_found",
            format!("The model `{model}` does not exist or is not served by this router."),
        )
    }
    pub fn not_found(path: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            "unknown_url",
            format!("Unknown request URL: {path}."),
        )
    }
    pub fn method_not_allowed(method: &http::Method, path: &str) -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "invalid_request_error",
            "method_not_allowed",
            format!("Method {method} is not allowed on {path}."),
        )
    }
    pub fn body_timeout() -> Self {
        Self::new(
            StatusCode::REQUEST_TIMEOUT,
            "invalid_request_error",
            "request_timeout",
            "The request body was not received in time.".to_owned(),
        )
    }
    /// 503: the bodies held at once would pass `limits.max_buffered_body_bytes`.
    pub fn body_budget() -> Self {
        Self {
            retry_after: Some(1),
            ..Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "server_error",
                "overloaded",
                "The router holds as many request bodies as it may (limits.max_buffered_body_bytes); retry later.".to_owned(),
            )
        }
    }
    pub fn body_too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            "body_too_large",
            format!("The request body exceeds the limit of {limit} bytes."),
        )
    }
    pub fn over_limit(message: impl Into<String>, retry_after: u32) -> Self {
        Self {
            retry_after: Some(retry_after),
            ..Self::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limit_error",
                "rate_limit_exceeded",
                message.into(),
            )
        }
    }
    pub fn no_ready_replica(model: &str) -> Self {
        Self {
            retry_after: Some(1),
            ..Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "service_unavailable_error",
                "no_ready_replica",
                format!("No ready replica serves the model `{model}`; try again shortly."),
            )
        }
    }
    pub fn upstream_connect(replica: &str, detail: impl fmt::Display) -> Self {
        Self::new(
            StatusCode::BAD_GATEWAY,
            "upstream_error",
            "upstream_connect_error",
            format!("Could not reach replica `{replica}`: {detail}."),
        )
    }
    pub fn upstream_failed(replica: &str, detail: impl fmt::Display) -> Self {
        Self::new(
            StatusCode::BAD_GATEWAY,
            "upstream_error",
            "upstream_error",
            format!("Replica `{replica}` failed: {detail}."),
        )
    }
    /// A replica answered 502/503 and no other could take the request.
    pub fn upstream_unavailable(replica: &str, status: StatusCode) -> Self {
        Self {
            retry_after: Some(1),
            ..Self::new(
                if status == StatusCode::SERVICE_UNAVAILABLE {
                    status
                } else {
                    StatusCode::BAD_GATEWAY
                },
                "upstream_error",
                "replica_unavailable",
                format!(
                    "Replica {replica} answered {status} and no other replica could take the request."
                ),
            )
        }
    }
    pub fn upstream_timeout(replica: &str) -> Self {
        Self::new(
            StatusCode::GATEWAY_TIMEOUT,
            "upstream_error",
            "upstream_timeout",
            format!("Replica `{replica}` did not answer in time."),
        )
    }

    pub fn upstream_stalled(replica: &str, after: std::time::Duration) -> Self {
        Self::new(
            StatusCode::GATEWAY_TIMEOUT,
            "upstream_error",
            "upstream_stalled",
            format!(
                "Replica `{replica}` showed no progress for {:.1} s and no other replica could take the request.",
                after.as_secs_f64()
            ),
        )
    }

    pub fn body_json(&self) -> String {
        serde_json::json!({
            "error": {
                "message": self.message,
                "type": self.kind,
                "code": self.code,
            }
        })
        .to_string()
    }

    pub fn into_response(self) -> Response<RespBody> {
        let mut resp = Response::new(full_body(self.body_json()));
        *resp.status_mut() = self.status;
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Some(secs) = self.retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if let Some(reason) = self.dropped {
            use warmpath_flow::reason::{DROPPED_REASON_HEADER, LLM_D_DROPPED_REASON_HEADER};
            let h = resp.headers_mut();
            h.insert(
                DROPPED_REASON_HEADER,
                HeaderValue::from_static(reason.as_str()),
            );
            h.insert(
                LLM_D_DROPPED_REASON_HEADER,
                HeaderValue::from_static(reason.llm_d()),
            );
        }
        resp
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.status.as_u16(),
            self.code,
            self.message
        )
    }
}

impl std::error::Error for ApiError {}

/// A configuration file that cannot be used, with where and what.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    pub file: String,
    /// 1-based line, when the field is found in the text.
    pub line: Option<usize>,
    /// Path of the offending field (`pools[0].replicas[1].url`), empty for the whole document.
    pub field: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let file = if self.file.is_empty() {
            "config"
        } else {
            &self.file
        };
        match self.line {
            Some(line) => write!(f, "{file}:{line}: ")?,
            None => write!(f, "{file}: ")?,
        }
        if !self.field.is_empty() {
            write!(f, "field `{}`: ", self.field)?;
        }
        f.write_str(&self.message)
    }
}

impl ConfigError {
    /// From serde_yaml's error, whose text is `[path: ]message[ at line L column C]`.
    pub(crate) fn from_yaml(e: &serde_yaml::Error) -> Self {
        let line = e.location().map(|l| l.line());
        let mut text = e.to_string();
        if let Some(at) = text.rfind(" at line ") {
            text.truncate(at);
        }
        let (field, message) = match text.split_once(": ") {
            Some((path, rest)) if !path.is_empty() && !path.contains(' ') => {
                (path.to_owned(), rest.to_owned())
            }
            _ => (String::new(), text),
        };
        Self {
            file: String::new(),
            line,
            field,
            message,
        }
    }
}

/// Failures that stop the router from starting.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("flow control: {0}")]
    Flow(#[from] warmpath_flow::ConfigError),
    #[error("sessions.key_file: {0}")]
    SessionKey(std::io::Error),
    #[error("admin_token_file: {0}")]
    AdminToken(std::io::Error),
    #[error("endpoint_picker.token_file: {0}")]
    PickerToken(std::io::Error),
    #[error("tls: {0}")]
    Tls(#[from] TlsError),
    #[error(transparent)]
    Peers(#[from] PeersError),
}

/// Why peering (`crate::peers`) could not start.
#[derive(Debug, thiserror::Error)]
pub enum PeersError {
    #[error("peers.listen `{endpoint}`: {source}")]
    Bind {
        endpoint: String,
        source: warmpath_zmtp::Error,
    },
    #[error("peers.key_file: {0}")]
    Key(String),
}

/// Why the API listener's certificate or key did not load (`crate::server::tls`).
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: {source}")]
    Read {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: no PEM certificate in it")]
    NoCertificate { path: std::path::PathBuf },
    #[error("{path}: no PEM private key in it (PKCS#8, PKCS#1 or SEC1): {message}")]
    NoKey {
        path: std::path::PathBuf,
        message: String,
    },
    #[error(
        "the key in {key} does not fit the certificate in {cert}, or is unsupported: {source}"
    )]
    Mismatch {
        cert: std::path::PathBuf,
        key: std::path::PathBuf,
        source: tokio_rustls::rustls::Error,
    },
    #[error("TLS settings: {0}")]
    Config(tokio_rustls::rustls::Error),
}
