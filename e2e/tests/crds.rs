//! The generated CRDs (crds/, from api/) on the real API server: valid objects are accepted and
//! defaulted, `kubectl get` shows the printer columns and short names work, statuses are
//! written through the status subresource, invalid objects are rejected with messages that
//! say what to fix, and objects cross between `v1alpha1` and `v1` unchanged.
//!
//! CRDs are cluster-scoped and shared with the other e2e tests running at the same time: they
//! are applied with server-side apply under one field manager, which is idempotent, and never
//! deleted.

use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{json, Value};
use warmpath_api::{v1, v1alpha1};
use warmpath_e2e::{
    repo_root, run, warmpath_api, warmpath_object, warmpath_resource_at, TestCluster, TestNamespace,
};

fn api(ns: &TestNamespace, kind: &str) -> Api<DynamicObject> {
    warmpath_api(&ns.client(), ns.name(), kind)
}

/// Applies the repository's generated CRDs and waits until they are served.
fn apply_crds(cluster: &TestCluster) {
    let files = cluster
        .apply_crds(&repo_root().join("crds"))
        .unwrap_or_else(|e| panic!("apply crds/: {e}"));
    assert_eq!(
        files.len(),
        3,
        "crds/ holds the three generated CRDs (run `cargo run -p warmpath-api --bin warmpath-crdgen`)"
    );
}

