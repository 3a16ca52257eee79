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

/// Send `prefix` once, so that requests continuing it follow it to the replica that answered,
/// then hang that replica (it takes requests and never answers); its name.
async fn warm_then_hang(s: &Setup, prefix: &str) -> String {
    let r = post(s.router.addr, "/v1/completions", &completion(prefix, 1)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let hung = r.replica();
    s.fault(&hung, r#"{"hang": true}"#).await;
    hung
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_timeout_is_504() {
    let s = Setup::new(&["--replicas", "2"], "timeouts:\n  header_ms: 300\n").await;
    let addr = s.router.addr;
    let prefix = text(5, 4096);
    let hung = warm_then_hang(&s, &prefix).await;
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

/// A request waiting on an engine that then drops its connections (as a dying engine does,
/// before any answer) reached no client and is no longer held by that engine: it is tried on
/// another replica (`reason="reset"`), not answered 502. The stall rescue is off here, so
/// only the broken connection can move it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_whose_engine_drops_its_connection_before_answering_is_answered_elsewhere() {
    let s = Setup::new(
        &["--replicas", "2"],
        "health:\n  overdue_factor: 0\ntimeouts:\n  header_ms: 30000\n",
    )
    .await;
    let addr = s.router.addr;
    let prefix = text(7, 4096);
    let dying = warm_then_hang(&s, &prefix).await;
    let body = completion(&format!("{prefix} more"), 1);
    let pending = tokio::spawn(async move { post(addr, "/v1/completions", &body).await });
    until_in_flight(s.router.admin_addr, 1.0).await;
    // It closes its listener and every open connection, the waiting request's among them.
    s.fault(&dying, r#"{"refuse_connections": true}"#).await;
    let r = pending.await.unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_ne!(r.replica(), dying);
    let m = router_metrics(s.router.admin_addr).await;
    assert_eq!(
        metric(&m, "warmpath_retries_total", &[("reason", "reset")]),
        1.0,
        "{m}"
    );
    s.stop().await;
}

/// A stream that follows its prefix to a hung replica (the head never comes) waits a whole
/// allowance with no progress from it, is taken back, nothing of it having reached the client,
/// and is answered by another replica; the hung one is ejected meanwhile, and tried again once
/// its backoff is over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_waiting_on_a_hung_replica_is_taken_back_and_answered_elsewhere() {
    let s = Setup::new(
        &["--replicas", "2"],
        "health:\n  overdue_min_ms: 300\n  consecutive_failures: 0\n  eject_base_ms: 500\ntimeouts:\n  header_ms: 30000\n",
    )
    .await;
    let addr = s.router.addr;
    let prefix = text(6, 4096);
    let stream = |tail: &str| {
        serde_json::json!({"model": "tiny", "prompt": format!("{prefix} {tail}"), "max_tokens": 2, "stream": true})
            .to_string()
    };
    let hung = warm_then_hang(&s, &prefix).await;
    let sent = std::time::Instant::now();
    let r = post(addr, "/v1/completions", &stream("first")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_ne!(r.replica(), hung, "answered by the hung replica?");
    assert!(r.body.contains("[DONE]"), "{}", r.body);
    assert!(
        sent.elapsed() < Duration::from_secs(10),
        "{:?}",
        sent.elapsed()
    );
    let m = router_metrics(s.router.admin_addr).await;
    assert_eq!(
        metric(&m, "warmpath_retries_total", &[("reason", "stalled")]),
        1.0,
        "{m}"
    );
    assert_eq!(
        metric(&m, "warmpath_upstream_errors_total", &[("kind", "stalled")]),
        1.0,
        "{m}"
    );
    assert_eq!(
        metric(&m, "warmpath_replica_ready", &[("replica", &hung)]),
        0.0,
        "{m}"
    );
    // The prefix still points there, but the replica is out: the next streams go elsewhere.
    for i in 0..5 {
        let r = post(addr, "/v1/completions", &stream(&format!("next {i}"))).await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_ne!(r.replica(), hung, "request {i} sent to the stalled replica");
    }
    // Healed, it is a candidate again once its backoff is over.
    s.fault(&hung, r#"{"clear": true}"#).await;
    until_metric(
        s.router.admin_addr,
        "warmpath_replica_ready",
        &[("replica", &hung)],
        |v| v == 1.0,
    )
    .await;
    let r = post(addr, "/v1/completions", &stream("again")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    s.stop().await;
}

/// Issue 34's fault: one simulated engine of four hangs (takes requests, never answers) just
/// as 80 requests arrive at once, streamed and not, each client giving up after 5 s. Those
/// routed there wait a second or so with no progress from it, are taken back and answered
/// elsewhere: at most two may be lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_hung_engine_of_four_loses_at_most_two_of_80_concurrent_requests() {
    let s = Setup::new(&["--replicas", "4"], "").await;
    // Two scrapes of each, so that the engines' token counts are known before the burst.
    until_scraped(s.router.admin_addr, 8.0).await;
    s.fault("r0", r#"{"hang": true}"#).await;
    let addr = s.router.addr;
    let sends: Vec<_> = (0..80u64)
        .map(|i| {
            let body = serde_json::json!({
                "model": "tiny",
                "prompt": format!("{} q{i}", text(i % 8, 1024)),
                "max_tokens": 4,
                "stream": i % 2 == 0,
            })
            .to_string();
            tokio::spawn(warmpath_testkit::send(
                addr,
                "POST",
                "/v1/completions",
                &[],
                body,
                Duration::from_secs(5),
            ))
        })
        .collect();
    let mut lost = Vec::new();
    for (i, task) in sends.into_iter().enumerate() {
        match task.await.unwrap() {
            Ok(r) if r.status == 200 => assert_ne!(r.replica(), "r0", "request {i}"),
            Ok(r) => lost.push(format!("{i}: {} {}", r.status, r.body)),
            Err(e) => lost.push(format!("{i}: {e}")),
        }
    }
    assert!(lost.len() <= 2, "{} lost: {lost:?}", lost.len());
    let m = router_metrics(s.router.admin_addr).await;
    assert!(
        metric(&m, "warmpath_retries_total", &[("reason", "stalled")]) >= 1.0,
        "nothing was sent to the hung engine? {m}"
    );
    s.stop().await;
}

/// An engine whose `/health` fails (its metrics still fine) is no candidate while it fails: the
/// check is on by default (only its period is shortened here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn active_checks_take_out_an_engine_whose_health_fails_and_bring_it_back() {
    let s = Setup::new(
        &["--replicas", "2"],
        "health:\n  active_interval_ms: 50\nscrape:\n  failures_before_unready: 2\n",
    )
    .await;
    s.fault("r0", r#"{"unhealthy": true}"#).await;
    let ready = |m: &str| metric(m, "warmpath_replica_ready", &[("replica", "r0")]);
    let mut m = String::new();
    for _ in 0..100 {
        m = router_metrics(s.router.admin_addr).await;
        if ready(&m) == 0.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(ready(&m), 0.0, "{m}");
    assert!(metric(&m, "warmpath_health_checks_total", &[("result", "error")]) >= 2.0);
    for i in 0..6 {
        let r = post(
            s.router.addr,
            "/v1/completions",
            &completion(&format!("q {i}"), 1),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.replica(), "r1");
    }
    s.fault("r0", r#"{"clear": true}"#).await;
    for _ in 0..100 {
        m = router_metrics(s.router.admin_addr).await;
        if ready(&m) == 1.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(ready(&m), 1.0, "one passing check brings it back: {m}");
    s.stop().await;
}

/// The check is on by default, so an engine that serves no health endpoint (404) must not be
/// taken out by it: it is left to its metrics and answers, and serves. `active_path: null`
/// turns the check off, and then even a failing `/health` is not looked at.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_with_no_health_endpoint_serves_and_null_turns_the_check_off() {
    let engine = warmpath_testkit::Recorder::default();
    let addr = engine
        .start(warmpath_testkit::completion_answer, Duration::ZERO)
        .await;
    let yaml = config_yaml(
        "tiny",
        &[addr],
        "health:\n  active_interval_ms: 20\nscrape:\n  failures_before_unready: 1\n",
    )
    .replace("    replicas:", "    metrics_path: null\n    replicas:");
    let rt = router(&yaml).await;
    until_metric(
        rt.admin_addr,
        "warmpath_health_checks_total",
        &[("result", "not_served")],
        |v| v >= 1.0,
    )
    .await;
    // Four more rounds of the replica's loop (75 ms each), each a check had the first not
    // stopped them.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let m = router_metrics(rt.admin_addr).await;
    assert_eq!(
        metric(
            &m,
            "warmpath_health_checks_total",
            &[("result", "not_served")]
        ),
        1.0,
        "checked once, then left alone for a minute: {m}"
    );
    assert_eq!(
        metric(&m, "warmpath_health_checks_total", &[("result", "error")]),
        0.0,
        "{m}"
    );
    assert_eq!(
        metric(&m, "warmpath_replica_ready", &[("replica", "r0")]),
        1.0,
        "{m}"
    );
    let r = post(rt.addr, "/v1/completions", &completion("hello", 1)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    rt.shutdown().await;

    let s = Setup::new(
        &["--replicas", "2"],
        "health:\n  active_path: null\n  active_interval_ms: 20\nscrape:\n  failures_before_unready: 1\n",
    )
    .await;
    s.fault("r0", r#"{"unhealthy": true}"#).await;
    // Ten more rounds of each replica's loop (a scrape each), each a check had any been made.
    let scraped = |m: &str| metric(m, "warmpath_engine_scrapes_total", &[("result", "ok")]);
    let before = scraped(&router_metrics(s.router.admin_addr).await);
    let m = until_metric(
        s.router.admin_addr,
        "warmpath_engine_scrapes_total",
        &[("result", "ok")],
        |v| v >= before + 20.0,
    )
    .await;
    assert_eq!(
        metric(&m, "warmpath_replica_ready", &[("replica", "r0")]),
        1.0,
        "{m}"
    );
    assert!(
        !has_metric(&m, "warmpath_health_checks_total")
            || metric(&m, "warmpath_health_checks_total", &[]) == 0.0,
        "no check was made: {m}"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_replicas_give_502_then_503() {
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    // No scraping and no active check (which would find the refusal first), so only the
    // passive check can find out.
    let mut yaml = config_yaml("tiny", &[closed], "health:\n  active_path: null\n");
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

/// A router (with `extra` configuration, no scraping) over `r0`, a recording server answering
/// `bad`, and `r1`, one answering every completion: the bad one's recorder and address.
async fn bad_and_good(
    bad: fn(usize) -> (u16, String),
    extra: &str,
) -> (
    warmpath_testkit::Recorder,
    SocketAddr,
    warmpath_router::RouterHandle,
) {
    let rec = warmpath_testkit::Recorder::default();
    let b = rec.start(bad, Duration::ZERO).await;
    let g = warmpath_testkit::Recorder::default()
        .start(warmpath_testkit::completion_answer, Duration::ZERO)
        .await;
    let yaml = config_yaml("tiny", &[b, g], extra)
        .replace("    replicas:", "    metrics_path: null\n    replicas:");
    (rec, b, router(&yaml).await)
}

/// An engine that answers 503 (it cannot take the request) has computed nothing: the request
/// goes to another replica and the client never sees the 503. When every replica answers so,
/// the last one's answer is the client's, as it came.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_503_from_an_engine_is_retried_on_another_replica() {
    fn busy(_: usize) -> (u16, String) {
        (503, r#"{"error":{"message":"engine busy"}}"#.to_owned())
    }
    let (bad, b, rt) = bad_and_good(busy, "").await;
    for i in 0..12 {
        let r = post(rt.addr, "/v1/completions", &completion(&format!("q{i}"), 1)).await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.replica(), "r1");
    }
    assert!(
        !bad.requests().is_empty(),
        "the busy engine was never tried"
    );
    let m = router_metrics(rt.admin_addr).await;
    assert_eq!(
        metric(&m, "warmpath_retries_total", &[("reason", "unavailable")]),
        bad.requests().len() as f64,
        "{m}"
    );
    rt.shutdown().await;

    // Every replica busy: the engine's own 503 reaches the client.
    let other = warmpath_testkit::Recorder::default();
    let o = other.start(busy, Duration::ZERO).await;
    let yaml = config_yaml("tiny", &[b, o], "")
        .replace("    replicas:", "    metrics_path: null\n    replicas:");
    let rt = router(&yaml).await;
    let r = post(rt.addr, "/v1/completions", &completion("anyone", 1)).await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(r.body.contains("engine busy"), "{}", r.body);
    rt.shutdown().await;
}

/// A replica that answers every request with a 500 stays up (it accepts connections) but is
/// ejected after a run of failures, as Envoy's outlier detection would, while the other keeps
/// serving; nothing of a 500 has reached its client, so each is tried again on the other
/// replica and no client sees one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_failing_every_answer_is_ejected_after_a_run_and_its_500s_retried() {
    fn broken(_: usize) -> (u16, String) {
        (500, r#"{"error":{"message":"engine crashed"}}"#.to_owned())
    }
    let (bad, _, rt) = bad_and_good(
        broken,
        "health:\n  eject_base_ms: 60000\n  eject_max_ms: 60000\n",
    )
    .await;
    for i in 0..40 {
        let r = post(rt.addr, "/v1/completions", &completion(&format!("q{i}"), 1)).await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.replica(), "r1");
    }
    assert_eq!(
        bad.requests().len(),
        5,
        "five failures in a row eject, and then no more reach it"
    );
    let m = router_metrics(rt.admin_addr).await;
    assert_eq!(
        metric(&m, "warmpath_retries_total", &[("reason", "server_error")]),
        5.0,
        "{m}"
    );
    assert_eq!(
        metric(&m, "warmpath_replica_ready", &[("replica", "r0")]),
        0.0,
        "{m}"
    );
    assert_eq!(
        metric(&m, "warmpath_replica_ready", &[("replica", "r1")]),
        1.0,
        "{m}"
    );
    rt.shutdown().await;
}

/// When every replica answers 500, the last one's answer is the client's, as it came (the
/// retries found no one better).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_every_replica_answers_500_the_client_gets_the_engines_answer() {
    fn broken(i: usize) -> (u16, String) {
        (
            500,
            format!(r#"{{"error":{{"message":"engine crashed {i}"}}}}"#),
        )
    }
    let a = warmpath_testkit::Recorder::default();
    let b = warmpath_testkit::Recorder::default();
    let yaml = config_yaml(
        "tiny",
        &[
            a.start(broken, Duration::ZERO).await,
            b.start(broken, Duration::ZERO).await,
        ],
        "",
    )
    .replace("    replicas:", "    metrics_path: null\n    replicas:");
    let rt = router(&yaml).await;
    let r = post(rt.addr, "/v1/completions", &completion("anyone", 1)).await;
    assert_eq!(r.status, 500, "{}", r.body);
    assert!(r.body.contains("engine crashed"), "{}", r.body);
    assert_eq!(
        a.requests().len() + b.requests().len(),
        2,
        "each tried once"
    );
    rt.shutdown().await;
}

/// Issue 34's fault: one simulated engine of four answers 500 to everything. Requests come
/// ten at a time with shared prefixes (so some follow their cache there); every 500 arrives
/// before any byte went to its client and is tried on another replica: at most one request of
/// a hundred may fail (the retry budget could refuse one), and none did here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_engine_answering_500_of_four_fails_at_most_one_request_in_a_hundred() {
    let s = Setup::new(&["--replicas", "4"], "").await;
    s.fault("r0", r#"{"error_rate": 1.0}"#).await;
    let addr = s.router.addr;
    let mut failed = Vec::new();
    for wave in 0..10 {
        let sends: Vec<_> = (0..10)
            .map(|i| {
                let prompt = format!("{} q{wave}-{i}", text(i % 4, 2048));
                tokio::spawn(send(
                    addr,
                    "POST",
                    "/v1/completions",
                    &[],
                    completion(&prompt, 2),
                ))
            })
            .collect();
        for task in sends {
            let r = task.await.unwrap().expect("an answer");
            if r.status != 200 {
                failed.push(format!("{}: {}", r.status, r.body));
            }
        }
    }
    assert!(failed.len() <= 1, "{failed:?}");
    let m = router_metrics(s.router.admin_addr).await;
    assert!(
        metric(&m, "warmpath_retries_total", &[("reason", "server_error")]) >= 1.0,
        "the failing engine was never tried: {m}"
    );
    s.stop().await;
}

/// A 500 whose body blames the request (vLLM's `BadRequestError` shape) is the client's doing:
/// a client sending only such requests reaches its answers as they came but ejects nothing,
/// however many it sends; the same replica failing with a server error is ejected as above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_that_blame_the_request_never_eject_a_replica() {
    fn refused(_: usize) -> (u16, String) {
        let body = r#"{"object":"error","message":"the chat template does not render","type":"BadRequestError","param":null,"code":400}"#;
        (500, body.to_owned())
    }
    let (bad, _, rt) = bad_and_good(
        refused,
        "health:\n  eject_base_ms: 60000\n  eject_max_ms: 60000\n",
    )
    .await;
    let mut refusals = 0;
    for i in 0..40 {
        let r = post(rt.addr, "/v1/completions", &completion(&format!("q{i}"), 1)).await;
        match r.status {
            200 => assert_eq!(r.replica(), "r1"),
            500 => {
                refusals += 1;
                assert!(r.body.contains("does not render"), "{}", r.body);
            }
            s => panic!("{s}: {}", r.body),
        }
    }
    assert_eq!(bad.requests().len(), refusals, "every one reached it");
    assert!(
        refusals > 5,
        "more than a run's worth reached it: {refusals}"
    );
    let m = router_metrics(rt.admin_addr).await;
    assert_eq!(
        metric(&m, "warmpath_replica_ready", &[("replica", "r0")]),
        1.0,
        "{m}"
    );
    rt.shutdown().await;
}

/// A replica failing every other answer never fails a run of them, but half its answers fail:
/// it is ejected once it has given `failure_window` answers, as Envoy's failure-percentage rule
/// would; without the rule it would keep half its clients failing for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_failing_every_other_answer_is_ejected_by_its_share_of_failures() {
    fn flapping(i: usize) -> (u16, String) {
        match i % 2 {
            1 => (500, r#"{"error":{"message":"engine crashed"}}"#.to_owned()),
            _ => warmpath_testkit::completion_answer(i),
        }
    }
    let (bad, _, rt) = bad_and_good(
        flapping,
        "health:\n  eject_base_ms: 60000\n  eject_max_ms: 60000\n  failure_window: 20\n  failure_percent: 50\n",
    )
    .await;
    for i in 0..100 {
        let r = post(rt.addr, "/v1/completions", &completion(&format!("q{i}"), 1)).await;
        assert_eq!(
            r.status, 200,
            "{}: its 500s are tried again elsewhere",
            r.body
        );
    }
    assert_eq!(
        bad.requests().len(),
        20,
        "its 20th answer, the 10th failure, ejects it; then no more reach it"
    );
    let m = router_metrics(rt.admin_addr).await;
    assert_eq!(
        metric(&m, "warmpath_replica_ready", &[("replica", "r0")]),
        0.0,
        "{m}"
    );
    rt.shutdown().await;
}

/// Streams that break after their head count against their replica: a run of them ejects it,
/// whatever good heads it sent in between.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_breaking_its_streams_is_ejected() {
    let s = Setup::new(
        &["--replicas", "2", "--drop-after-chunks", "2"],
        "health:\n  consecutive_failures: 3\n  eject_base_ms: 60000\n  eject_max_ms: 60000\n",
    )
    .await;
    s.fault("r0", r#"{"drop_mid_stream": true}"#).await;
    let mut broken = Vec::new();
    for i in 0..30 {
        let body = serde_json::json!({"model": "tiny", "prompt": format!("story {i}"),
            "max_tokens": 8, "stream": true})
        .to_string();
        let r = send(s.router.addr, "POST", "/v1/completions", &[], body)
            .await
            .expect("a complete response");
        assert_eq!(r.status, 200);
        if r.body.contains("stream_broken") {
            assert_eq!(r.replica(), "r0");
            broken.push(i);
        }
    }
    assert_eq!(broken.len(), 3, "broken streams: {broken:?}");
    let m = router_metrics(s.router.admin_addr).await;
    assert_eq!(
        metric(&m, "warmpath_replica_ready", &[("replica", "r0")]),
        0.0,
        "{m}"
    );
    s.stop().await;
}

/// A replica that drops the connection mid-stream: the client's stream ends with an error
/// event in OpenAI's shape and `[DONE]` on a cleanly ended response, not a cut connection; the
/// router serves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_broken_midway_ends_with_an_error_event() {
    // Two replicas, so that a retry would have somewhere to go: none may follow the bytes
    // already sent.
    let s = Setup::new(
        &[
            "--replicas",
            "2",
            "--fault",
            "drop-mid-stream",
            "--drop-after-chunks",
            "3",
        ],
        "",
    )
    .await;
    let body = serde_json::json!({"model": "tiny", "prompt": "tell a long story", "max_tokens": 40,
        "stream": true})
    .to_string();
    let r = send(s.router.addr, "POST", "/v1/completions", &[], body.clone())
        .await
        .expect("a complete response, not a transport error");
    assert_eq!(r.status, 200);
    assert!(r.body.starts_with("data: "), "{}", r.body);
    assert!(r.body.contains("\"code\":\"stream_broken\""), "{}", r.body);
    assert!(r.body.trim_end().ends_with("data: [DONE]"), "{}", r.body);
    let m = router_metrics(s.router.admin_addr).await;
    assert_eq!(
        metric(&m, "warmpath_upstream_errors_total", &[("kind", "body")]),
        1.0,
        "{m}"
    );
    assert_eq!(metric(&m, "warmpath_retries_total", &[]), 0.0, "{m}");
    // The replicas mended, the next stream is whole.
    for name in ["r0", "r1"] {
        s.fault(name, r#"{"clear": true}"#).await;
    }
    let r = send(s.router.addr, "POST", "/v1/completions", &[], body)
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    assert!(!r.body.contains("stream_broken"), "{}", r.body);
    s.stop().await;
}

/// Request bodies are held until their replica answers: past `limits.max_buffered_body_bytes`
/// held at once, a request is refused at once (503 `overloaded`) instead of taking more memory,
/// and room comes back as answers arrive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_held_at_once_are_bounded() {
    let slow = warmpath_testkit::Recorder::default();
    // Every answer's head comes after a second: the bodies stay held that long.
    let addr = slow
        .start(warmpath_testkit::completion_answer, Duration::from_secs(1))
        .await;
    let extra = "limits:\n  max_body_bytes: 32768\n  max_buffered_body_bytes: 65536\n";
    let yaml = config_yaml("tiny", &[addr], extra)
        .replace("    replicas:", "    metrics_path: null\n    replicas:");
    let rt = router(&yaml).await;
    let big = |i: u64| completion(&text(i, 30_000), 1);
    let held: Vec<_> = (0..2)
        .map(|i| {
            let (a, body) = (rt.addr, big(i));
            tokio::spawn(async move { send(a, "POST", "/v1/completions", &[], body).await })
        })
        .collect();
    // Both read whole and sent on (their answers come after a second).
    until_in_flight(rt.admin_addr, 2.0).await;
    let r = post(rt.addr, "/v1/completions", &big(9)).await;
    r.assert_error(503, "overloaded");
    assert_eq!(r.header("retry-after"), Some("1"));
    for h in held {
        assert_eq!(h.await.unwrap().unwrap().status, 200);
    }
    let r = post(rt.addr, "/v1/completions", &big(10)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let m = router_metrics(rt.admin_addr).await;
    assert_eq!(
        metric(&m, "warmpath_body_budget_refusals_total", &[]),
        1.0,
        "{m}"
    );
    rt.shutdown().await;
}

/// An engine that answers every completion at once, except one whose prompt says `slow`: that
/// one it takes in, reports on `arrived`, and never answers.
async fn slow_on_demand(arrived: tokio::sync::mpsc::UnboundedSender<()>) -> SocketAddr {
    use http_body_util::BodyExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let arrived = arrived.clone();
            tokio::spawn(async move {
                let svc =
                    hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let arrived = arrived.clone();
                        async move {
                            let body = req.into_body().collect().await.unwrap().to_bytes();
                            if body.windows(4).any(|w| w == b"slow") {
                                let _ = arrived.send(());
                                std::future::pending::<()>().await;
                            }
                            let (status, text) = warmpath_testkit::completion_answer(0);
                            Ok::<_, std::convert::Infallible>(
                                http::Response::builder()
                                    .status(status)
                                    .header("content-type", "application/json")
                                    .body(http_body_util::Full::new(bytes::Bytes::from(text)))
                                    .unwrap(),
                            )
                        }
                    });
                let _ = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                )
                .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                .await;
            });
        }
    });
    addr
}

/// A request that gets no answer in time while its replica goes on answering others timed out
/// by its own doing (a generation longer than the timeout, or a request crafted to be slow):
/// a client sending such requests must not be able to eject replicas. The same timeouts with
/// nothing answered meanwhile (a hung engine) do eject.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_while_the_replica_answers_others_never_eject_it() {
    async fn fleet() -> (
        warmpath_router::RouterHandle,
        tokio::sync::mpsc::UnboundedReceiver<()>,
    ) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let a = slow_on_demand(tx.clone()).await;
        let b = slow_on_demand(tx).await;
        let extra = "timeouts:\n  header_ms: 1000\nhealth:\n  consecutive_failures: 2\n  eject_base_ms: 60000\n  eject_max_ms: 60000\nscheduling:\n  policy: round_robin\n";
        let yaml = config_yaml("tiny", &[a, b], extra)
            .replace("    replicas:", "    metrics_path: null\n    replicas:");
        (router(&yaml).await, rx)
    }
    async fn ready(rt: &warmpath_router::RouterHandle) -> f64 {
        let m = router_metrics(rt.admin_addr).await;
        metric(&m, "warmpath_replica_ready", &[("replica", "r0")])
            + metric(&m, "warmpath_replica_ready", &[("replica", "r1")])
    }

    // Each slow request is held; four quick ones go round both replicas and are answered
    // before it times out.
    let (rt, mut arrived) = fleet().await;
    for round in 0..6 {
        let addr = rt.addr;
        let slow = tokio::spawn(async move {
            post(
                addr,
                "/v1/completions",
                &completion(&format!("slow {round}"), 1),
            )
            .await
        });
        arrived
            .recv()
            .await
            .expect("the slow request reached a replica");
        for i in 0..4 {
            let r = post(
                rt.addr,
                "/v1/completions",
                &completion(&format!("q{round}-{i}"), 1),
            )
            .await;
            assert_eq!(r.status, 200, "{}", r.body);
        }
        let r = slow.await.unwrap();
        r.assert_error(504, "upstream_timeout");
    }
    assert_eq!(
        ready(&rt).await,
        2.0,
        "a replica that kept answering was ejected"
    );
    rt.shutdown().await;

    // Nothing answered meanwhile: two timeouts in a row eject a replica.
    let (rt, mut arrived) = fleet().await;
    for round in 0..4 {
        let r = post(
            rt.addr,
            "/v1/completions",
            &completion(&format!("slow {round}"), 1),
        )
        .await;
        arrived
            .recv()
            .await
            .expect("the slow request reached a replica");
        r.assert_error(504, "upstream_timeout");
    }
    assert_eq!(
        ready(&rt).await,
        1.0,
        "a replica that answered nothing stayed in"
    );
    rt.shutdown().await;
}

/// Headers a client's `Connection` names stop at the router, but only the client's own: the
/// router's (its request id, the forwarded-for it appends) still reach the engine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_connection_header_cannot_strip_the_routers_own() {
    let rec = warmpath_testkit::Recorder::default();
    let a = rec
        .start(warmpath_testkit::completion_answer, Duration::ZERO)
        .await;
    let yaml = config_yaml("tiny", &[a], "")
        .replace("    replicas:", "    metrics_path: null\n    replicas:");
    let rt = router(&yaml).await;
    let r = send(
        rt.addr,
        "POST",
        "/v1/completions",
        &[
            ("connection", "x-request-id, x-forwarded-for, x-hop-secret"),
            ("x-hop-secret", "for the router only"),
        ],
        completion("hi", 1),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let id = r.header("x-request-id").expect("request id").to_owned();
    assert!(id.starts_with("wp-"), "{id}");
    let seen = rec.requests();
    assert_eq!(seen.len(), 1);
    let h = &seen[0].0.headers;
    assert_eq!(h["x-request-id"], id.as_str());
    assert_eq!(h["x-forwarded-for"], "127.0.0.1");
    assert!(!h.contains_key("x-hop-secret"));
    rt.shutdown().await;
}
