//! Gateway API Inference Extension pools as a source: for each GIE `InferencePool`
//! (`inference.networking.k8s.io/v1`) the controller keeps a warmpath `InferencePool` of the
//! same name and namespace, owned by the GIE pool, so that users who already have GIE pools
//! point warmpath at them without writing warmpath resources. The pool reconciler
//! ([`crate::pools`]) then turns its ready pods into replicas as for any other pool.
//!
//! Done here rather than in the router: the controller is already the one writer of what the
//! routers read, turns pods into replicas, and has a leader; routers stay read-only on
//! warmpath.dev resources and need no extra RBAC.
//!
//! Two reconcilers: [`reconcile`] (one GIE pool: create, update or remove its warmpath pool)
//! and [`reconcile_managed`] (one managed warmpath pool: delete it once its GIE pool is gone).
//! The second exists because no garbage collector may run (and a reconciler never hears of an
//! object that is already gone from its store), the same reason [`crate::replicas`] exists.

use crate::context::Ctx;
use crate::error::Error;
use crate::naming::{FIELD_MANAGER, MANAGED_BY, MANAGED_BY_LABEL};
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use warmpath_api::gie::{self, InferencePool as GiePool};
use warmpath_api::v1::{
    EndpointPickerSpec, Engine, InferencePool, InferencePoolSpec, PickerFailureMode,
};

/// Label naming where a managed warmpath pool comes from.
pub const SOURCE_LABEL: &str = "warmpath.dev/source";
/// [`SOURCE_LABEL`]'s value on pools mirrored from GIE pools.
pub const SOURCE_GIE: &str = "gie";
/// The label selector of managed pools mirrored from GIE pools.
pub const MANAGED_SELECTOR: &str =
    "warmpath.dev/source=gie,app.kubernetes.io/managed-by=warmpath-controller";
/// Annotation on a GIE pool naming the models it serves, comma-separated: GIE pools name no
/// models (requests carry them), and warmpath routes by model.
pub const MODELS_ANNOTATION: &str = "warmpath.dev/models";
/// Optional annotation on a GIE pool: `vllm` (default) or `sglang`.
pub const ENGINE_ANNOTATION: &str = "warmpath.dev/engine";

/// Resync period: repairs anything a dropped watch event left behind.
const RESYNC: Duration = Duration::from_secs(300);

/// Why a GIE pool cannot be mirrored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TranslateError {
    #[error("annotation {MODELS_ANNOTATION} is missing or empty: GIE pools name no models, so warmpath cannot route to this pool until the annotation lists the models it serves, comma-separated (e.g. `kubectl annotate inferencepools.inference.networking.k8s.io NAME {MODELS_ANNOTATION}=meta-llama/Llama-3.1-8B-Instruct`)")]
    NoModels,
    #[error("annotation {MODELS_ANNOTATION} lists {0} models; at most 64 are allowed")]
    TooManyModels(usize),
    #[error("annotation {MODELS_ANNOTATION} has a model name longer than 256 characters")]
    ModelTooLong,
    #[error("annotation {ENGINE_ANNOTATION} is {0:?}: use vllm or sglang")]
    BadEngine(String),
    #[error("spec.selector.matchLabels is empty: it would select no pods")]
    NoSelector,
    #[error("spec.targetPorts is empty or its first port is not in 1-65535")]
    NoTargetPort,
}

/// A GIE pool translated: the warmpath spec, plus what the translation had to leave out.
#[derive(Debug, Clone, PartialEq)]
pub struct Translated {
    pub spec: InferencePoolSpec,
    /// Warnings for the log (each logged once per pool).
    pub warnings: Vec<String>,
}

