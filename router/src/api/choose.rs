//! Choosing a replica for a parsed request: candidates (by model, readiness, and with flow
//! control on, room and what its [`Placement`] asks of pending prefill work), prefix matches
//! from the index, load from counters and scrapes, then the routing core's scheduler.
//!
//! The index lock is held from lookup to recording the choice, so two concurrent requests with
//! the same new prefix see each other: the second finds the first's blocks and follows it.

use super::admission::Placement;
use super::block_extras::BlockExtras;
use super::{Attempt, AttemptError, Chosen};
use crate::decisions::{CandidateExplained, DecisionLog, Explanation, Record};
use crate::errors::{ApiError, RespBody};
use crate::metrics::{Metrics, ReasonLabels, ResultLabels};
use crate::sessions::{Affinity, Seen, Sessions, TokenKey};
use crate::state::index::{PendingGuard, SharedIndex, SharedPrecise};
use crate::state::replica::{InflightGuard, KvMode, PrefillGuard};
use crate::state::table::{Candidate, Table};
use futures_util::future::Either;
use http::Response;
use std::future::{ready, Ready};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;
use tower::{Layer, Service};
use warmpath_routing::index::{prompt_keys_by, PrefixIndex};
use warmpath_routing::prompt::estimate_tokens;
use warmpath_routing::scheduler::{Decision, ReplicaView, RequestView};
use warmpath_routing::ReplicaId;

/// A request bound to a replica; its guards keep the replica's in-flight and pending-prefill
/// counters up.
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
    pub inflight: InflightGuard,
    pub prefill: PrefillGuard,
    /// Its blocks as held on the replica until the engine reports them (event-followed pools).
    pub pending: Option<PendingGuard>,
    /// Prompt tokens the chosen replica's engine holds, by its KV events (`None` without).
    pub cached_tokens: Option<u32>,
    /// The session token to answer with, and what became of the session's affinity.
    pub session: Option<(String, Affinity)>,
    /// Each candidate's scores, when asked for.
    pub explanation: Option<Arc<Explanation>>,
}

/// Pick a replica for `features`, skipping `exclude` (a replica that just refused a connection)
/// and keeping to what flow control asked (`placement`); with `explain`, say why
/// ([`Routed::explanation`]).
pub fn choose(
    index: &Indexes,
    table: &Table,
    features: &crate::request::RequestFeatures,
    exclude: &[ReplicaId],
    placement: Placement,
    seed: u64,
    explain: bool,
) -> Result<Routed, ApiError> {
    let all = table
        .candidates(&features.model)
        .ok_or_else(|| ApiError::unknown_model(&features.model))?;
    choose_among(
        index,
        table,
        all,
        features,
        exclude,
        placement,
        seed,
        Some(&index.sessions),
        explain,
    )
}

