//! What one namespace's warmpath resources can do to another's, on the real API server with
//! the real controller and a router watching both namespaces: a pool naming a model another
//! namespace claimed first gets no request and a `ModelsClaimed: False` condition (and the
//! model passes to it once the owner's pool is gone); a replica outside the allowed networks
//! gets no request and an `AddressNotAllowed` condition; a tokenizer path outside the root
//! (a device file here) is refused without being read, and the pool routes without it; a
//! TenantPolicy in another namespace can neither take a tenant's API key or header value nor
//! raise its priority above the operator's cap.

mod common;

use common::*;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use std::net::SocketAddr;
use std::time::Duration;
use warmpath_api::boundaries::{Boundaries, ReplicaNetworks};
use warmpath_api::conditions::{self, reason};
use warmpath_api::v1::{InferencePool, InferenceReplica, TenantPolicy};
use warmpath_e2e::TestNamespace;
use warmpath_router::config::Config;
use warmpath_router::kubernetes::Discovery;
use warmpath_router::{Options, RouterHandle};

/// Two fresh namespaces: the one whose resources come first, and the one that tries to take
/// from it.
async fn two_namespaces(test: &str) -> Option<(TestNamespace, TestNamespace)> {
    let first = TestNamespace::create(&format!("{test}-owner")).await?;
    let second = TestNamespace::create(&format!("{test}-other")).await?;
    apply_crds(first.cluster());
    Some((first, second))
}

/// The controller watching both namespaces, with the routers' boundaries in `env`.
fn controller_for(
    owner: &TestNamespace,
    other: &TestNamespace,
    env: &[(&str, &str)],
) -> warmpath_e2e::KillOnDrop {
    let bin = warmpath_e2e::workspace_bin("warmpath-controller").expect("build controller");
    let both = format!("{},{}", owner.name(), other.name());
    let mut cmd =
        warmpath_e2e::controller_command(&bin, owner.cluster().kubeconfig(), &both, "ctl-0");
    cmd.env("WARMPATH_LEASE_NAMESPACE", owner.name());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let log = std::env::temp_dir().join(format!("warmpath-e2e-{}-ctl.log", owner.name()));
    let file = std::fs::File::create(&log).expect("controller log file");
    cmd.stdout(file.try_clone().unwrap()).stderr(file);
    eprintln!("controller logs to {}", log.display());
    warmpath_e2e::KillOnDrop::spawn(&mut cmd).expect("start controller")
}

/// A router watching both namespaces with `boundaries`, and `extra` configuration.
async fn router_for(
    owner: &TestNamespace,
    other: &TestNamespace,
    boundaries: Boundaries,
    extra: &str,
) -> RouterHandle {
    let config = Config::parse(&format!(
        "listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\npools: []\n{extra}"
    ))
    .unwrap();
    let router = warmpath_router::start(
        config,
        Options {
            kubernetes: Some(Discovery {
                client: owner.client(),
                namespaces: vec![owner.name().to_owned(), other.name().to_owned()],
                secret_namespaces: vec![owner.name().to_owned(), other.name().to_owned()],
                boundaries,
            }),
            ..Default::default()
        },
    )
    .await
    .expect("router start");
    wait_for("the first list", Duration::from_secs(30), || {
        router.discovery().synced()
    })
    .await;
    router
}

/// Creation times have a resolution of one second: this makes the next object younger.
/// A sleep, not a wait on state: what orders the objects is the API server's clock, which
/// nothing shows before the next object is created.
async fn next_second() {
    tokio::time::sleep(Duration::from_millis(1100)).await;
}

/// Polls the API until `f` holds for the object's status conditions.
async fn wait_for_condition<K>(
    api: &Api<K>,
    name: &str,
    what: &str,
    conditions_of: impl Fn(&K) -> Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
    f: impl Fn(&[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition]) -> bool,
) -> Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let start = std::time::Instant::now();
    loop {
        if let Ok(obj) = api.get(name).await {
            let cs = conditions_of(&obj);
            if f(&cs) {
                return cs;
            }
            if start.elapsed() > Duration::from_secs(30) {
                panic!("timed out waiting for {what}: {cs:?}");
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn pool_conditions(
    p: &InferencePool,
) -> Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    p.status.clone().map(|s| s.conditions).unwrap_or_default()
}

fn replica_conditions(
    r: &InferenceReplica,
) -> Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    r.status.clone().map(|s| s.conditions).unwrap_or_default()
}

fn tenant_conditions(
    t: &TenantPolicy,
) -> Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    t.status.clone().map(|s| s.conditions).unwrap_or_default()
}

