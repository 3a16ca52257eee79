//! The decoder reads what a real vLLM 0.32 engine sent (captured frames, see
//! `fixtures/README.md`), and the encoder writes the same shape.

use warmpath_kv_events::{decode_message, encode_batch, BlockHash, KvEvent};

fn captured() -> Vec<Vec<Vec<u8>>> {
    let text = include_str!("fixtures/vllm-0.32.0-kv-events.hex");
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            l.split(' ')
                .map(|hex| {
                    (0..hex.len())
                        .step_by(2)
                        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
                        .collect()
                })
                .collect()
        })
        .collect()
}

#[test]
fn decodes_every_captured_vllm_message() {
    let messages = captured();
    assert!(messages.len() >= 10);
    let (mut stored, mut removed) = (0, 0);
    for (i, frames) in messages.iter().enumerate() {
        let m = decode_message(frames).expect("real vLLM frames decode");
        assert_eq!(m.topic, b"kv@127.0.0.1:8300@tiny");
        assert_eq!(m.seq, i as u64, "sequence numbers count up from 0");
        assert!(m.batch.timestamp > 1.7e9);
        assert_eq!(m.batch.data_parallel_rank, Some(0));
        for e in &m.batch.events {
            match e {
                KvEvent::BlockStored {
                    block_hashes,
                    token_ids,
                    block_size,
                    medium,
                    lora_id,
                    ..
                } => {
                    stored += block_hashes.len();
                    assert_eq!(*block_size, 128);
                    assert_eq!(token_ids.len(), block_hashes.len() * 128);
                    assert_eq!(medium.as_deref(), Some("GPU"));
                    assert_eq!(*lora_id, None);
                    assert!(block_hashes.iter().all(|h| matches!(h, BlockHash::Int(_))));
                }
                KvEvent::BlockRemoved { block_hashes, .. } => removed += block_hashes.len(),
                KvEvent::AllBlocksCleared => {}
            }
        }
    }
    assert!(stored > 64, "more blocks stored than fit: {stored}");
    assert!(removed > 0, "the capture includes evictions");
}

#[test]
fn chained_parents_refer_to_earlier_blocks() {
    let mut seen = std::collections::HashSet::new();
    for frames in captured() {
        for e in decode_message(&frames).unwrap().batch.events {
            if let KvEvent::BlockStored {
                block_hashes,
                parent_block_hash,
                ..
            } = e
            {
                if let Some(p) = parent_block_hash {
                    assert!(seen.contains(&p), "parent {p:?} was stored before");
                }
                seen.extend(block_hashes);
            }
        }
    }
}

/// Our encoder writes the same payload structure as vLLM: re-encoding a decoded real payload
/// gives the same top-level array length, the same event key order, and decodes back equal.
#[test]
fn encoder_matches_vllm_shape() {
    for frames in captured() {
        let m = decode_message(&frames).unwrap();
        let ours = encode_batch(&m.batch).unwrap();
        let theirs = rmpv::decode::read_value(&mut frames[2].as_slice()).unwrap();
        let mine = rmpv::decode::read_value(&mut ours.as_slice()).unwrap();
        let (t, o) = (theirs.as_array().unwrap(), mine.as_array().unwrap());
        assert_eq!(t.len(), o.len());
        let (te, oe) = (t[1].as_array().unwrap(), o[1].as_array().unwrap());
        for (a, b) in te.iter().zip(oe) {
            let keys = |v: &rmpv::Value| {
                v.as_map()
                    .unwrap()
                    .iter()
                    .map(|(k, _)| k.as_str().unwrap().to_owned())
                    .collect::<Vec<_>>()
            };
            assert_eq!(keys(a), keys(b));
        }
        assert_eq!(warmpath_kv_events::decode_batch(&ours).unwrap(), m.batch);
    }
}