/// Pick one of `all` for `features` (the serving candidates, or the prefill candidates of a
/// split), skipping `exclude` and keeping to `placement`, and record the choice in the index;
/// with `sessions`, the request's session goes back to its home replica when affinity allows.
#[allow(clippy::too_many_arguments)]
pub fn choose_among(
    indexes: &Indexes,
    table: &Table,
    all: &[Candidate],
    features: &crate::request::RequestFeatures,
    exclude: &[ReplicaId],
    placement: Placement,
    seed: u64,
    sessions: Option<&Sessions>,
    explain: bool,
) -> Result<Routed, ApiError> {
    let now = Instant::now();
    let mut ready: Vec<&Candidate> = all
        .iter()
        .filter(|c| c.replica.health.is_ready(now) && !exclude.contains(&c.replica.id))
        .collect();
    // Stalled replicas are passed over while another can serve: when every one is stalled,
    // the fault is likely upstream of them all (or the predictions are off), and waiting on
    // one beats refusing.
    if ready.len() > 1
        && ready
            .iter()
            .any(|c| c.replica.health.is_stalled(now, &c.replica.name))
    {
        let moving: Vec<&Candidate> = ready
            .iter()
            .copied()
            .filter(|c| !c.replica.health.is_stalled(now, &c.replica.name))
            .collect();
        if !moving.is_empty() {
            ready = moving;
        }
    }
    // Flow control admits against the pool's total, so one replica can hold more than its
    // share of it: one at its bound is passed over while another has room, or the request
    // waits in its engine for a slot (behind none of the fair queue's order) while one is free.
    if let Some(full) = table.config.flow.replica_full_at() {
        keep_if_any(&mut ready, |c| c.replica.inflight_requests() < full);
    } else if table.config.flow.learns_inflight() {
        keep_if_any(&mut ready, |c| {
            c.replica
                .learned_inflight_limit()
                .is_none_or(|full| c.replica.inflight_requests() < full)
        });
    }
    // Work of a tenant at or over its share goes where fewer prompt tokens wait for their
    // prefill than the bound: admission bounds the pool's total, and two of a backlog's
    // prefills on one replica would both sit in the step of a light request sent there.
    if let Placement::PrefillBelow(max) = placement {
        keep_if_any(&mut ready, |c| c.replica.pending_prefill_tokens() < max);
    }
    if ready.is_empty() {
        return Err(ApiError::no_ready_replica(&features.model));
    }
    let ids: Vec<ReplicaId> = ready.iter().map(|c| c.replica.id).collect();
    let models: Vec<_> = ready
        .iter()
        .map(|c| c.replica.ttft.lock().clone())
        .collect();
    let hashes = &features.prompt.hashes;
    let drain = table.config.scheduling.placement.drain_pending_prefill;
    let prompt_tokens = match &features.tokens {
        // Tokens before a multimodal item only: the item's own are not known here.
        Some(t) if features.media => u32::try_from(t.len()).map_or(u32::MAX, |n| {
            n.max(estimate_tokens(features.prompt.total_bytes))
        }),
        Some(t) => u32::try_from(t.len()).unwrap_or(u32::MAX),
        None => estimate_tokens(features.prompt.total_bytes),
    };
    let tokens_per_block = estimate_tokens(table.hasher.block_bytes);
    let request = RequestView {
        prompt_tokens,
        blocks: hashes.len().min(u32::MAX as usize) as u32,
        tokens_per_block,
    };
    let mut matched = vec![0u32; ready.len()];
    let precise = features.tokens.as_deref().map(|tokens| {
        let prompt = KeyedPrompt {
            tokens,
            model: &features.model,
            declared_adapter: table.is_adapter(&features.model),
            salt: features.cache_salt.as_deref(),
            continues: features.media,
        };
        precise_matches(&indexes.precise, &ready, &prompt, request.blocks)
    });
    // The session's home (its token checked, its map entry read) before the index lock: the
    // lock is held by every choice, this work need not be.
    let sessions = sessions.filter(|_| features.session.is_some());
    let session_home = sessions.map(|s| {
        s.home(&features.session, now)
            .map(|name| ready.iter().position(|c| c.replica.name == name))
    });
    let (decision, queued_ahead, prefill_tokens, pending, affinity, scores) = {
        let mut index = indexes.approx.lock();
        index.longest_prefix(hashes, &ids, &mut matched);
        if let Some(precise) = &precise {
            let pending = index.pending();
            pending.expire(now);
            for ((m, p), &id) in matched.iter_mut().zip(precise).zip(&ids) {
                *m = match p.mode {
                    KvMode::Off => *m,
                    // What the engine reported, and what it was sent and has not reported yet.
                    KvMode::Fresh => p.blocks.max(pending.longest_prefix(id, hashes)),
                    KvMode::Uncertain => p.blocks.max(*m),
                };
            }
        }
        // The index forgets about when the engine does: no more blocks than its KV cache holds.
        let capacity = |c: &Candidate| {
            c.replica
                .kv_capacity_tokens()
                .map(|t| t.div_ceil(u64::from(tokens_per_block.max(1))) as usize)
        };
        let rooms: Vec<_> = ready
            .iter()
            .map(|c| index.room(c.replica.id, capacity(c)))
            .collect();
        let views: Vec<ReplicaView<'_>> = ready
            .iter()
            .zip(&models)
            .zip(&matched)
            .zip(&rooms)
            .map(|(((c, ttft), &matched_blocks), &room)| ReplicaView {
                id: c.replica.id,
                key: c.replica.key,
                inflight_requests: c.replica.inflight_requests(),
                inflight_tokens: c.replica.inflight_tokens(),
                engine: c.replica.engine_load(now, table.stale_after),
                matched_blocks,
                pending_prefill_tokens: if drain {
                    c.replica
                        .pending_prefill_left(now, ttft.cautious_per_token_s())
                } else {
                    c.replica.pending_prefill_tokens()
                },
                inflight_uncached_tokens: c.replica.inflight_uncached_tokens(),
                room: Some(room),
                ttft,
            })
            .collect();
        // Candidates of several pools are scored by the first's weights.
        let scheduler = table.scheduler_for(&ready[0].pool);
        let least = match placement {
            Placement::LeastPrefill => least_prefill(&views, &request),
            _ => None,
        };
        let mut decision = match &least {
            None => scheduler.decide_with_hashes(&request, hashes, &views, seed),
            Some(keep) => {
                let some: Vec<ReplicaView<'_>> = keep.iter().map(|&i| views[i].clone()).collect();
                scheduler
                    .decide_with_hashes(&request, hashes, &some, seed)
                    .map(|d| Decision {
                        index: keep[d.index],
                        ..d
                    })
            }
        }
        .ok_or_else(|| ApiError::no_ready_replica(&features.model))?;
        let scores = explain.then(|| {
            (
                scheduler.config().policy.name(),
                scheduler.explain(&request, &views),
            )
        });
        let affinity = session_home.map(|home| {
            let seen = |i: usize| Seen {
                matched: views[i].matched_blocks,
                queued_ahead: views[i].queued_ahead(),
                exact: precise.as_ref().is_some_and(|p| p[i].mode == KvMode::Fresh),
            };
            let (go_home, result) = crate::sessions::affinity(
                home.map(|h| h.map(seen)),
                home == Some(Some(decision.index)),
                seen(decision.index),
                table.config.sessions.max_extra_queue,
            );
            if let (true, Some(Some(i))) = (go_home, home) {
                let v = &views[i];
                decision = Decision {
                    index: i,
                    replica: v.id,
                    matched_blocks: v.matched_blocks,
                    predicted_ttft_s: v.ttft.predict(
                        v.prefill_tokens(request.uncached_tokens(v.matched_blocks)),
                        v.queued_ahead(),
                    ),
                    spilled: false,
                    reason: "session",
                };
            }
            result
        });
        index.on_routed(decision.replica, hashes);
        let pending = precise.is_some().then(|| {
            let id = index.pending().insert(decision.replica, hashes, now);
            PendingGuard::new(
                indexes.approx.clone(),
                id,
                indexes
                    .peers
                    .clone()
                    .map(|p| p as Arc<dyn crate::state::index::PrefillListener>),
            )
        });
        // The predictor must learn from the same inputs it predicted with.
        let chosen = &views[decision.index];
        let prefill_tokens =
            chosen.prefill_tokens(request.uncached_tokens(decision.matched_blocks));
        (
            decision,
            chosen.queued_ahead(),
            prefill_tokens,
            pending,
            affinity,
            scores,
        )
    };
    let explanation = scores.map(|(policy, scores)| {
        Arc::new(explained(
            all, &ready, exclude, now, policy, scores, &decision, &request,
        ))
    });
    let candidate = ready[decision.index].clone();
    if let Some(peers) = &indexes.peers {
        peers.placed(
            &features.model,
            &candidate.replica.name,
            hashes,
            pending.as_ref().map(PendingGuard::id),
        );
    }
    let session = sessions
        .zip(affinity)
        .map(|(s, a)| (s.record(&features.session, &candidate.replica.name, now), a));
    let cached_tokens = precise
        .as_ref()
        .map(|p| p[decision.index])
        .filter(|p| p.mode != KvMode::Off)
        .map(|p| p.tokens);
    let uncached_tokens = request.uncached_tokens(decision.matched_blocks);
    let max_tokens = features
        .max_tokens
        .unwrap_or(table.config.limits.default_max_tokens);
    let inflight = InflightGuard::new(
        candidate.replica.clone(),
        prompt_tokens as u64 + max_tokens as u64,
        u64::from(uncached_tokens),
    );
    let prefill =
        PrefillGuard::counted(candidate.replica.clone(), u64::from(uncached_tokens), drain);
    Ok(Routed {
        candidate,
        decision,
        prompt_tokens,
        uncached_tokens,
        queued_ahead,
        prefill_tokens,
        inflight,
        prefill,
        pending,
        cached_tokens,
        session,
        explanation,
    })
}

