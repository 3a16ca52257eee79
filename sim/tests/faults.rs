//! Every fault mode over loopback: set by flag or through the admin endpoints, seen by a
//! client the way a router would see it, and cleared again.

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::json;

const REQ: &str = r#"{"prompt": "hello", "max_tokens": 3}"#;
const STREAM: &str = r#"{"prompt": "hello", "max_tokens": 3, "stream": true}"#;

#[tokio::test]
async fn error_rate_answers_500_until_cleared() {
    let s = sim(&["--timing", "zero", "--error-rate", "1"]).await;
    let a = s.addrs()[0];
    let r = post(a, "/v1/completions", REQ).await;
    assert_eq!(r.status, 500);
    assert_eq!(r.json()["error"]["type"], "InternalServerError");
    let f = post(a, "/admin/faults", r#"{"error_rate": 0.5}"#).await;
    assert_eq!(f.status, 200, "{}", f.body);
    let codes: Vec<u16> = {
        let mut v = Vec::new();
        for _ in 0..10 {
            v.push(post(a, "/v1/completions", REQ).await.status);
        }
        v
    };
    let errors = codes.iter().filter(|c| **c == 500).count();
    assert!((3..=7).contains(&errors), "{codes:?}");
    post(a, "/admin/faults", r#"{"clear": true}"#).await;
    assert_eq!(post(a, "/v1/completions", REQ).await.status, 200);
    assert_eq!(
        post(a, "/admin/faults", r#"{"error_rate": 3}"#)
            .await
            .status,
        400
    );
    assert_eq!(
        post(a, "/admin/faults", r#"{"bogus": 1}"#).await.status,
        400
    );
}

#[tokio::test]
async fn hang_holds_requests_but_health_answers() {
    let s = sim(&["--timing", "zero", "--fault", "hang"]).await;
    let a = s.addrs()[0];
    let r = tokio::time::timeout(
        Duration::from_millis(300),
        request(a, "POST", "/v1/completions", REQ),
    )
    .await;
    assert!(r.is_err(), "a hung replica must not answer");
    assert_eq!(get(a, "/health").await.status, 200);
    post(a, "/admin/faults", r#"{"hang": false}"#).await;
    assert_eq!(post(a, "/v1/completions", REQ).await.status, 200);
}

#[tokio::test]
async fn slow_stream_spaces_chunks() {
    let s = sim(&["--timing", "zero"]).await;
    let a = s.addrs()[0];
    post(
        a,
        "/admin/faults",
        r#"{"slow_stream": true, "slow_stream_ms": 100}"#,
    )
    .await;
    let t = Instant::now();
    let r = post(a, "/v1/completions", STREAM).await;
    // Three token chunks and [DONE]: three gaps of 100 ms at least.
    assert!(
        t.elapsed() >= Duration::from_millis(300),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(sse_data(&r.body).last().unwrap(), "[DONE]");
}

#[tokio::test]
async fn drop_mid_stream_cuts_the_connection() {
    let s = sim(&[
        "--timing",
        "zero",
        "--fault",
        "drop-mid-stream",
        "--drop-after-chunks",
        "1",
    ])
    .await;
    let a = s.addrs()[0];
    let e = request(a, "POST", "/v1/completions", STREAM)
        .await
        .expect_err("stream cut");
    assert!(e.starts_with("body"), "{e}");
    let e = request(a, "POST", "/v1/completions", REQ)
        .await
        .expect_err("response cut");
    assert!(e.starts_with("body"), "{e}");
    post(a, "/admin/faults", r#"{"drop_mid_stream": false}"#).await;
    let r = post(a, "/v1/completions", STREAM).await;
    assert_eq!(sse_data(&r.body).last().unwrap(), "[DONE]");
}

#[tokio::test]
async fn refuse_connections_closes_the_port_until_cleared() {
    let s = sim(&[
        "--timing",
        "zero",
        "--replicas",
        "2",
        "--admin-listen",
        "127.0.0.1:0",
    ])
    .await;
    let (a, b) = (s.addrs()[0], s.addrs()[1]);
    let admin = s.admin_addr.unwrap();
    let r = post(
        admin,
        "/admin/faults",
        r#"{"replica": 0, "refuse_connections": true}"#,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let mut refused = false;
    for _ in 0..50 {
        if tokio::net::TcpStream::connect(a).await.is_err() {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(refused, "replica 0 still accepts connections");
    assert_eq!(get(b, "/health").await.status, 200);
    let all = get(admin, "/admin/faults").await.json();
    assert_eq!(all[0]["faults"]["refuse_connections"], true);
    assert_eq!(all[1]["faults"]["refuse_connections"], false);
    post(
        admin,
        "/admin/faults",
        r#"{"replica": 0, "refuse_connections": false}"#,
    )
    .await;
    let mut back = false;
    for _ in 0..50 {
        if let Ok(r) = request(a, "GET", "/health", "").await {
            back = r.status == 200;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(back, "replica 0 came back");
    assert_eq!(
        post(admin, "/admin/faults", r#"{"replica": 9, "hang": true}"#)
            .await
            .status,
        400
    );
}

#[tokio::test]
async fn refusal_for_a_while_ends_by_itself() {
    let s = sim(&["--timing", "zero"]).await;
    let a = s.addrs()[0];
    post(
        a,
        "/admin/faults",
        r#"{"refuse_connections": true, "for_ms": 200}"#,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(tokio::net::TcpStream::connect(a).await.is_err());
    let mut back = false;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        if let Ok(r) = request(a, "GET", "/health", "").await {
            back = r.status == 200;
            break;
        }
    }
    assert!(back);
}

#[tokio::test]
async fn unhealthy_fails_health_checks() {
    let s = sim(&["--timing", "zero", "--fault", "unhealthy"]).await;
    let a = s.addrs()[0];
    assert_eq!(get(a, "/health").await.status, 503);
    let f = get(a, "/admin/faults").await.json();
    assert_eq!(f["unhealthy"], true);
    post(a, "/admin/faults", &json!({"unhealthy": false}).to_string()).await;
    assert_eq!(get(a, "/health").await.status, 200);
}

#[tokio::test]
async fn a_drain_finishes_the_open_stream_then_closes_and_refuses_connections() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = sim(&["--timing", "zero"]).await;
    let a = s.addrs()[0];
    post(
        a,
        "/admin/faults",
        r#"{"slow_stream": true, "slow_stream_ms": 200}"#,
    )
    .await;
    let mut conn = tokio::net::TcpStream::connect(a).await.unwrap();
    let head = format!(
        "POST /v1/completions HTTP/1.1\r\nhost: sim\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n{STREAM}",
        STREAM.len()
    );
    conn.write_all(head.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains("data: ") {
        let n = conn.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed before the first chunk");
        got.extend_from_slice(&buf[..n]);
    }
    assert!(
        !String::from_utf8_lossy(&got).contains("[DONE]"),
        "the stream must still be open when the drain starts"
    );
    // The rest of the stream, read until the sim closes the connection.
    let reader = tokio::spawn(async move {
        loop {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => return got,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    });
    let drained = s.drain(Duration::from_secs(10)).await;
    let got = tokio::time::timeout(Duration::from_secs(10), reader)
        .await
        .expect("the connection closes after its stream")
        .unwrap();
    let text = String::from_utf8_lossy(&got);
    assert!(drained, "the drain timed out");
    assert!(text.contains("data: [DONE]"), "{text}");
    assert!(
        tokio::net::TcpStream::connect(a).await.is_err(),
        "a drained sim must refuse connections"
    );
}
