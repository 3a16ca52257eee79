//! The placement messages routers send each other: MessagePack over a ZMQ PUB socket, one
//! message per frame after a topic frame; with a shared key (`peers.key_file`), sealed.
//!
//! A sealed payload is `MAGIC`, the sender's clock (milliseconds since the Unix epoch, 8 bytes
//! big-endian), a random 24-byte nonce and the MessagePack encrypted with XChaCha20-Poly1305
//! (tag included), the topic, magic and clock being authenticated data: a receiver that opens
//! it knows a key holder sent it, when (within [`MAX_SKEW`] of its own clock, so an old
//! capture cannot be replayed later), and that no one else read it.

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::time::Duration;

/// The topic every placement message is sent under (subscribers filter on it).
pub const TOPIC: &[u8] = b"warmpath.placement.v1";
/// A message larger than this is refused before decoding: a 4 MiB prompt at the smallest block
/// (16 bytes) is 262,144 hashes, 2.3 MiB encoded.
pub const MAX_MESSAGE_BYTES: usize = 4 << 20;

/// Marks (and versions) a sealed payload.
const MAGIC: &[u8; 4] = b"WPS1";
const NONCE_BYTES: usize = 24;
const TAG_BYTES: usize = 16;
/// What sealing adds to a payload.
pub const SEAL_OVERHEAD: usize = MAGIC.len() + 8 + NONCE_BYTES + TAG_BYTES;
/// How far a sealed message's clock may be from the receiver's.
pub const MAX_SKEW: Duration = Duration::from_secs(30);
/// The shortest secret `peers.key_file` may hold.
pub const MIN_SECRET_BYTES: usize = 32;

/// The key routers that share a secret seal their placements with.
pub struct PeerKey(XChaCha20Poly1305);

impl PeerKey {
    /// The key of a secret of at least [`MIN_SECRET_BYTES`], hashed with a domain of its own so
    /// that a secret shared with another use (say, the sessions' key) yields another key.
    pub fn from_secret(secret: &[u8]) -> Result<Self, String> {
        if secret.len() < MIN_SECRET_BYTES {
            return Err(format!(
                "the peers key needs at least {MIN_SECRET_BYTES} bytes, it has {}",
                secret.len()
            ));
        }
        let key = Sha256::new()
            .chain_update(b"warmpath peers placement key v1\0")
            .chain_update(secret)
            .finalize();
        Ok(Self(XChaCha20Poly1305::new(&key)))
    }

    /// `payload` sealed at `now_ms`.
    pub fn seal(&self, payload: &[u8], now_ms: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(SEAL_OVERHEAD + payload.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&now_ms.to_be_bytes());
        let nonce: [u8; NONCE_BYTES] = rand::random();
        out.extend_from_slice(&nonce);
        let aad = [TOPIC, &out[..MAGIC.len() + 8]].concat();
        let sealed = self
            .0
            .encrypt(
                XNonce::from_slice(&nonce),
                Payload {
                    msg: payload,
                    aad: &aad,
                },
            )
            .expect("a payload under 256 GiB always seals");
        out.extend_from_slice(&sealed);
        out
    }

    /// The payload `sealed` holds, if this key sealed it within [`MAX_SKEW`] of `now_ms`.
    pub fn open(&self, sealed: &[u8], now_ms: u64) -> Result<Vec<u8>, WireError> {
        let header = MAGIC.len() + 8;
        if sealed.len() < SEAL_OVERHEAD || &sealed[..MAGIC.len()] != MAGIC {
            return Err(WireError::Unauthenticated);
        }
        let nonce = XNonce::from_slice(&sealed[header..header + NONCE_BYTES]);
        let aad = [TOPIC, &sealed[..header]].concat();
        let payload = self
            .0
            .decrypt(
                nonce,
                Payload {
                    msg: &sealed[header + NONCE_BYTES..],
                    aad: &aad,
                },
            )
            .map_err(|_| WireError::Unauthenticated)?;
        let sent = u64::from_be_bytes(sealed[MAGIC.len()..header].try_into().expect("8 bytes"));
        let skew = sent.abs_diff(now_ms);
        if u128::from(skew) > MAX_SKEW.as_millis() {
            return Err(WireError::Stale { skew_ms: skew });
        }
        Ok(payload)
    }
}

/// Milliseconds since the Unix epoch, as sealed messages carry them.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

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
    #[error("not sealed with this router's peers key")]
    Unauthenticated,
    #[error("sealed {skew_ms} ms away from this router's clock")]
    Stale { skew_ms: u64 },
}

