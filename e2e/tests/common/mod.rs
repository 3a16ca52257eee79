//! Helpers for the tests that route real traffic through a router in Kubernetes mode:
//! simulator replicas listening on loopback addresses that stand in for pod IPs, pods created
//! as objects and marked Ready by patching their status (no kubelet runs), warmpath objects,
//! and a small HTTP client.
#![allow(dead_code)]

use clap::Parser;
use kube::api::{Api, PostParams};
use serde_json::json;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};
use warmpath_api::v1::{InferencePool, InferenceReplica};
use warmpath_router::kubernetes::Discovery;
use warmpath_router::{config::Config, Options, RouterHandle};
use warmpath_sim::SimHandle;

/// Simulator replicas, one per address, all on the same port (as pods of one Deployment are):
/// 127.<a>.<b>.2, .3, … with `a.b` random so concurrent tests do not collide.
pub struct Pods {
    pub sims: Vec<SimHandle>,
    pub ips: Vec<IpAddr>,
    pub port: u16,
}

pub async fn sim_pods(n: usize) -> Pods {
    sim_pods_with(n, &[]).await
}

/// [`sim_pods`] with more simulator flags (`extra`).
pub async fn sim_pods_with(n: usize, extra: &[&str]) -> Pods {
    'retry: for _ in 0..20 {
        let a: u8 = rand::random_range(1..=250);
        let b: u8 = rand::random_range(1..=250);
        let port: u16 = rand::random_range(20000..60000);
        let mut sims = Vec::new();
        let mut ips = Vec::new();
        for i in 0..n {
            let ip: IpAddr = format!("127.{a}.{b}.{}", i + 2).parse().unwrap();
            let listen = SocketAddr::new(ip, port).to_string();
            let args = ["warmpath-sim", "--listen", &listen, "--model", "tiny"];
            let cli =
                warmpath_sim::Cli::try_parse_from(args.iter().chain(extra)).expect("sim flags");
            match warmpath_sim::start(&cli).await {
                Ok(s) => {
                    sims.push(s);
                    ips.push(ip);
                }
                Err(_) => continue 'retry, // port taken on one address: try another
            }
        }
        return Pods { sims, ips, port };
    }
    panic!("no free port for the simulator replicas after 20 tries");
}

/// An InferencePool serving `tiny` from pods labelled `app=<label>` on `port`.
pub async fn create_pool(
    client: &kube::Client,
    ns: &str,
    name: &str,
    label: Option<&str>,
    port: u16,
) {
    let mut spec = json!({ "models": ["tiny"] });
    if let Some(label) = label {
        spec["selector"] = json!({ "app": label });
        spec["targetPort"] = json!(port);
    }
    let pool: InferencePool = serde_json::from_value(json!({
        "apiVersion": "warmpath.dev/v1", "kind": "InferencePool",
        "metadata": { "name": name, "namespace": ns }, "spec": spec,
    }))
    .unwrap();
    Api::<InferencePool>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pool)
        .await
        .expect("create pool");
}

/// A hand-written InferenceReplica (an endpoint outside the cluster).
pub async fn create_replica(
    client: &kube::Client,
    ns: &str,
    name: &str,
    pool: &str,
    addr: SocketAddr,
) {
    let r: InferenceReplica = serde_json::from_value(json!({
        "apiVersion": "warmpath.dev/v1", "kind": "InferenceReplica",
        "metadata": { "name": name, "namespace": ns },
        "spec": { "pool": pool, "address": addr.ip().to_string(), "port": addr.port() },
    }))
    .unwrap();
    Api::<InferenceReplica>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &r)
        .await
        .expect("create replica");
}

/// [`warmpath_e2e::create_pod`].
pub async fn create_pod(client: &kube::Client, ns: &str, name: &str, label: &str) {
    warmpath_e2e::create_pod(client, ns, name, label)
        .await
        .expect("create pod");
}

/// [`warmpath_e2e::set_pod_status`] with an address.
pub async fn set_pod_ready(client: &kube::Client, ns: &str, name: &str, ip: IpAddr, ready: bool) {
    warmpath_e2e::set_pod_status(client, ns, name, &ip.to_string(), ready)
        .await
        .expect("patch pod status");
}

