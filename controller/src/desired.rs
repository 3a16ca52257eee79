//! What a pool's managed InferenceReplicas should be, computed from the pool and the pods in
//! its namespace, and the plan that turns the replicas that exist into those: pure functions,
//! no I/O, so every rule (which pod counts as ready, which replica is ours to change) is tested
//! without an API server.

use crate::naming::{self, MANAGED_BY, MANAGED_BY_LABEL, POOL_LABEL};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{Resource, ResourceExt};
use std::collections::{BTreeMap, BTreeSet};
use warmpath_api::v1::{InferencePool, InferenceReplica, InferenceReplicaSpec};

/// Whether every `key=value` of `selector` is among `labels` (a Service-style equality
/// selector; an empty selector matches nothing, so a mistake never selects a whole namespace).
pub fn selector_matches(
    selector: &BTreeMap<String, String>,
    labels: &BTreeMap<String, String>,
) -> bool {
    !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// Whether a pod can take traffic: condition `Ready=True`, an IP, not being deleted, and not
/// finished.
pub fn pod_is_ready(pod: &Pod) -> bool {
    if pod.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let Some(status) = &pod.status else {
        return false;
    };
    if matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) {
        return false;
    }
    if status.pod_ip.as_deref().is_none_or(str::is_empty) {
        return false;
    }
    status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// Whether a replica is one this controller manages (and may rewrite or delete).
pub fn is_managed(replica: &InferenceReplica) -> bool {
    replica.labels().get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY)
}

/// One managed replica as it should be.
#[derive(Debug, Clone, PartialEq)]
pub struct DesiredReplica {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub spec: InferenceReplicaSpec,
}

impl DesiredReplica {
    /// The object the controller applies (server-side) for this replica in `namespace`, owned
    /// by `owner`. Typed, so `apiVersion` and `kind` come from the CRD's Rust type and cannot
    /// drift from it.
    pub fn to_object(&self, namespace: &str, owner: Option<&OwnerReference>) -> InferenceReplica {
        let mut replica = InferenceReplica::new(&self.name, self.spec.clone());
        replica.metadata.namespace = Some(namespace.to_owned());
        replica.metadata.labels = Some(self.labels.clone());
        // Always sent, even empty: under server-side apply the list this manager sends is the
        // list it owns, and the apply body has always carried it.
        replica.metadata.owner_references = Some(owner.into_iter().cloned().collect());
        replica
    }
}

/// The owner reference every managed replica of `pool` carries: the pool as controller, with
/// blocking owner deletion so that a foreground deletion of the pool waits for its replicas.
/// `None` when the pool has no uid (never the case for a pool read from the API server).
pub fn pool_owner(pool: &InferencePool) -> Option<OwnerReference> {
    pool.controller_owner_ref(&()).map(|mut o| {
        o.block_owner_deletion = Some(true);
        o
    })
}

/// Counts of a pool's selected pods, for its status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PodCounts {
    /// Pods whose labels match the selector.
    pub selected: usize,
    /// Of those, pods ready to take traffic.
    pub ready: usize,
}

/// The managed replicas `pool` should have, given the pods of its namespace (any order), and
/// how many pods it selects. Empty when the pool has no selector or no target port.
pub fn desired_replicas<'a>(
    pool: &InferencePool,
    pods: impl IntoIterator<Item = &'a Pod>,
) -> (Vec<DesiredReplica>, PodCounts) {
    let mut counts = PodCounts::default();
    let (Some(selector), Some(port)) = (&pool.spec.selector, pool.spec.target_port) else {
        return (Vec::new(), counts);
    };
    let pool_name = pool.name_any();
    let mut out = Vec::new();
    for pod in pods {
        if pod.metadata.namespace != pool.metadata.namespace
            || !selector_matches(selector, pod.labels())
        {
            continue;
        }
        counts.selected += 1;
        if !pod_is_ready(pod) {
            continue;
        }
        counts.ready += 1;
        let pod_name = pod.name_any();
        let address = pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.clone())
            .unwrap_or_default();
        out.push(DesiredReplica {
            name: naming::replica_name(&pool_name, &pod_name),
            labels: managed_labels(&pool_name),
            spec: InferenceReplicaSpec {
                pool: pool_name.clone(),
                address,
                port,
                models: None,
                role: None,
                engine: None,
                pod: Some(pod_name),
            },
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    (out, counts)
}

/// The labels every managed replica of `pool` carries.
pub fn managed_labels(pool: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (POOL_LABEL.to_owned(), naming::pool_label_value(pool)),
        (MANAGED_BY_LABEL.to_owned(), MANAGED_BY.to_owned()),
    ])
}

