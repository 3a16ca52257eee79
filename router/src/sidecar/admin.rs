//! The sidecar's admin listener: `/metrics` (its own series),
//! `/healthz` (the process answers) and `/readyz` (the local engine's `/health` answers 200, so
//! the pod gets traffic only when its engine can serve it).

use super::{EngineUrl, UpstreamClient};
use crate::admin::metrics_response;
use crate::errors::text;
use crate::errors::{ApiError, RespBody};
use crate::metrics::SidecarMetrics;
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// Below the kubelet's default probe timeout (1 s): a slower engine is not ready, and the
/// answer should say so rather than the probe timing out.
const ENGINE_HEALTH_TIMEOUT: Duration = Duration::from_millis(800);

#[derive(Clone)]
pub struct AdminState {
    pub(crate) client: UpstreamClient,
    pub engine: EngineUrl,
    pub metrics: Arc<SidecarMetrics>,
}

type AdminFuture = Pin<Box<dyn Future<Output = Result<Response<RespBody>, Infallible>> + Send>>;

/// The admin listener as a tower service.
pub fn service<B: Send + 'static>(
    state: AdminState,
) -> impl tower::Service<
    Request<B>,
    Response = Response<RespBody>,
    Error = Infallible,
    Future = AdminFuture,
> + Clone
       + Send
       + 'static {
    tower::service_fn(move |req: Request<B>| {
        let state = state.clone();
        Box::pin(async move { Ok(handle(&state, req).await) }) as AdminFuture
    })
}

async fn handle<B>(state: &AdminState, req: Request<B>) -> Response<RespBody> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return ApiError::method_not_allowed(req.method(), req.uri().path()).into_response();
    }
    match req.uri().path() {
        "/metrics" => metrics_response(state.metrics.encode()),
        "/healthz" => text(StatusCode::OK, "ok\n".to_owned()),
        "/readyz" => match engine_health(state).await {
            Ok(()) => text(
                StatusCode::OK,
                format!("engine {} is healthy\n", state.engine),
            ),
            Err(why) => text(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("engine {}: {why}\n", state.engine),
            ),
        },
        path => ApiError::not_found(path).into_response(),
    }
}

/// `GET /health` on the engine: `Ok` on 200.
async fn engine_health(state: &AdminState) -> Result<(), String> {
    let mut req = Request::new(Full::new(Bytes::new()));
    *req.uri_mut() = state.engine.uri(Some(&"/health".parse().expect("a path")));
    match tokio::time::timeout(ENGINE_HEALTH_TIMEOUT, state.client.request(req)).await {
        Err(_) => Err(format!(
            "/health did not answer within {ENGINE_HEALTH_TIMEOUT:?}"
        )),
        Ok(Err(e)) => Err(format!("/health failed: {}", super::proxy::chain(&e))),
        Ok(Ok(resp)) if resp.status() == StatusCode::OK => Ok(()),
        Ok(Ok(resp)) => Err(format!("/health answered {}", resp.status())),
    }
}
