//! Benchmark: how long from a pod turning Ready to the router routing to it, with many pods in
//! one pool, on the real API server with the real controller (release build) and a router in
//! Kubernetes mode (in this process); and the controller's memory.
//!
//! ```text
//! e2e/cluster/with-cluster.sh cargo run --release -p warmpath-e2e --example ready_to_routable -- 1000
//! ```
//!
//! Phases, with N pods (default 1,000) in one pool:
//! 1. rollout: all N pods are marked Ready as fast as the API server takes the patches
//!    (16 in flight); latency per pod = first time the router's table holds it − its patch's
//!    answer;
//! 2. steady: with the pool full, 100 pods are marked unready and Ready again, one every 50 ms;
//!    the same latency, plus unready → out of the table;
//! 3. controller memory: VmHWM (peak RSS) and VmRSS from /proc.
//!
//! Pods point at addresses nothing listens on; the pool turns metrics scraping off, so the
//! router's table (not a health check) is what is measured.

use futures_util::stream::{self, StreamExt};
use kube::api::{Api, PostParams};
use kube::runtime::WatchStreamExt;
use serde_json::json;
use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use warmpath_api::v1::{InferencePool, InferenceReplica};
use warmpath_e2e::{controller_command, workspace_bin_release, KillOnDrop, TestNamespace};
use warmpath_router::config::Config;
use warmpath_router::kubernetes::Discovery;
use warmpath_router::{Options, RouterHandle};

const PORT: u16 = 8000;

fn ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, 77, (i / 250) as u8, (i % 250) as u8 + 2)
}

async fn set_ready(client: &kube::Client, ns: &str, i: usize, ready: bool) -> Instant {
    warmpath_e2e::set_pod_status(client, ns, &format!("p-{i}"), &ip(i).to_string(), ready)
        .await
        .expect("patch pod status");
    Instant::now()
}

/// url → first time seen in / last time absent from the router's table, sampled every 1 ms.
#[derive(Default)]
struct Seen {
    present_since: HashMap<String, Instant>,
    absent_since: HashMap<String, Instant>,
}

