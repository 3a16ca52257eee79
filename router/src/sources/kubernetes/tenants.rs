//! From the cluster's TenantPolicies and the Secrets holding their API keys to the router's
//! tenant list: a pure function of the objects as the reflectors hold them now, like
//! [`super::translate`] for pools, so a Secret rotated or deleted while a watch was down is
//! picked up by the relist without incremental state.
//!
//! What one namespace's policies can do to another's is bounded
//! ([`warmpath_api::boundaries`]):
//! - A tenant is named `namespace/name` (bare `name` in the router's own namespace), and that
//!   is also its header value unless `spec.header` says otherwise: policies of the same name in
//!   two namespaces are two tenants, and neither shadows the other.
//! - An explicit header value belongs to the policy that claimed it first (creation time); a
//!   later policy naming it is not routed ([`Problem::HeaderTaken`]). A value with a `/` must
//!   start with the policy's own namespace, so no policy can take another namespace's default.
//! - An API key belongs to the policy whose Secret held it first; a later policy loses that key
//!   only ([`Problem::KeyTaken`]), so no policy can void another's keys by copying them.
//! - Priorities above the operator's cap are lowered to it ([`Problem::PriorityCapped`]).
//!
//! What is left out is returned as [`Problem`]s for the caller to log; none of them ever holds
//! an API key's value (only the Secret's and the data key's names).

use crate::config::{is_token, ApiKey, KeyDigest, KeyShape, TenantPolicyConfig};
use k8s_openapi::api::core::v1::Secret;
use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;
use warmpath_api::boundaries::{header_problem, taken_claims, Boundaries};
use warmpath_api::v1::{TenantLimits, TenantPolicy};
use warmpath_flow::TenantLimitsConfig;

/// Something about a TenantPolicy the router could not use as written. `policy` and `secret`
/// are `namespace/name`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Problem {
    /// Its header value is one an earlier TenantPolicy (`holder`) claimed; not routed.
    HeaderTaken {
        policy: String,
        header: String,
        holder: String,
    },
    /// An API key of its Secret is one an earlier TenantPolicy (`holder`) holds; that key is
    /// left out of this policy.
    KeyTaken { policy: String, holder: String },
    /// Its priority is above the operator's cap and was lowered to it.
    PriorityCapped {
        policy: String,
        asked: i32,
        cap: i32,
    },
    /// The referenced Secret does not exist: the tenant has no keys.
    SecretMissing { policy: String, secret: String },
    /// The referenced Secret is in a namespace whose Secrets the router does not read: the
    /// tenant has no keys.
    SecretNotReadable { policy: String, secret: String },
    /// The Secret exists but has no such data key: the tenant has no keys.
    KeyMissing {
        policy: String,
        secret: String,
        key: String,
    },
    /// One value of the Secret is not a usable API key and was left out; `entry` is its data
    /// key (the name, never the value).
    BadKey {
        policy: String,
        secret: String,
        entry: String,
        why: KeyShape,
    },
    /// The policy's settings break a rule the router enforces (the CRD's schema normally
    /// prevents it; an object stored under an older schema may not): not routed.
    Invalid { policy: String, message: String },
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::HeaderTaken {
                policy,
                header,
                holder,
            } => write!(
                f,
                "TenantPolicy {policy} skipped: its header value {header:?} belongs to TenantPolicy {holder}, which claimed it first"
            ),
            Problem::KeyTaken { policy, holder } => write!(
                f,
                "TenantPolicy {policy}: an API key in its Secret is already TenantPolicy {holder}'s (claimed first); that key is left out"
            ),
            Problem::PriorityCapped { policy, asked, cap } => write!(
                f,
                "TenantPolicy {policy}: spec.priority {asked} is above the router's --max-tenant-priority; it is served at {cap}"
            ),
            Problem::SecretMissing { policy, secret } => write!(
                f,
                "TenantPolicy {policy}: Secret {secret} not found; the tenant has no API keys until it exists"
            ),
            Problem::SecretNotReadable { policy, secret } => write!(
                f,
                "TenantPolicy {policy}: Secret {secret} is in a namespace whose Secrets the router does not read (--secret-namespaces); the tenant has no API keys"
            ),
            Problem::KeyMissing {
                policy,
                secret,
                key,
            } => write!(
                f,
                "TenantPolicy {policy}: Secret {secret} has no key {key:?}; the tenant has no API keys until it does"
            ),
            Problem::BadKey {
                policy,
                secret,
                entry,
                why,
            } => write!(
                f,
                "TenantPolicy {policy}: the value of {entry:?} in Secret {secret} {why}; it is not accepted as an API key"
            ),
            Problem::Invalid { policy, message } => {
                write!(f, "TenantPolicy {policy} skipped: {message}")
            }
        }
    }
}