/// What to do to a pool's replicas.
#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    /// Replicas to create or rewrite (server-side apply), with whether each is new.
    pub apply: Vec<(DesiredReplica, bool)>,
    /// Managed replicas of the pool to delete (their pod is gone, unready or unselected).
    pub delete: Vec<String>,
    /// Desired names held by a replica the controller does not manage (hand-written): left
    /// alone, reported.
    pub blocked: Vec<String>,
}

/// Compares the desired replicas of pool `pool_name` with the replicas that exist in its
/// namespace (any pool's; only this pool's managed ones are touched).
pub fn plan<'a>(
    pool_name: &str,
    pool_uid: Option<&str>,
    desired: Vec<DesiredReplica>,
    existing: impl IntoIterator<Item = &'a InferenceReplica>,
) -> Plan {
    let existing: BTreeMap<String, &InferenceReplica> =
        existing.into_iter().map(|r| (r.name_any(), r)).collect();
    let wanted: BTreeSet<&str> = desired.iter().map(|d| d.name.as_str()).collect();
    let mut plan = Plan::default();
    for (name, replica) in &existing {
        if is_managed(replica) && replica.spec.pool == pool_name && !wanted.contains(name.as_str())
        {
            plan.delete.push(name.clone());
        }
    }
    for d in desired {
        match existing.get(&d.name) {
            None => plan.apply.push((d, true)),
            Some(r) if !is_managed(r) => plan.blocked.push(d.name),
            Some(r) => {
                let labels_ok = d.labels.iter().all(|(k, v)| r.labels().get(k) == Some(v));
                let owner_ok = pool_uid.is_none_or(|uid| {
                    r.owner_references()
                        .iter()
                        .any(|o| o.uid == uid && o.controller == Some(true))
                });
                if r.spec != d.spec || !labels_ok || !owner_ok {
                    plan.apply.push((d, false));
                }
            }
        }
    }
    plan
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
    use warmpath_api::v1::InferencePoolSpec;

    pub fn pool(name: &str, selector: &[(&str, &str)], port: Option<i32>) -> InferencePool {
        let mut p = InferencePool::new(
            name,
            InferencePoolSpec {
                models: vec!["tiny".into()],
                lora_adapters: Vec::new(),
                selector: (!selector.is_empty()).then(|| {
                    selector
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect()
                }),
                target_port: port,
                role: Default::default(),
                engine: Default::default(),
                metrics: Default::default(),
                kv_events: None,
                scheduling: Default::default(),
                endpoint_picker: None,
            },
        );
        p.metadata.namespace = Some("ns".into());
        p.metadata.uid = Some(format!("uid-{name}"));
        p.metadata.generation = Some(1);
        p
    }

    pub fn pod(name: &str, labels: &[(&str, &str)], ip: Option<&str>, ready: bool) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..Default::default()
            },
            spec: None,
            status: Some(PodStatus {
                phase: Some("Running".into()),
                pod_ip: ip.map(str::to_owned),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        }
    }

    fn replica_from(d: &DesiredReplica, owner_uid: &str) -> InferenceReplica {
        let mut r = InferenceReplica::new(&d.name, d.spec.clone());
        r.metadata.namespace = Some("ns".into());
        r.metadata.labels = Some(d.labels.clone());
        r.metadata.owner_references = Some(vec![OwnerReference {
            uid: owner_uid.into(),
            controller: Some(true),
            ..Default::default()
        }]);
        r
    }

    #[test]
    fn selectors_match_by_equality_and_never_when_empty() {
        let labels = BTreeMap::from([("app".to_owned(), "vllm".to_owned())]);
        assert!(selector_matches(
            &BTreeMap::from([("app".into(), "vllm".into())]),
            &labels
        ));
        assert!(!selector_matches(
            &BTreeMap::from([("app".into(), "sglang".into())]),
            &labels
        ));
        assert!(!selector_matches(&BTreeMap::new(), &labels));
    }

    #[test]
    fn readiness_needs_condition_ip_and_liveness() {
        assert!(pod_is_ready(&pod("a", &[], Some("10.0.0.1"), true)));
        assert!(!pod_is_ready(&pod("a", &[], Some("10.0.0.1"), false)));
        assert!(!pod_is_ready(&pod("a", &[], None, true)));
        assert!(!pod_is_ready(&pod("a", &[], Some(""), true)));
        let mut deleting = pod("a", &[], Some("10.0.0.1"), true);
        deleting.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
        assert!(!pod_is_ready(&deleting));
        let mut done = pod("a", &[], Some("10.0.0.1"), true);
        done.status.as_mut().unwrap().phase = Some("Succeeded".into());
        assert!(!pod_is_ready(&done));
        let mut no_status = pod("a", &[], None, true);
        no_status.status = None;
        assert!(!pod_is_ready(&no_status));
    }

    #[test]
    fn one_replica_per_ready_selected_pod() {
        let p = pool("llama", &[("app", "vllm")], Some(8000));
        let pods = [
            pod("b", &[("app", "vllm")], Some("10.0.0.2"), true),
            pod("a", &[("app", "vllm"), ("x", "y")], Some("10.0.0.1"), true),
            pod("c", &[("app", "vllm")], Some("10.0.0.3"), false),
            pod("d", &[("app", "other")], Some("10.0.0.4"), true),
        ];
        let (desired, counts) = desired_replicas(&p, &pods);
        assert_eq!(
            counts,
            PodCounts {
                selected: 3,
                ready: 2
            }
        );
        assert_eq!(desired.len(), 2);
        let a = desired
            .iter()
            .find(|d| d.spec.pod.as_deref() == Some("a"))
            .unwrap();
        assert_eq!(a.spec.address, "10.0.0.1");
        assert_eq!(a.spec.port, 8000);
        assert_eq!(a.spec.pool, "llama");
        assert_eq!(a.name, naming::replica_name("llama", "a"));
        assert_eq!(a.labels[POOL_LABEL], "llama");
        assert_eq!(a.labels[MANAGED_BY_LABEL], MANAGED_BY);
        // Another namespace's pod never counts.
        let mut elsewhere = pod("e", &[("app", "vllm")], Some("10.0.0.5"), true);
        elsewhere.metadata.namespace = Some("other".into());
        assert_eq!(desired_replicas(&p, [&elsewhere]).0.len(), 0);
        // No selector or no port: nothing.
        assert!(desired_replicas(&pool("x", &[], Some(8000)), &pods)
            .0
            .is_empty());
        assert!(
            desired_replicas(&pool("x", &[("app", "vllm")], None), &pods)
                .0
                .is_empty()
        );
    }

    /// The applied body, pinned field for field to what the controller sent when it was a
    /// hand-written JSON object, so that the typed object changes nothing on the wire.
    #[test]
    fn applied_object_is_the_same_on_the_wire() {
        let p = pool("llama", &[("app", "vllm")], Some(8000));
        let pods = [pod("vllm-0", &[("app", "vllm")], Some("10.0.0.7"), true)];
        let (desired, _) = desired_replicas(&p, &pods);
        let owner = pool_owner(&p);
        let body = |owner: Option<&OwnerReference>| {
            serde_json::to_value(desired[0].to_object("ns", owner)).unwrap()
        };
        let mut expected = serde_json::json!({
            "apiVersion": "warmpath.dev/v1",
            "kind": "InferenceReplica",
            "metadata": {
                "name": "llama-vllm-0-725b37ca",
                "namespace": "ns",
                "labels": {
                    "app.kubernetes.io/managed-by": "warmpath-controller",
                    "warmpath.dev/pool": "llama",
                },
                "ownerReferences": [{
                    "apiVersion": "warmpath.dev/v1",
                    "kind": "InferencePool",
                    "name": "llama",
                    "uid": "uid-llama",
                    "controller": true,
                    "blockOwnerDeletion": true,
                }],
            },
            "spec": {
                "address": "10.0.0.7",
                "pod": "vllm-0",
                "pool": "llama",
                "port": 8000,
            },
        });
        assert_eq!(body(owner.as_ref()), expected);
        // Without an owner the list is still sent, empty.
        expected["metadata"]["ownerReferences"] = serde_json::json!([]);
        assert_eq!(body(None), expected);
        // The version on the wire is the type's own.
        assert_eq!(
            body(None)["apiVersion"],
            InferenceReplica::api_version(&()).as_ref()
        );
        assert_eq!(body(None)["kind"], InferenceReplica::kind(&()).as_ref());
        // And the body reads back as the replica the plan compares against.
        let back: InferenceReplica = serde_json::from_value(body(owner.as_ref())).unwrap();
        assert!(is_managed(&back));
        assert_eq!(back.spec, desired[0].spec);
        assert_eq!(back.owner_references(), owner.as_slice());
    }

    #[test]
    fn plan_creates_updates_deletes_and_spares_hand_written() {
        let p = pool("llama", &[("app", "vllm")], Some(8000));
        let pods = [
            pod("a", &[("app", "vllm")], Some("10.0.0.1"), true),
            pod("b", &[("app", "vllm")], Some("10.0.0.2"), true),
        ];
        let (desired, _) = desired_replicas(&p, &pods);
        // Nothing exists: create both.
        let fresh = plan("llama", Some("uid-llama"), desired.clone(), []);
        assert_eq!(fresh.apply.len(), 2);
        assert!(fresh.apply.iter().all(|(_, new)| *new));
        // Everything as desired: nothing to do.
        let existing: Vec<_> = desired
            .iter()
            .map(|d| replica_from(d, "uid-llama"))
            .collect();
        assert_eq!(
            plan("llama", Some("uid-llama"), desired.clone(), &existing),
            Plan::default()
        );
        // An address changed: rewrite that one.
        let mut moved = existing.clone();
        moved[0].spec.address = "10.9.9.9".into();
        let p2 = plan("llama", Some("uid-llama"), desired.clone(), &moved);
        assert_eq!(p2.apply.len(), 1);
        assert!(!p2.apply[0].1);
        // A pool recreated with a new uid: owner references get rewritten.
        let p3 = plan("llama", Some("uid-new"), desired.clone(), &existing);
        assert_eq!(p3.apply.len(), 2);
        // Pod b gone: its replica is deleted; another pool's and hand-written ones are not.
        let mut other_pool = replica_from(&desired[0], "uid-other");
        other_pool.metadata.name = Some("other-replica".into());
        other_pool.spec.pool = "other".into();
        let mut hand = InferenceReplica::new(
            "hand",
            InferenceReplicaSpec {
                pool: "llama".into(),
                address: "tpu.example.com".into(),
                port: 8000,
                models: None,
                role: None,
                engine: None,
                pod: None,
            },
        );
        hand.metadata.namespace = Some("ns".into());
        let all = [existing[0].clone(), existing[1].clone(), other_pool, hand];
        let only_a: Vec<_> = desired
            .iter()
            .filter(|d| d.spec.pod.as_deref() == Some("a"))
            .cloned()
            .collect();
        let p4 = plan("llama", Some("uid-llama"), only_a, &all);
        let b_name = naming::replica_name("llama", "b");
        assert_eq!(p4.delete, vec![b_name]);
        assert!(p4.apply.is_empty());
        // A hand-written replica squatting on a desired name is left alone and reported.
        let mut squatter = existing[0].clone();
        squatter.metadata.labels = None;
        let p5 = plan("llama", Some("uid-llama"), desired.clone(), [&squatter]);
        assert_eq!(p5.blocked, vec![squatter.name_any()]);
        assert_eq!(p5.apply.len(), 1);
        assert!(p5.delete.is_empty());
    }
}