/// The warmpath pool spec for a GIE pool: its selector, its first target port, the models
/// and engine from its annotations, every other setting at its default.
pub fn translate(pool: &GiePool) -> Result<Translated, TranslateError> {
    let annotations = pool.annotations();
    let mut models: Vec<String> = Vec::new();
    for m in annotations
        .get(MODELS_ANNOTATION)
        .map(String::as_str)
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|m| !m.is_empty())
    {
        // The CRD's list is a set: a repeated name would be refused.
        if !models.iter().any(|x| x == m) {
            models.push(m.to_owned());
        }
    }
    if models.is_empty() {
        return Err(TranslateError::NoModels);
    }
    if models.len() > 64 {
        return Err(TranslateError::TooManyModels(models.len()));
    }
    if models.iter().any(|m| m.len() > 256) {
        return Err(TranslateError::ModelTooLong);
    }
    let engine = match annotations.get(ENGINE_ANNOTATION).map(|e| e.trim()) {
        None | Some("") => Engine::default(),
        Some(e) => serde_json::from_value(serde_json::Value::String(e.to_ascii_lowercase()))
            .map_err(|_| TranslateError::BadEngine(e.to_owned()))?,
    };
    let selector = &pool.spec.selector.match_labels;
    if selector.is_empty() {
        return Err(TranslateError::NoSelector);
    }
    let port = pool
        .spec
        .target_ports
        .first()
        .map(|p| p.number)
        .filter(|p| (1..=65535).contains(p))
        .ok_or(TranslateError::NoTargetPort)?;
    let mut warnings = Vec::new();
    if pool.spec.target_ports.len() > 1 {
        let all: Vec<String> = pool
            .spec
            .target_ports
            .iter()
            .map(|p| p.number.to_string())
            .collect();
        warnings.push(format!(
            "spec.targetPorts lists {} ports ({}); a warmpath pool has one engine port per pod, so only {port} gets traffic",
            all.len(),
            all.join(", ")
        ));
    }
    if pool.spec.app_protocol.as_deref() == Some(gie::APP_PROTOCOL_H2C) {
        warnings.push(format!(
            "spec.appProtocol is {}, but warmpath speaks HTTP/1.1 to engines (vLLM and SGLang serve both)",
            gie::APP_PROTOCOL_H2C
        ));
    }
    Ok(Translated {
        spec: InferencePoolSpec {
            models,
            lora_adapters: Vec::new(),
            selector: Some(selector.clone()),
            target_port: Some(port),
            role: Default::default(),
            engine,
            metrics: Default::default(),
            kv_events: None,
            scheduling: Default::default(),
            endpoint_picker: Some(EndpointPickerSpec {
                failure_mode: failure_mode(pool),
            }),
        },
        warnings,
    })
}

/// The GIE pool's `endpointPickerRef.failureMode` for warmpath's picker: `FailOpen` when it says
/// so, else GIE's default `FailClose` (which its CRD also fills in).
fn failure_mode(pool: &GiePool) -> PickerFailureMode {
    let said = pool
        .spec
        .endpoint_picker_ref
        .as_ref()
        .and_then(|r| r.failure_mode.as_deref());
    if said == Some("FailOpen") {
        PickerFailureMode::FailOpen
    } else {
        PickerFailureMode::FailClose
    }
}

/// The warmpath pool the controller applies for `gie` (server-side apply): same name and
/// namespace, labelled as managed and from GIE, owned by the GIE pool.
pub fn desired_pool(gie: &GiePool, spec: InferencePoolSpec) -> InferencePool {
    let mut pool = InferencePool::new(&gie.name_any(), spec);
    pool.metadata.namespace = gie.namespace();
    pool.metadata.labels = Some(BTreeMap::from([
        (MANAGED_BY_LABEL.to_owned(), MANAGED_BY.to_owned()),
        (SOURCE_LABEL.to_owned(), SOURCE_GIE.to_owned()),
    ]));
    // Controller, not blocking: blockOwnerDeletion would need update on GIE's
    // inferencepools/finalizers, and nothing has to wait for the warmpath pool.
    pool.metadata.owner_references = Some(gie.controller_owner_ref(&()).into_iter().collect());
    pool
}

/// The uid of the GIE pool controlling `pool`, when one does.
pub fn gie_owner(pool: &InferencePool) -> Option<(&str, &str)> {
    pool.owner_references()
        .iter()
        .find(|o| {
            o.controller == Some(true)
                && o.kind == "InferencePool"
                && o.api_version == GiePool::api_version(&())
        })
        .map(|o| (o.name.as_str(), o.uid.as_str()))
}

/// Whether `pool` is a warmpath pool this controller mirrors from a GIE pool.
pub fn is_mirrored(pool: &InferencePool) -> bool {
    let labels = pool.labels();
    labels.get(SOURCE_LABEL).map(String::as_str) == Some(SOURCE_GIE)
        && labels.get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY)
        && gie_owner(pool).is_some()
}

