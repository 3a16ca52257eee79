//! The InferencePool reconciler: one managed InferenceReplica per ready selected pod (created,
//! rewritten when the pod's IP changes, deleted when the pod is unready, gone or unselected),
//! then the pool's status.

use crate::context::Ctx;
use crate::desired::{self, is_managed};
use crate::error::Error;
use crate::naming::FIELD_MANAGER;
use crate::status;
use futures_util::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use std::sync::Arc;
use std::time::Duration;
use warmpath_api::conditions::{self, ACCEPTED, MODELS_CLAIMED, TOKENIZER_ALLOWED};
use warmpath_api::v1::{InferencePool, InferenceReplica};

/// Resync period: repairs anything a dropped watch event left behind.
const RESYNC: Duration = Duration::from_secs(300);
/// Replica writes of one reconcile in flight at once.
const WRITES_IN_FLIGHT: usize = 16;

pub async fn reconcile(pool: Arc<InferencePool>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    ctx.reconcile("pool", reconcile_pool(&pool, &ctx)).await
}

async fn reconcile_pool(pool: &InferencePool, ctx: &Ctx) -> Result<Action, Error> {
    if pool.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    ctx.synced().await?;
    let name = pool.name_any();
    let ns = pool
        .namespace()
        .ok_or_else(|| Error::NoNamespace(name.clone()))?;
    let pods = ctx
        .pods
        .state_filter(|p| p.metadata.namespace.as_deref() == Some(ns.as_str()));
    let (wanted, counts) = desired::desired_replicas(pool, pods.iter().map(|p| p.as_ref()));
    let existing = ctx
        .replicas
        .state_filter(|r| r.metadata.namespace.as_deref() == Some(ns.as_str()));
    let plan = desired::plan(
        &name,
        pool.meta().uid.as_deref(),
        wanted.clone(),
        existing.iter().map(|r| r.as_ref()),
    );
    let api: Api<InferenceReplica> = Api::namespaced(ctx.client.clone(), &ns);
    let owner = desired::pool_owner(pool);
    // Writes go out a few at a time: a rollout of hundreds of pods must not wait on one
    // round trip per pod in sequence, nor flood the API server.
    let (api, owner, ns_ref, name_ref) = (&api, &owner, &ns, &name);
    let applies = futures_util::stream::iter(plan.apply.iter().cloned())
        .map(move |(d, new)| {
            let (ns, name) = (ns_ref, name_ref);
            async move {
                if !ctx.leader.is_leader() {
                    return Ok(None);
                }
                api.patch(
                    &d.name,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(d.to_object(ns, owner.as_ref())),
                )
                .await?;
                let pod = d.spec.pod.as_deref().unwrap_or_default();
                if new {
                    ctx.metrics.replicas_created.inc();
                    tracing::info!(pool = %name, %ns, replica = %d.name, pod, address = %d.spec.address, "created replica");
                } else {
                    ctx.metrics.replicas_updated.inc();
                    tracing::info!(pool = %name, %ns, replica = %d.name, pod, address = %d.spec.address, "updated replica");
                }
                Ok::<_, Error>(Some((new, format!("{} ({pod} at {})", d.name, d.spec.url()))))
            }
        })
        .buffer_unordered(WRITES_IN_FLIGHT);
    let deletes = futures_util::stream::iter(plan.delete.iter().cloned())
        .map(move |victim| {
            let (ns, name) = (ns_ref, name_ref);
            async move {
                if !ctx.leader.is_leader() {
                    return Ok(None);
                }
                match api.delete(&victim, &DeleteParams::default()).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 404 => return Ok(None),
                    Err(e) => return Err(e.into()),
                }
                ctx.metrics.replicas_deleted.inc();
                tracing::info!(pool = %name, %ns, replica = %victim, "deleted replica");
                Ok::<_, Error>(Some(victim))
            }
        })
        .buffer_unordered(WRITES_IN_FLIGHT);
    // Every write is attempted; the first error fails the reconcile (and it is retried).
    let applied: Vec<Result<Option<(bool, String)>, Error>> = applies.collect().await;
    let deleted: Vec<Result<Option<String>, Error>> = deletes.collect().await;
    let mut created = Vec::new();
    let mut failure = None;
    for r in applied {
        match r {
            Ok(Some((true, what))) => created.push(what),
            Ok(_) => {}
            Err(e) => failure = Some(e),
        }
    }
    let mut removed = Vec::new();
    for r in deleted {
        match r {
            Ok(Some(what)) => removed.push(what),
            Ok(None) => {}
            Err(e) => failure = Some(e),
        }
    }
    // One event per reconcile and kind of change, not one per replica: a rollout of a thousand
    // pods must not double the API server's write load.
    if !created.is_empty() {
        ctx.event(
            pool,
            false,
            "ReplicasCreated",
            "CreateReplica",
            format!(
                "created {} InferenceReplica(s) for ready pods: {}",
                created.len(),
                summary(&created)
            ),
        )
        .await;
    }
    if !removed.is_empty() {
        ctx.event(
            pool,
            false,
            "ReplicasDeleted",
            "DeleteReplica",
            format!(
                "deleted {} InferenceReplica(s) whose pods are no longer ready or selected: {}",
                removed.len(),
                summary(&removed)
            ),
        )
        .await;
    }
    if let Some(e) = failure {
        return Err(e);
    }
    if !ctx.leader.is_leader() {
        return Ok(Action::await_change());
    }
    for blocked in &plan.blocked {
        ctx.event(
            pool,
            true,
            "ReplicaNameTaken",
            "CreateReplica",
            format!("InferenceReplica {blocked} exists without label app.kubernetes.io/managed-by=warmpath-controller, so the controller leaves it alone: rename or delete it"),
        )
        .await;
    }
    let networks = &ctx.claims.boundaries.replica_networks;
    let hand_written: Vec<(&InferenceReplica, bool)> = existing
        .iter()
        .filter(|r| !is_managed(r) && r.spec.pool == name)
        .map(|r| {
            (
                r.as_ref(),
                status::replica_accepted(r, Some(pool), networks),
            )
        })
        .collect();
    let managed = wanted.len() - plan.blocked.len();
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let claimed = ctx.claims.claimed_elsewhere(pool);
    let new_status = status::pool_status(
        pool,
        counts,
        managed,
        &hand_written,
        &claimed,
        &ctx.claims.boundaries.tokenizer_root,
        &now,
    );
    if pool.status.as_ref() != Some(&new_status) {
        let was = |type_: &str| {
            pool.status.as_ref().is_none_or(|s| {
                conditions::get(&s.conditions, type_).is_none_or(|c| c.status == "True")
            })
        };
        let (was_accepted, was_claimed, was_allowed) =
            (was(ACCEPTED), was(MODELS_CLAIMED), was(TOKENIZER_ALLOWED));
        ctx.patch_status("pool", pool, &new_status, &[]).await?;
        if let Some(problem) = status::pool_spec_problem(pool).filter(|_| was_accepted) {
            ctx.event(pool, true, "InvalidSpec", "Validate", problem)
                .await;
        }
        // One warning when a condition turns False, not one per resync.
        for (type_, was_true) in [
            (MODELS_CLAIMED, was_claimed),
            (TOKENIZER_ALLOWED, was_allowed),
        ] {
            let turned_false = conditions::get(&new_status.conditions, type_)
                .filter(|c| c.status == "False" && was_true);
            if let Some(c) = turned_false {
                ctx.event(pool, true, &c.reason, "Validate", c.message.clone())
                    .await;
            }
        }
    }
    Ok(Action::requeue(RESYNC))
}

/// The first few items of a list, for an event note (at most 1 kB).
fn summary(items: &[String]) -> String {
    const SHOWN: usize = 5;
    let mut out = items
        .iter()
        .take(SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if items.len() > SHOWN {
        out.push_str(&format!(" and {} more", items.len() - SHOWN));
    }
    if out.len() > 900 {
        let mut end = 900;
        while !out.is_char_boundary(end) {
            end -= 1;
        }
        out.truncate(end);
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn summaries_stay_short() {
        let items: Vec<String> = (0..100).map(|i| format!("replica-{i}")).collect();
        let s = super::summary(&items);
        assert!(s.starts_with("replica-0, replica-1"), "{s}");
        assert!(s.ends_with("and 95 more"), "{s}");
        let long = vec!["x".repeat(2000)];
        assert!(super::summary(&long).len() <= 904);
    }
}
