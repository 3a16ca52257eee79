//! `warmpath-router sidecar` end to end: the sidecar in-process in front of a simulator
//! replica (its local engine), another replica as the prefill host, and recording servers
//! where the question is what went over the wire (or that nothing did).

mod common;

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{json, Map, Value};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, Notify};
use warmpath_router::config::PrefillFailure;
use warmpath_router::pd_wire::nixl;
use warmpath_router::sidecar::{self, AllowList, CidrPorts, SidecarHandle, SidecarOptions};
use warmpath_testkit::{completion_answer, nixl_prefill_answer, Recorder};

const HEADER: &str = "x-prefiller-host-port";

/// A sidecar on loopback ports for the engine at `engine`, allowing `cidrs` and `hosts`.
async fn sidecar_with(
    engine: SocketAddr,
    cidrs: &[&str],
    hosts: &[&str],
    edit: impl FnOnce(&mut SidecarOptions),
) -> SidecarHandle {
    let mut options = SidecarOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        admin: "127.0.0.1:0".parse().unwrap(),
        engine: format!("http://{engine}").parse().unwrap(),
        // The test servers listen on ports of their own: every port of the CIDRs serves
        // (a_cidr_reaches_only_the_serving_ports tests the default).
        allow: AllowList::new(
            cidrs.iter().map(|c| c.parse().unwrap()).collect(),
            hosts.iter().map(|h| h.parse().unwrap()).collect(),
        )
        .on_ports(CidrPorts::Any),
        ..SidecarOptions::default()
    };
    edit(&mut options);
    sidecar::start(options).await.expect("sidecar start")
}

async fn sidecar(engine: SocketAddr, cidrs: &[&str], hosts: &[&str]) -> SidecarHandle {
    sidecar_with(engine, cidrs, hosts, |_| {}).await
}

/// POST `body` to the sidecar, naming `prefill` (when given) in the header.
async fn post_via(sc: &SidecarHandle, path: &str, prefill: Option<&str>, body: &str) -> Reply {
    let headers: Vec<(&str, &str)> = prefill.map(|p| (HEADER, p)).into_iter().collect();
    send(sc.addr, "POST", path, &headers, body.to_owned())
        .await
        .unwrap_or_else(|e| panic!("POST {path}: {e}"))
}

async fn sidecar_metrics(sc: &SidecarHandle) -> String {
    get(sc.admin_addr, "/metrics").await.expect("metrics").body
}

fn outcome(m: &str, outcome: &str) -> f64 {
    metric(
        m,
        "warmpath_sidecar_requests_total",
        &[("outcome", outcome)],
    )
}