/// What the GIE reconcilers share.
pub struct GieCtx {
    pub ctx: Arc<Ctx>,
    /// `uid/message` of every warning already logged, so each is logged once per pool.
    warned: Mutex<HashSet<String>>,
}

impl GieCtx {
    pub fn new(ctx: Arc<Ctx>) -> Self {
        Self {
            ctx,
            warned: Mutex::default(),
        }
    }

    /// True the first time `message` is seen for the pool `uid`.
    fn first_time(&self, uid: &str, message: &str) -> bool {
        let mut warned = self.warned.lock().unwrap_or_else(|e| e.into_inner());
        warned.insert(format!("{uid}/{message}"))
    }

    /// True the first time `problem` (something that stops mirroring) is seen for `uid`.
    fn first_problem(&self, uid: &str, problem: &str) -> bool {
        self.first_time(uid, &format!("!{problem}"))
    }

    /// Forgets a pool's problems (it is mirrored again: the next problem is news), keeping
    /// its warnings, which the pool keeps for as long as it is mirrored.
    fn forget_problems(&self, uid: &str) {
        self.forget(&format!("{uid}/!"));
    }

    /// Forgets every message of a pool (it is gone).
    fn forget_all(&self, uid: &str) {
        self.forget(&format!("{uid}/"));
    }

    fn forget(&self, prefix: &str) {
        let mut warned = self.warned.lock().unwrap_or_else(|e| e.into_inner());
        warned.retain(|w| !w.starts_with(prefix));
    }
}

/// Retries failed reconciles after a short pause (the API server or a conflict).
pub fn error_policy<K>(_obj: Arc<K>, error: &Error, _ctx: Arc<GieCtx>) -> Action {
    tracing::warn!(%error, "GIE reconcile failed; retrying");
    Action::requeue(Duration::from_secs(2))
}

/// Reconciles one GIE pool.
pub async fn reconcile(pool: Arc<GiePool>, gctx: Arc<GieCtx>) -> Result<Action, Error> {
    gctx.ctx.reconcile("gie", reconcile_gie(&pool, &gctx)).await
}

async fn reconcile_gie(gie: &GiePool, gctx: &GieCtx) -> Result<Action, Error> {
    let ctx = &gctx.ctx;
    if gie.meta().deletion_timestamp.is_some() {
        // Its warmpath pool goes when it is gone (reconcile_managed).
        return Ok(Action::await_change());
    }
    let name = gie.name_any();
    let ns = gie
        .namespace()
        .ok_or_else(|| Error::NoNamespace(name.clone()))?;
    let uid = gie.uid().unwrap_or_default();
    let api: Api<InferencePool> = Api::namespaced(ctx.client.clone(), &ns);
    let existing = api.get_opt(&name).await?;
    if let Some(p) = &existing {
        if gie_owner(p).map(|(_, u)| u) != Some(uid.as_str()) {
            let message = format!("InferencePool.warmpath.dev {ns}/{name} exists and is not managed for this GIE pool, so the controller leaves it alone: rename or delete it to have the GIE pool mirrored");
            if gctx.first_problem(&uid, &message) {
                tracing::warn!(pool = %name, %ns, "{message}");
                ctx.event(gie, true, "PoolNameTaken", "MirrorPool", message)
                    .await;
            }
            return Ok(Action::requeue(RESYNC));
        }
    }
    let translated = match translate(gie) {
        Ok(t) => t,
        Err(problem) => {
            if let Some(p) = existing.as_ref().filter(|_| ctx.leader.is_leader()) {
                if delete_pool(&api, p).await? {
                    tracing::info!(pool = %name, %ns, %problem, "deleted the warmpath pool of a GIE pool that can no longer be mirrored");
                }
            }
            let message = problem.to_string();
            if gctx.first_problem(&uid, &message) {
                tracing::warn!(pool = %name, %ns, "GIE pool not routed: {message}");
                ctx.event(gie, true, "NotMirrored", "MirrorPool", message)
                    .await;
            }
            return Ok(Action::await_change());
        }
    };
    gctx.forget_problems(&uid);
    for warning in &translated.warnings {
        if gctx.first_time(&uid, warning) {
            tracing::warn!(pool = %name, %ns, "GIE pool: {warning}");
        }
    }
    let unchanged = existing
        .as_ref()
        .is_some_and(|p| p.spec == translated.spec && is_mirrored(p));
    if unchanged || !ctx.leader.is_leader() {
        return Ok(Action::requeue(RESYNC));
    }
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(desired_pool(gie, translated.spec)),
    )
    .await?;
    let what = if existing.is_some() {
        "updated"
    } else {
        "created"
    };
    tracing::info!(pool = %name, %ns, "{what} the warmpath pool of a GIE pool");
    ctx.event(
        gie,
        false,
        "PoolMirrored",
        "MirrorPool",
        format!("{what} InferencePool.warmpath.dev {ns}/{name}: warmpath routes to this pool's ready pods"),
    )
    .await;
    Ok(Action::requeue(RESYNC))
}

