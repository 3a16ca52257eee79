//! The router in Kubernetes mode against the real API server: pods (created as objects and
//! marked Ready by patching their status, their IPs loopback addresses where simulator
//! replicas listen) become InferenceReplicas through the real controller, then routes with
//! prefix affinity; a deleted pod stops getting traffic (within a second on an idle machine);
//! hand-written replicas are routed to; replicas whose pool is missing are not; readiness waits for the
//! first full list and says why it is waiting; a TenantPolicy's API keys come from its Secret
//! and follow the Secret's changes and the policy's deletion.

mod common;

use common::*;
use k8s_openapi::api::core::v1::{Pod, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use warmpath_api::v1::{InferencePool, InferenceReplica, TenantPolicy};
use warmpath_e2e::TestNamespace;
use warmpath_router::config::{ApiKey, Config};
use warmpath_router::kubernetes::Discovery;
use warmpath_router::Options;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_pods_are_routed_with_affinity_and_a_deleted_pod_gets_no_traffic_within_1s() {
    let Some(ns) = TestNamespace::create("router-k8s-pods").await else {
        return;
    };
    apply_crds(ns.cluster());
    let client = ns.client();
    let n = ns.name().to_owned();
    let pods = sim_pods(3).await;
    let _controller = start_controller(ns.cluster(), &n, "controller-0");
    let router = k8s_router(&client, &n).await;
    wait_for("the first list", Duration::from_secs(30), || {
        router.discovery().synced()
    })
    .await;

    create_pool(&client, &n, "llm", Some("llm"), pods.port).await;
    for i in 0..3 {
        create_pod(&client, &n, &format!("llm-{i}"), "llm").await;
    }
    let marked = Instant::now();
    for (i, ip) in pods.ips.iter().enumerate() {
        set_pod_ready(&client, &n, &format!("llm-{i}"), *ip, true).await;
    }
    let took = wait_for("3 routed replicas", Duration::from_secs(20), || {
        routed(&router).len() == 3
    })
    .await;
    eprintln!(
        "3 pods marked Ready -> 3 replicas routed in {took:?} (from the first patch: {:?})",
        marked.elapsed()
    );

    // Router replica name -> simulator address, through the InferenceReplicas.
    let replicas = Api::<InferenceReplica>::namespaced(client.clone(), &n)
        .list(&ListParams::default())
        .await
        .unwrap();
    let mut addr_of = HashMap::new();
    let mut pod_of = HashMap::new();
    for r in &replicas {
        let name = format!("{n}/{}", r.metadata.name.as_deref().unwrap());
        let addr: std::net::SocketAddr = format!("{}:{}", r.spec.address, r.spec.port)
            .parse()
            .unwrap();
        assert!(pods.ips.contains(&addr.ip()), "{r:?}");
        assert_eq!(addr.port(), pods.port);
        addr_of.insert(name.clone(), addr);
        pod_of.insert(name, r.spec.pod.clone().expect("controller sets spec.pod"));
    }
    assert_eq!(addr_of.len(), 3);

    // Affinity: every repeat of a prompt goes where its first copy went; prompts spread.
    let mut home: HashMap<u64, String> = HashMap::new();
    for round in 0..4 {
        for seed in 0..6u64 {
            let reply = complete(router.addr, &prompt(seed, 3000)).await.unwrap();
            assert_eq!(reply.status, 200, "{}", reply.body);
            let replica = reply.replica.expect("x-warmpath-replica");
            assert!(addr_of.contains_key(&replica), "{replica}");
            let first = home.entry(seed).or_insert_with(|| replica.clone());
            assert_eq!(*first, replica, "prompt {seed} moved in round {round}");
        }
    }
    let used: BTreeSet<&String> = home.values().collect();
    assert!(used.len() >= 2, "6 distinct prompts all went to {used:?}");

    // Delete the pod that holds prompt 0: its replica leaves the routing table (the controller's
    // and the router's watches, two hops; well under a second when the machine is idle, printed
    // below; the bound is slack for a busy one), and no request goes to it after.
    let victim = home[&0].clone();
    let victim_addr = addr_of[&victim];
    let before = served(victim_addr).await;
    let deleted = Instant::now();
    Api::<Pod>::namespaced(client.clone(), &n)
        .delete(&pod_of[&victim], &DeleteParams::default())
        .await
        .unwrap();
    let gone = wait_for(
        "the deleted pod's replica to leave",
        Duration::from_secs(10),
        || !routed(&router).contains(&victim),
    )
    .await;
    eprintln!("pod deleted -> its replica out of the routing table in {gone:?}");
    assert!(
        gone <= Duration::from_secs(5),
        "the deleted pod's replica was still routed {gone:?} after deletion"
    );
    let at_removal = served(victim_addr).await;
    for round in 0..3 {
        for seed in 0..6u64 {
            let reply = complete(router.addr, &prompt(seed, 3000)).await.unwrap();
            assert_eq!(reply.status, 200, "{}", reply.body);
            assert_ne!(
                reply.replica.as_deref(),
                Some(victim.as_str()),
                "round {round}"
            );
        }
    }
    assert_eq!(
        served(victim_addr).await,
        at_removal,
        "the deleted pod's engine served requests after it left the table"
    );
    eprintln!(
        "deleted pod served {} requests between the delete call and its removal ({:?})",
        at_removal - before,
        deleted.elapsed()
    );
    assert_eq!(routed(&router).len(), 2);
    router.shutdown().await;
    ns.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_written_replicas_are_routed_and_unresolved_ones_are_not() {
    let Some(ns) = TestNamespace::create("router-k8s-manual").await else {
        return;
    };
    apply_crds(ns.cluster());
    let client = ns.client();
    let n = ns.name().to_owned();
    let pods = sim_pods(2).await;
    let a = std::net::SocketAddr::new(pods.ips[0], pods.port);
    let b = std::net::SocketAddr::new(pods.ips[1], pods.port);
    // No controller: the router alone reads what users write.
    let router = k8s_router(&client, &n).await;
    create_pool(&client, &n, "tpu-vms", None, pods.port).await;
    create_replica(&client, &n, "vm-a", "tpu-vms", a).await;
    create_replica(&client, &n, "vm-b", "tpu-vms", b).await;
    create_replica(&client, &n, "orphan", "no-such-pool", a).await;
    wait_for("2 routed replicas", Duration::from_secs(20), || {
        routed(&router).len() == 2
    })
    .await;
    assert_eq!(
        routed(&router),
        [format!("{n}/vm-a"), format!("{n}/vm-b")],
        "the replica of a missing pool must not be routed"
    );
    assert_eq!(router.metrics().kubernetes.skipped_replicas.get(), 1);

    let mut seen = BTreeSet::new();
    for seed in 0..8u64 {
        let reply = complete(router.addr, &prompt(100 + seed, 2000))
            .await
            .unwrap();
        assert_eq!(reply.status, 200, "{}", reply.body);
        seen.insert(reply.replica.unwrap());
    }
    assert_eq!(seen.len(), 2, "traffic reached {seen:?}");
    assert!(served(a).await > 0.0 && served(b).await > 0.0);

    // Removing one leaves the other serving; removing the pool removes the model.
    Api::<InferenceReplica>::namespaced(client.clone(), &n)
        .delete("vm-a", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("vm-a to leave", Duration::from_secs(10), || {
        routed(&router) == [format!("{n}/vm-b")]
    })
    .await;
    for seed in 0..4u64 {
        let reply = complete(router.addr, &prompt(200 + seed, 500))
            .await
            .unwrap();
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert_eq!(reply.replica.unwrap(), format!("{n}/vm-b"));
    }
    Api::<InferencePool>::namespaced(client.clone(), &n)
        .delete("tpu-vms", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("the model to go", Duration::from_secs(10), || {
        !router.table().serves("tiny")
    })
    .await;
    let reply = complete(router.addr, "hello").await.unwrap();
    assert_eq!(reply.status, 404, "{}", reply.body);
    router.shutdown().await;
    ns.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_waits_for_the_first_list_and_says_why() {
    let Some(ns) = TestNamespace::create("router-k8s-ready").await else {
        return;
    };
    apply_crds(ns.cluster());
    let client = ns.client();
    let n = ns.name().to_owned();
    let sa: ServiceAccount = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "router" }
    }))
    .unwrap();
    Api::<ServiceAccount>::namespaced(client.clone(), &n)
        .create(&PostParams::default(), &sa)
        .await
        .unwrap();
    let (router_client, _) = ns.client_as_service_account(&n, "router").await.unwrap();
    // The router's account may not read warmpath resources yet.
    let router = k8s_router(&router_client, &n).await;
    wait_for("a watch error", Duration::from_secs(20), || {
        router.discovery().error().is_some()
    })
    .await;
    let (status, body) = get(router.admin_addr, "/readyz").await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("waiting for the first full list"), "{body}");
    // Why is the log's to say (it names the API server and the account's rights), not the
    // probe's: the body says a watch failed and where to look.
    assert!(body.contains("log"), "{body}");
    assert!(
        !body.contains("forbidden"),
        "no Kubernetes error in the body: {body}"
    );
    assert!(router
        .discovery()
        .error()
        .is_some_and(|e| e.contains("forbidden")));
    assert!(!router.discovery().synced());

    let pods = sim_pods(1).await;
    create_pool(&client, &n, "ext", None, pods.port).await;
    create_replica(
        &client,
        &n,
        "vm",
        "ext",
        SocketAddr::new(pods.ips[0], pods.port),
    )
    .await;
    let role: Role = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "warmpath-read" },
        "rules": [{
            "apiGroups": ["warmpath.dev"],
            "resources": ["inferencepools", "inferencereplicas", "tenantpolicies"],
            "verbs": ["get", "list", "watch"],
        }, {
            // TenantPolicies' API keys.
            "apiGroups": [""],
            "resources": ["secrets"],
            "verbs": ["get", "list", "watch"],
        }],
    }))
    .unwrap();
    Api::<Role>::namespaced(client.clone(), &n)
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let binding: RoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "warmpath-read" },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "warmpath-read" },
        "subjects": [{ "kind": "ServiceAccount", "name": "router", "namespace": n }],
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(client.clone(), &n)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    let took = wait_for(
        "the first list once allowed",
        Duration::from_secs(30),
        || router.discovery().synced(),
    )
    .await;
    eprintln!("read access granted -> synced in {took:?}");
    assert_eq!(routed(&router), [format!("{n}/vm")]);
    let (status, body) = get(router.admin_addr, "/readyz").await;
    assert_eq!(status, 200, "{body}");
    let reply = complete(router.addr, "hello there").await.unwrap();
    assert_eq!(reply.status, 200, "{}", reply.body);
    router.shutdown().await;
    ns.finish();
}

