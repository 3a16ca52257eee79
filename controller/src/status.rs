//! The statuses the controller writes, computed without I/O: a pool's counters and conditions
//! from its pods and replicas, a replica's from its pool, a tenant policy's from its Secret.
//! Each function starts from the object's current status so that `lastTransitionTime` moves
//! only when a condition's status flips, and the caller writes only when the result differs.

use crate::desired::PodCounts;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use std::path::Path;
use warmpath_api::boundaries::{self, Boundaries, ReplicaNetworks};
use warmpath_api::conditions::{
    self, reason, ACCEPTED, MODELS_CLAIMED, READY, RESOLVED_REFS, TOKENIZER_ALLOWED,
};
use warmpath_api::v1::{
    InferencePool, InferencePoolStatus, InferenceReplica, InferenceReplicaStatus, TenantPolicy,
    TenantPolicyStatus,
};

/// Reasons this controller adds to the shared ones.
pub mod reasons {
    /// A pool's selector matches no pod.
    pub const NO_MATCHING_PODS: &str = "NoMatchingPods";
    /// A Secret lives in a namespace the controller may not read.
    pub const SECRET_NOT_READABLE: &str = "SecretNotReadable";
    /// A Secret holds no usable key.
    pub const NO_KEYS: &str = "NoKeys";
}

fn ns_of(obj: &impl ResourceExt) -> String {
    obj.namespace().unwrap_or_default()
}

/// Why a pool's spec cannot be used as written, if it cannot.
pub fn pool_spec_problem(pool: &InferencePool) -> Option<String> {
    let spec = &pool.spec;
    if spec.models.is_empty() {
        return Some("spec.models is empty: list the model names requests use".into());
    }
    match (&spec.selector, spec.target_port) {
        (Some(s), _) if s.is_empty() => Some(
            "spec.selector is empty and would select every pod: add labels, or omit it for a pool of hand-written replicas".into(),
        ),
        (Some(_), None) => Some(
            "spec.targetPort is required with spec.selector: set the port the engine listens on in each pod (vLLM 8000, SGLang 30000)".into(),
        ),
        _ => None,
    }
}

/// Why the routers read none of a pool's tokenizer paths, if they do not: a path outside
/// `root` as written (the routers also refuse one whose links lead out).
pub fn tokenizer_problem(pool: &InferencePool, root: &Path) -> Option<String> {
    let kv = pool.spec.kv_events.as_ref()?;
    [("kvEvents.tokenizer", &kv.tokenizer), ("kvEvents.chatTemplate", &kv.chat_template)]
        .into_iter()
        .find_map(|(field, path)| {
            let path = path.as_deref()?;
            boundaries::lexically_under(root, Path::new(path))
                .err()
                .map(|e| format!("{field}: {e}; the routers do not read it, and route the pool without its tokenizer (by the approximate index)"))
        })
}

