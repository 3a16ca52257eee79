//! What every reconciler shares: the client, leadership, metrics, the event recorder and the
//! reflector stores of one watch scope, plus the few API writes they have in common.

use crate::error::Error;
use crate::lease::Leadership;
use crate::metrics::{ControllerLabel, Metrics, ReconcileLabels};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::reflector::Store;
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use warmpath_api::v1::{InferencePool, InferenceReplica};

/// How long a store may take to fill before a reconcile gives up on it (and retries later).
const SYNC_WAIT: Duration = Duration::from_secs(30);

pub struct Ctx {
    pub client: Client,
    pub leader: Leadership,
    pub metrics: Arc<Metrics>,
    pub recorder: Recorder,
    /// Pods of the scope, trimmed to what readiness needs.
    pub pods: Store<Pod>,
    /// Every InferenceReplica of the scope (the pool controller's view).
    pub replicas: Store<InferenceReplica>,
    /// Every InferencePool of the scope (the replica controller's view).
    pub pools: Store<InferencePool>,
    /// Secrets by namespace, for the namespaces the controller may read them in.
    pub secrets: BTreeMap<String, Store<Secret>>,
    /// True once every store above has been filled.
    pub synced: watch::Receiver<bool>,
    /// Every scope's pools and policies, for what belongs to whom; and the routers'
    /// boundaries.
    pub claims: Arc<crate::claims::Claims>,
}

impl Ctx {
    /// Waits until the scope's stores have been filled once, so that an empty cache is never
    /// taken for an empty namespace (which would delete every managed replica at startup).
    ///
    /// A watch channel rather than `Store::wait_until_ready`: that future wakes only its
    /// latest poller, so two reconciles waiting at once could sleep forever.
    pub async fn synced(&self) -> Result<(), Error> {
        let mut rx = self.synced.clone();
        let ok = matches!(
            tokio::time::timeout(SYNC_WAIT, rx.wait_for(|s| *s)).await,
            Ok(Ok(_))
        );
        if ok {
            Ok(())
        } else {
            Err(Error::NotSynced("watch".into()))
        }
    }

    /// Runs one reconcile with metrics; does nothing (and writes nothing) on a standby.
    pub async fn reconcile<F>(&self, controller: &'static str, work: F) -> Result<Action, Error>
    where
        F: Future<Output = Result<Action, Error>>,
    {
        if !self.leader.is_leader() {
            self.metrics
                .reconciles
                .get_or_create(&ReconcileLabels {
                    controller,
                    result: "standby",
                })
                .inc();
            return Ok(Action::await_change());
        }
        let start = Instant::now();
        tracing::debug!(controller, "reconcile");
        let result = work.await;
        tracing::debug!(controller, ok = result.is_ok(), took = ?start.elapsed(), "reconciled");
        self.metrics
            .reconcile_duration
            .get_or_create(&ControllerLabel { controller })
            .observe(start.elapsed().as_secs_f64());
        self.metrics
            .reconciles
            .get_or_create(&ReconcileLabels {
                controller,
                result: if result.is_ok() { "ok" } else { "error" },
            })
            .inc();
        result
    }

    /// Writes `status` through the status subresource (merge patch of the whole status).
    pub async fn patch_status<K, S>(
        &self,
        controller: &'static str,
        obj: &K,
        status: &S,
        nulls: &[&str],
    ) -> Result<(), Error>
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
        S: Serialize,
    {
        if !self.leader.is_leader() {
            return Ok(());
        }
        let ns = obj
            .namespace()
            .ok_or_else(|| Error::NoNamespace(obj.name_any()))?;
        let patch = StatusPatch::new(status, nulls)?;
        let api: Api<K> = Api::namespaced(self.client.clone(), &ns);
        api.patch_status(
            &obj.name_any(),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await?;
        self.metrics
            .status_writes
            .get_or_create(&ControllerLabel { controller })
            .inc();
        Ok(())
    }

    /// Publishes an Event about `obj` (failures are logged: events are best effort).
    pub async fn event<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        warning: bool,
        reason: &str,
        action: &str,
        note: String,
    ) {
        if !self.leader.is_leader() {
            return;
        }
        let ev = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.to_owned(),
            note: Some(note),
            action: action.to_owned(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&ev, &obj.object_ref(&())).await {
            tracing::warn!(error = %e, reason, "publishing an event failed");
        }
    }
}

/// The body of a status merge patch: `status` alone, so it can never touch spec or metadata.
#[derive(Debug, Serialize)]
struct StatusPatch {
    status: serde_json::Value,
}

impl StatusPatch {
    /// The whole of `status`, plus an explicit `null` for each of `nulls` the status leaves
    /// out: a merge patch keeps the fields it does not mention, so the ones to clear are named.
    fn new<S: Serialize>(status: &S, nulls: &[&str]) -> Result<Self, Error> {
        let mut status = serde_json::to_value(status).map_err(|source| Error::Serialize {
            what: "status",
            source,
        })?;
        if let Some(map) = status.as_object_mut() {
            for key in nulls {
                map.entry(*key).or_insert(serde_json::Value::Null);
            }
        }
        Ok(Self { status })
    }
}

/// Retries failed reconciles after a short pause (the API server or a conflict).
pub fn error_policy<K>(_obj: Arc<K>, error: &Error, _ctx: Arc<Ctx>) -> Action {
    tracing::warn!(%error, "reconcile failed; retrying");
    Action::requeue(Duration::from_secs(2))
}

#[cfg(test)]
mod tests {
    use super::StatusPatch;
    use warmpath_api::v1::TenantPolicyStatus;

    #[test]
    fn status_patches_carry_only_the_status_and_clear_named_fields() {
        let status = TenantPolicyStatus {
            observed_generation: Some(2),
            api_keys: None,
            conditions: Vec::new(),
        };
        let body = |nulls: &[&str]| {
            serde_json::to_value(StatusPatch::new(&status, nulls).unwrap()).unwrap()
        };
        assert_eq!(
            body(&["apiKeys"]),
            serde_json::json!({ "status": { "observedGeneration": 2, "apiKeys": null } })
        );
        assert_eq!(
            body(&[]),
            serde_json::json!({ "status": { "observedGeneration": 2 } })
        );
        // A field the status has is sent as it is, not cleared.
        let with_keys = TenantPolicyStatus {
            api_keys: Some(3),
            ..status
        };
        assert_eq!(
            serde_json::to_value(StatusPatch::new(&with_keys, &["apiKeys"]).unwrap()).unwrap(),
            serde_json::json!({ "status": { "observedGeneration": 2, "apiKeys": 3 } })
        );
    }
}
