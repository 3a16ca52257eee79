//! What one namespace's warmpath resources may do to another's: the rules the router applies
//! and the controller reports in status. They live here, once, so that the router leaves out
//! exactly what the controller says it leaves out.
//!
//! - **Models** belong to the namespace whose InferencePool named them first
//!   ([`model_owners`]); a later pool elsewhere serves none of them unless the operator lets
//!   its namespace share ([`Boundaries::share_models_with`]).
//! - **Replica addresses** must be IP addresses in the networks the operator allows
//!   ([`ReplicaNetworks`]); by default every address except loopback, link-local (cloud
//!   metadata services live there) and unspecified ones. A DNS name is refused unless the
//!   operator allows names: what it resolves to when the router connects is not what it
//!   resolved to when it was checked.
//! - **Tokenizer and chat-template paths** must lie under the directory the operator mounts
//!   ([`Boundaries::tokenizer_root`]); this module checks the path as written, the router
//!   also resolves links ([`lexically_under`]).
//! - **Tenants** are named within their namespace ([`tenant_name`]), a header value or an API
//!   key belongs to the policy that claimed it first ([`taken_claims`]), and a policy's
//!   priority is capped by the operator ([`Boundaries::capped_priority`]).
//!
//! "First" is the oldest object by creation time, then namespace and name in order: every
//! router replica and the controller settle the same winner, and an object created later can
//! never take what an earlier one holds.

use crate::v1::InferencePool;
use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
use std::path::{Component, Path, PathBuf};
use std::str::FromStr;

/// Where the operator mounts tokenizers and chat templates for InferencePools to name.
pub const DEFAULT_TOKENIZER_ROOT: &str = "/etc/warmpath/tokenizers";
/// The highest priority a TenantPolicy outside the router's namespace gets unless the
/// operator says otherwise: the default tenant's band (0), so no namespace can put its
/// traffic ahead of everyone else's by writing a number.
pub const DEFAULT_MAX_TENANT_PRIORITY: i32 = 0;

/// The operator's settings that bound what namespaced resources may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Boundaries {
    /// Namespaces whose pools may serve a model another namespace claimed first.
    pub share_models_with: Vec<String>,
    /// The addresses InferenceReplicas may point at.
    pub replica_networks: ReplicaNetworks,
    /// The directory tokenizer and chat-template paths must lie under.
    pub tokenizer_root: PathBuf,
    /// The highest priority a TenantPolicy outside `own_namespace` is given.
    pub max_tenant_priority: i32,
    /// The router's own namespace (the operator's): its TenantPolicies keep their bare names
    /// and their priority.
    pub own_namespace: Option<String>,
}

impl Default for Boundaries {
    fn default() -> Self {
        Self {
            share_models_with: Vec::new(),
            replica_networks: ReplicaNetworks::default(),
            tokenizer_root: PathBuf::from(DEFAULT_TOKENIZER_ROOT),
            max_tenant_priority: DEFAULT_MAX_TENANT_PRIORITY,
            own_namespace: None,
        }
    }
}

impl Boundaries {
    /// Whether `ns` may serve models another namespace claimed first.
    pub fn shares_models(&self, ns: &str) -> bool {
        self.share_models_with.iter().any(|s| s == ns)
    }

    fn is_own(&self, ns: &str) -> bool {
        self.own_namespace.as_deref() == Some(ns)
    }

    /// The priority a TenantPolicy in `ns` asking for `priority` gets: capped, except in the
    /// router's own namespace. `Err` carries the capped value when the cap applied.
    pub fn capped_priority(&self, ns: &str, priority: i32) -> Result<i32, i32> {
        if self.is_own(ns) || priority <= self.max_tenant_priority {
            Ok(priority)
        } else {
            Err(self.max_tenant_priority)
        }
    }

    /// The tenant name of TenantPolicy `ns/name` (see [`tenant_name`]).
    pub fn tenant_name(&self, ns: &str, name: &str) -> String {
        tenant_name(ns, name, self.own_namespace.as_deref())
    }
}

/// A TenantPolicy's tenant name in the router: `ns/name`, so that a policy in one namespace
/// can neither shadow nor void another namespace's tenant of the same name; bare `name` in the
/// router's own namespace (the operator's, named like the configuration file's tenants).
pub fn tenant_name(ns: &str, name: &str, own_namespace: Option<&str>) -> String {
    if own_namespace == Some(ns) {
        name.to_owned()
    } else {
        format!("{ns}/{name}")
    }
}

