//! From the cluster's InferencePools and InferenceReplicas to the router's pool list: a pure
//! function of the two object lists, so the whole table follows from what the API server says
//! now (no incremental state that a dropped event could leave stale).
//!
//! Names carry the namespace (`ns/pool`, `ns/replica`): they are identities in metrics,
//! headers and the prefix index, and the same name may exist in two watched namespaces.
//!
//! Model names are one namespace's: a model is served by the namespace whose InferencePool
//! named it first (the oldest pool; ties by namespace name), and a pool in another namespace
//! that names it gets none of its requests ([`Skipped::ClaimedModel`]) unless the operator lets
//! that namespace share models. Otherwise anyone who may create a pool in one namespace could
//! take a share of another namespace's prompts by naming its model. Replicas whose address the
//! operator does not allow are left out ([`Skipped::AddressNotAllowed`]), and a pool's
//! tokenizer paths are read only under the operator's root. The rules are
//! [`warmpath_api::boundaries`]', which the controller reports in status.

use crate::config::{Engine, FailureMode, PoolConfig, ReplicaConfig, Role};
use std::collections::{BTreeMap, HashMap};
use warmpath_api::boundaries::{self, Boundaries};
use warmpath_api::v1::{self as api, InferencePool, InferenceReplica, PickerFailureMode};

/// Why an InferenceReplica is not routed to; counted and logged by the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skipped {
    /// Its `spec.pool` names no InferencePool in its namespace (yet).
    NoPool { replica: String, pool: String },
    /// It names models its pool does not serve.
    ForeignModels { replica: String, message: String },
    /// A pool names a model another namespace claimed first: the model is not served from it.
    ClaimedModel {
        pool: String,
        model: String,
        owner: String,
    },
    /// Its address is not one the operator lets InferenceReplicas point at.
    AddressNotAllowed { replica: String, message: String },
}

/// The routed pools and what was left out.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Discovered {
    pub pools: Vec<PoolConfig>,
    pub skipped: Vec<Skipped>,
}

fn role(r: api::Role) -> Role {
    match r {
        api::Role::Prefill => Role::Prefill,
        api::Role::Decode => Role::Decode,
        api::Role::Both => Role::Both,
    }
}

fn engine(e: api::Engine) -> Engine {
    match e {
        api::Engine::Vllm => Engine::Vllm,
        api::Engine::Sglang => Engine::Sglang,
    }
}

fn key(ns: Option<&str>, name: Option<&str>) -> Option<(String, String)> {
    Some((ns.unwrap_or_default().to_owned(), name?.to_owned()))
}

