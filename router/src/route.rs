//! Choosing a replica for a parsed request: candidates (by model, readiness), prefix matches
//! from the index, load from counters and scrapes, then the routing core's scheduler.
//!
//! The index lock is held from lookup to recording the choice, so two concurrent requests with
//! the same new prefix see each other: the second finds the first's blocks and follows it.

use crate::errors::ApiError;
use crate::replica::InflightGuard;
use crate::table::{Candidate, Table};
use crate::Shared;
use std::time::Instant;
use warmpath_routing::index::PrefixIndex;
use warmpath_routing::prompt::estimate_tokens;
use warmpath_routing::scheduler::{Decision, ReplicaView, RequestView};
use warmpath_routing::ReplicaId;

/// A request bound to a replica; its guard keeps the replica's in-flight counters up.
#[derive(Debug)]
pub struct Routed {
    pub candidate: Candidate,
    pub decision: Decision,
    pub prompt_tokens: u32,
    pub uncached_tokens: u32,
    /// Requests ahead of this one on the replica when it was chosen (for the TTFT model).
    pub queued_ahead: f64,
    /// Prefill tokens the TTFT model was asked about: this request's uncached tokens plus the
    /// prefill still pending ahead of it on the replica (learned from with the same inputs).
    pub prefill_tokens: u32,
    pub guard: InflightGuard,
}

/// Pick a replica for `features`, skipping `exclude` (a replica that just refused a connection).
pub fn choose(
    shared: &Shared,
    table: &Table,
    features: &crate::request::RequestFeatures,
    exclude: &[ReplicaId],
) -> Result<Routed, ApiError> {
    let all = table
        .candidates(&features.model)
        .ok_or_else(|| ApiError::unknown_model(&features.model))?;
    let now = Instant::now();
    let ready: Vec<&Candidate> = all
        .iter()
        .filter(|c| c.replica.health.is_ready(now) && !exclude.contains(&c.replica.id))
        .collect();
    if ready.is_empty() {
        return Err(ApiError::no_ready_replica(&features.model));
    }
    let ids: Vec<ReplicaId> = ready.iter().map(|c| c.replica.id).collect();
    let models: Vec<_> = ready
        .iter()
        .map(|c| c.replica.ttft.lock().clone())
        .collect();
    let hashes = &features.prompt.hashes;
    let prompt_tokens = estimate_tokens(features.prompt.total_bytes);
    let tokens_per_block = estimate_tokens(table.hasher.block_bytes);
    let request = RequestView {
        prompt_tokens,
        blocks: hashes.len().min(u32::MAX as usize) as u32,
        tokens_per_block,
    };
    let seed = shared.next_seed();
    let mut matched = vec![0u32; ready.len()];
    let (decision, queued_ahead, prefill_tokens) = {
        let mut index = shared.index.lock();
        index.longest_prefix(hashes, &ids, &mut matched);
        let views: Vec<ReplicaView<'_>> = ready
            .iter()
            .zip(&models)
            .zip(&matched)
            .map(|((c, ttft), &matched_blocks)| ReplicaView {
                id: c.replica.id,
                inflight_requests: c.replica.inflight_requests(),
                inflight_tokens: c.replica.inflight_tokens(),
                engine: c.replica.engine_load(now, table.stale_after),
                matched_blocks,
                pending_prefill_tokens: c.replica.pending_prefill_tokens(),
                ttft,
            })
            .collect();
        let decision = table
            .scheduler
            .decide(&request, &views, seed)
            .ok_or_else(|| ApiError::no_ready_replica(&features.model))?;
        index.on_routed(decision.replica, hashes);
        // The predictor must learn from the same inputs it predicted with.
        let chosen = &views[decision.index];
        let prefill_tokens =
            chosen.prefill_tokens(request.uncached_tokens(decision.matched_blocks));
        (decision, chosen.queued_ahead(), prefill_tokens)
    };
    let candidate = ready[decision.index].clone();
    let uncached_tokens = request.uncached_tokens(decision.matched_blocks);
    let max_tokens = features
        .max_tokens
        .unwrap_or(table.config.limits.default_max_tokens);
    let guard = InflightGuard::new(
        candidate.replica.clone(),
        prompt_tokens as u64 + max_tokens as u64,
        u64::from(uncached_tokens),
    );
    Ok(Routed {
        candidate,
        decision,
        prompt_tokens,
        uncached_tokens,
        queued_ahead,
        prefill_tokens,
        guard,
    })
}
