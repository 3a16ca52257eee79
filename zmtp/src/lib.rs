//! The part of ZMTP 3.0/3.1 (rfc.zeromq.org 23/ZMTP and 37/ZMTP) that warmpath speaks, on
//! tokio over TCP, with the NULL security mechanism only:
//! - [`SubSocket`]: binds (many publishers connect to it) or connects (reconnecting with
//!   backoff), subscribes to topic prefixes;
//! - [`PubSocket`]: binds or connects; honours each subscriber's subscriptions (the ZMTP 3.0
//!   `0x01`/`0x00` messages and the 3.1 SUBSCRIBE/CANCEL commands); a slow subscriber's queue
//!   is bounded and drops, the publisher never waits;
//! - [`DealerSocket`]: one connection, send and receive (vLLM's replay client);
//! - [`RouterSocket`]: binds, receives with the peer's identity first and answers it.
//!
//! Everything a peer announces is bounded before it costs memory: a frame's length is checked
//! against [`Limits`] when its header is read, before any buffer is reserved, and so are a
//! message's total bytes and frame count; the greeting and handshake must end within
//! [`Options::handshake_timeout`]; a bound socket holds at most [`Options::max_connections`]
//! connections. A peer that breaks a rule loses its connection (logged), never the socket.
#![forbid(unsafe_code)]

mod codec;
mod connection;
mod dealer;
mod endpoint;
mod handshake;
mod publish;
mod router;
mod subscribe;

pub use codec::{
    encode_command, encode_message, Command, Decoder, Item, Limits, MAX_COMMAND_BYTES,
};
pub use dealer::DealerSocket;
pub use endpoint::Endpoint;
pub use handshake::SocketType;
pub use publish::{PubSocket, MAX_SUBSCRIPTIONS};
pub use router::RouterSocket;
pub use subscribe::SubSocket;

use std::time::Duration;

/// Why a socket or one of its connections failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    #[error("endpoint `{0}`: expected tcp://HOST:PORT")]
    Endpoint(String),
    #[error("endpoint `{0}` resolves to no address")]
    Unresolved(String),
    #[error("not a ZMTP 3 peer: {0}")]
    Greeting(String),
    #[error("the peer's security mechanism `{0}` is not NULL")]
    Mechanism(String),
    #[error("the greeting and handshake took longer than {0:?}")]
    HandshakeTimeout(Duration),
    #[error("a peer of type {peer} cannot talk to a {ours} socket")]
    SocketType { ours: SocketType, peer: String },
    #[error("the peer refused the handshake: {0}")]
    Refused(String),
    #[error("a frame announced {announced} bytes, over the {max}-byte limit")]
    FrameTooLarge { announced: u64, max: usize },
    #[error("a message grew past the {max}-byte limit")]
    MessageTooLarge { max: usize },
    #[error("a message has more than {max} frames")]
    TooManyFrames { max: usize },
    #[error("the peer holds more than {max} subscriptions")]
    TooManySubscriptions { max: usize },
    #[error("protocol violation: {0}")]
    Protocol(String),
    #[error("the peer closed the connection")]
    Closed,
    #[error("the socket is closed")]
    SocketClosed,
    #[error("no connected peer has the identity {0:?}")]
    Unroutable(bytes::Bytes),
}

impl Error {
    /// The peer broke the protocol or a limit (rather than going away): worth a warning.
    pub fn is_violation(&self) -> bool {
        matches!(
            self,
            Error::Greeting(_)
                | Error::Mechanism(_)
                | Error::HandshakeTimeout(_)
                | Error::SocketType { .. }
                | Error::FrameTooLarge { .. }
                | Error::MessageTooLarge { .. }
                | Error::TooManyFrames { .. }
                | Error::TooManySubscriptions { .. }
                | Error::Protocol(_)
        )
    }
}

/// How a socket treats its peers.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// What one received message may hold.
    pub limits: Limits,
    /// The greeting and the READY exchange together; a peer that stalls before it is known
    /// holds a connection slot no longer than this.
    pub handshake_timeout: Duration,
    /// Connections a bound socket holds at once; further ones are closed on arrival.
    pub max_connections: usize,
    /// Messages queued per peer: a PUB drops past it (per subscriber), a ROUTER's sender
    /// waits; a SUB's and a ROUTER's received messages wait in a queue of this size.
    pub queue: usize,
    /// Delay before the first reconnection attempt of a connecting socket; it doubles with
    /// every failure up to `reconnect_max`.
    pub reconnect_min: Duration,
    pub reconnect_max: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            limits: Limits::default(),
            handshake_timeout: Duration::from_secs(10),
            max_connections: 256,
            queue: 1024,
            reconnect_min: Duration::from_millis(100),
            reconnect_max: Duration::from_secs(5),
        }
    }
}

impl Options {
    /// These options with messages (and so frames) of at most `bytes`.
    pub fn with_max_message_bytes(mut self, bytes: usize) -> Self {
        self.limits.max_message_bytes = bytes;
        self.limits.max_frame_bytes = bytes;
        self
    }
}