/// The tenants to route and what was left out.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Found {
    pub tenants: Vec<TenantPolicyConfig>,
    pub problems: Vec<Problem>,
}

/// The flow core's limits from a TenantPolicy's (rates as numbers).
pub fn limits(l: &TenantLimits) -> TenantLimitsConfig {
    TenantLimitsConfig {
        requests_per_second: l.requests_per_second.map(f64::from),
        burst: l.burst.map(f64::from),
        tokens_per_second: l.tokens_per_second.map(f64::from),
        token_burst: l.token_burst.map(f64::from),
        max_concurrent_requests: l.max_concurrent_requests,
    }
}

/// The flow core's messages name its own (snake_case) fields; a TenantPolicy's author knows
/// them by the CRD's names.
fn camel_case_fields(message: &str) -> String {
    [
        ("requests_per_second", "requestsPerSecond"),
        ("tokens_per_second", "tokensPerSecond"),
        ("token_burst", "tokenBurst"),
        ("max_concurrent_requests", "maxConcurrentRequests"),
    ]
    .iter()
    .fold(message.to_owned(), |m, (snake, camel)| {
        m.replace(snake, camel)
    })
}

/// What the router keeps of one value of a watched Secret, in place of the value: its
/// [`KeyDigest`] (32 bytes) when it is a usable API key once trimmed, one byte naming its
/// [`KeyShape`] when it is not, nothing when it is empty. Done by the watch as each Secret
/// arrives ([`seal_secret`]), so no value outlives its decoding.
fn seal(value: &[u8]) -> Vec<u8> {
    let Ok(text) = std::str::from_utf8(value) else {
        return vec![shape_code(KeyShape::NotUtf8)];
    };
    // Trailing newlines are what `echo` into a file and `kubectl create secret
    // --from-file` leave behind; they are not part of the key.
    let text = text.trim();
    if text.is_empty() {
        return Vec::new();
    }
    let key = ApiKey::new(text);
    match key.shape() {
        Some(shape) => vec![shape_code(shape)],
        None => key.digest().to_bytes().to_vec(),
    }
}

fn shape_code(shape: KeyShape) -> u8 {
    match shape {
        KeyShape::NotUtf8 => 0,
        KeyShape::NotVisibleAscii => 1,
        KeyShape::TooShort => 2,
    }
}

/// One value as [`seal`] left it.
enum Sealed {
    Empty,
    Key(ApiKey),
    Bad(KeyShape),
}

fn unseal(bytes: &[u8]) -> Sealed {
    match bytes {
        [] => Sealed::Empty,
        [0] => Sealed::Bad(KeyShape::NotUtf8),
        [1] => Sealed::Bad(KeyShape::NotVisibleAscii),
        [2] => Sealed::Bad(KeyShape::TooShort),
        // Anything not sealed here is not a key either.
        _ => KeyDigest::from_bytes(bytes)
            .map(|d| Sealed::Key(ApiKey::from_digest(d)))
            .unwrap_or(Sealed::Bad(KeyShape::NotVisibleAscii)),
    }
}

