//! Choosing a replica for a parsed request, in the steps [`Choice::choose`] takes one after the
//! other: the candidates that may take it ([`eligible`]), what the request is to the scheduler
//! (its prompt tokens and blocks), each candidate's prefix match (the approximate index, and the
//! engines' KV events where they are followed: [`matches`]), the routing core's scheduler over
//! the candidates' views, the session's pull home, then the choice recorded (index, peers,
//! sessions) and the request bound to its replica ([`Routed`], whose guards keep the replica's
//! counters up).
//!
//! [`Chooser`] is what both modes call for a client's request: it also explains, samples, logs
//! and counts the decision, so that the proxy and the endpoint picker record it alike. The P/D
//! split makes its own [`Choice`]s among the prefill candidates.
//!
//! The index lock is held from lookup to recording the choice, so two concurrent requests with
//! the same new prefix see each other: the second finds the first's blocks and follows it.

mod block_extras;
mod chooser;
mod eligible;
mod explain;
mod matches;

pub(crate) use block_extras::BlockExtras;
pub use chooser::{Ask, Chooser};

use crate::errors::ApiError;
use crate::request::RequestFeatures;
use crate::sessions::{Affinity, Seen, Sessions};
use crate::state::index::{PendingGuard, SharedIndex, SharedPrecise};
use crate::state::replica::{InflightGuard, KvMode, PrefillGuard};
use crate::state::table::{Candidate, Table};
use matches::PreciseMatch;
use std::sync::Arc;
use std::time::Instant;
use warmpath_routing::index::PrefixIndex;
use warmpath_routing::prompt::estimate_tokens;
use warmpath_routing::scheduler::{CandidateScores, Decision, ReplicaView, RequestView};
use warmpath_routing::ReplicaId;

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

impl Indexes {
    /// Empty indexes with no KV events, no sessions kept across restarts and no peers (for
    /// tests).
    #[cfg(test)]
    pub(crate) fn alone(approx: SharedIndex) -> Self {
        Self {
            approx,
            precise: crate::state::index::precise(&Default::default()),
            sessions: Arc::new(Sessions::new(
                crate::sessions::TokenKey::random(),
                &Default::default(),
            )),
            peers: None,
        }
    }
}

/// Which replicas a request's prefill may go to: what flow control asks of the replica choice
/// for one request, so that a light tenant's prefill shares its engine step with as little
/// backlog prefill as possible. Pending prefill tokens are counted per replica (prompt tokens
/// sent there with no first token yet), and admission only bounds the pool's total.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PrefillRule {
    /// No rule: the scheduler's choice.
    #[default]
    Any,
    /// A tenant under its fair share: among the replicas with room, only those where the least
    /// prefill work would be ahead of or with this request's first token (pending prefill
    /// tokens plus its own uncached ones), then the scheduler's choice among them.
    LeastPrefill,
    /// A tenant at or over its share, with `max_pending_prefill_tokens` set: only replicas with
    /// fewer pending prefill tokens than this, while any has (otherwise all; admission's pool
    /// bound makes that rare).
    PrefillBelow(u64),
}

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
    pub explanation: Option<Arc<crate::decisions::Explanation>>,
}

/// One choice to make: among which candidates, for which request, under which rules.
#[derive(Clone, Copy)]
pub struct Choice<'a> {
    pub indexes: &'a Indexes,
    pub table: &'a Table,
    /// The serving candidates of the request's model, or the prefill candidates of a split.
    pub candidates: &'a [Candidate],
    pub features: &'a RequestFeatures,
    /// Replicas not to choose: one that just refused a connection, or one outside a Gateway's
    /// subset.
    pub exclude: &'a [ReplicaId],
    /// What flow control asks of the candidates' pending prefill work.
    pub prefill_rule: PrefillRule,
    /// The scheduler's per-request seed ([`Chooser::next_seed`]).
    pub seed: u64,
    /// Where the request's session lives, when it may pull the request home (not for the legs
    /// of a split, which follow the serving choice).
    pub sessions: Option<&'a Sessions>,
    /// Say why ([`Routed::explanation`]).
    pub explain: bool,
}

