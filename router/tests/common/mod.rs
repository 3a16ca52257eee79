//! Helpers for the router's loopback integration tests: simulator replicas in-process, a router
//! in-process on port 0, and a small HTTP client.
#![allow(dead_code)]

use bytes::Bytes;
use clap::Parser;
use std::net::SocketAddr;
use std::time::Duration;
use warmpath_router::{config::Config, Options, RouterHandle};
use warmpath_sim::{Cli, SimHandle};

/// Simulator replicas on ports chosen by the OS.
pub async fn sim(args: &[&str]) -> SimHandle {
    let mut all = vec!["warmpath-sim", "--listen", "127.0.0.1:0"];
    all.extend_from_slice(args);
    let cli = Cli::try_parse_from(all).expect("sim flags");
    warmpath_sim::start(&cli).await.expect("sim start")
}

/// A configuration with one pool `p` serving `model` from `addrs` (replicas `r0`, `r1`, …),
/// plus `extra` top-level YAML.
pub fn config_yaml(model: &str, addrs: &[SocketAddr], extra: &str) -> String {
    let mut y = String::from("listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\npools:\n");
    y.push_str(&format!(
        "  - name: p\n    models: [{model}]\n    replicas:\n"
    ));
    for (i, a) in addrs.iter().enumerate() {
        y.push_str(&format!("      - {{ name: r{i}, url: \"http://{a}\" }}\n"));
    }
    y.push_str(extra);
    y
}

