//! The admin listener: `/metrics` (OpenMetrics text), `/healthz` (the process answers) and
//! `/readyz` (every watch cache has been filled once).

use crate::error::Error;
use crate::metrics::Metrics;
use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::net::TcpListener;

/// What the admin endpoints report.
pub struct AdminState {
    pub metrics: Arc<Metrics>,
    /// Set once every reflector store has been filled.
    pub synced: AtomicBool,
}

fn text(
    status: StatusCode,
    body: impl Into<Bytes>,
    content_type: &'static str,
) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(body.into()));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

/// Answers one admin request.
pub fn handle<B>(state: &AdminState, req: &Request<B>) -> Response<Full<Bytes>> {
    const PLAIN: &str = "text/plain; charset=utf-8";
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "use GET\n", PLAIN);
    }
    match req.uri().path() {
        "/metrics" => text(
            StatusCode::OK,
            state.metrics.encode(),
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        ),
        "/healthz" => text(StatusCode::OK, "ok\n", PLAIN),
        "/readyz" if state.synced.load(Ordering::Acquire) => {
            text(StatusCode::OK, "caches synced\n", PLAIN)
        }
        "/readyz" => text(
            StatusCode::SERVICE_UNAVAILABLE,
            "watch caches not synced yet\n",
            PLAIN,
        ),
        path => text(
            StatusCode::NOT_FOUND,
            format!("no admin endpoint {path}: try /metrics, /healthz or /readyz\n"),
            PLAIN,
        ),
    }
}

/// Binds `addr` and serves the admin endpoints until the task is dropped. Returns the bound
/// address (the port is chosen by the OS when `addr` has port 0).
pub async fn serve(
    addr: SocketAddr,
    state: Arc<AdminState>,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), Error> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Admin { addr, source })?;
    let local = listener
        .local_addr()
        .map_err(|source| Error::Admin { addr, source })?;
    let task = tokio::spawn(async move {
        loop {
            let (stream, _) = match listener.accept().await {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "admin accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            };
            let state = state.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| {
                    let resp = handle(&state, &req);
                    async move { Ok::<_, std::convert::Infallible>(resp) }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    Ok((local, task))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(state: &AdminState, path: &str) -> Response<Full<Bytes>> {
        handle(state, &Request::get(path).body(()).unwrap())
    }

    #[test]
    fn endpoints() {
        let state = AdminState {
            metrics: Arc::new(Metrics::new()),
            synced: AtomicBool::new(false),
        };
        assert_eq!(get(&state, "/healthz").status(), StatusCode::OK);
        assert_eq!(
            get(&state, "/readyz").status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        state.synced.store(true, Ordering::Release);
        assert_eq!(get(&state, "/readyz").status(), StatusCode::OK);
        assert_eq!(get(&state, "/metrics").status(), StatusCode::OK);
        assert_eq!(get(&state, "/nope").status(), StatusCode::NOT_FOUND);
        let post = handle(&state, &Request::post("/metrics").body(()).unwrap());
        assert_eq!(post.status(), StatusCode::METHOD_NOT_ALLOWED);
    }
}