fn kubectl_get(ns: &TestNamespace, what: &str) -> String {
    let out = run(
        ns.cluster().kubectl().args(["get", what, "-n", ns.name()]),
        None,
    )
    .unwrap_or_else(|e| panic!("kubectl get {what}: {e}"));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The header line and the row of `name` in `kubectl get` output.
fn row(table: &str, name: &str) -> (String, String) {
    let mut lines = table.lines();
    let header = lines.next().unwrap_or_default().to_owned();
    let line = lines
        .find(|l| l.split_whitespace().next() == Some(name))
        .unwrap_or_else(|| panic!("no row {name} in:\n{table}"));
    (header, line.to_owned())
}

/// A cell of a `kubectl get` row: kubectl aligns every cell under its header, and cells may be
/// empty (an absent optional field), so columns are cut by the headers' positions.
fn column(table: &(String, String), name: &str) -> String {
    let (header, line) = table;
    let starts: Vec<usize> = header
        .match_indices(|c: char| !c.is_whitespace())
        .filter(|(i, _)| *i == 0 || header.as_bytes()[i - 1] == b' ')
        .map(|(i, _)| i)
        .collect();
    let k = starts
        .iter()
        .position(|&i| header[i..].split_whitespace().next() == Some(name))
        .unwrap_or_else(|| panic!("no column {name} in {header:?}"));
    let end = starts
        .get(k + 1)
        .copied()
        .unwrap_or(line.len())
        .min(line.len());
    line.get(starts[k]..end).unwrap_or("").trim().to_owned()
}

#[tokio::test]
async fn valid_objects_are_accepted_defaulted_and_listed() {
    let Some(ns) = TestNamespace::create("crds-valid").await else {
        return;
    };
    apply_crds(ns.cluster());
    let pp = PostParams::default();

    let pool = api(&ns, "InferencePool")
        .create(
            &pp,
            &warmpath_object(
                "InferencePool",
                "llama",
                json!({"models": ["llama"], "selector": {"app": "vllm"}, "targetPort": 8000}),
            ),
        )
        .await
        .expect("a minimal pool is accepted");
    // Defaults come from the schema: the stored object says what the router will do.
    assert_eq!(pool.data["spec"]["role"], "both");
    assert_eq!(pool.data["spec"]["engine"], "vllm");
    assert_eq!(pool.data["spec"]["metrics"]["path"], "/metrics");
    assert_eq!(
        pool.data["spec"]["scheduling"]["weights"],
        json!({"prefix": 3, "load": 1, "queue": 2, "kvCache": 2})
    );
    let prefill_pool = api(&ns, "InferencePool")
        .create(
            &pp,
            &warmpath_object(
                "InferencePool",
                "llama-prefill",
                json!({
                    "models": ["llama", "llama-sql"], "loraAdapters": ["llama-sql"],
                    "role": "prefill", "engine": "sglang",
                    "kvEvents": {"port": 5557},
                    "scheduling": {"weights": {"prefix": 1, "load": 0, "queue": 0, "kvCache": 0}}
                }),
            ),
        )
        .await
        .expect("a pool of hand-written replicas (no selector) is accepted");
    assert_eq!(
        prefill_pool.data["spec"]["loraAdapters"],
        json!(["llama-sql"]),
        "the adapters are kept (not pruned)"
    );

    for (name, address) in [
        ("tpu-vm", "10.20.0.7"),
        ("v6", "fd00::7"),
        ("dns", "vm-3.example.com"),
    ] {
        api(&ns, "InferenceReplica")
            .create(
                &pp,
                &warmpath_object(
                    "InferenceReplica",
                    name,
                    json!({"pool": "llama-prefill", "address": address, "port": 30000, "role": "prefill"}),
                ),
            )
            .await
            .unwrap_or_else(|e| panic!("replica at {address}: {e}"));
    }
    let tenant = api(&ns, "TenantPolicy")
        .create(
            &pp,
            &warmpath_object(
                "TenantPolicy",
                "acme",
                json!({"apiKeySecretRef": {"name": "acme-keys"}, "limits": {"requestsPerSecond": 10, "burst": 20}}),
            ),
        )
        .await
        .expect("tenant");
    assert_eq!(tenant.data["spec"]["weight"], 1);
    assert_eq!(tenant.data["spec"]["priority"], 0);
    assert_eq!(tenant.data["spec"]["sheddable"], false);

    // The controller's status write, through the status subresource.
    let status = json!({"status": {
    "observedGeneration": 1, "replicas": 2, "readyReplicas": 2,
    "conditions": [
        {"type": "Accepted", "status": "True", "reason": "Accepted", "message": "ok",
         "lastTransitionTime": "2026-01-01T00:00:00Z"},
        {"type": "Ready", "status": "True", "reason": "Ready", "message": "2 of 2 replicas ready",
         "lastTransitionTime": "2026-01-01T00:00:00Z"}
    ]}});
    api(&ns, "InferencePool")
        .patch_status("llama", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("pool status");
    api(&ns, "InferenceReplica")
        .patch_status(
            "tpu-vm",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": [
                {"type": "Ready", "status": "False", "reason": "Unhealthy",
                 "message": "GET http://10.20.0.7:30000/health failed: connection refused",
                 "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})),
        )
        .await
        .expect("replica status");
    let bad_status = api(&ns, "InferencePool")
        .patch_status(
            "llama",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"readyReplicas": "two"}})),
        )
        .await
        .expect_err("a malformed status is rejected");
    assert!(
        bad_status.to_string().contains("readyReplicas"),
        "{bad_status}"
    );

    // kubectl get: printer columns, through short names and the category.
    let pools = kubectl_get(&ns, "ipool");
    let llama = row(&pools, "llama");
    assert_eq!(column(&llama, "MODELS"), r#"["llama"]"#, "{pools}");
    assert_eq!(column(&llama, "ROLE"), "both", "{pools}");
    assert_eq!(column(&llama, "ENGINE"), "vllm", "{pools}");
    assert_eq!(column(&llama, "READY"), "2", "{pools}");
    let prefill = row(&pools, "llama-prefill");
    assert_eq!(column(&prefill, "ROLE"), "prefill", "{pools}");

    let replicas = kubectl_get(&ns, "irep");
    let vm = row(&replicas, "tpu-vm");
    assert_eq!(column(&vm, "POOL"), "llama-prefill", "{replicas}");
    assert_eq!(column(&vm, "ADDRESS"), "10.20.0.7", "{replicas}");
    assert_eq!(column(&vm, "PORT"), "30000", "{replicas}");
    assert_eq!(column(&vm, "ROLE"), "prefill", "{replicas}");
    assert_eq!(column(&vm, "READY"), "False", "{replicas}");
    let tenants = kubectl_get(&ns, "tpol");
    let acme = row(&tenants, "acme");
    assert_eq!(column(&acme, "WEIGHT"), "1", "{tenants}");
    let all = kubectl_get(&ns, "warmpath");
    for name in [
        "inferencepool.warmpath.dev/llama",
        "inferencereplica.warmpath.dev/dns",
        "tenantpolicy.warmpath.dev/acme",
    ] {
        assert!(
            all.contains(name),
            "`kubectl get warmpath` lists {name}:\n{all}"
        );
    }
    ns.finish();
}