fn cached_tokens(v: &Value) -> u64 {
    v["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap_or(0)
}

fn object(body: &str) -> Map<String, Value> {
    match serde_json::from_str::<Value>(body).unwrap() {
        Value::Object(m) => m,
        _ => unreachable!(),
    }
}

/// Bodies compared as text, so that a failure shows JSON rather than bytes.
fn utf8(bytes: &[u8]) -> &str {
    std::str::from_utf8(bytes).expect("UTF-8")
}

fn unavailable(_: usize) -> (u16, String) {
    (503, json!({"error": {"message": "busy"}}).to_string())
}

fn no_params(_: usize) -> (u16, String) {
    (200, json!({"id": "cmpl-p", "choices": []}).to_string())
}

/// A port nothing listens on.
fn dead_port() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

#[tokio::test]
async fn a_named_prefill_host_prefills_and_the_local_engine_decodes_with_its_blocks() {
    let sim = sim(&["--timing", "zero", "--replicas", "2", "--kv-blocks", "256"]).await;
    let [p, d] = [sim.addrs()[0], sim.addrs()[1]];
    let sc = sidecar(d, &["127.0.0.0/8"], &[]).await;

    // 2,000 bytes ≈ 500 tokens: the decode engine pulls the prefill's blocks.
    let r = post_via(
        &sc,
        "/v1/completions",
        Some(&p.to_string()),
        &completion(&text(1, 2000), 4),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(v["usage"]["completion_tokens"], 4);
    assert!(
        cached_tokens(&v) >= 400,
        "the engine computed the prompt itself: {v}"
    );

    // No header: the local engine does it all (nothing to pull, nothing cached).
    let r = post_via(&sc, "/v1/completions", None, &completion(&text(2, 2000), 4)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(cached_tokens(&r.json()), 0, "{}", r.body);

    // A streamed chat request is split too, and streams; its usage chunk shows the pull.
    let chat = json!({"model": "tiny", "stream": true, "max_tokens": 3,
        "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": text(3, 2000)}]});
    let s = post_via(
        &sc,
        "/v1/chat/completions",
        Some(&p.to_string()),
        &chat.to_string(),
    )
    .await;
    assert_eq!(s.status, 200, "{}", s.body);
    assert!(
        s.header("content-type")
            .is_some_and(|c| c.starts_with("text/event-stream")),
        "{:?}",
        s.headers
    );
    assert!(s.body.trim_end().ends_with("data: [DONE]"), "{}", s.body);
    let usage = s
        .body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["usage"].is_object())
        .expect("a usage chunk");
    assert!(cached_tokens(&usage) >= 400, "{usage}");

    let m = sidecar_metrics(&sc).await;
    assert_eq!(outcome(&m, "split"), 2.0, "{m}");
    assert_eq!(outcome(&m, "local"), 1.0, "{m}");
    assert_eq!(
        metric(&m, "warmpath_sidecar_prefill_duration_seconds_count", &[]),
        2.0
    );
    sc.shutdown().await;
}

