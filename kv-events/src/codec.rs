//! msgpack encoding and decoding of [`EventBatch`] payloads.
//!
//! Decoding goes through `rmpv::Value` so that it tolerates both encodings vLLM has used
//! (maps keyed by field name, and tagged arrays) and fields added by newer versions.

use rmpv::Value;

use crate::event::{BlockHash, EventBatch, KvEvent};
use crate::{DecodeError, EncodeError};

/// Encodes a batch the way vLLM 0.32 does: `[ts, [event-map, ...]]`, each event a map with a
/// `type` key and vLLM's field names.
pub fn encode_batch(batch: &EventBatch) -> Result<Vec<u8>, EncodeError> {
    let events: Vec<Value> = batch.events.iter().map(event_to_value).collect();
    let mut top = vec![Value::F64(batch.timestamp), Value::Array(events)];
    if let Some(rank) = batch.data_parallel_rank {
        top.push(Value::from(rank));
    }
    let mut out = Vec::with_capacity(64);
    rmpv::encode::write_value(&mut out, &Value::Array(top))?;
    Ok(out)
}

fn hash_value(h: &BlockHash) -> Value {
    match h {
        BlockHash::Int(v) => Value::from(*v),
        BlockHash::Bytes(b) => Value::Binary(b.clone()),
    }
}

fn opt_str(s: &Option<String>) -> Value {
    s.as_deref().map(Value::from).unwrap_or(Value::Nil)
}

fn event_to_value(e: &KvEvent) -> Value {
    let k = |s: &str| Value::from(s);
    match e {
        KvEvent::BlockStored {
            block_hashes,
            parent_block_hash,
            token_ids,
            block_size,
            lora_id,
            medium,
            lora_name,
            extra_keys,
        } => Value::Map(vec![
            (k("type"), k("BlockStored")),
            (
                k("block_hashes"),
                Value::Array(block_hashes.iter().map(hash_value).collect()),
            ),
            (
                k("parent_block_hash"),
                parent_block_hash
                    .as_ref()
                    .map(hash_value)
                    .unwrap_or(Value::Nil),
            ),
            (
                k("token_ids"),
                Value::Array(token_ids.iter().map(|t| Value::from(*t)).collect()),
            ),
            (k("block_size"), Value::from(*block_size)),
            (k("lora_id"), lora_id.map(Value::from).unwrap_or(Value::Nil)),
            (k("medium"), opt_str(medium)),
            (k("lora_name"), opt_str(lora_name)),
            (
                k("extra_keys"),
                Value::Array(
                    (0..block_hashes.len())
                        .map(|i| match extra_keys.get(i).filter(|b| !b.is_empty()) {
                            Some(bytes) => rmpv::decode::read_value(&mut bytes.as_slice())
                                .unwrap_or(Value::Nil),
                            None => Value::Nil,
                        })
                        .collect(),
                ),
            ),
            (k("group_idx"), Value::from(0)),
            (k("kv_cache_spec_kind"), k("full_attention")),
        ]),
        KvEvent::BlockRemoved {
            block_hashes,
            medium,
        } => Value::Map(vec![
            (k("type"), k("BlockRemoved")),
            (
                k("block_hashes"),
                Value::Array(block_hashes.iter().map(hash_value).collect()),
            ),
            (k("medium"), opt_str(medium)),
            (k("group_idx"), Value::from(0)),
        ]),
        KvEvent::AllBlocksCleared => Value::Map(vec![(k("type"), k("AllBlocksCleared"))]),
    }
}

/// Decodes one msgpack payload `[timestamp, [event, ...], (dp_rank)]`.
pub fn decode_batch(payload: &[u8]) -> Result<EventBatch, DecodeError> {
    let mut cursor = payload;
    let value = rmpv::decode::read_value(&mut cursor)?;
    if !cursor.is_empty() {
        return Err(DecodeError::Trailing(cursor.len()));
    }
    let top = match value {
        Value::Array(a) => a,
        // msgspec without array_like would send a map; accept it too.
        Value::Map(m) => {
            let get = |name: &str| {
                m.iter()
                    .find(|(k, _)| k.as_str() == Some(name))
                    .map(|(_, v)| v.clone())
                    .unwrap_or(Value::Nil)
            };
            vec![get("ts"), get("events"), get("data_parallel_rank")]
        }
        other => return Err(shape(format!("payload is not an array: {other}"))),
    };
    let mut it = top.into_iter();
    let timestamp = match it.next() {
        Some(Value::F64(f)) => f,
        Some(Value::F32(f)) => f as f64,
        Some(v) if v.as_i64().is_some() => v.as_i64().unwrap_or(0) as f64,
        Some(v) if v.as_u64().is_some() => v.as_u64().unwrap_or(0) as f64,
        other => return Err(shape(format!("timestamp: {other:?}"))),
    };
    let events = match it.next() {
        Some(Value::Array(evs)) => evs
            .into_iter()
            .map(decode_event)
            .collect::<Result<Vec<_>, _>>()?,
        other => return Err(shape(format!("events: {other:?}"))),
    };
    let data_parallel_rank = it.next().and_then(|v| v.as_i64());
    Ok(EventBatch {
        timestamp,
        events,
        data_parallel_rank,
    })
}

