//! Pooled HTTP/1.1 connections to one replica, for the data path.
//!
//! A deliberately small pool: idle connections in a LIFO stack per replica (the most recently
//! used connection is the warmest), bounded in count and age. A connection goes back only
//! after its response body was read to the end; a response abandoned midway (client gone)
//! drops its connection, which is what tells the engine to stop generating. hyper-util's
//! general-purpose client did the same job at a measurably higher CPU cost per request
//! (bench/datapath.sh), and the data path is where that cost matters.
//!
//! The connection's release is this module's concern too: a response's body is a
//! [`PooledBody`], which hands its connection back when it has been read to the end. And what
//! does not pass a hop ([`strip_hop_by_hop`]).

mod hop_by_hop;

pub(crate) use hop_by_hop::strip_hop_by_hop;

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;

/// Idle connections kept per replica.
const MAX_IDLE: usize = 1024;
/// How long a connection just handed back may take to become ready for its next request.
const READY_WAIT: Duration = Duration::from_millis(500);

type Sender = http1::SendRequest<Full<Bytes>>;

/// Why a request could not get a response head.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// No connection could be opened: nothing was sent.
    #[error("connect: {0}")]
    Connect(std::io::Error),
    #[error("{0}")]
    Http(hyper::Error),
}

#[derive(Debug, Default)]
pub struct ConnPool {
    idle: Mutex<Vec<(Sender, Instant)>>,
}

/// A connection lent to one request; [`Lease::release`] returns it once its response is done.
#[derive(Debug)]
struct Lease {
    sender: Sender,
    pool: Arc<ConnPool>,
}

impl Lease {
    fn release(self) {
        if self.sender.is_closed() {
            return;
        }
        let mut idle = self.pool.idle.lock();
        if idle.len() < MAX_IDLE {
            idle.push((self.sender, Instant::now()));
        }
    }
}

impl ConnPool {
    /// Drop every idle connection (the replica left the configuration).
    pub fn clear(&self) {
        self.idle.lock().clear();
    }

    async fn checkout(
        self: &Arc<Self>,
        authority: &http::uri::Authority,
        connect_timeout: Duration,
        max_idle_age: Duration,
    ) -> Result<(Sender, bool), SendError> {
        loop {
            let Some((mut sender, since)) = self.idle.lock().pop() else {
                break;
            };
            if sender.is_closed() || since.elapsed() > max_idle_age {
                continue;
            }
            if !sender.is_ready() {
                match tokio::time::timeout(READY_WAIT, sender.ready()).await {
                    Ok(Ok(())) => {}
                    _ => continue,
                }
            }
            return Ok((sender, true));
        }
        let port = authority.port_u16().unwrap_or(80);
        let stream = tokio::time::timeout(
            connect_timeout,
            TcpStream::connect((authority.host(), port)),
        )
        .await
        .map_err(|_| {
            SendError::Connect(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no connection within {connect_timeout:?}"),
            ))
        })?
        .map_err(SendError::Connect)?;
        let _ = stream.set_nodelay(true);
        let (sender, conn) = http1::Builder::new()
            .handshake(TokioIo::new(stream))
            .await
            .map_err(SendError::Http)?;
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "upstream connection ended with an error");
            }
        });
        Ok((sender, false))
    }

    /// Send a request built by `make` and wait for the response head. A pooled connection that
    /// turns out to be closed before the request went out is replaced by a fresh one, so the
    /// request is never sent twice.
    pub async fn send(
        self: &Arc<Self>,
        authority: &http::uri::Authority,
        make: impl Fn() -> Request<Full<Bytes>>,
        connect_timeout: Duration,
        max_idle_age: Duration,
    ) -> Result<Response<PooledBody>, SendError> {
        let mut fresh_only = false;
        loop {
            let (mut sender, reused) = if fresh_only {
                let pool = Arc::new(ConnPool::default());
                pool.checkout(authority, connect_timeout, max_idle_age)
                    .await?
            } else {
                self.checkout(authority, connect_timeout, max_idle_age)
                    .await?
            };
            match sender.try_send_request(make()).await {
                Ok(resp) => {
                    let lease = Lease {
                        sender,
                        pool: self.clone(),
                    };
                    return Ok(resp.map(|inner| PooledBody {
                        inner,
                        lease: Some(lease),
                    }));
                }
                Err(e) if reused && e.message().is_some() => {
                    // The idle connection died before our request was written: try a new one.
                    fresh_only = true;
                }
                Err(e) => return Err(SendError::Http(e.into_error())),
            }
        }
    }
}

/// A replica's response body; its connection goes back to the pool once the body has been read
/// to the end, and is closed when the body is dropped before (the engine then stops generating).
#[derive(Debug)]
pub struct PooledBody {
    inner: Incoming,
    lease: Option<Lease>,
}

impl PooledBody {
    fn release(&mut self) {
        if let Some(lease) = self.lease.take() {
            lease.release();
        }
    }
}

impl Body for PooledBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(None) = polled {
            self.release();
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

impl Drop for PooledBody {
    fn drop(&mut self) {
        // An empty body nobody polled is complete: its connection can be reused.
        if self.inner.is_end_stream() {
            self.release();
        }
    }
}