/// An engine whose streamed answer sends one event at once and the rest only when `release`
/// is notified: a proxy that buffers streams never delivers the first event before that.
async fn held_stream_engine(release: Arc<Notify>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let release = release.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req: http::Request<hyper::body::Incoming>| {
                    let release = release.clone();
                    async move {
                        let _ = req.into_body().collect().await;
                        let (tx, rx) =
                            mpsc::channel::<Result<http_body::Frame<Bytes>, std::io::Error>>(4);
                        tokio::spawn(async move {
                            let first = Bytes::from_static(b"data: {\"n\":1}\n\n");
                            let _ = tx.send(Ok(http_body::Frame::data(first))).await;
                            release.notified().await;
                            let done = Bytes::from_static(b"data: [DONE]\n\n");
                            let _ = tx.send(Ok(http_body::Frame::data(done))).await;
                        });
                        let body =
                            StreamBody::new(futures_util::stream::unfold(rx, |mut rx| async {
                                rx.recv().await.map(|f| (f, rx))
                            }));
                        Ok::<_, std::convert::Infallible>(
                            http::Response::builder()
                                .header("content-type", "text/event-stream")
                                .body(body)
                                .unwrap(),
                        )
                    }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn the_completion_answer_streams_as_the_engine_sends_it() {
    let pre = Recorder::default();
    let p = pre.start(nixl_prefill_answer, Duration::ZERO).await;
    let release = Arc::new(Notify::new());
    let engine = held_stream_engine(release.clone()).await;
    let sc = sidecar(engine, &["127.0.0.0/8"], &[]).await;
    let body = json!({"model": "tiny", "prompt": "hello", "stream": true}).to_string();
    let req = http::Request::post(format!("http://{}/v1/completions", sc.addr))
        .header("content-type", "application/json")
        .header(HEADER, p.to_string())
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(5), client().request(req))
        .await
        .expect("response head in time")
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let first = tokio::time::timeout(Duration::from_secs(5), body.frame())
        .await
        .expect("the first event arrives while the engine still holds the rest")
        .unwrap()
        .unwrap();
    assert_eq!(first.into_data().unwrap(), "data: {\"n\":1}\n\n");
    release.notify_one();
    let rest = tokio::time::timeout(Duration::from_secs(5), body.collect())
        .await
        .unwrap()
        .unwrap()
        .to_bytes();
    assert_eq!(rest, "data: [DONE]\n\n");
    assert_eq!(pre.requests().len(), 1, "the request was split");
    sc.shutdown().await;
}

#[tokio::test]
async fn hosts_outside_the_allow_list_are_refused_and_never_called() {
    let (pre, eng) = (Recorder::default(), Recorder::default());
    let p = pre.start(nixl_prefill_answer, Duration::ZERO).await;
    let e = eng.start(completion_answer, Duration::ZERO).await;
    let sc = sidecar_with(e, &["10.0.0.0/8"], &["prefill.example:8000"], |o| {
        o.max_body_bytes = 4096
    })
    .await;
    let body = completion("hello", 2);

    // Loopback is not in 10.0.0.0/8.
    let r = post_via(&sc, "/v1/completions", Some(&p.to_string()), &body).await;
    r.assert_error(403, "prefill_host_not_allowed");
    // A name is not resolved to be matched against the CIDRs.
    let by_name = format!("localhost:{}", p.port());
    let r = post_via(&sc, "/v1/chat/completions", Some(&by_name), &body).await;
    r.assert_error(403, "prefill_host_not_allowed");
    // A listed name, another port.
    let r = post_via(&sc, "/v1/completions", Some("prefill.example:8001"), &body).await;
    r.assert_error(403, "prefill_host_not_allowed");

    // Malformed: 400.
    for bad in [
        "127.0.0.1",
        "127.0.0.1:0",
        "127.0.0.1:65536",
        "[::1:80",
        "user@10.0.0.1:80",
        "0.0.0.0:80",
        "http://10.0.0.1:80",
    ] {
        let r = post_via(&sc, "/v1/completions", Some(bad), &body).await;
        r.assert_error(400, "invalid_prefill_host");
    }
    let twice = send(
        sc.addr,
        "POST",
        "/v1/completions",
        &[(HEADER, "10.0.0.1:80"), (HEADER, "10.0.0.2:80")],
        body.clone(),
    )
    .await
    .unwrap();
    twice.assert_error(400, "invalid_prefill_host");
    // An allowed host, but a body that is not JSON: 400 before any call.
    let r = post_via(&sc, "/v1/completions", Some("10.1.2.3:8000"), "{not json").await;
    r.assert_error(400, "invalid_json");
    // Too large: 413, header or not.
    let big = completion(&text(4, 5000), 2);
    let r = post_via(&sc, "/v1/completions", Some("10.1.2.3:8000"), &big).await;
    r.assert_error(413, "body_too_large");

    assert!(pre.requests().is_empty(), "the prefill host was called");
    assert!(eng.requests().is_empty(), "the engine was called");
    let m = sidecar_metrics(&sc).await;
    assert_eq!(outcome(&m, "forbidden"), 3.0, "{m}");
    assert_eq!(outcome(&m, "bad_request"), 10.0, "{m}");

    // On a path that is not split, the header is ignored (and not passed on).
    let r = send(
        sc.addr,
        "GET",
        "/v1/models",
        &[(HEADER, "192.0.2.1:80")],
        "",
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let seen = eng.requests();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].0.uri.path(), "/v1/models");
    assert!(seen[0].0.headers.get(HEADER).is_none());
    assert!(pre.requests().is_empty());
    sc.shutdown().await;

    // No allow list at all: every named host is refused.
    let closed = sidecar(e, &[], &[]).await;
    let r = post_via(&closed, "/v1/completions", Some(&p.to_string()), &body).await;
    r.assert_error(403, "prefill_host_not_allowed");
    assert!(pre.requests().is_empty());
    assert_eq!(eng.requests().len(), 1);
    closed.shutdown().await;
}