/// Reconciles one managed warmpath pool mirrored from a GIE pool: deletes it when that GIE
/// pool no longer exists (or was replaced by another of the same name).
pub async fn reconcile_managed(
    pool: Arc<InferencePool>,
    gctx: Arc<GieCtx>,
) -> Result<Action, Error> {
    gctx.ctx
        .reconcile("gie-managed", reconcile_mirrored(&pool, &gctx))
        .await
}

async fn reconcile_mirrored(pool: &InferencePool, gctx: &GieCtx) -> Result<Action, Error> {
    let ctx = &gctx.ctx;
    if !is_mirrored(pool) || pool.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let Some((owner, owner_uid)) = gie_owner(pool) else {
        return Ok(Action::await_change());
    };
    let name = pool.name_any();
    let ns = pool
        .namespace()
        .ok_or_else(|| Error::NoNamespace(name.clone()))?;
    // Asked of the API server, not a cache: a stale cache must never delete a live pool.
    let gie_api: Api<GiePool> = Api::namespaced(ctx.client.clone(), &ns);
    let alive = gie_api
        .get_opt(owner)
        .await?
        .is_some_and(|g| g.uid().as_deref() == Some(owner_uid));
    if alive || !ctx.leader.is_leader() {
        return Ok(Action::requeue(RESYNC));
    }
    let api: Api<InferencePool> = Api::namespaced(ctx.client.clone(), &ns);
    gctx.forget_all(owner_uid);
    if delete_pool(&api, pool).await? {
        tracing::info!(pool = %name, %ns, gie_pool = %owner, "deleted the warmpath pool of a deleted GIE pool");
    }
    Ok(Action::await_change())
}