/// Why a TenantPolicy in `ns` may not use the explicit header value `header`, if it may not: a
/// value of the form `namespace/name` is that namespace's (the default value of its policies),
/// so a `/` must follow the policy's own namespace.
pub fn header_problem(ns: &str, header: &str) -> Option<String> {
    (header.contains('/') && !header.starts_with(&format!("{ns}/"))).then(|| {
        format!(
            "spec.header {header:?} has a `/` but does not start with this policy's namespace ({ns}/): values of the form namespace/name are each namespace's own"
        )
    })
}

/// Sort key of "first": creation time (objects without one, never from an API server, last),
/// then namespace, then name.
fn first_order(
    meta: &kube::api::ObjectMeta,
) -> (bool, Option<k8s_openapi::jiff::Timestamp>, &str, &str) {
    let created = meta.creation_timestamp.as_ref().map(|t| t.0);
    (
        created.is_none(),
        created,
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default(),
    )
}

/// Each model's owning namespace: that of the oldest pool naming it. Pools being deleted claim
/// nothing (their endpoints are going away).
pub fn model_owners<'a>(
    pools: impl IntoIterator<Item = &'a InferencePool>,
) -> HashMap<String, String> {
    let mut live: Vec<&InferencePool> = pools
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none() && p.metadata.name.is_some())
        .collect();
    live.sort_by(|a, b| first_order(&a.metadata).cmp(&first_order(&b.metadata)));
    let mut owners = HashMap::new();
    for pool in live {
        let ns = pool.metadata.namespace.clone().unwrap_or_default();
        for model in &pool.spec.models {
            owners.entry(model.clone()).or_insert_with(|| ns.clone());
        }
    }
    owners
}

/// The models of a pool in `ns` that another namespace owns, with their owner, in the order
/// given; empty when `ns` may share.
pub fn claimed_elsewhere<'m>(
    ns: &str,
    models: impl IntoIterator<Item = &'m String>,
    owners: &HashMap<String, String>,
    boundaries: &Boundaries,
) -> Vec<(String, String)> {
    if boundaries.shares_models(ns) {
        return Vec::new();
    }
    models
        .into_iter()
        .filter_map(|m| match owners.get(m) {
            Some(owner) if owner != ns => Some((m.clone(), owner.clone())),
            _ => None,
        })
        .collect()
}

/// For objects each naming some claims (header values, API keys), the claims of each that
/// belong to another: a claim belongs to the first object naming it, and a later object loses
/// only that claim, never its others. `result[i]` lists object `i`'s lost claims with the index
/// of the object holding each. Each object comes with its metadata (for the order).
pub fn taken_claims<C: Eq + std::hash::Hash + Clone>(
    objects: &[(&kube::api::ObjectMeta, Vec<C>)],
) -> Vec<Vec<(C, usize)>> {
    let mut order: Vec<usize> = (0..objects.len()).collect();
    order.sort_by(|&a, &b| first_order(objects[a].0).cmp(&first_order(objects[b].0)));
    let mut held: HashMap<&C, usize> = HashMap::new();
    let mut result = vec![Vec::new(); objects.len()];
    for i in order {
        for c in &objects[i].1 {
            match held.get(c) {
                Some(&holder) if holder != i => result[i].push((c.clone(), holder)),
                Some(_) => {}
                None => {
                    held.insert(c, i);
                }
            }
        }
    }
    result
}

/// Whether `path` as written lies under `root`: absolute, without `..` components, and
/// starting with `root`. Links are not followed (the router checks the resolved path too).
pub fn lexically_under(root: &Path, path: &Path) -> Result<(), String> {
    if !path.is_absolute() {
        return Err(format!(
            "{} is not an absolute path: name a file under {}",
            path.display(),
            root.display()
        ));
    }
    if path.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err(format!(
            "{} has `..` components: name the file under {} directly",
            path.display(),
            root.display()
        ));
    }
    if !path.starts_with(root) || path == root {
        return Err(format!(
            "{} is outside {}, the directory the router's operator mounts tokenizers in (--tokenizer-root)",
            path.display(),
            root.display()
        ));
    }
    Ok(())
}

/// An IP network (`10.0.0.0/8`, `fd00::/8`; a bare address is one host), without a dependency
/// on a network crate for the controller's sake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Network {
    addr: IpAddr,
    prefix: u8,
}

/// Why a network did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not an IP network: write an address with a prefix length, e.g. 10.0.0.0/8 or fd00::/8")]
pub struct BadNetwork(pub String);

impl FromStr for Network {
    type Err = BadNetwork;

    fn from_str(s: &str) -> Result<Self, BadNetwork> {
        let bad = || BadNetwork(s.to_owned());
        let (addr, prefix) = match s.trim().split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s.trim(), None),
        };
        let addr: IpAddr = addr.parse().map_err(|_| bad())?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(p) => p.parse::<u8>().ok().filter(|p| *p <= max).ok_or_else(bad)?,
            None => max,
        };
        Ok(Network { addr, prefix })
    }
}

