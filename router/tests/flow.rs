//! Identity and flow control end to end: simulator replicas behind the router, tenants named by
//! API keys and trusted headers, limits, saturation, the fair queue and its refusals.

mod common;

use common::*;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use warmpath_testkit::{completion_answer, Recorder};

/// One replica that serves one request at a time for the router (`max_inflight_requests: 1`),
/// each taking about `40 × 5 ms` (40 output tokens).
const SLOW_SIM: &[&str] = &["--decode-base-ms", "5", "--decode-per-seq-ms", "0"];

fn flow_yaml(extra: &str) -> String {
    trusting_loopback(&format!(
        "flow:\n  enabled: true\n  saturation:\n    max_inflight_requests: 1\n    max_waiting_requests: null\n    max_kv_usage: null\n{extra}"
    ))
}

/// `yaml` with loopback among `tenants.trusted_sources` (none by default): the tests' clients
/// play the gateway that names tenants.
fn trusting_loopback(yaml: &str) -> String {
    let trust = "tenants:\n  trusted_sources: [127.0.0.0/8]\n";
    if yaml.contains("tenants:\n") {
        yaml.replacen("tenants:\n", trust, 1)
    } else {
        format!("{yaml}{trust}")
    }
}

async fn as_tenant(addr: SocketAddr, tenant: &str, max_tokens: u32) -> Reply {
    send(
        addr,
        "POST",
        "/v1/completions",
        &[("x-warmpath-tenant", tenant)],
        completion(&text(max_tokens.into(), 200), max_tokens),
    )
    .await
    .expect("answer")
}

fn dropped(r: &Reply, reason: &str, llm_d: &str) {
    assert_eq!(r.status, 429, "{}", r.body);
    assert_eq!(
        r.header("x-warmpath-dropped-reason"),
        Some(reason),
        "{}",
        r.body
    );
    assert_eq!(r.header("x-llm-d-request-dropped-reason"), Some(llm_d));
    let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!(retry >= 1);
    let v = r.json();
    assert_eq!(v["error"]["type"], "rate_limit_error", "{v}");
    assert!(v["error"]["message"].as_str().unwrap().len() > 10);
}

