//! Accepting connections: HTTP/1.1 and h2c (prior knowledge) on one port through hyper-util's
//! auto builder, with graceful shutdown that lets open connections finish.

use crate::Shared;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Which handler a listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    Api,
    Admin,
}

pub async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
    kind: Listener,
    drain: Duration,
) {
    let graceful = GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    let client_timeout = shared.table().config.timeouts.client();
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(client_timeout)
        .keep_alive(true);
    builder.http2().timer(TokioTimer::new());
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let stream = match accepted {
                    Ok((stream, _peer)) => stream,
                    Err(e) => {
                        // Out of file descriptors and the like: back off instead of spinning.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let shared = shared.clone();
                let service = service_fn(move |req| {
                    let shared = shared.clone();
                    async move {
                        Ok::<_, Infallible>(match kind {
                            Listener::Api => crate::api::handle(shared, req).await,
                            Listener::Admin => crate::admin::handle(&shared, req),
                        })
                    }
                });
                let conn = builder.serve_connection(TokioIo::new(stream), service).into_owned();
                let conn = graceful.watch(conn);
                tokio::spawn(async move {
                    if let Err(e) = conn.await {
                        tracing::debug!(error = %e, "connection ended with an error");
                    }
                });
            }
            _ = shutdown.changed() => break,
        }
    }
    drop(listener);
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(drain) => {
            tracing::warn!("connections still open after the drain time; closing");
        }
    }
}
