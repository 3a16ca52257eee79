//! The routing table: model → candidate replicas (with their pool), plus everything else a
//! request needs from the configuration, built once per (re)load and swapped atomically.
//!
//! Requests take an `Arc<Table>` when they start and keep it to the end, so a reload never
//! changes the rules under an in-flight request.

use super::replica::{ReplicaRegistry, ReplicaState};
use super::tokens::PreciseModel;
use crate::config::{Config, Role};
use crate::metrics::{Metrics, RouteLabels, RouteMetrics};
use crate::tenants::{Directory, Objectives};
use bytes::Bytes;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
use warmpath_routing::prompt::BlockHasher;
use warmpath_routing::scheduler::Scheduler;

/// A replica that may answer a model, with the pool it answers for.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub pool: Arc<str>,
    pub replica: Arc<ReplicaState>,
    /// This route's metric series (the model is the table entry's).
    pub metrics: Arc<RouteMetrics>,
}

#[derive(Debug)]
pub struct Table {
    pub config: Arc<Config>,
    /// Serving candidates per model (pools with role `both` or `decode`).
    models: HashMap<String, Arc<[Candidate]>>,
    /// Prefill candidates per model (pools with role `prefill`), for the P/D split.
    prefill: HashMap<String, Arc<[Candidate]>>,
    pub scheduler: Scheduler,
    /// Pools with their own weights (`pools[].weights`, an InferencePool's `scheduling`).
    pool_schedulers: HashMap<Arc<str>, Scheduler>,
    pub hasher: BlockHasher,
    /// `/v1/models` answer, rendered once.
    pub models_json: Bytes,
    pub stale_after: Duration,
    /// Who requests belong to, under this table's configuration.
    pub tenants: Directory,
    /// The objectives requests may name, under this table's configuration.
    pub objectives: Objectives,
    /// Models routed from KV events: how to tokenize their requests.
    precise: HashMap<String, Arc<PreciseModel>>,
    /// Models that are LoRA adapters (`pools[].lora_adapters`).
    adapters: HashSet<String>,
}

impl Table {
    /// Build from a validated configuration; replicas come from `registry` (already synced).
    pub fn build(config: Arc<Config>, registry: &ReplicaRegistry, metrics: &Metrics) -> Self {
        let mut models: HashMap<String, Vec<Candidate>> = HashMap::new();
        let mut prefill: HashMap<String, Vec<Candidate>> = HashMap::new();
        let mut model_names: Vec<&str> = Vec::new();
        let mut precise = HashMap::new();
        let mut pool_schedulers = HashMap::new();
        for pool in &config.pools {
            if let Some(weights) = pool.weights.filter(|w| *w != config.scheduling.weights) {
                pool_schedulers.insert(
                    Arc::from(pool.name.as_str()),
                    Scheduler::new(warmpath_routing::scheduler::SchedulerConfig {
                        weights,
                        ..config.scheduling.clone()
                    }),
                );
            }
            if let Some(kv) = &pool.kv_events {
                match super::tokens::load(kv) {
                    Ok(tokens) => {
                        let m = Arc::new(PreciseModel {
                            tokens,
                            max_prompt_bytes: kv.max_prompt_bytes,
                        });
                        for model in &pool.models {
                            precise.entry(model.clone()).or_insert_with(|| m.clone());
                        }
                    }
                    Err(e) => tracing::warn!(
                        pool = %pool.name,
                        "cannot load the tokenizer for KV-event routing; the pool is routed by the approximate index: {e}"
                    ),
                }
            }
            let pool_name: Arc<str> = Arc::from(pool.name.as_str());
            for model in &pool.models {
                if !model_names.contains(&model.as_str()) {
                    model_names.push(model);
                }
                models.entry(model.clone()).or_default();
                let entry = match pool.role {
                    Role::Prefill => prefill.entry(model.clone()).or_default(),
                    Role::Decode | Role::Both => models.entry(model.clone()).or_default(),
                };
                for r in &pool.replicas {
                    if let Some(state) = registry.get(&r.name) {
                        entry.push(Candidate {
                            pool: pool_name.clone(),
                            replica: state,
                            metrics: Arc::new(metrics.requests.route(RouteLabels {
                                model: model.clone(),
                                pool: pool.name.clone(),
                                replica: r.name.clone(),
                            })),
                        });
                    }
                }
            }
        }
        let data: Vec<_> = model_names
            .iter()
            .map(|m| {
                serde_json::json!({
                    "id": m, "object": "model", "created": 0, "owned_by": "warmpath"
                })
            })
            .collect();
        let models_json =
            Bytes::from(serde_json::json!({"object": "list", "data": data}).to_string());
        Self {
            models: models.into_iter().map(|(k, v)| (k, v.into())).collect(),
            prefill: prefill
                .into_iter()
                .filter(|(_, v)| !v.is_empty())
                .map(|(k, v)| (k, v.into()))
                .collect(),
            scheduler: Scheduler::new(config.scheduling.clone()),
            pool_schedulers,
            hasher: BlockHasher::new(config.index.block_bytes),
            models_json,
            stale_after: Duration::from_millis(config.scrape.stale_after_ms),
            tenants: Directory::new(&config.tenants),
            objectives: Objectives::new(&config.objectives),
            precise,
            adapters: config
                .pools
                .iter()
                .flat_map(|p| p.lora_adapters.iter().cloned())
                .collect(),
            config,
        }
    }

