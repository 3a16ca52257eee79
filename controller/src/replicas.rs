//! The InferenceReplica reconciler: every replica's status (hand-written ones included), and
//! the deletion of managed replicas whose pool is gone (the owner reference would have the
//! garbage collector do it, but a controller must not depend on one running).

use crate::context::Ctx;
use crate::desired::is_managed;
use crate::error::Error;
use crate::status;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{DeleteParams, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};
use std::sync::Arc;
use std::time::Duration;
use warmpath_api::conditions::{self, RESOLVED_REFS};
use warmpath_api::v1::{InferencePool, InferenceReplica};

const RESYNC: Duration = Duration::from_secs(300);

pub async fn reconcile(replica: Arc<InferenceReplica>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    ctx.reconcile("replica", reconcile_replica(&replica, &ctx))
        .await
}

async fn reconcile_replica(replica: &InferenceReplica, ctx: &Ctx) -> Result<Action, Error> {
    if replica.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    ctx.synced().await?;
    let name = replica.name_any();
    let ns = replica
        .namespace()
        .ok_or_else(|| Error::NoNamespace(name.clone()))?;
    let pool_name = &replica.spec.pool;
    let mut pool = ctx
        .pools
        .get(&ObjectRef::<InferencePool>::new(pool_name).within(&ns));
    if pool.is_none() && is_managed(replica) {
        // The cache says the pool is gone: make sure before deleting what it owned.
        let pools: Api<InferencePool> = Api::namespaced(ctx.client.clone(), &ns);
        match pools.get_opt(pool_name).await? {
            Some(p) => pool = Some(Arc::new(p)),
            None => {
                let api: Api<InferenceReplica> = Api::namespaced(ctx.client.clone(), &ns);
                let dp = DeleteParams {
                    preconditions: Some(Preconditions {
                        uid: replica.meta().uid.clone(),
                        resource_version: None,
                    }),
                    ..Default::default()
                };
                match api.delete(&name, &dp).await {
                    Ok(_) => {
                        ctx.metrics.replicas_deleted.inc();
                        tracing::info!(replica = %name, %ns, pool = %pool_name, "deleted replica of a deleted pool");
                    }
                    Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
                    Err(e) => return Err(e.into()),
                }
                return Ok(Action::await_change());
            }
        }
    }
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let new_status = status::replica_status(
        replica,
        pool.as_deref(),
        &ctx.claims.boundaries.replica_networks,
        &now,
    );
    if replica.status.as_ref() != Some(&new_status) {
        let was_resolved = replica.status.as_ref().is_none_or(|s| {
            conditions::get(&s.conditions, RESOLVED_REFS).is_none_or(|c| c.status == "True")
        });
        ctx.patch_status("replica", replica, &new_status, &[])
            .await?;
        let problem = new_status
            .conditions
            .iter()
            .find(|c| c.status == "False" && c.type_ != conditions::READY);
        if let Some(c) = problem.filter(|_| was_resolved) {
            ctx.event(replica, true, &c.reason, "Validate", c.message.clone())
                .await;
        }
    }
    Ok(if is_managed(replica) {
        Action::requeue(RESYNC)
    } else {
        Action::await_change()
    })
}