fn shape(msg: String) -> DecodeError {
    DecodeError::Shape(msg)
}

/// Field order of each event when msgspec encodes it as a tagged array (tag first).
const STORED_FIELDS: &[&str] = &[
    "block_hashes",
    "parent_block_hash",
    "token_ids",
    "block_size",
    "lora_id",
    "medium",
    "lora_name",
    "extra_keys",
];
const REMOVED_FIELDS: &[&str] = &["block_hashes", "medium"];

fn decode_event(v: Value) -> Result<KvEvent, DecodeError> {
    // Normalise both encodings to (tag, name -> value).
    let (tag, fields): (String, Vec<(String, Value)>) = match v {
        Value::Map(m) => {
            let mut tag = None;
            let mut fields = Vec::with_capacity(m.len());
            for (k, v) in m {
                let key = k
                    .as_str()
                    .ok_or_else(|| shape(format!("event key is not a string: {k}")))?
                    .to_owned();
                if key == "type" {
                    tag = v.as_str().map(str::to_owned);
                } else {
                    fields.push((key, v));
                }
            }
            (
                tag.ok_or_else(|| shape("event map without a string `type`".into()))?,
                fields,
            )
        }
        Value::Array(a) => {
            let mut it = a.into_iter();
            let tag = it
                .next()
                .and_then(|t| t.as_str().map(str::to_owned))
                .ok_or_else(|| shape("event array without a string tag".into()))?;
            let names = match tag.as_str() {
                "BlockStored" => STORED_FIELDS,
                "BlockRemoved" => REMOVED_FIELDS,
                _ => &[][..],
            };
            let fields = names.iter().map(|n| n.to_string()).zip(it).collect();
            (tag, fields)
        }
        other => return Err(shape(format!("event is neither map nor array: {other}"))),
    };
    let field = |name: &str| {
        fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v)
            .unwrap_or(&Value::Nil)
    };
    match tag.as_str() {
        "BlockStored" => Ok(KvEvent::BlockStored {
            block_hashes: hashes(field("block_hashes"))?,
            parent_block_hash: opt_hash(field("parent_block_hash"))?,
            token_ids: match field("token_ids") {
                Value::Array(a) => a
                    .iter()
                    .map(|t| {
                        t.as_u64()
                            .and_then(|t| u32::try_from(t).ok())
                            .ok_or_else(|| shape(format!("token id: {t}")))
                    })
                    .collect::<Result<_, _>>()?,
                Value::Nil => Vec::new(),
                other => return Err(shape(format!("token_ids: {other}"))),
            },
            block_size: field("block_size")
                .as_u64()
                .and_then(|b| u32::try_from(b).ok())
                .ok_or_else(|| shape(format!("block_size: {}", field("block_size"))))?,
            lora_id: field("lora_id").as_i64(),
            medium: field("medium").as_str().map(str::to_owned),
            lora_name: field("lora_name").as_str().map(str::to_owned),
            extra_keys: extra_keys(field("extra_keys"))?,
        }),
        "BlockRemoved" => Ok(KvEvent::BlockRemoved {
            block_hashes: hashes(field("block_hashes"))?,
            medium: field("medium").as_str().map(str::to_owned),
        }),
        "AllBlocksCleared" => Ok(KvEvent::AllBlocksCleared),
        other => Err(shape(format!("unknown event type {other:?}"))),
    }
}

/// Each block's extra keys as the msgpack bytes of its tuple (empty: none); empty when no
/// block has any.
fn extra_keys(v: &Value) -> Result<Vec<Vec<u8>>, DecodeError> {
    let Value::Array(blocks) = v else {
        return Ok(Vec::new());
    };
    if blocks.iter().all(Value::is_nil) {
        return Ok(Vec::new());
    }
    blocks
        .iter()
        .map(|b| {
            if b.is_nil() {
                return Ok(Vec::new());
            }
            let mut bytes = Vec::new();
            rmpv::encode::write_value(&mut bytes, b)
                .map_err(|e| shape(format!("extra_keys: {e}")))?;
            Ok(bytes)
        })
        .collect()
}

