//! The prefill/decode split end to end: simulator replicas in prefill and decode pools behind
//! the router, and recording servers where the exact bytes on the wire are the question.

mod common;

use common::*;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::time::Duration;
use warmpath_router::pd_wire::nixl;
use warmpath_testkit::{completion_answer, nixl_prefill_answer, Recorder};

/// Pools `pre` (role prefill: `prefill` addresses) and `dec` (role decode: `decode` addresses),
/// both serving `tiny`, plus `extra` YAML. Prefill replicas are `p0..`, decode ones `d0..`.
fn pd_yaml(
    prefill: &[SocketAddr],
    decode: &[SocketAddr],
    prefill_pool: &str,
    extra: &str,
) -> String {
    let mut y = String::from("listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\npools:\n");
    y.push_str(&format!(
        "  - name: pre\n    role: prefill\n    models: [tiny]\n{prefill_pool}    replicas:\n"
    ));
    for (i, a) in prefill.iter().enumerate() {
        y.push_str(&format!("      - {{ name: p{i}, url: \"http://{a}\" }}\n"));
    }
    y.push_str("  - name: dec\n    role: decode\n    models: [tiny]\n    replicas:\n");
    for (i, a) in decode.iter().enumerate() {
        y.push_str(&format!("      - {{ name: d{i}, url: \"http://{a}\" }}\n"));
    }
    y.push_str(extra);
    y
}

const PD: &str = "pd:\n  threshold_tokens: 64\n";

