//! Accepting connections: HTTP/1.1 and h2c (prior knowledge) on one port through hyper-util's
//! auto builder, or both over TLS (ALPN) when the listener has a certificate ([`tls`]), with graceful shutdown that lets open connections finish. Knows nothing of
//! what it serves: each listener is given its tower service.
//!
//! What a connection may hold is bounded: at most `max_connections` at once (more are answered
//! 503 and closed), a connection that does not say which protocol it speaks within
//! `header_read` is closed (hyper-util reads the HTTP/2 preface with no timeout of its own, so a
//! socket that sends nothing, or part of the preface, would be held for good), and HTTP/2
//! connections are pinged so that a vanished peer is noticed.

pub mod tls;

use crate::errors::{ApiError, RespBody};
use crate::tenants::PeerAddr;
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use std::cell::RefCell;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

/// How long connections may take, and how many there may be.
#[derive(Clone)]
pub struct ServeOptions {
    /// Reading a request head (HTTP/1), and the first bytes of a connection.
    pub header_read: Duration,
    /// How long shutdown waits for open connections to finish.
    pub drain: Duration,
    /// Connections open at once; more are answered 503 and closed.
    pub max_connections: usize,
    /// Longest a write to the client may wait (a client that stops reading): the connection
    /// is closed, which ends its requests and frees their replicas.
    pub write_stall: Duration,
    /// Counted here when given (the API listener's).
    pub counters: Option<ConnectionCounters>,
    /// TLS when given; plain HTTP otherwise.
    pub tls: Option<tokio_rustls::TlsAcceptor>,
}

/// Open connections, connections refused at the limit, and TLS handshakes that failed or
/// did not finish within `header_read`.
#[derive(Debug, Clone, Default)]
pub struct ConnectionCounters {
    pub open: Gauge,
    pub refused: Counter,
    pub tls_failed: Counter,
}

/// What a listener serves: a tower stack that answers every request (errors are responses),
/// cloned once per connection.
pub trait ApiService:
    tower::Service<
        Request<Incoming>,
        Response = Response<RespBody>,
        Error = Infallible,
        Future: Send + 'static,
    > + Clone
    + Send
    + 'static
{
}

impl<S> ApiService for S where
    S: tower::Service<
            Request<Incoming>,
            Response = Response<RespBody>,
            Error = Infallible,
            Future: Send + 'static,
        > + Clone
        + Send
        + 'static
{
}

/// How often an idle HTTP/2 connection is pinged, and how long the answer may take.
const H2_KEEP_ALIVE: Duration = Duration::from_secs(20);

