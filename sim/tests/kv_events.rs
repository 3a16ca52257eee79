//! KV events over ZMQ, received by a bound SUB socket and decoded with the same decoder that
//! reads the captured real vLLM frames (`kv-events/tests/vllm_fixture.rs`).

mod common;

use std::time::Duration;

use common::*;
use serde_json::json;
use warmpath_kv_events::subscriber::KvEventSubscriber;
use warmpath_kv_events::{decode_message, BlockHash, KvEvent, KvMessage};

async fn next(sub: &mut KvEventSubscriber) -> KvMessage {
    let frames = tokio::time::timeout(Duration::from_secs(5), sub.recv_frames())
        .await
        .expect("a KV-event message within 5 s")
        .expect("recv");
    decode_message(&frames).expect("simulator frames decode like vLLM's")
}

#[tokio::test]
async fn stored_and_removed_blocks_arrive_in_vllms_format() {
    let mut sub = KvEventSubscriber::bind("tcp://127.0.0.1:0", "")
        .await
        .unwrap();
    let endpoint = sub.endpoint().to_owned();
    // 8 blocks of 16 tokens: a 64-token (256-byte) prompt fills 4.
    let s = sim(&[
        "--timing",
        "zero",
        "--kv-blocks",
        "8",
        "--kv-events-endpoint",
        &endpoint,
    ])
    .await;
    let a = s.addrs()[0];
    // The publisher connects in the background; probe until the first batch gets through.
    let mut first = None;
    for i in 0..100 {
        let body = json!({"prompt": format!("{i:04}").repeat(64), "max_tokens": 1}).to_string();
        post(a, "/v1/completions", &body).await;
        if let Ok(Ok(f)) = tokio::time::timeout(Duration::from_millis(50), sub.recv_frames()).await
        {
            first = Some(decode_message(&f).unwrap());
            break;
        }
    }
    let first = first.expect("events arrive once connected");
    assert_eq!(
        first.topic,
        format!("kv@127.0.0.1:{}@tiny", a.port()).into_bytes()
    );
    assert_eq!(first.batch.data_parallel_rank, Some(0));
    // Fill the cache (8 blocks) with two more 4-block prompts, drain, then observe.
    for f in ["f1f1", "f2f2"] {
        post(
            a,
            "/v1/completions",
            &json!({"prompt": f.repeat(64), "max_tokens": 1}).to_string(),
        )
        .await;
    }
    let mut seq = first.seq;
    while let Ok(Ok(f)) = tokio::time::timeout(Duration::from_millis(100), sub.recv_frames()).await
    {
        seq = decode_message(&f).unwrap().seq;
    }
    let body = json!({"prompt": "z".repeat(256), "max_tokens": 1}).to_string();
    post(a, "/v1/completions", &body).await;
    let m = next(&mut sub).await;
    assert_eq!(m.seq, seq + 1, "one sequence number per batch");
    let stored: Vec<&KvEvent> = m
        .batch
        .events
        .iter()
        .filter(|e| matches!(e, KvEvent::BlockStored { .. }))
        .collect();
    let KvEvent::BlockStored {
        block_hashes,
        parent_block_hash,
        token_ids,
        block_size,
        medium,
        ..
    } = stored[0]
    else {
        unreachable!()
    };
    assert_eq!(block_hashes.len(), 4);
    assert_eq!(*parent_block_hash, None);
    assert_eq!(*block_size, 16);
    assert_eq!(token_ids.len(), 64);
    assert_eq!(token_ids[0], u32::from_le_bytes(*b"zzzz"));
    assert_eq!(medium.as_deref(), Some("GPU"));
    // The cache held 8 blocks, full of probes: storing 4 new ones evicted 4, one event each.
    let removed = m
        .batch
        .events
        .iter()
        .filter(
            |e| matches!(e, KvEvent::BlockRemoved { block_hashes, .. } if block_hashes.len() == 1),
        )
        .count();
    assert_eq!(removed, 4, "{:?}", m.batch.events);
    // A continuation chains onto the stored blocks.
    let body = json!({"prompt": format!("{}{}", "z".repeat(256), "y".repeat(64)), "max_tokens": 1})
        .to_string();
    post(a, "/v1/completions", &body).await;
    let m = next(&mut sub).await;
    let Some(KvEvent::BlockStored {
        parent_block_hash,
        block_hashes: more,
        ..
    }) = m
        .batch
        .events
        .iter()
        .find(|e| matches!(e, KvEvent::BlockStored { .. }))
    else {
        panic!("{:?}", m.batch.events)
    };
    assert_eq!(parent_block_hash.as_ref(), block_hashes.last());
    assert_eq!(more.len(), 1);
    assert!(matches!(more[0], BlockHash::Int(_)));
    // Reset publishes AllBlocksCleared.
    assert_eq!(post(a, "/reset_prefix_cache", "").await.status, 200);
    let m = next(&mut sub).await;
    assert_eq!(m.batch.events, vec![KvEvent::AllBlocksCleared]);
}

/// A wildcard endpoint is bound by the simulator (replica i at port + i), and a subscriber
/// connects to it.
#[tokio::test]
async fn a_wildcard_endpoint_is_bound_and_subscribers_connect() {
    let port = warmpath_testkit::free_port();
    let endpoint = format!("tcp://0.0.0.0:{port}");
    let s = sim(&["--timing", "zero", "--kv-events-endpoint", &endpoint]).await;
    let a = s.addrs()[0];
    // The subscriber connects in the background, again until the simulator has bound.
    let mut sub = KvEventSubscriber::connect(&format!("tcp://127.0.0.1:{port}"), "kv@")
        .await
        .unwrap();
    let mut got = None;
    for i in 0..100 {
        let body = json!({"prompt": format!("{i:04}").repeat(16), "max_tokens": 1}).to_string();
        post(a, "/v1/completions", &body).await;
        if let Ok(Ok(m)) = tokio::time::timeout(Duration::from_millis(50), sub.recv()).await {
            got = Some(m);
            break;
        }
    }
    let m = got.expect("events reach a connected subscriber");
    assert!(m
        .batch
        .events
        .iter()
        .any(|e| matches!(e, KvEvent::BlockStored { .. })));
}
