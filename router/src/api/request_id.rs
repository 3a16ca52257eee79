//! The outermost layer: every request gets an `x-request-id` (the client's when it sent a usable
//! one, else a fresh one), forwarded to the replica and echoed in the answer, and one access-log
//! line (at debug level, so it costs nothing unless asked for). The client's hop-by-hop headers
//! end here too.

use crate::errors::RespBody;
use http::header::HeaderName;
use http::{HeaderValue, Method, Request, Response};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;
use tower::{Layer, Service};

/// A `HeaderName` made once: looking a header up by `&str` parses the name every time.
pub const REQUEST_ID_HEADER: HeaderName = HeaderName::from_static("x-request-id");

/// Longest client-supplied request id forwarded as is.
const MAX_REQUEST_ID_LEN: usize = 128;

#[derive(Debug, Clone, Copy, Default)]
pub struct RequestIdLayer;

impl<S> Layer<S> for RequestIdLayer {
    type Service = RequestId<S>;
    fn layer(&self, inner: S) -> RequestId<S> {
        RequestId { inner }
    }
}

#[derive(Debug, Clone)]
pub struct RequestId<S> {
    inner: S,
}

/// The request's id: the client's when it is non-empty and short enough, else a fresh one.
pub fn request_id<B>(req: &Request<B>) -> HeaderValue {
    req.headers()
        .get(&REQUEST_ID_HEADER)
        .filter(|v| !v.is_empty() && v.len() <= MAX_REQUEST_ID_LEN)
        .cloned()
        .unwrap_or_else(new_request_id)
}

fn new_request_id() -> HeaderValue {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut id = [0u8; 35];
    id[..3].copy_from_slice(b"wp-");
    let mut x = rand::random::<u128>();
    for b in id[3..].iter_mut().rev() {
        *b = HEX[(x & 0xf) as usize];
        x >>= 4;
    }
    HeaderValue::from_bytes(&id).expect("hex is a valid header value")
}

impl<S, B> Service<Request<B>> for RequestId<S>
where
    S: Service<Request<B>, Response = Response<RespBody>, Error = Infallible>,
    S::Future: Unpin,
{
    type Response = Response<RespBody>;
    type Error = Infallible;
    type Future = RequestIdFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        // The client's hop-by-hop headers (and those its `Connection` names) stop here, before
        // the router adds its own: stripped later, at forwarding, a client could name the
        // router's headers (its request id, the P/D header it sets) and have them removed.
        crate::upstream::strip_hop_by_hop(req.headers_mut(), false);
        let id = request_id(&req);
        req.headers_mut().insert(REQUEST_ID_HEADER, id.clone());
        let log = tracing::enabled!(tracing::Level::DEBUG).then(|| {
            (
                Instant::now(),
                req.method().clone(),
                req.uri().path().to_owned(),
            )
        });
        RequestIdFuture {
            inner: self.inner.call(req),
            id: Some(id),
            log,
        }
    }
}

/// The answer on its way back: gets the id, and its log line. A plain future rather than an
/// `async` block, so that this layer allocates nothing.
pub struct RequestIdFuture<F> {
    inner: F,
    id: Option<HeaderValue>,
    log: Option<(Instant, Method, String)>,
}

impl<F> Future for RequestIdFuture<F>
where
    F: Future<Output = Result<Response<RespBody>, Infallible>> + Unpin,
{
    type Output = Result<Response<RespBody>, Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Poll::Ready(Ok(mut resp)) = Pin::new(&mut self.inner).poll(cx) else {
            return Poll::Pending;
        };
        let id = self.id.take().expect("polled after completion");
        if let Some((started, method, path)) = self.log.take() {
            tracing::debug!(
                request_id = ?id,
                %method,
                %path,
                status = resp.status().as_u16(),
                head_ms = started.elapsed().as_secs_f64() * 1e3,
                "request"
            );
        }
        resp.headers_mut().insert(REQUEST_ID_HEADER, id);
        Poll::Ready(Ok(resp))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::errors::full_body;
    use tower::ServiceExt;

    /// An inner service that answers with the request id it was given, in the body.
    fn echo() -> impl Service<
        Request<()>,
        Response = Response<RespBody>,
        Error = Infallible,
        Future = std::future::Ready<Result<Response<RespBody>, Infallible>>,
    > + Clone {
        tower::service_fn(|req: Request<()>| {
            let seen = req.headers()[REQUEST_ID_HEADER]
                .to_str()
                .unwrap()
                .to_owned();
            std::future::ready(Ok(Response::new(full_body(seen))))
        })
    }

    async fn run(req: Request<()>) -> (String, String) {
        use http_body_util::BodyExt;
        let resp = RequestIdLayer.layer(echo()).oneshot(req).await.unwrap();
        let out = resp.headers()[REQUEST_ID_HEADER]
            .to_str()
            .unwrap()
            .to_owned();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        (String::from_utf8(body.to_vec()).unwrap(), out)
    }

    #[tokio::test]
    async fn keeps_a_usable_client_id_in_both_directions() {
        let req = Request::builder()
            .header(REQUEST_ID_HEADER, "abc-1")
            .body(())
            .unwrap();
        assert_eq!(run(req).await, ("abc-1".into(), "abc-1".into()));
    }

    #[tokio::test]
    async fn replaces_missing_empty_or_long_ids_with_one_fresh_id() {
        let long = "x".repeat(MAX_REQUEST_ID_LEN + 1);
        for given in [None, Some(""), Some(long.as_str())] {
            let mut b = Request::builder();
            if let Some(v) = given {
                b = b.header(REQUEST_ID_HEADER, v);
            }
            let (inner, outer) = run(b.body(()).unwrap()).await;
            assert_eq!(inner, outer, "the replica and the client see the same id");
            assert!(inner.starts_with("wp-") && inner.len() == 35, "{inner}");
        }
        let (a, _) = run(Request::new(())).await;
        let (b, _) = run(Request::new(())).await;
        assert_ne!(a, b);
    }
}
