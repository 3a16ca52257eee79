//! The chart as a cluster runs it, on the node cluster (`e2e/cluster/node.sh`: kubelet over
//! containerd, controller-manager, scheduler, kube-proxy): the router, the controller and the
//! simulated engines are pods from images, reached through Services; Deployments roll,
//! owners are garbage-collected, readiness probes gate traffic.
//!
//! Skipped (loudly) where no node can run (not root, no containerd); `WARMPATH_NODE_REQUIRED=1`
//! makes that a failure.

mod common;

use common::{complete_streamed, prompt, Reply};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, ListParams};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use warmpath_e2e::{run, warmpath_api, workspace_bin, Chart, NodeCluster, TestNamespace};

const RELEASE: &str = "wp";
const ROUTER: &str = "wp-warmpath-router";
const TAG: &str = "e2e";

/// The images of the workspace's binaries on the node, by name.
fn load_images(node: &NodeCluster) {
    for name in ["warmpath-router", "warmpath-controller", "warmpath-sim"] {
        let bin = workspace_bin(name).expect("build the workspace binary");
        node.load_image(&bin, &format!("docker.io/warmpath/{name}:{TAG}"))
            .expect("load the image into the node");
    }
}

/// The simulated engines: a Deployment of `replicas` pods (one simulated vLLM each, model
/// `tiny`, port 8000, ready when `/health` answers) and the InferencePool that selects them.
fn sim_manifest(replicas: u32) -> String {
    format!(
        r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: sim
spec:
  replicas: {replicas}
  selector:
    matchLabels: {{app: sim}}
  template:
    metadata:
      labels: {{app: sim}}
    spec:
      terminationGracePeriodSeconds: 2
      securityContext:
        runAsNonRoot: true
        runAsUser: 65532
      containers:
        - name: sim
          image: docker.io/warmpath/warmpath-sim:{TAG}
          imagePullPolicy: Never
          args: [--listen, "0.0.0.0:8000", --replicas, "1", --model, tiny]
          ports: [{{name: http, containerPort: 8000}}]
          readinessProbe:
            httpGet: {{path: /health, port: 8000}}
            periodSeconds: 1
          resources:
            requests: {{cpu: 10m, memory: 32Mi}}
---
apiVersion: warmpath.dev/v1
kind: InferencePool
metadata:
  name: sim
spec:
  models: [tiny]
  selector: {{app: sim}}
  targetPort: 8000
  engine: vllm
"#
    )
}

fn kubectl_apply(ns: &TestNamespace, manifest: &str) {
    run(
        ns.cluster()
            .kubectl()
            .args(["apply", "-n", ns.name(), "-f", "-"]),
        Some(manifest.as_bytes()),
    )
    .expect("kubectl apply");
}

