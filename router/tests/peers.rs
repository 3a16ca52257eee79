//! Peering's trust boundary: with `peers.key_file`, a router applies only placements sealed
//! with the group's secret and sent within 30 s of its clock, and the peers port refuses a
//! frame announcing more than a placement may hold without buffering it or going down.

mod common;

use bytes::{BufMut, Bytes, BytesMut};
use common::*;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use warmpath_router::peers::wire::{self, Message, PeerKey};
use warmpath_testkit::free_port;
use warmpath_zmtp::{Options, PubSocket, SubSocket};

const SECRET: &str = "the routers' shared secret, 32 bytes or more";

/// A router in front of one simulated replica `r0`, publishing on its own peers port and
/// following `follow`, its placements sealed with the secret in `key_file` (a quoted path).
async fn keyed_router(
    sim: &warmpath_sim::SimHandle,
    follow: &str,
    key_file: &str,
) -> (warmpath_router::RouterHandle, String, u32) {
    let listen = format!("tcp://127.0.0.1:{}", free_port());
    let yaml = config_yaml(
        "tiny",
        &sim.addrs(),
        &format!(
            "peers: {{ listen: \"{listen}\", routers: [\"{follow}\"], key_file: {key_file} }}\n"
        ),
    );
    let block_bytes = warmpath_router::config::Config::parse(&yaml)
        .unwrap()
        .index
        .block_bytes as u32;
    let rt = router(&yaml).await;
    wait_ready(rt.admin_addr).await;
    (rt, listen, block_bytes)
}

fn placement(block_bytes: u32, seed: u64) -> Message {
    Message::Placed {
        origin: 42,
        pending: None,
        model: "tiny".into(),
        replica: "r0".into(),
        block_bytes,
        hashes: vec![seed, seed + 1, seed + 2],
    }
}

async fn peer_count(rt: &warmpath_router::RouterHandle, kind: &str) -> f64 {
    metric(
        &router_metrics(rt.admin_addr).await,
        "warmpath_peer_messages_total",
        &[("kind", kind)],
    )
}

/// Publishes `payload` until the router's count of `kind` reaches `at_least`.
async fn publish_until(
    publisher: &PubSocket,
    payload: impl Fn() -> Vec<u8>,
    rt: &warmpath_router::RouterHandle,
    kind: &str,
    at_least: f64,
) {
    for _ in 0..200 {
        publisher.send(vec![
            Bytes::from_static(wire::TOPIC),
            Bytes::from(payload()),
        ]);
        tokio::time::sleep(Duration::from_millis(20)).await;
        if peer_count(rt, kind).await >= at_least {
            return;
        }
    }
    panic!(
        "the router never counted {at_least} {kind}: {}",
        router_metrics(rt.admin_addr).await
    );
}

#[tokio::test]
async fn a_keyed_router_applies_only_placements_sealed_with_its_key_in_time() {
    let sim = sim(&["--timing", "zero"]).await;
    let mut publisher = PubSocket::new(Options::default());
    let peer = publisher.bind("tcp://127.0.0.1:0").await.unwrap();
    let (rt, _, block_bytes) = keyed_router(&sim, &peer, &token_file("peers-key-b", SECRET)).await;
    let right = PeerKey::from_secret(SECRET.as_bytes()).unwrap();
    let wrong = PeerKey::from_secret(&[b'x'; 40]).unwrap();

    // Unsealed (a router without the key, or anyone who reaches the port).
    publish_until(
        &publisher,
        || wire::encode(&placement(block_bytes, 1), None, wire::now_ms()),
        &rt,
        "unauthenticated",
        1.0,
    )
    .await;
    // Sealed with another key.
    let before = peer_count(&rt, "unauthenticated").await;
    publish_until(
        &publisher,
        || wire::encode(&placement(block_bytes, 2), Some(&wrong), wire::now_ms()),
        &rt,
        "unauthenticated",
        before + 3.0,
    )
    .await;
    // Sealed with the right key a minute ago (a captured message, replayed).
    let old = wire::now_ms() - 60_000;
    publish_until(
        &publisher,
        || wire::encode(&placement(block_bytes, 3), Some(&right), old),
        &rt,
        "stale",
        1.0,
    )
    .await;
    assert_eq!(
        peer_count(&rt, "placed").await,
        0.0,
        "nothing was applied so far"
    );
    // Sealed with the right key now: applied.
    publish_until(
        &publisher,
        || wire::encode(&placement(block_bytes, 4), Some(&right), wire::now_ms()),
        &rt,
        "placed",
        1.0,
    )
    .await;
    rt.shutdown().await;
}

