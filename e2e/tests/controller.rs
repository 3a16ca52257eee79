//! `warmpath-controller` against the real test API server: the binary runs as a child process
//! (as in a pod) with a short Lease, and the tests act as the kubelet would, creating pods and
//! patching their status to Ready (the test cluster has no kubelet, scheduler or
//! kube-controller-manager, so no garbage collector either).
//!
//! Times printed (`measured: ...`) are observations, not assertions; the only timed assertion
//! is the failover bound, which is the point of leader election.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use warmpath_e2e::{
    controller_command, repo_root, warmpath_api, warmpath_object, workspace_bin, BlackholeProxy,
    KillOnDrop, TestNamespace,
};

const WAIT: Duration = Duration::from_secs(10);
const LEASE: &str = "warmpath-controller";

fn pools(c: &Client, ns: &str) -> Api<DynamicObject> {
    warmpath_api(c, ns, "InferencePool")
}

fn replicas(c: &Client, ns: &str) -> Api<DynamicObject> {
    warmpath_api(c, ns, "InferenceReplica")
}

fn tenants(c: &Client, ns: &str) -> Api<DynamicObject> {
    warmpath_api(c, ns, "TenantPolicy")
}

/// A running controller process whose log goes to a file, printed when a test fails.
struct ControllerProc {
    child: KillOnDrop,
    identity: String,
    log: PathBuf,
    admin_port: u16,
}

impl ControllerProc {
    fn start(ns: &TestNamespace, identity: &str) -> ControllerProc {
        ControllerProc::start_via(ns, identity, ns.cluster().kubeconfig())
    }

    /// Started with another kubeconfig (one whose server is a proxy).
    fn start_via(ns: &TestNamespace, identity: &str, kubeconfig: &Path) -> ControllerProc {
        let bin = workspace_bin("warmpath-controller").expect("build warmpath-controller");
        let port = warmpath_testkit::free_port();
        let log = ns.scratch_dir().join(format!("{identity}.log"));
        let file = std::fs::File::create(&log).expect("log file");
        let mut cmd = controller_command(&bin, kubeconfig, ns.name(), identity);
        cmd.env("WARMPATH_ADMIN_LISTEN", format!("127.0.0.1:{port}"))
            .env(
                "RUST_LOG",
                std::env::var("WARMPATH_E2E_CONTROLLER_LOG")
                    .unwrap_or_else(|_| "info,kube=warn".into()),
            )
            .stdout(Stdio::null())
            .stderr(file);
        let child = KillOnDrop::spawn(&mut cmd).expect("start warmpath-controller");
        ControllerProc {
            child,
            identity: identity.to_owned(),
            log,
            admin_port: port,
        }
    }

    /// GET on the admin port: (status code, body). Plain HTTP/1.1 over a socket, which is all
    /// the admin server needs.
    async fn admin_get(&self, path: &str) -> Option<(u16, String)> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", self.admin_port))
            .await
            .ok()?;
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .ok()?;
        let mut buf = String::new();
        s.read_to_string(&mut buf).await.ok()?;
        let code = buf.split_whitespace().nth(1)?.parse().ok()?;
        let body = buf.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())?;
        Some((code, body))
    }

    /// The value of a metric line starting with `series` (name and labels).
    async fn metric(&self, series: &str) -> Option<f64> {
        let (_, body) = self.admin_get("/metrics").await?;
        body.lines()
            .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))?
            .rsplit(' ')
            .next()?
            .parse()
            .ok()
    }
}

impl Drop for ControllerProc {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let text = std::fs::read_to_string(&self.log).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(60).collect();
            eprintln!(
                "===== controller {} log (last lines) =====\n{}\n===== end =====",
                self.identity,
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
    }
}

async fn setup(test: &str) -> Option<TestNamespace> {
    let ns = TestNamespace::create(test).await?;
    ns.cluster()
        .apply_crds(&repo_root().join("crds"))
        .expect("apply CRDs");
    Some(ns)
}

async fn create_pool(c: &Client, ns: &str, name: &str, app: &str) {
    pools(c, ns)
        .create(
            &PostParams::default(),
            &warmpath_object(
                "InferencePool",
                name,
                json!({"models": ["tiny"], "selector": {"app": app}, "targetPort": 8000}),
            ),
        )
        .await
        .expect("create pool");
}

