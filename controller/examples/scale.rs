//! Benchmark: the controller at scale on the real test API server. One pool, N pods (default
//! 1,000) created as objects and marked Ready in bulk (16 patches in flight), then a steady
//! phase that flips 100 pods unready and Ready again one every 50 ms. Reports, per pod, the
//! time from the answer to its status patch to the InferenceReplica's appearance (or removal)
//! as seen by a watch, and the controller process's peak RSS (VmHWM).
//!
//! ```text
//! cd /work/main && bash e2e/cluster/with-cluster.sh \
//!     cargo run --release -p warmpath-controller --example scale -- 1000
//! ```

use futures_util::stream::{self, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::json;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use warmpath_api::v1alpha1::{InferencePool, InferenceReplica};
use warmpath_e2e::{controller_command, repo_root, workspace_bin_release, KillOnDrop, TestNamespace};

const IN_FLIGHT: usize = 16;

fn ip(i: usize) -> String {
    format!("127.88.{}.{}", i / 250, i % 250 + 2)
}

async fn set_ready(pods: &Api<Pod>, i: usize, ready: bool) -> Instant {
    pods.patch_status(
        &format!("engine-{i}"),
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {
            "phase": "Running",
            "podIP": ip(i),
            "podIPs": [{"ip": ip(i)}],
            "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}],
        }})),
    )
    .await
    .expect("patch pod status");
    Instant::now()
}

/// First time each pod's replica was seen present, and absent, by the watch.
#[derive(Default)]
struct Seen {
    present: HashMap<String, Instant>,
    absent: HashMap<String, Instant>,
}

fn percentiles(name: &str, mut ms: Vec<f64>) {
    if ms.is_empty() {
        println!("{name}: no samples");
        return;
    }
    ms.sort_by(f64::total_cmp);
    let p = |q: f64| ms[((ms.len() as f64 - 1.0) * q).round() as usize];
    println!(
        "{name}: n={} p50={:.1} ms p90={:.1} ms p99={:.1} ms max={:.1} ms",
        ms.len(),
        p(0.5),
        p(0.9),
        p(0.99),
        ms[ms.len() - 1]
    );
}

fn memory(pid: u32) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .filter(|l| l.starts_with("VmHWM") || l.starts_with("VmRSS"))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join(", ")
}

async fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::main]
async fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("pod count"))
        .unwrap_or(1000);
    assert!((10..=60_000).contains(&n), "between 10 and 60000 pods");
    let Some(ns) = TestNamespace::create("controller-scale").await else {
        return;
    };
    ns.cluster()
        .apply_crds(&repo_root().join("crds"))
        .expect("apply CRDs");
    let (c, name) = (ns.client(), ns.name().to_owned());
    let bin = workspace_bin_release("warmpath-controller").expect("build the controller");
    let log = ns.scratch_dir().join("controller.log");
    let mut cmd = controller_command(&bin, ns.cluster().kubeconfig(), &name, "scale-0");
    cmd.env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"));
    let controller = KillOnDrop::spawn(&mut cmd).expect("start the controller");
    let pid = controller.id();

    let pools: Api<InferencePool> = Api::namespaced(c.clone(), &name);
    let pool: InferencePool = serde_json::from_value(json!({
        "apiVersion": "warmpath.dev/v1alpha1",
        "kind": "InferencePool",
        "metadata": {"name": "big"},
        "spec": {"models": ["tiny"], "selector": {"app": "engine"}, "targetPort": 8000}
    }))
    .expect("pool");
    pools
        .create(&PostParams::default(), &pool)
        .await
        .expect("create pool");

    let pods: Api<Pod> = Api::namespaced(c.clone(), &name);
    let t = Instant::now();
    stream::iter(0..n)
        .map(|i| {
            let pods = pods.clone();
            async move {
                let pod: Pod = serde_json::from_value(json!({
                    "metadata": {"name": format!("engine-{i}"), "labels": {"app": "engine"}},
                    "spec": {"nodeName": "fake-node", "containers": [{"name": "engine", "image": "vllm"}]}
                }))
                .expect("pod");
                pods.create(&PostParams::default(), &pod)
                    .await
                    .expect("create pod");
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .collect::<()>()
        .await;
    println!("created {n} pods in {:?}", t.elapsed());
    tokio::time::sleep(Duration::from_secs(2)).await;
    println!("controller with {n} unready pods: {}", memory(pid));

    let seen = Arc::new(Mutex::new(Seen::default()));
    let replicas: Api<InferenceReplica> = Api::namespaced(c.clone(), &name);
    let watch_seen = seen.clone();
    let watch = tokio::spawn(async move {
        let mut events = watcher(replicas, watcher::Config::default()).boxed();
        while let Some(ev) = events.next().await {
            let now = Instant::now();
            let mut seen = watch_seen.lock().unwrap();
            match ev {
                Ok(watcher::Event::Apply(r) | watcher::Event::InitApply(r)) => {
                    if let Some(pod) = r.spec.pod {
                        seen.present.entry(pod.clone()).or_insert(now);
                        seen.absent.remove(&pod);
                    }
                }
                Ok(watcher::Event::Delete(r)) => {
                    if let Some(pod) = r.spec.pod {
                        seen.absent.entry(pod.clone()).or_insert(now);
                        seen.present.remove(&pod);
                    }
                }
                _ => {}
            }
        }
    });

    // Rollout: every pod Ready, as fast as the API server takes it.
    let t = Instant::now();
    let patched: Vec<(usize, Instant)> = stream::iter(0..n)
        .map(|i| {
            let pods = pods.clone();
            async move { (i, set_ready(&pods, i, true).await) }
        })
        .buffer_unordered(IN_FLIGHT)
        .collect()
        .await;
    let patch_time = t.elapsed();
    wait_until("every replica", Duration::from_secs(300), || {
        seen.lock().unwrap().present.len() >= n
    })
    .await;
    println!(
        "rollout: {n} pods patched Ready in {patch_time:?}; all {n} replicas seen after {:?}",
        t.elapsed()
    );
    {
        let seen = seen.lock().unwrap();
        let ms = patched
            .iter()
            .map(|(i, at)| {
                let s = seen.present[&format!("engine-{i}")];
                s.saturating_duration_since(*at).as_secs_f64() * 1e3
            })
            .collect();
        percentiles("rollout: pod Ready patched -> InferenceReplica seen", ms);
    }
    println!("controller after rollout: {}", memory(pid));

    // Steady state: 100 pods flipped unready then Ready again, one every 50 ms.
    let flips: Vec<usize> = (0..100.min(n)).map(|k| k * n / 100.min(n)).collect();
    let mut unready_at = Vec::new();
    for &i in &flips {
        unready_at.push((i, set_ready(&pods, i, false).await));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    wait_until("flipped replicas gone", Duration::from_secs(60), || {
        let s = seen.lock().unwrap();
        flips.iter().all(|i| s.absent.contains_key(&format!("engine-{i}")))
    })
    .await;
    let mut ready_at = Vec::new();
    for &i in &flips {
        ready_at.push((i, set_ready(&pods, i, true).await));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    wait_until("flipped replicas back", Duration::from_secs(60), || {
        let s = seen.lock().unwrap();
        flips.iter().all(|i| s.present.contains_key(&format!("engine-{i}")))
    })
    .await;
    {
        let s = seen.lock().unwrap();
        percentiles(
            "steady: pod unready patched -> InferenceReplica deleted",
            unready_at
                .iter()
                .map(|(i, at)| {
                    s.absent[&format!("engine-{i}")]
                        .saturating_duration_since(*at)
                        .as_secs_f64()
                        * 1e3
                })
                .collect(),
        );
        percentiles(
            "steady: pod Ready patched -> InferenceReplica seen",
            ready_at
                .iter()
                .map(|(i, at)| {
                    s.present[&format!("engine-{i}")]
                        .saturating_duration_since(*at)
                        .as_secs_f64()
                        * 1e3
                })
                .collect(),
        );
    }
    println!("controller at the end: {}", memory(pid));
    watch.abort();
    drop(controller);
    ns.finish();
}
