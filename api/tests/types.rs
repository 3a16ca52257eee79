//! The Rust types as the router and controller use them (`v1`): defaults, serde round trips in
//! the API's camelCase shape, and helpers; and v1alpha1 objects read as v1 unchanged.

use serde_json::{json, Value};
use warmpath_api::v1::*;
use warmpath_api::v1alpha1;

#[test]
fn minimal_pool_gets_documented_defaults() {
    let spec: InferencePoolSpec = serde_json::from_value(json!({"models": ["llama"]})).unwrap();
    assert_eq!(spec.models, ["llama"]);
    assert_eq!(spec.role, Role::Both);
    assert_eq!(spec.engine, Engine::Vllm);
    assert_eq!(spec.selector, None);
    assert!(spec.metrics.enabled);
    assert_eq!(spec.metrics.path, "/metrics");
    assert_eq!(spec.kv_events, None);
    assert_eq!(
        spec.scheduling.weights,
        SchedulingWeights {
            prefix: 3,
            load: 1,
            queue: 2,
            kv_cache: 2
        }
    );
    assert_eq!(spec.scheduling.weights.as_f64(), (3.0, 1.0, 2.0, 2.0));
}

#[test]
fn full_pool_round_trips_in_camel_case() {
    let value = json!({
        "models": ["llama", "llama-lora"],
        "selector": {"app": "vllm"},
        "targetPort": 8000,
        "role": "prefill",
        "engine": "sglang",
        "metrics": {"enabled": true, "path": "/metrics", "port": 9100},
        "kvEvents": {"port": 5557, "topic": "kv", "blockSize": 64},
        "scheduling": {"weights": {"prefix": 5, "load": 0, "queue": 1, "kvCache": 1}}
    });
    let spec: InferencePoolSpec = serde_json::from_value(value.clone()).unwrap();
    assert_eq!(spec.role, Role::Prefill);
    assert_eq!(spec.engine, Engine::Sglang);
    assert_eq!(spec.kv_events.as_ref().unwrap().block_size, 64);
    assert_eq!(serde_json::to_value(&spec).unwrap(), value);
    let pool = InferencePool::new("llama", spec);
    let back: InferencePool = serde_json::from_value(serde_json::to_value(&pool).unwrap()).unwrap();
    assert_eq!(back.spec, pool.spec);
    assert_eq!(
        serde_json::to_value(&pool).unwrap()["apiVersion"],
        "warmpath.dev/v1"
    );
}

