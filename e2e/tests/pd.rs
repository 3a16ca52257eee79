//! The prefill/decode split against the real API server: a prefill pool and a decode pool
//! (InferencePools with `role: prefill` and `role: decode`) whose pods are loopback addresses,
//! the decode "pods" running warmpath's P/D sidecar in front of their simulator engine, the
//! controller turning Ready pods into InferenceReplicas, and the router in Kubernetes mode with
//! `pd.connector: sidecar` splitting long prompts through the sidecars.

mod common;

use common::*;
use kube::api::{Api, PostParams};
use serde_json::json;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;
use warmpath_api::v1::InferencePool;
use warmpath_e2e::TestNamespace;
use warmpath_router::kubernetes::Discovery;
use warmpath_router::sidecar::{self, AllowList, CidrPorts, SidecarHandle, SidecarOptions};
use warmpath_router::{config::Config, Options};

/// A pool of `tiny` in `role`, over pods labelled `app=<label>`, served on `port`.
async fn role_pool(
    client: &kube::Client,
    ns: &str,
    name: &str,
    role: &str,
    label: &str,
    port: u16,
) {
    let pool: InferencePool = serde_json::from_value(json!({
        "apiVersion": "warmpath.dev/v1", "kind": "InferencePool",
        "metadata": { "name": name, "namespace": ns },
        "spec": { "models": ["tiny"], "selector": { "app": label }, "targetPort": port, "role": role },
    }))
    .unwrap();
    Api::<InferencePool>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pool)
        .await
        .expect("create pool");
}

/// A P/D sidecar on every decode pod address, in front of that pod's engine, allowed to call
/// the prefill pods' /24 only. All on one port (a pool has one target port).
async fn sidecars(engines: &Pods, prefill: &Pods) -> (Vec<SidecarHandle>, u16) {
    let IpAddr::V4(p) = prefill.ips[0] else {
        unreachable!()
    };
    let [a, b, c, _] = p.octets();
    // On the prefill engines' port only, as an operator would list it (`--prefill-port`).
    let allow = AllowList::new(vec![format!("{a}.{b}.{c}.0/24").parse().unwrap()], vec![])
        .on_ports(CidrPorts::Listed(vec![prefill.port]));
    'retry: for _ in 0..20 {
        let port: u16 = rand::random_range(20000..60000);
        let mut started = Vec::new();
        for ip in &engines.ips {
            let options = SidecarOptions {
                listen: SocketAddr::new(*ip, port),
                admin: "127.0.0.1:0".parse().unwrap(),
                engine: format!("http://{}", SocketAddr::new(*ip, engines.port))
                    .parse()
                    .unwrap(),
                allow: allow.clone(),
                ..SidecarOptions::default()
            };
            match sidecar::start(options).await {
                Ok(s) => started.push(s),
                Err(_) => continue 'retry, // the port is taken on one address
            }
        }
        return (started, port);
    }
    panic!("no free port for the sidecars after 20 tries");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefill_and_decode_pools_split_through_the_decode_pods_sidecars() {
    let Some(ns) = TestNamespace::create("router-k8s-pd").await else {
        return;
    };
    apply_crds(ns.cluster());
    let client = ns.client();
    let n = ns.name().to_owned();
    let prefill = sim_pods(2).await;
    let engines = sim_pods(2).await;
    let (sidecars, sidecar_port) = sidecars(&engines, &prefill).await;
    let _controller = start_controller(ns.cluster(), &n, "controller-0");
    let config = Config::parse(
        "listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\npools: []\npd:\n  connector: sidecar\n  threshold_tokens: 64\n",
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

    role_pool(&client, &n, "pre", "prefill", "pre", prefill.port).await;
    role_pool(&client, &n, "dec", "decode", "dec", sidecar_port).await;
    for (i, ip) in prefill.ips.iter().enumerate() {
        create_pod(&client, &n, &format!("pre-{i}"), "pre").await;
        set_pod_ready(&client, &n, &format!("pre-{i}"), *ip, true).await;
    }
    for (i, ip) in engines.ips.iter().enumerate() {
        create_pod(&client, &n, &format!("dec-{i}"), "dec").await;
        set_pod_ready(&client, &n, &format!("dec-{i}"), *ip, true).await;
    }
    let took = wait_for(
        "2 decode and 2 prefill replicas",
        Duration::from_secs(30),
        || {
            let table = router.table();
            let ready = |cs: Option<
                &std::sync::Arc<[warmpath_router::state::table::Candidate]>,
            >| { cs.map_or(0, |cs| cs.len()) };
            ready(table.candidates("tiny")) == 2 && ready(table.prefill_candidates("tiny")) == 2
        },
    )
    .await;
    eprintln!("4 pods Ready -> routed in {took:?}");
    let took = wait_for("ready decode replicas", Duration::from_secs(20), || {
        router.table().candidates("tiny").is_some_and(|cs| {
            cs.iter()
                .all(|c| c.replica.health.is_ready(std::time::Instant::now()))
        })
    })
    .await;
    eprintln!("decode replicas ready (scraped through their sidecars) in {took:?}");

    // A long prompt: split, its prefill on a prefill pod, its decode on a decode pod's engine
    // through that pod's sidecar, which pulled the prompt's blocks.
    let body = json!({"model": "tiny", "prompt": prompt(1, 2000), "max_tokens": 4});
    let r = warmpath_testkit::send(
        router.addr,
        "POST",
        "/v1/completions",
        &[],
        body.to_string(),
        Duration::from_secs(20),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let prefill_replica = r
        .header("x-warmpath-prefill-replica")
        .expect("split")
        .to_owned();
    assert!(
        prefill_replica.starts_with(&format!("{n}/pre")),
        "{prefill_replica}"
    );
    let decode_replica = r.header("x-warmpath-replica").unwrap().to_owned();
    assert!(
        decode_replica.starts_with(&format!("{n}/dec")),
        "{decode_replica}"
    );
    let v = r.json();
    let cached = v["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap();
    assert!(
        cached >= 400,
        "the decode engine computed the prompt itself: {v}"
    );
    let splits: f64 = sidecars
        .iter()
        .map(|s| {
            warmpath_testkit::metric(
                &s.metrics().encode(),
                "warmpath_sidecar_requests_total",
                &[("outcome", "split")],
            )
        })
        .sum();
    assert_eq!(splits, 1.0);

    // The guard: a sidecar asked to call a host outside the prefill pods' range refuses.
    let target = SocketAddr::new(engines.ips[0], sidecar_port);
    let r = warmpath_testkit::send(
        target,
        "POST",
        "/v1/completions",
        &[("x-prefiller-host-port", "10.9.9.9:8000")],
        body.to_string(),
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 403, "{}", r.body);
    ns.finish();
}
