//! The placement messages routers send each other: MessagePack over a ZMQ PUB socket, one
//! message per frame after a topic frame.

use serde::{Deserialize, Serialize};

/// The topic every placement message is sent under (subscribers filter on it).
pub const TOPIC: &[u8] = b"warmpath.placement.v1";
/// A message larger than this is refused before decoding: a 4 MiB prompt at the smallest block
/// (16 bytes) is 262,144 hashes, 2.3 MiB encoded.
pub const MAX_MESSAGE_BYTES: usize = 4 << 20;

/// What one router tells the others.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Message {
    /// A request with these prompt blocks was sent to `replica` (a replica name, the same in
    /// every router of one configuration). `pending`: the sender's id for it when the replica
    /// is followed through KV events, so its blocks count as held until the sender's
    /// `Prefilled` with that id (or the receiver's pending bounds) end them.
    Placed {
        origin: u64,
        pending: Option<u64>,
        model: String,
        replica: String,
        /// The sender's `index.block_bytes`: hashes of another block size match nothing.
        block_bytes: u32,
        hashes: Vec<u64>,
    },
    /// The request `id` of `origin` has its first byte: its engine will report the blocks.
    Prefilled { origin: u64, id: u64 },
}

impl Message {
    pub fn origin(&self) -> u64 {
        match self {
            Message::Placed { origin, .. } | Message::Prefilled { origin, .. } => *origin,
        }
    }
}

/// Why a received frame was not a message.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("expected a topic frame and a payload frame, got {0} frames")]
    Frames(usize),
    #[error("topic `{0}` is not a placement topic")]
    Topic(String),
    #[error("message of {0} bytes is over the {MAX_MESSAGE_BYTES}-byte bound")]
    TooLarge(usize),
    #[error("not MessagePack: {0}")]
    Decode(#[from] rmpv::decode::Error),
    #[error("not a placement message: {0}")]
    Shape(#[from] rmpv::ext::Error),
}

pub fn encode(message: &Message) -> Vec<u8> {
    let value = rmpv::ext::to_value(message).expect("a message is always representable");
    let mut out = Vec::with_capacity(64);
    rmpv::encode::write_value(&mut out, &value).expect("writing to a Vec cannot fail");
    out
}

/// The message in a ZMQ message's frames (`[topic, payload]`).
pub fn decode(frames: &[impl AsRef<[u8]>]) -> Result<Message, WireError> {
    let [topic, payload] = frames else {
        return Err(WireError::Frames(frames.len()));
    };
    if topic.as_ref() != TOPIC {
        return Err(WireError::Topic(
            String::from_utf8_lossy(topic.as_ref()).into_owned(),
        ));
    }
    let payload = payload.as_ref();
    if payload.len() > MAX_MESSAGE_BYTES {
        return Err(WireError::TooLarge(payload.len()));
    }
    let value = rmpv::decode::read_value_with_max_depth(&mut &payload[..], 8)?;
    Ok(rmpv::ext::from_value(value)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placed() -> Message {
        Message::Placed {
            origin: 7,
            pending: Some(42),
            model: "tiny".into(),
            replica: "r1".into(),
            block_bytes: 256,
            hashes: vec![1, u64::MAX, 3],
        }
    }

    #[test]
    fn messages_round_trip() {
        for m in [placed(), Message::Prefilled { origin: 7, id: 42 }] {
            let frames = [TOPIC.to_vec(), encode(&m)];
            assert_eq!(decode(&frames).unwrap(), m);
        }
    }

    #[test]
    fn hostile_frames_are_errors_not_panics() {
        let good = encode(&placed());
        assert!(matches!(decode(&[TOPIC]), Err(WireError::Frames(1))));
        assert!(matches!(
            decode(&[b"other".as_slice(), &good]),
            Err(WireError::Topic(_))
        ));
        let huge = vec![0u8; MAX_MESSAGE_BYTES + 1];
        assert!(matches!(
            decode(&[TOPIC, &huge]),
            Err(WireError::TooLarge(_))
        ));
        // Truncated, garbage, a string where a map belongs, an array claiming 4 billion items.
        for bad in [
            &good[..good.len() / 2],
            b"\xc1\xc1".as_slice(),
            b"\xa3abc".as_slice(),
            b"\xdd\xff\xff\xff\xff".as_slice(),
        ] {
            assert!(decode(&[TOPIC, bad]).is_err(), "{bad:?}");
        }
        // Nested deeper than any message.
        let deep = vec![0x91u8; 1000];
        assert!(decode(&[TOPIC, &deep]).is_err());
    }
}
