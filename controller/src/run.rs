//! Wiring: reflectors and controllers for each watch scope (one namespace, or the whole
//! cluster), leader election gating every write, the admin server, and shutdown.
//!
//! Everything a pool's replicas depend on lives in the pool's namespace, so each watched
//! namespace gets its own independent set of watches and controllers (a reflector store
//! serves one list/watch, and a controller reads objects from one store).

use crate::admin::{self, AdminState};
use crate::claims::Claims;
use crate::config::Config;
use crate::context::{error_policy, Ctx};
use crate::desired::selector_matches;
use crate::error::Error;
use crate::gie::{self, GieCtx};
use crate::lease::{Elector, Leadership};
use crate::metrics::Metrics;
use crate::naming::replica_name;
use crate::{pools, replicas, tenants};
use futures_util::{Stream, StreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus, Secret};
use k8s_openapi::ByteString;
use kube::runtime::controller::Controller;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, ResourceExt};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::sync::watch;
use warmpath_api::gie::InferencePool as GiePool;
use warmpath_api::v1::{InferencePool, InferenceReplica, TenantPolicy};

fn api<K>(client: &Client, ns: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Keeps only what readiness and selection need of a pod: a thousand pods then cost a few
/// hundred kilobytes instead of tens of megabytes.
pub fn trim_pod(pod: &mut Pod) {
    pod.spec = None;
    let meta = &mut pod.metadata;
    meta.managed_fields = None;
    meta.annotations = None;
    meta.owner_references = None;
    meta.finalizers = None;
    meta.generate_name = None;
    if let Some(status) = pod.status.take() {
        pod.status = Some(PodStatus {
            phase: status.phase,
            pod_ip: status.pod_ip,
            conditions: status.conditions.map(|cs| {
                cs.into_iter()
                    .filter(|c| c.type_ == "Ready")
                    .map(|c| PodCondition {
                        type_: c.type_,
                        status: c.status,
                        ..Default::default()
                    })
                    .collect()
            }),
            ..Default::default()
        });
    }
}

/// Keeps a Secret's keys but not its values (only whether each is empty): the controller
/// checks that keys exist and never holds tenants' API keys in memory.
pub fn trim_secret(secret: &mut Secret) {
    secret.metadata.managed_fields = None;
    secret.metadata.annotations = None;
    for value in secret.data.iter_mut().flat_map(|d| d.values_mut()) {
        let nonempty = !value.0.is_empty();
        *value = ByteString(if nonempty { vec![1] } else { Vec::new() });
    }
    for value in secret.string_data.iter_mut().flat_map(|d| d.values_mut()) {
        if !value.is_empty() {
            *value = "1".into();
        }
    }
}

/// A stream that yields once each time this process becomes the leader.
fn on_becoming_leader(rx: watch::Receiver<bool>) -> impl Stream<Item = ()> + Send {
    futures_util::stream::unfold(rx, |mut rx| async move {
        loop {
            rx.changed().await.ok()?;
            if *rx.borrow_and_update() {
                return Some(((), rx));
            }
        }
    })
}

/// The pools in `pod`'s namespace that select it or own a replica for it (so a pod whose
/// labels changed still reaches the pool that must delete its replica).
fn pools_for_pod(
    pod: &Pod,
    pools: &Store<InferencePool>,
    replicas: &Store<InferenceReplica>,
) -> Vec<ObjectRef<InferencePool>> {
    let ns = pod.namespace();
    let pod_name = pod.name_any();
    pools
        .state()
        .into_iter()
        .filter(|p| p.namespace() == ns)
        .filter(|p| {
            p.spec
                .selector
                .as_ref()
                .is_some_and(|s| selector_matches(s, pod.labels()))
                || replicas
                    .get(
                        &ObjectRef::new(&replica_name(&p.name_any(), &pod_name))
                            .within(ns.as_deref().unwrap_or_default()),
                    )
                    .is_some()
        })
        .map(|p| ObjectRef::from_obj(p.as_ref()))
        .collect()
}

type Touched<K> = futures_util::stream::BoxStream<'static, Result<K, watcher::Error>>;

/// A scope's pools and tenant policies, reflected in [`run`] so that every scope's reconcilers
/// can read every scope's stores ([`Claims`]).
struct ScopeWatches {
    pools: Store<InferencePool>,
    pool_stream: Touched<InferencePool>,
    tenant_stream: Touched<TenantPolicy>,
}

/// The pool and policy reflectors of one scope, and their stores for [`Claims`].
fn scope_watches(client: &Client, ns: Option<&str>) -> (ScopeWatches, Store<TenantPolicy>) {
    let wc = watcher::Config::default().any_semantic();
    let (pools, pools_writer) = reflector::store();
    let pool_stream = watcher(api::<InferencePool>(client, ns), wc.clone())
        .default_backoff()
        .modify(|p: &mut InferencePool| p.metadata.managed_fields = None)
        .reflect(pools_writer)
        .touched_objects()
        .boxed();
    let (tenants, tenants_writer) = reflector::store();
    let tenant_stream = watcher(api::<TenantPolicy>(client, ns), wc)
        .default_backoff()
        .modify(|t: &mut TenantPolicy| t.metadata.managed_fields = None)
        .reflect(tenants_writer)
        .touched_objects()
        .boxed();
    (
        ScopeWatches {
            pools,
            pool_stream,
            tenant_stream,
        },
        tenants,
    )
}

/// Every watch and controller of one scope; resolves when they all end.
#[allow(clippy::too_many_arguments)]
async fn run_scope(
    client: Client,
    ns: Option<String>,
    leader: Leadership,
    metrics: Arc<Metrics>,
    recorder: Recorder,
    secrets: BTreeMap<String, Store<Secret>>,
    secret_streams: Vec<futures_util::stream::BoxStream<'static, Result<Secret, watcher::Error>>>,
    ready: tokio::sync::mpsc::Sender<()>,
    gie_pools: bool,
    watches: ScopeWatches,
    claims: Arc<Claims>,
) {
    let ns = ns.as_deref();
    let wc = watcher::Config::default().any_semantic();

    let (pods, pods_writer) = reflector::store();
    let pod_stream = watcher(api::<Pod>(&client, ns), wc.clone())
        .default_backoff()
        .modify(trim_pod)
        .reflect(pods_writer)
        .touched_objects();
    let (pool_replicas, replicas_writer) = reflector::store();
    let replica_stream = watcher(api::<InferenceReplica>(&client, ns), wc.clone())
        .default_backoff()
        .modify(|r: &mut InferenceReplica| r.metadata.managed_fields = None)
        .reflect(replicas_writer)
        .touched_objects();
    let replica_pools = watches.pools;
    let pool_stream = {
        let claims = claims.clone();
        watches.pool_stream.inspect(move |_| claims.pools_touched())
    };
    let tenant_stream = {
        let claims = claims.clone();
        watches
            .tenant_stream
            .inspect(move |_| claims.tenants_touched())
    };

    let pool_ctl = Controller::new(api::<InferencePool>(&client, ns), wc.clone());
    let replica_ctl = Controller::new(api::<InferenceReplica>(&client, ns), wc.clone());
    let tenant_ctl = Controller::new(api::<TenantPolicy>(&client, ns), wc.clone());

    let (synced_tx, synced_rx) = watch::channel(false);
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        leader: leader.clone(),
        metrics,
        recorder,
        pods: pods.clone(),
        replicas: pool_replicas.clone(),
        pools: replica_pools.clone(),
        secrets: secrets.clone(),
        synced: synced_rx,
        claims: claims.clone(),
    });

    let (m_pools, m_replicas) = (pool_ctl.store(), pool_replicas.clone());
    let pool_ctl = pool_ctl
        .watches_stream(pod_stream, move |pod| {
            pools_for_pod(&pod, &m_pools, &m_replicas)
        })
        .watches_stream(replica_stream, |r: InferenceReplica| {
            r.namespace()
                .map(|ns| ObjectRef::<InferencePool>::new(&r.spec.pool).within(&ns))
        })
        .reconcile_all_on(on_becoming_leader(leader.subscribe()))
        .reconcile_all_on(claims.on_models_changed());

    let m_replicas = replica_ctl.store();
    let replica_ctl = replica_ctl
        .watches_stream(pool_stream, move |pool: InferencePool| {
            let ns = pool.namespace();
            let name = pool.name_any();
            m_replicas
                .state()
                .into_iter()
                .filter(|r| r.namespace() == ns && r.spec.pool == name)
                .map(|r| ObjectRef::from_obj(r.as_ref()))
                .collect::<Vec<_>>()
        })
        .reconcile_all_on(on_becoming_leader(leader.subscribe()));

    let m_tenants = tenant_ctl.store();
    let mut tenant_ctl = tenant_ctl
        .reconcile_all_on(on_becoming_leader(leader.subscribe()))
        .reconcile_all_on(claims.on_headers_changed())
        .watches_stream(tenant_stream, |t: TenantPolicy| {
            Some(ObjectRef::from_obj(&t))
        });
    if !secret_streams.is_empty() {
        let secrets_touched = futures_util::stream::select_all(secret_streams);
        tenant_ctl = tenant_ctl.watches_stream(secrets_touched, move |secret: Secret| {
            let ns = secret.namespace();
            let name = secret.name_any();
            m_tenants
                .state()
                .into_iter()
                .filter(|t| {
                    t.namespace() == ns
                        && t.spec
                            .api_key_secret_ref
                            .as_ref()
                            .is_some_and(|r| r.name == name)
                })
                .map(|t| ObjectRef::from_obj(t.as_ref()))
                .collect::<Vec<_>>()
        });
    }

    // Readiness: every store the reconcilers read filled once. Each store is awaited here and
    // nowhere else (see `Ctx::synced`); the controllers' own stores are awaited by their
    // runners, which reconcile nothing before.
    let stores_ready = {
        let secrets: Vec<Store<Secret>> = secrets.into_values().collect();
        async move {
            let _ = pods.wait_until_ready().await;
            let _ = pool_replicas.wait_until_ready().await;
            let _ = replica_pools.wait_until_ready().await;
            for s in secrets {
                let _ = s.wait_until_ready().await;
            }
            synced_tx.send_replace(true);
            let _ = ready.send(()).await;
        }
    };

    let gie_ctls = {
        let (client, wc, ctx, leader) = (client.clone(), wc.clone(), ctx.clone(), leader.clone());
        async move {
            if gie_pools {
                run_gie(client, ns, wc, ctx, leader).await;
            }
        }
    };

    tokio::join!(
        stores_ready,
        gie_ctls,
        pool_ctl
            .run(pools::reconcile, error_policy, ctx.clone())
            .for_each(|r| log_result("pool", r)),
        replica_ctl
            .run(replicas::reconcile, error_policy, ctx.clone())
            .for_each(|r| log_result("replica", r)),
        tenant_ctl
            .run(tenants::reconcile, error_policy, ctx)
            .for_each(|r| log_result("tenant", r)),
    );
}

