//! ROUTER: accepts peers on a bound port, receives their messages with the peer's identity as
//! the first frame, and sends a message to the peer its first frame names. Only what a replay
//! server needs: it binds, and a sender waits for room in the peer's queue.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::mpsc;

use crate::codec::Item;
use crate::connection::{self, Connection, Inbound, Outgoing, Registry};
use crate::handshake::{generated_identity, SocketType};
use crate::{Error, Options};

/// A ROUTER socket.
pub struct RouterSocket(Inbound<Shared>);

#[derive(Default)]
struct Shared {
    peers: Arc<Registry<(Bytes, mpsc::Sender<Outgoing>)>>,
    generated: AtomicU32,
}

impl RouterSocket {
    pub fn new(options: Options) -> Self {
        Self(Inbound::new(options))
    }

    /// Accepts peers on `endpoint` (port 0 picks one); returns the endpoint bound.
    pub async fn bind(&mut self, endpoint: &str) -> Result<String, Error> {
        self.0.bind(endpoint, SocketType::Router, serve).await
    }

    /// The next message: the sender's identity, then its frames.
    pub async fn recv(&mut self) -> Result<Vec<Bytes>, Error> {
        self.0.recv().await
    }

    /// Sends `frames[1..]` to the peer whose identity is `frames[0]`, waiting while its queue
    /// is full.
    pub async fn send(&self, mut frames: Vec<Bytes>) -> Result<(), Error> {
        if frames.len() < 2 {
            return Err(Error::Protocol(
                "a ROUTER message needs an identity and a body".to_owned(),
            ));
        }
        let identity = frames.remove(0);
        let out = self.0.shared.peers.with(|peers| {
            peers
                .values()
                .find(|(id, _)| *id == identity)
                .map(|(_, out)| out.clone())
        });
        let Some(out) = out else {
            return Err(Error::Unroutable(identity));
        };
        out.send(Outgoing::Message(frames.into()))
            .await
            .map_err(|_| Error::Unroutable(identity))
    }
}

async fn serve(
    connection: Connection,
    shared: Arc<Shared>,
    inbound: mpsc::Sender<Vec<Bytes>>,
    queue: usize,
) -> Result<(), Error> {
    let Connection {
        mut reader,
        writer,
        peer,
    } = connection;
    let (out, pending) = mpsc::channel(queue.max(1));
    let mut identity = Bytes::new();
    let _joined = shared.peers.join(|peers| {
        // The peer's own identity unless another peer holds it (then one made up, as libzmq
        // does); a made-up one starts with a zero byte, which no chosen one may.
        identity = peer
            .identity
            .filter(|id| id[0] != 0 && !peers.values().any(|(other, _)| other == id))
            .unwrap_or_else(|| {
                generated_identity(shared.generated.fetch_add(1, Ordering::Relaxed))
            });
        (identity.clone(), out.clone())
    });
    let read = async {
        loop {
            if let Item::Message(frames) = reader.next_answering(&out).await? {
                let mut message = Vec::with_capacity(frames.len() + 1);
                message.push(identity.clone());
                message.extend(frames);
                inbound
                    .send(message)
                    .await
                    .map_err(|_| Error::SocketClosed)?;
            }
        }
    };
    connection::run(read, writer, pending).await
}
