//! A ZMQ SUB socket for KV events, and vLLM's replay client (feature `zmq`), on
//! `warmpath-zmtp`: every frame an engine (or anyone who reaches the socket) announces is
//! checked against the message bound before it is buffered.
//!
//! vLLM's publisher connects to a non-wildcard endpoint, so the subscriber binds it; one
//! subscriber can receive from many engines, telling them apart by topic. A publisher given a
//! wildcard endpoint (`tcp://*:PORT`) binds instead, and any number of subscribers (router
//! replicas) connect to it ([`KvEventSubscriber::connect`]); the socket reconnects by itself
//! when the engine restarts.

use bytes::Bytes;
use warmpath_zmtp::{DealerSocket, Options, SubSocket};

use crate::frames::{decode_message, KvMessage};
use crate::DecodeError;

/// The largest message read by default: vLLM batches a step's events into one message, and a
/// long prompt's `BlockStored` carries every token id (16 MiB is about a million blocks'
/// hashes, or four million token ids).
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 16 << 20;

/// Why receiving failed.
#[derive(Debug, thiserror::Error)]
pub enum SubscribeError {
    #[error("zmtp: {0}")]
    Zmtp(#[from] warmpath_zmtp::Error),
    #[error("decode: {0}")]
    Decode(#[from] DecodeError),
    #[error("the replay did not finish in time")]
    ReplayTimeout,
}

/// The sequence number that ends a replay (vLLM sends -1 as a signed 8-byte integer).
pub const END_SEQ: [u8; 8] = [0xFF; 8];

fn options(max_message_bytes: usize) -> Options {
    Options::default().with_max_message_bytes(max_message_bytes)
}

fn subscribed(topic_prefix: &str, max_message_bytes: usize) -> SubSocket {
    let socket = SubSocket::new(options(max_message_bytes));
    socket.subscribe(topic_prefix.as_bytes());
    socket
}

/// Ask a publisher's replay endpoint (vLLM's `replay_endpoint`, a ROUTER socket) for every
/// batch it still keeps from sequence number `from` on, as vLLM's protocol has it: a DEALER
/// sends `["", from]` and receives `["", topic, seq, payload]` per batch, then `["", "",
/// END_SEQ, ""]`. SGLang's replay leaves the topic out (`["", seq, payload]`, then `["",
/// END_SEQ, ""]`): its batches come back with an empty topic. At most `max` messages are kept
/// (the rest are read and dropped), none larger than `max_message_bytes`, and the whole
/// exchange must end within `timeout`.
pub async fn replay(
    endpoint: &str,
    from: u64,
    max: usize,
    max_message_bytes: usize,
    timeout: std::time::Duration,
) -> Result<Vec<KvMessage>, SubscribeError> {
    let exchange = async {
        let mut socket = DealerSocket::connect(endpoint, options(max_message_bytes)).await?;
        socket
            .send(&[Bytes::new(), Bytes::copy_from_slice(&from.to_be_bytes())])
            .await?;
        let mut out = Vec::new();
        loop {
            let frames = socket.recv().await?;
            // ["", topic, seq, payload] (vLLM) or ["", seq, payload] (SGLang): the empty
            // delimiter first.
            let body = frames.get(1..).unwrap_or_default();
            let with_topic = body.len() != 2;
            let seq_at = usize::from(with_topic);
            if body.get(seq_at).is_some_and(|s| s.as_ref() == END_SEQ) {
                return Ok(out);
            }
            if out.len() < max {
                out.push(if with_topic {
                    decode_message(body)?
                } else {
                    decode_message(&[&[][..], body[0].as_ref(), body[1].as_ref()])?
                });
            }
        }
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .unwrap_or(Err(SubscribeError::ReplayTimeout))
}

/// A SUB socket that yields decoded messages.
pub struct KvEventSubscriber {
    socket: SubSocket,
    endpoint: String,
}

impl KvEventSubscriber {
    /// Binds `endpoint` (e.g. `tcp://127.0.0.1:5557`, port 0 picks one) and subscribes to
    /// topics starting with `topic_prefix` ("" for all), with messages of at most
    /// [`DEFAULT_MAX_MESSAGE_BYTES`].
    pub async fn bind(endpoint: &str, topic_prefix: &str) -> Result<Self, SubscribeError> {
        Self::bind_with(endpoint, topic_prefix, DEFAULT_MAX_MESSAGE_BYTES).await
    }

    /// [`Self::bind`] with messages of at most `max_message_bytes`.
    pub async fn bind_with(
        endpoint: &str,
        topic_prefix: &str,
        max_message_bytes: usize,
    ) -> Result<Self, SubscribeError> {
        let mut socket = subscribed(topic_prefix, max_message_bytes);
        let endpoint = socket.bind(endpoint).await?;
        Ok(Self { socket, endpoint })
    }

    /// Connects to a publisher that binds `endpoint` (e.g. `tcp://10.0.0.7:5557`) and
    /// subscribes to topics starting with `topic_prefix`. The connection is made in the
    /// background, and made again whenever it fails: only a malformed endpoint is an error.
    pub async fn connect(endpoint: &str, topic_prefix: &str) -> Result<Self, SubscribeError> {
        Self::connect_with(endpoint, topic_prefix, DEFAULT_MAX_MESSAGE_BYTES).await
    }

    /// [`Self::connect`] with messages of at most `max_message_bytes`.
    pub async fn connect_with(
        endpoint: &str,
        topic_prefix: &str,
        max_message_bytes: usize,
    ) -> Result<Self, SubscribeError> {
        let mut socket = subscribed(topic_prefix, max_message_bytes);
        socket.connect(endpoint)?;
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
    pub async fn recv_frames(&mut self) -> Result<Vec<Bytes>, SubscribeError> {
        Ok(self.socket.recv().await?)
    }

    /// The next message, decoded. A message that does not decode is an error for that message
    /// only; the socket stays usable.
    pub async fn recv(&mut self) -> Result<KvMessage, SubscribeError> {
        let frames = self.recv_frames().await?;
        Ok(decode_message(&frames)?)
    }
}