/// What the scheduler decided under the index lock, with what the request is bound with.
struct Decided {
    decision: Decision,
    queued_ahead: f64,
    prefill_tokens: u32,
    pending: Option<PendingGuard>,
    affinity: Option<Affinity>,
    scores: Option<(&'static str, Vec<CandidateScores>)>,
}

impl<'a> Choice<'a> {
    /// Among the serving candidates of the request's model, its session followed; nothing
    /// excluded, no prefill rule, not explained (set the fields to change that).
    pub fn serving(
        indexes: &'a Indexes,
        table: &'a Table,
        features: &'a RequestFeatures,
    ) -> Result<Self, ApiError> {
        let candidates = table
            .candidates(&features.model)
            .ok_or_else(|| ApiError::unknown_model(&features.model))?;
        Ok(Self {
            sessions: Some(&indexes.sessions),
            ..Self::among(indexes, table, candidates, features)
        })
    }

    /// Among `candidates` (a split's prefill candidates, or its decode replica again), with no
    /// session; nothing excluded, no prefill rule, not explained.
    pub fn among(
        indexes: &'a Indexes,
        table: &'a Table,
        candidates: &'a [Candidate],
        features: &'a RequestFeatures,
    ) -> Self {
        Self {
            indexes,
            table,
            candidates,
            features,
            exclude: &[],
            prefill_rule: PrefillRule::Any,
            seed: 0,
            sessions: None,
            explain: false,
        }
    }

    /// Pick a replica and record the choice in the index; the request's session goes back to
    /// its home replica when affinity allows.
    pub fn choose(&self) -> Result<Routed, ApiError> {
        let now = Instant::now();
        let ready = eligible::eligible(self, now);
        if ready.is_empty() {
            return Err(ApiError::no_ready_replica(&self.features.model));
        }
        let request = self.request_view();
        let precise = self.features.tokens.as_deref().map(|tokens| {
            matches::precise(
                self.indexes,
                self.table,
                &ready,
                self.features,
                tokens,
                request.blocks,
            )
        });
        // The session's home (its token checked, its map entry read) before the index lock: the
        // lock is held by every choice, this work need not be.
        let sessions = self.sessions.filter(|_| self.features.session.is_some());
        let session_home = sessions.map(|s| {
            s.home(&self.features.session, now)
                .map(|name| ready.iter().position(|c| c.replica.name == name))
        });
        let decided = self.decide(&ready, &request, precise.as_deref(), session_home, now)?;
        Ok(self.bind(&ready, &request, precise.as_deref(), sessions, decided, now))
    }

    /// The request as the scheduler sees it: its prompt tokens (counted when tokenized, else
    /// estimated from its bytes) and blocks.
    fn request_view(&self) -> RequestView {
        let f = self.features;
        let prompt_tokens = match &f.tokens {
            // Tokens before a multimodal item only: the item's own are not known here.
            Some(t) if f.media => u32::try_from(t.len())
                .map_or(u32::MAX, |n| n.max(estimate_tokens(f.prompt.total_bytes))),
            Some(t) => u32::try_from(t.len()).unwrap_or(u32::MAX),
            None => estimate_tokens(f.prompt.total_bytes),
        };
        RequestView {
            prompt_tokens,
            blocks: f.prompt.hashes.len().min(u32::MAX as usize) as u32,
            tokens_per_block: estimate_tokens(self.table.hasher.block_bytes),
        }
    }

