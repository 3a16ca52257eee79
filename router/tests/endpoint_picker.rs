//! Endpoint-picker mode against simulator replicas, through a Gateway played by an ext_proc
//! client built from Envoy's own protos (`envoy-types`): per request it sends what Envoy sends
//! (request headers with `:method` and `:path`, the body in chunks, then the upstream's
//! response), forwards the request to the endpoint the picker named, as Envoy would, and checks
//! that the picker's choices are the proxy's for the same requests.

mod common;

use common::*;
use std::net::SocketAddr;
use std::time::Duration;
use warmpath_router::RouterHandle;
use warmpath_testkit::ext_proc::*;

async fn client(router: &RouterHandle) -> Client {
    connect(
        router
            .endpoint_picker_addr
            .expect("the endpoint picker listens"),
    )
    .await
}

const PICKER: &str = "endpoint_picker:\n  listen: 127.0.0.1:0\n";

/// The configuration of `tiny` on `addrs`, its load read from the router's own counters only
/// (no engine scrapes), so that two routers given the same requests in the same order make
/// the same choices whatever the engines' timing.
fn unscraped(addrs: &[SocketAddr], extra: &str) -> String {
    config_yaml("tiny", addrs, extra)
        .replace("    replicas:", "    metrics_path: null\n    replicas:")
}

/// Wait until no request counts in flight on `router` (a request is released when its
/// response has ended, which the client may see a moment before the router does).
async fn settled(router: &RouterHandle) {
    let idle = router.wait_idle("tiny", Duration::from_secs(5)).await;
    assert!(idle, "requests still counted in flight");
}

fn name_of(addrs: &[SocketAddr], endpoint: &str) -> String {
    let i = addrs
        .iter()
        .position(|a| a.to_string() == endpoint)
        .unwrap_or_else(|| panic!("{endpoint} is no replica"));
    format!("r{i}")
}

