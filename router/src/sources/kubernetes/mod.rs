//! Kubernetes mode: the router reads its pools, tenants and objectives from the cluster.
//! Reflectors keep local copies of InferencePools, InferenceReplicas and TenantPolicies (in the
//! watched namespaces, or all; the router's account needs to read them there), of the Secrets
//! in the few namespaces the operator lets it read them in (`--secret-namespaces`: never
//! all; each value kept only as a keyed hash, [`tenants::seal_secret`]), and of
//! llm-d's InferenceObjectives when the API server serves them (checked once at start); after
//! every batch of changes the pool list ([`translate::discovered`]), the tenant list
//! ([`tenants::discovered`], API keys from the Secrets the policies name) and the objectives
//! ([`objectives::discovered`]) are recomputed from those copies, and the routing table swapped
//! atomically when any of them changed.
//!
//! Failure behaviour, which is the point of this module:
//! - Until every watch has delivered its first full list, `/readyz` answers 503 (a router
//!   that routes from half a list sends everything to the first replicas listed).
//! - When the API server goes away, watches retry with backoff and the last good table keeps
//!   serving; nothing is removed because the API server is unreachable.
//! - After a reconnect each watch relists; the reflector replaces its copy only once the list
//!   is complete, and the table is recomputed from the copies, so an object deleted during the
//!   outage (whose Delete event was never seen) disappears from the table too.

pub mod objectives;
pub mod tenants;
pub mod translate;

use crate::config::{ObjectiveConfig, PoolConfig, TenantPolicyConfig};
use crate::metrics::{KubernetesMetrics, Metrics};
use crate::state::discovery::DiscoveryStatus;
use crate::state::publish::{Update, Updates};
use futures_util::stream::{self, BoxStream, StreamExt};
use k8s_openapi::api::core::v1::Secret;
use kube::api::ListParams;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use warmpath_api::boundaries::Boundaries;
use warmpath_api::llmd::{self, InferenceObjective};
use warmpath_api::v1::{InferencePool, InferenceReplica, TenantPolicy};

/// Where to find the cluster and what to watch.
#[derive(Clone)]
pub struct Discovery {
    pub client: Client,
    /// Namespaces to watch; empty: every namespace.
    pub namespaces: Vec<String>,
    /// Namespaces whose Secrets hold TenantPolicies' API keys and may be read (never every
    /// namespace: the router faces clients, and the keys of a policy whose Secret lies
    /// elsewhere are not read, which the policy's problem says). Empty: no Secret is read.
    pub secret_namespaces: Vec<String>,
    /// What the watched namespaces' resources may do (models, replica addresses, tokenizer
    /// paths, tenants).
    pub boundaries: Boundaries,
}

impl fmt::Debug for Discovery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Discovery")
            .field("namespaces", &self.namespaces)
            .field("secret_namespaces", &self.secret_namespaces)
            .field("boundaries", &self.boundaries)
            .finish_non_exhaustive()
    }
}

/// Changes arriving within this window after the first are applied together: a rollout that
/// readies many pods at once costs one table rebuild, not one per pod.
const COALESCE: Duration = Duration::from_millis(10);
/// ... but a steady trickle of changes still rebuilds this often.
const COALESCE_MAX: Duration = Duration::from_millis(100);
/// Watch errors are logged at most this often (each one is counted).
const ERROR_LOG_EVERY: Duration = Duration::from_secs(30);

/// Retry delays of a failed watch: 200 ms doubling to 2 s, jittered. Shorter than kube's
/// client-go-like default (800 ms to 30 s) because a router that reconnects late routes to
/// replicas that are gone; a few routers retrying every 2 s are no burden on an API server.
#[derive(Debug, Clone)]
struct WatchBackoff {
    next: Duration,
}

const BACKOFF_MIN: Duration = Duration::from_millis(200);
const BACKOFF_MAX: Duration = Duration::from_secs(2);

impl Default for WatchBackoff {
    fn default() -> Self {
        Self { next: BACKOFF_MIN }
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let base = self.next;
        self.next = (self.next * 2).min(BACKOFF_MAX);
        // ±25 % so that routers restarted together do not retry in lockstep.
        Some(base.mul_f64(rand::random_range(0.75..1.25)))
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.next = BACKOFF_MIN;
    }
}

