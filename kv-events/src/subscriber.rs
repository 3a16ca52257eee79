//! A ZMQ SUB socket for KV events (feature `zmq`).
//!
//! vLLM's publisher connects to a non-wildcard endpoint, so the subscriber binds it; one
//! subscriber can receive from many engines, telling them apart by topic. A publisher given a
//! wildcard endpoint (`tcp://*:PORT`) binds instead, and any number of subscribers (router
//! replicas) connect to it ([`KvEventSubscriber::connect`]); the socket reconnects by itself
//! when the engine restarts.

use zeromq::{DealerSocket, Socket, SocketRecv, SocketSend, SubSocket, ZmqMessage};

use crate::frames::{decode_message, KvMessage};
use crate::DecodeError;

/// Why receiving failed.
#[derive(Debug, thiserror::Error)]
pub enum SubscribeError {
    #[error("zmq: {0}")]
    Zmq(#[from] zeromq::ZmqError),
    #[error("decode: {0}")]
    Decode(#[from] DecodeError),
    #[error("the replay did not finish in time")]
    ReplayTimeout,
}

/// The sequence number that ends a replay (vLLM sends -1 as a signed 8-byte integer).
pub const END_SEQ: [u8; 8] = [0xFF; 8];

/// Ask a publisher's replay endpoint (vLLM's `replay_endpoint`, a ROUTER socket) for every
/// batch it still keeps from sequence number `from` on, as vLLM's protocol has it: a DEALER
/// sends `["", from]` and receives `["", topic, seq, payload]` per batch, then `["", "",
/// END_SEQ, ""]`. At most `max` messages are kept (the rest are read and dropped) and the whole
/// exchange must end within `timeout`.
pub async fn replay(
    endpoint: &str,
    from: u64,
    max: usize,
    timeout: std::time::Duration,
) -> Result<Vec<KvMessage>, SubscribeError> {
    let exchange = async {
        let mut socket = DealerSocket::new();
        socket.connect(endpoint).await?;
        let request: Vec<bytes::Bytes> = vec![
            bytes::Bytes::new(),
            bytes::Bytes::copy_from_slice(&from.to_be_bytes()),
        ];
        socket
            .send(ZmqMessage::try_from(request).expect("two frames"))
            .await?;
        let mut out = Vec::new();
        loop {
            let frames = socket.recv().await?.into_vec();
            // ["", topic, seq, payload]: the empty delimiter first.
            let body = frames.get(1..).unwrap_or_default();
            if body.get(1).is_some_and(|s| s.as_ref() == END_SEQ) {
                return Ok(out);
            }
            if out.len() < max {
                out.push(decode_message(body)?);
            }
        }
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .unwrap_or(Err(SubscribeError::ReplayTimeout))
}

/// A bound SUB socket that yields decoded messages.
pub struct KvEventSubscriber {
    socket: SubSocket,
    endpoint: String,
}

impl KvEventSubscriber {
    /// Binds `endpoint` (e.g. `tcp://127.0.0.1:5557`, port 0 picks one) and subscribes to
    /// topics starting with `topic_prefix` ("" for all).
    pub async fn bind(endpoint: &str, topic_prefix: &str) -> Result<Self, SubscribeError> {
        let mut socket = SubSocket::new();
        let bound = socket.bind(endpoint).await?;
        socket.subscribe(topic_prefix).await?;
        Ok(Self {
            socket,
            endpoint: bound.to_string(),
        })
    }

    /// Connects to a publisher that binds `endpoint` (e.g. `tcp://10.0.0.7:5557`) and
    /// subscribes to topics starting with `topic_prefix`.
    pub async fn connect(endpoint: &str, topic_prefix: &str) -> Result<Self, SubscribeError> {
        let mut socket = SubSocket::new();
        socket.subscribe(topic_prefix).await?;
        socket.connect(endpoint).await?;
        Ok(Self {
            socket,
            endpoint: endpoint.to_owned(),
        })
    }

    /// The endpoint actually bound (with the port resolved), or the one connected to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The raw frames of the next message.
    pub async fn recv_frames(&mut self) -> Result<Vec<bytes::Bytes>, SubscribeError> {
        Ok(self.socket.recv().await?.into_vec())
    }

    /// The next message, decoded. A message that does not decode is an error for that message
    /// only; the socket stays usable.
    pub async fn recv(&mut self) -> Result<KvMessage, SubscribeError> {
        let frames = self.recv_frames().await?;
        Ok(decode_message(&frames)?)
    }
}