async fn create_pod(c: &Client, ns: &str, name: &str, app: &str) {
    warmpath_e2e::create_pod(c, ns, name, app)
        .await
        .expect("create pod");
}

async fn set_pod_status(c: &Client, ns: &str, name: &str, ip: &str, ready: bool) {
    warmpath_e2e::set_pod_status(c, ns, name, ip, ready)
        .await
        .expect("patch pod status");
}

/// Polls `probe` every 20 ms until it returns `Some`, for at most `WAIT`.
async fn wait_for<T, F, Fut>(what: &str, mut probe: F) -> (T, Duration)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = probe().await {
            return (v, start.elapsed());
        }
        assert!(
            start.elapsed() < WAIT,
            "timed out after {WAIT:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn list_replicas(c: &Client, ns: &str) -> Vec<DynamicObject> {
    replicas(c, ns)
        .list(&ListParams::default())
        .await
        .expect("list replicas")
        .items
}

/// The managed replica standing for `pod`, if any.
async fn replica_of_pod(c: &Client, ns: &str, pod: &str) -> Option<DynamicObject> {
    list_replicas(c, ns)
        .await
        .into_iter()
        .find(|r| r.data["spec"]["pod"] == pod)
}

fn condition<'a>(obj: &'a DynamicObject, type_: &str) -> Option<&'a Value> {
    obj.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

fn condition_is(obj: &DynamicObject, type_: &str, status: &str) -> bool {
    condition(obj, type_).is_some_and(|c| c["status"] == status)
}