fn has(
    cs: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
    type_: &str,
    status: &str,
    why: &str,
) -> bool {
    conditions::get(cs, type_).is_some_and(|c| c.status == status && c.reason == why)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_naming_another_namespaces_model_gets_no_request_and_a_condition() {
    let Some((owner, other)) = two_namespaces("ns-models").await else {
        return;
    };
    let (a, b) = (owner.name().to_owned(), other.name().to_owned());
    let client = owner.client();
    let pods = sim_pods(2).await;
    let _controller = controller_for(&owner, &other, &[]);
    let router = router_for(&owner, &other, warmpath_e2e::test_boundaries(), "").await;

    create_pool(&client, &a, "serving", None, pods.port).await;
    create_replica(
        &client,
        &a,
        "r",
        "serving",
        SocketAddr::new(pods.ips[0], pods.port),
    )
    .await;
    next_second().await;
    create_pool(&client, &b, "grab", None, pods.port).await;
    create_replica(
        &client,
        &b,
        "r",
        "grab",
        SocketAddr::new(pods.ips[1], pods.port),
    )
    .await;

    let pools_b = Api::<InferencePool>::namespaced(client.clone(), &b);
    let cs = wait_for_condition(
        &pools_b,
        "grab",
        "ModelsClaimed False",
        pool_conditions,
        |cs| {
            has(
                cs,
                conditions::MODELS_CLAIMED,
                "False",
                reason::MODEL_CLAIMED_BY_NAMESPACE,
            )
        },
    )
    .await;
    let claimed = conditions::get(&cs, conditions::MODELS_CLAIMED).unwrap();
    assert!(
        claimed.message.contains("\"tiny\"") && claimed.message.contains(&a),
        "{}",
        claimed.message
    );
    assert!(
        has(
            &cs,
            conditions::READY,
            "False",
            reason::MODEL_CLAIMED_BY_NAMESPACE
        ),
        "{cs:?}"
    );
    let pools_a = Api::<InferencePool>::namespaced(client.clone(), &a);
    wait_for_condition(
        &pools_a,
        "serving",
        "the owner's ModelsClaimed True",
        pool_conditions,
        |cs| has(cs, conditions::MODELS_CLAIMED, "True", reason::MODELS_OWNED),
    )
    .await;

    wait_for("the owner's replica", Duration::from_secs(20), || {
        routed(&router) == [format!("{a}/r")]
    })
    .await;
    for seed in 0..20 {
        let reply = complete(router.addr, &prompt(seed, 500)).await.unwrap();
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert_eq!(reply.replica.as_deref(), Some(format!("{a}/r").as_str()));
    }
    let other_addr = SocketAddr::new(pods.ips[1], pods.port);
    assert_eq!(
        served(other_addr).await,
        0.0,
        "the other namespace's engine got a request"
    );

    // The owner's pool is deleted: the model passes to the other namespace, whose pool's
    // condition follows without the pool itself changing.
    pools_a
        .delete("serving", &DeleteParams::default())
        .await
        .expect("delete the owner's pool");
    wait_for_condition(
        &pools_b,
        "grab",
        "ModelsClaimed True after the owner left",
        pool_conditions,
        |cs| has(cs, conditions::MODELS_CLAIMED, "True", reason::MODELS_OWNED),
    )
    .await;
    wait_for(
        "the other namespace's replica",
        Duration::from_secs(20),
        || routed(&router) == [format!("{b}/r")],
    )
    .await;
    let reply = complete(router.addr, &prompt(99, 500)).await.unwrap();
    assert_eq!(reply.replica.as_deref(), Some(format!("{b}/r").as_str()));

    router.shutdown().await;
    owner.finish();
    other.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_outside_the_allowed_networks_gets_no_request_and_a_condition() {
    let Some((owner, other)) = two_namespaces("ns-replicas").await else {
        return;
    };
    let b = other.name().to_owned();
    let client = owner.client();
    let pods = sim_pods(2).await;
    // Only the first engine's address is allowed; the second one answers too, but is
    // outside (it stands for another namespace's engine behind its NetworkPolicy).
    let allowed = format!("{}/32", pods.ips[0]);
    let _controller = controller_for(&owner, &other, &[("WARMPATH_REPLICA_NETWORKS", &allowed)]);
    let boundaries = Boundaries {
        replica_networks: ReplicaNetworks {
            allow: vec![allowed.parse().unwrap()],
            hostnames: false,
        },
        ..warmpath_e2e::test_boundaries()
    };
    let router = router_for(&owner, &other, boundaries, "").await;

    create_pool(&client, &b, "ext", None, pods.port).await;
    create_replica(
        &client,
        &b,
        "inside",
        "ext",
        SocketAddr::new(pods.ips[0], pods.port),
    )
    .await;
    create_replica(
        &client,
        &b,
        "outside",
        "ext",
        SocketAddr::new(pods.ips[1], pods.port),
    )
    .await;
    let replicas = Api::<InferenceReplica>::namespaced(client.clone(), &b);
    let cs = wait_for_condition(
        &replicas,
        "outside",
        "AddressNotAllowed",
        replica_conditions,
        |cs| {
            has(
                cs,
                conditions::ACCEPTED,
                "False",
                reason::ADDRESS_NOT_ALLOWED,
            )
        },
    )
    .await;
    let why = &conditions::get(&cs, conditions::ACCEPTED).unwrap().message;
    assert!(
        why.contains(&pods.ips[1].to_string()) && why.contains(&allowed),
        "{why}"
    );
    wait_for_condition(
        &replicas,
        "inside",
        "the inside replica Ready",
        replica_conditions,
        |cs| conditions::is_true(cs, conditions::READY),
    )
    .await;
    wait_for("the inside replica", Duration::from_secs(20), || {
        routed(&router) == [format!("{b}/inside")]
    })
    .await;
    for seed in 0..20 {
        let reply = complete(router.addr, &prompt(seed, 500)).await.unwrap();
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
    assert_eq!(served(SocketAddr::new(pods.ips[1], pods.port)).await, 0.0);
    assert_eq!(served(SocketAddr::new(pods.ips[0], pods.port)).await, 20.0);
    // The pool counts only what the routers route.
    let pool = Api::<InferencePool>::namespaced(client.clone(), &b);
    let start = std::time::Instant::now();
    loop {
        let s = pool.get("ext").await.unwrap().status.unwrap_or_default();
        if (s.replicas, s.ready_replicas) == (2, 1) {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "{s:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    router.shutdown().await;
    owner.finish();
    other.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tokenizer_path_outside_the_root_is_refused_and_the_pool_still_routes() {
    let Some((owner, other)) = two_namespaces("ns-tokenizer").await else {
        return;
    };
    let b = other.name().to_owned();
    let client = owner.client();
    let pods = sim_pods(1).await;
    // The operator's root holds the tiny model's tokenizer; beside it, outside the root, a
    // file no pool may have read, and inside it a link that leads there.
    let root = owner.scratch_dir().join("tokenizers");
    std::fs::create_dir_all(root.join("tiny")).unwrap();
    let fixtures = warmpath_e2e::repo_root().join("tokenize/tests/fixtures/tiny");
    std::fs::copy(
        fixtures.join("tokenizer.json"),
        root.join("tiny/tokenizer.json"),
    )
    .unwrap();
    let secret = owner.scratch_dir().join("not-a-tokenizer.json");
    std::fs::copy(fixtures.join("tokenizer.json"), &secret).unwrap();
    std::os::unix::fs::symlink(&secret, root.join("escape.json")).unwrap();
    let root_str = root.display().to_string();
    let _controller = controller_for(
        &owner,
        &other,
        &[("WARMPATH_TOKENIZER_ROOT", root_str.as_str())],
    );
    let boundaries = Boundaries {
        tokenizer_root: root.clone(),
        ..warmpath_e2e::test_boundaries()
    };
    let router = router_for(&owner, &other, boundaries, "").await;

    let pool_with = |name: &str, model: &str, tokenizer: String| -> InferencePool {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "warmpath.dev/v1", "kind": "InferencePool",
            "metadata": { "name": name, "namespace": b },
            "spec": {
                "models": [model],
                "kvEvents": { "port": 1, "tokenizer": tokenizer },
            },
        }))
        .unwrap()
    };
    let pools = Api::<InferencePool>::namespaced(client.clone(), &b);
    let pp = PostParams::default();
    // /dev/zero: a router that read it whole would never build its table.
    pools
        .create(&pp, &pool_with("zero", "tiny", "/dev/zero".into()))
        .await
        .unwrap();
    pools
        .create(
            &pp,
            &pool_with("escape", "escape", format!("{root_str}/escape.json")),
        )
        .await
        .unwrap();
    pools
        .create(
            &pp,
            &pool_with("good", "good", format!("{root_str}/tiny/tokenizer.json")),
        )
        .await
        .unwrap();
    create_replica(
        &client,
        &b,
        "r",
        "zero",
        SocketAddr::new(pods.ips[0], pods.port),
    )
    .await;

    let cs = wait_for_condition(
        &pools,
        "zero",
        "TokenizerAllowed False",
        pool_conditions,
        |cs| {
            has(
                cs,
                conditions::TOKENIZER_ALLOWED,
                "False",
                reason::OUTSIDE_TOKENIZER_ROOT,
            )
        },
    )
    .await;
    let why = &conditions::get(&cs, conditions::TOKENIZER_ALLOWED)
        .unwrap()
        .message;
    assert!(
        why.contains("/dev/zero") && why.contains(&root_str),
        "{why}"
    );
    wait_for_condition(
        &pools,
        "good",
        "TokenizerAllowed True",
        pool_conditions,
        |cs| {
            has(
                cs,
                conditions::TOKENIZER_ALLOWED,
                "True",
                reason::UNDER_TOKENIZER_ROOT,
            )
        },
    )
    .await;

    wait_for("the pool's replica", Duration::from_secs(20), || {
        routed(&router) == [format!("{b}/r")]
    })
    .await;
    let table = router.table();
    assert!(
        table.precise("tiny").is_none(),
        "/dev/zero was taken as a tokenizer"
    );
    assert!(
        table.precise("escape").is_none(),
        "a link out of the root was followed"
    );
    assert!(
        table.precise("good").is_some(),
        "the tokenizer under the root was refused"
    );
    // Refused tokenizer, traffic still flows (by the approximate index).
    for seed in 0..5 {
        let reply = complete(router.addr, &prompt(seed, 500)).await.unwrap();
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
    router.shutdown().await;
    owner.finish();
    other.finish();
}

fn key_secret(name: &str, key: &str) -> Secret {
    serde_json::from_value(serde_json::json!({
        "metadata": { "name": name },
        "stringData": { "api-key": key },
    }))
    .unwrap()
}

fn tenant_policy(ns: &str, name: &str, spec: serde_json::Value) -> TenantPolicy {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "warmpath.dev/v1", "kind": "TenantPolicy",
        "metadata": { "name": name, "namespace": ns }, "spec": spec,
    }))
    .unwrap()
}

/// The tenant the router gives a request with this key, or from a trusted peer with this
/// tenant header value, and its priority.
fn tenant_of(
    router: &RouterHandle,
    key: Option<&str>,
    header: Option<&str>,
) -> Option<(String, i32)> {
    let mut headers = http::HeaderMap::new();
    if let Some(k) = key {
        headers.insert("authorization", format!("Bearer {k}").parse().unwrap());
    }
    if let Some(h) = header {
        headers.insert("x-warmpath-tenant", h.parse().unwrap());
    }
    let table = router.table();
    let id = table
        .tenants
        .identify(&headers, Some("127.0.0.1".parse().unwrap()))
        .ok()?;
    Some((id.tenant.name.to_string(), id.tenant.priority))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_policy_in_another_namespace_cannot_take_a_key_or_header_or_raise_its_priority() {
    let Some((owner, other)) = two_namespaces("ns-tenants").await else {
        return;
    };
    let (a, b) = (owner.name().to_owned(), other.name().to_owned());
    let client = owner.client();
    let pods = sim_pods(1).await;
    let _controller = controller_for(&owner, &other, &[("WARMPATH_MAX_TENANT_PRIORITY", "10")]);
    let boundaries = Boundaries {
        max_tenant_priority: 10,
        ..warmpath_e2e::test_boundaries()
    };
    let router = router_for(
        &owner,
        &other,
        boundaries,
        "tenants:\n  require_api_key: true\n  trusted_sources: [127.0.0.0/8]\n",
    )
    .await;
    create_pool(&client, &a, "ext", None, pods.port).await;
    create_replica(
        &client,
        &a,
        "vm",
        "ext",
        SocketAddr::new(pods.ips[0], pods.port),
    )
    .await;

    let pp = PostParams::default();
    let key = "sk-owner-key-0001";
    Api::<Secret>::namespaced(client.clone(), &a)
        .create(&pp, &key_secret("keys", key))
        .await
        .unwrap();
    Api::<TenantPolicy>::namespaced(client.clone(), &a)
        .create(
            &pp,
            &tenant_policy(
                &a,
                "acme",
                serde_json::json!({"header": "acme", "priority": 5, "apiKeySecretRef": {"name": "keys"}}),
            ),
        )
        .await
        .unwrap();
    let owner_tenant = (format!("{a}/acme"), 5);
    wait_for("the owner's tenant", Duration::from_secs(20), || {
        router.table().serves("tiny")
            && tenant_of(&router, Some(key), None) == Some(owner_tenant.clone())
    })
    .await;
    next_second().await;

    // The other namespace copies the key into a policy of the same name asking for the top
    // band, and names another policy with the owner's header value.
    let other_key = "sk-other-own-key-1";
    Api::<Secret>::namespaced(client.clone(), &b)
        .create(
            &pp,
            &serde_json::from_value(serde_json::json!({
                "metadata": { "name": "keys" },
                "stringData": { "copied": key, "own": other_key },
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let policies_b = Api::<TenantPolicy>::namespaced(client.clone(), &b);
    policies_b
        .create(
            &pp,
            &tenant_policy(
                &b,
                "acme",
                serde_json::json!({"priority": 1000, "apiKeySecretRef": {"name": "keys"}}),
            ),
        )
        .await
        .unwrap();
    policies_b
        .create(
            &pp,
            &tenant_policy(&b, "squat", serde_json::json!({"header": "acme"})),
        )
        .await
        .unwrap();
    let other_tenant = (format!("{b}/acme"), 10);
    wait_for(
        "the other namespace's tenant",
        Duration::from_secs(20),
        || tenant_of(&router, Some(other_key), None) == Some(other_tenant.clone()),
    )
    .await;
    // Its policies are in the table by now: the key, the header value and the priority are
    // still the owner's, and requests with the key are the owner's.
    assert_eq!(
        tenant_of(&router, Some(key), None),
        Some(owner_tenant.clone())
    );
    assert_eq!(
        tenant_of(&router, None, Some("acme")),
        Some(owner_tenant.clone())
    );
    assert_eq!(status_with_key(router.addr, Some(key)).await, 200);
    assert_eq!(status_with_key(router.addr, Some(other_key)).await, 200);
    let priorities: Vec<i32> = router
        .table()
        .config
        .tenants
        .policies
        .iter()
        .map(|t| t.priority)
        .collect();
    assert!(priorities.iter().all(|p| *p <= 10), "{priorities:?}");

    let cs = wait_for_condition(
        &policies_b,
        "acme",
        "PriorityCapped",
        tenant_conditions,
        |cs| has(cs, conditions::ACCEPTED, "True", reason::PRIORITY_CAPPED),
    )
    .await;
    assert!(conditions::get(&cs, conditions::ACCEPTED)
        .unwrap()
        .message
        .contains("priority 10"));
    let cs = wait_for_condition(
        &policies_b,
        "squat",
        "HeaderClaimed",
        tenant_conditions,
        |cs| has(cs, conditions::ACCEPTED, "False", reason::HEADER_CLAIMED),
    )
    .await;
    assert!(
        conditions::get(&cs, conditions::ACCEPTED)
            .unwrap()
            .message
            .contains(&format!("{a}/acme")),
        "{cs:?}"
    );

    // Raising the priority later changes nothing either, once the router has seen the change
    // (its weight, which is not capped, says when).
    policies_b
        .patch(
            "acme",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"priority": 999, "weight": 7}})),
        )
        .await
        .unwrap();
    let other_acme = format!("{b}/acme");
    wait_for("the patched policy", Duration::from_secs(20), || {
        table_policy(&router, &other_acme).is_some_and(|t| t.weight == 7)
    })
    .await;
    assert_eq!(
        tenant_of(&router, Some(other_key), None),
        Some(other_tenant)
    );
    router.shutdown().await;
    owner.finish();
    other.finish();
}
