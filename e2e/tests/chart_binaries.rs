//! The binaries run as the chart deploys them: `helm install`, then the controller and the
//! router are started as processes with the arguments, environment and configuration file of
//! their installed Deployments, each authenticated with its own ServiceAccount's token (no
//! kubelet runs here, so the pods themselves never start). A pod made Ready then gets traffic
//! through the router: the chart's RBAC, flags and configuration are enough for both to work.

mod common;

use common::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Secret};
use kube::api::{Api, ListParams};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;
use warmpath_api::v1::{InferencePool, InferenceReplica};
use warmpath_e2e::{workspace_bin, Chart, KillOnDrop, TestNamespace};
use warmpath_testkit::free_port;

const ROUTER: &str = "wp-warmpath-router";
const CONTROLLER: &str = "wp-warmpath-controller";

/// The first container's args and environment as the kubelet would give them (`fieldRef`s to
/// the pod's name and namespace resolved, and its IP: loopback, where the binaries run here).
fn container_of(
    d: &Deployment,
    pod_name: &str,
    ns: &str,
) -> (Vec<String>, BTreeMap<String, String>) {
    let spec = &d.spec;
    let c = &spec.template.spec.as_ref().expect("pod spec").containers[0];
    let mut env = BTreeMap::new();
    for e in c.env.iter().flatten() {
        let value = match (&e.value, &e.value_from) {
            (Some(v), _) => v.clone(),
            (None, Some(from)) => match from.field_ref.as_ref().map(|f| f.field_path.as_str()) {
                Some("metadata.name") => pod_name.to_owned(),
                Some("metadata.namespace") => ns.to_owned(),
                Some("status.podIP") => "127.0.0.1".to_owned(),
                other => panic!("{}: unexpected valueFrom {other:?}", e.name),
            },
            (None, None) => String::new(),
        };
        env.insert(e.name.clone(), value);
    }
    (c.args.clone().unwrap_or_default(), env)
}