/// Deletes `pool` if it is still the object read (uid precondition); false when it was gone
/// already or replaced (both fine: someone else got there first).
async fn delete_pool(api: &Api<InferencePool>, pool: &InferencePool) -> Result<bool, Error> {
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: pool.uid(),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(&pool.name_any(), &params).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Whether the API server serves GIE's `inference.networking.k8s.io/v1` `inferencepools`.
pub async fn served(client: &kube::Client) -> Result<bool, kube::Error> {
    let gv = format!("{}/{}", gie::GROUP, gie::VERSION);
    match client.list_api_group_resources(&gv).await {
        Ok(list) => Ok(list.resources.iter().any(|r| r.name == gie::PLURAL)),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gie_pool(annotations: &[(&str, &str)], ports: &[i32]) -> GiePool {
        let mut p: GiePool = serde_json::from_value(serde_json::json!({
            "apiVersion": "inference.networking.k8s.io/v1",
            "kind": "InferencePool",
            "metadata": { "name": "llama", "namespace": "ns", "uid": "gie-uid" },
            "spec": {
                "selector": { "matchLabels": { "app": "vllm" } },
                "targetPorts": ports.iter().map(|n| serde_json::json!({ "number": n })).collect::<Vec<_>>(),
                "endpointPickerRef": { "name": "epp", "port": { "number": 9002 } }
            }
        }))
        .unwrap();
        p.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        p
    }

    #[test]
    fn a_gie_pool_becomes_a_warmpath_spec() {
        let t = translate(&gie_pool(
            &[(MODELS_ANNOTATION, " llama-8b, ,qwen,llama-8b ")],
            &[8000],
        ))
        .unwrap();
        assert_eq!(t.spec.models, ["llama-8b", "qwen"]);
        assert_eq!(
            t.spec.selector,
            Some(BTreeMap::from([("app".into(), "vllm".into())]))
        );
        assert_eq!(t.spec.target_port, Some(8000));
        assert_eq!(t.spec.engine, Engine::Vllm);
        assert!(t.spec.kv_events.is_none() && t.spec.metrics.enabled);
        assert!(t.warnings.is_empty(), "{:?}", t.warnings);
        // The picker's failure mode follows `endpointPickerRef.failureMode` (GIE's default when
        // absent: FailClose).
        let mode = |t: Translated| t.spec.endpoint_picker.map(|p| p.failure_mode);
        assert_eq!(mode(t), Some(PickerFailureMode::FailClose));
        let mut open = gie_pool(&[(MODELS_ANNOTATION, "m")], &[8000]);
        open.spec.endpoint_picker_ref.as_mut().unwrap().failure_mode = Some("FailOpen".into());
        assert_eq!(
            mode(translate(&open).unwrap()),
            Some(PickerFailureMode::FailOpen)
        );
    }

    #[test]
    fn extra_ports_and_h2c_are_warned_about_and_the_engine_is_read() {
        let mut p = gie_pool(
            &[(MODELS_ANNOTATION, "m"), (ENGINE_ANNOTATION, "SGLang")],
            &[30000, 30001],
        );
        p.spec.app_protocol = Some(gie::APP_PROTOCOL_H2C.into());
        let t = translate(&p).unwrap();
        assert_eq!(t.spec.target_port, Some(30000));
        assert_eq!(t.spec.engine, Engine::Sglang);
        assert_eq!(t.warnings.len(), 2, "{:?}", t.warnings);
        assert!(t.warnings[0].contains("30000, 30001"), "{}", t.warnings[0]);
        assert!(t.warnings[1].contains("HTTP/1.1"), "{}", t.warnings[1]);
    }

    #[test]
    fn what_cannot_be_mirrored_says_why() {
        assert_eq!(
            translate(&gie_pool(&[], &[8000])),
            Err(TranslateError::NoModels)
        );
        assert_eq!(
            translate(&gie_pool(&[(MODELS_ANNOTATION, " , ")], &[8000])),
            Err(TranslateError::NoModels)
        );
        assert_eq!(
            translate(&gie_pool(
                &[(MODELS_ANNOTATION, "m"), (ENGINE_ANNOTATION, "tgi")],
                &[8000]
            )),
            Err(TranslateError::BadEngine("tgi".into()))
        );
        assert_eq!(
            translate(&gie_pool(&[(MODELS_ANNOTATION, "m")], &[])),
            Err(TranslateError::NoTargetPort)
        );
        let mut unselective = gie_pool(&[(MODELS_ANNOTATION, "m")], &[8000]);
        unselective.spec.selector.match_labels.clear();
        assert_eq!(translate(&unselective), Err(TranslateError::NoSelector));
        let many = (0..65)
            .map(|i| format!("m{i}"))
            .collect::<Vec<_>>()
            .join(",");
        assert_eq!(
            translate(&gie_pool(&[(MODELS_ANNOTATION, &many)], &[8000])),
            Err(TranslateError::TooManyModels(65))
        );
    }

    #[test]
    fn the_mirrored_pool_is_labelled_and_owned_by_the_gie_pool() {
        let g = gie_pool(&[(MODELS_ANNOTATION, "m")], &[8000]);
        let p = desired_pool(&g, translate(&g).unwrap().spec);
        assert_eq!(p.name_any(), "llama");
        assert_eq!(p.namespace().as_deref(), Some("ns"));
        assert!(is_mirrored(&p));
        assert_eq!(gie_owner(&p), Some(("llama", "gie-uid")));
        let owner = &p.owner_references()[0];
        assert_eq!(owner.api_version, "inference.networking.k8s.io/v1");
        assert_eq!(owner.controller, Some(true));
        assert_ne!(owner.block_owner_deletion, Some(true));
        // A hand-written pool (no labels, no owner) is not ours.
        let mut hand = p.clone();
        hand.metadata.labels = None;
        assert!(!is_mirrored(&hand));
        hand.metadata.labels = p.metadata.labels.clone();
        hand.metadata.owner_references = None;
        assert!(!is_mirrored(&hand));
    }
}