/// Poll until a request with each key gets the status given, or panic after `limit`.
async fn wait_for_statuses(
    what: &str,
    addr: SocketAddr,
    limit: Duration,
    want: &[(Option<&str>, u16)],
) -> Duration {
    let start = Instant::now();
    loop {
        let mut got = Vec::new();
        for (key, _) in want {
            got.push(status_with_key(addr, *key).await);
        }
        if want.iter().map(|w| w.1).eq(got.iter().copied()) {
            return start.elapsed();
        }
        if start.elapsed() > limit {
            panic!("timed out after {limit:?} waiting for {what}: got {got:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn key_secret(name: &str, key: &str) -> Secret {
    serde_json::from_value(serde_json::json!({
        "metadata": { "name": name },
        "stringData": { "api-key": key },
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_api_keys_come_from_secrets_and_follow_their_changes() {
    let Some(ns) = TestNamespace::create("router-k8s-tenants").await else {
        return;
    };
    apply_crds(ns.cluster());
    let client = ns.client();
    let n = ns.name().to_owned();
    let pods = sim_pods(1).await;
    let config = Config::parse(
        "listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\npools: []\ntenants:\n  require_api_key: true\n",
    )
    .unwrap();
    let router = warmpath_router::start(
        config,
        Options {
            kubernetes: Some(Discovery {
                client: client.clone(),
                namespaces: vec![n.clone()],
                secret_namespaces: vec![n.clone()],
                boundaries: warmpath_e2e::test_boundaries(),
            }),
            ..Default::default()
        },
    )
    .await
    .expect("router start");
    create_pool(&client, &n, "ext", None, pods.port).await;
    create_replica(
        &client,
        &n,
        "vm",
        "ext",
        SocketAddr::new(pods.ips[0], pods.port),
    )
    .await;
    let secrets = Api::<Secret>::namespaced(client.clone(), &n);
    secrets
        .create(
            &PostParams::default(),
            &key_secret("acme-keys", "sk-acme-first-key"),
        )
        .await
        .expect("create secret");
    let policy: TenantPolicy = serde_json::from_value(serde_json::json!({
        "apiVersion": "warmpath.dev/v1", "kind": "TenantPolicy",
        "metadata": { "name": "acme", "namespace": n },
        "spec": { "apiKeySecretRef": { "name": "acme-keys" }, "weight": 2 },
    }))
    .unwrap();
    let policies = Api::<TenantPolicy>::namespaced(client.clone(), &n);
    policies
        .create(&PostParams::default(), &policy)
        .await
        .expect("create tenant policy");

    // The tenant reaches the routing table with its key from the Secret.
    let keys_of_acme = |router: &warmpath_router::RouterHandle| -> Option<Vec<ApiKey>> {
        table_policy(router, &format!("{n}/acme")).map(|t| t.api_keys)
    };
    let took = wait_for("the tenant and its key", Duration::from_secs(20), || {
        router.table().serves("tiny")
            && keys_of_acme(&router).is_some_and(|k| k == ["sk-acme-first-key"])
    })
    .await;
    eprintln!("TenantPolicy and Secret created -> tenant routed in {took:?}");
    assert_eq!(router.table().config.tenants.policies[0].weight, 2);

    // The pool's replica may still be joining the table (503, no ready replica) for a
    // moment after the tenant arrived; the keys must hold once it serves.
    wait_for_statuses(
        "the first key accepted and others refused",
        router.addr,
        Duration::from_secs(20),
        &[
            (Some("sk-acme-first-key"), 200),
            (None, 401),
            (Some("sk-someone-elses-key"), 401),
        ],
    )
    .await;

    // The key is rotated in the Secret: the old one stops working, the new one works.
    secrets
        .patch(
            "acme-keys",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({
                "data": { "api-key": k8s_openapi::ByteString(b"sk-acme-second-key".to_vec()) },
            })),
        )
        .await
        .expect("rotate the key");
    let rotated = wait_for_statuses(
        "the rotated key",
        router.addr,
        Duration::from_secs(20),
        &[
            (Some("sk-acme-first-key"), 401),
            (Some("sk-acme-second-key"), 200),
        ],
    )
    .await;
    eprintln!("Secret rotated -> old key refused, new key accepted in {rotated:?}");

    // The policy is deleted: its tenant, and so its key, is gone.
    policies
        .delete("acme", &DeleteParams::default())
        .await
        .expect("delete tenant policy");
    let gone = wait_for_statuses(
        "the deleted tenant's key to be refused",
        router.addr,
        Duration::from_secs(20),
        &[(Some("sk-acme-second-key"), 401)],
    )
    .await;
    eprintln!("TenantPolicy deleted -> its key refused in {gone:?}");
    assert!(keys_of_acme(&router).is_none());
    router.shutdown().await;
    ns.finish();
}