/// The chart's values for images that live on the node and a node with two cores.
fn chart_values(extra: &[&str]) -> Vec<String> {
    let mut values: Vec<String> = [
        "router.image.repository=docker.io/warmpath/warmpath-router",
        "controller.image.repository=docker.io/warmpath/warmpath-controller",
        "router.image.pullPolicy=Never",
        "controller.image.pullPolicy=Never",
        "router.resources.requests.cpu=10m",
        "controller.resources.requests.cpu=10m",
        "router.service.type=NodePort",
        "router.replicaNetworks={10.244.0.0/16}",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    values.push(format!("router.image.tag={TAG}"));
    values.push(format!("controller.image.tag={TAG}"));
    values.extend(extra.iter().map(|s| (*s).to_owned()));
    values
        .into_iter()
        .flat_map(|v| ["--set".to_owned(), v])
        .collect()
}

/// Installs the CRDs, the engines and the chart into a fresh namespace; waits for the router's
/// Deployment to be rolled out. Returns the router's NodePort address.
async fn install(
    node: &'static NodeCluster,
    test: &str,
    sims: u32,
    extra: &[&str],
) -> (TestNamespace, SocketAddr) {
    load_images(node);
    let ns = TestNamespace::create_on(node.cluster(), test)
        .await
        .expect("test namespace");
    let chart = Chart::prepare(ns.scratch_dir()).expect("chart");
    ns.cluster()
        .apply_crds(&chart.dir().join("files/crds"))
        .expect("CRDs");
    kubectl_apply(&ns, &sim_manifest(sims));
    // Each test's release serves its own namespace only: tests run side by side, each with a
    // pool of model `tiny`, and a model belongs to the namespace that claimed it first.
    let watch = format!("rbac.watchNamespaces={{{}}}", ns.name());
    let mut extra = extra.to_vec();
    extra.push(&watch);
    let values = chart_values(&extra);
    let values: Vec<&str> = values.iter().map(String::as_str).collect();
    ns.helm_install(&chart, RELEASE, &values)
        .expect("helm install");
    rollout(&ns, ROUTER, 180);
    let services: Api<Service> = Api::namespaced(ns.client(), ns.name());
    let svc = services.get(ROUTER).await.expect("router Service");
    let port = svc
        .spec
        .and_then(|s| s.ports)
        .unwrap_or_default()
        .into_iter()
        .find(|p| p.name.as_deref() == Some("http"))
        .and_then(|p| p.node_port)
        .expect("the router Service has a NodePort");
    let ip = node.node_ip().expect("node address");
    let addr: SocketAddr = format!("{ip}:{port}").parse().expect("address");
    (ns, addr)
}

/// `kubectl rollout status` of a Deployment.
fn rollout(ns: &TestNamespace, deployment: &str, seconds: u32) {
    run(
        ns.cluster().kubectl().args([
            "rollout",
            "status",
            "-n",
            ns.name(),
            &format!("deployment/{deployment}"),
            &format!("--timeout={seconds}s"),
        ]),
        None,
    )
    .unwrap_or_else(|e| panic!("{deployment} did not roll out: {e}\n{}", pod_logs(ns)));
}

/// Every pod's status and its containers' last logs, for a failure's report.
fn pod_logs(ns: &TestNamespace) -> String {
    let mut out = String::new();
    if let Ok(o) = run(
        ns.cluster()
            .kubectl()
            .args(["get", "pods", "-o", "wide", "-n", ns.name()]),
        None,
    ) {
        out.push_str(&String::from_utf8_lossy(&o.stdout));
    }
    if let Ok(o) = run(
        ns.cluster().kubectl().args([
            "logs",
            "-n",
            ns.name(),
            "--all-containers",
            "--prefix",
            "--tail=30",
            "-l",
            "app.kubernetes.io/instance=wp",
        ]),
        None,
    ) {
        out.push_str(&String::from_utf8_lossy(&o.stdout));
    }
    out
}

/// Polls `f` (async) every 500 ms until it holds, at most `seconds`.
async fn eventually<F, Fut>(what: &str, seconds: u64, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(seconds);
    while !f().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {seconds}s waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn pods(ns: &TestNamespace, selector: &str) -> Vec<Pod> {
    let api: Api<Pod> = Api::namespaced(ns.client(), ns.name());
    api.list(&ListParams::default().labels(selector))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chart_serves_streams_through_a_node_port_and_its_pods_go_with_it() {
    let Some(node) = NodeCluster::get_or_skip("chart_serves_streams_through_a_node_port") else {
        return;
    };
    let (ns, addr) = install(node, "node-install", 2, &[]).await;

    // The controller turns the two sim pods into InferenceReplicas, the routers route to them.
    let sim_pods: Vec<String> = pods(&ns, "app=sim")
        .await
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    assert_eq!(sim_pods.len(), 2, "{}", pod_logs(&ns));
    let answered = answering(&ns, addr, &sim_pods, 90).await;
    // The replica names are the pods' (the controller's InferenceReplicas are named after them).
    for replica in &answered {
        assert!(
            sim_pods.iter().any(|p| replica.contains(p.as_str())),
            "{replica} is not one of {sim_pods:?}"
        );
    }

    // Uninstalled, the chart's Deployments go, and the garbage collector takes their pods.
    run(
        ns.cluster().helm().args([
            "uninstall",
            RELEASE,
            "-n",
            ns.name(),
            "--wait",
            "--timeout",
            "60s",
        ]),
        None,
    )
    .expect("helm uninstall");
    eventually("the router and controller pods to be gone", 60, || async {
        pods(&ns, "app.kubernetes.io/instance=wp").await.is_empty()
    })
    .await;
    ns.finish();
}

/// A different prompt family per test process, so runs on a reused cluster do not share caches.
fn rand_seed() -> u64 {
    u64::from(std::process::id()) << 16
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_update_of_the_routers_under_traffic_loses_no_request() {
    let Some(node) = NodeCluster::get_or_skip("a_rolling_update_of_the_routers_under_traffic")
    else {
        return;
    };
    let (ns, addr) = install(node, "node-rolling", 2, &[]).await;
    eventually("the router to serve", 90, || async {
        matches!(
            complete_streamed(addr, "warm up").await,
            Ok(Reply { status: 200, .. })
        )
    })
    .await;

    // Clients send one request after another through the Service while the routers roll.
    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let mut clients = Vec::new();
    for c in 0..4u64 {
        let (stop, ok, failed) = (stop.clone(), ok.clone(), failed.clone());
        clients.push(tokio::spawn(async move {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                match complete_streamed(addr, &prompt(c * 1_000_000 + i, 200)).await {
                    Ok(r) if r.status == 200 => {
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(r) => failed
                        .lock()
                        .unwrap()
                        .push(format!("{}: {}", r.status, r.body)),
                    Err(e) => failed.lock().unwrap().push(e),
                }
                i += 1;
            }
        }));
    }
    let before = ok.load(Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(2)).await;
    // A changed pod template (a new log level) rolls the Deployment, one pod at a time.
    run(
        ns.cluster().kubectl().args([
            "set",
            "env",
            "-n",
            ns.name(),
            &format!("deployment/{ROUTER}"),
            "WARMPATH_E2E_ROLL=1",
        ]),
        None,
    )
    .expect("kubectl set env");
    rollout(&ns, ROUTER, 180);
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.await.expect("client task");
    }
    let served = ok.load(Ordering::Relaxed) - before;
    let failed = failed.lock().unwrap().clone();
    assert!(
        served > 20,
        "only {served} requests went through during the roll"
    );
    assert!(
        failed.is_empty(),
        "{} requests failed during the roll: {failed:?}\n{}",
        failed.len(),
        pod_logs(&ns)
    );

    // Every router pod now is of the new template.
    let deployments: Api<Deployment> = Api::namespaced(ns.client(), ns.name());
    let d = deployments.get(ROUTER).await.expect("router Deployment");
    let status = d.status.expect("status");
    assert_eq!(status.updated_replicas, status.replicas, "{status:?}");
    ns.finish();
}

/// Streams completions (different prompts) through the router until every pod of `wanted` has
/// answered one, checking each stream is whole; panics after `seconds`. Returns the replica
/// names that answered.
async fn answering(
    ns: &TestNamespace,
    addr: SocketAddr,
    wanted: &[String],
    seconds: u64,
) -> std::collections::BTreeSet<String> {
    let mut answered = std::collections::BTreeSet::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(seconds);
    let mut i = 0u64;
    while !wanted
        .iter()
        .all(|pod| answered.iter().any(|r: &String| r.contains(pod.as_str())))
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "only {answered:?} of {wanted:?} answered through the router in {seconds} s\n{}",
            pod_logs(ns)
        );
        if let Ok(Reply {
            status: 200,
            replica: Some(replica),
            body,
        }) = complete_streamed(addr, &prompt(rand_seed() + i, 400)).await
        {
            assert!(
                body.contains("data: ") && body.trim_end().ends_with("data: [DONE]"),
                "not a complete stream: {body}"
            );
            answered.insert(replica);
        } else {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        i += 1;
    }
    answered
}

/// The names of the pods `selector` selects that are Running and Ready.
async fn ready_pods(ns: &TestNamespace, selector: &str) -> Vec<String> {
    pods(ns, selector)
        .await
        .into_iter()
        .filter(|p| {
            p.metadata.deletion_timestamp.is_none()
                && p.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .filter_map(|p| p.metadata.name)
        .collect()
}

async fn replica_names(ns: &TestNamespace) -> Vec<String> {
    warmpath_api(&ns.client(), ns.name(), "InferenceReplica")
        .list(&ListParams::default())
        .await
        .map(|l| {
            l.items
                .into_iter()
                .filter_map(|r| r.metadata.name)
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_engine_pod_is_replaced_and_followed_and_a_deleted_pool_takes_its_replicas() {
    let Some(node) = NodeCluster::get_or_skip("a_killed_engine_pod_is_replaced_and_followed")
    else {
        return;
    };
    let (ns, addr) = install(node, "node-follow", 2, &[]).await;
    let before = ready_pods(&ns, "app=sim").await;
    assert_eq!(before.len(), 2, "{}", pod_logs(&ns));
    answering(&ns, addr, &before, 90).await;

    // One engine pod killed: its ReplicaSet makes another, the controller and the routers follow.
    let victim = before[0].clone();
    run(
        ns.cluster().kubectl().args([
            "delete",
            "pod",
            "-n",
            ns.name(),
            &victim,
            "--grace-period=0",
            "--force",
            "--wait=false",
        ]),
        None,
    )
    .expect("kubectl delete pod");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    let now = loop {
        let now = ready_pods(&ns, "app=sim").await;
        if now.len() == 2 && !now.contains(&victim) {
            break now;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no new sim pod ready in 90 s: {now:?}\n{}",
            pod_logs(&ns)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    answering(&ns, addr, &now, 90).await;
    eventually("the killed pod's replica to be gone", 60, || async {
        !replica_names(&ns)
            .await
            .iter()
            .any(|r| r.contains(victim.as_str()))
    })
    .await;

    // The pool deleted: its InferenceReplicas go with it (owner references), and the model is
    // no longer served.
    warmpath_api(&ns.client(), ns.name(), "InferencePool")
        .delete("sim", &Default::default())
        .await
        .expect("delete the pool");
    eventually("the pool's replicas to be collected", 60, || async {
        replica_names(&ns).await.is_empty()
    })
    .await;
    eventually("the model to be no longer served", 30, || async {
        matches!(
            complete_streamed(addr, "after the pool").await,
            Ok(Reply {
                status: 404 | 503,
                ..
            })
        )
    })
    .await;
    ns.finish();
}
