//! The proxy over loopback with simulator replicas: pass-through, streaming without buffering,
//! request ids, h2c, /v1/models, cancellation on client disconnect, live reload.

mod common;

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Full};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_pass_through_with_headers() {
    let s = Setup::new(&["--replicas", "2"], "").await;
    let addr = s.router.addr;
    let r = post(addr, "/v1/completions", &completion("hello there", 3)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let j = r.json();
    assert_eq!(j["object"], "text_completion");
    assert_eq!(j["usage"]["completion_tokens"], 3);
    assert!(["r0", "r1"].contains(&r.replica().as_str()));
    let generated = r.header("x-request-id").expect("request id").to_owned();
    assert!(generated.starts_with("wp-"));

    // A client's request id is kept and forwarded.
    let r = send(
        addr,
        "POST",
        "/v1/completions",
        &[("x-request-id", "abc-123")],
        completion("x", 1),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-request-id"), Some("abc-123"));

    // Models: the union of the pools'.
    let m = get(addr, "/v1/models").await.unwrap();
    assert_eq!(m.status, 200);
    assert_eq!(m.json()["data"][0]["id"], "tiny");

    // `/health` on the API port, as vLLM serves it, for tools that probe it first.
    let h = get(addr, "/health").await.unwrap();
    assert_eq!(h.status, 200, "{}", h.body);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_header_can_be_turned_off() {
    let s = Setup::new(&[], "response_headers:\n  replica: false\n").await;
    let r = post(s.router.addr, "/v1/completions", &completion("hi", 1)).await;
    assert_eq!(r.status, 200);
    assert!(r.header("x-warmpath-replica").is_none());
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_chunks_are_not_buffered() {
    // Chunks 150 ms apart: the first must reach the client long before the last is sent.
    let s = Setup::new(&["--fault", "slow-stream", "--slow-stream-ms", "150"], "").await;
    let body = serde_json::json!({
        "model": "tiny", "stream": true, "max_tokens": 5,
        "messages": [{"role": "user", "content": "count to five"}]
    })
    .to_string();
    let req = http::Request::post(format!("http://{}/v1/chat/completions", s.router.addr))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let start = Instant::now();
    let resp = client().request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let mut body = resp.into_body();
    let mut first_at = None;
    let mut text = String::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.unwrap();
        if let Some(data) = frame.data_ref() {
            first_at.get_or_insert_with(|| start.elapsed());
            text.push_str(std::str::from_utf8(data).unwrap());
        }
    }
    let total = start.elapsed();
    let first = first_at.expect("some data");
    assert!(text.contains("data: [DONE]"), "{text}");
    assert!(text.matches("data: ").count() >= 5, "{text}");
    assert!(
        total >= Duration::from_millis(500) && first + Duration::from_millis(400) < total,
        "first chunk at {first:?}, end at {total:?}: the stream was buffered"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_prior_knowledge_works() {
    let s = Setup::new(&[], "").await;
    let h2 = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build_http::<Full<Bytes>>();
    let req = http::Request::post(format!("http://{}/v1/completions", s.router.addr))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(completion("over h2", 2))))
        .unwrap();
    let resp = h2.request(req).await.unwrap();
    assert_eq!(resp.version(), http::Version::HTTP_2);
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-warmpath-replica"], "r0");
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    let j: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(j["usage"]["completion_tokens"], 2);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_disconnect_cancels_upstream() {
    let s = Setup::new(&["--fault", "slow-stream", "--slow-stream-ms", "100"], "").await;
    let body = serde_json::json!({
        "model": "tiny", "stream": true, "max_tokens": 200, "prompt": "a long story"
    })
    .to_string();
    let req = http::Request::post(format!("http://{}/v1/completions", s.router.addr))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let resp = client().request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let _first = body.frame().await.expect("a chunk").unwrap();
    let replica = s.sim.addrs()[0];
    let running = |t: &str| metric(t, "vllm:num_requests_running", &[]);
    let t = get(replica, "/metrics").await.unwrap().body;
    assert_eq!(running(&t), 1.0, "{t}");
    drop(body); // the client goes away mid-stream

    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let t = get(replica, "/metrics").await.unwrap().body;
        if running(&t) == 0.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "engine still generating after the client left"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let m = router_metrics(s.router.admin_addr).await;
    assert_eq!(
        metric(&m, "warmpath_client_disconnects_total", &[]),
        1.0,
        "{m}"
    );
    assert_eq!(
        metric(&m, "warmpath_inflight_requests", &[("replica", "r0")]),
        0.0,
        "{m}"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_applies_good_files_and_keeps_running_on_bad_ones() {
    let sim = sim(&["--replicas", "2"]).await;
    let addrs = sim.addrs();
    let dir = std::env::temp_dir().join(format!("warmpath-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("router.yaml");
    std::fs::write(&path, config_yaml("tiny", &addrs[..1], "")).unwrap();
    let config = warmpath_router::config::Config::load(&path).unwrap();
    let router = warmpath_router::start(
        config,
        warmpath_router::Options {
            watch: Some(path.clone()),
            reload_interval: Duration::from_millis(50),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    wait_ready(router.admin_addr).await;
    let addr = router.addr;

    // Add a second pool serving another model, on the second replica.
    let mut yaml = config_yaml("tiny", &addrs[..1], "");
    yaml.push_str(&format!(
        "  - name: q\n    models: [other]\n    replicas:\n      - {{ name: s0, url: \"http://{}\" }}\n",
        addrs[1]
    ));
    std::fs::write(&path, &yaml).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let m = get(addr, "/v1/models").await.unwrap().json();
        let ids: Vec<_> = m["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["id"].clone())
            .collect();
        if ids.len() == 2 {
            break;
        }
        assert!(Instant::now() < deadline, "reload not applied: {m}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Requests during and after the reload keep working; the new model routes to its pool.
    let body = serde_json::json!({"model": "other", "prompt": "hi", "max_tokens": 1}).to_string();
    let r = post(addr, "/v1/completions", &body).await;
    assert_eq!(
        r.status, 404,
        "the sim serves `tiny` only, and says so: {}",
        r.body
    );
    assert_eq!(r.replica(), "s0");

    // A broken file is refused; the running configuration stays.
    std::fs::write(&path, yaml.replace("models: [other]", "modles: [other]")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let m = router_metrics(router.admin_addr).await;
        if metric(&m, "warmpath_config_reloads_total", &[("result", "error")]) >= 1.0 {
            break;
        }
        assert!(Instant::now() < deadline, "bad reload not counted: {m}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let r = post(addr, "/v1/completions", &completion("still serving", 1)).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.replica(), "r0");
    let m = get(addr, "/v1/models").await.unwrap().json();
    assert_eq!(m["data"].as_array().unwrap().len(), 2);

    // The second pool removed: every series of its replica goes with it (requests by status,
    // latencies, in flight, readiness), so that rollouts do not pile up series.
    assert!(router_metrics(router.admin_addr)
        .await
        .contains("replica=\"s0\""));
    std::fs::write(&path, config_yaml("tiny", &addrs[..1], "")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while get(addr, "/v1/models").await.unwrap().json()["data"]
        .as_array()
        .unwrap()
        .len()
        != 1
    {
        assert!(Instant::now() < deadline, "removal not applied");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let m = router_metrics(router.admin_addr).await;
    assert!(!m.contains("replica=\"s0\""), "{m}");
    assert!(m.contains("replica=\"r0\""), "{m}");

    router.shutdown().await;
    drop(sim);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_endpoints() {
    let s = Setup::new(&["--replicas", "2"], "").await;
    let admin = s.router.admin_addr;
    assert_eq!(get(admin, "/healthz").await.unwrap().status, 200);
    let ready = get(admin, "/readyz").await.unwrap();
    assert_eq!(ready.status, 200);
    assert!(ready.body.contains("tiny: 2/2"), "{}", ready.body);
    for i in 0..4 {
        let r = post(
            s.router.addr,
            "/v1/completions",
            &completion(&text(i, 2000), 1),
        )
        .await;
        assert_eq!(r.status, 200);
    }
    let _ = post(s.router.addr, "/v1/completions", "{bad").await;
    let m = router_metrics(admin).await;
    assert_eq!(
        metric(
            &m,
            "warmpath_requests_total",
            &[("model", "tiny"), ("pool", "p"), ("status", "200")]
        ),
        4.0,
        "{m}"
    );
    assert_eq!(
        metric(&m, "warmpath_requests_total", &[("status", "400")]),
        1.0
    );
    assert_eq!(
        metric(&m, "warmpath_decision_duration_seconds_count", &[]),
        4.0
    );
    assert!(metric(&m, "warmpath_prefix_index_bytes", &[]) > 0.0, "{m}");
    assert!(metric(&m, "warmpath_prefix_index_capacity_bytes", &[]) > 0.0);
    assert!(metric(&m, "warmpath_prefix_blocks_queried_total", &[]) > 0.0);
    assert_eq!(
        metric(&m, "warmpath_replica_ready", &[("replica", "r1")]),
        1.0
    );
    assert!(metric(&m, "warmpath_engine_scrapes_total", &[("result", "ok")]) > 0.0);
    assert_eq!(get(admin, "/nope").await.unwrap().status, 404);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_stream_is_cut_after_idle_timeout() {
    let s = Setup::new(
        &["--fault", "slow-stream", "--slow-stream-ms", "1000"],
        "timeouts:\n  idle_ms: 200\n",
    )
    .await;
    let body = serde_json::json!({"model": "tiny", "stream": true, "max_tokens": 5, "prompt": "x"})
        .to_string();
    let req = http::Request::post(format!("http://{}/v1/completions", s.router.addr))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let start = Instant::now();
    let resp = client().request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let body = tokio::time::timeout(Duration::from_secs(5), resp.into_body().collect())
        .await
        .expect("the stream should be cut, not hang")
        .expect("a cut event stream still ends cleanly")
        .to_bytes();
    // It must not look complete: its last event says why it ended.
    let text = String::from_utf8_lossy(&body);
    assert!(text.contains("\"code\":\"stream_broken\""), "{text}");
    assert!(text.contains("sent nothing for"), "{text}");
    assert!(
        start.elapsed() < Duration::from_millis(900),
        "{:?}",
        start.elapsed()
    );
    let m = router_metrics(s.router.admin_addr).await;
    assert_eq!(
        metric(&m, "warmpath_upstream_errors_total", &[("kind", "idle")]),
        1.0,
        "{m}"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decision_header_explains_the_choice() {
    let s = Setup::new(&[], "response_headers:\n  decision: true\n").await;
    let r = post(
        s.router.addr,
        "/v1/completions",
        &completion(&text(1, 2048), 1),
    )
    .await;
    let d = r
        .header("x-warmpath-decision")
        .expect("decision header")
        .to_owned();
    assert!(
        d.contains("reason=") && d.contains("matched_blocks=0"),
        "{d}"
    );
    let r = post(
        s.router.addr,
        "/v1/completions",
        &completion(&text(1, 2048), 1),
    )
    .await;
    let d = r.header("x-warmpath-decision").unwrap();
    assert!(d.contains("matched_blocks=8"), "{d}");
    s.stop().await;
}

/// A TCP relay in front of a replica that counts the connections the router opens to it.
async fn counting_relay(target: std::net::SocketAddr) -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let c = count.clone();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            c.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    (addr, count)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_connections_are_reused_but_not_after_a_cancel() {
    let sim = sim(&["--fault", "slow-stream", "--slow-stream-ms", "50"]).await;
    let (relay, opened) = counting_relay(sim.addrs()[0]).await;
    // No scrapes and no active checks: the relay counts the data path's connections alone.
    let yaml = config_yaml("tiny", &[relay], "health:\n  active_path: null\n")
        .replace("    replicas:", "    metrics_path: null\n    replicas:");
    let router = router(&yaml).await;
    for i in 0..10 {
        let r = post(
            router.addr,
            "/v1/completions",
            &completion(&format!("reuse {i}"), 2),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    assert_eq!(
        opened.load(Ordering::SeqCst),
        1,
        "sequential requests should share one connection"
    );

    // A stream the client abandons takes its connection with it (that is the engine's cancel
    // signal); the next request opens a new one.
    let body =
        serde_json::json!({"model": "tiny", "stream": true, "max_tokens": 100, "prompt": "x"})
            .to_string();
    let req = http::Request::post(format!("http://{}/v1/completions", router.addr))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let resp = client().request(req).await.unwrap();
    let mut b = resp.into_body();
    let _ = b.frame().await;
    drop(b);
    // The router has seen its client go (and dropped the upstream body with its connection).
    until_metric(
        router.admin_addr,
        "warmpath_client_disconnects_total",
        &[],
        |v| v >= 1.0,
    )
    .await;
    let r = post(
        router.addr,
        "/v1/completions",
        &completion("after cancel", 1),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(opened.load(Ordering::SeqCst), 2);
    router.shutdown().await;
    drop(sim);
}

/// `metrics_port` sends scrapes to another port of the replica's host: a pool whose metrics
/// port answers stays ready, one whose metrics port is closed goes unready after a few misses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_port_is_scraped_instead_of_the_serving_port() {
    let sim = sim(&["--replicas", "2"]).await;
    let addrs = sim.addrs();
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port(); // bound and dropped: nothing listens there
    let yaml = format!(
        "listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\npools:\n\
         - name: good\n  models: [tiny]\n  metrics_port: {}\n  replicas: [{{ name: g, url: \"http://{}\" }}]\n\
         - name: bad\n  models: [other]\n  metrics_port: {closed}\n  replicas: [{{ name: b, url: \"http://{}\" }}]\n",
        addrs[1].port(),
        addrs[0],
        addrs[0],
    );
    let r = router(&yaml).await;
    let mut last = String::new();
    for _ in 0..200 {
        last = get(r.admin_addr, "/readyz").await.unwrap().body;
        if last.contains("other: 0/1") && last.contains("tiny: 1/1") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(last.contains("tiny: 1/1 replicas ready"), "{last}");
    assert!(last.contains("other: 0/1 replicas ready"), "{last}");
    let reply = post(r.addr, "/v1/completions", &completion("hi", 1)).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    r.shutdown().await;
}

/// The approximate index's bound holds for all replicas together too: with
/// `index.max_bytes_total`, each replica gets its share, however many there are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_prefix_index_is_bounded_in_total() {
    // 16 KiB for four replicas (4 KiB each, the least a replica's share may be): a few dozen
    // blocks each, far less than 16 prompts of 8 KB.
    let s = Setup::new(&["--replicas", "4"], "index:\n  max_bytes_total: 16384\n").await;
    wait_ready(s.router.admin_addr).await;
    for i in 0..16 {
        let r = post(
            s.router.addr,
            "/v1/completions",
            &completion(&text(i, 8000), 1),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let m = router_metrics(s.router.admin_addr).await;
    let capacity = metric(&m, "warmpath_prefix_index_capacity_bytes", &[]);
    assert!(capacity > 0.0 && capacity <= 16384.0, "{m}");
    let bytes = metric(&m, "warmpath_prefix_index_bytes", &[]);
    assert!(
        bytes > 0.0 && bytes <= 16384.0,
        "the index holds prompts, within its bound: {m}"
    );
    assert!(
        metric(&m, "warmpath_prefix_index_evictions", &[]) > 0.0,
        "the bound made room: {m}"
    );
    s.stop().await;
}

/// With `admin_token_file`, the admin listener's `/metrics` asks for the token; the probes'
/// `/healthz` and `/readyz` stay open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_metrics_can_require_a_bearer_token() {
    let extra = format!(
        "admin_token_file: {}\n",
        token_file("admin-token", "s3cret-admin-token-0123")
    );
    let s = Setup::new(&["--timing", "zero"], &extra).await;
    let admin = s.router.admin_addr;
    wait_ready(admin).await;
    let metrics = |auth: Option<&'static str>| async move {
        let headers: Vec<(&str, &str)> = auth.map(|a| ("authorization", a)).into_iter().collect();
        send(admin, "GET", "/metrics", &headers, Bytes::new())
            .await
            .unwrap()
    };
    let r = metrics(None).await;
    assert_eq!(r.status, 401, "{}", r.body);
    assert_eq!(r.header("www-authenticate"), Some("Bearer"));
    assert!(!r.body.contains("warmpath_"), "{}", r.body);
    assert_eq!(
        metrics(Some("Bearer wrong-token-0123456789")).await.status,
        401
    );
    let r = metrics(Some("Bearer s3cret-admin-token-0123")).await;
    assert_eq!(r.status, 200);
    assert!(r.body.contains("warmpath_requests"), "{}", r.body);
    // The status APIs say how loaded each replica is: the token guards them too. The page
    // itself holds no data (it asks for the token, then calls the APIs with it).
    for path in ["/api/status", "/api/decisions"] {
        let r = get(admin, path).await.unwrap();
        assert_eq!(r.status, 401, "{path}: {}", r.body);
        let auth = [("authorization", "Bearer s3cret-admin-token-0123")];
        let r = send(admin, "GET", path, &auth, Bytes::new()).await.unwrap();
        assert_eq!(r.status, 200, "{path}: {}", r.body);
    }
    let page = get(admin, "/").await.unwrap();
    assert_eq!(page.status, 200);
    assert!(!page.body.contains("r0"), "the page embeds no replica data");
    assert_eq!(get(admin, "/readyz").await.unwrap().status, 200);
    assert_eq!(get(admin, "/healthz").await.unwrap().status, 200);
    s.stop().await;
}

/// Scrapes cost the engine (vLLM renders its page in Python): a replica whose metrics take
/// 20 ms to answer is read no more often than `scrape.engine_share` (2%) of its time allows,
/// up to `max_interval_ms`, while a fast one is read every `interval_ms`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_metrics_page_is_read_less_often() {
    let slow = warmpath_testkit::Recorder::default()
        .start(
            warmpath_testkit::completion_answer,
            Duration::from_millis(20),
        )
        .await;
    let fast = warmpath_testkit::Recorder::default()
        .start(warmpath_testkit::completion_answer, Duration::ZERO)
        .await;
    let rt = router(&config_yaml(
        "tiny",
        &[slow, fast],
        "scrape:\n  max_interval_ms: 400\n",
    ))
    .await;
    let pause = |m: &str, replica: &str| {
        metric(
            m,
            "warmpath_replica_scrape_interval_seconds",
            &[("replica", replica)],
        )
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let m = loop {
        let m = router_metrics(rt.admin_addr).await;
        // The fast page's pause comes down to about the interval as its scrapes are timed
        // (the first includes opening the connection, slow on a busy machine).
        if has_metric(&m, "warmpath_replica_scrape_interval_seconds")
            && pause(&m, "r0") >= 0.4
            && pause(&m, "r1") > 0.0
            && pause(&m, "r1") < 0.2
        {
            break m;
        }
        assert!(
            Instant::now() < deadline,
            "no stretched pause for r0, or none near the interval for r1: {m}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(pause(&m, "r0"), 0.4, "20 ms a page at 2%: 1 s, capped: {m}");
    rt.shutdown().await;
}