#[tokio::test]
async fn nixl_splits_long_uncached_prompts_and_serves_the_rest_locally() {
    let fleet = sim(&["--timing", "zero", "--replicas", "2", "--kv-blocks", "256"]).await;
    let [p, d] = [fleet.addrs()[0], fleet.addrs()[1]];
    let rt = router(&pd_yaml(&[p], &[d], "", PD)).await;
    wait_ready(rt.admin_addr).await;

    // 2,000 bytes ≈ 500 tokens, none cached: split.
    let prompt = text(1, 2000);
    let r = post(rt.addr, "/v1/completions", &completion(&prompt, 4)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("x-warmpath-replica"), Some("d0"));
    assert_eq!(r.header("x-warmpath-prefill-replica"), Some("p0"));
    let v = r.json();
    assert_eq!(v["usage"]["completion_tokens"], 4);
    // The decode replica pulled the prompt's full blocks instead of computing them.
    let cached = v["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap();
    assert!(cached >= 400, "decode computed the prompt itself: {v}");

    // The same prompt again: the decode replica holds it now, so nothing is split.
    let again = post(rt.addr, "/v1/completions", &completion(&prompt, 4)).await;
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(again.header("x-warmpath-replica"), Some("d0"));
    assert_eq!(again.header("x-warmpath-prefill-replica"), None);
    // A short prompt (under 64 tokens) is never split.
    let short = post(rt.addr, "/v1/completions", &completion("hello there", 4)).await;
    assert_eq!(short.header("x-warmpath-prefill-replica"), None);

    // A streamed chat request is split too, and streams.
    let chat = json!({"model": "tiny", "stream": true, "max_tokens": 3,
        "messages": [{"role": "user", "content": text(2, 2000)}]});
    let s = post(rt.addr, "/v1/chat/completions", &chat.to_string()).await;
    assert_eq!(s.status, 200, "{}", s.body);
    assert_eq!(s.header("x-warmpath-prefill-replica"), Some("p0"));
    assert!(
        s.body.contains("data: ") && s.body.contains("[DONE]"),
        "{}",
        s.body
    );

    let m = router_metrics(rt.admin_addr).await;
    assert_eq!(
        metric(&m, "warmpath_pd_decisions_total", &[("decision", "split")]),
        2.0
    );
    assert_eq!(
        metric(&m, "warmpath_pd_decisions_total", &[("decision", "local")]),
        2.0
    );
    rt.shutdown().await;
}

#[tokio::test]
async fn a_failed_prefill_falls_back_to_the_decode_replica_or_fails_as_configured() {
    let fleet = sim(&["--timing", "zero"]).await;
    let d = fleet.addrs()[0];
    // Nothing listens on the prefill replica's port; with scraping and active checks off it
    // stays "ready" until the refused connection ejects it.
    let dead: SocketAddr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let no_scrape = "    metrics_path: null\n";
    let extra = format!("{PD}health:\n  active_path: null\n");
    let rt = router(&pd_yaml(&[dead], &[d], no_scrape, &extra)).await;
    wait_ready(rt.admin_addr).await;
    let r = post(rt.addr, "/v1/completions", &completion(&text(3, 2000), 2)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("x-warmpath-replica"), Some("d0"));
    assert_eq!(r.header("x-warmpath-prefill-replica"), None);
    let m = router_metrics(rt.admin_addr).await;
    assert_eq!(
        metric(
            &m,
            "warmpath_pd_prefill_failures_total",
            &[("kind", "connect")]
        ),
        1.0
    );
    assert_eq!(
        metric(
            &m,
            "warmpath_pd_decisions_total",
            &[("decision", "fallback_decode")]
        ),
        1.0
    );
    rt.shutdown().await;

    // An engine that answers errors: not retried (it may have computed), and with
    // `on_prefill_failure: fail` the client gets a 502 that says why.
    let broken = sim(&["--timing", "zero", "--error-rate", "1"]).await;
    let extra = format!("{PD}  on_prefill_failure: fail\n");
    let rt = router(&pd_yaml(&[broken.addrs()[0]], &[d], "", &extra)).await;
    wait_ready(rt.admin_addr).await;
    let r = post(rt.addr, "/v1/completions", &completion(&text(4, 2000), 2)).await;
    assert_eq!(r.status, 502, "{}", r.body);
    assert!(r.body.contains("prefill"), "{}", r.body);
    let m = router_metrics(rt.admin_addr).await;
    assert_eq!(
        metric(
            &m,
            "warmpath_pd_prefill_failures_total",
            &[("kind", "status")]
        ),
        1.0
    );
    assert_eq!(
        metric(&m, "warmpath_pd_decisions_total", &[("decision", "failed")]),
        1.0
    );
    rt.shutdown().await;
}

#[tokio::test]
async fn the_nixl_legs_carry_exactly_the_protocols_bodies_and_request_ids() {
    let (pre, dec) = (Recorder::default(), Recorder::default());
    let p = pre.start(nixl_prefill_answer, Duration::ZERO).await;
    let d = dec.start(completion_answer, Duration::ZERO).await;
    let no_scrape = "    metrics_path: null\n";
    let yaml = pd_yaml(&[p], &[d], no_scrape, PD).replace(
        "  - name: dec\n    role: decode\n    models: [tiny]\n",
        "  - name: dec\n    role: decode\n    models: [tiny]\n    metrics_path: null\n",
    );
    let rt = router(&yaml).await;
    wait_ready(rt.admin_addr).await;
    let client_body = json!({"model": "tiny", "prompt": text(5, 1500), "stream": true,
        "stream_options": {"include_usage": true}, "max_tokens": 20, "temperature": 0.2})
    .to_string();
    let r = send(
        rt.addr,
        "POST",
        "/v1/completions",
        &[
            ("x-request-id", "client-req-1"),
            ("x-forwarded-for", "10.1.2.3"),
            ("connection", "x-hop-secret"),
            ("x-hop-secret", "for the router only"),
        ],
        client_body.clone(),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("x-warmpath-prefill-replica"), Some("p0"));

    let original = match serde_json::from_str::<Value>(&client_body).unwrap() {
        Value::Object(m) => m,
        _ => unreachable!(),
    };
    let sent_pre = pre.requests();
    assert_eq!(sent_pre.len(), 1);
    let (head, body) = &sent_pre[0];
    assert_eq!(body.as_ref(), nixl::prefill_body(&original).as_slice());
    let pre_id = head.headers["x-request-id"].to_str().unwrap().to_owned();
    assert_ne!(
        pre_id, "client-req-1",
        "the prefill leg has a request id of its own"
    );
    assert_eq!(head.uri.path(), "/v1/completions");

    let sent_dec = dec.requests();
    assert_eq!(sent_dec.len(), 1);
    let (head, body) = &sent_dec[0];
    let params = nixl::kv_params(nixl_prefill_answer(0).1.as_bytes()).unwrap();
    assert_eq!(
        body.as_ref(),
        nixl::decode_body(&original, params).as_slice()
    );
    assert_eq!(head.headers["x-request-id"], "client-req-1");
    // Both legs say who the client is, after what the proxies before the router said; headers
    // that the client's `Connection` names stop at the router.
    assert_eq!(head.headers["x-forwarded-for"], "10.1.2.3, 127.0.0.1");
    assert_eq!(
        sent_pre[0].0.headers["x-forwarded-for"],
        "10.1.2.3, 127.0.0.1"
    );
    assert!(!head.headers.contains_key("x-hop-secret"));
    assert!(!sent_pre[0].0.headers.contains_key("x-hop-secret"));
    let v: Value = serde_json::from_slice(body).unwrap();
    assert_eq!(
        (v["stream"].clone(), v["max_tokens"].clone()),
        (json!(true), json!(20))
    );
    assert_eq!(v["kv_transfer_params"]["remote_engine_id"], "engine-7");
    rt.shutdown().await;
}

#[tokio::test]
async fn a_client_that_leaves_during_the_prefill_cancels_the_decode() {
    let (pre, dec) = (Recorder::default(), Recorder::default());
    let p = pre
        .start(nixl_prefill_answer, Duration::from_millis(800))
        .await;
    let d = dec.start(completion_answer, Duration::ZERO).await;
    let yaml = pd_yaml(&[p], &[d], "    metrics_path: null\n", PD).replace(
        "  - name: dec\n    role: decode\n    models: [tiny]\n",
        "  - name: dec\n    role: decode\n    models: [tiny]\n    metrics_path: null\n",
    );
    let rt = router(&yaml).await;
    wait_ready(rt.admin_addr).await;
    let body = completion(&text(6, 1500), 4);
    let sent = std::time::Instant::now();
    let gone = warmpath_testkit::send(
        rt.addr,
        "POST",
        "/v1/completions",
        &[],
        body,
        Duration::from_millis(200),
    )
    .await;
    assert!(gone.is_err(), "the client gave up first");
    // The router lets go of the request…
    until_metric(rt.admin_addr, "warmpath_inflight_requests", &[], |v| {
        v == 0.0
    })
    .await;
    // …and no decode follows: a non-event, so wait past when the prefill's answer would have
    // come (800 ms after it was sent) and then some.
    tokio::time::sleep_until((sent + Duration::from_millis(1500)).into()).await;
    assert_eq!(pre.requests().len(), 1, "the prefill leg was sent");
    assert!(dec.requests().is_empty(), "no decode after the client left");
    rt.shutdown().await;
}

#[test]
fn a_prefill_pool_needs_a_pool_that_decodes_its_models() {
    let yaml = "pools:\n  - name: pre\n    role: prefill\n    models: [a]\n    replicas:\n      - { name: p0, url: \"http://127.0.0.1:1\" }\n  - name: dec\n    models: [b]\n    replicas:\n      - { name: d0, url: \"http://127.0.0.1:2\" }\n";
    let e = warmpath_router::config::Config::parse(yaml)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("pools[0].models[0]") && e.contains("nothing would decode"),
        "{e}"
    );
    let valid = yaml.replace("models: [b]", "models: [a]");
    warmpath_router::config::Config::parse(&valid).unwrap();
    let e = warmpath_router::config::Config::parse(&format!("{valid}pd:\n  prefill_attempts: 0\n"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("pd.prefill_attempts"), "{e}");
}

#[tokio::test]
async fn the_sidecar_connector_names_the_prefill_replica_to_the_decode_pods_sidecar() {
    let (pre, dec) = (Recorder::default(), Recorder::default());
    let p = pre.start(nixl_prefill_answer, Duration::ZERO).await;
    let d = dec.start(completion_answer, Duration::ZERO).await;
    let yaml = pd_yaml(
        &[p],
        &[d],
        "    metrics_path: null\n",
        "pd:\n  threshold_tokens: 64\n  connector: sidecar\n",
    )
    .replace(
        "  - name: dec\n    role: decode\n    models: [tiny]\n",
        "  - name: dec\n    role: decode\n    models: [tiny]\n    metrics_path: null\n",
    );
    let rt = router(&yaml).await;
    wait_ready(rt.admin_addr).await;
    let body = completion(&text(7, 1500), 4);
    let r = post(rt.addr, "/v1/completions", &body).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("x-warmpath-prefill-replica"), Some("p0"));
    assert!(
        pre.requests().is_empty(),
        "the sidecar, not the router, calls the prefill replica"
    );
    let sent = dec.requests();
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0].0.headers["x-prefiller-host-port"],
        p.to_string().as_str()
    );
    assert_eq!(
        sent[0].1.as_ref(),
        body.as_bytes(),
        "the client's body, as it came"
    );
    // Short prompts go to the decode replica without the header.
    let short = post(rt.addr, "/v1/completions", &completion("hi", 4)).await;
    assert_eq!(short.status, 200);
    assert!(!dec.requests()[1]
        .0
        .headers
        .contains_key("x-prefiller-host-port"));
    rt.shutdown().await;
}