/// A router in-process in Kubernetes mode, watching `ns`, with no pools of its own.
pub async fn k8s_router(client: &kube::Client, ns: &str) -> RouterHandle {
    k8s_router_with(client, ns, "").await
}

/// [`k8s_router`] with more configuration (`extra`, top-level YAML).
pub async fn k8s_router_with(client: &kube::Client, ns: &str, extra: &str) -> RouterHandle {
    let config = Config::parse(&format!(
        "listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\npools: []\n{extra}"
    ))
    .unwrap();
    warmpath_router::start(
        config,
        Options {
            kubernetes: Some(Discovery {
                client: client.clone(),
                namespaces: vec![ns.to_owned()],
                secret_namespaces: vec![ns.to_owned()],
                boundaries: warmpath_e2e::test_boundaries(),
            }),
            ..Default::default()
        },
    )
    .await
    .expect("router start")
}

/// Replica names in the router's current table for `tiny`.
pub fn routed(router: &RouterHandle) -> Vec<String> {
    let table = router.table();
    let mut names: Vec<String> = table
        .candidates("tiny")
        .map(|cs| cs.iter().map(|c| c.replica.name.to_string()).collect())
        .unwrap_or_default();
    names.sort();
    names
}

/// Poll `f` every 10 ms until it holds; returns the time it took, panics after `limit`.
pub async fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !f() {
        if start.elapsed() > limit {
            panic!("timed out after {limit:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    start.elapsed()
}

#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub replica: Option<String>,
    pub body: String,
}

/// POST a completion for `prompt` (a few tokens of output) to the router.
pub async fn complete(addr: SocketAddr, prompt: &str) -> Result<Reply, String> {
    completion(
        addr,
        json!({ "model": "tiny", "prompt": prompt, "max_tokens": 2 }),
    )
    .await
}

/// [`complete`], streamed: the reply's body is the server-sent events, `[DONE]` last.
pub async fn complete_streamed(addr: SocketAddr, prompt: &str) -> Result<Reply, String> {
    completion(
        addr,
        json!({ "model": "tiny", "prompt": prompt, "max_tokens": 4, "stream": true }),
    )
    .await
}

async fn completion(addr: SocketAddr, body: serde_json::Value) -> Result<Reply, String> {
    let r = warmpath_testkit::send(
        addr,
        "POST",
        "/v1/completions",
        &[],
        body.to_string(),
        Duration::from_secs(10),
    )
    .await?;
    Ok(Reply {
        status: r.status,
        replica: r.header("x-warmpath-replica").map(str::to_owned),
        body: r.body,
    })
}

/// A completion sent with `Authorization: Bearer <key>` (or none): the status.
pub async fn status_with_key(addr: SocketAddr, key: Option<&str>) -> u16 {
    let auth = key.map(|k| format!("Bearer {k}"));
    let headers: Vec<(&str, &str)> = auth
        .as_deref()
        .map(|a| vec![("authorization", a)])
        .unwrap_or_default();
    let body = serde_json::json!({ "model": "tiny", "prompt": "hello tenants", "max_tokens": 2 });
    warmpath_testkit::send(
        addr,
        "POST",
        "/v1/completions",
        &headers,
        body.to_string(),
        Duration::from_secs(10),
    )
    .await
    .expect("router answers")
    .status
}

/// A prompt of about `bytes` bytes that shares nothing with prompts of other `seed`s.
pub fn prompt(seed: u64, bytes: usize) -> String {
    let mut s = String::with_capacity(bytes + 32);
    let mut i = 0u64;
    while s.len() < bytes {
        s.push_str(&format!("doc{seed} part{i} lorem ipsum dolor sit amet. "));
        i += 1;
    }
    s
}

/// The warmpath-controller binary (see [`warmpath_e2e::controller_command`]).
pub fn start_controller(
    cluster: &warmpath_e2e::TestCluster,
    ns: &str,
    identity: &str,
) -> warmpath_e2e::KillOnDrop {
    let bin = warmpath_e2e::workspace_bin("warmpath-controller").expect("build controller");
    let mut cmd = warmpath_e2e::controller_command(&bin, cluster.kubeconfig(), ns, identity);
    // Its log goes to a file, not into the test output (named so a failure can be followed up).
    let log = std::env::temp_dir().join(format!("warmpath-e2e-{ns}-{identity}.log"));
    let file = std::fs::File::create(&log).expect("controller log file");
    cmd.stdout(file.try_clone().unwrap()).stderr(file);
    eprintln!("controller {identity} logs to {}", log.display());
    warmpath_e2e::KillOnDrop::spawn(&mut cmd).expect("start controller")
}

/// Apply the repository's CRDs (idempotent; concurrent tests agree on the field manager).
pub fn apply_crds(cluster: &warmpath_e2e::TestCluster) {
    cluster
        .apply_crds(&warmpath_e2e::repo_root().join("crds"))
        .expect("apply CRDs");
}

/// `vllm:request_success_total` of one simulator replica: requests it finished.
pub async fn served(addr: SocketAddr) -> f64 {
    let (_, text) = get(addr, "/metrics").await;
    warmpath_testkit::metric(&text, "vllm:request_success_total", &[])
}

/// The tenant policy named `name` (`namespace/name`) as the router's table holds it.
pub fn table_policy(
    router: &RouterHandle,
    name: &str,
) -> Option<warmpath_router::config::TenantPolicyConfig> {
    let table = router.table();
    table
        .config
        .tenants
        .policies
        .iter()
        .find(|t| t.name == name)
        .cloned()
}

/// GET `path` from `addr`: status and body.
pub async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    try_get(addr, path).await.expect("GET")
}

