//! llm-d InferenceObjectives as the router's objectives: an objective applies to the models of
//! the pool its `poolRef` names (in its namespace: the discovered pool `namespace/name`, which a
//! GIE pool mirrored by the controller is too), with its priority (absent: 0).
//!
//! Watched by [`super::run`] when the API server serves the kind; this is the pure translation
//! it applies to its copies.

use crate::config::{ObjectiveConfig, PoolConfig};
use std::collections::BTreeSet;
use warmpath_api::boundaries::Boundaries;
use warmpath_api::llmd::InferenceObjective;

/// Priorities beyond the router's band range (llm-d allows any int32) are clamped to it.
const PRIORITY_RANGE: (i32, i32) = (-1000, 1000);

/// The objectives of `objectives` (in (namespace, name) order) for the models of `pools` (the
/// discovered ones). Objectives being deleted, naming a pool not found, or with a name no
/// request header could carry are left out. Priorities are capped as TenantPolicies' are
/// (`boundaries`): an objective is another way for a namespace to ask for a band.
pub fn discovered<'a>(
    objectives: impl IntoIterator<Item = &'a InferenceObjective>,
    pools: &[PoolConfig],
    boundaries: &Boundaries,
) -> Vec<ObjectiveConfig> {
    let mut found: Vec<(String, String, ObjectiveConfig)> = objectives
        .into_iter()
        .filter(|o| o.metadata.deletion_timestamp.is_none())
        .filter_map(|o| {
            let ns = o.metadata.namespace.as_deref()?;
            let name = o.metadata.name.as_deref()?;
            if !crate::config::is_token(name) {
                return None;
            }
            let pool = format!("{ns}/{}", o.spec.pool_ref.name);
            let models: BTreeSet<&str> = pools
                .iter()
                .filter(|p| p.name == pool)
                .flat_map(|p| p.models.iter().map(String::as_str))
                .collect();
            if models.is_empty() {
                return None;
            }
            let priority = o
                .spec
                .priority
                .unwrap_or(0)
                .clamp(PRIORITY_RANGE.0, PRIORITY_RANGE.1);
            let priority = boundaries
                .capped_priority(ns, priority)
                .unwrap_or_else(|cap| cap);
            Some((
                ns.to_owned(),
                name.to_owned(),
                ObjectiveConfig {
                    name: name.to_owned(),
                    priority,
                    models: models.into_iter().map(str::to_owned).collect(),
                },
            ))
        })
        .collect();
    found.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    found.into_iter().map(|(_, _, o)| o).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn objective(ns: &str, name: &str, pool: &str, priority: Option<i32>) -> InferenceObjective {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "llm-d.ai/v1alpha2",
            "kind": "InferenceObjective",
            "metadata": { "name": name, "namespace": ns },
            "spec": { "priority": priority, "poolRef": { "name": pool } }
        }))
        .unwrap()
    }

    fn pool(name: &str, models: &[&str]) -> PoolConfig {
        serde_yaml::from_str(&format!(
            "name: {name}\nmodels: [{}]\nreplicas: []\n",
            models.join(", ")
        ))
        .unwrap()
    }

    #[test]
    fn an_objective_applies_to_its_pools_models() {
        let pools = [
            pool("ns/llama", &["llama"]),
            // Replicas of the same pool serving other models form another entry of that name.
            pool("ns/llama", &["llama-lora"]),
            pool("other/qwen", &["qwen"]),
        ];
        let objs = [
            objective("ns", "chat", "llama", Some(20000)),
            objective("ns", "batch", "llama", None),
            objective("ns", "nopool", "missing", Some(3)),
            objective("ns", "elsewhere", "qwen", Some(3)),
        ];
        let uncapped = Boundaries {
            max_tenant_priority: 1000,
            ..Default::default()
        };
        let found = discovered(&objs, &pools, &uncapped);
        assert_eq!(
            found,
            [
                ObjectiveConfig {
                    name: "batch".to_owned(),
                    priority: 0,
                    models: vec!["llama".to_owned(), "llama-lora".to_owned()],
                },
                ObjectiveConfig {
                    name: "chat".to_owned(),
                    priority: 1000,
                    models: vec!["llama".to_owned(), "llama-lora".to_owned()],
                },
            ],
            "absent priority is 0, out-of-range is clamped, a pool in another namespace or none is not found"
        );
        // The operator's cap applies as to TenantPolicies, except in its own namespace.
        let capped = Boundaries {
            max_tenant_priority: 5,
            ..Default::default()
        };
        assert_eq!(discovered(&objs, &pools, &capped)[1].priority, 5);
        let own = Boundaries {
            own_namespace: Some("ns".into()),
            ..capped
        };
        assert_eq!(discovered(&objs, &pools, &own)[1].priority, 1000);
    }
}
