//! What the handlers decide without a connection: fault patches, model checks, P/D parameters,
//! the side of an SGLang pair a replica takes, and the stream faults. Routes over real connections are tested in `sim/tests/`.

use std::sync::Arc;

use bytes::Bytes;
use http::StatusCode;
use http_body_util::BodyExt;
use serde_json::Value;
use tokio::sync::mpsc;

use super::generate::ChunkSender;
use super::pd::pd_params;
use super::sglang::{pair, Pairing};
use super::{admin_patch, check_model, Body, Ctx};
use crate::api::Bootstrap;
use crate::bootstrap::BootstrapConfig;
use crate::config::EngineConfig;
use crate::engine::Summary;
use crate::faults::FaultState;
use crate::replica::Replica;
use crate::tokens::Tokenizer;
use crate::Fleet;

fn replica(index: usize) -> Arc<Replica> {
    Arc::new(replica_at(
        index,
        format!("127.0.0.1:{}", 8001 + index).parse().unwrap(),
    ))
}

fn replica_at(index: usize, addr: std::net::SocketAddr) -> Replica {
    Replica::new(
        index,
        addr,
        "tiny".into(),
        EngineConfig::default(),
        Arc::new(Tokenizer::bytes()),
        FaultState::default(),
        16,
        false,
        BootstrapConfig {
            port: 8998 + index as u16,
            ..BootstrapConfig::default()
        },
    )
}

/// The status and JSON body `admin_patch` answers with.
async fn patch(replicas: &[Arc<Replica>], body: &str, by_index: bool) -> (StatusCode, Value) {
    let r: http::Response<Body> = admin_patch(replicas, body.as_bytes(), by_index);
    let status = r.status();
    let bytes = r.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap())
}