/// The two GIE reconcilers of one scope (see [`gie`]): GIE pools to warmpath pools, and the
/// removal of warmpath pools whose GIE pool is gone.
async fn run_gie(
    client: Client,
    ns: Option<&str>,
    wc: watcher::Config,
    ctx: Arc<Ctx>,
    leader: Leadership,
) {
    let gctx = Arc::new(GieCtx::new(ctx));
    // Every warmpath pool (not only mirrored ones) leads to the GIE pool of its name: a
    // hand-written pool that blocked the name and is deleted lets the GIE pool be mirrored.
    let gie_ctl = Controller::new(api::<GiePool>(&client, ns), wc.clone())
        .watches(
            api::<InferencePool>(&client, ns),
            wc.clone(),
            |p: InferencePool| {
                p.namespace()
                    .map(|ns| ObjectRef::<GiePool>::new(&p.name_any()).within(&ns))
            },
        )
        .reconcile_all_on(on_becoming_leader(leader.subscribe()));
    let managed_ctl = Controller::new(
        api::<InferencePool>(&client, ns),
        wc.clone().labels(gie::MANAGED_SELECTOR),
    )
    .watches(api::<GiePool>(&client, ns), wc, |g: GiePool| {
        g.namespace()
            .map(|ns| ObjectRef::<InferencePool>::new(&g.name_any()).within(&ns))
    })
    .reconcile_all_on(on_becoming_leader(leader.subscribe()));
    tokio::join!(
        gie_ctl
            .run(gie::reconcile, gie::error_policy, gctx.clone())
            .for_each(|r| log_result("gie", r)),
        managed_ctl
            .run(gie::reconcile_managed, gie::error_policy, gctx)
            .for_each(|r| log_result("gie-managed", r)),
    );
}