enum Signal {
    /// Something in a reflector's copy changed (or may have).
    Changed,
    /// The watch with this index has delivered a complete list.
    Listed(usize),
    /// A relist started or an object arrived as part of one: the copy changes only at `Listed`.
    Listing,
    Error(String),
}

/// Field selector of the Secret watches: Helm keeps every revision of every release as a
/// Secret (up to 1 MiB each) and none of them holds a tenant's API keys.
const SECRET_FIELDS: &str = "type!=helm.sh/release.v1";

/// What the router keeps of a watched object: server-side apply's bookkeeping is dropped from
/// every kind (it can be larger than the object and is never read).
fn trim<K: Resource>(obj: &mut K) {
    obj.meta_mut().managed_fields = None;
}

/// A Secret as kept for its API keys: `data` only, sealed (each value replaced by its keyed
/// hash). Annotations go too, since `kubectl apply` copies the whole Secret, values included,
/// into one of them.
fn trim_secret(secret: &mut Secret) {
    trim(secret);
    secret.metadata.annotations = None;
    tenants::seal_secret(secret);
}

/// One API per watched namespace, or one for all.
fn apis<K>(client: &Client, namespaces: &[String]) -> Vec<Api<K>>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
{
    if namespaces.is_empty() {
        vec![Api::all(client.clone())]
    } else {
        namespaces
            .iter()
            .map(|ns| Api::namespaced(client.clone(), ns))
            .collect()
    }
}

/// Watch one kind in each namespace (or all), reflecting into a store per watch. `config` and
/// `modify` say what to list and what to keep of each object. Each watch's index (in
/// [`Signal::Listed`]) is its stream's position in `streams`.
fn watch_kind<K>(
    client: &Client,
    namespaces: &[String],
    config: &watcher::Config,
    modify: fn(&mut K),
    stores: &mut Vec<Store<K>>,
    streams: &mut Vec<BoxStream<'static, Signal>>,
) where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + fmt::Debug
        + Send
        + Sync
        + 'static,
{
    for api in apis::<K>(client, namespaces) {
        let index = streams.len();
        let (reader, writer) = reflector::store::<K>();
        stores.push(reader);
        let s = watcher(api, config.clone())
            .backoff(WatchBackoff::default())
            .modify(modify)
            .reflect(writer)
            .map(move |ev| match ev {
                Ok(watcher::Event::Apply(_)) | Ok(watcher::Event::Delete(_)) => Signal::Changed,
                Ok(watcher::Event::InitDone) => Signal::Listed(index),
                Ok(watcher::Event::Init) | Ok(watcher::Event::InitApply(_)) => Signal::Listing,
                Err(e) => Signal::Error(format!("{}: {e}", K::kind(&()))),
            });
        streams.push(s.boxed());
    }
}

/// Whether to watch llm-d's `llm-d.ai/v1alpha2` `inferenceobjectives`: the API server serves
/// them and the router's account may list them in every watched namespace. Optional by design:
/// llm-d's CRD may be absent, and an account without the right (a chart from before, a
/// hand-written Role) must leave the router routing without objectives rather than unready.
/// Asked until the API server answers (the other watches need it too, so nothing is routed from
/// the cluster before it does); `None` at shutdown.
async fn watch_objectives(
    client: &Client,
    namespaces: &[String],
    shutdown: &mut watch::Receiver<bool>,
    status: &DiscoveryStatus,
) -> Option<bool> {
    let gv = format!("{}/{}", llmd::GROUP, llmd::VERSION);
    let mut backoff = WatchBackoff::default();
    loop {
        match objectives_readable(client, namespaces, &gv).await {
            Ok(answer) => return Some(answer),
            Err(e) => {
                let e = format!("checking for {gv} {}: {e}", llmd::PLURAL);
                tracing::warn!("{e}; retrying");
                status.failed(e);
            }
        }
        let delay = backoff.next().unwrap_or(BACKOFF_MAX);
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = shutdown.changed() => return None,
        }
    }
}

