//! Gateway API Inference Extension pools as a source, against the real API server with GIE's
//! published CRD (`e2e/fixtures/gie/`): a GIE `InferencePool` annotated with its models gets a
//! managed warmpath pool (owned by it) from the real controller, its ready pods get traffic
//! through a router in Kubernetes mode, removing the annotation or the GIE pool removes the
//! warmpath pool (no garbage collector runs here: the controller deletes it itself), and a
//! hand-written warmpath pool of the same name is left alone.

mod common;

use common::*;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::json;
use std::time::{Duration, Instant};
use warmpath_api::gie::InferencePool as GiePool;
use warmpath_api::v1::{InferencePool, PickerFailureMode};
use warmpath_e2e::TestNamespace;
use warmpath_router::config::FailureMode;

/// GIE pools written as users write them (every field GIE knows, not only those warmpath reads).
fn gie_api(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &ApiResource::erase::<GiePool>(&()))
}

async fn create_gie_pool(client: &kube::Client, ns: &str, name: &str, port: u16, models: &str) {
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "inference.networking.k8s.io/v1",
        "kind": "InferencePool",
        "metadata": {
            "name": name,
            "namespace": ns,
            "annotations": { "warmpath.dev/models": models },
        },
        "spec": {
            "selector": { "matchLabels": { "app": name } },
            "targetPorts": [{ "number": port }],
            "endpointPickerRef": {
                "name": format!("{name}-epp"),
                "port": { "number": 9002 },
                "failureMode": "FailOpen",
            },
        },
    }))
    .unwrap();
    gie_api(client, ns)
        .create(&Default::default(), &obj)
        .await
        .expect("create GIE pool");
}