/// What a pool's status should be, given its selected pods, the managed replicas it should
/// have (one per ready pod), its hand-written replicas with whether each of those is accepted,
/// the models another namespace claimed first (model, owner) and the routers' tokenizer root.
pub fn pool_status(
    pool: &InferencePool,
    pods: PodCounts,
    managed: usize,
    hand_written: &[(&InferenceReplica, bool)],
    claimed: &[(String, String)],
    tokenizer_root: &Path,
    now: &Time,
) -> InferencePoolStatus {
    let gen = pool.metadata.generation;
    let mut status = pool.status.clone().unwrap_or_default();
    status.observed_generation = gen;
    let hand_ready = hand_written.iter().filter(|(_, ok)| *ok).count();
    status.replicas = (managed + hand_written.len()) as i32;
    status.ready_replicas = (managed + hand_ready) as i32;
    let name = pool.name_any();
    let ns = ns_of(pool);
    let problem = pool_spec_problem(pool);
    let accepted = match &problem {
        Some(p) => conditions::new(
            ACCEPTED,
            false,
            reason::INVALID,
            p.clone(),
            gen,
            now.clone(),
        ),
        None => conditions::new(
            ACCEPTED,
            true,
            reason::ACCEPTED,
            "spec is valid",
            gen,
            now.clone(),
        ),
    };
    let selector = pool.spec.selector.as_ref().filter(|s| !s.is_empty());
    let resolved = match selector {
        Some(sel) if pods.selected == 0 => {
            let labels: Vec<String> = sel.iter().map(|(k, v)| format!("{k}={v}")).collect();
            conditions::new(
                RESOLVED_REFS,
                false,
                reasons::NO_MATCHING_PODS,
                format!(
                    "no pod in namespace {ns} has the labels {}: label the model-server pods or fix spec.selector",
                    labels.join(",")
                ),
                gen,
                now.clone(),
            )
        }
        Some(_) => conditions::new(
            RESOLVED_REFS,
            true,
            reason::RESOLVED,
            format!("spec.selector matches {} pod(s)", pods.selected),
            gen,
            now.clone(),
        ),
        None => conditions::new(
            RESOLVED_REFS,
            true,
            reason::RESOLVED,
            "no spec.selector: the pool's replicas are the InferenceReplicas that name it",
            gen,
            now.clone(),
        ),
    };
    let mut owned: Vec<&String> = pool.spec.models.iter().collect();
    owned.retain(|m| !claimed.iter().any(|(c, _)| c == *m));
    let claims = if claimed.is_empty() {
        conditions::new(
            MODELS_CLAIMED,
            true,
            reason::MODELS_OWNED,
            format!("every model in spec.models is served from namespace {ns}"),
            gen,
            now.clone(),
        )
    } else {
        let taken: Vec<String> = claimed
            .iter()
            .map(|(m, owner)| format!("{m:?} (namespace {owner})"))
            .collect();
        conditions::new(
            MODELS_CLAIMED,
            false,
            reason::MODEL_CLAIMED_BY_NAMESPACE,
            format!(
                "another namespace's InferencePool named {} first, so this pool gets none of {} requests: serve another model name, or ask the routers' operator to list {ns} in --share-models-with (router.shareModelsWith)",
                taken.join(", "),
                if claimed.len() == 1 { "its" } else { "their" }
            ),
            gen,
            now.clone(),
        )
    };
    let ready = if owned.is_empty() && !claimed.is_empty() {
        conditions::new(
            READY,
            false,
            reason::MODEL_CLAIMED_BY_NAMESPACE,
            "every model of this pool belongs to another namespace: it gets no requests (see ModelsClaimed)",
            gen,
            now.clone(),
        )
    } else if status.ready_replicas > 0 {
        conditions::new(
            READY,
            true,
            reason::READY,
            format!(
                "{} of {} replica(s) ready",
                status.ready_replicas, status.replicas
            ),
            gen,
            now.clone(),
        )
    } else {
        let why = if problem.is_some() {
            "fix the spec (see condition Accepted)".to_owned()
        } else if selector.is_some() {
            format!(
                "{} pod(s) match spec.selector, {} ready with an IP: wait for the pods to become Ready or check their readiness probes",
                pods.selected, pods.ready
            )
        } else {
            format!("create an InferenceReplica with spec.pool: {name}")
        };
        conditions::new(
            READY,
            false,
            reason::NO_READY_REPLICAS,
            format!("no ready replica: {why}"),
            gen,
            now.clone(),
        )
    };
    conditions::set(&mut status.conditions, accepted);
    conditions::set(&mut status.conditions, resolved);
    conditions::set(&mut status.conditions, claims);
    conditions::set(&mut status.conditions, ready);
    let has_paths = pool
        .spec
        .kv_events
        .as_ref()
        .is_some_and(|kv| kv.tokenizer.is_some() || kv.chat_template.is_some());
    if has_paths {
        let tokenizer = match tokenizer_problem(pool, tokenizer_root) {
            Some(problem) => conditions::new(
                TOKENIZER_ALLOWED,
                false,
                reason::OUTSIDE_TOKENIZER_ROOT,
                problem,
                gen,
                now.clone(),
            ),
            None => conditions::new(
                TOKENIZER_ALLOWED,
                true,
                reason::UNDER_TOKENIZER_ROOT,
                format!(
                    "the tokenizer paths are under {}, the routers' tokenizer root",
                    tokenizer_root.display()
                ),
                gen,
                now.clone(),
            ),
        };
        conditions::set(&mut status.conditions, tokenizer);
    } else {
        conditions::remove(&mut status.conditions, TOKENIZER_ALLOWED);
    }
    status
}

