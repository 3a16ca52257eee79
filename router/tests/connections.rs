//! What a client connection may hold, and how the router leaves: silent or half-spoken
//! connections closed after the client timeout, a connection cap answered with 503, and a
//! drain that fails readiness first, keeps accepting for a while, and lets open streams finish.

mod common;

use common::*;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Read until the server closes or `limit` passes: what was read, and whether it closed.
async fn read_until_closed(s: &mut TcpStream, limit: Duration) -> (Vec<u8>, bool) {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return (out, true),
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
            Err(_) => return (out, false),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_and_half_spoken_connections_are_closed_after_the_client_timeout() {
    let s = Setup::new(&["--timing", "zero"], "timeouts:\n  client_ms: 300\n").await;
    wait_ready(s.router.admin_addr).await;
    for opening in [
        &b""[..],
        b"PRI * HTTP/2.0\r\n",
        b"POST /v1/completions HTTP/1.1\r\n",
    ] {
        let mut c = TcpStream::connect(s.router.addr).await.unwrap();
        c.write_all(opening).await.unwrap();
        let started = Instant::now();
        let (_, closed) = read_until_closed(&mut c, Duration::from_secs(5)).await;
        let held = started.elapsed();
        let opening = String::from_utf8_lossy(opening);
        assert!(closed, "held open for {held:?} after {opening:?}");
        // Closed by the timeout (300 ms from the accept, a moment before `started`), not at
        // once: the client had time to go on.
        assert!(
            held >= Duration::from_millis(200),
            "closed after {held:?}, before the client timeout, after {opening:?}"
        );
    }
    let r = post(
        s.router.addr,
        "/v1/completions",
        &completion("still here", 1),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_limit_are_answered_503_and_slots_come_back() {
    let s = Setup::new(&["--timing", "zero"], "limits:\n  max_connections: 2\n").await;
    wait_ready(s.router.admin_addr).await;
    let a = TcpStream::connect(s.router.addr).await.unwrap();
    let b = TcpStream::connect(s.router.addr).await.unwrap();
    // Both accepted and counted before the third comes.
    until_metric(s.router.admin_addr, "warmpath_connections_open", &[], |v| {
        v >= 2.0
    })
    .await;
    let mut c = TcpStream::connect(s.router.addr).await.unwrap();
    let (answer, closed) = read_until_closed(&mut c, Duration::from_secs(5)).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(closed, "{answer}");
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(
        answer.contains("\"code\":\"too_many_connections\""),
        "{answer}"
    );
    assert!(answer.contains("retry-after: 1"), "{answer}");
    let m = router_metrics(s.router.admin_addr).await;
    assert_eq!(
        metric(&m, "warmpath_connections_refused_total", &[]),
        1.0,
        "{m}"
    );
    assert_eq!(metric(&m, "warmpath_connections_open", &[]), 2.0, "{m}");
    drop((a, b));
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let r = send(
            s.router.addr,
            "POST",
            "/v1/completions",
            &[],
            completion("after", 1),
        )
        .await;
        if matches!(&r, Ok(r) if r.status == 200) {
            break;
        }
        assert!(Instant::now() < deadline, "no slot came back: {r:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaving_fails_readiness_first_keeps_accepting_then_lets_streams_finish() {
    // Decode steps of 20 ms: a 60-token stream takes over a second.
    let mut sim = sim(&["--decode-base-ms", "20"]).await;
    // Accepting for 2 s after readiness fails: time for the request below on a busy machine.
    let extra = "shutdown:\n  accept_ms: 2000\n  drain_ms: 10000\n";
    let router = router(&config_yaml("tiny", &sim.addrs(), extra)).await;
    wait_ready(router.admin_addr).await;
    let (addr, admin) = (router.addr, router.admin_addr);
    let body = serde_json::json!({"model": "tiny", "prompt": "a long answer", "max_tokens": 60,
        "stream": true})
    .to_string();
    let long = tokio::spawn(async move { send(addr, "POST", "/v1/completions", &[], body).await });
    until_in_flight(admin, 1.0).await;
    let leaving = tokio::spawn(router.drain());
    // Not ready first, so that load balancers stop sending…
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let ready = get(admin, "/readyz").await.unwrap();
        if ready.status == 503 {
            break;
        }
        assert!(Instant::now() < deadline, "still ready: {}", ready.body);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // …while what they still send on new connections is served.
    let r = post(addr, "/v1/completions", &completion("one more", 1)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    // The stream that was open finishes whole.
    let r = long.await.unwrap().unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains("[DONE]"), "{}", r.body);
    leaving.await.unwrap();
    assert!(TcpStream::connect(addr).await.is_err(), "still accepting");
    sim.shutdown();
}

/// A client that asks for a long stream and stops reading: once the router's writes to it have
/// waited `timeouts.write_stall_ms`, the connection is closed, which ends the request and frees
/// the replica's slot, however long the client keeps its socket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_is_let_go_and_its_replica_freed() {
    let s = Setup::new(
        &["--timing", "zero", "--max-model-len", "100000"],
        "timeouts:\n  write_stall_ms: 300\n",
    )
    .await;
    wait_ready(s.router.admin_addr).await;
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    // A small window, so that the answer backs up into the router quickly.
    socket.set_recv_buffer_size(4096).unwrap();
    let mut c = socket.connect(s.router.addr).await.unwrap();
    let body = serde_json::json!({"model": "tiny", "prompt": "go on", "max_tokens": 60000,
        "stream": true, "ignore_eos": true})
    .to_string();
    let head = format!(
        "POST /v1/completions HTTP/1.1\r\nhost: r\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n",
        body.len()
    );
    c.write_all(head.as_bytes()).await.unwrap();
    c.write_all(body.as_bytes()).await.unwrap();
    // The client reads nothing from here on, and keeps its socket open.
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut seen_busy = false;
    loop {
        let m = router_metrics(s.router.admin_addr).await;
        let inflight = metric(&m, "warmpath_inflight_requests", &[("replica", "r0")]);
        seen_busy |= inflight > 0.0;
        if seen_busy
            && inflight == 0.0
            && metric(&m, "warmpath_client_disconnects_total", &[]) >= 1.0
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the stalled client still holds r0: {m}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(c);
    s.stop().await;
}

/// The same over HTTP/2, where a client can stop taking data without filling any socket: it
/// leaves its stream's window at 0. The router's writes never wait (there is nothing it may
/// send), so the socket-level guard cannot see it; the response is cut once it has waited for
/// the client `timeouts.write_stall_ms`, and the replica is freed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_client_that_leaves_its_window_at_zero_is_cut_off_and_its_replica_freed() {
    use http_body_util::Full;
    use hyper_util::rt::{TokioExecutor, TokioIo};
    let s = Setup::new(
        &["--timing", "zero", "--max-model-len", "100000"],
        "timeouts:\n  write_stall_ms: 300\n",
    )
    .await;
    wait_ready(s.router.admin_addr).await;
    let tcp = TcpStream::connect(s.router.addr).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .initial_stream_window_size(0)
        .adaptive_window(false)
        .handshake(TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(conn);
    let body = serde_json::json!({"model": "tiny", "prompt": "go on", "max_tokens": 60000,
        "stream": true, "ignore_eos": true})
    .to_string();
    let req = http::Request::post(format!("http://{}/v1/completions", s.router.addr))
        .header("content-type", "application/json")
        .body(Full::new(bytes::Bytes::from(body)))
        .unwrap();
    // The head comes (HEADERS are not flow-controlled); the body is never read.
    let resp = send.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let m = router_metrics(s.router.admin_addr).await;
        let inflight = metric(&m, "warmpath_inflight_requests", &[("replica", "r0")]);
        if inflight == 0.0 && metric(&m, "warmpath_client_write_stalls_total", &[]) == 1.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the client with a closed window still holds r0: {m}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The connection itself serves on.
    let r = post(s.router.addr, "/v1/completions", &completion("next", 2)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    drop(resp);
    s.stop().await;
}
