//! What one namespace's resources are judged against: a model, or a tenant header value,
//! belongs to the namespace (the policy) that claimed it first wherever it is watched, by the
//! routers' rules ([`warmpath_api::boundaries`]). Each watch scope has its own stores
//! ([`crate::run`]), so the reconcilers look at every scope's pools and policies here; and when
//! who holds a claim changes, every scope's pools (or policies) are reconciled again, since an
//! object's status can change without the object changing (an older pool elsewhere is deleted).

use futures_util::Stream;
use kube::runtime::reflector::Store;
use kube::ResourceExt;
use std::collections::HashMap;
use std::sync::Mutex;
use tokio::sync::watch;
use warmpath_api::boundaries::{self, Boundaries};
use warmpath_api::v1::{InferencePool, TenantPolicy};

/// Every scope's pools and tenant policies, and who holds each claim as last seen.
pub struct Claims {
    pub boundaries: Boundaries,
    pools: Vec<Store<InferencePool>>,
    tenants: Vec<Store<TenantPolicy>>,
    models_seen: Mutex<HashMap<String, String>>,
    headers_seen: Mutex<HashMap<String, String>>,
    models_changed: watch::Sender<u64>,
    headers_changed: watch::Sender<u64>,
}

impl Claims {
    pub fn new(
        boundaries: Boundaries,
        pools: Vec<Store<InferencePool>>,
        tenants: Vec<Store<TenantPolicy>>,
    ) -> Self {
        Self {
            boundaries,
            pools,
            tenants,
            models_seen: Default::default(),
            headers_seen: Default::default(),
            models_changed: watch::channel(0).0,
            headers_changed: watch::channel(0).0,
        }
    }

    /// Each model's owning namespace.
    pub fn model_owners(&self) -> HashMap<String, String> {
        let pools: Vec<_> = self.pools.iter().flat_map(|s| s.state()).collect();
        boundaries::model_owners(pools.iter().map(|p| p.as_ref()))
    }

    /// The models of `pool` that another namespace owns, with their owner.
    pub fn claimed_elsewhere(&self, pool: &InferencePool) -> Vec<(String, String)> {
        boundaries::claimed_elsewhere(
            &pool.namespace().unwrap_or_default(),
            &pool.spec.models,
            &self.model_owners(),
            &self.boundaries,
        )
    }

    /// For each policy (`ns/name`) whose header value an earlier policy holds, that policy.
    /// Policies being deleted or with a header value of another namespace's form claim
    /// nothing, as in the routers.
    pub fn header_holders(&self) -> HashMap<String, String> {
        let policies: Vec<_> = self.tenants.iter().flat_map(|s| s.state()).collect();
        let live: Vec<&TenantPolicy> = policies
            .iter()
            .map(|p| p.as_ref())
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter(|p| {
                let ns = p.namespace().unwrap_or_default();
                p.spec
                    .header
                    .as_deref()
                    .is_none_or(|h| boundaries::header_problem(&ns, h).is_none())
            })
            .collect();
        let id =
            |p: &TenantPolicy| format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any());
        let claims: Vec<_> = live
            .iter()
            .map(|p| {
                let header = p.spec.header.clone().unwrap_or_else(|| {
                    self.boundaries
                        .tenant_name(&p.namespace().unwrap_or_default(), &p.name_any())
                });
                (&p.metadata, vec![header])
            })
            .collect();
        boundaries::taken_claims(&claims)
            .into_iter()
            .enumerate()
            .filter_map(|(i, lost)| {
                let (_, holder) = lost.into_iter().next()?;
                Some((id(live[i]), id(live[holder])))
            })
            .collect()
    }

    /// The policy holding the header value of policy `ns/name`, if another does.
    pub fn header_holder(&self, ns: &str, name: &str) -> Option<String> {
        self.header_holders().remove(&format!("{ns}/{name}"))
    }

    /// A pool changed somewhere: if a model changed hands, every pool is reconciled again.
    pub fn pools_touched(&self) {
        let now = self.model_owners();
        let mut seen = self.models_seen.lock().unwrap_or_else(|e| e.into_inner());
        if *seen != now {
            *seen = now;
            self.models_changed.send_modify(|g| *g += 1);
        }
    }

    /// A policy changed somewhere: if a header value changed hands, every policy is
    /// reconciled again.
    pub fn tenants_touched(&self) {
        let now = self.header_holders();
        let mut seen = self.headers_seen.lock().unwrap_or_else(|e| e.into_inner());
        if *seen != now {
            *seen = now;
            self.headers_changed.send_modify(|g| *g += 1);
        }
    }

    /// Yields each time a model changes hands.
    pub fn on_models_changed(&self) -> impl Stream<Item = ()> + Send + 'static {
        changes(self.models_changed.subscribe())
    }

    /// Yields each time a header value changes hands.
    pub fn on_headers_changed(&self) -> impl Stream<Item = ()> + Send + 'static {
        changes(self.headers_changed.subscribe())
    }
}