async fn lease_holder(c: &Client, ns: &str) -> Option<String> {
    Api::<Lease>::namespaced(c.clone(), ns)
        .get_opt(LEASE)
        .await
        .expect("get lease")?
        .spec?
        .holder_identity
        .filter(|h| !h.is_empty())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_follow_ready_pods() {
    let Some(ns) = setup("controller-replicas").await else {
        return;
    };
    let (c, n) = (ns.client(), ns.name().to_owned());
    let ctl = ControllerProc::start(&ns, "ctl-a");
    create_pool(&c, &n, "llama", "vllm").await;
    for i in 0..3 {
        create_pod(&c, &n, &format!("vllm-{i}"), "vllm").await;
    }
    // A pod of another app is never selected.
    create_pod(&c, &n, "other-0", "sglang").await;
    set_pod_status(&c, &n, "other-0", "127.0.0.9", true).await;
    for i in 0..3 {
        set_pod_status(
            &c,
            &n,
            &format!("vllm-{i}"),
            &format!("127.0.0.{}", i + 1),
            true,
        )
        .await;
    }
    let (reps, took) = wait_for("3 replicas", || async {
        let r = list_replicas(&c, &n).await;
        (r.len() == 3).then_some(r)
    })
    .await;
    println!("measured: 3 pods Ready -> 3 InferenceReplicas {took:?} after the last patch");
    let pool = pools(&c, &n).get("llama").await.expect("pool");
    let pool_uid = pool.metadata.uid.clone().expect("uid");
    for r in &reps {
        let pod = r.data["spec"]["pod"].as_str().expect("spec.pod");
        let i: u32 = pod.trim_start_matches("vllm-").parse().expect("pod index");
        assert_eq!(r.data["spec"]["address"], format!("127.0.0.{}", i + 1));
        assert_eq!(r.data["spec"]["port"], 8000);
        assert_eq!(r.data["spec"]["pool"], "llama");
        let labels = r.metadata.labels.clone().unwrap_or_default();
        assert_eq!(
            labels.get("warmpath.dev/pool").map(String::as_str),
            Some("llama")
        );
        assert_eq!(
            labels
                .get("app.kubernetes.io/managed-by")
                .map(String::as_str),
            Some("warmpath-controller")
        );
        let owners = r.metadata.owner_references.clone().unwrap_or_default();
        assert_eq!(owners.len(), 1, "{owners:?}");
        assert_eq!(owners[0].uid, pool_uid);
        assert_eq!(owners[0].kind, "InferencePool");
        assert_eq!(owners[0].controller, Some(true));
        assert_eq!(owners[0].block_owner_deletion, Some(true));
    }
    let (pool, _) = wait_for("pool status readyReplicas 3 and Ready", || async {
        let p = pools(&c, &n).get("llama").await.ok()?;
        (p.data["status"]["readyReplicas"] == 3 && condition_is(&p, "Ready", "True")).then_some(p)
    })
    .await;
    assert_eq!(pool.data["status"]["replicas"], 3);
    assert_eq!(
        pool.data["status"]["observedGeneration"],
        pool.metadata.generation.expect("generation")
    );
    assert!(condition_is(&pool, "Accepted", "True"));
    assert!(condition_is(&pool, "ResolvedRefs", "True"));
    // The admin endpoints.
    let (code, body) = ctl.admin_get("/readyz").await.expect("readyz");
    assert_eq!(code, 200, "{body}");
    assert_eq!(ctl.admin_get("/healthz").await.map(|r| r.0), Some(200));
    assert_eq!(ctl.metric("warmpath_controller_is_leader").await, Some(1.0));
    assert_eq!(
        ctl.metric("warmpath_controller_replicas_created_total")
            .await,
        Some(3.0)
    );
    // The reconcile that wrote the status counts itself once it returns, a moment later.
    wait_for("a pool reconcile counted ok", || async {
        ctl.metric("warmpath_controller_reconciles_total{controller=\"pool\",result=\"ok\"}")
            .await
            .filter(|&v| v >= 1.0)
    })
    .await;
    // Every managed replica gets its status too.
    wait_for("replica statuses", || async {
        let r = list_replicas(&c, &n).await;
        r.iter()
            .all(|r| condition_is(r, "Ready", "True"))
            .then_some(())
    })
    .await;

    // Unready: its replica goes.
    set_pod_status(&c, &n, "vllm-0", "127.0.0.1", false).await;
    let (_, took) = wait_for("vllm-0's replica deleted", || async {
        replica_of_pod(&c, &n, "vllm-0")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    println!("measured: pod unready -> replica deleted in {took:?}");

    // Ready again: it comes back.
    set_pod_status(&c, &n, "vllm-0", "127.0.0.1", true).await;
    let (_, took) = wait_for("vllm-0's replica back", || async {
        replica_of_pod(&c, &n, "vllm-0").await
    })
    .await;
    println!("measured: pod Ready -> replica created in {took:?}");

    // Deleted: its replica goes.
    Api::<Pod>::namespaced(c.clone(), &n)
        .delete("vllm-1", &DeleteParams::default().grace_period(0))
        .await
        .expect("delete pod");
    let (_, took) = wait_for("vllm-1's replica deleted", || async {
        replica_of_pod(&c, &n, "vllm-1")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    println!("measured: pod deleted -> replica deleted in {took:?}");

    // New IP: the replica follows.
    set_pod_status(&c, &n, "vllm-2", "127.0.0.42", true).await;
    let (_, took) = wait_for("vllm-2's replica at the new address", || async {
        replica_of_pod(&c, &n, "vllm-2")
            .await
            .filter(|r| r.data["spec"]["address"] == "127.0.0.42")
    })
    .await;
    println!("measured: pod IP changed -> replica updated in {took:?}");

    // Labels changed so the pool no longer selects the pod: its replica goes.
    Api::<Pod>::namespaced(c.clone(), &n)
        .patch(
            "vllm-2",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"app": "retired"}}})),
        )
        .await
        .expect("relabel pod");
    wait_for("vllm-2's replica deleted after relabel", || async {
        replica_of_pod(&c, &n, "vllm-2")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    wait_for("pool status follows", || async {
        let p = pools(&c, &n).get("llama").await.ok()?;
        (p.data["status"]["readyReplicas"] == 1).then_some(())
    })
    .await;
    // The unselected pod never got a replica.
    assert!(replica_of_pod(&c, &n, "other-0").await.is_none());
    ns.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_takes_over_when_the_leader_dies_or_leaves() {
    let Some(ns) = setup("controller-failover").await else {
        return;
    };
    let (c, n) = (ns.client(), ns.name().to_owned());
    let mut a = Some(ControllerProc::start(&ns, "ctl-a"));
    let mut b = Some(ControllerProc::start(&ns, "ctl-b"));
    create_pool(&c, &n, "llama", "vllm").await;
    create_pod(&c, &n, "vllm-0", "vllm").await;
    set_pod_status(&c, &n, "vllm-0", "127.0.0.1", true).await;
    wait_for("first replica", || async {
        replica_of_pod(&c, &n, "vllm-0").await
    })
    .await;
    let (first, _) = wait_for("a lease holder", || async { lease_holder(&c, &n).await }).await;
    println!("leader: {first}");

    // SIGKILL the leader: no release, so the standby waits for the lease to expire (3 s).
    let (leader, standby) = if first == "ctl-a" {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };
    let standby_name = standby.as_ref().expect("standby").identity.clone();
    // The standby watched everything but wrote nothing.
    let sb = standby.as_ref().expect("standby");
    assert_eq!(sb.metric("warmpath_controller_is_leader").await, Some(0.0));
    assert_eq!(
        sb.metric("warmpath_controller_replicas_created_total")
            .await,
        Some(0.0)
    );
    // The standby's first reconcile may come a moment after the leader is known: wait for it
    // (a standby that never reconciles still fails here, after WAIT).
    wait_for("the standby's reconciles to be skipped", || async move {
        sb.metric("warmpath_controller_reconciles_total{controller=\"pool\",result=\"standby\"}")
            .await
            .filter(|v| *v >= 1.0)
    })
    .await;
    // Ready once its caches have listed, which on a busy machine can come after the leader's.
    wait_for("the standby ready", || async {
        sb.admin_get("/readyz").await.filter(|r| r.0 == 200)
    })
    .await;
    let killed_at = Instant::now();
    leader.as_mut().expect("leader").child.kill();
    let (holder, _) = wait_for("the standby holds the lease", || async {
        lease_holder(&c, &n).await.filter(|h| *h == standby_name)
    })
    .await;
    let took = killed_at.elapsed();
    println!("measured: SIGKILL of the leader -> {holder} holds the Lease after {took:?} (lease duration 3 s, retry 1 s)");
    assert!(
        took <= Duration::from_secs(5) + Duration::from_millis(500),
        "failover took {took:?}"
    );
    // And it reconciles: a new ready pod gets a replica.
    create_pod(&c, &n, "vllm-1", "vllm").await;
    set_pod_status(&c, &n, "vllm-1", "127.0.0.2", true).await;
    let (_, took) = wait_for("replica from the new leader", || async {
        replica_of_pod(&c, &n, "vllm-1").await
    })
    .await;
    println!("measured: new leader, pod Ready -> replica in {took:?}");

    // A fresh standby, then SIGTERM the leader: it releases the Lease, so the handover does
    // not wait for expiry.
    *leader = Some(ControllerProc::start(&ns, "ctl-c"));
    // The newcomer's caches are synced (its readiness says so) before the leader goes.
    let newcomer = leader.as_ref().expect("ctl-c");
    wait_for("ctl-c's caches synced", || async {
        (newcomer.admin_get("/readyz").await?.0 == 200).then_some(())
    })
    .await;
    let termed_at = Instant::now();
    let status = standby
        .as_mut()
        .expect("current leader")
        .child
        .terminate()
        .expect("SIGTERM");
    assert!(
        status.success(),
        "a SIGTERMed controller exits cleanly: {status}"
    );
    let (_, _) = wait_for("ctl-c holds the lease", || async {
        lease_holder(&c, &n).await.filter(|h| h == "ctl-c")
    })
    .await;
    let took = termed_at.elapsed();
    println!("measured: SIGTERM of the leader -> ctl-c holds the Lease after {took:?}");
    assert!(
        took < Duration::from_secs(3),
        "a released lease is taken before it would have expired: {took:?}"
    );
    create_pod(&c, &n, "vllm-2", "vllm").await;
    set_pod_status(&c, &n, "vllm-2", "127.0.0.3", true).await;
    wait_for("replica from the third leader", || async {
        replica_of_pod(&c, &n, "vllm-2").await
    })
    .await;

    // Another holder appears in the Lease (a partition healed, a clock jumped): the leader
    // must stop at once, not keep writing beside it.
    let leases = Api::<Lease>::namespaced(c.clone(), &n);
    leases
        .patch(
            LEASE,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"holderIdentity": "intruder"}})),
        )
        .await
        .expect("steal the lease");
    let third = leader.as_mut().expect("third leader");
    let stolen_at = Instant::now();
    let (status, _) = wait_for("the deposed leader exits", || {
        let exited = third.child.0.try_wait().expect("try_wait");
        async move { exited }
    })
    .await;
    println!(
        "measured: Lease taken by another holder -> leader exited ({status}) after {:?}",
        stolen_at.elapsed()
    );
    assert_eq!(status.code(), Some(1), "losing the lease exits with 1");
    ns.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_the_api_server_stops_before_its_lease_expires() {
    let Some(ns) = setup("controller-black-hole").await else {
        return;
    };
    let (c, n) = (ns.client(), ns.name().to_owned());
    let upstream = ns.cluster().apiserver_addr().expect("API server address");
    let proxy = BlackholeProxy::start(upstream).await.expect("proxy");
    let kubeconfig = ns
        .cluster()
        .kubeconfig_via(ns.scratch_dir(), "via-proxy", proxy.addr())
        .expect("kubeconfig through the proxy");
    let mut leader = ControllerProc::start_via(&ns, "ctl-cut", &kubeconfig);
    wait_for("ctl-cut holds the lease", || async {
        lease_holder(&c, &n).await.filter(|h| h == "ctl-cut")
    })
    .await;
    // Every connection, the lease's and the watches', now hangs without an error: only the
    // leader's own deadline can end its belief that it leads.
    proxy.black_hole();
    let cut_at = Instant::now();
    let (status, took) = wait_for("the cut-off leader exits", || {
        let exited = leader.child.0.try_wait().expect("try_wait");
        async move { exited }
    })
    .await;
    println!("measured: API server black-holed -> leader exited ({status}) after {took:?} (renew deadline 2 s, lease 3 s)");
    assert_eq!(status.code(), Some(1), "losing the lease exits with 1");
    // A standby may take the lease 3 s after the last renewal, which came before the cut:
    // a leader still running 3 s after the cut could be writing beside the next one.
    assert!(
        cut_at.elapsed() < Duration::from_secs(3),
        "the leader kept leading {took:?} after losing the API server"
    );
    ns.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_written_replicas_get_status_and_are_never_deleted() {
    let Some(ns) = setup("controller-hand-written").await else {
        return;
    };
    let (c, n) = (ns.client(), ns.name().to_owned());
    let _ctl = ControllerProc::start(&ns, "ctl-a");
    pools(&c, &n)
        .create(
            &PostParams::default(),
            &warmpath_object("InferencePool", "tpu", json!({"models": ["tiny"]})),
        )
        .await
        .expect("create pool");
    for (name, pool) in [("tpu-vm-1", "tpu"), ("orphan", "ghost")] {
        replicas(&c, &n)
            .create(
                &PostParams::default(),
                &warmpath_object(
                    "InferenceReplica",
                    name,
                    json!({"pool": pool, "address": "127.0.0.9", "port": 8000}),
                ),
            )
            .await
            .expect("create replica");
    }
    let (good, _) = wait_for("tpu-vm-1 accepted", || async {
        let r = replicas(&c, &n).get("tpu-vm-1").await.ok()?;
        (condition_is(&r, "Accepted", "True") && condition_is(&r, "ResolvedRefs", "True"))
            .then_some(r)
    })
    .await;
    assert!(condition_is(&good, "Ready", "True"));
    let (orphan, _) = wait_for("orphan unresolved", || async {
        let r = replicas(&c, &n).get("orphan").await.ok()?;
        condition_is(&r, "ResolvedRefs", "False").then_some(r)
    })
    .await;
    let msg = condition(&orphan, "ResolvedRefs").expect("condition")["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(msg.contains("\"ghost\""), "message names the pool: {msg}");
    assert!(!condition_is(&orphan, "Ready", "True"));
    // The hand-written replica counts in its pool's status.
    wait_for("pool counts the hand-written replica", || async {
        let p = pools(&c, &n).get("tpu").await.ok()?;
        (p.data["status"]["readyReplicas"] == 1 && condition_is(&p, "Ready", "True")).then_some(())
    })
    .await;
    // Deleting a pool never deletes hand-written replicas, and a missing pool's replica stays.
    pools(&c, &n)
        .delete("tpu", &DeleteParams::default())
        .await
        .expect("delete pool");
    wait_for("tpu-vm-1 unresolved after its pool went", || async {
        let r = replicas(&c, &n).get("tpu-vm-1").await.ok()?;
        condition_is(&r, "ResolvedRefs", "False").then_some(())
    })
    .await;
    // A non-event: the replicas stay. The reconcile that marked tpu-vm-1 unresolved is the one
    // that would have deleted it; a second to spare for anything later.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let names: Vec<String> = list_replicas(&c, &n)
        .await
        .into_iter()
        .filter_map(|r| r.metadata.name)
        .collect();
    assert!(names.contains(&"tpu-vm-1".to_owned()), "{names:?}");
    assert!(names.contains(&"orphan".to_owned()), "{names:?}");
    ns.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_policies_report_their_api_key_secret() {
    let Some(ns) = setup("controller-tenants").await else {
        return;
    };
    let (c, n) = (ns.client(), ns.name().to_owned());
    let _ctl = ControllerProc::start(&ns, "ctl-a");
    tenants(&c, &n)
        .create(
            &PostParams::default(),
            &warmpath_object(
                "TenantPolicy",
                "acme",
                json!({"apiKeySecretRef": {"name": "acme-keys", "key": "api-key"}, "weight": 2}),
            ),
        )
        .await
        .expect("create tenant");
    let (t, _) = wait_for("tenant unresolved", || async {
        let t = tenants(&c, &n).get("acme").await.ok()?;
        condition_is(&t, "ResolvedRefs", "False").then_some(t)
    })
    .await;
    let cond = condition(&t, "ResolvedRefs").expect("condition");
    assert_eq!(cond["reason"], "SecretNotFound");
    let msg = cond["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains("\"acme-keys\"") && msg.contains("api-key"),
        "message names the Secret and key: {msg}"
    );
    assert!(!condition_is(&t, "Ready", "True"));

    // A Secret without the key: still False, saying which keys it has.
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "acme-keys"},
        "stringData": {"other": "x"}
    }))
    .expect("secret");
    let secrets = Api::<Secret>::namespaced(c.clone(), &n);
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .expect("create secret");
    wait_for("tenant reports the missing key", || async {
        let t = tenants(&c, &n).get("acme").await.ok()?;
        (condition(&t, "ResolvedRefs")?["reason"] == "KeyNotFound").then_some(())
    })
    .await;
    // The key added: True, one key loaded.
    secrets
        .patch(
            "acme-keys",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"api-key": "sk-acme"}})),
        )
        .await
        .expect("patch secret");
    let (t, took) = wait_for("tenant resolved", || async {
        let t = tenants(&c, &n).get("acme").await.ok()?;
        condition_is(&t, "ResolvedRefs", "True").then_some(t)
    })
    .await;
    println!("measured: Secret key added -> TenantPolicy resolved in {took:?}");
    assert!(condition_is(&t, "Ready", "True"));
    assert_eq!(t.data["status"]["apiKeys"], 1);
    ns.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_pool_deletes_its_managed_replicas() {
    let Some(ns) = setup("controller-pool-delete").await else {
        return;
    };
    let (c, n) = (ns.client(), ns.name().to_owned());
    let _ctl = ControllerProc::start(&ns, "ctl-a");
    create_pool(&c, &n, "llama", "vllm").await;
    create_pool(&c, &n, "keep", "keep").await;
    for (pod, app, ip) in [
        ("vllm-0", "vllm", "127.0.0.1"),
        ("vllm-1", "vllm", "127.0.0.2"),
        ("keep-0", "keep", "127.0.0.3"),
    ] {
        create_pod(&c, &n, pod, app).await;
        set_pod_status(&c, &n, pod, ip, true).await;
    }
    wait_for("3 replicas", || async {
        (list_replicas(&c, &n).await.len() == 3).then_some(())
    })
    .await;
    pools(&c, &n)
        .delete("llama", &DeleteParams::default())
        .await
        .expect("delete pool");
    let (_, took) = wait_for("llama's replicas deleted", || async {
        let r = list_replicas(&c, &n).await;
        (r.len() == 1).then_some(r)
    })
    .await;
    println!("measured: pool deleted -> its 2 replicas deleted in {took:?}");
    assert!(replica_of_pod(&c, &n, "keep-0").await.is_some());
    ns.finish();
}