/// [`watch_objectives`]' one try: discovery, then a list of at most one object per namespace.
async fn objectives_readable(
    client: &Client,
    namespaces: &[String],
    gv: &str,
) -> Result<bool, kube::Error> {
    match client.list_api_group_resources(gv).await {
        Ok(list) if list.resources.iter().any(|r| r.name == llmd::PLURAL) => {}
        Ok(_) => return Ok(false),
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(false),
        Err(e) => return Err(e),
    }
    for api in apis::<InferenceObjective>(client, namespaces) {
        match api.list_metadata(&ListParams::default().limit(1)).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 403 => {
                tracing::warn!(
                    "llm-d InferenceObjectives are served but this account may not list them: not watched, their priorities do not apply (grant get/list/watch on llm-d.ai inferenceobjectives and restart): {}",
                    s.message
                );
                return Ok(false);
            }
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// What was last sent to the publisher.
type Found = (
    Vec<PoolConfig>,
    Vec<TenantPolicyConfig>,
    Vec<ObjectiveConfig>,
);

/// Watch the cluster and send the publisher its pools, tenants and objectives whenever any of
/// them changes, until `shutdown`.
pub(crate) async fn run(
    discovery: Discovery,
    updates: Updates,
    status: Arc<DiscoveryStatus>,
    metrics: Arc<Metrics>,
    mut shutdown: watch::Receiver<bool>,
) {
    let metrics = &metrics.kubernetes;
    let mut sent: Option<Found> = None;
    let mut warned = BTreeSet::new();
    let ns = &discovery.namespaces;
    let boundaries = &discovery.boundaries;
    let client = &discovery.client;
    let all = watcher::Config::default();
    let mut streams = Vec::new();
    let mut pools = Vec::new();
    let mut replicas = Vec::new();
    let mut policies = Vec::new();
    let mut secrets = Vec::new();
    watch_kind::<InferencePool>(client, ns, &all, trim, &mut pools, &mut streams);
    watch_kind::<InferenceReplica>(client, ns, &all, trim, &mut replicas, &mut streams);
    watch_kind::<TenantPolicy>(client, ns, &all, trim, &mut policies, &mut streams);
    let secret_ns = &discovery.secret_namespaces;
    // An empty list means none here (for `apis`, it would mean all).
    if !secret_ns.is_empty() {
        watch_kind::<Secret>(
            client,
            secret_ns,
            &watcher::Config::default().fields(SECRET_FIELDS),
            trim_secret,
            &mut secrets,
            &mut streams,
        );
    }
    let mut objectives = Vec::new();
    let Some(objectives_watched) = watch_objectives(client, ns, &mut shutdown, &status).await
    else {
        return;
    };
    if objectives_watched {
        watch_kind::<InferenceObjective>(client, ns, &all, trim, &mut objectives, &mut streams);
    }
    let mut listed = vec![false; streams.len()];
    let mut events = stream::select_all(streams);
    let mut last_error_log: Option<Instant> = None;
    tracing::info!(
        namespaces = %if ns.is_empty() { "*".to_owned() } else { ns.join(",") },
        secret_namespaces = %secret_ns.join(","),
        "watching InferencePools, InferenceReplicas, TenantPolicies, Secrets (their API keys, in the secret namespaces only){}",
        if objectives_watched {
            " and llm-d InferenceObjectives"
        } else {
            " (not llm-d InferenceObjectives: not served or not readable; restart the router after installing their CRD or granting access)"
        }
    );
    loop {
        let first = tokio::select! {
            ev = events.next() => ev,
            _ = shutdown.changed() => return,
        };
        let Some(first) = first else { return };
        let mut changed = false;
        let started = Instant::now();
        let mut next = Some(first);
        while let Some(signal) = next.take() {
            match signal {
                Signal::Changed => changed = true,
                Signal::Listed(i) => {
                    listed[i] = true;
                    changed = true;
                }
                Signal::Listing => {}
                Signal::Error(e) => {
                    metrics.watch_errors.inc();
                    if !status.synced() {
                        status.failed(e.clone());
                    }
                    if last_error_log.is_none_or(|t| t.elapsed() >= ERROR_LOG_EVERY) {
                        last_error_log = Some(Instant::now());
                        tracing::warn!(
                            "Kubernetes watch failed, retrying with backoff; routing continues with the last good table: {e}"
                        );
                    }
                }
            }
            let budget = COALESCE_MAX.saturating_sub(started.elapsed()).min(COALESCE);
            if budget.is_zero() {
                break;
            }
            next = tokio::time::timeout(budget, events.next())
                .await
                .ok()
                .flatten();
        }
        if !changed || !listed.iter().all(|l| *l) {
            continue;
        }
        let pool_objs: Vec<_> = pools.iter().flat_map(|s| s.state()).collect();
        let replica_objs: Vec<_> = replicas.iter().flat_map(|s| s.state()).collect();
        let policy_objs: Vec<_> = policies.iter().flat_map(|s| s.state()).collect();
        let found = translate::discovered(
            pool_objs.iter().map(|p| p.as_ref()),
            replica_objs.iter().map(|r| r.as_ref()),
            boundaries,
        );
        let found_tenants = tenants::discovered(
            policy_objs.iter().map(|p| p.as_ref()),
            |ns, name| {
                if !secret_ns.iter().any(|s| s == ns) {
                    return tenants::SecretLookup::NotReadable;
                }
                let key = ObjectRef::new(name).within(ns);
                match secrets.iter().find_map(|s| s.get(&key)) {
                    Some(s) => tenants::SecretLookup::Found(s),
                    None => tenants::SecretLookup::Missing,
                }
            },
            boundaries,
        );
        let objective_objs: Vec<_> = objectives.iter().flat_map(|s| s.state()).collect();
        let found_objectives = objectives::discovered(
            objective_objs.iter().map(|o| o.as_ref()),
            &found.pools,
            boundaries,
        );
        record(metrics, &found, policy_objs.len());
        tenants::warn_new(&found_tenants.problems, &mut warned);
        let next = (found.pools, found_tenants.tenants, found_objectives);
        if sent.as_ref() != Some(&next) {
            sent = Some(next.clone());
            let (pools, tenants, objectives) = next;
            // Until the first list is routed, readiness waits for the table that holds it.
            let (tx, rx) = tokio::sync::oneshot::channel();
            let update = Update::Discovered {
                pools,
                tenants,
                objectives,
                applied: (!status.synced()).then_some(tx),
            };
            if updates.send(update).is_err() {
                return;
            }
            if !status.synced() && rx.await.is_err() {
                return;
            }
            metrics.table_rebuilds.inc();
        }
        if !status.synced() {
            tracing::info!(
                pools = pool_objs.len(),
                replicas = replica_objs.len(),
                tenants = policy_objs.len(),
                objectives = objective_objs.len(),
                "first full list from the Kubernetes API applied; ready"
            );
            status.set_synced();
            metrics.synced.set(1);
        }
    }
}

fn record(m: &KubernetesMetrics, found: &translate::Discovered, tenants: usize) {
    let routed: usize = found.pools.iter().map(|p| p.replicas.len()).sum();
    m.replicas.set(routed as i64);
    let skipped_replicas = found
        .skipped
        .iter()
        .filter(|s| !matches!(s, translate::Skipped::ClaimedModel { .. }))
        .count();
    m.skipped_replicas.set(skipped_replicas as i64);
    m.tenant_policies.set(tenants as i64);
    for s in &found.skipped {
        match s {
            translate::Skipped::NoPool { replica, pool } => {
                tracing::debug!(%replica, %pool, "InferenceReplica not routed: no such InferencePool")
            }
            translate::Skipped::ForeignModels { replica, message } => {
                tracing::debug!(%replica, "InferenceReplica not routed: {message}")
            }
            translate::Skipped::ClaimedModel { pool, model, owner } => {
                tracing::warn!(%pool, %model, %owner, "InferencePool names a model another namespace claimed first: not served from it (WARMPATH_SHARE_MODELS_WITH lets a namespace share)")
            }
            translate::Skipped::AddressNotAllowed { replica, message } => {
                tracing::warn!(%replica, "InferenceReplica not routed: {message}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::utils::Backoff;

    #[test]
    fn watch_backoff_grows_to_its_cap_and_resets() {
        let mut b = WatchBackoff::default();
        let first = b.next().unwrap();
        assert!(first >= BACKOFF_MIN.mul_f64(0.75) && first <= BACKOFF_MIN.mul_f64(1.25));
        let later: Vec<Duration> = b.by_ref().take(20).collect();
        assert!(later.iter().all(|d| *d <= BACKOFF_MAX.mul_f64(1.25)));
        assert!(later[later.len() - 1] >= BACKOFF_MAX.mul_f64(0.75));
        b.reset();
        assert!(b.next().unwrap() <= BACKOFF_MIN.mul_f64(1.25));
    }
}