async fn log_result<T>(
    kind: &'static str,
    res: Result<T, kube::runtime::controller::Error<Error, watcher::Error>>,
) {
    if let Err(e) = res {
        tracing::debug!(controller = kind, error = %e, "reconcile stream");
    }
}

/// Resolves on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGTERM");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

/// Runs the controller until `shutdown` resolves (`Ok`, after releasing the Lease) or
/// leadership is lost (`Err`: the process must exit so that it restarts as a standby).
pub async fn run(
    config: Config,
    client: Client,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> Result<(), Error> {
    let metrics = Arc::new(Metrics::new());
    let state = Arc::new(AdminState {
        metrics: metrics.clone(),
        synced: Default::default(),
    });
    let (admin_addr, _admin_task) = admin::serve(config.admin_listen, state.clone()).await?;
    tracing::info!(%admin_addr, identity = %config.identity, "admin listening");

    let leader = Leadership::new();
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "warmpath-controller".into(),
            instance: Some(config.identity.clone()),
        },
    );

    // Secrets: one trimmed reflector per readable namespace, shared by the scopes' tenant
    // controllers; each namespace's change stream goes to the scope that covers it.
    let scopes: Vec<Option<String>> = if config.watch_namespaces.is_empty() {
        vec![None]
    } else {
        config.watch_namespaces.iter().cloned().map(Some).collect()
    };
    let mut secret_stores = BTreeMap::new();
    let mut secret_streams: BTreeMap<
        String,
        futures_util::stream::BoxStream<'static, Result<Secret, watcher::Error>>,
    > = BTreeMap::new();
    for ns in &config.secret_namespaces {
        if !scopes.iter().any(|s| s.as_ref().is_none_or(|s| s == ns)) {
            continue;
        }
        let (store, writer) = reflector::store();
        let stream = watcher(
            Api::<Secret>::namespaced(client.clone(), ns),
            watcher::Config::default().any_semantic(),
        )
        .default_backoff()
        .modify(trim_secret)
        .reflect(writer)
        .touched_objects()
        .boxed();
        secret_stores.insert(ns.clone(), store);
        secret_streams.insert(ns.clone(), stream);
    }

    // GIE's CRD is optional: its pools are watched only when the API server serves them now
    // (a CRD installed later is picked up at the next restart).
    let gie_pools = match gie::served(&client).await {
        Ok(true) => {
            tracing::info!(
                "mirroring GIE InferencePools (inference.networking.k8s.io/v1) into warmpath pools"
            );
            true
        }
        Ok(false) => {
            tracing::info!("GIE InferencePools (inference.networking.k8s.io/v1) are not served: not watched (restart the controller after installing GIE's CRDs)");
            false
        }
        Err(e) => {
            tracing::warn!(error = %e, "API discovery of GIE InferencePools failed: not watched (restart the controller to retry)");
            false
        }
    };

    let mut watches = Vec::new();
    let mut tenant_stores = Vec::new();
    for scope in &scopes {
        let (w, tenants) = scope_watches(&client, scope.as_deref());
        watches.push(w);
        tenant_stores.push(tenants);
    }
    let claims = Arc::new(Claims::new(
        config.boundaries.clone(),
        watches.iter().map(|w| w.pools.clone()).collect(),
        tenant_stores,
    ));

    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel(scopes.len());
    let mut tasks = tokio::task::JoinSet::new();
    for (scope, watches) in scopes.iter().cloned().zip(watches) {
        let (stores, streams) = match &scope {
            None => (
                secret_stores.clone(),
                std::mem::take(&mut secret_streams).into_values().collect(),
            ),
            Some(ns) => (
                secret_stores
                    .get(ns)
                    .map(|s| BTreeMap::from([(ns.clone(), s.clone())]))
                    .unwrap_or_default(),
                secret_streams.remove(ns).into_iter().collect(),
            ),
        };
        tasks.spawn(run_scope(
            client.clone(),
            scope,
            leader.clone(),
            metrics.clone(),
            recorder.clone(),
            stores,
            streams,
            ready_tx.clone(),
            gie_pools,
            watches,
            claims.clone(),
        ));
    }
    drop(ready_tx);
    let n_scopes = scopes.len();
    tokio::spawn(async move {
        for _ in 0..n_scopes {
            if ready_rx.recv().await.is_none() {
                return;
            }
        }
        state.synced.store(true, Ordering::Release);
        tracing::info!("watch caches synced");
    });

    let elector = Elector {
        api: Api::<Lease>::namespaced(client.clone(), &config.lease_namespace),
        name: config.lease_name.clone(),
        identity: config.identity.clone(),
        timing: config.lease,
        leadership: leader.clone(),
        metrics,
    };
    tokio::select! {
        result = elector.run(shutdown) => {
            leader.set(false);
            result
        }
        _ = tasks.join_next() => {
            leader.set(false);
            Err(Error::Lease("a controller stopped unexpectedly".into()))
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::desired::tests::{pod, pool};
    use crate::desired::DesiredReplica;
    use k8s_openapi::api::core::v1::PodSpec;

    #[test]
    fn trimmed_pods_keep_what_readiness_needs() {
        let mut p = pod("a", &[("app", "vllm")], Some("10.0.0.1"), true);
        p.spec = Some(PodSpec::default());
        p.metadata.annotations = Some([("big".to_owned(), "x".repeat(10_000))].into());
        let status = p.status.as_mut().unwrap();
        status.host_ip = Some("192.168.0.1".into());
        status.conditions.as_mut().unwrap().push(PodCondition {
            type_: "PodScheduled".into(),
            status: "True".into(),
            message: Some("long".into()),
            ..Default::default()
        });
        trim_pod(&mut p);
        assert!(p.spec.is_none() && p.metadata.annotations.is_none());
        let status = p.status.as_ref().unwrap();
        assert_eq!(status.host_ip, None);
        assert_eq!(status.conditions.as_ref().unwrap().len(), 1);
        assert!(crate::desired::pod_is_ready(&p));
        assert_eq!(p.labels().get("app").map(String::as_str), Some("vllm"));
    }

    #[test]
    fn trimmed_secrets_keep_keys_not_values() {
        let mut s = Secret {
            data: Some(
                [
                    ("key".to_owned(), ByteString(b"sk-secret".to_vec())),
                    ("empty".to_owned(), ByteString(Vec::new())),
                ]
                .into(),
            ),
            ..Default::default()
        };
        trim_secret(&mut s);
        let data = s.data.unwrap();
        assert_eq!(data["key"].0, vec![1]);
        assert!(data["empty"].0.is_empty());
    }

    /// A store holding `objs`, and its writer for more.
    pub(crate) fn store_with<K>(objs: Vec<K>) -> (Store<K>, reflector::store::Writer<K>)
    where
        K: kube::Resource + Clone + 'static,
        K::DynamicType: Default + Eq + std::hash::Hash + Clone,
    {
        let (reader, mut writer) = reflector::store();
        for o in objs {
            writer.apply_watcher_event(&watcher::Event::Apply(o));
        }
        (reader, writer)
    }

    fn store_of<K>(objs: Vec<K>) -> Store<K>
    where
        K: kube::Resource + Clone + 'static,
        K::DynamicType: Default + Eq + std::hash::Hash + Clone,
    {
        store_with(objs).0
    }

    #[test]
    fn pods_map_to_pools_that_select_them_or_hold_their_replica() {
        let pools = store_of(vec![
            pool("llama", &[("app", "vllm")], Some(8000)),
            pool("other", &[("app", "sglang")], Some(8000)),
        ]);
        let selected = pod("a", &[("app", "vllm")], Some("10.0.0.1"), true);
        let names = |refs: Vec<ObjectRef<InferencePool>>| {
            refs.into_iter().map(|r| r.name).collect::<Vec<_>>()
        };
        assert_eq!(
            names(pools_for_pod(&selected, &pools, &store_of(Vec::new()))),
            vec!["llama"]
        );
        // Relabelled away from its pool, but its replica still exists: the pool must hear.
        let relabelled = pod("a", &[("app", "retired")], Some("10.0.0.1"), true);
        assert!(pools_for_pod(&relabelled, &pools, &store_of(Vec::new())).is_empty());
        let d: &DesiredReplica = &crate::desired::desired_replicas(
            &pool("llama", &[("app", "vllm")], Some(8000)),
            [&selected],
        )
        .0[0];
        let mut r = InferenceReplica::new(&d.name, d.spec.clone());
        r.metadata.namespace = Some("ns".into());
        assert_eq!(
            names(pools_for_pod(&relabelled, &pools, &store_of(vec![r]))),
            vec!["llama"]
        );
    }
}