/// Whether a replica is routed with its pool (`None` when the pool does not exist): its
/// models are the pool's and its address one the routers allow.
pub fn replica_accepted(
    replica: &InferenceReplica,
    pool: Option<&InferencePool>,
    networks: &ReplicaNetworks,
) -> bool {
    pool.is_some_and(|p| replica.spec.check_against(&p.name_any(), &p.spec).is_ok())
        && networks.check(&replica.spec.address).is_ok()
}

/// What a replica's status should be, given its pool (`None`: not found) and the networks
/// the routers allow replicas in.
pub fn replica_status(
    replica: &InferenceReplica,
    pool: Option<&InferencePool>,
    networks: &ReplicaNetworks,
    now: &Time,
) -> InferenceReplicaStatus {
    let gen = replica.metadata.generation;
    let mut status = replica.status.clone().unwrap_or_default();
    status.observed_generation = gen;
    let pool_name = &replica.spec.pool;
    let ns = ns_of(replica);
    let (accepted, resolved) = match pool {
        None => (
            conditions::new(
                ACCEPTED,
                false,
                reason::POOL_NOT_FOUND,
                format!("cannot check the spec against InferencePool {pool_name:?}: it does not exist (see ResolvedRefs)"),
                gen,
                now.clone(),
            ),
            conditions::new(
                RESOLVED_REFS,
                false,
                reason::POOL_NOT_FOUND,
                format!("InferencePool {pool_name:?} not found in namespace {ns}: create it or fix spec.pool"),
                gen,
                now.clone(),
            ),
        ),
        Some(p) => (
            match replica.spec.check_against(pool_name, &p.spec).map_err(|m| (reason::INVALID, m)).and_then(|()| {
                networks
                    .check(&replica.spec.address)
                    .map_err(|m| (reason::ADDRESS_NOT_ALLOWED, format!("{m}; the routers do not route to it")))
            }) {
                Ok(()) => conditions::new(
                    ACCEPTED,
                    true,
                    reason::ACCEPTED,
                    "spec is valid for its pool",
                    gen,
                    now.clone(),
                ),
                Err((why, msg)) => conditions::new(ACCEPTED, false, why, msg, gen, now.clone()),
            },
            conditions::new(
                RESOLVED_REFS,
                true,
                reason::RESOLVED,
                format!("InferencePool {pool_name:?} exists"),
                gen,
                now.clone(),
            ),
        ),
    };
    let usable = accepted.status == "True" && resolved.status == "True";
    let ready = if usable {
        conditions::new(
            READY,
            true,
            reason::READY,
            match &replica.spec.pod {
                Some(pod) => format!("pod {pod} is ready at {}", replica.spec.url()),
                None => format!("endpoint {} is part of its pool", replica.spec.url()),
            },
            gen,
            now.clone(),
        )
    } else {
        conditions::new(
            READY,
            false,
            if resolved.status == "True" {
                accepted.reason.as_str()
            } else {
                reason::POOL_NOT_FOUND
            },
            "not routable until Accepted and ResolvedRefs are True",
            gen,
            now.clone(),
        )
    };
    conditions::set(&mut status.conditions, accepted);
    conditions::set(&mut status.conditions, resolved);
    conditions::set(&mut status.conditions, ready);
    status
}

/// What the controller can see of a tenant's Secret.
#[derive(Debug, Clone, Copy)]
pub enum SecretView<'a> {
    /// The controller may not read Secrets in the tenant's namespace.
    NotReadable,
    /// Readable namespace; `None`: no Secret of that name.
    Found(Option<&'a Secret>),
}