/// A file holding `token` in a folder of this test process's own (`tag` names it), for the
/// configuration's token files; its path as the YAML quotes it.
pub fn token_file(tag: &str, token: &str) -> String {
    let dir = std::env::temp_dir().join(format!("warmpath-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("token");
    std::fs::write(&file, format!("{token}\n")).unwrap();
    format!("{:?}", file.display().to_string())
}

pub async fn router(yaml: &str) -> RouterHandle {
    let config = Config::parse(yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
    warmpath_router::start(config, Options::default())
        .await
        .expect("router start")
}

/// Router and simulator together; replicas are named `r0..rN` in port order.
pub struct Setup {
    pub sim: SimHandle,
    pub router: RouterHandle,
}

impl Setup {
    pub async fn new(sim_args: &[&str], extra_yaml: &str) -> Setup {
        let sim = sim(sim_args).await;
        let router = router(&config_yaml("tiny", &sim.addrs(), extra_yaml)).await;
        wait_ready(router.admin_addr).await;
        Setup { sim, router }
    }

    pub fn replica_addr(&self, name: &str) -> SocketAddr {
        let i: usize = name.trim_start_matches('r').parse().expect("replica name");
        self.sim.addrs()[i]
    }

    /// Set (or `{"clear": true}`) faults on one simulated replica through its admin endpoint.
    pub async fn fault(&self, replica: &str, faults: &str) {
        let r = post(self.replica_addr(replica), "/admin/faults", faults).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }

    pub async fn stop(mut self) {
        self.router.shutdown().await;
        self.sim.shutdown();
    }
}

/// Wait until `/readyz` says every… at least one replica is ready (scrapes have run).
pub async fn wait_ready(admin: SocketAddr) {
    for _ in 0..100 {
        if let Ok(r) = get(admin, "/readyz").await {
            if r.status == 200 {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("router never became ready");
}

#[allow(unused_imports)]
pub use warmpath_testkit::{client, finishing_order, free_ports, Reply};

/// [`warmpath_testkit::send`] with a 20 s limit.
pub async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
) -> Result<Reply, String> {
    warmpath_testkit::send(addr, method, path, headers, body, Duration::from_secs(20)).await
}

pub async fn post(addr: SocketAddr, path: &str, body: &str) -> Reply {
    send(addr, "POST", path, &[], body.to_owned())
        .await
        .unwrap_or_else(|e| panic!("POST {path}: {e}"))
}

pub async fn get(addr: SocketAddr, path: &str) -> Result<Reply, String> {
    send(addr, "GET", path, &[], Bytes::new()).await
}

pub fn completion(prompt: &str, max_tokens: u32) -> String {
    serde_json::json!({"model": "tiny", "prompt": prompt, "max_tokens": max_tokens}).to_string()
}

#[allow(unused_imports)]
pub use warmpath_testkit::{has_metric, metric};

pub async fn router_metrics(admin: SocketAddr) -> String {
    get(admin, "/metrics").await.expect("metrics").body
}

/// Poll the router's metrics until the sum of the series `name{labels}` satisfies `ok` (for at
/// most 10 s, then fail with the page), and return that page: tests order their steps by what
/// the router has observably done, never by a bare sleep.
pub async fn until_metric(
    admin: SocketAddr,
    name: &str,
    labels: &[(&str, &str)],
    ok: impl Fn(f64) -> bool,
) -> String {
    until_metric_every(admin, name, labels, ok, Duration::from_millis(10)).await
}

/// [`until_metric`], polling every `every`.
async fn until_metric_every(
    admin: SocketAddr,
    name: &str,
    labels: &[(&str, &str)],
    ok: impl Fn(f64) -> bool,
    every: Duration,
) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let m = router_metrics(admin).await;
        if ok(metric(&m, name, labels)) {
            return m;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{name}{labels:?} never got there:\n{m}"
        );
        tokio::time::sleep(every).await;
    }
}

/// Replica choices the router has made, of any reason (`warmpath_decisions_total`: counted
/// once the request is bound to its replica, in flight there and its pending blocks noted).
pub async fn decisions(admin: SocketAddr) -> f64 {
    metric(
        &router_metrics(admin).await,
        "warmpath_decisions_total",
        &[],
    )
}

/// Until the router has made `n` choices in all: the next request of a burst sent after this
/// meets the load and pending blocks of the ones before, as requests microseconds apart do on
/// a router that chose each in that time. Polls every millisecond, so that waiting keeps the
/// burst nearly as tight as the router allows.
pub async fn until_decisions(admin: SocketAddr, n: f64) -> String {
    until_metric_every(
        admin,
        "warmpath_decisions_total",
        &[],
        |v| v >= n,
        Duration::from_millis(1),
    )
    .await
}

/// Until the router holds `n` requests in flight (over its replicas): they have been admitted
/// and sent on.
pub async fn until_in_flight(admin: SocketAddr, n: f64) -> String {
    until_metric(admin, "warmpath_inflight_requests", &[], |v| v >= n).await
}

/// Until every engine has been scraped successfully at least `n` times over all (their idle
/// load is known before what the test sends).
pub async fn until_scraped(admin: SocketAddr, n: f64) -> String {
    until_metric(
        admin,
        "warmpath_engine_scrapes_total",
        &[("result", "ok")],
        |v| v >= n,
    )
    .await
}

/// A prompt of about `bytes` bytes, deterministic per `seed`.
pub fn text(seed: u64, bytes: usize) -> String {
    let mut s = String::with_capacity(bytes + 16);
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    while s.len() < bytes {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.push_str(["alpha ", "beta ", "gamma ", "delta ", "eps ", "zeta "][(x % 6) as usize]);
    }
    s.truncate(bytes);
    s
}

/// How well the router's predicted cached tokens (`x-warmpath-cached-tokens`, with
/// `response_headers.decision`) agree with the engine's own (`usage.prompt_tokens_details`).
#[derive(Debug, Default)]
pub struct Agreement {
    pub exact: usize,
    pub total: usize,
    /// (request, predicted, engine) where they differ.
    pub misses: Vec<(u64, u64, u64)>,
}

impl Agreement {
    pub fn assert_at_least(&self, percent: usize) {
        assert!(
            self.exact * 100 >= self.total * percent,
            "{} of {} exact: {:?}",
            self.exact,
            self.total,
            self.misses
        );
    }
}

/// The router's predicted cached tokens (`x-warmpath-cached-tokens`; `u64::MAX` when absent)
/// and the engine's own (`usage.prompt_tokens_details.cached_tokens`) for one answer.
pub fn cached_tokens(r: &Reply) -> (u64, u64) {
    let predicted = r
        .header("x-warmpath-cached-tokens")
        .and_then(|v| v.parse().ok())
        .unwrap_or(u64::MAX);
    let actual = r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap_or(0);
    (predicted, actual)
}

/// A seeded mix of `n` chat and completion requests for `models` (taken in turn every third
/// request) over four shared system prompts of `system_bytes` each, sent one at a time through
/// the router `rt`, each once the KV events of the one before have reached the router (as they
/// would between requests of a real workload that are not simultaneous).
pub async fn cached_token_agreement(
    rt: &RouterHandle,
    models: &[&str],
    n: u64,
    system_bytes: usize,
    question_bytes: usize,
) -> Agreement {
    let stored = |page: &str| metric(page, "warmpath_kv_events_total", &[("kind", "stored")]);
    let systems: Vec<String> = (0..4).map(|g| text(100 + g, system_bytes)).collect();
    let mut a = Agreement::default();
    for i in 0..n {
        let system = &systems[(i * 7 % 4) as usize];
        let question = text(1000 + i, question_bytes);
        let model = models[(i / 3) as usize % models.len()];
        let (path, body) = if i % 2 == 0 {
            (
                "/v1/chat/completions",
                serde_json::json!({"model": model, "max_tokens": 2, "messages": [
                    {"role": "system", "content": system},
                    {"role": "user", "content": question}]}),
            )
        } else {
            (
                "/v1/completions",
                serde_json::json!({"model": model, "max_tokens": 2, "prompt": format!("{system}{question}")}),
            )
        };
        let before = stored(&router_metrics(rt.admin_addr).await);
        let r = post(rt.addr, path, &body.to_string()).await;
        assert_eq!(r.status, 200, "{}", r.body);
        let (predicted, actual) = cached_tokens(&r);
        a.total += 1;
        if predicted == actual {
            a.exact += 1;
        } else {
            a.misses.push((i, predicted, actual));
        }
        // Each request stores blocks of its own (its question is new and spans more than a
        // block), and the engine publishes a prompt's new blocks in one message, which the
        // router applies whole under its index's lock: one more stored event counted means
        // the next request is chosen against all of them.
        until_metric(
            rt.admin_addr,
            "warmpath_kv_events_total",
            &[("kind", "stored")],
            |v| v > before,
        )
        .await;
    }
    a
}