fn watch_table(
    router: &RouterHandle,
    seen: Arc<Mutex<Seen>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    let tables = router.tables();
    tokio::spawn(async move {
        let mut last: Option<usize> = None;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let table = tables.current();
            let ptr = Arc::as_ptr(&table) as usize;
            if last != Some(ptr) {
                last = Some(ptr);
                let now = Instant::now();
                let urls: std::collections::HashSet<String> = table
                    .candidates("tiny")
                    .map(|cs| cs.iter().map(|c| c.replica.url.clone()).collect())
                    .unwrap_or_default();
                let mut s = seen.lock().unwrap();
                for u in &urls {
                    s.present_since.entry(u.clone()).or_insert(now);
                    s.absent_since.remove(u);
                }
                let gone: Vec<String> = s
                    .present_since
                    .keys()
                    .filter(|u| !urls.contains(*u))
                    .cloned()
                    .collect();
                for u in gone {
                    s.present_since.remove(&u);
                    s.absent_since.insert(u, now);
                }
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
}

fn url(i: usize) -> String {
    format!("http://{}:{PORT}", ip(i))
}

fn summary(label: &str, mut ms: Vec<f64>) {
    ms.sort_by(f64::total_cmp);
    let q = |p: f64| ms[((ms.len() as f64 * p).ceil() as usize).clamp(1, ms.len()) - 1];
    println!(
        "{label}: n={} p50={:.0} ms p90={:.0} ms p99={:.0} ms max={:.0} ms",
        ms.len(),
        q(0.5),
        q(0.9),
        q(0.99),
        ms[ms.len() - 1]
    );
}

fn vm(pid: u32, key: &str) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(key))
        .map(|l| l[key.len()..].trim().to_owned())
        .unwrap_or_else(|| "?".into())
}

async fn wait_until(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .map_or(1000, |a| a.parse().expect("pod count"));
    assert!((100..=60_000).contains(&n), "between 100 and 60000 pods");
    let ns = TestNamespace::create("scale")
        .await
        .expect("the test cluster");
    let cluster = ns.cluster();
    cluster
        .apply_crds(&warmpath_e2e::repo_root().join("crds"))
        .expect("CRDs");
    let client = ns.client();
    let name = ns.name().to_owned();

    let bin = workspace_bin_release("warmpath-controller").expect("build the controller");
    let controller = KillOnDrop::spawn(&mut controller_command(
        &bin,
        cluster.kubeconfig(),
        &name,
        "bench-0",
    ))
    .expect("start the controller");
    let config = Config::parse("listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\npools: []\n").unwrap();
    let router = warmpath_router::start(
        config,
        Options {
            kubernetes: Some(Discovery {
                client: client.clone(),
                namespaces: vec![name.clone()],
                secret_namespaces: vec![name.clone()],
                boundaries: warmpath_e2e::test_boundaries(),
            }),
            ..Default::default()
        },
    )
    .await
    .expect("router");

    let pool: InferencePool = serde_json::from_value(json!({
        "apiVersion": "warmpath.dev/v1", "kind": "InferencePool",
        "metadata": { "name": "big", "namespace": name },
        "spec": { "models": ["tiny"], "selector": { "app": "big" }, "targetPort": PORT,
                  "metrics": { "enabled": false } },
    }))
    .unwrap();
    Api::<InferencePool>::namespaced(client.clone(), &name)
        .create(&PostParams::default(), &pool)
        .await
        .unwrap();
    let created = Instant::now();
    stream::iter(0..n)
        .for_each_concurrent(16, |i| {
            let (client, name) = (&client, &name);
            async move {
                warmpath_e2e::create_pod(client, name, &format!("p-{i}"), "big")
                    .await
                    .expect("create pod");
            }
        })
        .await;
    println!("{n} pods created in {:?}", created.elapsed());

    let seen = Arc::new(Mutex::new(Seen::default()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = watch_table(&router, seen.clone(), stop.clone());
    // When each InferenceReplica reaches a watcher of its own: splits the latency into the
    // controller's part and the router's.
    let created: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let replica_watch = {
        let created = created.clone();
        let api: Api<InferenceReplica> = Api::namespaced(client.clone(), &name);
        tokio::spawn(async move {
            let mut events =
                std::pin::pin!(kube::runtime::watcher(api, Default::default()).applied_objects());
            while let Some(Ok(r)) = events.next().await {
                created
                    .lock()
                    .unwrap()
                    .entry(r.spec.url())
                    .or_insert_with(Instant::now);
            }
        })
    };

    // 1. rollout
    let start = Instant::now();
    let patched: Vec<(usize, Instant)> = stream::iter(0..n)
        .map(|i| {
            let (client, name) = (&client, &name);
            async move { (i, set_ready(client, name, i, true).await) }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    let patching = start.elapsed();
    wait_until("every pod routable", Duration::from_secs(120), || {
        seen.lock().unwrap().present_since.len() == n
    })
    .await;
    println!(
        "rollout: {n} Ready patches in {patching:?} ({:.0}/s); all routable {:?} after the first",
        n as f64 / patching.as_secs_f64(),
        start.elapsed()
    );
    let lat: Vec<f64> = {
        let s = seen.lock().unwrap();
        patched
            .iter()
            .map(|(i, t)| {
                s.present_since[&url(*i)]
                    .saturating_duration_since(*t)
                    .as_secs_f64()
                    * 1e3
            })
            .collect()
    };
    summary("rollout, pod Ready -> routable", lat);
    let (to_replica, to_route): (Vec<f64>, Vec<f64>) = {
        let s = seen.lock().unwrap();
        let c = created.lock().unwrap();
        patched
            .iter()
            .filter_map(|(i, t)| {
                let made = *c.get(&url(*i))?;
                Some((
                    made.saturating_duration_since(*t).as_secs_f64() * 1e3,
                    s.present_since[&url(*i)]
                        .saturating_duration_since(made)
                        .as_secs_f64()
                        * 1e3,
                ))
            })
            .unzip()
    };
    summary(
        "rollout, pod Ready -> InferenceReplica in a watch",
        to_replica,
    );
    summary("rollout, InferenceReplica in a watch -> routable", to_route);

    // 2. steady state: one pod flaps every 50 ms while the pool is full.
    let mut down = Vec::new();
    let mut up = Vec::new();
    for k in 0..100 {
        let i = (k * 7919) % n;
        let t = set_ready(&client, &name, i, false).await;
        let u = url(i);
        wait_until("unready pod out", Duration::from_secs(30), || {
            seen.lock().unwrap().absent_since.contains_key(&u)
        })
        .await;
        down.push(
            seen.lock().unwrap().absent_since[&u]
                .saturating_duration_since(t)
                .as_secs_f64()
                * 1e3,
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        let t = set_ready(&client, &name, i, true).await;
        wait_until("ready pod in", Duration::from_secs(30), || {
            seen.lock().unwrap().present_since.contains_key(&u)
        })
        .await;
        up.push(
            seen.lock().unwrap().present_since[&u]
                .saturating_duration_since(t)
                .as_secs_f64()
                * 1e3,
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    summary(
        &format!("steady ({n} in the pool), pod Ready -> routable"),
        up,
    );
    summary(
        &format!("steady ({n} in the pool), pod unready -> not routed"),
        down,
    );
    println!(
        "controller (pid {}): VmHWM {} VmRSS {}; router table rebuilds {}",
        controller.id(),
        vm(controller.id(), "VmHWM:"),
        vm(controller.id(), "VmRSS:"),
        router.metrics().kubernetes.table_rebuilds.get()
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    watcher.await.unwrap();
    replica_watch.abort();
    drop(controller);
    router.shutdown().await;
    ns.finish();
}