/// Keeps the candidates of `ready` that pass `keep`, when more than one is ready and at least
/// one passes (otherwise all stay: a rule that would leave no replica gives way).
fn keep_if_any(ready: &mut Vec<&Candidate>, keep: impl Fn(&Candidate) -> bool) {
    if ready.len() > 1 && ready.iter().any(|c| keep(c)) {
        ready.retain(|c| keep(c));
    }
}

/// For [`Placement::LeastPrefill`]: the views (by index) with the least prefill work in or
/// before this request's engine step, its pending prefill tokens plus the request's own
/// uncached ones there; `None` when every view has the same. Its own uncached tokens count, so
/// that a cached prefix still draws the request when the work ahead is no larger.
fn least_prefill(views: &[ReplicaView<'_>], request: &RequestView) -> Option<Vec<usize>> {
    let work: Vec<u64> = views
        .iter()
        .map(|v| {
            v.pending_prefill_tokens
                .saturating_add(u64::from(request.uncached_tokens(v.matched_blocks)))
        })
        .collect();
    let min = *work.iter().min()?;
    let keep: Vec<usize> = (0..views.len()).filter(|&i| work[i] == min).collect();
    (keep.len() < views.len()).then_some(keep)
}

/// The explanation of `decision` among `ready` (scored, in order), and of the rest of `all`
/// (why each was not considered).
#[allow(clippy::too_many_arguments)]
fn explained(
    all: &[Candidate],
    ready: &[&Candidate],
    exclude: &[ReplicaId],
    now: Instant,
    policy: &'static str,
    scores: Vec<warmpath_routing::scheduler::CandidateScores>,
    decision: &Decision,
    request: &RequestView,
) -> Explanation {
    let mut candidates: Vec<CandidateExplained> = ready
        .iter()
        .zip(scores)
        .enumerate()
        .map(|(i, (c, s))| CandidateExplained {
            replica: c.replica.name.clone(),
            pool: c.pool.clone(),
            chosen: i == decision.index,
            skipped: None,
            scores: Some(s),
        })
        .collect();
    for c in all {
        if ready.iter().any(|r| r.replica.id == c.replica.id) {
            continue;
        }
        let why = if exclude.contains(&c.replica.id) {
            "tried"
        } else if !c.replica.health.is_ready(now) {
            "not_ready"
        } else {
            "stalled"
        };
        candidates.push(CandidateExplained {
            replica: c.replica.name.clone(),
            pool: c.pool.clone(),
            chosen: false,
            skipped: Some(why),
            scores: None,
        });
    }
    Explanation {
        policy,
        reason: decision.reason,
        chosen: ready[decision.index].replica.name.clone(),
        prompt_tokens: request.prompt_tokens,
        blocks: request.blocks,
        spilled: decision.spilled,
        candidates,
    }
}

/// A candidate's match in the engine's own blocks.
#[derive(Debug, Clone, Copy)]
struct PreciseMatch {
    mode: KvMode,
    /// The match in the approximate index's units (its share of the prompt's blocks), so
    /// that the scheduler compares replicas with and without events alike.
    blocks: u32,
    /// Prompt tokens the engine holds.
    tokens: u32,
}

/// What a request's token blocks are keyed by.
struct KeyedPrompt<'a> {
    /// The prompt as the engine tokenizes it (up to its first multimodal item).
    tokens: &'a [u32],
    model: &'a str,
    /// `pools[].lora_adapters` names `model` (the engines' events may say so too).
    declared_adapter: bool,
    salt: Option<&'a str>,
    /// The prompt goes on after `tokens` (a multimodal item follows).
    continues: bool,
}

