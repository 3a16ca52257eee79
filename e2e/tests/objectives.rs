//! llm-d InferenceObjectives as a source of priorities, against the real API server with llm-d's
//! published CRD (`e2e/fixtures/llm-d/`): a router in Kubernetes mode watches them, a request
//! naming one (`x-llm-d-inference-objective`) gets its priority in the saturated pool's queue and
//! goes before earlier work of the same tenant, a changed priority is followed (negative: shed
//! when saturated), and a deleted objective no longer counts.

mod common;

use common::*;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams};
use serde_json::json;
use std::net::SocketAddr;
use std::time::Duration;
use warmpath_api::llmd::InferenceObjective;
use warmpath_e2e::TestNamespace;

/// Objectives written as llm-d users write them (through the API, as untyped objects).
fn objectives(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        client.clone(),
        ns,
        &ApiResource::erase::<InferenceObjective>(&()),
    )
}

/// Create or change the objective `name` of pool `pool`.
async fn apply_objective(client: &kube::Client, ns: &str, name: &str, pool: &str, priority: i32) {
    let obj = json!({
        "apiVersion": "llm-d.ai/v1alpha2",
        "kind": "InferenceObjective",
        "metadata": { "name": name, "namespace": ns },
        "spec": {
            "priority": priority,
            "poolRef": { "group": "inference.networking.k8s.io", "kind": "InferencePool", "name": pool },
        },
    });
    objectives(client, ns)
        .patch(
            name,
            &PatchParams::apply("warmpath-e2e").force(),
            &Patch::Apply(obj),
        )
        .await
        .expect("apply InferenceObjective");
}

/// One completion of 40 output tokens (about 200 ms on the slow simulator), as tenant `a`,
/// naming `objective` when given.
async fn send_as(addr: SocketAddr, objective: Option<&str>) -> warmpath_testkit::Reply {
    let mut headers = vec![("x-warmpath-tenant", "a")];
    if let Some(o) = objective {
        headers.push(("x-llm-d-inference-objective", o));
    }
    let body = json!({ "model": "tiny", "prompt": prompt(7, 200), "max_tokens": 40 }).to_string();
    warmpath_testkit::send(
        addr,
        "POST",
        "/v1/completions",
        &headers,
        body,
        Duration::from_secs(30),
    )
    .await
    .expect("answer")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_objectives_priority_orders_a_saturated_queue_and_follows_its_changes() {
    let Some(ns) = TestNamespace::create("objectives").await else {
        return;
    };
    apply_crds(ns.cluster());
    let client = ns.client();
    // Before the router starts: it looks InferenceObjectives up in API discovery once, at start.
    apply_llmd_objective_crd(ns.cluster(), &client).await;
    let n = ns.name().to_owned();
    // One replica that the router lets serve one request at a time, each taking 40 × 5 ms.
    let pods = sim_pods_with(1, &["--decode-base-ms", "5", "--decode-per-seq-ms", "0"]).await;
    let router = k8s_router_with(
        &client,
        &n,
        "flow:\n  enabled: true\n  saturation:\n    max_inflight_requests: 1\n    max_waiting_requests: null\n    max_kv_usage: null\ntenants:\n  trusted_sources: [127.0.0.0/8]\n",
    )
    .await;
    create_pool(&client, &n, "llm", None, pods.port).await;
    create_replica(
        &client,
        &n,
        "llm-0",
        "llm",
        SocketAddr::new(pods.ips[0], pods.port),
    )
    .await;
    // An objective of another pool must not apply to this one's model.
    apply_objective(&client, &n, "chat", "llm", 10).await;
    apply_objective(&client, &n, "elsewhere", "no-such-pool", 20).await;
    let priority = |name: &str| {
        router
            .table()
            .objectives
            .get(name, "tiny")
            .map(|o| o.priority)
    };
    let took = wait_for(
        "the objective in the table",
        Duration::from_secs(20),
        || routed(&router).len() == 1 && priority("chat") == Some(10),
    )
    .await;
    eprintln!("InferenceObjective applied -> in the routing table in {took:?}");
    assert_eq!(priority("elsewhere"), None);

    // One tenant throughout: the first request holds the slot, four without an objective queue
    // in band 0, then `chat` arrives last, in band 10.
    let addr = router.addr;
    let sends = [None, None, None, None, Some("chat")];
    let labels = sends.map(|o| o.unwrap_or("plain"));
    let done =
        warmpath_testkit::finishing_order(router.admin_addr, &labels, |i| send_as(addr, sends[i]))
            .await;
    let order: Vec<&str> = done.iter().map(|(n, _, _)| n.as_str()).collect();
    for (_, r, _) in &done {
        assert_eq!(r.status, 200, "{order:?}: {}", r.body);
    }
    let chat = order.iter().position(|n| *n == "chat4").unwrap();
    assert!(
        chat <= 1,
        "the objective's priority did not put it before earlier work: {order:?}"
    );

    // The objective turns sheddable: while the pool is saturated, a request naming it is refused.
    apply_objective(&client, &n, "chat", "llm", -1).await;
    wait_for("the changed priority", Duration::from_secs(20), || {
        priority("chat") == Some(-1)
    })
    .await;
    let arrived = warmpath_testkit::flow_arrivals(router.admin_addr).await;
    let holder = tokio::spawn(send_as(addr, None));
    warmpath_testkit::until_flow_arrivals(router.admin_addr, arrived + 1).await;
    let shed = send_as(addr, Some("chat")).await;
    assert_eq!(shed.status, 429, "{}", shed.body);
    assert_eq!(
        shed.header("x-warmpath-dropped-reason"),
        Some("saturated"),
        "{}",
        shed.body
    );
    assert_eq!(holder.await.unwrap().status, 200);

    // Deleted: requests naming it keep the tenant's priority and are counted as unknown.
    objectives(&client, &n)
        .delete("chat", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("the objective to go", Duration::from_secs(20), || {
        priority("chat").is_none()
    })
    .await;
    let before = router.metrics().flow.unknown_objectives.get();
    assert_eq!(send_as(addr, Some("chat")).await.status, 200);
    assert_eq!(router.metrics().flow.unknown_objectives.get(), before + 1);
    router.shutdown().await;
    ns.finish();
}
