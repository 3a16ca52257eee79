//! `/api/status`: what the router sees now, as JSON, for the status page and for scripts:
//! each pool's replicas with their health, load, KV use and cache-hit rate, the prefix indexes,
//! sessions, tenants' queues, and the models' readiness.

use super::AdminState;
use crate::config::Role;
use crate::flow::TenantNow;
use crate::state::replica::{KvMode, ReplicaState};
use serde::Serialize;
use std::time::Instant;
use warmpath_routing::index::PrefixIndex;

#[derive(Debug, Serialize)]
pub struct Status {
    pub version: &'static str,
    pub uptime_s: u64,
    /// Leaving: finishing open requests, taking no new ones.
    pub draining: bool,
    /// Kubernetes mode: the first full list of the cluster's resources has arrived (always
    /// true in static mode).
    pub discovery_synced: bool,
    pub models: Vec<ModelStatus>,
    pub pools: Vec<PoolStatus>,
    pub index: IndexStatus,
    pub sessions: usize,
    /// Per model and tenant, while they have requests in flight or queued (empty when flow
    /// control is replaced, as in some tests).
    pub tenants: Vec<TenantNow>,
}

#[derive(Debug, Serialize)]
pub struct ModelStatus {
    pub model: String,
    pub ready: usize,
    pub replicas: usize,
}

#[derive(Debug, Serialize)]
pub struct PoolStatus {
    pub name: String,
    pub role: &'static str,
    pub models: Vec<String>,
    pub policy: &'static str,
    pub replicas: Vec<ReplicaStatus>,
}

#[derive(Debug, Serialize)]
pub struct ReplicaStatus {
    pub name: String,
    pub url: String,
    pub ready: bool,
    /// Owes first bytes long overdue: passed over while another replica can serve.
    pub stalled: bool,
    pub inflight_requests: u32,
    pub inflight_tokens: u64,
    pub pending_prefill_tokens: u64,
    /// From the engine's metrics; absent when stale or never scraped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub engine: Option<EngineStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_capacity_tokens: Option<u64>,
    /// `off` (no KV events), `uncertain` or `fresh`.
    pub kv_events: &'static str,
    /// Prompt blocks routed here since the router started, and the share it already held.
    pub blocks_routed: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hit_rate: Option<f64>,
    /// The learned prefill cost, ms per uncached prompt token.
    pub prefill_ms_per_token: f64,
}

#[derive(Debug, Serialize)]
pub struct EngineStatus {
    pub running: f64,
    pub waiting: f64,
    pub kv_cache_usage: f64,
}

#[derive(Debug, Serialize)]
pub struct IndexStatus {
    pub entries: usize,
    pub bytes: usize,
    pub capacity_bytes: usize,
    pub evictions: u64,
    /// Blocks sent to event-followed engines that have not reported them yet.
    pub pending_blocks: usize,
    /// The index built from engines' KV events.
    pub kv_entries: usize,
    pub kv_bytes: usize,
}

pub fn status(state: &AdminState) -> Status {
    let table = state.tables.current();
    let now = Instant::now();
    let (stats, pending_blocks) = {
        let mut index = state.index.lock();
        (index.stats(), index.pending().blocks())
    };
    let kv = state.precise.lock().stats();
    let mut models: Vec<&String> = table.config.pools.iter().flat_map(|p| &p.models).collect();
    models.sort();
    models.dedup();
    let models = models
        .into_iter()
        .map(|model| {
            let (ready, replicas) = table.candidates(model).map_or((0, 0), |cs| {
                let ready = cs.iter().filter(|c| c.replica.health.is_ready(now)).count();
                (ready, cs.len())
            });
            ModelStatus {
                model: model.clone(),
                ready,
                replicas,
            }
        })
        .collect();
    let pools = table
        .config
        .pools
        .iter()
        .map(|pool| PoolStatus {
            name: pool.name.clone(),
            role: match pool.role {
                Role::Prefill => "prefill",
                Role::Decode => "decode",
                Role::Both => "both",
            },
            models: pool.models.clone(),
            policy: table.scheduler_for(&pool.name).config().policy.name(),
            replicas: pool
                .replicas
                .iter()
                .filter_map(|r| state.replicas.get(&r.name))
                .map(|r| replica(&r, now, table.stale_after))
                .collect(),
        })
        .collect();
    Status {
        version: env!("CARGO_PKG_VERSION"),
        uptime_s: state.started.elapsed().as_secs(),
        draining: state.draining.load(std::sync::atomic::Ordering::Relaxed),
        discovery_synced: state.discovery.synced(),
        models,
        pools,
        index: IndexStatus {
            entries: stats.entries,
            bytes: stats.bytes,
            capacity_bytes: stats.capacity_bytes,
            evictions: stats.evictions,
            pending_blocks,
            kv_entries: kv.entries,
            kv_bytes: kv.bytes,
        },
        sessions: state.sessions.map.lock().len(),
        tenants: state.flow.as_ref().map(|f| f.tenants()).unwrap_or_default(),
    }
}

fn replica(r: &ReplicaState, now: Instant, stale_after: std::time::Duration) -> ReplicaStatus {
    let (routed, matched) = r.blocks();
    ReplicaStatus {
        name: r.name.clone(),
        url: r.url.clone(),
        ready: r.health.is_ready(now),
        stalled: r.health.is_stalled(now, &r.name),
        inflight_requests: r.inflight_requests(),
        inflight_tokens: r.inflight_tokens(),
        pending_prefill_tokens: r.pending_prefill_tokens(),
        engine: r.engine_load(now, stale_after).map(|e| EngineStatus {
            running: e.running,
            waiting: e.waiting,
            kv_cache_usage: e.kv_cache_usage,
        }),
        kv_capacity_tokens: r.kv_capacity_tokens(),
        kv_events: match r.kv.lock().mode {
            KvMode::Off => "off",
            KvMode::Uncertain => "uncertain",
            KvMode::Fresh => "fresh",
        },
        blocks_routed: routed,
        hit_rate: (routed > 0).then(|| matched as f64 / routed as f64),
        prefill_ms_per_token: r.ttft.lock().per_token_s() * 1e3,
    }
}