#[tokio::test]
async fn a_process_patch_targets_the_named_replica_and_rejects_unknown_ones() {
    let fleet = [replica(0), replica(1)];
    let (status, v) = patch(&fleet, r#"{"replica": 1, "unhealthy": true}"#, true).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(v.as_array().unwrap().len(), 1);
    assert!(!fleet[0].faults.borrow().unhealthy);
    assert!(fleet[1].faults.borrow().unhealthy);

    let (status, v) = patch(&fleet, r#"{"replica": 5, "hang": true}"#, true).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(v["error"]["param"], "replica");
    assert!(!fleet.iter().any(|r| r.faults.borrow().hang));
}

#[tokio::test]
async fn a_replica_patch_ignores_the_index_and_bad_patches_change_nothing() {
    let fleet = [replica(0), replica(1)];
    // A replica's own endpoint patches itself whatever index the body names.
    let (status, _) = patch(&fleet[..1], r#"{"replica": 1, "hang": true}"#, false).await;
    assert_eq!(status, StatusCode::OK);
    assert!(fleet[0].faults.borrow().hang);
    assert!(!fleet[1].faults.borrow().hang);

    let (status, v) = patch(&fleet, r#"{"hang": true, "typo": 1}"#, false).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(v["error"]["type"], "BadRequestError");
    assert!(!fleet[1].faults.borrow().hang);
}

#[test]
fn only_a_named_other_model_is_rejected() {
    let r = replica(0);
    assert!(check_model(&r, None).is_ok());
    assert!(check_model(&r, Some("tiny")).is_ok());
    let e = check_model(&r, Some("huge")).unwrap_err();
    assert_eq!(e.status, StatusCode::NOT_FOUND);
}

/// What a prefill-only request of 8 tokens leaves: its blocks' slots and hashes.
fn prefilled(slots: Vec<u32>, hashes: Vec<u64>) -> Summary {
    Summary {
        prompt_tokens: 8,
        completion_tokens: 1,
        cached_tokens: 0,
        finish_reason: "length",
        ttft: 0.0,
        prefill_blocks: Some((slots, hashes)),
    }
}

#[test]
fn pd_params_name_the_prefill_replica_and_its_slots() {
    let r = replica(2);
    let v = pd_params(&r, &prefilled(vec![3, 4], vec![11, 12]));
    assert_eq!(v["do_remote_prefill"], true);
    assert_eq!(v["remote_block_ids"], serde_json::json!([3, 4]));
    assert_eq!(v["remote_engine_id"], r.engine_id.as_str());
    assert_eq!(v["remote_host"], "127.0.0.1");
    assert_eq!(v["remote_port"], 8003);
}

#[test]
fn a_replica_on_a_wildcard_address_names_its_advertised_host_to_its_decoders() {
    let pod: std::net::IpAddr = "10.244.0.7".parse().unwrap();
    let r = replica_at(0, "0.0.0.0:8000".parse().unwrap()).advertised_at(Some(pod));
    let v = pd_params(&r, &prefilled(vec![1], vec![9]));
    assert_eq!(v["remote_host"], "10.244.0.7");
    assert_eq!(v["remote_port"], 8000);
    assert_eq!(v["remote_engine_id"], "warmpath-sim-10.244.0.7:8000");
    // A decoder in another pod is not this replica; asked by its advertised address, it is.
    let fleet = Fleet {
        replicas: vec![Arc::new(r)],
    };
    assert!(fleet.find("10.244.0.8", 8000).is_none());
    assert!(fleet.find("10.244.0.7", 8000).is_some());
}

#[tokio::test]
async fn drop_mid_stream_cuts_the_stream_after_the_configured_chunks() {
    let (tx, mut rx) = mpsc::channel(8);
    let faults = FaultState {
        drop_mid_stream: true,
        drop_after_chunks: 2,
        ..FaultState::default()
    };
    let mut out = ChunkSender::new(tx, faults);
    assert!(out.send(Bytes::from_static(b"a")).await);
    assert!(out.send(Bytes::from_static(b"b")).await);
    assert!(!out.send(Bytes::from_static(b"c")).await);
    assert_eq!(rx.recv().await.unwrap().unwrap(), "a");
    assert_eq!(rx.recv().await.unwrap().unwrap(), "b");
    assert!(rx.recv().await.unwrap().is_err());
}

#[tokio::test]
async fn a_gone_client_ends_the_stream() {
    let (tx, rx) = mpsc::channel(8);
    drop(rx);
    let mut out = ChunkSender::new(tx, FaultState::default());
    assert!(!out.send(Bytes::from_static(b"a")).await);
}

fn ctx(fleet: &Arc<Fleet>, i: usize) -> Arc<Ctx> {
    Arc::new(Ctx {
        fleet: fleet.clone(),
        replica: fleet.replicas[i].clone(),
        client: hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build_http(),
    })
}

#[tokio::test]
async fn bootstrap_fields_make_the_named_replica_the_prefill_and_others_wait_for_it() {
    let fleet = Arc::new(Fleet {
        replicas: vec![replica(0), replica(1)],
    });
    let (p, d) = (ctx(&fleet, 0), ctx(&fleet, 1));
    let tokens: Vec<u32> = (0..40).collect(); // 2 full blocks of 16
    let b = Bootstrap {
        host: "127.0.0.1".into(),
        port: 8998,
        room: 9,
    };
    let decode = {
        let (d, b, tokens) = (d.clone(), b.clone(), tokens.clone());
        tokio::spawn(async move { pair(&d, &b, &tokens).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    assert!(!decode.is_finished());
    let Ok(Pairing::Prefill(ticket)) = pair(&p, &b, &tokens).await else {
        panic!("replica 0 is the one named");
    };
    ticket.ready(2);
    match decode.await.unwrap() {
        Ok(Pairing::Decode { remote_blocks }) => assert_eq!(remote_blocks, 2),
        _ => panic!("the decode pairs"),
    }

    // Replica 1 names itself through `localhost` and its own bootstrap port.
    let mine = Bootstrap {
        host: "localhost".into(),
        port: 8999,
        room: 10,
    };
    assert!(matches!(
        pair(&d, &mine, &tokens).await,
        Ok(Pairing::Prefill(_))
    ));
    // A second prefill of a room is refused.
    let e = pair(&d, &mine, &tokens).await.err().unwrap();
    assert_eq!(e.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(e.message.contains("already has a prefill"), "{}", e.message);
}