impl fmt::Display for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

impl Network {
    /// Whether `ip` is in this network (IPv4 and IPv6 never match each other).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let bits = |a: IpAddr| -> (u128, u8) {
            match a {
                IpAddr::V4(v4) => (u128::from(u32::from(v4)) << 96, 32),
                IpAddr::V6(v6) => (u128::from(v6), 128),
            }
        };
        let ((net, width), (host, host_width)) = (bits(self.addr), bits(ip));
        if width != host_width {
            return false;
        }
        let prefix = u32::from(self.prefix);
        let mask = if prefix == 0 {
            0
        } else {
            u128::MAX << (128 - prefix)
        };
        net & mask == host & mask
    }
}

/// The networks refused by default: an InferenceReplica pointing there would have the router
/// call itself or its node (loopback), the cloud's metadata service (link-local, e.g.
/// 169.254.169.254) or whatever answers an unspecified address.
const DENIED_BY_DEFAULT: [&str; 6] = [
    "127.0.0.0/8",
    "::1/128",
    "169.254.0.0/16",
    "fe80::/10",
    "0.0.0.0/8",
    "::/128",
];

/// The addresses InferenceReplicas may point at.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReplicaNetworks {
    /// Only these networks; empty: every address except [`DENIED_BY_DEFAULT`]'s.
    pub allow: Vec<Network>,
    /// Whether a DNS name is accepted (it is then trusted to resolve somewhere allowed).
    pub hostnames: bool,
}

