//! A request's body read whole: bounded in bytes (413 past the limit, before a byte is read
//! when `content-length` says so) and in time (408), kept as it came when it comes in one chunk.
//! The proxy's read-body stage and the P/D sidecar read bodies this way.

use crate::errors::ApiError;
use bytes::{Bytes, BytesMut};
use http::HeaderMap;
use http_body_util::BodyExt;
use std::time::Duration;

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
    read_body_reserving(headers, body, limit, timeout, &mut |_| Ok(())).await
}

/// [`read_body`], telling `reserve` the bytes received so far after every chunk; its error
/// ends the read.
pub(crate) async fn read_body_reserving<B>(
    headers: &HeaderMap,
    body: B,
    limit: usize,
    timeout: Duration,
    reserve: &mut (dyn FnMut(usize) -> Result<(), ApiError> + Send),
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
    tokio::time::timeout(timeout, collect(body, limit, hint, reserve))
        .await
        .unwrap_or_else(|_| Err(ApiError::body_timeout()))
}

async fn collect<B>(
    body: B,
    limit: usize,
    hint: usize,
    reserve: &mut (dyn FnMut(usize) -> Result<(), ApiError> + Send),
) -> Result<Bytes, ApiError>
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
        reserve(total)?;
        match first.take() {
            None if rest.is_empty() => first = Some(data),
            held => {
                if let Some(held) = held {
                    // The announced length only up to twice what has come (and been counted
                    // against the budget): a client that announces 16 MiB and stalls after two
                    // chunks must not hold 16 MiB of memory the budget never saw.
                    rest.reserve(hint.min(total.saturating_mul(2)).max(total));
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