#[test]
fn enums_are_lowercase_strings_and_unknown_values_are_errors() {
    assert_eq!(serde_json::to_value(Role::Decode).unwrap(), "decode");
    assert_eq!(Role::Both.as_str(), "both");
    assert_eq!(Engine::Sglang.as_str(), "sglang");
    let err = serde_json::from_value::<Role>(json!("Prefill"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("prefill"), "{err}");
}

#[test]
fn replica_round_trips_and_builds_urls() {
    let value = json!({"pool": "llama", "address": "10.0.0.7", "port": 8000});
    let spec: InferenceReplicaSpec = serde_json::from_value(value.clone()).unwrap();
    assert_eq!(spec.role, None, "absent role means the pool's");
    assert_eq!(
        serde_json::to_value(&spec).unwrap(),
        value,
        "no nulls written for absent fields"
    );
    assert_eq!(spec.url(), "http://10.0.0.7:8000");
    let v6 = InferenceReplicaSpec {
        address: "fd00::7".into(),
        ..spec.clone()
    };
    assert_eq!(v6.url(), "http://[fd00::7]:8000");
    let full = json!({"pool": "llama", "address": "tpu-vm-3.example.com", "port": 8000,
        "models": ["llama"], "role": "decode", "engine": "vllm", "pod": "vllm-0"});
    let spec: InferenceReplicaSpec = serde_json::from_value(full.clone()).unwrap();
    assert_eq!(serde_json::to_value(&spec).unwrap(), full);
    assert!(
        serde_json::from_value::<InferenceReplicaSpec>(json!({"pool": "llama", "port": 1}))
            .is_err()
    );
}

#[test]
fn tenant_defaults_and_round_trip() {
    let spec: TenantPolicySpec = serde_json::from_value(json!({})).unwrap();
    assert_eq!(spec.weight, 1);
    assert_eq!(spec.priority, 0);
    assert!(!spec.sheddable);
    assert_eq!(spec.header, None);
    assert_eq!(spec.limits, None);
    let value = json!({
        "header": "acme",
        "apiKeySecretRef": {"name": "acme-keys", "key": "primary"},
        "weight": 4,
        "priority": -10,
        "limits": {"requestsPerSecond": 20, "burst": 40, "tokensPerSecond": 5000, "tokenBurst": 20000, "maxConcurrentRequests": 8, "maxQueuedRequests": 100},
        "sheddable": true
    });
    let spec: TenantPolicySpec = serde_json::from_value(value.clone()).unwrap();
    assert_eq!(spec.limits.as_ref().unwrap().burst, Some(40));
    assert_eq!(spec.limits.as_ref().unwrap().token_burst, Some(20000));
    assert_eq!(serde_json::to_value(&spec).unwrap(), value);
}

#[test]
fn status_round_trips_with_conditions() {
    let status: InferencePoolStatus = serde_json::from_value(json!({
        "observedGeneration": 3, "replicas": 2, "readyReplicas": 1,
        "conditions": [{"type": "Ready", "status": "True", "reason": "Ready",
            "message": "1 of 2 replicas ready", "lastTransitionTime": "2026-01-01T00:00:00Z"}]
    }))
    .unwrap();
    assert_eq!(status.ready_replicas, 1);
    assert!(warmpath_api::conditions::is_true(
        &status.conditions,
        warmpath_api::conditions::READY
    ));
    let empty: TenantPolicyStatus = serde_json::from_value(json!({})).unwrap();
    assert_eq!(serde_json::to_value(&empty).unwrap(), json!({}));
}

#[test]
fn replica_inherits_from_its_pool_and_is_checked_against_it() {
    let pool: InferencePoolSpec = serde_json::from_value(
        json!({"models": ["llama", "qwen"], "role": "decode", "engine": "sglang"}),
    )
    .unwrap();
    let plain: InferenceReplicaSpec =
        serde_json::from_value(json!({"pool": "p", "address": "10.0.0.1", "port": 8000})).unwrap();
    assert_eq!(plain.effective_role(&pool), Role::Decode);
    assert_eq!(plain.effective_engine(&pool), Engine::Sglang);
    assert_eq!(plain.effective_models(&pool), ["llama", "qwen"]);
    assert_eq!(plain.check_against("p", &pool), Ok(()));

    let own = InferenceReplicaSpec {
        role: Some(Role::Prefill),
        engine: Some(Engine::Vllm),
        models: Some(vec!["qwen".into()]),
        ..plain.clone()
    };
    assert_eq!(own.effective_role(&pool), Role::Prefill);
    assert_eq!(own.effective_engine(&pool), Engine::Vllm);
    assert_eq!(own.effective_models(&pool), ["qwen"]);
    assert_eq!(own.check_against("p", &pool), Ok(()));

    let foreign = InferenceReplicaSpec {
        models: Some(vec!["qwen".into(), "mistral".into(), "phi".into()]),
        ..plain
    };
    let msg = foreign.check_against("p", &pool).unwrap_err();
    assert!(
        msg.contains("mistral, phi") && msg.contains("\"p\"") && msg.contains("spec.models"),
        "{msg}"
    );
}

/// What the API server's `None` conversion does to a stored object: only `apiVersion` changes.
fn as_version(mut object: Value, version: &str) -> Value {
    object["apiVersion"] = format!("warmpath.dev/{version}").into();
    object
}

/// Every field set, as a v1alpha1 client writes it, reads as v1 and writes back unchanged; and
/// the other way round.
#[test]
fn objects_cross_between_v1alpha1_and_v1_unchanged() {
    let pool = json!({
        "apiVersion": "warmpath.dev/v1alpha1", "kind": "InferencePool",
        "metadata": {"name": "llama", "namespace": "ml"},
        "spec": {
            "models": ["llama", "llama-lora"], "selector": {"app": "vllm"}, "targetPort": 8000,
            "role": "prefill", "engine": "sglang",
            "metrics": {"enabled": false, "path": "/m", "port": 9100},
            "kvEvents": {"port": 5557, "topic": "kv", "blockSize": 64, "replayPort": 5558,
                "tokenizer": "/t/tokenizer.json", "chatTemplate": "/t/template.jinja"},
            "scheduling": {"weights": {"prefix": 5, "load": 0, "queue": 1, "kvCache": 1}}
        },
        "status": {"observedGeneration": 2, "replicas": 3, "readyReplicas": 1,
            "conditions": [{"type": "Ready", "status": "True", "reason": "Ready",
                "message": "1 of 3 replicas ready", "observedGeneration": 2,
                "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    });
    let replica = json!({
        "apiVersion": "warmpath.dev/v1alpha1", "kind": "InferenceReplica",
        "metadata": {"name": "vm", "namespace": "ml"},
        "spec": {"pool": "llama", "address": "fd00::7", "port": 8000, "models": ["llama"],
            "role": "decode", "engine": "vllm", "pod": "vllm-0"},
        "status": {"observedGeneration": 1}
    });
    let tenant = json!({
        "apiVersion": "warmpath.dev/v1alpha1", "kind": "TenantPolicy",
        "metadata": {"name": "acme", "namespace": "ml"},
        "spec": {"header": "acme", "apiKeySecretRef": {"name": "keys", "key": "k"},
            "weight": 4, "priority": -10, "sheddable": true,
            "limits": {"requestsPerSecond": 20, "burst": 40, "tokensPerSecond": 5000,
                "tokenBurst": 20000, "maxConcurrentRequests": 8, "maxQueuedRequests": 0}},
        "status": {"observedGeneration": 1, "apiKeys": 2}
    });

    fn cross<Old, New>(alpha: Value)
    where
        Old: serde::Serialize + serde::de::DeserializeOwned,
        New: serde::Serialize + serde::de::DeserializeOwned,
    {
        let old: Old = serde_json::from_value(alpha.clone()).unwrap();
        assert_eq!(
            serde_json::to_value(&old).unwrap(),
            alpha,
            "v1alpha1 round trip"
        );
        let stable = as_version(alpha.clone(), "v1");
        let new: New = serde_json::from_value(stable.clone()).unwrap();
        assert_eq!(serde_json::to_value(&new).unwrap(), stable, "read as v1");
        let back: Old = serde_json::from_value(as_version(stable, "v1alpha1")).unwrap();
        assert_eq!(
            serde_json::to_value(&back).unwrap(),
            alpha,
            "read back as v1alpha1"
        );
    }
    cross::<v1alpha1::InferencePool, InferencePool>(pool);
    cross::<v1alpha1::InferenceReplica, InferenceReplica>(replica);
    cross::<v1alpha1::TenantPolicy, TenantPolicy>(tenant);
}