/// Build the pool list. Objects being deleted are left out (their endpoints are going away);
/// a replica joins its pool's entry when it serves the pool's models in the pool's role, and a
/// separate entry of the same pool name otherwise (a subset of models, another role). Models
/// another namespace claimed first are left out of a pool (see the module doc), and so are
/// replicas at addresses `boundaries` does not allow.
pub fn discovered<'a>(
    pools: impl IntoIterator<Item = &'a InferencePool>,
    replicas: impl IntoIterator<Item = &'a InferenceReplica>,
    boundaries: &Boundaries,
) -> Discovered {
    let by_key: HashMap<(String, String), &InferencePool> = pools
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| {
            Some((
                key(p.metadata.namespace.as_deref(), p.metadata.name.as_deref())?,
                p,
            ))
        })
        .collect();
    let owners = boundaries::model_owners(by_key.values().copied());
    let mut skipped = Vec::new();
    // A pool's models less those claimed by another namespace (each refusal reported once).
    let mut claimed = std::collections::BTreeSet::new();
    let mut own_models = |ns: &str, pool: &str, models: Vec<String>| -> Vec<String> {
        let elsewhere = boundaries::claimed_elsewhere(ns, &models, &owners, boundaries);
        let mut models = models;
        models.retain(|m| !elsewhere.iter().any(|(c, _)| c == m));
        for (model, owner) in elsewhere {
            claimed.insert((format!("{ns}/{pool}"), model, owner));
        }
        models
    };
    // (pool name, models, role, engine) → replicas; BTreeMap for a stable order.
    type Group = (String, Vec<String>, Role, Engine);
    // → (metrics path, metrics port, replicas)
    type Members = (Option<String>, Option<u16>, Vec<ReplicaConfig>);
    let mut groups: BTreeMap<Group, Members> = BTreeMap::new();
    for r in replicas {
        if r.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let Some((ns, name)) = key(r.metadata.namespace.as_deref(), r.metadata.name.as_deref())
        else {
            continue;
        };
        let replica_name = format!("{ns}/{name}");
        let Some(pool) = by_key.get(&(ns.clone(), r.spec.pool.clone())) else {
            skipped.push(Skipped::NoPool {
                replica: replica_name,
                pool: format!("{ns}/{}", r.spec.pool),
            });
            continue;
        };
        if let Err(message) = r.spec.check_against(&r.spec.pool, &pool.spec) {
            skipped.push(Skipped::ForeignModels {
                replica: replica_name,
                message,
            });
            continue;
        }
        // Every replica, not only hand-written ones: the managed-by label that marks the
        // controller's is one anyone who may write a replica can set.
        if let Err(message) = boundaries.replica_networks.check(&r.spec.address) {
            skipped.push(Skipped::AddressNotAllowed {
                replica: replica_name,
                message,
            });
            continue;
        }
        let mut models = own_models(
            &ns,
            &r.spec.pool,
            r.spec.effective_models(&pool.spec).to_vec(),
        );
        if models.is_empty() {
            continue;
        }
        models.sort();
        models.dedup();
        let group = (
            format!("{ns}/{}", r.spec.pool),
            models,
            role(r.spec.effective_role(&pool.spec)),
            engine(r.spec.effective_engine(&pool.spec)),
        );
        let metrics_path = pool
            .spec
            .metrics
            .enabled
            .then(|| pool.spec.metrics.path.clone());
        let metrics_port = pool.spec.metrics.port.and_then(|p| u16::try_from(p).ok());
        let entry = groups
            .entry(group)
            .or_insert_with(|| (metrics_path, metrics_port, Vec::new()));
        entry.2.push(ReplicaConfig {
            name: replica_name,
            url: r.spec.url(),
            bootstrap_port: None,
            kv_events_endpoint: None,
            kv_events_replay_endpoint: None,
        });
    }
    // Pools without replicas still name their models: `/v1/models` lists them and requests
    // get "no ready replica" (503) rather than "unknown model" (404).
    for ((ns, name), pool) in &by_key {
        let pool_name = format!("{ns}/{name}");
        if !groups.keys().any(|(p, ..)| *p == pool_name) {
            let mut models = own_models(ns, name, pool.spec.models.clone());
            if models.is_empty() {
                continue;
            }
            models.sort();
            models.dedup();
            groups.insert(
                (
                    pool_name,
                    models,
                    role(pool.spec.role),
                    engine(pool.spec.engine),
                ),
                (None, None, Vec::new()),
            );
        }
    }
    let pools = groups
        .into_iter()
        .map(
            |((name, models, role, engine), (metrics_path, metrics_port, mut replicas))| {
                replicas.sort_by(|a, b| a.name.cmp(&b.name));
                let spec = name
                    .split_once('/')
                    .and_then(|(ns, n)| by_key.get(&(ns.to_owned(), n.to_owned())))
                    .map(|p| &p.spec);
                let kv_events = spec.and_then(|s| s.kv_events.as_ref()).map(|kv| {
                    crate::config::KvEventsConfig {
                        endpoint: Some(format!("tcp://{{host}}:{}", kv.port)),
                        replay_endpoint: kv.replay_port.map(|p| format!("tcp://{{host}}:{p}")),
                        topic: kv.topic.clone(),
                        tokenizer: kv.tokenizer.as_ref().map(Into::into),
                        chat_template: kv.chat_template.as_ref().map(Into::into),
                        root: Some(boundaries.tokenizer_root.clone()),
                        ..Default::default()
                    }
                });
                let weights = spec.map(|s| {
                    let w = &s.scheduling.weights;
                    warmpath_routing::scheduler::Weights {
                        prefix: f64::from(w.prefix),
                        load: f64::from(w.load),
                        queue: f64::from(w.queue),
                        kv_cache: f64::from(w.kv_cache),
                    }
                });
                let failure_mode =
                    spec.and_then(|s| s.endpoint_picker.as_ref())
                        .map(|p| match p.failure_mode {
                            PickerFailureMode::FailOpen => FailureMode::Open,
                            PickerFailureMode::FailClose => FailureMode::Closed,
                        });
                PoolConfig {
                    kv_events,
                    // Only adapters among the models this pool kept: one that names a model
                    // claimed elsewhere would otherwise key that model's blocks as an adapter's
                    // (its owner's cache matching gone) and fail the whole file's validation.
                    lora_adapters: spec
                        .map(|s| {
                            s.lora_adapters
                                .iter()
                                .filter(|a| models.contains(a))
                                .cloned()
                                .collect()
                        })
                        .unwrap_or_default(),
                    weights,
                    failure_mode,
                    name,
                    models,
                    role,
                    engine,
                    metrics_path,
                    metrics_port,
                    replicas,
                }
            },
        )
        .collect();
    skipped.extend(
        claimed
            .into_iter()
            .map(|(pool, model, owner)| Skipped::ClaimedModel { pool, model, owner }),
    );
    Discovered { pools, skipped }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ObjectMeta;
    use warmpath_api::v1::{InferencePoolSpec, InferenceReplicaSpec};

    fn meta(ns: &str, name: &str) -> ObjectMeta {
        ObjectMeta {
            namespace: Some(ns.into()),
            name: Some(name.into()),
            ..Default::default()
        }
    }

    fn pool(ns: &str, name: &str, models: &[&str]) -> InferencePool {
        let spec: InferencePoolSpec = serde_json::from_value(serde_json::json!({
            "models": models,
        }))
        .unwrap();
        InferencePool {
            metadata: meta(ns, name),
            spec,
            status: None,
        }
    }

    fn replica(ns: &str, name: &str, pool: &str, address: &str) -> InferenceReplica {
        let spec: InferenceReplicaSpec = serde_json::from_value(serde_json::json!({
            "pool": pool, "address": address, "port": 8000,
        }))
        .unwrap();
        InferenceReplica {
            metadata: meta(ns, name),
            spec,
            status: None,
        }
    }

    #[test]
    fn replicas_join_their_pool_with_namespaced_names() {
        let pools = [pool("a", "p", &["m"]), pool("b", "p", &["n"])];
        let replicas = [
            replica("a", "r2", "p", "10.0.0.2"),
            replica("a", "r1", "p", "10.0.0.1"),
            replica("b", "r1", "p", "fd00::1"),
        ];
        let d = discovered(&pools, &replicas, &Boundaries::default());
        assert!(d.skipped.is_empty());
        assert_eq!(d.pools.len(), 2);
        assert_eq!(d.pools[0].name, "a/p");
        let names: Vec<_> = d.pools[0]
            .replicas
            .iter()
            .map(|r| r.name.as_str())
            .collect();
        assert_eq!(names, ["a/r1", "a/r2"]);
        assert_eq!(d.pools[0].replicas[0].url, "http://10.0.0.1:8000");
        assert_eq!(d.pools[1].replicas[0].url, "http://[fd00::1]:8000");
        assert_eq!(d.pools[0].metrics_path.as_deref(), Some("/metrics"));
        assert_eq!(d.pools[0].failure_mode, None, "unsaid: the picker's own");
    }

    fn created(mut p: InferencePool, seconds: i64) -> InferencePool {
        p.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::from_second(seconds).unwrap(),
        ));
        p
    }

    /// A model belongs to the namespace whose pool named it first: a later pool elsewhere
    /// that names it serves it to no one (reported), whatever its name sorts as, and keeps its
    /// other models; a namespace the operator lets share serves it too.
    #[test]
    fn a_model_is_served_only_by_the_namespace_that_claimed_it_first() {
        let pools = [
            created(pool("zeta", "serving", &["llama"]), 100),
            created(pool("attacker", "grab", &["llama", "own-model"]), 200),
            created(pool("attacker", "only-llama", &["llama"]), 300),
        ];
        let replicas = [
            replica("zeta", "z0", "serving", "10.0.0.1"),
            replica("attacker", "a0", "grab", "10.0.0.66"),
            replica("attacker", "a1", "only-llama", "10.0.0.67"),
        ];
        let d = discovered(&pools, &replicas, &Boundaries::default());
        let serving: Vec<(&str, &[String])> = d
            .pools
            .iter()
            .map(|p| (p.name.as_str(), p.models.as_slice()))
            .collect();
        assert_eq!(
            serving,
            [
                ("attacker/grab", &["own-model".to_owned()][..]),
                ("zeta/serving", &["llama".to_owned()][..])
            ]
        );
        for pool in ["attacker/grab", "attacker/only-llama"] {
            assert!(
                d.skipped.contains(&Skipped::ClaimedModel {
                    pool: pool.into(),
                    model: "llama".into(),
                    owner: "zeta".into(),
                }),
                "{pool}: {:?}",
                d.skipped
            );
        }
        // Shared by the operator's word.
        let shared = Boundaries {
            share_models_with: vec!["attacker".to_owned()],
            ..Default::default()
        };
        let d = discovered(&pools, &replicas, &shared);
        assert!(d.skipped.is_empty(), "{:?}", d.skipped);
        let llama: Vec<&str> = d
            .pools
            .iter()
            .filter(|p| p.models.contains(&"llama".to_owned()))
            .map(|p| p.name.as_str())
            .collect();
        assert_eq!(
            llama,
            ["attacker/grab", "attacker/only-llama", "zeta/serving"]
        );
        // Created at the same second: the namespace that sorts first owns it, on every router.
        let tie = [
            created(pool("b", "p", &["m"]), 5),
            created(pool("a", "p", &["m"]), 5),
        ];
        let d = discovered(&tie, &[], &Boundaries::default());
        assert_eq!(d.pools.len(), 1);
        assert_eq!(d.pools[0].name, "a/p");
    }

    /// A replica pointing where the operator does not allow (loopback, the metadata service, a
    /// name, outside the listed networks) is left out with the reason; the rest of its pool
    /// still routes. The controller's label does not exempt a replica.
    #[test]
    fn replicas_outside_the_allowed_networks_are_left_out() {
        let pools = [pool("a", "p", &["m"])];
        let mut labelled = replica("a", "labelled", "p", "127.0.0.1");
        labelled.metadata.labels = Some(
            [(
                "app.kubernetes.io/managed-by".to_owned(),
                "warmpath-controller".to_owned(),
            )]
            .into(),
        );
        let replicas = [
            replica("a", "ok", "p", "10.0.0.1"),
            replica("a", "metadata", "p", "169.254.169.254"),
            replica("a", "named", "p", "vllm.example.com"),
            labelled,
        ];
        let d = discovered(&pools, &replicas, &Boundaries::default());
        let routed: Vec<&str> = d.pools[0]
            .replicas
            .iter()
            .map(|r| r.name.as_str())
            .collect();
        assert_eq!(routed, ["a/ok"]);
        let refused: Vec<&str> = d
            .skipped
            .iter()
            .filter_map(|s| match s {
                Skipped::AddressNotAllowed { replica, .. } => Some(replica.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(refused, ["a/metadata", "a/named", "a/labelled"]);
        let narrow = Boundaries {
            replica_networks: warmpath_api::boundaries::ReplicaNetworks {
                allow: vec!["192.168.0.0/16".parse().unwrap()],
                hostnames: true,
            },
            ..Default::default()
        };
        let d = discovered(&pools, &replicas, &narrow);
        let routed: Vec<&str> = d.pools[0]
            .replicas
            .iter()
            .map(|r| r.name.as_str())
            .collect();
        assert_eq!(routed, ["a/named"]);
    }

    #[test]
    fn a_pools_picker_failure_mode_is_carried() {
        let mut open = pool("a", "p", &["m"]);
        open.spec.endpoint_picker = Some(api::EndpointPickerSpec {
            failure_mode: PickerFailureMode::FailOpen,
        });
        let mut closed = pool("a", "q", &["n"]);
        closed.spec.endpoint_picker = Some(Default::default());
        let d = discovered(&[open, closed], &[], &Boundaries::default());
        assert_eq!(d.pools[0].failure_mode, Some(FailureMode::Open));
        assert_eq!(d.pools[1].failure_mode, Some(FailureMode::Closed));
    }

    #[test]
    fn unresolved_foreign_and_deleted_replicas_are_left_out() {
        let pools = [pool("a", "p", &["m"])];
        let mut gone = replica("a", "gone", "p", "10.0.0.3");
        gone.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        let mut foreign = replica("a", "foreign", "p", "10.0.0.4");
        foreign.spec.models = Some(vec!["other".into()]);
        let replicas = [
            replica("a", "orphan", "missing", "10.0.0.1"),
            replica("b", "elsewhere", "p", "10.0.0.2"),
            gone,
            foreign,
        ];
        let d = discovered(&pools, &replicas, &Boundaries::default());
        assert_eq!(d.pools.len(), 1);
        assert!(d.pools[0].replicas.is_empty(), "{:?}", d.pools[0]);
        assert_eq!(d.pools[0].models, ["m"]);
        assert_eq!(d.skipped.len(), 3, "{:?}", d.skipped);
        assert!(d.skipped.contains(&Skipped::NoPool {
            replica: "a/orphan".into(),
            pool: "a/missing".into()
        }));
        assert!(d.skipped.contains(&Skipped::NoPool {
            replica: "b/elsewhere".into(),
            pool: "b/p".into()
        }));
    }

    #[test]
    fn model_subsets_and_roles_get_their_own_entries() {
        let pools = [pool("a", "p", &["m", "n"])];
        let mut subset = replica("a", "r2", "p", "10.0.0.2");
        subset.spec.models = Some(vec!["n".into()]);
        let mut decode = replica("a", "r3", "p", "10.0.0.3");
        decode.spec.role = Some(api::Role::Decode);
        let replicas = [replica("a", "r1", "p", "10.0.0.1"), subset, decode];
        let d = discovered(&pools, &replicas, &Boundaries::default());
        assert_eq!(d.pools.len(), 3, "{:?}", d.pools);
        assert!(d.pools.iter().all(|p| p.name == "a/p"));
        let full = d
            .pools
            .iter()
            .find(|p| p.models == ["m", "n"] && p.role == Role::Both);
        assert_eq!(full.unwrap().replicas[0].name, "a/r1");
        let n = d.pools.iter().find(|p| p.models == ["n"]).unwrap();
        assert_eq!(n.replicas[0].name, "a/r2");
        let dec = d.pools.iter().find(|p| p.role == Role::Decode).unwrap();
        assert_eq!(dec.replicas[0].name, "a/r3");
    }

    #[test]
    fn disabled_metrics_turn_scraping_off() {
        let mut p = pool("a", "p", &["m"]);
        p.spec.metrics.enabled = false;
        let d = discovered(
            &[p],
            &[replica("a", "r", "p", "10.0.0.1")],
            &Boundaries::default(),
        );
        assert_eq!(d.pools[0].metrics_path, None);
    }

    #[test]
    fn a_separate_metrics_port_is_kept() {
        let mut p = pool("a", "p", &["m"]);
        p.spec.metrics.port = Some(9100);
        let d = discovered(
            &[p],
            &[replica("a", "r", "p", "10.0.0.1")],
            &Boundaries::default(),
        );
        assert_eq!(d.pools[0].metrics_port, Some(9100));
        assert_eq!(d.pools[0].replicas[0].url, "http://10.0.0.1:8000");
    }

    /// A pool's `kvEvents` become the router's KV-event settings: the engines' ports as
    /// endpoint templates, and the tokenizer and chat template paths.
    #[test]
    fn a_pools_kv_events_settings_reach_the_router() {
        let mut p = pool("ml", "llama", &["llama"]);
        p.spec.kv_events = serde_json::from_value(serde_json::json!({
            "port": 5557, "replayPort": 5558, "topic": "kv",
            "tokenizer": "/etc/warmpath/tokenizers/llama/tokenizer.json",
            "chatTemplate": "/etc/warmpath/tokenizers/llama/tokenizer_config.json",
        }))
        .unwrap();
        let d = discovered(
            [&p],
            [&replica("ml", "r0", "llama", "10.0.0.7")],
            &Boundaries::default(),
        );
        let kv = d.pools[0].kv_events.as_ref().expect("kv_events");
        assert_eq!(kv.endpoint.as_deref(), Some("tcp://{host}:5557"));
        assert_eq!(kv.replay_endpoint.as_deref(), Some("tcp://{host}:5558"));
        assert_eq!(kv.topic, "kv");
        assert_eq!(
            kv.tokenizer.as_deref(),
            Some(std::path::Path::new(
                "/etc/warmpath/tokenizers/llama/tokenizer.json"
            ))
        );
        assert!(kv.chat_template.is_some());
        assert_eq!(
            kv.root.as_deref(),
            Some(std::path::Path::new(
                warmpath_api::boundaries::DEFAULT_TOKENIZER_ROOT
            )),
            "read only under the operator's root"
        );
        assert_eq!(
            kv.endpoint_for("10.0.0.7", None).as_deref(),
            Some("tcp://10.0.0.7:5557")
        );
        assert_eq!(
            kv.replay_for("10.0.0.7", None).as_deref(),
            Some("tcp://10.0.0.7:5558")
        );
    }

    #[test]
    fn a_pools_lora_adapters_reach_the_router() {
        let mut p = pool("ml", "llama", &["llama", "llama-sql"]);
        p.spec.lora_adapters = vec!["llama-sql".into()];
        let d = discovered(
            [&p],
            [&replica("ml", "r0", "llama", "10.0.0.7")],
            &Boundaries::default(),
        );
        assert_eq!(d.pools[0].lora_adapters, ["llama-sql"]);
    }

    /// A pool that lists another namespace's model among its adapters neither serves it nor
    /// makes the router key its owner's requests as an adapter's, and the file stays valid.
    #[test]
    fn an_adapter_naming_a_model_claimed_elsewhere_is_dropped() {
        let owner = created(pool("zeta", "serving", &["llama"]), 100);
        let mut grab = created(pool("attacker", "grab", &["llama", "own"]), 200);
        grab.spec.lora_adapters = vec!["llama".into(), "own".into()];
        let d = discovered(
            [&owner, &grab],
            [
                &replica("zeta", "z0", "serving", "10.0.0.1"),
                &replica("attacker", "a0", "grab", "10.0.0.66"),
            ],
            &Boundaries::default(),
        );
        let grab = d.pools.iter().find(|p| p.name == "attacker/grab").unwrap();
        assert_eq!(grab.models, ["own"]);
        assert_eq!(grab.lora_adapters, ["own"]);
        // What the file's validation asks of every pool.
        for pool in &d.pools {
            assert!(pool.lora_adapters.iter().all(|a| pool.models.contains(a)));
        }
    }
}