#[tokio::test]
async fn a_cidr_reaches_only_the_serving_ports() {
    let (pre, eng) = (Recorder::default(), Recorder::default());
    let p = pre.start(nixl_prefill_answer, Duration::ZERO).await;
    let e = eng.start(completion_answer, Duration::ZERO).await;
    let body = completion("hello", 2);

    // By default a CIDR allows the ports of this pod's layout only: the prefill server's own
    // port is neither the engine's nor the sidecar's, so it is never called (no port scan of
    // the network through the sidecar either: every other port answers the same 403).
    let sc = sidecar_with(e, &["127.0.0.0/8"], &[], |o| {
        o.allow = o.allow.clone().on_ports(CidrPorts::Serving)
    })
    .await;
    assert_eq!(
        sc.allow_list().ports(),
        &CidrPorts::Listed({
            let mut ports = vec![e.port(), sc.addr.port()];
            ports.sort_unstable();
            ports
        })
    );
    let r = post_via(&sc, "/v1/completions", Some(&p.to_string()), &body).await;
    r.assert_error(403, "prefill_host_not_allowed");
    let closed = dead_port();
    let r = post_via(&sc, "/v1/completions", Some(&closed.to_string()), &body).await;
    r.assert_error(403, "prefill_host_not_allowed");
    assert!(pre.requests().is_empty(), "the prefill host was called");
    assert!(eng.requests().is_empty(), "the engine was called");
    sc.shutdown().await;

    // Its port listed: the split runs there.
    let sc = sidecar_with(e, &["127.0.0.0/8"], &[], |o| {
        o.allow = o.allow.clone().on_ports(CidrPorts::Listed(vec![p.port()]))
    })
    .await;
    let r = post_via(&sc, "/v1/completions", Some(&p.to_string()), &body).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(pre.requests().len(), 1);
    assert_eq!(eng.requests().len(), 1);
    sc.shutdown().await;
}

