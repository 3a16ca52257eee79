//! Read a request's whole body, bounded in size (413) and time (408), into one contiguous
//! buffer: a body sent in many tiny chunks costs its bytes, not a list of chunks. Bodies held
//! at once are bounded too ([`BodyBudget`]): a body is kept until its replica's response head
//! arrives (it may be sent again meanwhile), which can take minutes, so without a budget a
//! burst of large prompts to a slow fleet could take the router's memory.

use super::{Incoming, Read, Rejection, StageFuture};
use crate::errors::{ApiError, RespBody};
use crate::metrics::Metrics;
use bytes::{Bytes, BytesMut};
use http::{HeaderMap, Response};
use http_body_util::BodyExt;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tower::{Layer, Service};

/// The bytes of request bodies the router holds at once, in KiB permits; a body that does not
/// fit is refused with 503 (`overloaded`, `retry-after: 1`) instead of queued.
#[derive(Clone)]
pub struct BodyBudget {
    kib: Arc<Semaphore>,
    metrics: Arc<Metrics>,
}

impl BodyBudget {
    pub fn new(bytes: usize, metrics: Arc<Metrics>) -> Self {
        let kib = bytes.div_ceil(1024).clamp(1, Semaphore::MAX_PERMITS);
        Self {
            kib: Arc::new(Semaphore::new(kib)),
            metrics,
        }
    }

    /// Room for `len` bytes, held until the permit is dropped.
    fn hold(&self, len: usize) -> Result<OwnedSemaphorePermit, ApiError> {
        let kib = u32::try_from(len.div_ceil(1024).max(1)).unwrap_or(u32::MAX);
        self.kib.clone().try_acquire_many_owned(kib).map_err(|_| {
            self.metrics.body_budget_refusals.inc();
            ApiError::body_budget()
        })
    }
}

#[derive(Clone)]
pub struct ReadBodyLayer {
    budget: BodyBudget,
}

impl ReadBodyLayer {
    pub fn new(budget: BodyBudget) -> Self {
        Self { budget }
    }
}

impl<S> Layer<S> for ReadBodyLayer {
    type Service = ReadBody<S>;
    fn layer(&self, inner: S) -> ReadBody<S> {
        ReadBody {
            inner,
            budget: self.budget.clone(),
        }
    }
}

#[derive(Clone)]
pub struct ReadBody<S> {
    inner: S,
    budget: BodyBudget,
}

impl<S, B> Service<Incoming<B>> for ReadBody<S>
where
    S: Service<Read, Response = Response<RespBody>, Error = Rejection> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    type Response = Response<RespBody>;
    type Error = Rejection;
    type Future = StageFuture<Response<RespBody>, Rejection>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Rejection>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, incoming: Incoming<B>) -> Self::Future {
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let budget = self.budget.clone();
        Box::pin(async move {
            let Incoming { ctx, request } = incoming;
            let (head, body) = request.into_parts();
            let config = &ctx.table.config;
            let body = read_body(
                &head.headers,
                body,
                config.limits.max_body_bytes,
                config.timeouts.client(),
            )
            .await
            .map_err(Rejection::before_parse)?;
            // Held until the rest of the stack has the response head.
            let _held = budget.hold(body.len()).map_err(Rejection::before_parse)?;
            inner.call(Read { ctx, head, body }).await
        })
    }
}

/// Read the whole body, refusing more than `limit` bytes (413) or a body slower than `timeout`
/// (408).
pub async fn read_body<B>(
    headers: &HeaderMap,
    body: B,
    limit: usize,
    timeout: Duration,
) -> Result<Bytes, ApiError>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let declared = headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > limit as u64) {
        return Err(ApiError::body_too_large(limit));
    }
    let hint = declared.unwrap_or(0) as usize;
    tokio::time::timeout(timeout, collect(body, limit, hint))
        .await
        .unwrap_or_else(|_| Err(ApiError::body_timeout()))
}

async fn collect<B>(body: B, limit: usize, hint: usize) -> Result<Bytes, ApiError>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let mut body = std::pin::pin!(body);
    // The common case is one chunk: kept as it came, with no copy.
    let mut first: Option<Bytes> = None;
    let mut rest = BytesMut::new();
    let mut total = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| {
            ApiError::bad_request(
                "body_read_error",
                format!("Could not read the request body: {e}"),
            )
        })?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        total = total.saturating_add(data.len());
        if total > limit {
            return Err(ApiError::body_too_large(limit));
        }
        match first.take() {
            None if rest.is_empty() => first = Some(data),
            held => {
                if let Some(held) = held {
                    rest.reserve(hint.max(total).min(limit));
                    rest.extend_from_slice(&held);
                }
                rest.extend_from_slice(&data);
            }
        }
    }
    Ok(match first {
        Some(only) => only,
        None => rest.freeze(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body::Frame;
    use http_body_util::{Full, StreamBody};

    #[tokio::test]
    async fn body_limits() {
        let h = HeaderMap::new();
        let b = read_body(
            &h,
            Full::new(Bytes::from(vec![b'x'; 100])),
            100,
            Duration::from_secs(1),
        )
        .await;
        assert_eq!(b.unwrap().len(), 100);
        let e = read_body(
            &h,
            Full::new(Bytes::from(vec![b'x'; 101])),
            100,
            Duration::from_secs(1),
        )
        .await;
        assert_eq!(e.unwrap_err().status, http::StatusCode::PAYLOAD_TOO_LARGE);
        let mut h = HeaderMap::new();
        h.insert(http::header::CONTENT_LENGTH, "1000000".parse().unwrap());
        let e = read_body(&h, Full::new(Bytes::new()), 100, Duration::from_secs(1)).await;
        assert_eq!(e.unwrap_err().status, http::StatusCode::PAYLOAD_TOO_LARGE);
    }

    #[tokio::test]
    async fn many_small_chunks_become_one_buffer_and_still_count_toward_the_limit() {
        let chunks = |n: usize| {
            let frames: Vec<Result<Frame<Bytes>, std::io::Error>> = (0..n)
                .map(|i| Ok(Frame::data(Bytes::from(vec![b'a' + (i % 26) as u8]))))
                .collect();
            StreamBody::new(futures_util::stream::iter(frames))
        };
        let h = HeaderMap::new();
        let b = read_body(&h, chunks(1000), 1000, Duration::from_secs(1))
            .await
            .unwrap();
        assert_eq!(b.len(), 1000);
        assert_eq!(&b[..3], b"abc");
        assert_eq!(b[999], b'a' + (999 % 26) as u8);
        let e = read_body(&h, chunks(1001), 1000, Duration::from_secs(1)).await;
        assert_eq!(e.unwrap_err().status, http::StatusCode::PAYLOAD_TOO_LARGE);
    }

    #[tokio::test(start_paused = true)]
    async fn slow_body_times_out() {
        // A body that never yields a frame.
        struct Never;
        impl http_body::Body for Never {
            type Data = Bytes;
            type Error = std::io::Error;
            fn poll_frame(
                self: std::pin::Pin<&mut Self>,
                _: &mut std::task::Context<'_>,
            ) -> std::task::Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
                std::task::Poll::Pending
            }
        }
        let e = read_body(&HeaderMap::new(), Never, 100, Duration::from_secs(5)).await;
        assert_eq!(e.unwrap_err().status, http::StatusCode::REQUEST_TIMEOUT);
    }
}