/// Each candidate's match from the engines' KV events (`blocks`: the prompt's length in
/// approximate-index blocks).
fn precise_matches(
    precise: &SharedPrecise,
    ready: &[&Candidate],
    prompt: &KeyedPrompt<'_>,
    blocks: u32,
) -> Vec<PreciseMatch> {
    let statuses: Vec<_> = ready.iter().map(|c| *c.replica.kv.lock()).collect();
    // Keys per block size (one in practice: a pool's engines share it).
    let mut keys: Vec<(usize, Vec<u64>)> = Vec::new();
    let index = precise.lock();
    let adapter = (prompt.declared_adapter
        || index.is_adapter_on(prompt.model, ready.iter().map(|c| c.replica.id)))
    .then_some(prompt.model);
    let extras = BlockExtras::new(adapter, prompt.salt);
    let tokens = prompt.tokens;
    let mut out = [0u32];
    ready
        .iter()
        .zip(&statuses)
        .map(|(c, status)| {
            let off = PreciseMatch {
                mode: KvMode::Off,
                blocks: 0,
                tokens: 0,
            };
            if status.mode == KvMode::Off {
                return off;
            }
            // No block stored yet since the router connected: it knows of none.
            let Some(bs) = status.block_size.filter(|&b| b > 0) else {
                return PreciseMatch {
                    mode: status.mode,
                    ..off
                };
            };
            let at = match keys.iter().position(|(b, _)| *b == bs) {
                Some(i) => i,
                None => {
                    keys.push((bs, prompt_keys_by(tokens, bs, |i| extras.block(i))));
                    keys.len() - 1
                }
            };
            index.longest_prefix(&keys[at].1, &[c.replica.id], &mut out);
            // An engine computes at least the prompt's last token (vLLM's rule): a fully cached
            // prompt reuses all but its last block.
            let usable = match prompt.continues {
                true => tokens.len() / bs,
                false => tokens.len().saturating_sub(1) / bs,
            };
            let cached = (out[0] as usize).min(usable) * bs;
            let share = cached as f64 / tokens.len().max(1) as f64;
            PreciseMatch {
                mode: status.mode,
                blocks: (share * f64::from(blocks)).floor() as u32,
                tokens: u32::try_from(cached).unwrap_or(u32::MAX),
            }
        })
        .collect()
}