impl ReplicaNetworks {
    /// Whether a replica may point at `address` (an IP literal or a DNS name); `Err` says why
    /// not, for a log line and the replica's status.
    pub fn check(&self, address: &str) -> Result<(), String> {
        let Ok(ip) = address.parse::<IpAddr>() else {
            return if self.hostnames {
                Ok(())
            } else {
                Err(format!(
                    "spec.address {address:?} is a DNS name and the router's operator allows only IP addresses for InferenceReplicas (--replica-hostnames allows names): write the endpoint's IP address"
                ))
            };
        };
        // An IPv4-mapped IPv6 address reaches the IPv4 host: judge it as that.
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        if self.allow.is_empty() {
            let denied = DENIED_BY_DEFAULT
                .iter()
                .filter_map(|n| n.parse::<Network>().ok())
                .find(|n| n.contains(ip));
            return match denied {
                Some(n) => Err(format!(
                    "spec.address {address} is in {n} (loopback, link-local or unspecified), which InferenceReplicas may not point at unless the router's operator lists it in --replica-networks"
                )),
                None => Ok(()),
            };
        }
        if self.allow.iter().any(|n| n.contains(ip)) {
            Ok(())
        } else {
            Err(format!(
                "spec.address {address} is outside the networks the router's operator allows for InferenceReplicas ({})",
                self.allow
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use kube::api::ObjectMeta;

    fn meta(ns: &str, name: &str, created: i64) -> ObjectMeta {
        ObjectMeta {
            namespace: Some(ns.into()),
            name: Some(name.into()),
            creation_timestamp: Some(Time(
                k8s_openapi::jiff::Timestamp::from_second(created).unwrap(),
            )),
            ..Default::default()
        }
    }

    fn pool(ns: &str, name: &str, created: i64, models: &[&str]) -> InferencePool {
        InferencePool {
            metadata: meta(ns, name, created),
            spec: serde_json::from_value(serde_json::json!({ "models": models })).unwrap(),
            status: None,
        }
    }

    #[test]
    fn the_oldest_pool_owns_a_model_and_ties_go_to_the_namespace_sorting_first() {
        let pools = [
            pool("zeta", "p", 100, &["llama"]),
            pool("attacker", "q", 200, &["llama", "own"]),
            pool("b", "t", 5, &["m"]),
            pool("a", "t", 5, &["m"]),
        ];
        let owners = model_owners(&pools);
        assert_eq!(owners["llama"], "zeta");
        assert_eq!(owners["own"], "attacker");
        assert_eq!(owners["m"], "a");
        let b = Boundaries::default();
        assert_eq!(
            claimed_elsewhere("attacker", &pools[1].spec.models, &owners, &b),
            [("llama".to_owned(), "zeta".to_owned())]
        );
        let shared = Boundaries {
            share_models_with: vec!["attacker".into()],
            ..Default::default()
        };
        assert!(claimed_elsewhere("attacker", &pools[1].spec.models, &owners, &shared).is_empty());
        // A pool being deleted claims nothing: the next oldest owns the model.
        let mut gone = pools.clone();
        gone[0].metadata.deletion_timestamp = gone[0].metadata.creation_timestamp.clone();
        assert_eq!(model_owners(&gone)["llama"], "attacker");
    }

    #[test]
    fn a_claim_goes_to_the_first_object_and_a_later_one_loses_only_that_claim() {
        let (a, b, c) = (meta("a", "t", 10), meta("b", "t", 20), meta("c", "t", 30));
        // Listed out of order: creation decides.
        let objects = [
            (&c, vec!["k2", "k3"]),
            (&b, vec!["k1", "k2", "k1"]),
            (&a, vec!["k1"]),
        ];
        let r = taken_claims(&objects);
        assert!(r[2].is_empty(), "a is first");
        assert_eq!(r[1], [("k1", 2), ("k1", 2)], "b loses k1 to a, keeps k2");
        assert_eq!(r[0], [("k2", 1)], "c loses k2 to b, keeps k3");
    }

    #[test]
    fn priorities_are_capped_outside_the_operators_namespace_and_names_scoped() {
        let b = Boundaries {
            max_tenant_priority: 10,
            own_namespace: Some("system".into()),
            ..Default::default()
        };
        assert_eq!(b.capped_priority("team", 1000), Err(10));
        assert_eq!(b.capped_priority("team", 10), Ok(10));
        assert_eq!(b.capped_priority("team", -5), Ok(-5));
        assert_eq!(b.capped_priority("system", 1000), Ok(1000));
        assert_eq!(b.tenant_name("team", "acme"), "team/acme");
        assert_eq!(b.tenant_name("system", "acme"), "acme");
        assert_eq!(Boundaries::default().capped_priority("x", 1), Err(0));
        assert!(header_problem("team", "acme").is_none());
        assert!(header_problem("team", "team/acme").is_none());
        assert!(header_problem("team", "other/acme").is_some());
        assert!(header_problem("team", "team-x/acme").is_some());
    }

    #[test]
    fn replica_addresses_default_to_everything_but_loopback_link_local_and_unspecified() {
        let open = ReplicaNetworks::default();
        for ok in ["10.1.2.3", "fd00::7", "8.8.8.8", "192.168.0.1"] {
            assert_eq!(open.check(ok), Ok(()), "{ok}");
        }
        for refused in [
            "127.0.0.1",
            "127.8.0.1",
            "::1",
            "169.254.169.254",
            "fe80::1",
            "0.0.0.0",
            "::",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "metadata.google.internal",
        ] {
            assert!(open.check(refused).is_err(), "{refused}");
        }
        let narrow = ReplicaNetworks {
            allow: vec!["10.0.0.0/8".parse().unwrap(), "fd00::/8".parse().unwrap()],
            hostnames: true,
        };
        assert_eq!(narrow.check("10.200.0.1"), Ok(()));
        assert_eq!(narrow.check("fd12::1"), Ok(()));
        assert_eq!(narrow.check("vllm.example.com"), Ok(()));
        let e = narrow.check("192.168.1.1").unwrap_err();
        assert!(e.contains("10.0.0.0/8, fd00::/8"), "{e}");
        assert!(narrow.check("11.0.0.1").is_err());
        // An explicit list is the operator's word, loopback included.
        let lo = ReplicaNetworks {
            allow: vec!["127.0.0.1".parse().unwrap()],
            hostnames: false,
        };
        assert_eq!(lo.check("127.0.0.1"), Ok(()));
        assert!(lo.check("127.0.0.2").is_err());
        assert!("10.0.0.0/33".parse::<Network>().is_err());
        assert!("nope".parse::<Network>().is_err());
        assert!("0.0.0.0/0"
            .parse::<Network>()
            .unwrap()
            .contains("1.2.3.4".parse().unwrap()));
    }

    #[test]
    fn tokenizer_paths_must_be_written_under_the_root() {
        let root = Path::new("/etc/warmpath/tokenizers");
        assert!(lexically_under(root, Path::new("/etc/warmpath/tokenizers/llama/t.json")).is_ok());
        // `.` means the same directory: harmless.
        assert!(lexically_under(root, Path::new("/etc/warmpath/tokenizers/./x")).is_ok());
        for bad in [
            "/dev/zero",
            "/etc/warmpath/tokenizers/../secret",
            "relative/t.json",
            "/etc/warmpath/tokenizers",
            "/etc/warmpath/tokenizers-evil/t.json",
        ] {
            assert!(lexically_under(root, Path::new(bad)).is_err(), "{bad}");
        }
    }
}
