//! The accept loop of a replica, and the refuse-connections fault: while it is on, the
//! listening socket is closed (connects are refused, as by a dead pod) and open connections are
//! dropped.

use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::{handle, Ctx};

/// Serves a replica's listener until `shutdown`, closing it (and every open connection) while
/// the refuse-connections fault is on.
pub async fn serve(listener: TcpListener, ctx: Arc<Ctx>, mut shutdown: watch::Receiver<bool>) {
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
                    tokio::spawn(connection(stream, ctx.clone(), shutdown.clone()));
                }
                Err(e) => {
                    tracing::debug!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
            c = faults.changed() => if c.is_err() { return },
            _ = shutdown.changed() => return,
        }
    }
}

async fn connection(
    stream: tokio::net::TcpStream,
    ctx: Arc<Ctx>,
    mut shutdown: watch::Receiver<bool>,
) {
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
    tokio::select! {
        _ = conn.as_mut() => {}
        _ = refused => {}
        _ = shutdown.changed() => {}
    }
}