fn hash(v: &Value) -> Result<BlockHash, DecodeError> {
    match v {
        Value::Integer(i) => {
            if let Some(u) = i.as_u64() {
                Ok(BlockHash::Int(u))
            } else if let Some(s) = i.as_i64() {
                Ok(BlockHash::Int(s as u64))
            } else {
                Err(shape(format!("block hash: {v}")))
            }
        }
        Value::Binary(b) => Ok(BlockHash::Bytes(b.clone())),
        other => Err(shape(format!("block hash: {other}"))),
    }
}

fn opt_hash(v: &Value) -> Result<Option<BlockHash>, DecodeError> {
    match v {
        Value::Nil => Ok(None),
        v => hash(v).map(Some),
    }
}

fn hashes(v: &Value) -> Result<Vec<BlockHash>, DecodeError> {
    match v {
        Value::Array(a) => a.iter().map(hash).collect(),
        other => Err(shape(format!("block_hashes: {other}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored() -> KvEvent {
        KvEvent::BlockStored {
            block_hashes: vec![BlockHash::Int(1), BlockHash::Int(u64::MAX)],
            parent_block_hash: None,
            token_ids: (0..8).collect(),
            block_size: 4,
            lora_id: None,
            lora_name: None,
            medium: Some("GPU".into()),
            extra_keys: Vec::new(),
        }
    }

    #[test]
    fn extra_keys_are_kept_per_block_as_msgpack() {
        // vLLM: one entry per block, the salt in the first block's tuple, nil elsewhere.
        let salt = {
            let mut b = Vec::new();
            rmpv::encode::write_value(&mut b, &Value::Array(vec![Value::from("alpha")])).unwrap();
            b
        };
        let mut event = stored();
        if let KvEvent::BlockStored { extra_keys, .. } = &mut event {
            *extra_keys = vec![salt, Vec::new()];
        }
        let batch = EventBatch {
            timestamp: 1.0,
            events: vec![event.clone()],
            data_parallel_rank: None,
        };
        let back = decode_batch(&encode_batch(&batch).unwrap()).unwrap();
        assert_eq!(back.events, vec![event]);
        // All-nil extra keys are no extra keys.
        let plain = decode_batch(
            &encode_batch(&EventBatch {
                events: vec![stored()],
                ..batch
            })
            .unwrap(),
        )
        .unwrap();
        assert_eq!(plain.events, vec![stored()]);
    }

    #[test]
    fn round_trip_all_event_kinds() {
        let batch = EventBatch {
            timestamp: 1234.5,
            events: vec![
                stored(),
                KvEvent::BlockRemoved {
                    block_hashes: vec![BlockHash::Bytes(vec![1, 2, 3])],
                    medium: None,
                },
                KvEvent::AllBlocksCleared,
            ],
            data_parallel_rank: None,
        };
        let bytes = encode_batch(&batch).unwrap();
        assert_eq!(decode_batch(&bytes).unwrap(), batch);
    }

    #[test]
    fn reads_tagged_array_events() {
        let v = Value::Array(vec![
            Value::F64(1.0),
            Value::Array(vec![
                Value::Array(vec![
                    "BlockStored".into(),
                    Value::Array(vec![Value::from(-5i64)]),
                    Value::from(7u64),
                    Value::Array(vec![Value::from(3u32), Value::from(4u32)]),
                    Value::from(2u32),
                    Value::Nil,
                    "GPU".into(),
                ]),
                Value::Array(vec!["AllBlocksCleared".into()]),
            ]),
            Value::from(2),
        ]);
        let mut buf = Vec::new();
        rmpv::encode::write_value(&mut buf, &v).unwrap();
        let b = decode_batch(&buf).unwrap();
        assert_eq!(b.data_parallel_rank, Some(2));
        assert_eq!(
            b.events[0],
            KvEvent::BlockStored {
                block_hashes: vec![BlockHash::Int((-5i64) as u64)],
                parent_block_hash: Some(BlockHash::Int(7)),
                token_ids: vec![3, 4],
                block_size: 2,
                lora_id: None,
                lora_name: None,
                medium: Some("GPU".into()),
                extra_keys: Vec::new(),
            }
        );
        assert_eq!(b.events[1], KvEvent::AllBlocksCleared);
    }

    #[test]
    fn rejects_garbage_with_an_error() {
        assert!(decode_batch(b"\xc1").is_err());
        assert!(decode_batch(&[0x92, 0xcb]).is_err());
        let mut buf = Vec::new();
        rmpv::encode::write_value(&mut buf, &Value::from("x")).unwrap();
        assert!(matches!(decode_batch(&buf), Err(DecodeError::Shape(_))));
        let v = Value::Array(vec![
            Value::F64(0.0),
            Value::Array(vec![Value::Map(vec![("type".into(), "Nope".into())])]),
        ]);
        buf.clear();
        rmpv::encode::write_value(&mut buf, &v).unwrap();
        assert!(decode_batch(&buf).is_err());
    }
}
