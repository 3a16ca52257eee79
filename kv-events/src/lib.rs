//! vLLM's KV-cache event wire format, as vLLM 0.32 publishes it over ZMQ.
//!
//! A message is three ZMQ frames `[topic, sequence, payload]`: the topic the engine was
//! configured with, an 8-byte big-endian sequence number, and a msgpack payload
//! `[timestamp, [event, ...]]` (optionally followed by the data-parallel rank).
//!
//! Events are `BlockStored`, `BlockRemoved` and `AllBlocksCleared`. vLLM has encoded them both
//! as msgpack maps keyed by field name (with a `type` key) and as tagged arrays
//! (`["BlockStored", hashes, parent, ...]`, msgspec's `array_like`); [`decode_batch`] reads
//! both, and [`encode_batch`] writes the map form that vLLM 0.32 sends (see
//! `tests/fixtures/README.md` for the captured proof).
//!
//! The module [`frames`] holds the multipart framing; with the `zmq` feature, [`subscriber`]
//! binds a SUB socket the way a router must (vLLM's publisher connects to it).
#![forbid(unsafe_code)]

mod codec;
mod event;
pub mod frames;
#[cfg(feature = "zmq")]
pub mod subscriber;

pub use codec::{decode_batch, encode_batch};
pub use event::{BlockHash, EventBatch, KvEvent, MEDIUM_GPU};
pub use frames::{decode_message, encode_message, KvMessage};

/// Why a message could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("msgpack: {0}")]
    Msgpack(#[from] rmpv::decode::Error),
    #[error("{0} trailing bytes after the msgpack payload")]
    Trailing(usize),
    #[error("bad payload: {0}")]
    Shape(String),
    #[error("expected 3 frames [topic, seq, payload], got {0}")]
    FrameCount(usize),
    #[error("sequence frame must be 8 bytes, got {0}")]
    SeqLength(usize),
}

/// Why a batch could not be encoded (only a failing writer, which a `Vec` never is).
#[derive(Debug, thiserror::Error)]
pub enum EncodeError {
    #[error("msgpack: {0}")]
    Msgpack(#[from] rmpv::encode::Error),
}