/// [`get`], with connection errors and a 5 s timeout as `Err`.
pub async fn try_get(addr: SocketAddr, path: &str) -> Result<(u16, String), String> {
    let r = warmpath_testkit::send(addr, "GET", path, &[], "", Duration::from_secs(5)).await?;
    Ok((r.status, r.body))
}

/// [`try_get`] every 100 ms until it answers 200, at most `tries` times: the last answer.
pub async fn get_until_ok(
    addr: SocketAddr,
    path: &str,
    tries: usize,
) -> Result<(u16, String), String> {
    let mut last = Err("not asked yet".to_owned());
    for _ in 0..tries {
        last = try_get(addr, path).await;
        if matches!(last, Ok((200, _))) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    last
}

/// The Gateway API Inference Extension's InferencePool CRD (`e2e/fixtures/gie/`, taken from
/// GIE's Go module), installed once it is served (the controller decides at start whether to
/// watch GIE pools from discovery).
pub async fn apply_gie_crd(cluster: &warmpath_e2e::TestCluster, client: &kube::Client) {
    apply_foreign_crd(
        cluster,
        client,
        "gie",
        "inference.networking.k8s.io/v1",
        "inferencepools",
    )
    .await
}

/// llm-d's InferenceObjective CRD (`e2e/fixtures/llm-d/`), installed once it is served (the
/// router decides at start whether to watch InferenceObjectives from discovery).
pub async fn apply_llmd_objective_crd(cluster: &warmpath_e2e::TestCluster, client: &kube::Client) {
    apply_foreign_crd(
        cluster,
        client,
        "llm-d",
        "llm-d.ai/v1alpha2",
        "inferenceobjectives",
    )
    .await
}

/// Another project's CRD from `e2e/fixtures/<fixture>/`: applied and Established
/// ([`warmpath_e2e::TestCluster::apply_crds`]), then listed by API discovery under
/// `group_version` (what the watching component checks at start).
async fn apply_foreign_crd(
    cluster: &warmpath_e2e::TestCluster,
    client: &kube::Client,
    fixture: &str,
    group_version: &str,
    plural: &str,
) {
    cluster
        .apply_crds(&warmpath_e2e::repo_root().join("e2e/fixtures").join(fixture))
        .unwrap_or_else(|e| panic!("apply the CRD in e2e/fixtures/{fixture}: {e}"));
    let start = Instant::now();
    loop {
        let served = client
            .list_api_group_resources(group_version)
            .await
            .is_ok_and(|l| l.resources.iter().any(|r| r.name == plural));
        if served {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{group_version} {plural} not in API discovery after 30 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