#[tokio::test]
async fn an_exact_prefill_host_entry_is_allowed_and_the_list_can_be_replaced() {
    let sim = sim(&["--timing", "zero", "--replicas", "2", "--kv-blocks", "256"]).await;
    let [p, d] = [sim.addrs()[0], sim.addrs()[1]];
    let listed = format!("localhost:{}", p.port());
    let sc = sidecar(d, &[], &[&listed]).await;

    let r = post_via(
        &sc,
        "/v1/completions",
        Some(&listed.to_uppercase()),
        &completion(&text(5, 2000), 2),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(cached_tokens(&r.json()) >= 400, "{}", r.body);
    // Listed by name only: its address is not.
    let r = post_via(
        &sc,
        "/v1/completions",
        Some(&p.to_string()),
        &completion(&text(6, 2000), 2),
    )
    .await;
    r.assert_error(403, "prefill_host_not_allowed");

    // The seam for a cluster-fed list: replacing it takes effect for the next request.
    sc.set_allow_list(
        AllowList::new(vec!["127.0.0.1".parse().unwrap()], vec![]).on_ports(CidrPorts::Any),
    );
    let r = post_via(
        &sc,
        "/v1/completions",
        Some(&p.to_string()),
        &completion(&text(6, 2000), 2),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(cached_tokens(&r.json()) >= 400, "{}", r.body);
    let r = post_via(
        &sc,
        "/v1/completions",
        Some(&listed),
        &completion(&text(7, 2000), 2),
    )
    .await;
    r.assert_error(403, "prefill_host_not_allowed");
    let m = sidecar_metrics(&sc).await;
    assert_eq!(outcome(&m, "split"), 2.0, "{m}");
    assert_eq!(outcome(&m, "forbidden"), 2.0, "{m}");
    sc.shutdown().await;
}

#[tokio::test]
async fn a_failed_prefill_decodes_locally_or_fails_as_configured() {
    let sim = sim(&["--timing", "zero"]).await;
    let d = sim.addrs()[0];
    let dead = dead_port();

    // Refused connection, `decode`: the engine prefills the prompt itself.
    let sc = sidecar(d, &["127.0.0.0/8"], &[]).await;
    let r = post_via(
        &sc,
        "/v1/completions",
        Some(&dead.to_string()),
        &completion(&text(8, 2000), 2),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(cached_tokens(&r.json()), 0, "{}", r.body);
    let m = sidecar_metrics(&sc).await;
    assert_eq!(outcome(&m, "fallback_decode"), 1.0, "{m}");
    assert_eq!(
        metric(
            &m,
            "warmpath_sidecar_prefill_failures_total",
            &[("kind", "connect")]
        ),
        1.0
    );
    sc.shutdown().await;

    // `fail`: a 502 that says why.
    let sc = sidecar_with(d, &["127.0.0.0/8"], &[], |o| {
        o.on_prefill_failure = PrefillFailure::Fail
    })
    .await;
    let r = post_via(
        &sc,
        "/v1/completions",
        Some(&dead.to_string()),
        &completion(&text(9, 2000), 2),
    )
    .await;
    r.assert_error(502, "prefill_failed");
    // The same words for every cause: nothing of the target or its answer reaches the client.
    let message = r.json()["error"]["message"].as_str().unwrap().to_owned();
    assert_eq!(
        message,
        "The prefill leg failed; the sidecar's log says why."
    );
    let m = sidecar_metrics(&sc).await;
    assert_eq!(outcome(&m, "failed"), 1.0, "{m}");
    assert_eq!(outcome(&m, "fallback_decode"), 0.0, "{m}");
    sc.shutdown().await;

    // A prefill host that answers 503, or an answer without kv_transfer_params: the engine
    // gets the client's own body, byte for byte.
    for (answer, kind) in [
        (unavailable as fn(usize) -> (u16, String), "unavailable"),
        (no_params, "no_kv_transfer_params"),
    ] {
        let (pre, eng) = (Recorder::default(), Recorder::default());
        let p = pre.start(answer, Duration::ZERO).await;
        let e = eng.start(completion_answer, Duration::ZERO).await;
        let sc = sidecar(e, &["127.0.0.0/8"], &[]).await;
        let body = completion(&text(10, 500), 3);
        let r = post_via(&sc, "/v1/completions", Some(&p.to_string()), &body).await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(pre.requests().len(), 1);
        let seen = eng.requests();
        assert_eq!(seen.len(), 1);
        assert_eq!(utf8(&seen[0].1), body, "{kind}");
        let m = sidecar_metrics(&sc).await;
        assert_eq!(
            metric(
                &m,
                "warmpath_sidecar_prefill_failures_total",
                &[("kind", kind)]
            ),
            1.0,
            "{m}"
        );
        assert_eq!(outcome(&m, "fallback_decode"), 1.0, "{m}");
        sc.shutdown().await;
    }
}

#[tokio::test]
async fn a_client_that_leaves_during_the_prefill_cancels_the_decode() {
    let (pre, eng) = (Recorder::default(), Recorder::default());
    let p = pre
        .start(nixl_prefill_answer, Duration::from_millis(1000))
        .await;
    let e = eng.start(completion_answer, Duration::ZERO).await;
    let sc = sidecar(e, &["127.0.0.0/8"], &[]).await;
    let addr = sc.addr;
    let header = p.to_string();
    let client = tokio::spawn(async move {
        send(
            addr,
            "POST",
            "/v1/completions",
            &[(HEADER, &header)],
            completion(&text(11, 1500), 4),
        )
        .await
    });
    // The client leaves once the prefill host has the request and before it answers.
    for _ in 0..500 {
        if !pre.requests().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(pre.requests().len(), 1, "the prefill leg was sent");
    let asked = std::time::Instant::now();
    client.abort();
    assert!(client.await.unwrap_err().is_cancelled());
    // A non-event: past the prefill's answer (1 s after it was asked), a decode that was not
    // cancelled would have been sent.
    tokio::time::sleep_until((asked + Duration::from_millis(1500)).into()).await;
    assert!(eng.requests().is_empty(), "no decode after the client left");
    let m = sidecar_metrics(&sc).await;
    assert_eq!(
        metric(&m, "warmpath_sidecar_requests_total", &[]),
        0.0,
        "{m}"
    );
    sc.shutdown().await;
}

#[tokio::test]
async fn the_legs_carry_exactly_the_protocols_bodies_and_request_ids() {
    let (pre, eng) = (Recorder::default(), Recorder::default());
    let p = pre.start(nixl_prefill_answer, Duration::ZERO).await;
    let e = eng.start(completion_answer, Duration::ZERO).await;
    let sc = sidecar(e, &["127.0.0.0/8"], &[]).await;
    let bodies = [
        (
            "/v1/completions",
            json!({"model": "tiny", "prompt": text(12, 1500), "stream": true,
                "stream_options": {"include_usage": true}, "max_tokens": 20, "temperature": 0.2}),
        ),
        (
            "/v1/chat/completions",
            json!({"model": "tiny", "messages": [{"role": "user", "content": "hi"}],
                "max_completion_tokens": 9, "stream": false}),
        ),
    ];
    for (i, (path, body)) in bodies.iter().enumerate() {
        let client_body = body.to_string();
        let r = send(
            sc.addr,
            "POST",
            path,
            &[
                (HEADER, &p.to_string()),
                ("x-request-id", "client-req-1"),
                ("x-tenant", "t1"),
                ("cookie", "session=s1"),
                ("authorization", "Bearer k1"),
                (
                    "traceparent",
                    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                ),
            ],
            client_body.clone(),
        )
        .await
        .unwrap();
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.body, completion_answer(0).1);
        let original = object(&client_body);

        let sent = pre.requests();
        assert_eq!(sent.len(), i + 1);
        let (head, body) = &sent[i];
        assert_eq!(head.uri.path(), *path);
        assert_eq!(utf8(body), utf8(&nixl::prefill_body(&original)));
        let id = head.headers["x-request-id"].to_str().unwrap();
        assert_ne!(
            id, "client-req-1",
            "the prefill leg has a request id of its own"
        );
        assert_eq!(id.len(), 32, "{id}");
        assert_eq!(head.headers["content-type"], "application/json");
        assert_eq!(head.headers["host"], p.to_string().as_str());
        // The host the client named gets its credentials and trace context, nothing else.
        assert_eq!(head.headers["authorization"], "Bearer k1");
        assert!(head.headers["traceparent"]
            .to_str()
            .unwrap()
            .starts_with("00-0af76519"));
        for kept_here in ["x-tenant", "cookie", HEADER] {
            assert!(
                head.headers.get(kept_here).is_none(),
                "{kept_here} reached the prefill host"
            );
        }

        let sent = eng.requests();
        assert_eq!(sent.len(), i + 1);
        let (head, body) = &sent[i];
        assert_eq!(head.uri.path(), *path);
        let params = nixl::kv_params(nixl_prefill_answer(0).1.as_bytes()).unwrap();
        assert_eq!(utf8(body), utf8(&nixl::decode_body(&original, params)));
        assert_eq!(head.headers["x-request-id"], "client-req-1");
        assert_eq!(head.headers["content-type"], "application/json");
        assert_eq!(head.headers["host"], e.to_string().as_str());
        // The pod's own engine gets the client's request as it came.
        assert_eq!(head.headers["x-tenant"], "t1");
        assert_eq!(head.headers["cookie"], "session=s1");
        assert!(head.headers.get(HEADER).is_none());
    }
    sc.shutdown().await;
}

#[tokio::test]
async fn only_the_engines_inference_health_and_metrics_paths_pass() {
    let eng = Recorder::with_health_path();
    let e = eng.start(completion_answer, Duration::ZERO).await;
    let sc = sidecar_with(e, &["127.0.0.0/8"], &[], |o| {
        o.engine_paths = vec!["/v1/audio-extra".to_owned()]
    })
    .await;
    let mut passed = 0;
    for (method, path) in [
        ("GET", "/v1/models"),
        ("GET", "/v1/models/tiny"),
        ("GET", "/health"),
        ("GET", "/metrics"),
        ("POST", "/tokenize"),
        ("POST", "/v1/embeddings"),
        ("POST", "/v1/audio-extra/x"),
    ] {
        let r = send(sc.addr, method, path, &[], String::new())
            .await
            .unwrap();
        assert_eq!(r.status, 200, "{path}: {}", r.body);
        passed += 1;
        assert_eq!(eng.requests().last().unwrap().0.uri.path(), path);
    }
    for (method, path) in [
        ("POST", "/reset_prefix_cache"),
        ("POST", "/sleep"),
        ("POST", "/v1/load_lora_adapter"),
        ("POST", "/collective_rpc"),
        ("POST", "/start_profile"),
        ("GET", "/"),
        ("GET", "/v1/modelsx"),
        ("GET", "/healthz/../reset_prefix_cache"),
        ("GET", "/health/../reset_prefix_cache"),
        ("GET", "/v1/models/%2e%2e/%2e%2e/sleep"),
        ("GET", "/metrics//x"),
        ("POST", "/v1/completionsevil"),
    ] {
        let r = send(
            sc.addr,
            method,
            path,
            &[(HEADER, "127.0.0.1:9")],
            "{}".to_owned(),
        )
        .await
        .unwrap();
        r.assert_error(404, "path_not_served");
    }
    assert_eq!(
        eng.requests().len(),
        passed,
        "a refused path reached the engine"
    );
    let m = sidecar_metrics(&sc).await;
    assert_eq!(outcome(&m, "not_served"), 12.0, "{m}");
    sc.shutdown().await;
}

#[tokio::test]
async fn the_admin_listener_reports_the_engine_and_the_series() {
    let sim = sim(&["--timing", "zero"]).await;
    let sc = sidecar(sim.addrs()[0], &[], &[]).await;
    assert_eq!(get(sc.admin_addr, "/healthz").await.unwrap().status, 200);
    let ready = get(sc.admin_addr, "/readyz").await.unwrap();
    assert_eq!(ready.status, 200, "{}", ready.body);
    let m = sidecar_metrics(&sc).await;
    assert!(
        m.contains("# TYPE warmpath_sidecar_requests counter"),
        "{m}"
    );
    assert!(
        m.contains("warmpath_sidecar_prefill_duration_seconds"),
        "{m}"
    );
    let post = send(sc.admin_addr, "POST", "/metrics", &[], "")
        .await
        .unwrap();
    post.assert_error(405, "method_not_allowed");
    sc.shutdown().await;

    // An engine that is not there: alive, not ready.
    let sc = sidecar(dead_port(), &[], &[]).await;
    assert_eq!(get(sc.admin_addr, "/healthz").await.unwrap().status, 200);
    let ready = get(sc.admin_addr, "/readyz").await.unwrap();
    assert_eq!(ready.status, 503, "{}", ready.body);
    // And a request to it is a 502 of the sidecar's own.
    let r = post_via(&sc, "/v1/completions", None, &completion("hi", 1)).await;
    r.assert_error(502, "upstream_connect_error");
    let m = sidecar_metrics(&sc).await;
    assert_eq!(outcome(&m, "failed"), 1.0, "{m}");
    sc.shutdown().await;
}

#[tokio::test]
async fn behind_warmpaths_router_with_the_sidecar_connector() {
    let sim = sim(&["--timing", "zero", "--replicas", "2", "--kv-blocks", "256"]).await;
    let [p, d] = [sim.addrs()[0], sim.addrs()[1]];
    let sc = sidecar(d, &["127.0.0.0/8"], &[]).await;
    // The decode pod is reached through its sidecar, which proxies the engine's /metrics for
    // the router's scrapes too.
    let yaml = format!(
        "listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\npools:\n\
         \x20 - name: pre\n    role: prefill\n    models: [tiny]\n    replicas:\n\
         \x20     - {{ name: p0, url: \"http://{p}\" }}\n\
         \x20 - name: dec\n    role: decode\n    models: [tiny]\n    replicas:\n\
         \x20     - {{ name: d0, url: \"http://{}\" }}\n\
         pd:\n  threshold_tokens: 64\n  connector: sidecar\n",
        sc.addr
    );
    let rt = router(&yaml).await;
    wait_ready(rt.admin_addr).await;
    let r = post(rt.addr, "/v1/completions", &completion(&text(13, 2000), 4)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("x-warmpath-prefill-replica"), Some("p0"));
    assert!(cached_tokens(&r.json()) >= 400, "{}", r.body);
    let m = sidecar_metrics(&sc).await;
    assert_eq!(outcome(&m, "split"), 1.0, "{m}");
    rt.shutdown().await;
    sc.shutdown().await;
}