    /// Candidates for a model (ready or not), or `None` when no pool serves it.
    pub fn candidates(&self, model: &str) -> Option<&Arc<[Candidate]>> {
        self.models.get(model)
    }

    /// SGLang P/D: the bootstrap port of a prefill replica.
    pub fn bootstrap_port(&self, replica: &str) -> u16 {
        self.config
            .pools
            .iter()
            .filter(|p| p.role == Role::Prefill)
            .flat_map(|p| &p.replicas)
            .find(|r| r.name == replica)
            .and_then(|r| r.bootstrap_port)
            .unwrap_or(self.config.pd.bootstrap_port)
    }

    /// Prefill candidates for a model (ready or not), or `None` when it is not split.
    pub fn prefill_candidates(&self, model: &str) -> Option<&Arc<[Candidate]>> {
        self.prefill.get(model)
    }

    /// The scheduler for candidates of `pool`: its own weights, or the file's.
    pub fn scheduler_for(&self, pool: &str) -> &Scheduler {
        self.pool_schedulers.get(pool).unwrap_or(&self.scheduler)
    }

    /// How to tokenize requests for `model`, when a pool serving it is routed from KV events.
    /// Whether `model` is declared a LoRA adapter (`pools[].lora_adapters`).
    pub fn is_adapter(&self, model: &str) -> bool {
        self.adapters.contains(model)
    }

    pub fn precise(&self, model: &str) -> Option<&Arc<PreciseModel>> {
        self.precise.get(model)
    }

    /// Some model's prompts are tokenized before routing (it is routed from KV events).
    pub fn tokenizes(&self) -> bool {
        !self.precise.is_empty()
    }

    pub fn serves(&self, model: &str) -> bool {
        self.models.contains_key(model)
    }
}

impl Table {
    /// One more failed answer from `replica` (serving `model` in this table): a run of them ejects it,
    /// as long as at most half of the model's replicas are out, so that a bad request pattern or an
    /// upstream outage cannot eject the whole fleet. Also for answers that break after their head
    /// (a reset or a silent stream).
    pub fn answer_failed(&self, replica: &ReplicaState, model: &str) {
        if let Some(backoff) = replica.health.on_failure(
            &self.config.health,
            Instant::now(),
            self.may_eject_one(model),
        ) {
            tracing::warn!(replica = %replica.name, ?backoff, "replica failing its answers; ejected");
        }
    }

    /// A request to `replica` was taken back after it showed no progress for a whole allowance
    /// (see [`Health::on_stalled`](crate::state::health::Health::on_stalled)).
    pub fn answer_stalled(&self, replica: &ReplicaState, model: &str) {
        if let Some(backoff) = replica.health.on_stalled(
            &self.config.health,
            Instant::now(),
            self.may_eject_one(model),
        ) {
            tracing::warn!(replica = %replica.name, ?backoff, "replica shows no progress; ejected");
        }
    }

    /// Whether one more of `model`'s replicas may be ejected: at most half of them are out.
    fn may_eject_one<'a>(&'a self, model: &'a str) -> impl FnOnce() -> bool + 'a {
        move || {
            let now = Instant::now();
            self.candidates(model).is_some_and(|all| {
                let out = all
                    .iter()
                    .filter(|c| !c.replica.health.is_ready(now))
                    .count();
                2 * (out + 1) <= all.len()
            })
        }
    }

    /// A request to `replica` sent at `sent` timed out (no head in time, or its stream went
    /// silent): a failed answer, unless the replica answered others meanwhile (then the
    /// request was slow by its own doing). Returns whether it counted.
    pub fn answer_timed_out(&self, replica: &ReplicaState, model: &str, sent: Instant) -> bool {
        if replica.health.answered_since(sent) {
            tracing::debug!(replica = %replica.name, "a request timed out while its replica answered others; not held against it");
            return false;
        }
        self.answer_failed(replica, model);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::metrics::Metrics;
    use crate::state::replica::ReplicaRegistry;

    #[test]
    fn a_pools_own_weights_pick_its_scheduler() {
        let config = Config::parse(
        "pools:\n  - name: p\n    models: [m]\n    weights: { prefix: 9, load: 1, queue: 2, kv_cache: 2 }\n    replicas:\n      - { name: r0, url: \"http://127.0.0.1:1\" }\n  - name: q\n    models: [n]\n    replicas:\n      - { name: r1, url: \"http://127.0.0.1:2\" }\n",
    )
    .unwrap();
        let mut registry = ReplicaRegistry::default();
        registry.sync(&config);
        let table = Table::build(Arc::new(config), &registry, &Metrics::new());
        assert_eq!(table.scheduler_for("p").config().weights.prefix, 9.0);
        assert_eq!(table.scheduler_for("q").config().weights.prefix, 3.0);
    }
}