fn changes(rx: watch::Receiver<u64>) -> impl Stream<Item = ()> + Send + 'static {
    futures_util::stream::unfold(rx, |mut rx| async move {
        rx.changed().await.ok()?;
        Some(((), rx))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::tests::store_with;
    use futures_util::StreamExt;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use kube::runtime::watcher;

    fn created<K: kube::Resource>(mut obj: K, ns: &str, seconds: i64) -> K {
        let meta = obj.meta_mut();
        meta.namespace = Some(ns.into());
        meta.creation_timestamp = Some(Time(
            k8s_openapi::jiff::Timestamp::from_second(seconds).unwrap(),
        ));
        obj
    }

    fn pool(name: &str, models: &[&str]) -> InferencePool {
        InferencePool::new(
            name,
            serde_json::from_value(serde_json::json!({ "models": models })).unwrap(),
        )
    }

    fn policy(name: &str, header: Option<&str>) -> TenantPolicy {
        TenantPolicy::new(
            name,
            serde_json::from_value(serde_json::json!({ "header": header })).unwrap(),
        )
    }

    /// Claims are judged across scopes (one store per watched namespace), and a change of
    /// owner wakes the reconcilers while an unrelated change does not.
    #[tokio::test]
    async fn claims_span_every_scope_and_a_change_of_hands_reconciles_again() {
        let (a, _) = store_with(vec![created(pool("serving", &["llama"]), "a", 10)]);
        let (b, mut b_writer) = store_with(vec![created(pool("grab", &["llama", "own"]), "b", 20)]);
        let (ta, _) = store_with(vec![created(policy("acme", Some("acme")), "a", 10)]);
        let (tb, _) = store_with(vec![
            created(policy("acme", Some("acme")), "b", 5),
            created(policy("forged", Some("a/acme")), "b", 1),
            created(policy("plain", None), "b", 30),
        ]);
        let claims = Claims::new(Boundaries::default(), vec![a, b.clone()], vec![ta, tb]);
        let grab = b.state().into_iter().next().unwrap();
        assert_eq!(
            claims.claimed_elsewhere(&grab),
            [("llama".to_owned(), "a".to_owned())]
        );
        // b's policy is older: a's loses the header value. The forged one claims nothing.
        assert_eq!(claims.header_holder("a", "acme").as_deref(), Some("b/acme"));
        assert_eq!(claims.header_holder("b", "plain"), None);
        assert_eq!(claims.header_holders().len(), 1);

        let mut changed = Box::pin(claims.on_models_changed());
        claims.pools_touched();
        assert_eq!(
            changed.next().await,
            Some(()),
            "first look: owners recorded"
        );
        claims.pools_touched();
        let quiet = tokio::time::timeout(std::time::Duration::from_millis(50), changed.next());
        assert!(quiet.await.is_err(), "nothing changed hands");
        // An older pool appears in b: llama changes hands.
        b_writer.apply_watcher_event(&watcher::Event::Apply(created(
            pool("older", &["llama"]),
            "b",
            1,
        )));
        claims.pools_touched();
        assert_eq!(changed.next().await, Some(()));
        assert_eq!(claims.model_owners()["llama"], "b");
    }
}