/// Replaces every value of `secret` by what [`seal`] keeps of it; `string_data` (write-only,
/// never served) goes.
pub fn seal_secret(secret: &mut Secret) {
    secret.string_data = None;
    for value in secret.data.iter_mut().flat_map(|d| d.values_mut()) {
        value.0 = seal(&value.0);
    }
}

/// The API keys in `secret` (sealed, see [`seal_secret`]) per `key` (one data key, or all of
/// them in key order), without duplicates; values that are not keys are reported.
fn keys_of(
    secret: &Secret,
    key: Option<&str>,
    policy: &str,
    secret_name: &str,
    problems: &mut Vec<Problem>,
) -> Vec<ApiKey> {
    let empty = Default::default();
    let data = secret.data.as_ref().unwrap_or(&empty);
    let entries: Vec<(&String, &k8s_openapi::ByteString)> = match key {
        Some(k) => match data.get_key_value(k) {
            Some(entry) => vec![entry],
            None => {
                problems.push(Problem::KeyMissing {
                    policy: policy.to_owned(),
                    secret: secret_name.to_owned(),
                    key: k.to_owned(),
                });
                return Vec::new();
            }
        },
        None => data.iter().collect(),
    };
    let mut keys: Vec<ApiKey> = Vec::new();
    for (entry, value) in entries {
        match unseal(&value.0) {
            // An empty value is a placeholder, not a mistake worth a warning (the controller
            // reports a Secret with no keys in the policy's status).
            Sealed::Empty => {}
            Sealed::Bad(why) => problems.push(Problem::BadKey {
                policy: policy.to_owned(),
                secret: secret_name.to_owned(),
                entry: entry.clone(),
                why,
            }),
            Sealed::Key(k) => {
                if !keys.contains(&k) {
                    keys.push(k);
                }
            }
        }
    }
    keys
}

/// A Secret looked up by namespace and name.
pub enum SecretLookup {
    Found(Arc<Secret>),
    Missing,
    /// In a namespace whose Secrets the router does not watch.
    NotReadable,
}

/// The router's settings for one TenantPolicy, with its keys from `secret` (looked up by
/// namespace and name), named and capped per `boundaries`. `Err` when the policy cannot be
/// routed at all.
pub fn tenant(
    policy: &TenantPolicy,
    secret: impl Fn(&str, &str) -> SecretLookup,
    boundaries: &Boundaries,
    problems: &mut Vec<Problem>,
) -> Result<TenantPolicyConfig, Problem> {
    let ns = policy.metadata.namespace.as_deref().unwrap_or_default();
    let name = policy.metadata.name.as_deref().unwrap_or_default();
    let id = format!("{ns}/{name}");
    let invalid = |message: String| Problem::Invalid {
        policy: id.clone(),
        message,
    };
    let spec = &policy.spec;
    if let Some(h) = &spec.header {
        if !is_token(h) {
            return Err(invalid(
                "spec.header must be printable ASCII without spaces".to_owned(),
            ));
        }
        if let Some(problem) = header_problem(ns, h) {
            return Err(invalid(problem));
        }
    }
    if !(1..=1000).contains(&spec.weight) {
        return Err(invalid("spec.weight must be between 1 and 1000".to_owned()));
    }
    if !(-1000..=1000).contains(&spec.priority) {
        return Err(invalid(
            "spec.priority must be between -1000 and 1000".to_owned(),
        ));
    }
    let limits_config = spec.limits.as_ref().map(limits).unwrap_or_default();
    limits_config.validate().map_err(|e| {
        invalid(format!(
            "spec.limits: {}",
            camel_case_fields(&e.to_string())
        ))
    })?;
    let api_keys = match &spec.api_key_secret_ref {
        None => Vec::new(),
        Some(r) => {
            let secret_name = format!("{ns}/{}", r.name);
            match secret(ns, &r.name) {
                SecretLookup::Found(s) => {
                    keys_of(&s, r.key.as_deref(), &id, &secret_name, problems)
                }
                SecretLookup::Missing => {
                    problems.push(Problem::SecretMissing {
                        policy: id.clone(),
                        secret: secret_name,
                    });
                    Vec::new()
                }
                SecretLookup::NotReadable => {
                    problems.push(Problem::SecretNotReadable {
                        policy: id.clone(),
                        secret: secret_name,
                    });
                    Vec::new()
                }
            }
        }
    };
    let priority = boundaries
        .capped_priority(ns, spec.priority)
        .unwrap_or_else(|cap| {
            problems.push(Problem::PriorityCapped {
                policy: id.clone(),
                asked: spec.priority,
                cap,
            });
            cap
        });
    Ok(TenantPolicyConfig {
        name: boundaries.tenant_name(ns, name),
        header: spec.header.clone(),
        api_keys,
        api_keys_file: None,
        weight: spec.weight,
        priority,
        sheddable: spec.sheddable,
        max_queued_requests: spec
            .limits
            .as_ref()
            .and_then(|l| l.max_queued_requests)
            .map(|n| n as usize),
        limits: limits_config,
    })
}

