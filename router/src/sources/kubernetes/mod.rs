//! Kubernetes mode: the router reads its pools from the cluster. Reflectors keep local copies
//! of InferencePools, InferenceReplicas and TenantPolicies (in the watched namespaces, or all);
//! after every batch of changes the pool list is recomputed from those copies
//! ([`translate::discovered`]) and the routing table swapped atomically.
//!
//! Failure behaviour, which is the point of this module:
//! - Until every watch has delivered its first full list, `/readyz` answers 503 (a router
//!   that routes from half a list sends everything to the first replicas listed).
//! - When the API server goes away, watches retry with backoff and the last good table keeps
//!   serving; nothing is removed because the API server is unreachable.
//! - After a reconnect each watch relists; the reflector replaces its copy only once the list
//!   is complete, and the table is recomputed from the copies, so an object deleted during the
//!   outage (whose Delete event was never seen) disappears from the table too.

pub mod translate;

use crate::config::PoolConfig;
use crate::metrics::{KubernetesMetrics, Metrics};
use crate::state::publish::{Update, Updates};
use futures_util::stream::{self, BoxStream, StreamExt};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, Resource};
use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use warmpath_api::v1alpha1::{InferencePool, InferenceReplica, TenantPolicy};

/// Where to find the cluster and what to watch.
#[derive(Clone)]
pub struct Discovery {
    pub client: Client,
    /// Namespaces to watch; empty: every namespace.
    pub namespaces: Vec<String>,
}

impl fmt::Debug for Discovery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Discovery")
            .field("namespaces", &self.namespaces)
            .finish_non_exhaustive()
    }
}

/// Whether discovery has delivered its first full list, and the last watch error until then.
/// Written by [`run`] only; read by `/readyz`.
#[derive(Debug, Default)]
pub struct DiscoveryStatus {
    synced: AtomicBool,
    error: Mutex<Option<String>>,
}

impl DiscoveryStatus {
    /// `synced` from the start when there is nothing to discover (static mode).
    pub fn new(synced: bool) -> Self {
        Self {
            synced: AtomicBool::new(synced),
            error: Mutex::new(None),
        }
    }

    /// Whether routing may start: once the first full list has been applied.
    pub fn synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// The last watch error seen (cleared once synced): why the router is not ready yet.
    pub fn error(&self) -> Option<String> {
        self.error.lock().clone()
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

fn watch_kind<K>(
    client: &Client,
    namespaces: &[String],
    first_index: usize,
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
    let apis: Vec<Api<K>> = if namespaces.is_empty() {
        vec![Api::all(client.clone())]
    } else {
        namespaces
            .iter()
            .map(|ns| Api::namespaced(client.clone(), ns))
            .collect()
    };
    for (i, api) in apis.into_iter().enumerate() {
        let index = first_index + i;
        let (reader, writer) = reflector::store::<K>();
        stores.push(reader);
        let s = watcher(api, watcher::Config::default())
            .backoff(WatchBackoff::default())
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

/// Watch the cluster and send the publisher its pools whenever they change, until `shutdown`.
pub(crate) async fn run(
    discovery: Discovery,
    updates: Updates,
    status: Arc<DiscoveryStatus>,
    metrics: Arc<Metrics>,
    mut shutdown: watch::Receiver<bool>,
) {
    let metrics = &metrics.kubernetes;
    let mut sent: Option<Vec<PoolConfig>> = None;
    let ns = &discovery.namespaces;
    let per_kind = ns.len().max(1);
    let mut streams = Vec::new();
    let mut pools = Vec::new();
    let mut replicas = Vec::new();
    let mut tenants = Vec::new();
    watch_kind::<InferencePool>(&discovery.client, ns, 0, &mut pools, &mut streams);
    watch_kind::<InferenceReplica>(&discovery.client, ns, per_kind, &mut replicas, &mut streams);
    watch_kind::<TenantPolicy>(
        &discovery.client,
        ns,
        2 * per_kind,
        &mut tenants,
        &mut streams,
    );
    let mut listed = vec![false; streams.len()];
    let mut events = stream::select_all(streams);
    let mut last_error_log: Option<Instant> = None;
    tracing::info!(
        namespaces = %if ns.is_empty() { "*".to_owned() } else { ns.join(",") },
        "watching InferencePools, InferenceReplicas and TenantPolicies"
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
                        *status.error.lock() = Some(e.clone());
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
        let tenant_count: usize = tenants.iter().map(|s| s.state().len()).sum();
        let found = translate::discovered(
            pool_objs.iter().map(|p| p.as_ref()),
            replica_objs.iter().map(|r| r.as_ref()),
        );
        record(metrics, &found, tenant_count);
        if sent.as_ref() != Some(&found.pools) {
            sent = Some(found.pools.clone());
            // Until the first list is routed, readiness waits for the table that holds it.
            let (tx, rx) = tokio::sync::oneshot::channel();
            let update = Update::Discovered {
                pools: found.pools,
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
                tenants = tenant_count,
                "first full list from the Kubernetes API applied; ready"
            );
            *status.error.lock() = None;
            status.synced.store(true, Ordering::Release);
            metrics.synced.set(1);
        }
    }
}

fn record(m: &KubernetesMetrics, found: &translate::Discovered, tenants: usize) {
    let routed: usize = found.pools.iter().map(|p| p.replicas.len()).sum();
    m.replicas.set(routed as i64);
    m.skipped_replicas.set(found.skipped.len() as i64);
    m.tenant_policies.set(tenants as i64);
    for s in &found.skipped {
        match s {
            translate::Skipped::NoPool { replica, pool } => {
                tracing::debug!(%replica, %pool, "InferenceReplica not routed: no such InferencePool")
            }
            translate::Skipped::ForeignModels { replica, message } => {
                tracing::debug!(%replica, "InferenceReplica not routed: {message}")
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