#[tokio::test]
async fn sglang_sends_one_body_to_both_and_falls_back_when_the_prefill_fails() {
    // Bootstrap port 0: each simulated replica's bootstrap port is its HTTP port.
    let fleet = sim(&[
        "--timing",
        "zero",
        "--replicas",
        "2",
        "--kv-blocks",
        "256",
        "--bootstrap-port",
        "0",
    ])
    .await;
    let [p, d] = [fleet.addrs()[0], fleet.addrs()[1]];
    let yaml = pd_yaml(
        &[p],
        &[d],
        "",
        "pd:\n  threshold_tokens: 64\n  connector: sglang\n",
    )
    .replace(
        &format!("{{ name: p0, url: \"http://{p}\" }}"),
        &format!(
            "{{ name: p0, url: \"http://{p}\", bootstrap_port: {} }}",
            p.port()
        ),
    );
    let rt = router(&yaml).await;
    wait_ready(rt.admin_addr).await;
    for stream in [false, true] {
        let body = json!({"model": "tiny", "prompt": text(8 + stream as u64, 2000),
            "max_tokens": 5, "stream": stream});
        let r = post(rt.addr, "/v1/completions", &body.to_string()).await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.header("x-warmpath-replica"), Some("d0"));
        assert_eq!(r.header("x-warmpath-prefill-replica"), Some("p0"));
        if !stream {
            let v = r.json();
            assert_eq!(
                v["usage"]["completion_tokens"], 5,
                "the decode's answer, not the prefill's"
            );
            let cached = v["usage"]["prompt_tokens_details"]["cached_tokens"]
                .as_u64()
                .unwrap();
            assert!(cached >= 400, "decode computed the prompt itself: {v}");
        } else {
            assert!(r.body.contains("[DONE]"), "{}", r.body);
        }
    }
    let m = router_metrics(rt.admin_addr).await;
    assert_eq!(
        metric(&m, "warmpath_pd_decisions_total", &[("decision", "split")]),
        2.0
    );
    rt.shutdown().await;

    // A prefill server that answers 500: the decode waiting in its room is cancelled and the
    // decode replica serves the request alone.
    let broken = sim(&[
        "--timing",
        "zero",
        "--error-rate",
        "1",
        "--bootstrap-port",
        "0",
    ])
    .await;
    let b = broken.addrs()[0];
    let yaml = pd_yaml(
        &[b],
        &[d],
        "",
        "pd:\n  threshold_tokens: 64\n  connector: sglang\n",
    )
    .replace(
        &format!("{{ name: p0, url: \"http://{b}\" }}"),
        &format!(
            "{{ name: p0, url: \"http://{b}\", bootstrap_port: {} }}",
            b.port()
        ),
    );
    let rt = router(&yaml).await;
    wait_ready(rt.admin_addr).await;
    let started = std::time::Instant::now();
    let r = post(rt.addr, "/v1/completions", &completion(&text(10, 2000), 3)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("x-warmpath-prefill-replica"), None);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "waited out the bootstrap timeout"
    );
    let m = router_metrics(rt.admin_addr).await;
    assert_eq!(
        metric(
            &m,
            "warmpath_pd_prefill_failures_total",
            &[("kind", "status")]
        ),
        1.0
    );
    assert_eq!(
        metric(
            &m,
            "warmpath_pd_decisions_total",
            &[("decision", "fallback_decode")]
        ),
        1.0
    );
    rt.shutdown().await;
}