/// Every routable tenant, in (namespace, name) order, with its API keys from `secret`, header
/// values and keys going to the policy that claimed them first (see the module doc). Policies
/// being deleted are left out (their tenant is going away, as a deleted pool's replicas are).
pub fn discovered<'a>(
    policies: impl IntoIterator<Item = &'a TenantPolicy>,
    secret: impl Fn(&str, &str) -> SecretLookup,
    boundaries: &Boundaries,
) -> Found {
    let mut sorted: Vec<&TenantPolicy> = policies
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none() && p.metadata.name.is_some())
        .collect();
    let id = |p: &TenantPolicy| {
        format!(
            "{}/{}",
            p.metadata.namespace.as_deref().unwrap_or_default(),
            p.metadata.name.as_deref().unwrap_or_default()
        )
    };
    sorted.sort_by_key(|p| id(p));
    let mut found = Found::default();
    let mut routed: Vec<(&TenantPolicy, TenantPolicyConfig)> = Vec::new();
    for policy in sorted {
        match tenant(policy, &secret, boundaries, &mut found.problems) {
            Ok(t) => routed.push((policy, t)),
            Err(p) => found.problems.push(p),
        }
    }
    let headers: Vec<_> = routed
        .iter()
        .map(|(p, t)| (&p.metadata, vec![t.header_value().to_owned()]))
        .collect();
    let lost_headers = taken_claims(&headers);
    let mut kept = Vec::new();
    for (i, lost) in lost_headers.into_iter().enumerate() {
        match lost.into_iter().next() {
            Some((header, holder)) => found.problems.push(Problem::HeaderTaken {
                policy: id(routed[i].0),
                header,
                holder: id(routed[holder].0),
            }),
            None => kept.push(routed[i].clone()),
        }
    }
    let keys: Vec<_> = kept
        .iter()
        .map(|(p, t)| (&p.metadata, t.api_keys.clone()))
        .collect();
    let lost_keys = taken_claims(&keys);
    for (i, lost) in lost_keys.into_iter().enumerate() {
        let (policy, mut tenant) = kept[i].clone();
        for (key, holder) in lost {
            tenant.api_keys.retain(|k| *k != key);
            found.problems.push(Problem::KeyTaken {
                policy: id(policy),
                holder: id(kept[holder].0),
            });
        }
        found.tenants.push(tenant);
    }
    found.problems.dedup();
    found
}

