//! The accept loop of a replica, and the refuse-connections fault: while it is on, the
//! listening socket is closed (connects are refused, as by a dead pod) and open connections are
//! dropped. A drain (SIGTERM) closes the listener and lets open connections finish their
//! requests, as vLLM's server does when its pod is deleted.

use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};

use super::{handle, Ctx};

/// When a replica's serving ends.
#[derive(Clone)]
pub struct Lifecycle {
    /// Set: stop now, dropping open connections.
    pub shutdown: watch::Receiver<bool>,
    /// Set: accept no more connections, close open ones once their requests are answered.
    pub drain: watch::Receiver<bool>,
    /// Held while the accept loop or a connection lives; the drain waits for every clone to go.
    pub open: mpsc::Sender<()>,
}

/// Serves a replica's listener until shut down or drained, closing it (and every open
/// connection) while the refuse-connections fault is on.
pub async fn serve(listener: TcpListener, ctx: Arc<Ctx>, life: Lifecycle) {
    let Lifecycle {
        mut shutdown,
        mut drain,
        ..
    } = life.clone();
    let addr = ctx.replica.addr;
    let mut faults = ctx.replica.faults.subscribe();
    let mut listener = Some(listener);
    loop {
        let refusing = faults.borrow_and_update().refuse_connections;
        if refusing {
            listener = None;
        } else if listener.is_none() {
            match TcpListener::bind(addr).await {
                Ok(l) => listener = Some(l),
                Err(e) => {
                    tracing::warn!(%addr, error = %e, "rebinding after refuse fault failed; retrying");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            }
        }
        let accept = async {
            match &listener {
                Some(l) => l.accept().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            r = accept => match r {
                Ok((stream, _)) => {
                    let _ = stream.set_nodelay(true);
                    tokio::spawn(connection(stream, ctx.clone(), life.clone()));
                }
                Err(e) => {
                    tracing::debug!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
            c = faults.changed() => if c.is_err() { return },
            _ = shutdown.changed() => return,
            _ = drained(&mut drain) => return,
        }
    }
}

/// Resolves once the drain is set (never if its sender is gone: then shutdown ends serving).
async fn drained(drain: &mut watch::Receiver<bool>) {
    if drain.wait_for(|d| *d).await.is_err() {
        std::future::pending::<()>().await;
    }
}

async fn connection(stream: tokio::net::TcpStream, ctx: Arc<Ctx>, life: Lifecycle) {
    let Lifecycle {
        mut shutdown,
        mut drain,
        open: _open,
    } = life;
    let mut faults = ctx.replica.faults.subscribe();
    let svc_ctx = ctx.clone();
    let svc = service_fn(move |req| handle(svc_ctx.clone(), req));
    let builder = auto::Builder::new(TokioExecutor::new());
    let conn = builder.serve_connection(TokioIo::new(stream), svc);
    tokio::pin!(conn);
    let refused = async {
        loop {
            if faults.borrow_and_update().refuse_connections {
                return;
            }
            if faults.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::pin!(refused);
    let mut draining = false;
    loop {
        tokio::select! {
            _ = conn.as_mut() => return,
            _ = &mut refused => return,
            _ = shutdown.changed() => return,
            _ = drained(&mut drain), if !draining => {
                // Answers the request in progress (a stream to its end), then closes.
                draining = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}
