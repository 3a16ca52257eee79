//! What the generated CRDs promise the API server and kubectl: names, short names, the served
//! and stored versions, status subresources, printer columns, structural validation and CEL
//! rules with messages, for both versions; and that `v1` accepts every `v1alpha1` object, which
//! the `None` conversion strategy depends on.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceDefinitionVersion,
};
use serde_json::Value;
use warmpath_api::{v1, v1alpha1};

const VERSIONS: [&str; 2] = [v1::VERSION, v1alpha1::VERSION];

/// The three CRDs as installed, in the order pool, replica, tenant.
fn crds() -> Vec<CustomResourceDefinition> {
    let all = warmpath_api::crds::all().expect("CRDs merge");
    assert_eq!(all.len(), 3);
    all
}

fn crd(plural: &str) -> CustomResourceDefinition {
    crds()
        .into_iter()
        .find(|c| c.spec.names.plural == plural)
        .unwrap_or_else(|| panic!("no CRD {plural}"))
}

fn version<'a>(
    crd: &'a CustomResourceDefinition,
    name: &str,
) -> &'a CustomResourceDefinitionVersion {
    crd.spec
        .versions
        .iter()
        .find(|v| v.name == name)
        .unwrap_or_else(|| panic!("{}: no version {name}", crd.spec.names.plural))
}

fn root_schema(crd: &CustomResourceDefinition, name: &str) -> Value {
    serde_json::to_value(&version(crd, name).schema).unwrap()["openAPIV3Schema"].clone()
}

fn spec_schema(crd: &CustomResourceDefinition, name: &str) -> Value {
    root_schema(crd, name)["properties"]["spec"].clone()
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

fn columns(crd: &CustomResourceDefinition, name: &str) -> Vec<(String, String)> {
    version(crd, name)
        .additional_printer_columns
        .as_ref()
        .unwrap()
        .iter()
        .map(|c| (c.name.clone(), c.json_path.clone()))
        .collect()
}

/// `schema` without its `description`s (the two versions may word them differently).
fn without_descriptions(mut schema: Value) -> Value {
    fn strip(v: &mut Value) {
        match v {
            Value::Object(map) => {
                map.remove("description");
                map.values_mut().for_each(strip);
            }
            Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    strip(&mut schema);
    schema
}

#[test]
fn names_versions_and_subresources() {
    for (crd, plural, short) in crds()
        .into_iter()
        .zip([
            ("inferencepools", "ipool"),
            ("inferencereplicas", "irep"),
            ("tenantpolicies", "tpol"),
        ])
        .map(|(c, (p, s))| (c, p, s))
    {
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
        // No webhook: the API server converts by rewriting apiVersion.
        let conversion = crd
            .spec
            .conversion
            .as_ref()
            .expect("conversion written out");
        assert_eq!(conversion.strategy, "None", "{plural}");
        assert!(conversion.webhook.is_none(), "{plural}");

        let names: Vec<&str> = crd.spec.versions.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, VERSIONS, "{plural}");
        let stable = version(&crd, v1::VERSION);
        assert!(
            stable.served && stable.storage,
            "{plural}: v1 served and stored"
        );
        assert_eq!(stable.deprecated, None, "{plural}");
        let alpha = version(&crd, v1alpha1::VERSION);
        assert!(
            alpha.served && !alpha.storage,
            "{plural}: v1alpha1 served, not stored"
        );
        assert_eq!(alpha.deprecated, Some(true), "{plural}");
        let warning = alpha.deprecation_warning.as_deref().unwrap_or_default();
        assert!(warning.contains("warmpath.dev/v1 "), "{plural}: {warning}");

        for v in VERSIONS {
            assert!(
                version(&crd, v)
                    .subresources
                    .as_ref()
                    .unwrap()
                    .status
                    .is_some(),
                "{plural} {v}: status subresource"
            );
            // Conditions merge by type (server-side apply of one condition keeps the others).
            let status =
                root_schema(&crd, v)["properties"]["status"]["properties"]["conditions"].clone();
            assert_eq!(status["x-kubernetes-list-type"], "map", "{plural} {v}");
            assert_eq!(
                status["x-kubernetes-list-map-keys"][0], "type",
                "{plural} {v}"
            );
        }
    }
}

/// The `None` conversion strategy hands a v1alpha1 object to v1 clients as it is, so v1 must
/// accept and mean the same by everything v1alpha1 accepted: the two schemas are equal, but
/// for the differences `api/CHANGES-v1.md` lists (descriptions aside). A change to either
/// version's types that is not one of them fails here.
#[test]
fn v1_accepts_every_v1alpha1_object() {
    for crd in crds() {
        let plural = crd.spec.names.plural.clone();
        let alpha = without_descriptions(root_schema(&crd, v1alpha1::VERSION));
        let mut stable = without_descriptions(root_schema(&crd, v1::VERSION));
        if plural == "inferencepools" {
            // The one tightening: an empty path was never a usable file.
            let kv = &mut stable["properties"]["spec"]["properties"]["kvEvents"]["properties"];
            for field in ["tokenizer", "chatTemplate"] {
                let removed = kv[field].as_object_mut().unwrap().remove("minLength");
                assert_eq!(removed, Some(1.into()), "{field}");
            }
        }
        assert_eq!(stable, alpha, "{plural}: v1 differs from v1alpha1");
        assert_eq!(
            version(&crd, v1::VERSION).additional_printer_columns,
            version(&crd, v1alpha1::VERSION).additional_printer_columns,
            "{plural}: printer columns"
        );
        assert_eq!(
            version(&crd, v1::VERSION).subresources,
            version(&crd, v1alpha1::VERSION).subresources,
            "{plural}: subresources"
        );
    }
}

#[test]
fn printer_columns_show_model_role_and_readiness() {
    for v in VERSIONS {
        let pool = columns(&crd("inferencepools"), v);
        for (name, path) in [
            ("Models", ".spec.models"),
            ("Role", ".spec.role"),
            ("Engine", ".spec.engine"),
            ("Ready", ".status.readyReplicas"),
        ] {
            assert!(
                pool.contains(&(name.into(), path.into())),
                "{v} pool column {name}: {pool:?}"
            );
        }
        let replica = columns(&crd("inferencereplicas"), v);
        for name in ["Pool", "Address", "Port", "Models", "Role", "Ready"] {
            assert!(
                replica.iter().any(|(n, _)| n == name),
                "{v} replica column {name}: {replica:?}"
            );
        }
        assert!(replica.contains(&(
            "Ready".into(),
            r#".status.conditions[?(@.type=="Ready")].status"#.into()
        )));
        let tenant = columns(&crd("tenantpolicies"), v);
        for name in ["Weight", "Priority", "Sheddable", "Ready"] {
            assert!(
                tenant.iter().any(|(n, _)| n == name),
                "{v} tenant column {name}: {tenant:?}"
            );
        }
    }
}

#[test]
fn pool_schema_validates_what_it_can() {
    for v in VERSIONS {
        let s = spec_schema(&crd("inferencepools"), v);
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
}

#[test]
fn replica_schema_validates_address_and_keeps_pool_fixed() {
    for v in VERSIONS {
        let s = spec_schema(&crd("inferencereplicas"), v);
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
}

#[test]
fn tenant_schema_bounds_weight_priority_and_limits() {
    for v in VERSIONS {
        let s = spec_schema(&crd("tenantpolicies"), v);
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
