//! Pods as tests need them on an API server with no kubelet or scheduler: created bound to a
//! node that does not exist (so nothing runs them), and their status patched as a kubelet
//! would report it.

use crate::error::E2eError;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

/// Create pod `name` labelled `app=<app>` in `ns`.
pub async fn create_pod(
    client: &kube::Client,
    ns: &str,
    name: &str,
    app: &str,
) -> Result<(), E2eError> {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": { "name": name, "namespace": ns, "labels": { "app": app } },
        "spec": {
            "nodeName": "e2e-fake-node",
            "containers": [{ "name": "engine", "image": "vllm/vllm-openai:latest" }],
        },
    }))?;
    Api::<Pod>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pod)
        .await?;
    Ok(())
}

/// What a kubelet would report: Running, with `ip`, Ready (and ContainersReady) or not.
pub async fn set_pod_status(
    client: &kube::Client,
    ns: &str,
    name: &str,
    ip: &str,
    ready: bool,
) -> Result<(), E2eError> {
    let status = if ready { "True" } else { "False" };
    let patch = json!({ "status": {
        "phase": "Running",
        "podIP": ip,
        "podIPs": [{ "ip": ip }],
        "conditions": [
            { "type": "Ready", "status": status, "lastTransitionTime": "2026-01-01T00:00:00Z" },
            { "type": "ContainersReady", "status": status, "lastTransitionTime": "2026-01-01T00:00:00Z" },
        ],
    }});
    Api::<Pod>::namespaced(client.clone(), ns)
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}
