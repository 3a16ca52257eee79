//! SUB: receives the messages of every publisher it is connected to (by binding, or by
//! connecting and reconnecting) whose first frame starts with a subscribed topic. The
//! publishers are told the subscriptions, and what they send anyway is filtered here too.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::sync::mpsc;

use crate::codec::Item;
use crate::connection::{self, Connection, Inbound, Outgoing, Registry};
use crate::handshake::SocketType;
use crate::{Error, Options};

/// A SUB socket.
pub struct SubSocket(Inbound<Shared>);

#[derive(Default)]
struct Shared {
    topics: Mutex<Vec<Bytes>>,
    /// Each connection's queue to its publisher (subscriptions, PONGs).
    peers: Arc<Registry<mpsc::Sender<Outgoing>>>,
}

impl Shared {
    fn topics(&self) -> std::sync::MutexGuard<'_, Vec<Bytes>> {
        self.topics.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wants(&self, topic: &[u8]) -> bool {
        self.topics().iter().any(|t| topic.starts_with(t))
    }
}

impl SubSocket {
    pub fn new(options: Options) -> Self {
        Self(Inbound::new(options))
    }

    /// Accepts publishers on `endpoint` (port 0 picks one); returns the endpoint bound.
    pub async fn bind(&mut self, endpoint: &str) -> Result<String, Error> {
        self.0.bind(endpoint, SocketType::Sub, serve).await
    }

    /// Connects to a publisher bound at `endpoint`, in the background and again whenever the
    /// connection fails; only a malformed endpoint is an error here.
    pub fn connect(&mut self, endpoint: &str) -> Result<(), Error> {
        self.0.connect(endpoint, SocketType::Sub, serve)
    }

    /// Receives messages whose first frame starts with `topic` ("" for all), from every
    /// publisher, those connected now and later.
    pub fn subscribe(&self, topic: &[u8]) {
        let shared = &self.0.shared;
        let topic = Bytes::copy_from_slice(topic);
        let mut topics = shared.topics();
        topics.push(topic.clone());
        shared.peers.with(|peers| {
            for out in peers.values() {
                if out.try_send(Outgoing::Subscribe(topic.clone())).is_err() {
                    tracing::warn!(
                        "a publisher's queue is full: it misses a subscription until it reconnects"
                    );
                }
            }
        });
    }

    /// The next message, its frames.
    pub async fn recv(&mut self) -> Result<Vec<Bytes>, Error> {
        self.0.recv().await
    }
}

async fn serve(
    connection: Connection,
    shared: Arc<Shared>,
    inbound: mpsc::Sender<Vec<Bytes>>,
    queue: usize,
) -> Result<(), Error> {
    let Connection {
        mut reader, writer, ..
    } = connection;
    let (out, pending) = mpsc::channel(queue.max(1));
    // Holding the topics' lock while joining: a subscription made meanwhile reaches this
    // publisher exactly once, from the list or from `subscribe`.
    let _joined = {
        let topics = shared.topics();
        shared.peers.join(|_| {
            for topic in topics.iter() {
                let _ = out.try_send(Outgoing::Subscribe(topic.clone()));
            }
            out.clone()
        })
    };
    let read = async {
        loop {
            if let Item::Message(frames) = reader.next_answering(&out).await? {
                if frames.first().is_some_and(|topic| shared.wants(topic)) {
                    inbound
                        .send(frames)
                        .await
                        .map_err(|_| Error::SocketClosed)?;
                }
            }
        }
    };
    connection::run(read, writer, pending).await
}