/// 8 long shared prefixes (half as completions' prompts, half as chats' system messages), each
/// asked 3 times with different endings: the first of each goes to its prefix's home (the
/// rendezvous hash of its first block over the replicas' names), the rest follow it (prefix
/// affinity at no load).
fn workload() -> Vec<(&'static str, String)> {
    let bases: Vec<String> = (0..8).map(|i| text(500 + i, 3000)).collect();
    let mut out = Vec::new();
    for round in 0..3 {
        for (i, base) in bases.iter().enumerate() {
            let ending = format!(" round {round}, question {i}: why?");
            let request = if i % 2 == 0 {
                (
                    "/v1/completions",
                    serde_json::json!({"model": "tiny", "max_tokens": 2, "prompt": format!("{base}{ending}")}),
                )
            } else {
                (
                    "/v1/chat/completions",
                    serde_json::json!({"model": "tiny", "max_tokens": 2, "messages": [
                        {"role": "system", "content": base},
                        {"role": "user", "content": ending}]}),
                )
            };
            out.push((request.0, request.1.to_string()));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_picker_chooses_as_the_proxy_does() {
    let mut sim = sim(&["--replicas", "4"]).await;
    let addrs = sim.addrs();
    // Two routers, one configuration: one picks for the Gateway, the other proxies.
    let picker = router(&unscraped(&addrs, PICKER)).await;
    let proxy = router(&unscraped(&addrs, PICKER)).await;
    wait_ready(picker.admin_addr).await;
    wait_ready(proxy.admin_addr).await;
    let mut gateway = client(&picker).await;

    let mut picked = Vec::new();
    let mut proxied = Vec::new();
    for (path, body) in workload() {
        let told = through(&mut gateway, &Call::post(path, body.clone()))
            .await
            .expect("picked");
        let endpoint = told.destination.clone().expect("a destination");
        assert_eq!(
            told.metadata.as_ref(),
            Some(&endpoint),
            "header and metadata agree"
        );
        assert!(told.clear_route_cache);
        assert_eq!(
            told.body,
            body.as_bytes(),
            "the body goes on as the client sent it"
        );
        assert_eq!(told.upstream_status, Some(200));
        let name = name_of(&addrs, &endpoint);
        assert_eq!(
            told.response_headers.get("x-warmpath-replica"),
            Some(&name),
            "the response names the replica, as the proxy's does"
        );
        let answer: serde_json::Value = serde_json::from_slice(&told.response_body).unwrap();
        assert!(
            answer["choices"].is_array(),
            "the answer passed back whole: {answer}"
        );
        picked.push(name);
        settled(&picker).await;

        let reply = post(proxy.addr, path, &body).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        proxied.push(reply.replica());
        settled(&proxy).await;
    }
    assert_eq!(picked, proxied, "the picker's choices are the proxy's");
    // Each prefix stays where it went first; different prefixes spread.
    for i in 0..8 {
        let homes: Vec<&String> = picked.iter().skip(i).step_by(8).collect();
        assert!(
            homes.iter().all(|h| *h == homes[0]),
            "prefix {i}: {homes:?}"
        );
    }
    let distinct: std::collections::HashSet<&String> = picked.iter().collect();
    assert!(distinct.len() >= 2, "8 prefixes on one replica: {picked:?}");

    // What the picker routed is counted as the proxy counts it.
    let m = router_metrics(picker.admin_addr).await;
    let ok = metric(
        &m,
        "warmpath_requests_total",
        &[("model", "tiny"), ("status", "200")],
    );
    assert_eq!(ok, 24.0, "{m}");
    assert!(metric(&m, "warmpath_prefix_hit_ratio", &[]) > 0.5, "{m}");

    picker.shutdown().await;
    proxy.shutdown().await;
    sim.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buffered_bodies_subsets_and_other_paths() {
    let s = Setup::new(&["--replicas", "3"], PICKER).await;
    let addrs = s.sim.addrs();
    let mut gateway = client(&s.router).await;
    let prompt = completion(&text(9, 2000), 2);

    // BUFFERED: the destination rides on the body's answer.
    let mut call = Call::post("/v1/completions", prompt.clone());
    call.mode = BodySendMode::Buffered;
    let told = through_buffered(&mut gateway, &call).await.unwrap();
    let home = told.destination.clone().expect("a destination");
    assert_eq!(told.metadata.as_ref(), Some(&home));
    assert_eq!(told.upstream_status, Some(200));
    settled(&s.router).await;
    // The same prompt in full duplex: the same replica (its prefix is there now).
    let told = through(&mut gateway, &Call::post("/v1/completions", prompt.clone()))
        .await
        .unwrap();
    assert_eq!(told.destination.as_ref(), Some(&home));
    settled(&s.router).await;

    // The Gateway's subset: only its endpoints are candidates, warm or not.
    let other = addrs
        .iter()
        .map(|a| a.to_string())
        .find(|a| *a != home)
        .unwrap();
    let mut call = Call::post("/v1/completions", prompt.clone());
    call.subset = Some(vec![other.clone()]);
    let told = through(&mut gateway, &call).await.unwrap();
    assert_eq!(told.destination.as_ref(), Some(&other));
    settled(&s.router).await;

    // A streamed answer passes through chunk by chunk.
    let streaming = serde_json::json!({"model": "tiny", "max_tokens": 4, "stream": true,
        "prompt": text(9, 2000)})
    .to_string();
    let told = through(&mut gateway, &Call::post("/v1/completions", streaming))
        .await
        .unwrap();
    let warm = told.destination.expect("a destination");
    assert!(
        warm == home || warm == other,
        "{warm}: both hold the prompt now"
    );
    let sse = String::from_utf8(told.response_body).unwrap();
    assert!(sse.ends_with("data: [DONE]\n\n"), "{sse}");
    settled(&s.router).await;

    // Not an inference request: a ready replica, in turn, and no body to hold.
    let mut seen = std::collections::HashSet::new();
    for _ in 0..3 {
        let call = Call {
            method: "GET",
            path: "/v1/models",
            body: Vec::new(),
            chunks: 1,
            subset: None,
            mode: BodySendMode::FullDuplexStreamed,
            headers: Vec::new(),
        };
        let told = through(&mut gateway, &call).await.unwrap();
        let d = told.destination.expect("an endpoint for /v1/models");
        name_of(&addrs, &d);
        assert_eq!(told.upstream_status, Some(200));
        seen.insert(d);
    }
    assert_eq!(seen.len(), 3, "{seen:?}");
    s.stop().await;
}

fn unknown_model() -> String {
    serde_json::json!({"model": "nope", "prompt": "hi"}).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_fail_closed_or_open() {
    let mut sim = sim(&["--replicas", "2"]).await;
    let addrs = sim.addrs();
    let limits = "limits:\n  max_body_bytes: 4096\n";
    let closed = router(&config_yaml("tiny", &addrs, &format!("{PICKER}{limits}"))).await;
    let open = router(&config_yaml(
        "tiny",
        &addrs,
        &format!("{PICKER}  failure_mode: open\n{limits}"),
    ))
    .await;
    wait_ready(closed.admin_addr).await;
    wait_ready(open.admin_addr).await;
    let mut gateway = client(&closed).await;

    let unknown = unknown_model();
    let too_large = completion(&text(3, 5000), 1);
    let cases = [
        (unknown.clone(), None, 404, "model_not_found"),
        ("{\"model\": ".to_owned(), None, 400, "invalid_json"),
        (too_large.clone(), None, 413, "body_too_large"),
        (
            completion("hello", 1),
            Some(vec!["192.0.2.1:1".to_owned()]),
            503,
            "no_ready_replica",
        ),
    ];
    for (body, subset, status, code) in cases {
        let mut call = Call::post("/v1/completions", body);
        call.subset = subset;
        let told = through(&mut gateway, &call).await.unwrap();
        let (got, headers, json) = told.immediate.expect("a local reply");
        assert_eq!(got, status, "{json}");
        assert_eq!(json["error"]["code"], code, "{json}");
        assert!(json["error"]["message"].is_string(), "{json}");
        assert_eq!(
            headers.get("content-type").map(String::as_str),
            Some("application/json")
        );
        assert!(told.destination.is_none());
    }
    // Counted as the proxy counts its refusals.
    let m = router_metrics(closed.admin_addr).await;
    assert_eq!(
        metric(
            &m,
            "warmpath_requests_total",
            &[("model", "(unknown)"), ("status", "404")]
        ),
        1.0,
        "{m}"
    );

    // Fail open: no destination (a client's own is removed), the body handed back whole.
    let mut gateway = client(&open).await;
    let told = through(
        &mut gateway,
        &Call::post("/v1/completions", unknown.clone()),
    )
    .await
    .unwrap();
    assert!(told.immediate.is_none());
    assert_eq!(told.destination, None);
    assert_eq!(told.metadata, None);
    assert!(told
        .removed
        .contains(&"x-gateway-destination-endpoint".to_owned()));
    assert_eq!(told.body, unknown.as_bytes());
    // A body not read whole cannot be vetted for a client's P/D fields (the Gateway is not a
    // trusted source): answered, open or not.
    let told = through(&mut gateway, &Call::post("/v1/completions", too_large))
        .await
        .unwrap();
    assert_eq!(told.immediate.map(|(s, ..)| s), Some(413));
    // And a good request is still picked.
    let told = through(
        &mut gateway,
        &Call::post("/v1/completions", completion("hello", 1)),
    )
    .await
    .unwrap();
    assert!(told.destination.is_some());

    // The pool's own mode (a GIE pool's `endpointPickerRef.failureMode`) wins for its model;
    // a model no pool serves keeps the picker's.
    let pool_open = router(
        &config_yaml("tiny", &addrs, &format!("{PICKER}{limits}")).replace(
            "    models: [tiny]\n",
            "    models: [tiny]\n    failure_mode: open\n",
        ),
    )
    .await;
    wait_ready(pool_open.admin_addr).await;
    let mut gateway = client(&pool_open).await;
    let mut call = Call::post("/v1/completions", completion("hello", 1));
    call.subset = Some(vec!["192.0.2.1:1".to_owned()]);
    let told = through(&mut gateway, &call).await.unwrap();
    assert!(told.immediate.is_none(), "the pool fails open");
    assert_eq!(told.destination, None);
    let told = through(
        &mut gateway,
        &Call::post("/v1/completions", unknown_model()),
    )
    .await
    .unwrap();
    let (status, _, json) = told.immediate.expect("no pool: the picker's mode, closed");
    assert_eq!(status, 404, "{json}");

    closed.shutdown().await;
    open.shutdown().await;
    pool_open.shutdown().await;
    sim.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_keeps_serving_through_broken_streams() {
    let s = Setup::new(
        &["--replicas", "2"],
        &format!("{PICKER}timeouts:\n  client_ms: 1000\n"),
    )
    .await;
    let mut gateway = client(&s.router).await;
    let body = completion(&text(11, 3000), 2);

    // A Gateway that drops its stream mid-body, and one that drops it after the pick (the
    // request counted in flight until then).
    let (tx, inbound) = open(&mut gateway).await.unwrap();
    tx.send(headers_message(&Call::post(
        "/v1/completions",
        body.clone(),
    )))
    .await
    .unwrap();
    tx.send(body_message(false, &body.as_bytes()[..100], false))
        .await
        .unwrap();
    drop((tx, inbound));
    let (tx, mut inbound) = open(&mut gateway).await.unwrap();
    tx.send(headers_message(&Call::post(
        "/v1/completions",
        body.clone(),
    )))
    .await
    .unwrap();
    tx.send(body_message(false, body.as_bytes(), true))
        .await
        .unwrap();
    assert!(next(&mut inbound).await.unwrap().is_some(), "picked");
    let inflight = || -> u32 {
        s.router
            .table()
            .candidates("tiny")
            .unwrap()
            .iter()
            .map(|c| c.replica.inflight_requests())
            .sum()
    };
    assert_eq!(
        inflight(),
        1,
        "a picked request is in flight while its stream is open"
    );
    drop((tx, inbound));
    settled(&s.router).await;

    // Messages out of order: a clear status, and the server goes on.
    let (tx, mut inbound) = open(&mut gateway).await.unwrap();
    tx.send(body_message(false, b"{}", true)).await.unwrap();
    let status = next(&mut inbound).await.expect_err("a protocol error");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    // A mode the picker cannot route with.
    let mut call = Call::post("/v1/completions", body.clone());
    call.mode = BodySendMode::Streamed;
    let (tx2, mut inbound2) = open(&mut gateway).await.unwrap();
    tx2.send(headers_message(&call)).await.unwrap();
    let status = next(&mut inbound2).await.expect_err("refused");
    assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
    drop((tx, tx2));

    // A body that never comes: the proxy's 408 once `timeouts.client_ms` has passed.
    let (tx, mut inbound) = open(&mut gateway).await.unwrap();
    tx.send(headers_message(&Call::post(
        "/v1/completions",
        body.clone(),
    )))
    .await
    .unwrap();
    match next(&mut inbound).await.unwrap().and_then(|m| m.response) {
        Some(processing_response::Response::ImmediateResponse(r)) => {
            assert_eq!(r.status.unwrap().code, 408);
        }
        other => panic!("a 408, not {other:?}"),
    }
    drop(tx);

    // Still serving, on the same connection and on a new one.
    let told = through(&mut gateway, &Call::post("/v1/completions", body.clone()))
        .await
        .unwrap();
    assert_eq!(told.upstream_status, Some(200));
    let mut fresh = client(&s.router).await;
    let again = through(&mut fresh, &Call::post("/v1/completions", body))
        .await
        .unwrap();
    assert_eq!(
        again.destination, told.destination,
        "and the prefix is still there"
    );
    settled(&s.router).await;
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_beyond_the_limit_are_refused() {
    let s = Setup::new(&["--replicas", "1"], &format!("{PICKER}  max_streams: 1\n")).await;
    let mut gateway = client(&s.router).await;
    let (tx, _inbound) = open(&mut gateway).await.unwrap();
    // Over another connection (on one, HTTP/2's own stream limit would queue it).
    let mut second = client(&s.router).await;
    let refused = match open(&mut second).await {
        Err(status) => status,
        Ok((_, mut inbound)) => next(&mut inbound).await.expect_err("refused"),
    };
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    drop(tx);
    drop(_inbound);
    // The slot comes back when the stream has gone.
    let mut told = None;
    for _ in 0..50 {
        match through(
            &mut gateway,
            &Call::post("/v1/completions", completion("hi", 1)),
        )
        .await
        {
            Ok(t) => {
                told = Some(t);
                break;
            }
            Err(status) if status.code() == Code::ResourceExhausted => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(status) => panic!("{status:?}"),
        }
    }
    assert!(told.expect("served again").destination.is_some());
    s.stop().await;
}

/// With `endpoint_picker.token_file`, a stream whose metadata lacks the bearer token is refused
/// before it holds a slot or reads a message; the Gateway that sends it is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_picker_with_a_token_serves_only_the_gateway_that_sends_it() {
    let extra = format!(
        "{PICKER}  max_streams: 1\n  token_file: {}\n",
        token_file("picker-token", "picker-token-0123456789")
    );
    let s = Setup::new(&["--replicas", "1"], &extra).await;
    let mut gateway = client(&s.router).await;
    let call = Call::post("/v1/completions", completion("hi", 1));
    for wrong in [
        None,
        Some("Bearer not-the-picker-token-at-all"),
        Some("picker-token-0123456789"),
        Some("Basic picker-token-0123456789"),
    ] {
        let refused = through_as(&mut gateway, &call, wrong)
            .await
            .expect_err("refused");
        assert_eq!(
            refused.code(),
            Code::Unauthenticated,
            "{wrong:?}: {refused:?}"
        );
    }
    // The refused streams held no slot: the one slot serves the Gateway at once.
    let told = through_as(&mut gateway, &call, Some("Bearer picker-token-0123456789"))
        .await
        .expect("served");
    assert!(told.destination.is_some());
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_and_flow_control_apply_as_in_the_proxy() {
    // Fail open, yet flow control's refusal is answered: it is a verdict, not a failure.
    let s = Setup::new(
        &["--timing", "zero"],
        &format!(
            "{PICKER}  failure_mode: open\ntenants:\n  trusted_sources: [127.0.0.0/8]\n  policies:\n    - name: capped\n      limits: {{ requests_per_second: 0.5, burst: 1 }}\n    - name: acme\n      api_keys: [sk-acme-0001]\n"
        ),
    )
    .await;
    let mut gateway = client(&s.router).await;
    // The Gateway is a trusted peer (listed in trusted_sources): its tenant header counts.
    let capped =
        || Call::post("/v1/completions", completion("hi", 2)).with("x-warmpath-tenant", "capped");
    let first = through(&mut gateway, &capped()).await.unwrap();
    assert!(first.destination.is_some());
    let refused = through(&mut gateway, &capped()).await.unwrap();
    let (status, headers, json) = refused.immediate.expect("a local reply");
    assert_eq!(status, 429, "{json}");
    assert_eq!(json["error"]["type"], "rate_limit_error", "{json}");
    assert_eq!(
        headers.get("x-warmpath-dropped-reason").map(String::as_str),
        Some("rate-limited")
    );
    assert_eq!(headers.get("retry-after").map(String::as_str), Some("2"));
    // A client's API key names its tenant and stays with the router.
    let keyed = Call::post("/v1/completions", completion("hi", 2))
        .with("authorization", "Bearer sk-acme-0001");
    let told = through(&mut gateway, &keyed).await.unwrap();
    assert!(told.destination.is_some());
    assert!(
        told.removed.contains(&"authorization".to_owned()),
        "{:?}",
        told.removed
    );
    let m = router_metrics(s.router.admin_addr).await;
    assert_eq!(
        metric(
            &m,
            "warmpath_flow_refused_total",
            &[("tenant", "capped"), ("reason", "rate-limited")]
        ),
        1.0,
        "{m}"
    );
    s.stop().await;
}

/// A completion whose client tries to steer a prefill/decode split: vLLM's KV-transfer
/// parameters, SGLang's bootstrap fields (one key escaped, as an engine decodes it), and the
/// sidecar's header.
fn steering() -> Call {
    let body = r#"{"model": "tiny", "prompt": "hello", "max_tokens": 1,
        "kv_transfer_params": {"do_remote_prefill": true, "remote_host": "192.0.2.9"},
        "bootstrap_host": "192.0.2.9", "bootstrap\u005froom": 7}"#;
    Call::post("/v1/completions", body).with("x-prefiller-host-port", "192.0.2.9:8000")
}

/// The body an engine is handed: the client's, less every P/D field, its length said.
fn assert_cleaned(told: &Told) {
    let body: serde_json::Value = serde_json::from_slice(&told.body).expect("JSON handed on");
    for field in [
        "kv_transfer_params",
        "bootstrap_host",
        "bootstrap_port",
        "bootstrap_room",
    ] {
        assert!(
            body.get(field).is_none(),
            "{field} reached the engine: {body}"
        );
    }
    assert_eq!(body["prompt"], "hello", "{body}");
    assert_eq!(
        told.set.get("content-length"),
        Some(&told.body.len().to_string())
    );
    assert!(
        told.removed.contains(&"x-prefiller-host-port".to_owned()),
        "{:?}",
        told.removed
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_pd_fields_reach_an_engine_only_from_a_trusted_gateway() {
    let s = Setup::new(&["--replicas", "1", "--timing", "zero"], PICKER).await;
    let mut gateway = client(&s.router).await;
    // Picked, in full duplex and buffered: handed on cleaned, and served so.
    let told = through(&mut gateway, &steering()).await.unwrap();
    assert!(told.destination.is_some());
    assert_cleaned(&told);
    assert_eq!(told.upstream_status, Some(200));
    let mut buffered = steering();
    buffered.mode = BodySendMode::Buffered;
    let told = through_buffered(&mut gateway, &buffered).await.unwrap();
    assert!(told.destination.is_some());
    assert_cleaned(&told);
    assert_eq!(told.upstream_status, Some(200));
    // Without P/D fields nothing is re-encoded, but the header still goes.
    let plain = Call::post("/v1/completions", completion("hello", 1))
        .with("x-prefiller-host-port", "192.0.2.9:8000");
    let told = through(&mut gateway, &plain).await.unwrap();
    assert_eq!(told.body, plain.body);
    assert!(!told.set.contains_key("content-length"));
    assert!(told.removed.contains(&"x-prefiller-host-port".to_owned()));
    s.stop().await;

    // Failing open the body still reaches an engine (the Gateway's choice): cleaned too, and
    // one that cannot be read as JSON is not passed on at all.
    let s = Setup::new(
        &["--replicas", "1"],
        &format!("{PICKER}  failure_mode: open\n"),
    )
    .await;
    let mut gateway = client(&s.router).await;
    let mut unknown = steering();
    unknown.body = String::from_utf8(unknown.body)
        .unwrap()
        .replace("\"tiny\"", "\"nope\"")
        .into_bytes();
    let told = through(&mut gateway, &unknown).await.unwrap();
    assert!(told.immediate.is_none(), "failed open");
    assert_eq!(told.destination, None);
    assert_cleaned(&told);
    let broken = Call::post(
        "/v1/completions",
        r#"{"model": "tiny", "kv_transfer_params": {}, "prompt": NaN}"#,
    );
    let told = through(&mut gateway, &broken).await.unwrap();
    let (status, _, json) = told.immediate.expect("not passed on");
    assert_eq!(status, 400, "{json}");
    s.stop().await;

    // A Gateway the operator trusts passes its clients' fields, as the proxy does.
    let s = Setup::new(
        &["--replicas", "1", "--timing", "zero"],
        &format!("{PICKER}tenants:\n  trusted_sources: [127.0.0.0/8]\n"),
    )
    .await;
    let mut gateway = client(&s.router).await;
    let call = steering();
    let told = through(&mut gateway, &call).await.unwrap();
    assert!(told.destination.is_some());
    assert_eq!(told.body, call.body);
    assert!(!told.removed.contains(&"x-prefiller-host-port".to_owned()));
    s.stop().await;
}

/// Identity before work: with API keys required, a request that brings none is answered on
/// its head, before its body is asked for (so never held, parsed or tokenized), and failing
/// open does not let it past.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_proves_no_tenant_is_refused_on_its_head_even_failing_open() {
    let s = Setup::new(
        &["--replicas", "1", "--timing", "zero"],
        &format!(
            "{PICKER}  failure_mode: open\ntenants:\n  require_api_key: true\n  policies:\n    - name: acme\n      api_keys: [sk-acme-0001]\n"
        ),
    )
    .await;
    let mut gateway = client(&s.router).await;
    for key in [None, Some("Bearer sk-not-a-key")] {
        let mut call = Call::post("/v1/completions", completion("hello", 1));
        if let Some(key) = key {
            call = call.with("authorization", key);
        }
        // Only the head is sent: the answer cannot wait for a body.
        let (tx, mut inbound) = open(&mut gateway).await.unwrap();
        tx.send(headers_message(&call)).await.unwrap();
        let answer = next(&mut inbound).await.unwrap().expect("an answer");
        let mut told = Told::default();
        match &answer.response {
            Some(processing_response::Response::ImmediateResponse(r)) => immediate(&mut told, r),
            other => panic!("{key:?}: a local reply on the head, not {other:?}"),
        }
        let (status, _, json) = told.immediate.unwrap();
        assert_eq!(status, 401, "{key:?}: {json}");
        // And buffered, the same.
        let mut buffered = call;
        buffered.mode = BodySendMode::Buffered;
        let told = through_buffered(&mut gateway, &buffered).await.unwrap();
        assert_eq!(told.immediate.map(|(s, ..)| s), Some(401), "{key:?}");
    }
    let keyed = Call::post("/v1/completions", completion("hello", 1))
        .with("authorization", "Bearer sk-acme-0001");
    let told = through(&mut gateway, &keyed).await.unwrap();
    assert!(told.destination.is_some());
    s.stop().await;
}