/// Number of non-empty values of a Secret (`data` and `stringData`), or of one key.
fn key_count(secret: &Secret, key: Option<&str>) -> Result<usize, String> {
    let mut values: Vec<(&String, bool)> = Vec::new();
    if let Some(data) = &secret.data {
        values.extend(data.iter().map(|(k, v)| (k, !v.0.is_empty())));
    }
    if let Some(data) = &secret.string_data {
        values.extend(data.iter().map(|(k, v)| (k, !v.is_empty())));
    }
    match key {
        Some(key) => match values.iter().find(|(k, _)| k.as_str() == key) {
            Some((_, true)) => Ok(1),
            Some((_, false)) => Err(format!("key {key:?} is empty")),
            None => {
                let mut keys: Vec<&str> = values.iter().map(|(k, _)| k.as_str()).collect();
                keys.sort_unstable();
                keys.dedup();
                Err(format!(
                    "has no key {key:?} (keys: {})",
                    if keys.is_empty() {
                        "none".to_owned()
                    } else {
                        keys.join(", ")
                    }
                ))
            }
        },
        None => {
            let n = values.iter().filter(|(_, nonempty)| *nonempty).count();
            if n == 0 {
                Err("holds no non-empty value".into())
            } else {
                Ok(n)
            }
        }
    }
}