#[derive(Clone)]
pub struct ChooseLayer {
    shared: Arc<ChooseState>,
}

/// The router's two indexes: what it sent where (approximate), and what the engines report
/// (KV events).
#[derive(Clone)]
pub struct Indexes {
    pub approx: SharedIndex,
    pub precise: SharedPrecise,
    /// Where sessions live (not an index of blocks, but read and written with them).
    pub sessions: Arc<Sessions>,
    /// The other router replicas, told of every placement (`peers`); `None` without them.
    pub peers: Option<Arc<crate::peers::Peers>>,
}

pub(super) struct ChooseState {
    index: Indexes,
    metrics: Arc<Metrics>,
    seed: AtomicU64,
    decisions: Arc<DecisionLog>,
}

impl ChooseLayer {
    /// What the choice needs, shared with the P/D layer (which chooses prefill replicas).
    pub(super) fn state(&self) -> Arc<ChooseState> {
        self.shared.clone()
    }

    /// With no KV events (an empty precise index).
    pub fn new(index: SharedIndex, metrics: Arc<Metrics>) -> Self {
        Self::with_indexes(
            Indexes {
                approx: index,
                precise: crate::state::index::precise(&Default::default()),
                sessions: Arc::new(Sessions::new(TokenKey::random(), &Default::default())),
                peers: None,
            },
            metrics,
            Arc::default(),
        )
    }