#[tokio::test]
async fn invalid_objects_are_rejected_with_clear_messages() {
    let Some(ns) = TestNamespace::create("crds-invalid").await else {
        return;
    };
    apply_crds(ns.cluster());
    // (kind, spec, what the API server's answer must say)
    let cases: Vec<(&str, Value, &[&str])> = vec![
        (
            "InferencePool",
            json!({}),
            &["spec.models", "Required value"],
        ),
        (
            "InferencePool",
            json!({"models": []}),
            &["spec.models", "at least 1"],
        ),
        (
            "InferencePool",
            json!({"models": ["a", "a"]}),
            &["spec.models[1]", "Duplicate value"],
        ),
        (
            "InferencePool",
            json!({"models": ["a"], "selector": {"app": "vllm"}}),
            &["spec.targetPort", "required when spec.selector is set"],
        ),
        (
            "InferencePool",
            json!({"models": ["a"], "selector": {}, "targetPort": 8000}),
            &["spec.selector", "would select every pod"],
        ),
        (
            "InferencePool",
            json!({"models": ["a", "a-lora"], "loraAdapters": ["b-lora"]}),
            &["spec.loraAdapters", "must name models the pool serves"],
        ),
        (
            "InferencePool",
            json!({"models": ["a"], "role": "Prefill", "engine": "trt"}),
            &[
                r#"spec.role: Unsupported value: "Prefill""#,
                r#""prefill""#,
                r#"spec.engine: Unsupported value: "trt""#,
                r#""sglang""#,
            ],
        ),
        (
            "InferencePool",
            json!({"models": ["a"], "targetPort": 0}),
            &["spec.targetPort", "greater than or equal to 1"],
        ),
        (
            "InferencePool",
            json!({"models": ["a"], "metrics": {"path": "metrics"}}),
            &["spec.metrics.path", "starting with '/'"],
        ),
        (
            "InferencePool",
            json!({"models": ["a"], "scheduling": {"weights": {"prefix": 0, "load": 0, "queue": 0, "kvCache": 0}}}),
            &["spec.scheduling.weights", "at least one score"],
        ),
        (
            "InferencePool",
            json!({"models": ["a"], "kvEvents": {"topic": "kv"}}),
            &["spec.kvEvents.port", "Required value"],
        ),
        (
            "InferenceReplica",
            json!({"pool": "llama", "address": "http://10.0.0.1:8000", "port": 8000}),
            &["spec.address", "without scheme or port"],
        ),
        (
            "InferenceReplica",
            json!({"pool": "Llama_1", "address": "10.0.0.1", "port": 70000}),
            &[
                "spec.pool",
                "name of an InferencePool",
                "spec.port",
                "less than or equal to 65535",
            ],
        ),
        (
            "InferenceReplica",
            json!({"address": "10.0.0.1"}),
            &["spec.pool: Required value", "spec.port: Required value"],
        ),
        (
            "InferenceReplica",
            json!({"pool": "llama", "address": "10.0.0.1", "port": 8000, "role": "encode"}),
            &["spec.role", r#""decode""#],
        ),
        (
            "TenantPolicy",
            json!({"weight": 0, "priority": 5000}),
            &[
                "spec.weight",
                "greater than or equal to 1",
                "spec.priority",
                "less than or equal to 1000",
            ],
        ),
        (
            "TenantPolicy",
            json!({"limits": {"burst": 5}}),
            &["spec.limits", "burst needs limits.requestsPerSecond"],
        ),
        (
            "TenantPolicy",
            json!({"limits": {"burst": 5, "requestsPerSecond": 10}}),
            &["spec.limits", "burst must be at least"],
        ),
        (
            "TenantPolicy",
            json!({"header": "team a", "apiKeySecretRef": {"name": "Keys", "key": "a/b"}}),
            &[
                "spec.header",
                "printable ASCII",
                "apiKeySecretRef.name",
                "name of a Secret",
                "apiKeySecretRef.key",
                "Secret data key",
            ],
        ),
        (
            "TenantPolicy",
            json!({"apiKeySecretRef": {"key": "k"}}),
            &["spec.apiKeySecretRef.name", "Required value"],
        ),
    ];
    let pp = PostParams::default();
    for (i, (kind, spec, expected)) in cases.iter().enumerate() {
        let name = format!("bad-{i}");
        let err = match api(&ns, kind)
            .create(&pp, &warmpath_object(kind, &name, spec.clone()))
            .await
        {
            Ok(_) => panic!("{kind} {spec} must be rejected"),
            Err(kube::Error::Api(status)) => status,
            Err(other) => panic!("{kind} {spec}: not an API answer: {other}"),
        };
        assert_eq!(err.code, 422, "{kind} {spec}: {err:?}");
        for want in *expected {
            assert!(
                err.message.contains(want),
                "{kind} {spec}: the answer must say {want:?}; it says: {}",
                err.message
            );
        }
    }

    // Transition rule: a replica cannot move to another pool.
    let replicas = api(&ns, "InferenceReplica");
    replicas
        .create(
            &pp,
            &warmpath_object(
                "InferenceReplica",
                "vm",
                json!({"pool": "llama", "address": "10.0.0.1", "port": 8000}),
            ),
        )
        .await
        .expect("valid replica");
    let err = replicas
        .patch(
            "vm",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"pool": "other"}})),
        )
        .await
        .expect_err("spec.pool is immutable");
    assert!(err.to_string().contains("spec.pool is immutable"), "{err}");
    replicas
        .patch(
            "vm",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"port": 8001}})),
        )
        .await
        .expect("other fields stay mutable");
    ns.finish();
}