/// What a tenant policy's status should be, given what the controller sees of its Secret, the
/// routers' boundaries (the priority cap) and the TenantPolicy (`ns/name`) that claimed its
/// header value first, if another did.
pub fn tenant_status(
    tenant: &TenantPolicy,
    secret: SecretView<'_>,
    boundaries: &Boundaries,
    header_holder: Option<&str>,
    now: &Time,
) -> TenantPolicyStatus {
    let gen = tenant.metadata.generation;
    let mut status = tenant.status.clone().unwrap_or_default();
    status.observed_generation = gen;
    let ns = ns_of(tenant);
    let header = tenant
        .spec
        .header
        .clone()
        .unwrap_or_else(|| boundaries.tenant_name(&ns, &tenant.name_any()));
    let accepted = match &tenant.spec.limits {
        Some(l) if l.burst.is_some() && l.requests_per_second.is_none() => Err(
            "spec.limits.burst needs spec.limits.requestsPerSecond: burst is the size of the request-rate bucket".to_owned(),
        ),
        Some(l) if l.burst.zip(l.requests_per_second).is_some_and(|(b, r)| b < r) => Err(
            "spec.limits.burst must be at least spec.limits.requestsPerSecond".to_owned(),
        ),
        _ => Ok(()),
    };
    let accepted = accepted.map_err(|m| (reason::INVALID, m)).and_then(|()| match header_holder {
        Some(holder) => Err((
            reason::HEADER_CLAIMED,
            format!("the header value {header:?} belongs to TenantPolicy {holder}, which claimed it first: the routers do not use this policy; choose another spec.header"),
        )),
        None => Ok(()),
    });
    let capped = boundaries.capped_priority(&ns, tenant.spec.priority).err();
    let resolved: Result<(String, Option<i32>), (&str, String)> =
        match (&tenant.spec.api_key_secret_ref, secret) {
            (None, _) => Ok((
                format!("no spec.apiKeySecretRef: requests are identified by the tenant header value {header:?}"),
                None,
            )),
            (Some(r), SecretView::NotReadable) => Err((
                reasons::SECRET_NOT_READABLE,
                format!(
                    "the controller may not read Secrets in namespace {ns}, so Secret {:?} cannot be checked: add {ns} to the chart's rbac.secretNamespaces (WARMPATH_SECRET_NAMESPACES; the router reads API keys there only too)",
                    r.name
                ),
            )),
            (Some(r), SecretView::Found(None)) => Err((
                reason::SECRET_NOT_FOUND,
                format!(
                    "Secret {:?} not found in namespace {ns}: create it with the tenant's API key{} or fix spec.apiKeySecretRef.name",
                    r.name,
                    r.key.as_ref().map(|k| format!(" under key {k:?}")).unwrap_or_default()
                ),
            )),
            (Some(r), SecretView::Found(Some(s))) => match key_count(s, r.key.as_deref()) {
                Ok(n) => Ok((format!("Secret {:?} holds {n} API key(s)", r.name), Some(n as i32))),
                Err(why) => Err((
                    if r.key.is_some() {
                        reason::KEY_NOT_FOUND
                    } else {
                        reasons::NO_KEYS
                    },
                    format!(
                        "Secret {:?} {why}: add the API key to the Secret or fix spec.apiKeySecretRef",
                        r.name
                    ),
                )),
            },
        };
    status.api_keys = resolved.as_ref().ok().and_then(|(_, n)| *n);
    let ok = accepted.is_ok() && resolved.is_ok();
    let ready_msg = if ok {
        match status.api_keys {
            Some(n) => format!("tenant {header:?} is identified by {n} API key(s)"),
            None => format!("tenant {header:?} is identified by its header value"),
        }
    } else {
        "not in effect until Accepted and ResolvedRefs are True".to_owned()
    };
    let ready_reason = match (&accepted, &resolved) {
        (_, Err((r, _))) => r,
        (Err((r, _)), Ok(_)) => r,
        (Ok(()), Ok(_)) => reason::READY,
    };
    conditions::set(
        &mut status.conditions,
        match (accepted, capped) {
            (Ok(()), None) => conditions::new(
                ACCEPTED,
                true,
                reason::ACCEPTED,
                "spec is valid",
                gen,
                now.clone(),
            ),
            (Ok(()), Some(cap)) => conditions::new(
                ACCEPTED,
                true,
                reason::PRIORITY_CAPPED,
                format!(
                    "spec.priority {} is above the routers' cap for namespace {ns} (--max-tenant-priority, router.maxTenantPriority): the tenant is served at priority {cap}",
                    tenant.spec.priority
                ),
                gen,
                now.clone(),
            ),
            (Err((r, m)), _) => conditions::new(ACCEPTED, false, r, m, gen, now.clone()),
        },
    );
    conditions::set(
        &mut status.conditions,
        match resolved {
            Ok((m, _)) => {
                conditions::new(RESOLVED_REFS, true, reason::RESOLVED, m, gen, now.clone())
            }
            Err((r, m)) => conditions::new(RESOLVED_REFS, false, r, m, gen, now.clone()),
        },
    );
    conditions::set(
        &mut status.conditions,
        conditions::new(READY, ok, ready_reason, ready_msg, gen, now.clone()),
    );
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::desired::tests::pool;
    use k8s_openapi::ByteString;
    use std::collections::BTreeMap;
    use warmpath_api::conditions::{get, is_true};
    use warmpath_api::v1::{InferenceReplicaSpec, SecretKeyRef, TenantLimits, TenantPolicySpec};

    const ROOT: &str = "/etc/warmpath/tokenizers";

    fn open() -> ReplicaNetworks {
        ReplicaNetworks::default()
    }

    fn now() -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(1_000).unwrap())
    }
    fn later() -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(2_000).unwrap())
    }

    fn replica(pool: &str, models: Option<Vec<&str>>) -> InferenceReplica {
        let mut r = InferenceReplica::new(
            "r",
            InferenceReplicaSpec {
                pool: pool.into(),
                address: "10.0.0.1".into(),
                port: 8000,
                models: models.map(|m| m.into_iter().map(str::to_owned).collect()),
                role: None,
                engine: None,
                pod: None,
            },
        );
        r.metadata.namespace = Some("ns".into());
        r.metadata.generation = Some(3);
        r
    }

    #[test]
    fn pool_ready_with_replicas_and_says_what_to_fix_without() {
        let p = pool("llama", &[("app", "vllm")], Some(8000));
        let s = pool_status(
            &p,
            PodCounts {
                selected: 3,
                ready: 3,
            },
            3,
            &[],
            &[],
            Path::new(ROOT),
            &now(),
        );
        assert_eq!((s.replicas, s.ready_replicas), (3, 3));
        assert_eq!(s.observed_generation, Some(1));
        assert!(is_true(&s.conditions, READY));
        assert!(is_true(&s.conditions, ACCEPTED));
        assert!(is_true(&s.conditions, RESOLVED_REFS));

        let none = pool_status(
            &p,
            PodCounts::default(),
            0,
            &[],
            &[],
            Path::new(ROOT),
            &now(),
        );
        let rr = get(&none.conditions, RESOLVED_REFS).unwrap();
        assert_eq!(rr.status, "False");
        assert!(rr.message.contains("app=vllm"), "{}", rr.message);
        assert!(!is_true(&none.conditions, READY));

        let mut bad = pool("llama", &[("app", "vllm")], None);
        bad.status = Some(s.clone());
        let b = pool_status(
            &bad,
            PodCounts {
                selected: 1,
                ready: 1,
            },
            0,
            &[],
            &[],
            Path::new(ROOT),
            &later(),
        );
        let acc = get(&b.conditions, ACCEPTED).unwrap();
        assert_eq!(acc.status, "False");
        assert!(acc.message.contains("targetPort"));
        assert_eq!(acc.last_transition_time, later());

        // Hand-written replicas count; rejected ones are not ready.
        let hand = replica("static", None);
        let h = pool_status(
            &pool("static", &[], None),
            PodCounts::default(),
            0,
            &[(&hand, true), (&hand, false)],
            &[],
            Path::new(ROOT),
            &now(),
        );
        assert_eq!((h.replicas, h.ready_replicas), (2, 1));
        assert!(is_true(&h.conditions, RESOLVED_REFS));
    }

    #[test]
    fn unchanged_inputs_give_an_unchanged_status() {
        let mut p = pool("llama", &[("app", "vllm")], Some(8000));
        let s1 = pool_status(
            &p,
            PodCounts {
                selected: 2,
                ready: 2,
            },
            2,
            &[],
            &[],
            Path::new(ROOT),
            &now(),
        );
        p.status = Some(s1.clone());
        let s2 = pool_status(
            &p,
            PodCounts {
                selected: 2,
                ready: 2,
            },
            2,
            &[],
            &[],
            Path::new(ROOT),
            &later(),
        );
        assert_eq!(s1, s2);
    }

    #[test]
    fn replica_conditions_follow_the_pool() {
        let p = pool("llama", &[("app", "vllm")], Some(8000));
        let ok = replica_status(
            &replica("llama", Some(vec!["tiny"])),
            Some(&p),
            &open(),
            &now(),
        );
        assert!(is_true(&ok.conditions, ACCEPTED));
        assert!(is_true(&ok.conditions, RESOLVED_REFS));
        assert!(is_true(&ok.conditions, READY));
        assert_eq!(ok.observed_generation, Some(3));

        let foreign = replica_status(
            &replica("llama", Some(vec!["big"])),
            Some(&p),
            &open(),
            &now(),
        );
        let acc = get(&foreign.conditions, ACCEPTED).unwrap();
        assert_eq!(acc.status, "False");
        assert!(acc.message.contains("big"));
        assert!(!is_true(&foreign.conditions, READY));

        let missing = replica_status(&replica("ghost", None), None, &open(), &now());
        let rr = get(&missing.conditions, RESOLVED_REFS).unwrap();
        assert_eq!(rr.status, "False");
        assert!(rr.message.contains("\"ghost\""), "{}", rr.message);
        assert!(rr.message.contains("namespace ns"));
        assert!(!replica_accepted(&replica("ghost", None), None, &open()));
    }

    /// A replica at an address the routers refuse is not accepted, and says why.
    #[test]
    fn a_replica_outside_the_allowed_networks_is_not_accepted() {
        let p = pool("llama", &[("app", "vllm")], Some(8000));
        let mut r = replica("llama", None);
        r.spec.address = "169.254.169.254".into();
        let s = replica_status(&r, Some(&p), &open(), &now());
        let acc = get(&s.conditions, ACCEPTED).unwrap();
        assert_eq!(
            (acc.status.as_str(), acc.reason.as_str()),
            ("False", reason::ADDRESS_NOT_ALLOWED)
        );
        assert!(acc.message.contains("169.254.169.254"), "{}", acc.message);
        assert_eq!(
            get(&s.conditions, READY).unwrap().reason,
            reason::ADDRESS_NOT_ALLOWED
        );
        assert!(!replica_accepted(&r, Some(&p), &open()));
        let narrow = ReplicaNetworks {
            allow: vec!["192.168.0.0/16".parse().unwrap()],
            hostnames: false,
        };
        assert!(!replica_accepted(
            &replica("llama", None),
            Some(&p),
            &narrow
        ));
        assert!(replica_accepted(&replica("llama", None), Some(&p), &open()));
    }

    /// A pool that names another namespace's model says which and whose; with none of its
    /// models its own it is not ready. Tokenizer paths outside the root are reported.
    #[test]
    fn pool_conditions_report_claimed_models_and_refused_tokenizers() {
        let mut p = pool("grab", &[("app", "vllm")], Some(8000));
        p.spec.models = vec!["llama".into(), "own".into()];
        let counts = PodCounts {
            selected: 1,
            ready: 1,
        };
        let claimed = [("llama".to_owned(), "zeta".to_owned())];
        let s = pool_status(&p, counts, 1, &[], &claimed, Path::new(ROOT), &now());
        let c = get(&s.conditions, MODELS_CLAIMED).unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", reason::MODEL_CLAIMED_BY_NAMESPACE)
        );
        assert!(
            c.message.contains("\"llama\" (namespace zeta)"),
            "{}",
            c.message
        );
        assert!(
            is_true(&s.conditions, READY),
            "it still serves its own model"
        );
        assert!(get(&s.conditions, TOKENIZER_ALLOWED).is_none());

        p.spec.models = vec!["llama".into()];
        let s = pool_status(&p, counts, 1, &[], &claimed, Path::new(ROOT), &now());
        let ready = get(&s.conditions, READY).unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", reason::MODEL_CLAIMED_BY_NAMESPACE)
        );
        let s = pool_status(&p, counts, 1, &[], &[], Path::new(ROOT), &now());
        assert!(is_true(&s.conditions, MODELS_CLAIMED));
        assert!(is_true(&s.conditions, READY));

        p.spec.kv_events = serde_json::from_value(serde_json::json!({
            "port": 5557, "tokenizer": "/dev/zero",
        }))
        .unwrap();
        let s = pool_status(&p, counts, 1, &[], &[], Path::new(ROOT), &now());
        let t = get(&s.conditions, TOKENIZER_ALLOWED).unwrap();
        assert_eq!(
            (t.status.as_str(), t.reason.as_str()),
            ("False", reason::OUTSIDE_TOKENIZER_ROOT)
        );
        assert!(t.message.contains("kvEvents.tokenizer"), "{}", t.message);
        p.spec.kv_events = serde_json::from_value(serde_json::json!({
            "port": 5557, "tokenizer": "/etc/warmpath/tokenizers/llama/tokenizer.json",
        }))
        .unwrap();
        p.status = Some(s);
        let s = pool_status(&p, counts, 1, &[], &[], Path::new(ROOT), &now());
        assert!(is_true(&s.conditions, TOKENIZER_ALLOWED));
        p.spec.kv_events = None;
        p.status = Some(s);
        let s = pool_status(&p, counts, 1, &[], &[], Path::new(ROOT), &now());
        assert!(
            get(&s.conditions, TOKENIZER_ALLOWED).is_none(),
            "no paths, no condition"
        );
    }

    /// A priority above the cap is reported as lowered; a header value another policy claimed
    /// first makes the policy unused.
    #[test]
    fn tenant_conditions_report_capped_priorities_and_claimed_headers() {
        let mut t = tenant(None);
        t.spec.priority = 1000;
        let s = tenant_status(
            &t,
            SecretView::NotReadable,
            &Boundaries::default(),
            None,
            &now(),
        );
        let acc = get(&s.conditions, ACCEPTED).unwrap();
        assert_eq!(
            (acc.status.as_str(), acc.reason.as_str()),
            ("True", reason::PRIORITY_CAPPED)
        );
        assert!(acc.message.contains("priority 0"), "{}", acc.message);
        assert!(is_true(&s.conditions, READY));
        let own = Boundaries {
            own_namespace: Some("ns".into()),
            ..Default::default()
        };
        let s = tenant_status(&t, SecretView::NotReadable, &own, None, &now());
        assert_eq!(
            get(&s.conditions, ACCEPTED).unwrap().reason,
            reason::ACCEPTED
        );

        let s = tenant_status(
            &tenant(None),
            SecretView::NotReadable,
            &Boundaries::default(),
            Some("victim/acme"),
            &now(),
        );
        let acc = get(&s.conditions, ACCEPTED).unwrap();
        assert_eq!(
            (acc.status.as_str(), acc.reason.as_str()),
            ("False", reason::HEADER_CLAIMED)
        );
        assert!(acc.message.contains("victim/acme"), "{}", acc.message);
        assert!(!is_true(&s.conditions, READY));
        assert_eq!(
            get(&s.conditions, READY).unwrap().reason,
            reason::HEADER_CLAIMED
        );
    }

    fn tenant(secret: Option<(&str, Option<&str>)>) -> TenantPolicy {
        let mut t = TenantPolicy::new(
            "acme",
            TenantPolicySpec {
                header: None,
                api_key_secret_ref: secret.map(|(name, key)| SecretKeyRef {
                    name: name.into(),
                    key: key.map(str::to_owned),
                }),
                weight: 1,
                priority: 0,
                limits: None,
                sheddable: false,
            },
        );
        t.metadata.namespace = Some("ns".into());
        t
    }

    fn secret(data: &[(&str, &str)]) -> Secret {
        Secret {
            data: Some(
                data.iter()
                    .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..Default::default()
        }
    }

    #[test]
    fn tenant_secret_checks() {
        let plain = tenant_status(
            &tenant(None),
            SecretView::NotReadable,
            &Boundaries::default(),
            None,
            &now(),
        );
        assert!(is_true(&plain.conditions, READY));
        assert_eq!(plain.api_keys, None);

        let t = tenant(Some(("keys", Some("api-key"))));
        let missing = tenant_status(
            &t,
            SecretView::Found(None),
            &Boundaries::default(),
            None,
            &now(),
        );
        let rr = get(&missing.conditions, RESOLVED_REFS).unwrap();
        assert_eq!(
            (rr.status.as_str(), rr.reason.as_str()),
            ("False", reason::SECRET_NOT_FOUND)
        );
        assert!(
            rr.message.contains("\"keys\"") && rr.message.contains("api-key"),
            "{}",
            rr.message
        );
        assert!(!is_true(&missing.conditions, READY));

        let s = secret(&[("other", "x")]);
        let nokey = tenant_status(
            &t,
            SecretView::Found(Some(&s)),
            &Boundaries::default(),
            None,
            &now(),
        );
        let rr = get(&nokey.conditions, RESOLVED_REFS).unwrap();
        assert_eq!(rr.reason, reason::KEY_NOT_FOUND);
        assert!(rr.message.contains("other"), "{}", rr.message);

        let s = secret(&[("api-key", "sk-1")]);
        let good = tenant_status(
            &t,
            SecretView::Found(Some(&s)),
            &Boundaries::default(),
            None,
            &now(),
        );
        assert!(is_true(&good.conditions, RESOLVED_REFS));
        assert!(is_true(&good.conditions, READY));
        assert_eq!(good.api_keys, Some(1));

        let all = tenant(Some(("keys", None)));
        let s = secret(&[("a", "1"), ("b", "2"), ("c", "")]);
        assert_eq!(
            tenant_status(
                &all,
                SecretView::Found(Some(&s)),
                &Boundaries::default(),
                None,
                &now()
            )
            .api_keys,
            Some(2)
        );
        let empty = tenant_status(
            &all,
            SecretView::Found(Some(&secret(&[]))),
            &Boundaries::default(),
            None,
            &now(),
        );
        assert_eq!(
            get(&empty.conditions, RESOLVED_REFS).unwrap().reason,
            reasons::NO_KEYS
        );

        let hidden = tenant_status(
            &t,
            SecretView::NotReadable,
            &Boundaries::default(),
            None,
            &now(),
        );
        let rr = get(&hidden.conditions, RESOLVED_REFS).unwrap();
        assert!(rr.message.contains("secretNamespaces"), "{}", rr.message);

        let mut limited = tenant(None);
        limited.spec.limits = Some(TenantLimits {
            burst: Some(1),
            requests_per_second: Some(5),
            ..Default::default()
        });
        let l = tenant_status(
            &limited,
            SecretView::NotReadable,
            &Boundaries::default(),
            None,
            &now(),
        );
        assert!(!is_true(&l.conditions, ACCEPTED));
        assert!(!is_true(&l.conditions, READY));
    }
}
