//! The wire side of prefill/decode disaggregation, shared by the router's split (`api::pd`) and
//! the decode pod's sidecar (`sidecar`): vLLM's NIXL connector ([`nixl`]), SGLang's bootstrap
//! ([`sglang`]), llm-d's header naming the prefill server, and the prefill leg's own request
//! headers and answer.

pub mod nixl;
pub mod sglang;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use http::{Response, StatusCode};
use http_body_util::{BodyExt, Limited};

/// llm-d's header naming the prefill replica to a decode pod's P/D sidecar.
pub const PREFILLER_HEADER: HeaderName = HeaderName::from_static("x-prefiller-host-port");

const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// A prefill answer larger than this is not a one-token answer.
const MAX_PREFILL_ANSWER: usize = 1 << 20;

/// A prefill leg's headers, made from the client's (here and in the P/D sidecar): a request id
/// of its own (the engine keys its KV hand-off by it; the decode leg keeps the client's), JSON,
/// and no `accept-encoding` (the answer is parsed here, so it must come uncompressed).
pub(crate) fn prefill_headers(headers: &mut http::HeaderMap) {
    let id = format!("{:032x}", rand::random::<u128>());
    headers.insert(
        REQUEST_ID,
        HeaderValue::from_str(&id).expect("hex is a valid header value"),
    );
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.remove(http::header::ACCEPT_ENCODING);
}

/// Why a prefill answer cannot be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AnswerError {
    /// 502/503/504: refused before computing anything, so another replica may be tried.
    #[error("answered {0}")]
    Unavailable(StatusCode),
    #[error("answered {0}: {1}")]
    Status(StatusCode, String),
    #[error("did not finish its answer within {0:?}")]
    Stalled(std::time::Duration),
    #[error("broke off its answer: {0}")]
    Body(String),
}

impl AnswerError {
    /// The metric label.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Self::Unavailable(_) => "unavailable",
            Self::Status(..) => "status",
            Self::Stalled(_) => "timeout",
            Self::Body(_) => "body",
        }
    }
}

/// A prefill answer, whole (at most [`MAX_PREFILL_ANSWER`] bytes, within `idle`), or why it
/// cannot be used: the router's prefill legs and the P/D sidecar's read it alike.
pub(crate) async fn read_prefill_answer<B>(
    resp: Response<B>,
    idle: std::time::Duration,
) -> Result<Bytes, AnswerError>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let status = resp.status();
    // Refused before computing anything: the body does not matter.
    if matches!(
        status,
        StatusCode::BAD_GATEWAY | StatusCode::SERVICE_UNAVAILABLE | StatusCode::GATEWAY_TIMEOUT
    ) {
        return Err(AnswerError::Unavailable(status));
    }
    let body = Limited::new(resp.into_body(), MAX_PREFILL_ANSWER).collect();
    let bytes = match tokio::time::timeout(idle, body).await {
        Err(_) => return Err(AnswerError::Stalled(idle)),
        Ok(Err(e)) => return Err(AnswerError::Body(e.to_string())),
        Ok(Ok(b)) => b.to_bytes(),
    };
    if !status.is_success() {
        let text = String::from_utf8_lossy(&bytes[..bytes.len().min(512)]).into_owned();
        return Err(AnswerError::Status(status, text));
    }
    Ok(bytes)
}