/// The payload frame of `message`, sealed with `key` at `now_ms` when there is one.
pub fn encode(message: &Message, key: Option<&PeerKey>, now_ms: u64) -> Vec<u8> {
    let value = rmpv::ext::to_value(message).expect("a message is always representable");
    let mut out = Vec::with_capacity(64);
    rmpv::encode::write_value(&mut out, &value).expect("writing to a Vec cannot fail");
    match key {
        Some(key) => key.seal(&out, now_ms),
        None => out,
    }
}

/// The message in a ZMQ message's frames (`[topic, payload]`); with a key, only a payload it
/// sealed within [`MAX_SKEW`] of `now_ms`.
pub fn decode(
    frames: &[impl AsRef<[u8]>],
    key: Option<&PeerKey>,
    now_ms: u64,
) -> Result<Message, WireError> {
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
    let opened;
    let payload = match key {
        Some(key) => {
            opened = key.open(payload, now_ms)?;
            &opened[..]
        }
        None => payload,
    };
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
            let frames = [TOPIC.to_vec(), encode(&m, None, 0)];
            assert_eq!(decode(&frames, None, 0).unwrap(), m);
        }
    }

    fn key(byte: u8) -> PeerKey {
        PeerKey::from_secret(&[byte; MIN_SECRET_BYTES]).unwrap()
    }

    #[test]
    fn sealed_messages_open_only_with_their_key_in_time() {
        let (a, b) = (key(1), key(2));
        let now = 1_700_000_000_000;
        let sealed = encode(&placed(), Some(&a), now);
        assert_eq!(
            sealed.len(),
            encode(&placed(), None, 0).len() + SEAL_OVERHEAD
        );
        let frames = [TOPIC.to_vec(), sealed.clone()];
        assert_eq!(decode(&frames, Some(&a), now + 29_000).unwrap(), placed());
        assert_eq!(decode(&frames, Some(&a), now - 29_000).unwrap(), placed());
        for late in [now + 31_000, now - 31_000] {
            assert!(matches!(
                decode(&frames, Some(&a), late),
                Err(WireError::Stale { skew_ms: 31_000 })
            ));
        }
        assert!(matches!(
            decode(&frames, Some(&b), now),
            Err(WireError::Unauthenticated)
        ));
        // Unsealed, or sealed with its clock (authenticated data) or a byte changed.
        let plain = [TOPIC.to_vec(), encode(&placed(), None, now)];
        assert!(matches!(
            decode(&plain, Some(&a), now),
            Err(WireError::Unauthenticated)
        ));
        for at in [5, 20, sealed.len() - 1] {
            let mut tampered = sealed.clone();
            tampered[at] ^= 1;
            assert!(matches!(
                decode(&[TOPIC.to_vec(), tampered], Some(&a), now),
                Err(WireError::Unauthenticated)
            ));
        }
        // Two seals of one message differ (fresh nonces).
        assert_ne!(encode(&placed(), Some(&a), now), sealed);
        // A receiver without the key cannot read a sealed message.
        assert!(decode(&frames, None, now).is_err());
        assert!(PeerKey::from_secret(&[0; MIN_SECRET_BYTES - 1]).is_err());
    }

    #[test]
    fn hostile_frames_are_errors_not_panics() {
        let good = encode(&placed(), None, 0);
        assert!(matches!(
            decode(&[TOPIC], None, 0),
            Err(WireError::Frames(1))
        ));
        assert!(matches!(
            decode(&[b"other".as_slice(), &good], None, 0),
            Err(WireError::Topic(_))
        ));
        let huge = vec![0u8; MAX_MESSAGE_BYTES + 1];
        assert!(matches!(
            decode(&[TOPIC, &huge], None, 0),
            Err(WireError::TooLarge(_))
        ));
        // Truncated, garbage, a string where a map belongs, an array claiming 4 billion items.
        for bad in [
            &good[..good.len() / 2],
            b"\xc1\xc1".as_slice(),
            b"\xa3abc".as_slice(),
            b"\xdd\xff\xff\xff\xff".as_slice(),
        ] {
            assert!(decode(&[TOPIC, bad], None, 0).is_err(), "{bad:?}");
        }
        // Nested deeper than any message.
        let deep = vec![0x91u8; 1000];
        assert!(decode(&[TOPIC, &deep], None, 0).is_err());
    }
}
