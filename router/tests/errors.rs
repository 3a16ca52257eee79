//! Every bad input gets its status and an OpenAI-shaped error body, and the router keeps
//! serving: each case is followed by a good request.

mod common;

use common::*;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn still_serving(addr: SocketAddr) {
    let r = post(addr, "/v1/completions", &completion("still here?", 1)).await;
    assert_eq!(r.status, 200, "{}", r.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_errors() {
    let s = Setup::new(
        &["--max-model-len", "512"],
        "limits:\n  max_body_bytes: 65536\ntimeouts:\n  client_ms: 300\n",
    )
    .await;
    let addr = s.router.addr;
    let cases: Vec<(&str, &str, String, u16, &str)> = vec![
        (
            "POST",
            "/v1/completions",
            "{\"model\": \"tiny\", \"prompt\": ".into(),
            400,
            "invalid_json",
        ),
        ("POST", "/v1/completions", "".into(), 400, "invalid_json"),
        (
            "POST",
            "/v1/completions",
            r#"{"prompt":"hi"}"#.into(),
            400,
            "missing_model",
        ),
        (
            "POST",
            "/v1/completions",
            r#"{"model":"tiny"}"#.into(),
            400,
            "missing_prompt",
        ),
        (
            "POST",
            "/v1/completions",
            r#"{"model":"tiny","prompt":"x","stream":"yes"}"#.into(),
            400,
            "invalid_field",
        ),
        (
            "POST",
            "/v1/chat/completions",
            r#"{"model":"tiny","messages":[]}"#.into(),
            400,
            "missing_messages",
        ),
        (
            "POST",
            "/v1/completions",
            r#"{"model":"gpt-9","prompt":"hi"}"#.into(),
            404,
            "model_not_found",
        ),
        (
            "POST",
            "/v1/completions",
            completion(&"x".repeat(100_000), 1),
            413,
            "body_too_large",
        ),
        ("POST", "/v1/embeddings", "{}".into(), 404, "unknown_url"),
        (
            "GET",
            "/v1/completions",
            "".into(),
            405,
            "method_not_allowed",
        ),
    ];
    for (method, path, body, status, code) in cases {
        let r = send(addr, method, path, &[], body).await.unwrap();
        r.assert_error(status, code);
        assert!(r.header("x-request-id").is_some());
        still_serving(addr).await;
    }

    // A body over the limit without a content-length (chunked) is cut off at the limit.
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut req =
        b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
    for _ in 0..10 {
        req.extend_from_slice(b"2000\r\n");
        req.extend_from_slice(&[b' '; 0x2000]);
        req.extend_from_slice(b"\r\n");
    }
    tcp.write_all(&req).await.unwrap();
    let mut head = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut head))
        .await
        .expect("an answer to an oversized chunked body")
        .unwrap();
    let head = String::from_utf8_lossy(&head[..n]);
    assert!(head.starts_with("HTTP/1.1 413"), "{head}");
    assert!(head.contains("body_too_large"), "{head}");
    drop(tcp);
    still_serving(addr).await;

    // The engine's own errors pass through untouched (vLLM rejects prompts over max_model_len).
    let r = post(addr, "/v1/completions", &completion(&text(3, 8000), 1)).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.replica(), "r0");
    still_serving(addr).await;

    // A client that sends headers and then too little body gets 408 after client_ms.
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.write_all(b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{\"model\"")
        .await
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut buf))
        .await
        .expect("no answer to a stalled body")
        .unwrap();
    let head = String::from_utf8_lossy(&buf[..n]);
    assert!(head.starts_with("HTTP/1.1 408"), "{head}");
    assert!(head.contains("request_timeout"), "{head}");
    drop(tcp);

    // A client that never finishes its headers is disconnected.
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.write_all(b"POST /v1/completions HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();
    let n = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut buf))
        .await
        .expect("a stalled head should be cut")
        .unwrap_or(0);
    let answer = String::from_utf8_lossy(&buf[..n]);
    assert!(n == 0 || answer.starts_with("HTTP/1.1 408"), "{answer}");
    still_serving(addr).await;

    let m = router_metrics(s.router.admin_addr).await;
    assert_eq!(
        metric(&m, "warmpath_requests_total", &[("status", "413")]),
        2.0,
        "{m}"
    );
    assert_eq!(
        metric(
            &m,
            "warmpath_requests_total",
            &[("model", "(unknown)"), ("status", "404")]
        ),
        1.0
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_timeout_is_504() {
    let s = Setup::new(&["--replicas", "2"], "timeouts:\n  header_ms: 300\n").await;
    let addr = s.router.addr;
    // Warm r0 with a prefix so the router sends the next request with it there, then hang r0.
    let prefix = text(5, 4096);
    let r = post(addr, "/v1/completions", &completion(&prefix, 1)).await;
    let hung = r.replica();
    let r = post(s.replica_addr(&hung), "/admin/faults", r#"{"hang": true}"#).await;
    assert_eq!(r.status, 200);
    let r = post(
        addr,
        "/v1/completions",
        &completion(&format!("{prefix} more"), 1),
    )
    .await;
    r.assert_error(504, "upstream_timeout");
    assert!(r.body.contains(&hung), "{}", r.body);
    let m = router_metrics(s.router.admin_addr).await;
    assert_eq!(
        metric(&m, "warmpath_upstream_errors_total", &[("kind", "timeout")]),
        1.0,
        "{m}"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_replicas_give_502_then_503() {
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    // No scraping, so only the passive check can find out.
    let mut yaml = config_yaml("tiny", &[closed], "");
    yaml = yaml.replace("    replicas:", "    metrics_path: null\n    replicas:");
    let router = router(&yaml).await;
    let r = post(router.addr, "/v1/completions", &completion("anyone?", 1)).await;
    r.assert_error(502, "upstream_connect_error");
    let r = post(router.addr, "/v1/completions", &completion("anyone?", 1)).await;
    r.assert_error(503, "no_ready_replica");
    assert_eq!(r.header("retry-after"), Some("1"));
    let ready = get(router.admin_addr, "/readyz").await.unwrap();
    assert_eq!(ready.status, 503, "{}", ready.body);
    let health = get(router.addr, "/health").await.unwrap();
    assert_eq!(health.status, 503, "{}", health.body);
    router.shutdown().await;
}