#[tokio::test]
async fn a_short_or_missing_key_file_stops_the_router_at_start() {
    let sim = sim(&["--timing", "zero"]).await;
    for key_file in [
        token_file("peers-key-short", "31 bytes is one byte too few!!"),
        "\"/nonexistent/peers-key\"".to_owned(),
    ] {
        let yaml = config_yaml(
            "tiny",
            &sim.addrs(),
            &format!(
                "peers: {{ listen: \"tcp://127.0.0.1:{}\", key_file: {key_file} }}\n",
                free_port()
            ),
        );
        let config = warmpath_router::config::Config::parse(&yaml).unwrap();
        let err = warmpath_router::start(config, warmpath_router::Options::default())
            .await
            .err()
            .expect("the router refuses to start");
        assert!(err.to_string().contains("peers.key_file"), "{err}");
    }
}

/// A subscriber on the peers port that announces a terabyte (or 2^64 - 1 bytes): its
/// connection is closed before anything is buffered for it, and the router goes on serving
/// and publishing to a well-formed follower.
#[tokio::test]
async fn an_oversized_announced_frame_on_the_peers_port_does_not_take_the_router_down() {
    let sim = sim(&["--timing", "zero"]).await;
    let nowhere = format!("tcp://127.0.0.1:{}", free_port());
    let (rt, listen, _) = keyed_router(&sim, &nowhere, &token_file("peers-key-big", SECRET)).await;
    let addr = listen.strip_prefix("tcp://").unwrap().to_owned();
    for announced in [u64::MAX, 1 << 40] {
        let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
        let mut greeting = [0u8; 64];
        greeting[0] = 0xFF;
        greeting[9] = 0x7F;
        greeting[10] = 3;
        greeting[11] = 1;
        greeting[12..16].copy_from_slice(b"NULL");
        let mut wire = BytesMut::from(&greeting[..]);
        let mut ready = b"\x0bSocket-Type".to_vec();
        ready.extend_from_slice(&3u32.to_be_bytes());
        ready.extend_from_slice(b"SUB");
        warmpath_zmtp::encode_command(&mut wire, "READY", &ready);
        // A long frame header, then nothing of the body.
        wire.put_u8(0x02);
        wire.put_u64(announced);
        stream.write_all(&wire).await.unwrap();
        let mut closed = false;
        let mut scratch = [0u8; 256];
        for _ in 0..50 {
            match tokio::time::timeout(Duration::from_secs(5), stream.read(&mut scratch)).await {
                Ok(Ok(0)) | Ok(Err(_)) => {
                    closed = true;
                    break;
                }
                Ok(Ok(_)) => continue,
                Err(_) => break,
            }
        }
        assert!(
            closed,
            "the router closes a connection announcing {announced} bytes"
        );
    }
    assert_eq!(get(rt.admin_addr, "/healthz").await.unwrap().status, 200);
    // A well-formed follower with the key still hears the router's placements.
    let mut follower = SubSocket::new(Options::default());
    follower.subscribe(wire::TOPIC);
    follower.connect(&listen).unwrap();
    let key = PeerKey::from_secret(SECRET.as_bytes()).unwrap();
    let mut heard = None;
    for i in 0..100u64 {
        let r = post(
            rt.addr,
            "/v1/completions",
            &completion(&text(500 + i, 600), 1),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.body);
        if let Ok(Ok(frames)) =
            tokio::time::timeout(Duration::from_millis(50), follower.recv()).await
        {
            heard = Some(
                wire::decode(&frames, Some(&key), wire::now_ms()).expect("sealed with the key"),
            );
            break;
        }
    }
    assert!(matches!(heard, Some(Message::Placed { .. })), "{heard:?}");
    rt.shutdown().await;
}
