//! A TCP proxy in front of the test API server that can be told to black-hole: from then on
//! it keeps every connection open and passes no byte either way, as a dropped route or a
//! stuck load balancer does. Clients see neither an error nor an answer: only their own
//! deadlines end the wait.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub struct BlackholeProxy {
    addr: SocketAddr,
    holed: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl BlackholeProxy {
    /// Listens on a free local port and forwards to `upstream` until [`Self::black_hole`].
    pub async fn start(upstream: SocketAddr) -> std::io::Result<BlackholeProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let holed = Arc::new(AtomicBool::new(false));
        let h = holed.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let h = h.clone();
                tokio::spawn(async move {
                    if h.load(Ordering::Acquire) {
                        hold(client).await;
                        return;
                    }
                    let Ok(server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    tokio::join!(pipe(cr, sw, h.clone()), pipe(sr, cw, h));
                });
            }
        });
        Ok(BlackholeProxy { addr, holed, task })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// From now on nothing passes, on open connections and new ones alike.
    pub fn black_hole(&self) {
        self.holed.store(true, Ordering::Release);
    }
}

impl Drop for BlackholeProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Copies one direction until either side closes; once black-holed, reads and drops everything
/// while keeping both halves open.
async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    holed: Arc<AtomicBool>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if holed.load(Ordering::Acquire) {
            continue;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    if holed.load(Ordering::Acquire) {
        // Keep the other half open: a closed socket would tell the client something.
        std::future::pending::<()>().await;
    }
}

async fn hold(mut client: TcpStream) {
    let mut buf = [0u8; 4096];
    while matches!(client.read(&mut buf).await, Ok(n) if n > 0) {}
    std::future::pending::<()>().await;
}