#[tokio::test]
async fn a_tenant_over_its_rate_gets_429_with_the_reason_and_others_are_untouched() {
    let s = Setup::new(
        &["--timing", "zero"],
        &trusting_loopback(
            "tenants:\n  policies:\n    - name: capped\n      limits: { requests_per_second: 0.5, burst: 1 }\n",
        ),
    )
    .await;
    let addr = s.router.addr;
    assert_eq!(as_tenant(addr, "capped", 2).await.status, 200);
    let refused = as_tenant(addr, "capped", 2).await;
    dropped(&refused, "rate-limited", "rejected-saturated");
    assert!(
        refused.body.contains("requests_per_second"),
        "{}",
        refused.body
    );
    assert_eq!(refused.header("retry-after"), Some("2"));
    // Another tenant and the default tenant pass.
    assert_eq!(as_tenant(addr, "other-team", 2).await.status, 200);
    assert_eq!(
        post(addr, "/v1/completions", &completion("hi", 2))
            .await
            .status,
        200
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
    assert_eq!(
        metric(&m, "warmpath_flow_dispatched_total", &[("path", "direct")]),
        3.0,
        "the refused request was not dispatched"
    );
    s.stop().await;
}

#[tokio::test]
async fn api_keys_name_tenants_and_never_reach_the_engine() {
    let engine = Recorder::default();
    let addr = engine
        .start(completion_answer, Duration::from_millis(0))
        .await;
    let yaml = config_yaml(
        "tiny",
        &[addr],
        "    metrics_path: null\ntenants:\n  require_api_key: true\n  trusted_sources: [127.0.0.0/8]\n  policies:\n    - name: acme\n      api_keys: [sk-acme-0001]\n      limits: { max_concurrent_requests: 5 }\n",
    );
    let rt = router(&yaml).await;
    let ok = send(
        rt.addr,
        "POST",
        "/v1/completions",
        &[("authorization", "Bearer sk-acme-0001")],
        completion("hello", 2),
    )
    .await
    .unwrap();
    assert_eq!(ok.status, 200, "{}", ok.body);
    let forwarded = engine.requests();
    let (head, _) = forwarded.last().expect("forwarded");
    assert!(
        !head.headers.contains_key("authorization"),
        "the tenant's key went to the engine"
    );

    let wrong = send(
        rt.addr,
        "POST",
        "/v1/completions",
        &[("authorization", "Bearer sk-wrong-9999")],
        completion("hello", 2),
    )
    .await
    .unwrap();
    wrong.assert_error(401, "invalid_api_key");
    assert!(
        !wrong.body.contains("sk-wrong"),
        "the key is echoed: {}",
        wrong.body
    );
    post(rt.addr, "/v1/completions", &completion("hello", 2))
        .await
        .assert_error(401, "invalid_api_key");
    // Identity before work: a wrong key is refused from the head alone, before the router
    // reads (let alone parses or tokenizes) a body that is still arriving. Reading it first
    // would answer 408 once the client timeout passed, or hold the connection until then.
    let status = refused_before_the_body(rt.addr, "Bearer sk-wrong-9999").await;
    assert!(status.starts_with("HTTP/1.1 401"), "{status}");
    // A trusted gateway (loopback here) may name the tenant instead.
    let named = as_tenant(rt.addr, "acme", 2).await;
    assert_eq!(named.status, 200, "{}", named.body);
    let m = router_metrics(rt.admin_addr).await;
    assert!(!m.contains("sk-acme"), "a key is in the metrics");
    assert_eq!(
        metric(&m, "warmpath_flow_dispatched_total", &[("tenant", "acme")]),
        2.0,
        "{m}"
    );
    rt.shutdown().await;
}

/// Sends a request head announcing a 100 kB body with `authorization`, then 10 bytes of it,
/// and returns the status line of what comes back while the rest is withheld.
async fn refused_before_the_body(addr: SocketAddr, authorization: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut conn = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let head = format!(
        "POST /v1/completions HTTP/1.1\r\nhost: router\r\nauthorization: {authorization}\r\n\
         content-type: application/json\r\ncontent-length: 100000\r\n\r\n{{\"model\": \""
    );
    conn.write_all(head.as_bytes()).await.expect("write");
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    // The router's client timeout is far longer than this: an answer within it can only be
    // the refusal from the head (the body never completes).
    let read = tokio::time::timeout(Duration::from_secs(20), async {
        while !got.windows(2).any(|w| w == b"\r\n") {
            let n = conn.read(&mut buf).await.expect("read");
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
    })
    .await;
    assert!(read.is_ok(), "no answer while the body was withheld");
    String::from_utf8_lossy(&got)
        .lines()
        .next()
        .unwrap_or("")
        .to_owned()
}

#[tokio::test]
async fn untrusted_peers_cannot_name_a_tenant() {
    let s = Setup::new(
        &["--timing", "zero"],
        "tenants:\n  trusted_sources: [10.0.0.0/8]\n  policies:\n    - name: vip\n      limits: { requests_per_second: 0.1, burst: 1 }\n",
    )
    .await;
    // Were the header believed, the second request would be rate-limited.
    for _ in 0..2 {
        assert_eq!(as_tenant(s.router.addr, "vip", 2).await.status, 200);
    }
    let m = router_metrics(s.router.admin_addr).await;
    assert_eq!(
        metric(
            &m,
            "warmpath_flow_dispatched_total",
            &[("tenant", "default")]
        ),
        2.0,
        "{m}"
    );
    s.stop().await;
}

/// Completion order of requests sent one after another, each by its tenant.
async fn run_all(s: &Setup, sends: &[(&'static str, u32)]) -> Vec<(String, Reply, Instant)> {
    let tenants: Vec<&str> = sends.iter().map(|(t, _)| *t).collect();
    let sends = sends.to_vec();
    let addr = s.router.addr;
    finishing_order(s.router.admin_addr, &tenants, |i| {
        as_tenant(addr, sends[i].0, sends[i].1)
    })
    .await
}

#[tokio::test]
async fn a_saturated_pool_queues_and_serves_tenants_fairly() {
    let s = Setup::new(SLOW_SIM, &flow_yaml("")).await;
    // `a` sends four requests before `b` sends one. Without fairness `b` would finish last;
    // with it, `b` goes as soon as `a` has had its turn.
    let done = run_all(&s, &[("a", 40), ("a", 40), ("a", 40), ("a", 40), ("b", 40)]).await;
    let order: Vec<&str> = done.iter().map(|(n, _, _)| n.as_str()).collect();
    for (_, r, _) in &done {
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let b = order.iter().position(|n| *n == "b4").unwrap();
    assert!(b <= 2, "b waited behind all of a's requests: {order:?}");
    let m = router_metrics(s.router.admin_addr).await;
    assert!(
        metric(&m, "warmpath_flow_dispatched_total", &[("path", "queued")]) >= 3.0,
        "{m}"
    );
    assert_eq!(metric(&m, "warmpath_flow_queued_requests", &[]), 0.0);
    assert!(
        metric(&m, "warmpath_flow_tokens_served_total", &[("tenant", "b")]) >= 40.0,
        "{m}"
    );
    assert!(
        metric(
            &m,
            "warmpath_flow_queue_wait_seconds_count",
            &[("tenant", "a")]
        ) >= 3.0
    );
    s.stop().await;
}

#[tokio::test]
async fn a_light_tenant_uses_the_headroom_beside_a_flood() {
    let yaml = flow_yaml("").replace(
        "max_inflight_requests: 1\n",
        "max_inflight_requests: 1\n    headroom_requests: 1\n",
    );
    let s = Setup::new(SLOW_SIM, &yaml).await;
    // `a` holds the one regular slot and queues two more; `b`, with nothing in flight, starts
    // at once in the headroom instead of waiting for a's first request to end.
    let done = run_all(&s, &[("a", 40), ("a", 40), ("a", 40), ("b", 40)]).await;
    let order: Vec<&str> = done.iter().map(|(n, _, _)| n.as_str()).collect();
    let b = order.iter().position(|n| *n == "b3").unwrap();
    assert!(b <= 1, "b waited for a slot: {order:?}");
    let m = router_metrics(s.router.admin_addr).await;
    assert_eq!(
        metric(
            &m,
            "warmpath_flow_dispatched_total",
            &[("tenant", "b"), ("path", "headroom")]
        ),
        1.0,
        "{m}"
    );
    assert_eq!(
        metric(
            &m,
            "warmpath_flow_dispatched_total",
            &[("tenant", "a"), ("path", "headroom")]
        ),
        0.0,
        "a backlogged tenant never takes the headroom"
    );
    s.stop().await;
}

#[tokio::test]
async fn higher_priority_goes_first_and_sheddable_work_is_refused() {
    let yaml = flow_yaml(
        "tenants:\n  policies:\n    - { name: urgent, priority: 5 }\n    - { name: batch, priority: -1 }\n",
    );
    let s = Setup::new(SLOW_SIM, &yaml).await;
    let done = run_all(
        &s,
        &[
            ("low", 40),
            ("low", 40),
            ("low", 40),
            ("urgent", 40),
            ("batch", 40),
        ],
    )
    .await;
    let order: Vec<&str> = done.iter().map(|(n, _, _)| n.as_str()).collect();
    let shed = done.iter().find(|(n, _, _)| n == "batch4").unwrap();
    dropped(&shed.1, "saturated", "rejected-saturated");
    let urgent = order.iter().position(|n| *n == "urgent3").unwrap();
    let last_low = order.iter().position(|n| *n == "low2").unwrap();
    assert!(
        urgent < last_low,
        "the urgent request waited behind low ones: {order:?}"
    );
    s.stop().await;
}

#[tokio::test]
async fn full_queues_refuse_and_waiting_too_long_expires() {
    let yaml = flow_yaml(
        "  queue: { ttl_ms: 300 }\ntenants:\n  policies:\n    - { name: a, max_queued_requests: 1 }\n",
    );
    let s = Setup::new(SLOW_SIM, &yaml).await;
    // The first runs ~400 ms; the second waits and expires at 300 ms; the third finds a's
    // queue share (1) full.
    let done = run_all(&s, &[("a", 80), ("a", 80), ("a", 80)]).await;
    let by_name = |n: &str| &done.iter().find(|(m, _, _)| m == n).unwrap().1;
    assert_eq!(by_name("a0").status, 200);
    dropped(by_name("a2"), "queue-full", "rejected-saturated");
    dropped(by_name("a1"), "ttl-expired", "rejected-ttl-expired");
    s.stop().await;
}

#[tokio::test]
async fn a_queued_request_whose_client_leaves_leaves_the_queue() {
    let s = Setup::new(SLOW_SIM, &flow_yaml("")).await;
    let addr = s.router.addr;
    let first = tokio::spawn(async move { as_tenant(addr, "a", 80).await });
    until_in_flight(s.router.admin_addr, 1.0).await;
    // Give up on the second one after 100 ms: it is still queued then.
    let gave_up = tokio::time::timeout(Duration::from_millis(100), as_tenant(addr, "a", 80)).await;
    assert!(gave_up.is_err(), "it should still have been waiting");
    let mut left = false;
    for _ in 0..50 {
        let m = router_metrics(s.router.admin_addr).await;
        if metric(&m, "warmpath_flow_queued_requests", &[]) == 0.0
            && metric(
                &m,
                "warmpath_flow_refused_total",
                &[("reason", "client-gone")],
            ) == 1.0
        {
            left = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(left, "{}", router_metrics(s.router.admin_addr).await);
    assert_eq!(first.await.unwrap().status, 200);
    // The slot it would have had is free: the next request is served directly.
    assert_eq!(as_tenant(addr, "a", 2).await.status, 200);
    s.stop().await;
}

async fn with_objective(addr: SocketAddr, tenant: &str, objective: &str) -> Reply {
    send(
        addr,
        "POST",
        "/v1/completions",
        &[
            ("x-warmpath-tenant", tenant),
            ("x-llm-d-inference-objective", objective),
        ],
        completion(&text(40, 200), 40),
    )
    .await
    .expect("answer")
}

#[tokio::test]
async fn a_high_priority_objective_goes_before_earlier_low_ones_of_the_same_tenant() {
    let yaml = flow_yaml(
        "objectives:\n  - { name: chat, priority: 10, models: [tiny] }\n  - { name: offline, priority: -1, models: [other-model] }\n  - { name: later, priority: 0 }\n",
    );
    let s = Setup::new(SLOW_SIM, &yaml).await;
    let addr = s.router.addr;
    // One tenant throughout: only the objective differs. The first request holds the one slot;
    // `later` ones queue in band 0; `chat` arrives last, in band 10.
    let sends = [
        "later", "later", "later", "later", "chat", "offline", "nonesuch",
    ];
    let done = finishing_order(s.router.admin_addr, &sends, |i| {
        with_objective(addr, "a", sends[i])
    })
    .await;
    let order: Vec<&str> = done.iter().map(|(n, _, _)| n.as_str()).collect();
    for (_, r, _) in &done {
        assert_eq!(r.status, 200, "{order:?}: {}", r.body);
    }
    let chat = order.iter().position(|n| *n == "chat4").unwrap();
    assert!(
        chat <= 1,
        "the high-priority objective waited behind earlier low ones: {order:?}"
    );
    let m = router_metrics(s.router.admin_addr).await;
    assert_eq!(
        metric(
            &m,
            "warmpath_flow_objective_requests_total",
            &[("objective", "chat"), ("priority", "10")]
        ),
        1.0,
        "{m}"
    );
    // `offline` is given for another model only, and `nonesuch` for none: both unknown here,
    // so they keep the tenant's priority (0) and are queued, not shed.
    assert_eq!(
        metric(&m, "warmpath_flow_unknown_objective_requests_total", &[]),
        2.0,
        "{m}"
    );
    assert_eq!(
        metric(&m, "warmpath_flow_dispatched_total", &[("tenant", "a")]),
        7.0,
        "the tenant is still the tenant: {m}"
    );
    s.stop().await;
}

#[tokio::test]
async fn a_negative_objective_is_shed_when_saturated() {
    let yaml = flow_yaml("objectives:\n  - { name: offline, priority: -1 }\n");
    let s = Setup::new(SLOW_SIM, &yaml).await;
    let addr = s.router.addr;
    let first = tokio::spawn(async move { as_tenant(addr, "a", 40).await });
    until_in_flight(s.router.admin_addr, 1.0).await;
    let shed = with_objective(addr, "a", "offline").await;
    dropped(&shed, "saturated", "rejected-saturated");
    assert!(shed.body.contains("priority -1"), "{}", shed.body);
    assert_eq!(first.await.unwrap().status, 200);
    // Not saturated: it goes straight on.
    assert_eq!(with_objective(addr, "a", "offline").await.status, 200);
    s.stop().await;
}

#[tokio::test]
async fn queued_work_over_its_share_waits_for_pending_prefills() {
    // Three slots; queued work of a tenant at or over its share goes only while no admitted
    // prompt token is still waiting for its first response byte (a bound of 1 token on the one
    // replica; these answers are not streamed, so a request counts until it ends).
    let yaml = flow_yaml("").replace(
        "max_inflight_requests: 1\n",
        "max_inflight_requests: 3\n    max_pending_prefill_tokens: 1\n",
    );
    let s = Setup::new(SLOW_SIM, &yaml).await;
    // `b` and `a` each hold a long request (about 2 s), a2 takes the third slot and a3 queues.
    // When a2 ends, a slot is free but a3 (a at its share of the slots: one of three, with b)
    // is held by the two pending prefills until they end.
    let done = run_all(&s, &[("b", 400), ("a", 400), ("a", 40), ("a", 40)]).await;
    for (_, r, _) in &done {
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let at = |name: &str| done.iter().find(|(n, _, _)| n == name).unwrap().2;
    assert!(
        at("a2") + Duration::from_millis(1000) < at("b0"),
        "a2 went straight on"
    );
    assert!(
        at("a3") >= at("b0") && at("a3") >= at("a1"),
        "a3 went while the long requests' prefills were pending"
    );
    let m = router_metrics(s.router.admin_addr).await;
    assert_eq!(
        metric(
            &m,
            "warmpath_flow_dispatched_total",
            &[("tenant", "a"), ("path", "queued")]
        ),
        1.0,
        "{m}"
    );
    s.stop().await;
}

/// Issue 34's burst: 600 requests at once at one slow replica (a batch of 16, each request
/// about a third of a second), flow control on with nothing configured but the queue's TTL.
/// The router learns the engine's batch and holds the rest in its own queue, where each
/// waits at most its TTL and is then answered 429 `ttl-expired`; those it let through run in
/// the engine's batch instead of queueing there. So no request is left unanswered past the
/// TTL plus one engine service time (and a margin for this machine). Without the learned
/// bound (`learn_inflight_requests: false`) the burst goes to the engine at once, which cannot
/// even take all its connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_at_one_slow_replica_is_answered_within_the_ttl_and_one_service_time() {
    const TTL: Duration = Duration::from_secs(2);
    let s = Setup::new(
        &[
            "--max-num-seqs",
            "16",
            "--decode-base-ms",
            "30",
            "--decode-per-seq-ms",
            "0",
        ],
        "flow:\n  enabled: true\n  queue: { ttl_ms: 2000 }\n",
    )
    .await;
    // A few scrapes: the engine has reported its (idle) load before the burst.
    until_scraped(s.router.admin_addr, 3.0).await;
    let addr = s.router.addr;
    let sends: Vec<_> = (0..600u64)
        .map(|i| {
            tokio::spawn(async move {
                // Each request's own wait: on a busy machine the burst itself takes a while
                // to be sent.
                let start = Instant::now();
                let r = send(
                    addr,
                    "POST",
                    "/v1/completions",
                    &[],
                    completion(&format!("burst {i}"), 10),
                )
                .await;
                (r, start.elapsed())
            })
        })
        .collect();
    let (mut served, mut expired, mut latest) = (0, 0, Duration::ZERO);
    for task in sends {
        let (r, took) = task.await.unwrap();
        let r = r.expect("every request is answered");
        latest = latest.max(took);
        match r.status {
            200 => served += 1,
            429 => {
                assert_eq!(
                    r.header("x-warmpath-dropped-reason"),
                    Some("ttl-expired"),
                    "{}",
                    r.body
                );
                expired += 1;
            }
            other => panic!("{other}: {}", r.body),
        }
    }
    // One service time is 10 tokens at 30 ms a step, about 0.35 s with the prefill; the rest
    // of the margin is for a 2-core machine running other tests beside this one (without the
    // learned bound the engine's own queue holds the burst for over 10 s).
    assert!(
        latest <= TTL + Duration::from_millis(2500),
        "a request waited {latest:?} for its answer ({served} served, {expired} expired)"
    );
    assert!(served >= 16, "{served} served");
    assert!(expired > 0, "the burst was all served in time? {served}");
    let m = router_metrics(s.router.admin_addr).await;
    let limit = metric(&m, "warmpath_replica_inflight_limit", &[("replica", "r0")]);
    // At most one doubling past the batch of 16: the bound grows while the router holds work
    // back and the engine has no queue, and falls to the batch only once a queue has persisted
    // over two scrapes; a burst may end (or a busy machine delay the scrapes) in between.
    assert!((1.0..=32.0).contains(&limit), "learned bound {limit}: {m}");
    s.stop().await;
}

/// The learned bound must not mistake the requests that wait for an engine's next step for a
/// full batch. An engine that runs 128 at once, sent waves of 192 requests through a router
/// with flow control on (nothing configured): the bound grows past what each step's newcomers
/// would have cut it to, toward the batch (it was stuck at 5 to 11 over sims that run 256
/// when every waiting request counted as a full batch).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_learned_bound_grows_toward_a_large_batch_through_waves_of_requests() {
    let s = Setup::new(
        &[
            "--max-num-seqs",
            "128",
            "--decode-base-ms",
            "10",
            "--decode-per-seq-ms",
            "0",
        ],
        "flow:\n  enabled: true\n  queue: { ttl_ms: 30000 }\n",
    )
    .await;
    until_scraped(s.router.admin_addr, 3.0).await;
    let addr = s.router.addr;
    let mut limits = Vec::new();
    for wave in 0..4u64 {
        let sends: Vec<_> = (0..192u64)
            .map(|i| {
                tokio::spawn(async move {
                    send(
                        addr,
                        "POST",
                        "/v1/completions",
                        &[],
                        // Output lengths spread so that requests end at different steps.
                        completion(&format!("wave {wave} request {i}"), 8 + (i % 24) as u32),
                    )
                    .await
                })
            })
            .collect();
        for task in sends {
            let r = task.await.unwrap().expect("answered");
            assert_eq!(r.status, 200, "{}", r.body);
        }
        let m = router_metrics(s.router.admin_addr).await;
        limits.push(metric(
            &m,
            "warmpath_replica_inflight_limit",
            &[("replica", "r0")],
        ));
    }
    assert!(
        limits.iter().any(|&l| l >= 64.0),
        "learned bounds after each wave {limits:?} never reached half the engine's batch"
    );
    s.stop().await;
}