#[tokio::test]
async fn a_hung_prefill_is_given_up_after_the_prefill_timeout() {
    let (pre, dec) = (Recorder::default(), Recorder::default());
    let p = pre
        .start(nixl_prefill_answer, Duration::from_secs(30))
        .await;
    let d = dec.start(completion_answer, Duration::ZERO).await;
    let yaml = pd_yaml(
        &[p],
        &[d],
        "    metrics_path: null\n",
        "pd:\n  threshold_tokens: 64\n  prefill_timeout_ms: 300\n",
    )
    .replace(
        "  - name: dec\n    role: decode\n    models: [tiny]\n",
        "  - name: dec\n    role: decode\n    models: [tiny]\n    metrics_path: null\n",
    );
    let rt = router(&yaml).await;
    wait_ready(rt.admin_addr).await;
    let started = std::time::Instant::now();
    let body = completion(&text(11, 1500), 4);
    let r = post(rt.addr, "/v1/completions", &body).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(r.header("x-warmpath-prefill-replica"), None);
    // The decode replica got the client's own body: it prefills itself.
    assert_eq!(dec.requests()[0].1.as_ref(), body.as_bytes());
    let m = router_metrics(rt.admin_addr).await;
    assert_eq!(
        metric(
            &m,
            "warmpath_pd_prefill_failures_total",
            &[("kind", "timeout")]
        ),
        1.0
    );
    rt.shutdown().await;
}

