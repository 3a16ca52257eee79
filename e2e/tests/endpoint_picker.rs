//! Endpoint-picker mode on a cluster: two routers in Kubernetes mode read the same InferencePool
//! from the real API server, one proxying and one picking for a Gateway (played by the ext_proc
//! client of `warmpath_testkit::ext_proc`, from Envoy's own protos). The picker's choices are the
//! proxy's for the same requests, and the pool's `spec.endpointPicker.failureMode` decides what
//! happens to a request the picker cannot route.

mod common;

use common::*;
use kube::api::{Api, PostParams};
use serde_json::json;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;
use warmpath_api::v1::InferencePool;
use warmpath_e2e::TestNamespace;
use warmpath_router::config::FailureMode;
use warmpath_router::RouterHandle;
use warmpath_testkit::ext_proc::{connect, through, Call};

/// Until no request counts in flight on `router` (it releases a request when the response has
/// ended, a moment after the client has it), so that both routers decide from the same state.
async fn settled(router: &RouterHandle) {
    let idle = router.wait_idle("tiny", Duration::from_secs(5)).await;
    assert!(idle, "requests still counted in flight");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_picker_chooses_as_the_proxy_does_from_the_clusters_pool() {
    let Some(ns) = TestNamespace::create("picker").await else {
        return;
    };
    apply_crds(ns.cluster());
    let client = ns.client();
    let n = ns.name().to_owned();
    let pods = sim_pods(3).await;
    // No engine scrapes: both routers see load only through their own counters, so the same
    // requests in the same order get the same choices whatever the engines' timing.
    let pool: InferencePool = serde_json::from_value(json!({
        "apiVersion": "warmpath.dev/v1", "kind": "InferencePool",
        "metadata": { "name": "llm", "namespace": n },
        "spec": {
            "models": ["tiny"],
            "metrics": { "enabled": false },
            "endpointPicker": { "failureMode": "FailOpen" },
        },
    }))
    .unwrap();
    Api::<InferencePool>::namespaced(client.clone(), &n)
        .create(&PostParams::default(), &pool)
        .await
        .expect("create pool");
    let mut name_of = HashMap::new();
    for (i, ip) in pods.ips.iter().enumerate() {
        let addr = SocketAddr::new(*ip, pods.port);
        create_replica(&client, &n, &format!("vm-{i}"), "llm", addr).await;
        name_of.insert(addr.to_string(), format!("{n}/vm-{i}"));
    }
    let picker = k8s_router_with(&client, &n, "endpoint_picker:\n  listen: 127.0.0.1:0\n").await;
    let proxy = k8s_router(&client, &n).await;
    wait_for("3 replicas in both tables", Duration::from_secs(20), || {
        routed(&picker).len() == 3 && routed(&proxy).len() == 3
    })
    .await;
    assert_eq!(
        picker.table().config.failure_mode_for("tiny"),
        FailureMode::Open,
        "the pool's failure mode, from the cluster"
    );
    let mut gateway = connect(picker.endpoint_picker_addr.expect("picker listens")).await;

    // 6 long prefixes, each asked 3 times with different endings.
    let mut picked = Vec::new();
    let mut proxied = Vec::new();
    for round in 0..3 {
        for seed in 0..6u64 {
            let body = json!({
                "model": "tiny",
                "max_tokens": 2,
                "prompt": format!("{} round {round}: why?", prompt(300 + seed, 3000)),
            })
            .to_string();
            let told = through(&mut gateway, &Call::post("/v1/completions", body.clone()))
                .await
                .expect("picked");
            let endpoint = told.destination.expect("a destination");
            assert_eq!(told.upstream_status, Some(200));
            picked.push(name_of[&endpoint].clone());
            settled(&picker).await;

            let reply = warmpath_testkit::send(
                proxy.addr,
                "POST",
                "/v1/completions",
                &[],
                body,
                Duration::from_secs(10),
            )
            .await
            .unwrap();
            assert_eq!(reply.status, 200, "{}", reply.body);
            proxied.push(reply.replica());
            settled(&proxy).await;
        }
    }
    assert_eq!(picked, proxied, "the picker's choices are the proxy's");
    let homes: std::collections::BTreeSet<&String> = picked.iter().collect();
    assert!(homes.len() >= 2, "6 prefixes on one replica: {picked:?}");

    // A request it cannot route (the Gateway's subset holds none of the pool's replicas): the
    // pool fails open, so no endpoint is named and the Gateway routes it itself.
    let mut call = Call::post(
        "/v1/completions",
        json!({ "model": "tiny", "prompt": "hello", "max_tokens": 1 }).to_string(),
    );
    call.subset = Some(vec!["192.0.2.1:1".to_owned()]);
    let told = through(&mut gateway, &call).await.unwrap();
    assert!(
        told.immediate.is_none(),
        "failed closed: {:?}",
        told.immediate
    );
    assert_eq!(told.destination, None);

    picker.shutdown().await;
    proxy.shutdown().await;
    ns.finish();
}
