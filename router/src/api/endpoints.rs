//! Which endpoint a request is for: completions go down the proxy stack; `/v1/models` and
//! `/health` are answered here from the routing table; anything else is a 404 or 405. This is
//! also where a request that was not served becomes its OpenAI-shaped error answer, logged and
//! counted once.

use super::request_id::REQUEST_ID_HEADER;
use super::{Ctx, Incoming, Rejection};
use crate::errors::{full_body, ApiError, RespBody};
use crate::metrics::{Metrics, RequestLabels};
use crate::request::Endpoint;
use crate::state::discovery::DiscoveryStatus;
use crate::state::publish::TableReader;
use futures_util::future::Either;
use http::{header, HeaderValue, Method, Request, Response};
use std::convert::Infallible;
use std::future::{ready, Future, Ready};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;
use tower::Service;

#[derive(Clone)]
pub struct Endpoints<P> {
    tables: TableReader,
    discovery: Arc<DiscoveryStatus>,
    metrics: Arc<Metrics>,
    proxy: P,
}

impl<P> Endpoints<P> {
    pub fn new(
        tables: TableReader,
        discovery: Arc<DiscoveryStatus>,
        metrics: Arc<Metrics>,
        proxy: P,
    ) -> Self {
        Self {
            tables,
            discovery,
            metrics,
            proxy,
        }
    }
}

/// The answer to a request that was not served; logged with its id and counted by model.
fn answer(metrics: &Metrics, request_id: &HeaderValue, rejection: Rejection) -> Response<RespBody> {
    let Rejection { error, model } = rejection;
    if error.status.is_server_error() {
        tracing::warn!(request_id = ?request_id, "{error}");
    } else {
        tracing::debug!(request_id = ?request_id, "{error}");
    }
    metrics
        .requests
        .answered
        .get_or_create(&RequestLabels {
            model,
            pool: String::new(),
            replica: String::new(),
            status: error.status.as_u16(),
        })
        .inc();
    error.into_response()
}

impl<P, B> Service<Request<B>> for Endpoints<P>
where
    P: Service<Incoming<B>, Response = Response<RespBody>, Error = Rejection>
        + Clone
        + Send
        + 'static,
    P::Future: Unpin,
    B: Send + 'static,
{
    type Response = Response<RespBody>;
    type Error = Infallible;
    type Future = Either<Answering<P::Future>, Ready<Result<Response<RespBody>, Infallible>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // The proxy stack is always ready (nothing below waits for capacity in poll_ready).
        match self.proxy.poll_ready(cx) {
            Poll::Ready(_) => Poll::Ready(Ok(())),
            Poll::Pending => Poll::Pending,
        }
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let started = Instant::now();
        let table = self.tables.current();
        // The outer layer has set it; the fallback is for this stage on its own.
        let request_id = match request.headers().get(&REQUEST_ID_HEADER) {
            Some(id) => id.clone(),
            None => super::request_id::request_id(&request),
        };
        let endpoint = match request.uri().path() {
            "/v1/completions" => Some(Endpoint::Completions),
            "/v1/chat/completions" => Some(Endpoint::ChatCompletions),
            _ => None,
        };
        let local = match (endpoint, request.method(), request.uri().path()) {
            (Some(endpoint), &Method::POST, _) => {
                let ctx = Ctx {
                    request_id: request_id.clone(),
                    started,
                    table,
                    endpoint,
                };
                return Either::Left(Answering {
                    inner: self.proxy.call(Incoming { ctx, request }),
                    metrics: self.metrics.clone(),
                    request_id,
                });
            }
            (None, &Method::GET, "/v1/models") => {
                let mut resp = Response::new(full_body(table.models_json.clone()));
                resp.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
                Ok(resp)
            }
            // vLLM answers `/health` on its API port and OpenAI-compatible tools (guidellm, the
            // SGLang gateway) probe it before sending load: answer it as readiness does.
            (None, &Method::GET, "/health") => {
                Ok(super::readiness::readiness(&table, &self.discovery))
            }
            (Some(_), m, p) | (None, m, p @ ("/v1/models" | "/health")) => {
                Err(ApiError::method_not_allowed(m, p))
            }
            (None, _, p) => Err(ApiError::not_found(p)),
        };
        let resp = local
            .unwrap_or_else(|e| answer(&self.metrics, &request_id, Rejection::before_parse(e)));
        Either::Right(ready(Ok(resp)))
    }
}

/// A proxied request's answer: the replica's response, or its rejection turned into one.
pub struct Answering<F> {
    inner: F,
    metrics: Arc<Metrics>,
    request_id: HeaderValue,
}

impl<F> Future for Answering<F>
where
    F: Future<Output = Result<Response<RespBody>, Rejection>> + Unpin,
{
    type Output = Result<Response<RespBody>, Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let answered = match Pin::new(&mut self.inner).poll(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(answered) => answered,
        };
        Poll::Ready(Ok(answered.unwrap_or_else(|rejection| {
            answer(&self.metrics, &self.request_id, rejection)
        })))
    }
}