pub async fn serve<S>(
    listener: TcpListener,
    service: S,
    mut shutdown: watch::Receiver<bool>,
    options: ServeOptions,
) where
    S: ApiService,
{
    let graceful = GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(options.header_read)
        .keep_alive(true);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(H2_KEEP_ALIVE)
        .keep_alive_timeout(H2_KEEP_ALIVE);
    let builder = Arc::new(builder);
    let slots = Arc::new(Semaphore::new(options.max_connections.max(1)));
    let counters = options.counters.clone().unwrap_or_default();
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
                let Some(slot) = Slot::take(&slots, &counters.open) else {
                    counters.refused.inc();
                    tokio::spawn(refuse(stream, options.max_connections));
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let service = ConnService(RefCell::new(service.clone()), PeerAddr(peer));
                let (builder, watcher) = (builder.clone(), graceful.watcher());
                let (header_read, write_stall) = (options.header_read, options.write_stall);
                let (tls, tls_failed) = (options.tls.clone(), counters.tls_failed.clone());
                tokio::spawn(async move {
                    let _slot = slot;
                    let Some(tls) = tls else {
                        if !speaks(&stream, header_read).await {
                            return;
                        }
                        let stream = StallGuard::new(stream, write_stall);
                        serve_io(stream, &builder, service, watcher).await;
                        return;
                    };
                    // The handshake is held to the same bound as a request head: a client
                    // that opens a socket and says nothing must not keep it.
                    let stream = StallGuard::new(stream, write_stall);
                    match tokio::time::timeout(header_read, tls.accept(stream)).await {
                        Ok(Ok(stream)) => serve_io(stream, &builder, service, watcher).await,
                        Ok(Err(e)) => {
                            tls_failed.inc();
                            tracing::debug!(error = %e, %peer, "TLS handshake failed");
                        }
                        Err(_) => {
                            tls_failed.inc();
                            tracing::debug!(%peer, "no TLS handshake within the header timeout");
                        }
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

/// One connection, HTTP/1.1 or HTTP/2 (told apart by the first bytes), until it ends or the
/// graceful shutdown closes it.
async fn serve_io<I, S>(
    io: I,
    builder: &auto::Builder<TokioExecutor>,
    service: ConnService<S>,
    watcher: hyper_util::server::graceful::Watcher,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    S: ApiService,
{
    let conn = builder.serve_connection(TokioIo::new(io), service);
    if let Err(e) = watcher.watch(conn.into_owned()).await {
        tracing::debug!(error = %e, "connection ended with an error");
    }
}

/// A connection whose writes fail once one has waited longer than `limit`: a client that stops
/// reading (its receive window full) would otherwise hold its requests, their replicas' slots
/// and the router's buffers for as long as it likes. Reads pass through untouched.
struct StallGuard {
    inner: TcpStream,
    limit: Duration,
    /// Armed when a write could not proceed; cleared by one that did.
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl StallGuard {
    fn new(inner: TcpStream, limit: Duration) -> Self {
        Self {
            inner,
            limit,
            stalled: None,
        }
    }

    /// A write's outcome, watched: one that proceeds clears the stall; one that cannot
    /// (`Pending`) arms it, and fails once the stall has lasted `limit`.
    fn watch<T>(
        &mut self,
        polled: Poll<std::io::Result<T>>,
        cx: &mut Context<'_>,
    ) -> Poll<std::io::Result<T>> {
        if polled.is_ready() {
            self.stalled = None;
            return polled;
        }
        let limit = self.limit;
        let timer = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("the client read nothing for {limit:?}"),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl tokio::io::AsyncRead for StallGuard {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for StallGuard {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.watch(polled, cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.watch(polled, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        self.watch(polled, cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A connection's place under `max_connections`, counted open while it is held: both end with
/// the connection's task, however it ends.
struct Slot {
    _permit: OwnedSemaphorePermit,
    open: Gauge,
}

impl Slot {
    /// A free place, or `None` at the limit.
    fn take(slots: &Arc<Semaphore>, open: &Gauge) -> Option<Self> {
        let permit = slots.clone().try_acquire_owned().ok()?;
        open.inc();
        Some(Self {
            _permit: permit,
            open: open.clone(),
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.open.dec();
    }
}

/// Whether the connection sends enough, within `limit`, to tell HTTP/2's preface from HTTP/1
/// (after which hyper's own timeouts apply). Peeks: the bytes stay for hyper to read.
async fn speaks(stream: &TcpStream, limit: Duration) -> bool {
    const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    let deadline = tokio::time::Instant::now() + limit;
    let mut buf = [0u8; PREFACE.len()];
    loop {
        let n = match tokio::time::timeout_at(deadline, stream.peek(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => n,
            // Closed, failed, or silent until the deadline.
            _ => return false,
        };
        if n == PREFACE.len() || buf[..n] != PREFACE[..n] {
            return true;
        }
        // Part of the preface: peek answers at once while those bytes wait, so wait a little.
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Answer a connection over the limit with a 503 (HTTP/1; an HTTP/2 client sees the connection
/// close) and close it, within a second whatever the client does.
async fn refuse(mut stream: TcpStream, limit: usize) {
    let error = ApiError {
        retry_after: Some(1),
        ..ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            "too_many_connections",
            format!("The router has {limit} connections open, its limit (limits.max_connections); retry later."),
        )
    };
    let body = error.body_json();
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n\
         connection: close\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body.as_bytes()).await?;
        stream.shutdown().await
    })
    .await;
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
    S: ApiService,
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