/// The API of `kind` objects at `version`.
fn api_at(ns: &TestNamespace, version: &str, kind: &str) -> Api<DynamicObject> {
    Api::namespaced_with(ns.client(), ns.name(), &warmpath_resource_at(version, kind))
}

/// A `kind` object at `version`.
fn object_at(version: &str, kind: &str, name: &str, spec: Value) -> DynamicObject {
    DynamicObject::new(name, &warmpath_resource_at(version, kind)).data(json!({ "spec": spec }))
}

/// The CRDs serve both versions from one stored object (storage `v1`, conversion `None`): what
/// is written through one version reads back through the other with the same spec and status,
/// for objects created, updated (patch and replace) and given a status through either. The
/// typed clients of both versions read every object.
#[tokio::test]
async fn objects_round_trip_between_v1alpha1_and_v1() {
    let Some(ns) = TestNamespace::create("crds-versions").await else {
        return;
    };
    apply_crds(ns.cluster());
    let (alpha, stable) = (v1alpha1::VERSION, v1::VERSION);
    let pp = PostParams::default();
    // (kind, a spec with every field, a minimal spec, a change to make, a status to write)
    let cases: [(&str, Value, Value, Value, Value); 3] = [
        (
            "InferencePool",
            json!({
                "models": ["llama", "llama-lora"], "selector": {"app": "vllm"}, "targetPort": 8000,
                "role": "prefill", "engine": "sglang",
                "metrics": {"enabled": false, "path": "/stats", "port": 9100},
                "kvEvents": {"port": 5557, "topic": "kv", "blockSize": 64, "replayPort": 5558,
                    "tokenizer": "/t/tokenizer.json", "chatTemplate": "/t/chat.jinja"},
                "scheduling": {"weights": {"prefix": 5, "load": 0, "queue": 1, "kvCache": 1}}
            }),
            json!({"models": ["qwen"]}),
            json!({"role": "decode", "scheduling": {"weights": {"prefix": 7}}}),
            json!({"observedGeneration": 1, "replicas": 2, "readyReplicas": 1}),
        ),
        (
            "InferenceReplica",
            json!({"pool": "llama", "address": "fd00::7", "port": 8000, "models": ["llama"],
                "role": "decode", "engine": "vllm", "pod": "vllm-0"}),
            json!({"pool": "llama", "address": "vm-3.example.com", "port": 30000}),
            json!({"port": 8001, "models": ["llama", "llama-lora"]}),
            json!({"observedGeneration": 1, "conditions": [{"type": "Ready", "status": "False",
                "reason": "Unhealthy", "message": "connection refused",
                "lastTransitionTime": "2026-01-01T00:00:00Z"}]}),
        ),
        (
            "TenantPolicy",
            json!({"header": "acme", "apiKeySecretRef": {"name": "acme-keys", "key": "primary"},
                "weight": 4, "priority": -10, "sheddable": true,
                "limits": {"requestsPerSecond": 20, "burst": 40, "tokensPerSecond": 5000,
                    "tokenBurst": 20000, "maxConcurrentRequests": 8, "maxQueuedRequests": 0}}),
            json!({}),
            json!({"weight": 9, "limits": {"maxQueuedRequests": 5}}),
            json!({"observedGeneration": 1, "apiKeys": 2}),
        ),
    ];
    for (kind, full, minimal, change, status) in cases {
        let at = |v: &str| api_at(&ns, v, kind);
        // Each direction, with the full spec one way and the minimal one (defaults filled in
        // by the writing version's schema) the other.
        for (name, from, to, spec) in [
            ("from-alpha", alpha, stable, &full),
            ("from-v1", stable, alpha, &minimal),
            ("full-v1", stable, alpha, &full),
            ("minimal-alpha", alpha, stable, &minimal),
        ] {
            let what = format!("{kind} {name} ({from} -> {to})");
            let created = at(from)
                .create(&pp, &object_at(from, kind, name, spec.clone()))
                .await
                .unwrap_or_else(|e| panic!("{what}: create: {e}"));
            assert_eq!(
                created.types.as_ref().unwrap().api_version,
                format!("warmpath.dev/{from}"),
                "{what}"
            );
            // Every field the writer set is kept as written (defaults may add more).
            for (field, value) in spec.as_object().unwrap() {
                assert_eq!(&created.data["spec"][field], value, "{what}: spec.{field}");
            }
            let read = at(to)
                .get(name)
                .await
                .unwrap_or_else(|e| panic!("{what}: get: {e}"));
            assert_eq!(
                read.types.as_ref().unwrap().api_version,
                format!("warmpath.dev/{to}"),
                "{what}"
            );
            assert_eq!(read.data["spec"], created.data["spec"], "{what}: spec");
            assert_eq!(
                read.metadata.resource_version, created.metadata.resource_version,
                "{what}: one stored object"
            );

            // Update through the reading version, then read through the writing one.
            let patched = at(to)
                .patch(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({ "spec": change })),
                )
                .await
                .unwrap_or_else(|e| panic!("{what}: patch through {to}: {e}"));
            let back = at(from).get(name).await.unwrap();
            assert_eq!(back.data["spec"], patched.data["spec"], "{what}: patched");
            for (field, value) in change.as_object().unwrap() {
                if !value.is_object() {
                    assert_eq!(&back.data["spec"][field], value, "{what}: spec.{field}");
                }
            }

            // A status written through one version, read through the other.
            at(from)
                .patch_status(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({ "status": status })),
                )
                .await
                .unwrap_or_else(|e| panic!("{what}: status through {from}: {e}"));
            let with_status = at(to).get(name).await.unwrap();
            for (field, value) in status.as_object().unwrap() {
                assert_eq!(
                    &with_status.data["status"][field], value,
                    "{what}: status.{field}"
                );
            }

            // Replace (GET then PUT, what `kubectl edit` does) through the writing version: the
            // object read through the other version loses nothing.
            let mut whole = at(from).get(name).await.unwrap();
            whole
                .metadata
                .labels
                .get_or_insert_with(Default::default)
                .insert("replaced".into(), from.into());
            let replaced = at(from)
                .replace(name, &pp, &whole)
                .await
                .unwrap_or_else(|e| panic!("{what}: replace through {from}: {e}"));
            let last = at(to).get(name).await.unwrap();
            assert_eq!(
                last.metadata.labels.as_ref().unwrap()["replaced"],
                from,
                "{what}: replaced"
            );
            assert_eq!(last.data["spec"], replaced.data["spec"], "{what}: replaced");
            assert_eq!(last.data["spec"], back.data["spec"], "{what}: replaced");
            assert_eq!(last.data["status"], with_status.data["status"], "{what}");
        }
    }

    // The typed clients of both versions read every object the other wrote.
    let client = ns.client();
    macro_rules! typed_reads {
        ($($kind:ident),*) => {$(
            for name in ["from-alpha", "from-v1", "full-v1", "minimal-alpha"] {
                let new = Api::<v1::$kind>::namespaced(client.clone(), ns.name())
                    .get(name)
                    .await
                    .unwrap_or_else(|e| panic!("v1 {} {name}: {e}", stringify!($kind)));
                let old = Api::<v1alpha1::$kind>::namespaced(client.clone(), ns.name())
                    .get(name)
                    .await
                    .unwrap_or_else(|e| panic!("v1alpha1 {} {name}: {e}", stringify!($kind)));
                assert_eq!(
                    serde_json::to_value(&new.spec).unwrap(),
                    serde_json::to_value(&old.spec).unwrap(),
                    "{} {name}",
                    stringify!($kind)
                );
            }
        )*};
    }
    typed_reads!(InferencePool, InferenceReplica, TenantPolicy);

    // kubectl: the short name resolves to the preferred (stable) version, and asking for the
    // old one by name carries the deprecation warning. A discovery cache of its own: one kept
    // from before the CRDs gained v1 would still prefer v1alpha1.
    let cache = ns.scratch_dir().join("kubectl-cache");
    let kubectl = || {
        let mut cmd = ns.cluster().kubectl();
        cmd.arg("--cache-dir").arg(&cache);
        cmd
    };
    let out = run(
        kubectl().args([
            "get",
            "ipool",
            "from-alpha",
            "-n",
            ns.name(),
            "-o",
            "jsonpath={.apiVersion}",
        ]),
        None,
    )
    .expect("kubectl get ipool");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "warmpath.dev/v1");
    let out = run(
        kubectl().args([
            "get",
            "inferencepools.v1alpha1.warmpath.dev",
            "from-v1",
            "-n",
            ns.name(),
            "-o",
            "jsonpath={.apiVersion}",
        ]),
        None,
    )
    .expect("kubectl get inferencepools.v1alpha1.warmpath.dev");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "warmpath.dev/v1alpha1"
    );
    let warning = String::from_utf8_lossy(&out.stderr);
    assert!(
        warning.contains("warmpath.dev/v1alpha1 InferencePool is deprecated")
            && warning.contains("warmpath.dev/v1 InferencePool"),
        "kubectl warns about v1alpha1: {warning:?}"
    );
    ns.finish();
}