    /// Recording explained and sampled decisions in `decisions`.
    pub fn with_indexes(
        index: Indexes,
        metrics: Arc<Metrics>,
        decisions: Arc<DecisionLog>,
    ) -> Self {
        Self {
            shared: Arc::new(ChooseState {
                index,
                metrics,
                seed: AtomicU64::new(rand::random()),
                decisions,
            }),
        }
    }
}

impl ChooseState {
    pub(super) fn index(&self) -> &Indexes {
        &self.index
    }

    /// The scheduler's per-request seed: a counter from a random start, so that `round_robin`
    /// (which picks `candidates[seed % len]`) rotates through the replicas, and tie-breaks stay
    /// random (the scheduler mixes the seed through SplitMix64 before drawing). It was SplitMix64
    /// of the counter, which made `round_robin` a uniform random pick: a less even spread and a
    /// higher TTFT p90 than a real rotation (bench/results-trace/notes.md).
    pub(super) fn next_seed(&self) -> u64 {
        self.seed.fetch_add(1, Ordering::Relaxed)
    }
}

impl<S> Layer<S> for ChooseLayer {
    type Service = Choose<S>;
    fn layer(&self, inner: S) -> Choose<S> {
        Choose {
            shared: self.shared.clone(),
            inner,
        }
    }
}

#[derive(Clone)]
pub struct Choose<S> {
    shared: Arc<ChooseState>,
    inner: S,
}

impl<S> Service<Attempt> for Choose<S>
where
    S: Service<Chosen, Response = Response<RespBody>, Error = AttemptError>,
{
    type Response = Response<RespBody>;
    type Error = AttemptError;
    type Future = Either<Ready<Result<Response<RespBody>, AttemptError>>, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), AttemptError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, attempt: Attempt) -> Self::Future {
        let state = &self.shared;
        let request = &attempt.request;
        let features = request.features();
        let started = Instant::now();
        let table = &request.ctx().table;
        let explain = &table.config.explain;
        let asked = explain.header && crate::decisions::asked(&request.parsed.read.head.headers);
        let sampled = !asked
            && explain.recent > 0
            && state.decisions.sample(started, explain.sample_interval());
        let mut routed = match choose(
            &state.index,
            table,
            features,
            &attempt.exclude,
            request.permit.placement(),
            state.next_seed(),
            asked || sampled,
        ) {
            Ok(r) => r,
            Err(e) => return Either::Left(ready(Err(AttemptError::NoReplica(e)))),
        };
        if let Some(e) = &routed.explanation {
            if explain.recent > 0 {
                let record = Record::now(
                    &request.ctx().request_id,
                    &features.model,
                    request.tenant.name.clone(),
                    asked,
                    e.clone(),
                );
                state.decisions.push(record, explain.recent);
            }
            if !asked {
                routed.explanation = None;
            }
        }
        let m = &state.metrics;
        m.decision_duration.observe(started.elapsed().as_secs_f64());
        m.decisions
            .get_or_create(&ReasonLabels {
                reason: routed.decision.reason,
            })
            .inc();
        if routed.decision.spilled {
            m.spills.inc();
        }
        m.prefix_blocks_queried
            .inc_by(features.prompt.hashes.len() as u64);
        m.prefix_blocks_matched
            .inc_by(routed.decision.matched_blocks as u64);
        routed.candidate.replica.count_blocks(
            features.prompt.hashes.len() as u64,
            u64::from(routed.decision.matched_blocks),
        );
        if let Some((_, affinity)) = &routed.session {
            m.session_affinity
                .get_or_create(&ResultLabels {
                    result: affinity.label(),
                })
                .inc();
        }
        Either::Right(self.inner.call(Chosen {
            request: attempt.request,
            routed,
            body: None,
            prefill_replica: None,
            prefiller: None,
        }))
    }
}