fn spawn(bin: &Path, args: &[String], env: &BTreeMap<String, String>, log: &Path) -> KillOnDrop {
    let file = std::fs::File::create(log).unwrap();
    eprintln!("{} logs to {}", bin.display(), log.display());
    let mut cmd = Command::new(bin);
    cmd.args(args)
        .env_clear()
        .envs(env)
        .stdin(Stdio::null())
        .stdout(file.try_clone().unwrap())
        .stderr(file);
    KillOnDrop::spawn(&mut cmd).expect("start")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn installed_controller_and_router_work_with_the_charts_rbac_and_flags() {
    let Some(ns) = TestNamespace::create("chart-binaries").await else {
        return;
    };
    let n = ns.name().to_owned();
    let chart = Chart::prepare(ns.scratch_dir()).expect("chart copy");
    ns.cluster()
        .apply_crds(&chart.dir().join("files/crds"))
        .expect("CRDs");
    // Namespaced RBAC: the binaries watch this namespace only, so that other tests' pools are
    // not theirs to reconcile.
    // The simulated engines listen on loopback, which replicas may not point at by default:
    // the operator's allow list, through the chart's value (both binaries read it). The
    // controller's admin address comes through `controller.extraArgs` (a flag wins over the
    // environment the Deployment sets).
    let controller_admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    ns.helm_install(
        &chart,
        "wp",
        &[
            "--set",
            &format!("rbac.watchNamespaces[0]={n}"),
            "--set",
            "router.replicaNetworks={127.0.0.0/8}",
            "--set",
            &format!("controller.extraArgs={{--admin-listen,{controller_admin}}}"),
        ],
    )
    .expect("helm install");
    let admin = ns.client();
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), &n);
    let scratch = ns.scratch_dir().to_path_buf();

    // Controller: its Deployment's environment, its ServiceAccount's token.
    let (_, controller_kubeconfig) = ns.client_as_service_account(&n, CONTROLLER).await.unwrap();
    let (args, mut env) = container_of(
        &deployments.get(CONTROLLER).await.unwrap(),
        "controller-pod-0",
        &n,
    );
    assert_eq!(
        args,
        ["--admin-listen".to_owned(), controller_admin.to_string()]
    );
    // What the flag must beat.
    env.insert("WARMPATH_ADMIN_LISTEN".into(), "127.0.0.1:0".into());
    env.insert(
        "KUBECONFIG".into(),
        controller_kubeconfig.display().to_string(),
    );
    let _controller = spawn(
        &workspace_bin("warmpath-controller").unwrap(),
        &args,
        &env,
        &scratch.join("controller.log"),
    );

    // Router: its ConfigMap's file (ports moved to free loopback ones), Deployment's args.
    let (_, router_kubeconfig) = ns.client_as_service_account(&n, ROUTER).await.unwrap();
    let cm = Api::<ConfigMap>::namespaced(admin.clone(), &n)
        .get(ROUTER)
        .await
        .unwrap();
    let mut config: serde_yaml::Value =
        serde_yaml::from_str(&cm.data.unwrap()["router.yaml"]).unwrap();
    let (port, admin_port) = (free_port(), free_port());
    config["listen"] = format!("127.0.0.1:{port}").into();
    config["admin"] = format!("127.0.0.1:{admin_port}").into();
    // The session key Secret the chart made, where the pod would mount it.
    assert_eq!(
        config["sessions"]["key_file"].as_str(),
        Some("/var/run/warmpath/session-key/key")
    );
    let key = Api::<Secret>::namespaced(admin.clone(), &n)
        .get("wp-warmpath-router-session-key")
        .await
        .expect("the chart's session key Secret");
    let key = key.data.expect("data")["key"].0.clone();
    assert!(key.len() >= 16);
    let key_path = scratch.join("session-key");
    std::fs::write(&key_path, key).unwrap();
    config["sessions"]["key_file"] = key_path.display().to_string().into();
    let config_path = scratch.join("router.yaml");
    std::fs::write(&config_path, serde_yaml::to_string(&config).unwrap()).unwrap();
    let (args, mut env) = container_of(&deployments.get(ROUTER).await.unwrap(), "router-pod-0", &n);
    assert!(args.contains(&"--kubernetes".to_owned()), "{args:?}");
    let args: Vec<String> = args
        .into_iter()
        .map(|a| {
            if a == "/etc/warmpath/router.yaml" {
                config_path.display().to_string()
            } else {
                a
            }
        })
        .collect();
    env.insert("KUBECONFIG".into(), router_kubeconfig.display().to_string());
    let _router = spawn(
        &workspace_bin("warmpath-router").unwrap(),
        &args,
        &env,
        &scratch.join("router.log"),
    );
    let router_addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let admin_addr: SocketAddr = format!("127.0.0.1:{admin_port}").parse().unwrap();

    // A pool and a Ready pod whose IP is a simulator replica.
    let pods = sim_pods(1).await;
    create_pool(&admin, &n, "llm", Some("llm"), pods.port).await;
    create_pod(&admin, &n, "llm-0", "llm").await;
    set_pod_ready(&admin, &n, "llm-0", pods.ips[0], true).await;

    let last = get_until_ok(admin_addr, "/readyz", 300)
        .await
        .unwrap_or_else(|e| (0, e));
    assert_eq!(last.0, 200, "router never ready: {}", last.1);
    // The controller serves its admin endpoints where the chart's extraArgs said.
    let answer = get_until_ok(controller_admin, "/healthz", 100).await;
    assert!(
        matches!(answer, Ok((200, _))),
        "controller admin at {controller_admin}: {answer:?}"
    );
    let reply = complete(router_addr, "hello from the chart").await.unwrap();
    assert_eq!(reply.status, 200, "{}", reply.body);
    let replicas = Api::<InferenceReplica>::namespaced(admin.clone(), &n)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert_eq!(replicas.items.len(), 1);
    let name = replicas.items[0].metadata.name.clone().unwrap();
    assert_eq!(reply.replica, Some(format!("{n}/{name}")));

    // The controller could write status, Events and its Lease with the chart's RBAC (status
    // and the Event follow the replica's creation, so they are waited for).
    let pools = Api::<InferencePool>::namespaced(admin.clone(), &n);
    let events = Api::<Event>::namespaced(admin.clone(), &n);
    let leases = Api::<Lease>::namespaced(admin.clone(), &n);
    let mut seen = String::new();
    let mut ok = false;
    for _ in 0..100 {
        let pool = pools.get("llm").await.unwrap();
        let reasons: Vec<String> = events
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|e| e.reason)
            .collect();
        let holders: Vec<String> = leases
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|l| l.spec?.holder_identity)
            .collect();
        ok = pool.status.as_ref().map(|s| s.ready_replicas) == Some(1)
            && reasons.iter().any(|r| r == "ReplicasCreated")
            && holders.iter().any(|h| h == "controller-pod-0");
        seen = format!(
            "status {:?}, events {reasons:?}, lease holders {holders:?}",
            pool.status
        );
        if ok {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ok, "the controller's writes are missing: {seen}");
    ns.finish();
}