/// The README's example manifests are what the API server accepts (server-side dry run, so
/// nothing is stored).
#[tokio::test]
async fn the_example_manifests_are_valid() {
    let Some(ns) = TestNamespace::create("crds-examples").await else {
        return;
    };
    apply_crds(ns.cluster());
    let text = dry_run(&ns, "examples/kubernetes.yaml");
    for kind in [
        "inferencepool",
        "inferencereplica",
        "secret",
        "tenantpolicy",
    ] {
        assert!(text.contains(kind), "{kind} not applied: {text}");
    }
    // The P/D example: its pools and the prefill and decode Deployments (sidecar included).
    for name in ["pools.yaml", "prefill.yaml", "decode.yaml"] {
        let text = dry_run(&ns, &format!("examples/pd/{name}"));
        assert!(text.contains("created (server dry run)"), "{name}: {text}");
    }
    ns.finish();
}

/// `kubectl apply --dry-run=server` of a file of the repository in the test namespace: what
/// kubectl printed.
fn dry_run(ns: &TestNamespace, path: &str) -> String {
    let file = repo_root().join(path);
    let out = run(
        ns.cluster().kubectl().args([
            "apply",
            "--dry-run=server",
            "-n",
            ns.name(),
            "-f",
            file.to_str().unwrap(),
        ]),
        None,
    )
    .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    String::from_utf8_lossy(&out.stdout).into_owned()
}
