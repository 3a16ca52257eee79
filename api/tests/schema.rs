//! What the generated CRDs promise the API server and kubectl: names, short names, status
//! subresources, printer columns, structural validation and CEL rules with messages.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use serde_json::Value;
use warmpath_api::v1alpha1::{InferencePool, InferenceReplica, TenantPolicy};

fn spec_schema(crd: &CustomResourceDefinition) -> Value {
    let v = serde_json::to_value(crd).unwrap();
    v["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"].clone()
}

fn rules(schema: &Value) -> Vec<(String, String)> {
    schema["x-kubernetes-validations"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|r| {
                    (
                        r["rule"].as_str().unwrap().to_owned(),
                        r["message"].as_str().unwrap_or("").to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn columns(crd: &CustomResourceDefinition) -> Vec<(String, String)> {
    crd.spec.versions[0]
        .additional_printer_columns
        .as_ref()
        .unwrap()
        .iter()
        .map(|c| (c.name.clone(), c.json_path.clone()))
        .collect()
}

#[test]
fn names_versions_and_subresources() {
    for (crd, plural, short) in [
        (InferencePool::crd(), "inferencepools", "ipool"),
        (InferenceReplica::crd(), "inferencereplicas", "irep"),
        (TenantPolicy::crd(), "tenantpolicies", "tpol"),
    ] {
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some(&*format!("{plural}.warmpath.dev"))
        );
        assert_eq!(crd.spec.group, warmpath_api::GROUP);
        assert_eq!(crd.spec.scope, "Namespaced");
        assert_eq!(
            crd.spec.names.short_names.as_deref(),
            Some(&[short.to_owned()][..])
        );
        assert_eq!(
            crd.spec.names.categories.as_deref(),
            Some(&["warmpath".to_owned()][..])
        );
        let v = &crd.spec.versions;
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].name, warmpath_api::v1alpha1::VERSION);
        assert!(v[0].served && v[0].storage);
        assert!(
            v[0].subresources.as_ref().unwrap().status.is_some(),
            "{plural}: status subresource"
        );
        // Conditions merge by type (server-side apply of one condition keeps the others).
        let status = serde_json::to_value(&v[0].schema).unwrap()["openAPIV3Schema"]["properties"]
            ["status"]["properties"]["conditions"]
            .clone();
        assert_eq!(status["x-kubernetes-list-type"], "map", "{plural}");
        assert_eq!(status["x-kubernetes-list-map-keys"][0], "type", "{plural}");
    }
}

#[test]
fn printer_columns_show_model_role_and_readiness() {
    let pool = columns(&InferencePool::crd());
    for (name, path) in [
        ("Models", ".spec.models"),
        ("Role", ".spec.role"),
        ("Engine", ".spec.engine"),
        ("Ready", ".status.readyReplicas"),
    ] {
        assert!(
            pool.contains(&(name.into(), path.into())),
            "pool column {name}: {pool:?}"
        );
    }
    let replica = columns(&InferenceReplica::crd());
    for name in ["Pool", "Address", "Port", "Models", "Role", "Ready"] {
        assert!(
            replica.iter().any(|(n, _)| n == name),
            "replica column {name}: {replica:?}"
        );
    }
    assert!(replica.contains(&(
        "Ready".into(),
        r#".status.conditions[?(@.type=="Ready")].status"#.into()
    )));
    let tenant = columns(&TenantPolicy::crd());
    for name in ["Weight", "Priority", "Sheddable", "Ready"] {
        assert!(
            tenant.iter().any(|(n, _)| n == name),
            "tenant column {name}: {tenant:?}"
        );
    }
}

#[test]
fn pool_schema_validates_what_it_can() {
    let s = spec_schema(&InferencePool::crd());
    assert_eq!(s["required"], serde_json::json!(["models"]));
    assert_eq!(s["properties"]["models"]["minItems"], 1);
    assert_eq!(s["properties"]["models"]["x-kubernetes-list-type"], "set");
    assert_eq!(
        s["properties"]["role"]["enum"],
        serde_json::json!(["prefill", "decode", "both"])
    );
    assert_eq!(s["properties"]["role"]["default"], "both");
    assert_eq!(
        s["properties"]["engine"]["enum"],
        serde_json::json!(["vllm", "sglang"])
    );
    assert_eq!(s["properties"]["targetPort"]["maximum"], 65535.0);
    let r = rules(&s);
    assert!(
        r.iter().any(
            |(rule, msg)| rule == "!has(self.selector) || has(self.targetPort)"
                && msg.contains("spec.targetPort is required")
        ),
        "{r:?}"
    );
    let selector = rules(&s["properties"]["selector"]);
    assert!(selector
        .iter()
        .any(|(rule, msg)| rule == "self.size() > 0" && msg.contains("every pod")));
    let weights = rules(&s["properties"]["scheduling"]["properties"]["weights"]);
    assert!(
        weights.iter().any(|(_, msg)| msg.contains("all 0")),
        "{weights:?}"
    );
}

#[test]
fn replica_schema_validates_address_and_keeps_pool_fixed() {
    let s = spec_schema(&InferenceReplica::crd());
    assert_eq!(
        s["required"],
        serde_json::json!(["address", "pool", "port"])
    );
    let address = rules(&s["properties"]["address"]);
    assert!(
        address
            .iter()
            .any(|(rule, msg)| rule.starts_with("isIP(self)")
                && msg.contains("without scheme or port")),
        "{address:?}"
    );
    let pool = rules(&s["properties"]["pool"]);
    assert!(pool
        .iter()
        .any(|(rule, msg)| rule == "self == oldSelf" && msg.contains("immutable")));
    assert!(pool
        .iter()
        .any(|(rule, msg)| rule.starts_with("self.matches(")
            && msg.contains("name of an InferencePool")));
}

#[test]
fn tenant_schema_bounds_weight_priority_and_limits() {
    let s = spec_schema(&TenantPolicy::crd());
    assert!(
        s.get("required").is_none(),
        "every TenantPolicy field has a default"
    );
    assert_eq!(s["properties"]["weight"]["minimum"], 1.0);
    assert_eq!(s["properties"]["weight"]["default"], 1);
    assert_eq!(s["properties"]["priority"]["minimum"], -1000.0);
    assert_eq!(s["properties"]["sheddable"]["default"], false);
    assert_eq!(
        s["properties"]["apiKeySecretRef"]["required"],
        serde_json::json!(["name"])
    );
    let header = rules(&s["properties"]["header"]);
    assert!(
        header
            .iter()
            .any(|(_, msg)| msg.contains("printable ASCII")),
        "{header:?}"
    );
    let limits = rules(&s["properties"]["limits"]);
    assert_eq!(limits.len(), 3, "{limits:?}");
    assert_eq!(
        limits
            .iter()
            .filter(|(_, msg)| msg.contains("limits.burst"))
            .count(),
        2,
        "{limits:?}"
    );
    assert!(
        limits.iter().any(|(rule, msg)| rule
            == "!has(self.tokenBurst) || has(self.tokensPerSecond)"
            && msg.contains("limits.tokenBurst needs limits.tokensPerSecond")),
        "{limits:?}"
    );
    let props = &s["properties"]["limits"]["properties"];
    assert_eq!(props["tokensPerSecond"]["minimum"], 1.0);
    assert_eq!(props["tokensPerSecond"]["maximum"], 100_000_000.0);
    assert_eq!(props["tokenBurst"]["minimum"], 1.0);
    assert_eq!(props["tokenBurst"]["maximum"], 1_000_000_000.0);
}

#[test]
fn generated_yaml_uses_numbers_the_api_server_knows() {
    for f in warmpath_api::crds::files().unwrap() {
        assert!(!f.yaml.contains("65535.0"), "{}", f.name);
        assert!(f.yaml.starts_with("# Generated from api/"), "{}", f.name);
        // The API server warns on every apply of a format it does not know.
        assert!(!f.yaml.contains("uint32"), "{}", f.name);
    }
}
