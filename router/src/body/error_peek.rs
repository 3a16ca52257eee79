//! The start of a replica's 5xx answer, kept to tell whose fault it was. Engines answer some
//! requests they refuse with a 500 whose body says the request was bad (an OpenAI-shaped error
//! of type `BadRequestError` or code 400, a template that does not render): counting those
//! against the replica would let any client eject replicas by sending such requests. Only the
//! first [`PEEK_BYTES`] of an error's body are kept; an error body that says nothing about the
//! request, or says it past those bytes, counts against the replica as before.

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// Bytes of an error body kept: an engine's JSON error fits many times over.
pub const PEEK_BYTES: usize = 4096;

/// The first bytes of an error body, as they came.
#[derive(Debug, Default)]
pub struct Peeked {
    buf: Vec<u8>,
}

impl Peeked {
    pub fn feed(&mut self, chunk: &[u8]) {
        let room = PEEK_BYTES.saturating_sub(self.buf.len());
        self.buf.extend_from_slice(&chunk[..chunk.len().min(room)]);
    }

    /// The body is a JSON error that puts the fault on the request: an error code or status in
    /// 400-499, or a type that names a client error (OpenAI's, vLLM's and SGLang's shapes).
    pub fn blames_the_request(&self) -> bool {
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(&self.buf) else {
            return false;
        };
        let error = v.get("error").filter(|e| e.is_object()).unwrap_or(&v);
        let client_code = |field: &str| {
            let code = match error.get(field) {
                Some(serde_json::Value::Number(n)) => n.as_u64(),
                Some(serde_json::Value::String(s)) => s.parse().ok(),
                _ => None,
            };
            code.is_some_and(|c| (400..500).contains(&c))
        };
        let client_type = error
            .get("type")
            .and_then(|t| t.as_str())
            .is_some_and(|t| CLIENT_ERROR_TYPES.contains(&t));
        client_code("code") || client_code("status") || client_type
    }
}

/// Error types that say the request was at fault (OpenAI's `invalid_request_error`, the
/// exception names vLLM and SGLang put in `type`).
const CLIENT_ERROR_TYPES: [&str; 6] = [
    "invalid_request_error",
    "BadRequestError",
    "NotFoundError",
    "UnprocessableEntityError",
    "RequestValidationError",
    "ValidationError",
];

/// Passes a body through, feeding its data to `peeked` when there is one (a 5xx answer).
pub struct ErrorPeek<B> {
    inner: B,
    peeked: Option<Arc<parking_lot::Mutex<Peeked>>>,
}

impl<B> ErrorPeek<B> {
    pub fn new(inner: B, peeked: Option<Arc<parking_lot::Mutex<Peeked>>>) -> Self {
        Self { inner, peeked }
    }
}

impl<B> Body for ErrorPeek<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if let (Some(peeked), Poll::Ready(Some(Ok(frame)))) = (&this.peeked, &polled) {
            if let Some(data) = frame.data_ref() {
                peeked.lock().feed(data);
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, StreamBody};
    use std::convert::Infallible;

    fn peeked(body: &str) -> Peeked {
        let mut p = Peeked::default();
        p.feed(body.as_bytes());
        p
    }

    #[test]
    fn client_errors_in_the_engines_shapes_blame_the_request() {
        for body in [
            r#"{"error":{"message":"bad template","type":"BadRequestError","param":null,"code":400}}"#,
            r#"{"object":"error","message":"x","type":"BadRequestError","param":null,"code":400}"#,
            r#"{"error":{"message":"x","type":"invalid_request_error","code":null}}"#,
            r#"{"error":{"message":"x","code":"422"}}"#,
            r#"{"message":"x","status":404}"#,
        ] {
            assert!(peeked(body).blames_the_request(), "{body}");
        }
    }

    #[test]
    fn server_errors_and_other_bodies_count_against_the_replica() {
        for body in [
            r#"{"error":{"message":"CUDA error","type":"InternalServerError","code":500}}"#,
            r#"{"object":"error","message":"x","type":"InternalServerError","code":500}"#,
            "Internal Server Error",
            "",
            r#"{"error":"BadRequestError"}"#,
            r#"{"error":{"code":4000}}"#,
        ] {
            assert!(!peeked(body).blames_the_request(), "{body}");
        }
    }

    #[test]
    fn only_the_first_bytes_are_kept() {
        let mut p = Peeked::default();
        let pad = " ".repeat(PEEK_BYTES);
        p.feed(format!("{{\"code\":400,{pad}").as_bytes());
        p.feed(b"\"more\":1}");
        assert_eq!(p.buf.len(), PEEK_BYTES);
        assert!(!p.blames_the_request(), "a cut body proves nothing");
    }

    #[tokio::test]
    async fn the_body_passes_unchanged_and_is_peeked() {
        let chunks = ["{\"error\":{\"code\":", "400}}"];
        let frames = chunks
            .iter()
            .map(|c| Ok::<_, Infallible>(Frame::data(Bytes::from_static(c.as_bytes()))));
        let shared = Arc::new(parking_lot::Mutex::new(Peeked::default()));
        let body = ErrorPeek::new(
            StreamBody::new(futures_util::stream::iter(frames)),
            Some(shared.clone()),
        );
        let all = body.collect().await.unwrap().to_bytes();
        assert_eq!(&all[..], chunks.concat().as_bytes());
        assert!(shared.lock().blames_the_request());
    }
}