#[tokio::test]
async fn a_split_requests_decode_replica_does_not_count_the_prompt_as_its_own_prefill() {
    let (pre, dec) = (Recorder::default(), Recorder::default());
    let p = pre.start(nixl_prefill_answer, Duration::ZERO).await;
    let d = dec
        .start(completion_answer, Duration::from_millis(800))
        .await;
    let yaml = pd_yaml(&[p], &[d], "    metrics_path: null\n", PD).replace(
        "  - name: dec\n    role: decode\n    models: [tiny]\n",
        "  - name: dec\n    role: decode\n    models: [tiny]\n    metrics_path: null\n",
    );
    let rt = router(&yaml).await;
    wait_ready(rt.admin_addr).await;
    let addr = rt.addr;
    let body = completion(&text(12, 1500), 4);
    let pending = tokio::spawn(async move { post(addr, "/v1/completions", &body).await });
    let table = rt.table();
    let decode = &table.candidates("tiny").unwrap()[0].replica;
    // The decode leg is in flight once the decode engine has it (it answers 800 ms later).
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while dec.requests().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "no decode leg was sent"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(decode.inflight_requests(), 1, "the decode leg is in flight");
    assert_eq!(
        decode.pending_prefill_tokens(),
        0,
        "its prompt was prefilled elsewhere"
    );
    assert!(decode.inflight_uncached_tokens() > 0);
    let r = pending.await.unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(decode.inflight_requests(), 0);
    rt.shutdown().await;
}

