//! Accepting connections: HTTP/1.1 and h2c (prior knowledge) on one port through hyper-util's
//! auto builder, with graceful shutdown that lets open connections finish. Knows nothing of
//! what it serves: each listener is given its tower service.

use crate::errors::RespBody;
use crate::tenants::PeerAddr;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use std::cell::RefCell;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// How long connections may take.
#[derive(Debug, Clone, Copy)]
pub struct ServeOptions {
    /// Reading a request head (HTTP/1).
    pub header_read: Duration,
    /// How long shutdown waits for open connections to finish.
    pub drain: Duration,
}

pub async fn serve<S>(
    listener: TcpListener,
    service: S,
    mut shutdown: watch::Receiver<bool>,
    options: ServeOptions,
) where
    S: tower::Service<Request<Incoming>, Response = Response<RespBody>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let graceful = GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(options.header_read)
        .keep_alive(true);
    builder.http2().timer(TokioTimer::new());
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let stream = match accepted {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // Out of file descriptors and the like: back off instead of spinning.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                };
                let (stream, peer) = stream;
                let _ = stream.set_nodelay(true);
                let service = ConnService(RefCell::new(service.clone()), PeerAddr(peer));
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
        _ = tokio::time::sleep(options.drain) => {
            tracing::warn!("connections still open after the drain time; closing");
        }
    }
}

/// A connection's requests go through its own copy of the stack. hyper calls services through
/// `&self` and a tower service wants `&mut self`; the cell lends it for the instant of `call`
/// (the future it returns owns all it needs). So the stack is cloned once per connection, not
/// once per request as hyper-util's `TowerToHyperService` does (about 0.3 µs of CPU per request
/// on the data-path benchmark). Each request is given the connection's peer address (who may
/// name a tenant depends on it).
struct ConnService<S>(RefCell<S>, PeerAddr);

type Fallback = Pin<Box<dyn Future<Output = Result<Response<RespBody>, Infallible>> + Send>>;

impl<S> hyper::service::Service<Request<Incoming>> for ConnService<S>
where
    S: tower::Service<Request<Incoming>, Response = Response<RespBody>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = Response<RespBody>;
    type Error = Infallible;
    type Future = futures_util::future::Either<S::Future, Fallback>;

    fn call(&self, mut req: Request<Incoming>) -> Self::Future {
        req.extensions_mut().insert(self.1);
        let mut service = self.0.borrow_mut();
        // Every stage is ready at once (none waits for capacity in poll_ready); a stage that
        // ever is not gets a copy of the stack that waits for it.
        match service.poll_ready(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(Ok(())) => futures_util::future::Either::Left(service.call(req)),
            Poll::Ready(Err(never)) => match never {},
            Poll::Pending => {
                let waiting = service.clone();
                futures_util::future::Either::Right(Box::pin(tower::ServiceExt::oneshot(
                    waiting, req,
                )))
            }
        }
    }
}
