//! The TenantPolicy reconciler: checks what the schema cannot (the API-key Secret exists, in a
//! namespace the controller may read, and holds the key; the header value is not another
//! policy's; the priority is within the routers' cap) and reports it in the status.

use crate::context::Ctx;
use crate::error::Error;
use crate::status::{self, SecretView};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use std::sync::Arc;
use warmpath_api::conditions::{self, RESOLVED_REFS};
use warmpath_api::v1::TenantPolicy;

pub async fn reconcile(tenant: Arc<TenantPolicy>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    ctx.reconcile("tenant", reconcile_tenant(&tenant, &ctx))
        .await
}

async fn reconcile_tenant(tenant: &TenantPolicy, ctx: &Ctx) -> Result<Action, Error> {
    if tenant.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let ns = tenant
        .namespace()
        .ok_or_else(|| Error::NoNamespace(tenant.name_any()))?;
    let store = ctx.secrets.get(&ns);
    let secret: Option<Arc<Secret>> = match (&tenant.spec.api_key_secret_ref, store) {
        (Some(r), Some(store)) => {
            ctx.synced().await?;
            store.get(&ObjectRef::new(&r.name).within(&ns))
        }
        _ => None,
    };
    let view = match store {
        Some(_) => SecretView::Found(secret.as_deref()),
        None => SecretView::NotReadable,
    };
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let holder = ctx.claims.header_holder(&ns, &tenant.name_any());
    let new_status = status::tenant_status(
        tenant,
        view,
        &ctx.claims.boundaries,
        holder.as_deref(),
        &now,
    );
    if tenant.status.as_ref() != Some(&new_status) {
        let was_resolved = tenant.status.as_ref().is_none_or(|s| {
            conditions::get(&s.conditions, RESOLVED_REFS).is_none_or(|c| c.status == "True")
        });
        ctx.patch_status("tenant", tenant, &new_status, &["apiKeys"])
            .await?;
        let problem = new_status
            .conditions
            .iter()
            .find(|c| c.status == "False" && c.type_ != conditions::READY);
        if let Some(c) = problem.filter(|_| was_resolved) {
            ctx.event(tenant, true, &c.reason, "Validate", c.message.clone())
                .await;
        }
    }
    Ok(Action::await_change())
}