/// With P/D, a session's home is its decode replica (where its context stays): a turn whose
/// whole context is new, which the prefix index cannot place, still goes back to it, and the
/// answer carries the session's token.
#[tokio::test]
async fn a_sessions_home_is_its_decode_replica() {
    let fleet = sim(&["--timing", "zero", "--replicas", "3", "--kv-blocks", "256"]).await;
    let [p, d0, d1] = [fleet.addrs()[0], fleet.addrs()[1], fleet.addrs()[2]];
    let rt = router(&pd_yaml(&[p], &[d0, d1], "", PD)).await;
    wait_ready(rt.admin_addr).await;
    let mut homes = std::collections::BTreeSet::new();
    for s in 0..6u64 {
        let id = format!("agent-{s}");
        let turn = |seed: u64| {
            let id = id.clone();
            async move {
                let r = send(
                    rt.addr,
                    "POST",
                    "/v1/completions",
                    &[("x-session-id", id.as_str())],
                    completion(&text(seed, 2000), 2),
                )
                .await
                .unwrap();
                assert_eq!(r.status, 200, "{}", r.body);
                // Long and uncached: split, so both legs ran.
                assert_eq!(r.header("x-warmpath-prefill-replica"), Some("p0"));
                assert!(r.header("x-session-token").is_some(), "no session token");
                r.header("x-warmpath-replica").unwrap().to_owned()
            }
        };
        let home = turn(100 * s + 1).await;
        for k in 2..4 {
            assert_eq!(turn(100 * s + k).await, home, "session {s} turn {k}");
        }
        homes.insert(home);
    }
    // Sessions are spread over the decode pool, not pinned to one replica.
    assert_eq!(homes.len(), 2, "{homes:?}");
    rt.shutdown().await;
}

/// A client cannot steer a split: from an untrusted source, its `x-prefiller-host-port` and the
/// body's prefill/decode fields never reach an engine when the router does not split (no
/// prefill pool here); a trusted source (a gateway that splits itself) keeps them.
#[tokio::test]
async fn client_pd_fields_reach_no_engine_unless_trusted() {
    let engine = Recorder::default();
    let addr = engine
        .start(completion_answer, Duration::from_millis(0))
        .await;
    let body = json!({
        "model": "tiny",
        "prompt": "hello",
        "max_tokens": 2,
        "kv_transfer_params": {"remote_host": "10.9.9.9", "remote_port": 5600},
        "bootstrap_host": "10.9.9.9",
        "bootstrap_port": 8998,
        "bootstrap_room": 7,
    })
    .to_string();
    let headers = [("x-prefiller-host-port", "10.9.9.9:8000")];
    for (trusted, extra) in [
        (false, ""),
        (false, "tenants:\n  trusted_sources: [10.0.0.0/8]\n"),
        (true, "tenants:\n  trusted_sources: [127.0.0.0/8]\n"),
    ] {
        let rt = router(&config_yaml("tiny", &[addr], extra)).await;
        let r = send(rt.addr, "POST", "/v1/completions", &headers, body.clone())
            .await
            .unwrap();
        assert_eq!(r.status, 200, "{}", r.body);
        let forwarded = engine.requests();
        let (head, sent) = forwarded.last().expect("forwarded");
        let sent: Value = serde_json::from_slice(sent).unwrap();
        assert_eq!(
            head.headers.contains_key("x-prefiller-host-port"),
            trusted,
            "trusted {trusted}: {:?}",
            head.headers
        );
        for field in [
            "kv_transfer_params",
            "bootstrap_host",
            "bootstrap_port",
            "bootstrap_room",
        ] {
            assert_eq!(
                sent.get(field).is_some(),
                trusted,
                "trusted {trusted}: {sent}"
            );
        }
        // The rest of the body is the client's.
        assert_eq!(sent["prompt"], "hello");
        assert_eq!(sent["max_tokens"], 2);
        rt.shutdown().await;
    }
}
