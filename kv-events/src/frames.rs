//! ZMQ multipart framing: `[topic, 8-byte big-endian sequence, msgpack payload]`.

use crate::codec::{decode_batch, encode_batch};
use crate::event::EventBatch;
use crate::{DecodeError, EncodeError};

/// One published message, decoded.
#[derive(Debug, Clone, PartialEq)]
pub struct KvMessage {
    pub topic: Vec<u8>,
    /// Increases by one per message from a publisher; a gap means messages were dropped.
    pub seq: u64,
    pub batch: EventBatch,
}

/// The three frames of one message.
pub fn encode_message(
    topic: &[u8],
    seq: u64,
    batch: &EventBatch,
) -> Result<[Vec<u8>; 3], EncodeError> {
    Ok([
        topic.to_vec(),
        seq.to_be_bytes().to_vec(),
        encode_batch(batch)?,
    ])
}

/// Decodes the frames of one message.
pub fn decode_message<F: AsRef<[u8]>>(frames: &[F]) -> Result<KvMessage, DecodeError> {
    let [topic, seq, payload] = frames else {
        return Err(DecodeError::FrameCount(frames.len()));
    };
    let seq = seq.as_ref();
    let seq: [u8; 8] = seq
        .try_into()
        .map_err(|_| DecodeError::SeqLength(seq.len()))?;
    Ok(KvMessage {
        topic: topic.as_ref().to_vec(),
        seq: u64::from_be_bytes(seq),
        batch: decode_batch(payload.as_ref())?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::KvEvent;

    #[test]
    fn frames_round_trip_and_bad_frames_fail() {
        let batch = EventBatch {
            timestamp: 1.0,
            events: vec![KvEvent::AllBlocksCleared],
            data_parallel_rank: None,
        };
        let f = encode_message(b"kv@x", 0x0102, &batch).unwrap();
        assert_eq!(f[1], vec![0, 0, 0, 0, 0, 0, 1, 2]);
        let m = decode_message(&f).unwrap();
        assert_eq!((m.topic.as_slice(), m.seq), (&b"kv@x"[..], 0x0102));
        assert_eq!(m.batch, batch);
        assert!(matches!(
            decode_message(&f[..2]),
            Err(DecodeError::FrameCount(2))
        ));
        let bad = [f[0].clone(), vec![1, 2], f[2].clone()];
        assert!(matches!(
            decode_message(&bad),
            Err(DecodeError::SeqLength(2))
        ));
    }
}