/// Log the problems not already logged for the previous list (`last`), then remember these:
/// a policy that stays broken is reported once, not at every change elsewhere in the cluster.
/// Returns how many were logged.
pub fn warn_new(problems: &[Problem], last: &mut BTreeSet<Problem>) -> usize {
    let now: BTreeSet<Problem> = problems.iter().cloned().collect();
    let mut logged = 0;
    for p in now.difference(last) {
        tracing::warn!("{p}");
        logged += 1;
    }
    *last = now;
    logged
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use kube::api::ObjectMeta;
    use std::collections::{BTreeMap, HashMap};
    use warmpath_api::v1::TenantPolicySpec;

    fn policy(ns: &str, name: &str, spec: serde_json::Value) -> TenantPolicy {
        let spec: TenantPolicySpec = serde_json::from_value(spec).unwrap();
        TenantPolicy {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                ..Default::default()
            },
            spec,
            status: None,
        }
    }

    /// A Secret as the watch keeps it (sealed).
    fn secret(data: &[(&str, &[u8])]) -> Arc<Secret> {
        let mut s = Secret {
            data: Some(
                data.iter()
                    .map(|(k, v)| (k.to_string(), ByteString(v.to_vec())))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..Default::default()
        };
        seal_secret(&mut s);
        Arc::new(s)
    }

    type Secrets = HashMap<(String, String), Arc<Secret>>;

    /// Secrets in `secrets`; namespace `unread` is one the router does not watch.
    fn lookup(secrets: &Secrets) -> impl Fn(&str, &str) -> SecretLookup + '_ {
        |ns, name| match secrets.get(&(ns.to_owned(), name.to_owned())) {
            _ if ns == "unread" => SecretLookup::NotReadable,
            Some(s) => SecretLookup::Found(s.clone()),
            None => SecretLookup::Missing,
        }
    }

    fn secrets(list: &[(&str, &str, Arc<Secret>)]) -> Secrets {
        list.iter()
            .map(|(ns, n, s)| ((ns.to_string(), n.to_string()), s.clone()))
            .collect()
    }

    #[test]
    fn a_policy_becomes_a_tenant_with_its_settings() {
        let p = policy(
            "ml",
            "acme",
            serde_json::json!({
                "header": "acme-corp",
                "weight": 4,
                "priority": -10,
                "sheddable": true,
                "limits": {
                    "requestsPerSecond": 20, "burst": 40, "tokensPerSecond": 5000,
                    "tokenBurst": 20000, "maxConcurrentRequests": 8, "maxQueuedRequests": 100,
                },
            }),
        );
        let found = discovered([&p], |_, _| SecretLookup::Missing, &Boundaries::default());
        assert!(found.problems.is_empty(), "{:?}", found.problems);
        assert_eq!(
            found.tenants,
            [TenantPolicyConfig {
                name: "ml/acme".into(),
                header: Some("acme-corp".into()),
                api_keys: Vec::new(),
                api_keys_file: None,
                weight: 4,
                priority: -10,
                sheddable: true,
                max_queued_requests: Some(100),
                limits: TenantLimitsConfig {
                    requests_per_second: Some(20.0),
                    burst: Some(40.0),
                    tokens_per_second: Some(5000.0),
                    token_burst: Some(20000.0),
                    max_concurrent_requests: Some(8),
                },
            }]
        );
        // Defaults: weight 1, no limits, the name as header value.
        let plain = discovered(
            [&policy("ml", "plain", serde_json::json!({}))],
            |_, _| SecretLookup::Missing,
            &Boundaries::default(),
        );
        let t = &plain.tenants[0];
        assert_eq!((t.weight, t.priority, t.sheddable), (1, 0, false));
        assert_eq!(t.header_value(), "ml/plain", "scoped to its namespace");
        assert!(t.limits.is_unlimited() && t.max_queued_requests.is_none());
    }

    #[test]
    fn keys_come_from_one_data_key_or_every_value_trimmed() {
        let s = secrets(&[(
            "ml",
            "keys",
            secret(&[
                ("primary", b"sk-primary-0001\n"),
                ("secondary", b"  sk-secondary-02  "),
                ("again", b"sk-primary-0001"),
                ("blank", b"\n"),
            ]),
        )]);
        let one = policy(
            "ml",
            "one",
            serde_json::json!({"apiKeySecretRef": {"name": "keys", "key": "primary"}}),
        );
        let all = policy(
            "ml",
            "all",
            serde_json::json!({"apiKeySecretRef": {"name": "keys"}}),
        );
        let found = discovered([&one], lookup(&s), &Boundaries::default());
        assert_eq!(found.tenants[0].api_keys, ["sk-primary-0001"]);
        assert!(found.problems.is_empty(), "{:?}", found.problems);
        let found = discovered([&all], lookup(&s), &Boundaries::default());
        // Data keys in order (again, blank, primary, secondary); the repeat counted once and
        // the blank value skipped quietly.
        assert_eq!(
            found.tenants[0].api_keys,
            ["sk-primary-0001", "sk-secondary-02"]
        );
        assert!(found.problems.is_empty(), "{:?}", found.problems);
    }

    #[test]
    fn a_sealed_secret_holds_no_value() {
        let s = secret(&[
            ("primary", b"sk-primary-0001\n"),
            ("short", b"sk-1"),
            ("blank", b" "),
        ]);
        let data = s.data.as_ref().unwrap();
        let kept: Vec<&[u8]> = data.values().map(|v| v.0.as_slice()).collect();
        assert_eq!(kept.iter().map(|v| v.len()).collect::<Vec<_>>(), [0, 32, 1]);
        assert!(!kept[1].windows(4).any(|w| w == b"sk-p"), "{kept:?}");
        assert_eq!(
            ApiKey::from_digest(KeyDigest::from_bytes(kept[1]).unwrap()),
            "sk-primary-0001"
        );
    }

    #[test]
    fn bad_values_are_left_out_and_reported_without_the_key() {
        let s = secrets(&[(
            "ml",
            "keys",
            secret(&[
                ("good", b"sk-good-key-1"),
                ("short", b"sk-1"),
                ("spaced", b"sk with spaces"),
                ("binary", &[0xff, 0xfe, 0x41, 0x42, 0x43, 0x44, 0x45, 0x46]),
                ("unicode", "sk-clé-secrète".as_bytes()),
            ]),
        )]);
        let p = policy(
            "ml",
            "acme",
            serde_json::json!({"apiKeySecretRef": {"name": "keys"}}),
        );
        let found = discovered([&p], lookup(&s), &Boundaries::default());
        assert_eq!(found.tenants[0].api_keys, ["sk-good-key-1"]);
        let mut why: Vec<(&str, KeyShape)> = found
            .problems
            .iter()
            .map(|p| match p {
                Problem::BadKey { entry, why, .. } => (entry.as_str(), *why),
                other => panic!("{other:?}"),
            })
            .collect();
        why.sort();
        assert_eq!(
            why,
            [
                ("binary", KeyShape::NotUtf8),
                ("short", KeyShape::TooShort),
                ("spaced", KeyShape::NotVisibleAscii),
                ("unicode", KeyShape::NotVisibleAscii),
            ]
        );
        for p in &found.problems {
            let text = p.to_string();
            assert!(
                text.contains("ml/acme") && text.contains("ml/keys"),
                "{text}"
            );
            for secret_value in ["sk-1", "sk with spaces", "clé"] {
                assert!(!text.contains(secret_value), "{text}");
            }
        }
    }

    #[test]
    fn a_missing_secret_or_key_leaves_a_tenant_without_keys() {
        let s = secrets(&[("ml", "keys", secret(&[("other", b"sk-other-key-1")]))]);
        let missing_secret = policy(
            "ml",
            "a",
            serde_json::json!({"apiKeySecretRef": {"name": "nope"}}),
        );
        let missing_key = policy(
            "ml",
            "b",
            serde_json::json!({"apiKeySecretRef": {"name": "keys", "key": "primary"}}),
        );
        // A Secret of the same name in another namespace is not the policy's.
        let elsewhere = policy(
            "other",
            "c",
            serde_json::json!({"apiKeySecretRef": {"name": "keys"}}),
        );
        let unread = policy(
            "unread",
            "d",
            serde_json::json!({"apiKeySecretRef": {"name": "keys"}}),
        );
        let found = discovered(
            [&missing_secret, &missing_key, &elsewhere, &unread],
            lookup(&s),
            &Boundaries::default(),
        );
        assert_eq!(found.tenants.len(), 4);
        assert!(found.tenants.iter().all(|t| t.api_keys.is_empty()));
        assert_eq!(
            found.problems,
            [
                Problem::SecretMissing {
                    policy: "ml/a".into(),
                    secret: "ml/nope".into()
                },
                Problem::KeyMissing {
                    policy: "ml/b".into(),
                    secret: "ml/keys".into(),
                    key: "primary".into()
                },
                Problem::SecretMissing {
                    policy: "other/c".into(),
                    secret: "other/keys".into()
                },
                Problem::SecretNotReadable {
                    policy: "unread/d".into(),
                    secret: "unread/keys".into()
                },
            ]
        );
        assert!(found.problems[3]
            .to_string()
            .contains("--secret-namespaces"));
    }

    fn created(mut p: TenantPolicy, seconds: i64) -> TenantPolicy {
        p.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::from_second(seconds).unwrap(),
        ));
        p
    }

    /// Policies of the same name in two namespaces are two tenants; the router's own namespace
    /// keeps bare names.
    #[test]
    fn tenants_are_named_within_their_namespace() {
        let b = policy("team-b", "acme", serde_json::json!({"weight": 2}));
        let a = policy("team-a", "acme", serde_json::json!({"weight": 3}));
        let own = policy("system", "gold", serde_json::json!({}));
        let boundaries = Boundaries {
            own_namespace: Some("system".into()),
            ..Default::default()
        };
        let found = discovered([&b, &own, &a], |_, _| SecretLookup::Missing, &boundaries);
        assert!(found.problems.is_empty(), "{:?}", found.problems);
        let names: Vec<(&str, &str, u32)> = found
            .tenants
            .iter()
            .map(|t| (t.name.as_str(), t.header_value(), t.weight))
            .collect();
        assert_eq!(
            names,
            [
                ("gold", "gold", 1),
                ("team-a/acme", "team-a/acme", 3),
                ("team-b/acme", "team-b/acme", 2)
            ]
        );
    }

    /// A policy created later cannot take an earlier one's header value (it is refused) nor its
    /// API keys (it loses those keys, keeps its own), whatever its namespace sorts as; a value
    /// of another namespace's form is refused outright.
    #[test]
    fn header_values_and_keys_belong_to_the_policy_that_claimed_them_first() {
        let s = secrets(&[
            ("victim", "keys", secret(&[("k", b"sk-victim-key-1")])),
            (
                "attacker",
                "keys",
                secret(&[("a", b"sk-victim-key-1"), ("b", b"sk-attacker-own")]),
            ),
        ]);
        let victim = created(
            policy(
                "victim",
                "acme",
                serde_json::json!({"header": "acme", "apiKeySecretRef": {"name": "keys"}}),
            ),
            100,
        );
        let copycat = created(
            policy(
                "attacker",
                "acme",
                serde_json::json!({"apiKeySecretRef": {"name": "keys"}}),
            ),
            200,
        );
        let squatter = created(
            policy("attacker", "squat", serde_json::json!({"header": "acme"})),
            300,
        );
        let impostor = created(
            policy(
                "attacker",
                "impostor",
                serde_json::json!({"header": "victim/other"}),
            ),
            50,
        );
        let found = discovered(
            [&squatter, &copycat, &impostor, &victim],
            lookup(&s),
            &Boundaries::default(),
        );
        let tenants: Vec<(&str, &[ApiKey])> = found
            .tenants
            .iter()
            .map(|t| (t.name.as_str(), t.api_keys.as_slice()))
            .collect();
        assert_eq!(
            tenants,
            [
                ("attacker/acme", &[ApiKey::new("sk-attacker-own")][..]),
                ("victim/acme", &[ApiKey::new("sk-victim-key-1")][..]),
            ]
        );
        assert!(found.problems.contains(&Problem::KeyTaken {
            policy: "attacker/acme".into(),
            holder: "victim/acme".into()
        }));
        assert!(found.problems.contains(&Problem::HeaderTaken {
            policy: "attacker/squat".into(),
            header: "acme".into(),
            holder: "victim/acme".into()
        }));
        assert!(found.problems.iter().any(
            |p| matches!(p, Problem::Invalid { policy, .. } if policy == "attacker/impostor")
        ));
        for p in &found.problems {
            assert!(!p.to_string().contains("sk-"), "{p}");
        }
    }

    /// Priorities above the operator's cap are lowered to it (and reported), except in the
    /// router's own namespace.
    #[test]
    fn priorities_are_capped_by_the_operator() {
        let greedy = policy("team", "greedy", serde_json::json!({"priority": 1000}));
        let gold = policy("system", "gold", serde_json::json!({"priority": 900}));
        let boundaries = Boundaries {
            max_tenant_priority: 10,
            own_namespace: Some("system".into()),
            ..Default::default()
        };
        let found = discovered([&greedy, &gold], |_, _| SecretLookup::Missing, &boundaries);
        let priorities: Vec<(&str, i32)> = found
            .tenants
            .iter()
            .map(|t| (t.name.as_str(), t.priority))
            .collect();
        assert_eq!(priorities, [("gold", 900), ("team/greedy", 10)]);
        assert_eq!(
            found.problems,
            [Problem::PriorityCapped {
                policy: "team/greedy".into(),
                asked: 1000,
                cap: 10
            }]
        );
    }

    #[test]
    fn invalid_settings_and_deleted_policies_are_not_routed() {
        // What an older CRD without the CEL rule would have let through.
        let burst_alone = policy(
            "ml",
            "burst",
            serde_json::json!({"limits": {"tokenBurst": 100}}),
        );
        let heavy = policy("ml", "heavy", serde_json::json!({"weight": 5000}));
        let mut leaving = policy("ml", "leaving", serde_json::json!({}));
        leaving.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        let ok = policy("ml", "ok", serde_json::json!({}));
        let found = discovered(
            [&burst_alone, &heavy, &leaving, &ok],
            |_, _| SecretLookup::Missing,
            &Boundaries::default(),
        );
        assert_eq!(found.tenants.len(), 1);
        assert_eq!(found.tenants[0].name, "ml/ok");
        assert_eq!(found.problems.len(), 2, "{:?}", found.problems);
        assert!(matches!(
            &found.problems[0],
            Problem::Invalid { policy, message } if policy == "ml/burst" && message.contains("`tokenBurst` needs `tokensPerSecond`")
        ));
        assert!(matches!(
            &found.problems[1],
            Problem::Invalid { policy, .. } if policy == "ml/heavy"
        ));
    }

    #[test]
    fn problems_are_warned_once_until_they_change() {
        let a = Problem::SecretMissing {
            policy: "ml/a".into(),
            secret: "ml/s".into(),
        };
        let b = Problem::KeyMissing {
            policy: "ml/b".into(),
            secret: "ml/s".into(),
            key: "k".into(),
        };
        let mut last = BTreeSet::new();
        assert_eq!(warn_new(std::slice::from_ref(&a), &mut last), 1);
        assert_eq!(warn_new(std::slice::from_ref(&a), &mut last), 0);
        assert_eq!(
            warn_new(&[a.clone(), b.clone()], &mut last),
            1,
            "only b is new"
        );
        // Fixed: forgotten, so breaking it again warns again.
        assert_eq!(warn_new(std::slice::from_ref(&b), &mut last), 0);
        assert_eq!(warn_new(&[a, b], &mut last), 1);
    }
}