    /// Under the index lock: each candidate's match, the scheduler's decision (within the
    /// prefill rule), the session's pull home, and the choice recorded in the index.
    fn decide(
        &self,
        ready: &[&Candidate],
        request: &RequestView,
        precise: Option<&[PreciseMatch]>,
        session_home: Option<Option<Option<usize>>>,
        now: Instant,
    ) -> Result<Decided, ApiError> {
        let ids: Vec<ReplicaId> = ready.iter().map(|c| c.replica.id).collect();
        let models: Vec<_> = ready
            .iter()
            .map(|c| c.replica.ttft.lock().clone())
            .collect();
        let hashes = &self.features.prompt.hashes;
        let drain = self.table.config.scheduling.placement.drain_pending_prefill;
        let tokens_per_block = request.tokens_per_block;
        let mut matched = vec![0u32; ready.len()];
        let mut index = self.indexes.approx.lock();
        index.longest_prefix(hashes, &ids, &mut matched);
        if let Some(precise) = precise {
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
                engine: c.replica.engine_load(now, self.table.stale_after),
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
        let scheduler = self.table.scheduler_for(&ready[0].pool);
        let least = match self.prefill_rule {
            PrefillRule::LeastPrefill => least_prefill(&views, request),
            _ => None,
        };
        let mut decision = match &least {
            None => scheduler.decide_with_hashes(request, hashes, &views, self.seed),
            Some(keep) => {
                let some: Vec<ReplicaView<'_>> = keep.iter().map(|&i| views[i].clone()).collect();
                scheduler
                    .decide_with_hashes(request, hashes, &some, self.seed)
                    .map(|d| Decision {
                        index: keep[d.index],
                        ..d
                    })
            }
        }
        .ok_or_else(|| ApiError::no_ready_replica(&self.features.model))?;
        let scores = self.explain.then(|| {
            (
                scheduler.config().policy.name(),
                scheduler.explain(request, &views),
            )
        });
        let affinity = session_home.map(|home| {
            let seen = |i: usize| Seen {
                matched: views[i].matched_blocks,
                queued_ahead: views[i].queued_ahead(),
                exact: precise.is_some_and(|p| p[i].mode == KvMode::Fresh),
            };
            let (go_home, result) = crate::sessions::affinity(
                home.map(|h| h.map(seen)),
                home == Some(Some(decision.index)),
                seen(decision.index),
                self.table.config.sessions.max_extra_queue,
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
                self.indexes.approx.clone(),
                id,
                self.indexes
                    .peers
                    .clone()
                    .map(|p| p as Arc<dyn crate::state::index::PrefillListener>),
            )
        });
        // The predictor must learn from the same inputs it predicted with.
        let chosen = &views[decision.index];
        let prefill_tokens =
            chosen.prefill_tokens(request.uncached_tokens(decision.matched_blocks));
        Ok(Decided {
            queued_ahead: chosen.queued_ahead(),
            decision,
            prefill_tokens,
            pending,
            affinity,
            scores,
        })
    }

    /// After the lock: the decision explained when asked, told to the peers and the session,
    /// and the request bound to its replica (its in-flight and pending-prefill counts up).
    fn bind(
        &self,
        ready: &[&Candidate],
        request: &RequestView,
        precise: Option<&[PreciseMatch]>,
        sessions: Option<&Sessions>,
        decided: Decided,
        now: Instant,
    ) -> Routed {
        let Decided {
            decision,
            queued_ahead,
            prefill_tokens,
            pending,
            affinity,
            scores,
        } = decided;
        let explanation = scores.map(|(policy, scores)| {
            Arc::new(explain::explained(
                self, ready, now, policy, scores, &decision, request,
            ))
        });
        let candidate = ready[decision.index].clone();
        let features = self.features;
        if let Some(peers) = &self.indexes.peers {
            peers.placed(
                &features.model,
                &candidate.replica.name,
                &features.prompt.hashes,
                pending.as_ref().map(PendingGuard::id),
            );
        }
        let session = sessions
            .zip(affinity)
            .map(|(s, a)| (s.record(&features.session, &candidate.replica.name, now), a));
        let cached_tokens = precise
            .map(|p| p[decision.index])
            .filter(|p| p.mode != KvMode::Off)
            .map(|p| p.tokens);
        let uncached_tokens = request.uncached_tokens(decision.matched_blocks);
        let max_tokens = features
            .max_tokens
            .unwrap_or(self.table.config.limits.default_max_tokens);
        let inflight = InflightGuard::new(
            candidate.replica.clone(),
            u64::from(request.prompt_tokens) + u64::from(max_tokens),
            u64::from(uncached_tokens),
        );
        let prefill = PrefillGuard::counted(
            candidate.replica.clone(),
            u64::from(uncached_tokens),
            self.table.config.scheduling.placement.drain_pending_prefill,
        );
        Routed {
            candidate,
            decision,
            prompt_tokens: request.prompt_tokens,
            uncached_tokens,
            queued_ahead,
            prefill_tokens,
            inflight,
            prefill,
            pending,
            cached_tokens,
            session,
            explanation,
        }
    }
}

/// For [`PrefillRule::LeastPrefill`]: the views (by index) with the least prefill work in or
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