/// Polls the API server every 50 ms until `f` holds for the warmpath pool `name` (or its
/// absence); returns the pool.
async fn wait_pool(
    client: &kube::Client,
    ns: &str,
    name: &str,
    what: &str,
    f: impl Fn(Option<&InferencePool>) -> bool,
) -> Option<InferencePool> {
    let api = Api::<InferencePool>::namespaced(client.clone(), ns);
    let start = Instant::now();
    loop {
        let pool = api.get_opt(name).await.expect("get pool");
        if f(pool.as_ref()) {
            return pool;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "timed out waiting for {what}: {pool:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Until the warmpath pool `llm` is gone (`what`) and the router no longer serves its model.
async fn pool_and_model_gone(
    client: &kube::Client,
    ns: &str,
    router: &warmpath_router::RouterHandle,
    what: &str,
) {
    wait_pool(client, ns, "llm", what, |p| p.is_none()).await;
    wait_for(
        "the model to leave the table",
        Duration::from_secs(10),
        || !router.table().serves("tiny"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gie_pool_with_ready_pods_gets_traffic_through_the_router() {
    let Some(ns) = TestNamespace::create("gie-pool").await else {
        return;
    };
    apply_crds(ns.cluster());
    let client = ns.client();
    // Before the controller starts: it looks GIE pools up in API discovery once, at start.
    apply_gie_crd(ns.cluster(), &client).await;
    let n = ns.name().to_owned();
    let pods = sim_pods(3).await;
    let _controller = start_controller(ns.cluster(), &n, "controller-0");
    let router = k8s_router(&client, &n).await;
    wait_for("the first list", Duration::from_secs(30), || {
        router.discovery().synced()
    })
    .await;

    create_gie_pool(&client, &n, "llm", pods.port, "tiny").await;
    let gie_uid = gie_api(&client, &n)
        .get("llm")
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    for i in 0..3 {
        create_pod(&client, &n, &format!("llm-{i}"), "llm").await;
    }
    for (i, ip) in pods.ips.iter().enumerate() {
        set_pod_ready(&client, &n, &format!("llm-{i}"), *ip, true).await;
    }

    // The managed warmpath pool: same name, the GIE pool's selector and port, owned by it.
    let pool = wait_pool(&client, &n, "llm", "the mirrored pool", |p| p.is_some())
        .await
        .unwrap();
    assert_eq!(pool.spec.models, ["tiny"]);
    assert_eq!(
        pool.spec.selector,
        Some([("app".to_owned(), "llm".to_owned())].into())
    );
    assert_eq!(pool.spec.target_port, Some(i32::from(pods.port)));
    assert_eq!(
        pool.spec.endpoint_picker.as_ref().map(|p| p.failure_mode),
        Some(PickerFailureMode::FailOpen),
        "endpointPickerRef.failureMode, for warmpath's endpoint picker"
    );
    let labels = pool.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels["warmpath.dev/source"], "gie");
    assert_eq!(
        labels["app.kubernetes.io/managed-by"],
        "warmpath-controller"
    );
    let owners = pool.metadata.owner_references.clone().unwrap_or_default();
    assert_eq!(owners.len(), 1, "{owners:?}");
    assert_eq!(owners[0].api_version, "inference.networking.k8s.io/v1");
    assert_eq!(owners[0].kind, "InferencePool");
    assert_eq!(owners[0].name, "llm");
    assert_eq!(owners[0].uid, gie_uid);
    assert_eq!(owners[0].controller, Some(true));

    let took = wait_for("3 routed replicas", Duration::from_secs(20), || {
        routed(&router).len() == 3
    })
    .await;
    assert_eq!(
        router.table().config.failure_mode_for("tiny"),
        FailureMode::Open
    );
    eprintln!("GIE pool created -> 3 replicas routed within {took:?} of the pods being Ready");
    let mut seen = std::collections::BTreeSet::new();
    for seed in 0..6u64 {
        let reply = complete(router.addr, &prompt(seed, 2000)).await.unwrap();
        assert_eq!(reply.status, 200, "{}", reply.body);
        let replica = reply.replica.expect("x-warmpath-replica");
        assert!(routed(&router).contains(&replica), "{replica}");
        seen.insert(replica);
    }
    assert!(seen.len() >= 2, "6 distinct prompts all went to {seen:?}");
    let served_total: f64 = {
        let mut t = 0.0;
        for ip in &pods.ips {
            t += served(std::net::SocketAddr::new(*ip, pods.port)).await;
        }
        t
    };
    assert_eq!(served_total, 6.0, "the simulators served every request");

    // No models annotation: no warmpath pool, so nothing routed.
    gie_api(&client, &n)
        .patch(
            "llm",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"warmpath.dev/models": null}}})),
        )
        .await
        .unwrap();
    pool_and_model_gone(&client, &n, &router, "the pool to go with the annotation").await;
    // An event on the GIE pool says what to add.
    wait_event(&client, &n, "NotMirrored").await;

    // Annotated again: routed again.
    gie_api(&client, &n)
        .patch(
            "llm",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"warmpath.dev/models": "tiny"}}})),
        )
        .await
        .unwrap();
    wait_for("3 routed replicas again", Duration::from_secs(20), || {
        routed(&router).len() == 3
    })
    .await;
    let reply = complete(router.addr, &prompt(99, 500)).await.unwrap();
    assert_eq!(reply.status, 200, "{}", reply.body);

    // The GIE pool deleted: the controller deletes its warmpath pool (no garbage collector
    // runs in this cluster), and the model leaves the table.
    gie_api(&client, &n)
        .delete("llm", &DeleteParams::default())
        .await
        .unwrap();
    pool_and_model_gone(&client, &n, &router, "the pool to go with the GIE pool").await;

    // A hand-written warmpath pool on the name is left alone, and an event says so.
    create_pool(&client, &n, "taken", None, pods.port).await;
    create_gie_pool(&client, &n, "taken", pods.port, "other-model").await;
    wait_event(&client, &n, "PoolNameTaken").await;
    let kept = Api::<InferencePool>::namespaced(client.clone(), &n)
        .get("taken")
        .await
        .unwrap();
    assert_eq!(kept.spec.models, ["tiny"]);
    assert!(kept
        .metadata
        .owner_references
        .unwrap_or_default()
        .is_empty());

    router.shutdown().await;
    ns.finish();
}

/// Waits for an Event with `reason` in `ns` (the controller's events.k8s.io Events).
async fn wait_event(client: &kube::Client, ns: &str, reason: &str) {
    let api = Api::<Event>::namespaced(client.clone(), ns);
    let start = Instant::now();
    loop {
        let events = api.list(&ListParams::default()).await.expect("list events");
        if events
            .items
            .iter()
            .any(|e| e.reason.as_deref() == Some(reason))
        {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no {reason} event after 20 s: {:?}",
            events
                .items
                .iter()
                .map(|e| (&e.reason, &e.note))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
