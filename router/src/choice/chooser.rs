//! [`Chooser`]: a client's request chosen for as both modes choose, the proxy's choose layer
//! and the endpoint picker alike: explained when the client asks or sampled for the decision
//! log, then logged and counted (decision time, reason, spills, prefix blocks queried and
//! matched, the replica's own block counts, session affinity).

use super::{Choice, Indexes, PrefillRule, Routed};
use crate::decisions::{DecisionLog, Record};
use crate::errors::ApiError;
use crate::metrics::{Metrics, ReasonLabels, ResultLabels};
use crate::request::RequestFeatures;
use crate::state::table::Table;
use http::{HeaderMap, HeaderValue};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use warmpath_routing::ReplicaId;

/// One router's choices: its indexes, the scheduler's seeds, the decision log and metrics,
/// shared by the proxy and the endpoint picker (and the P/D split's legs).
pub struct Chooser {
    indexes: Indexes,
    metrics: Arc<Metrics>,
    seed: AtomicU64,
    decisions: Arc<DecisionLog>,
}

/// A client's request as the chooser is asked about it.
pub struct Ask<'a> {
    pub table: &'a Table,
    pub features: &'a RequestFeatures,
    /// Replicas not to choose (one that just refused a connection, or outside a Gateway's
    /// subset).
    pub exclude: &'a [ReplicaId],
    pub prefill_rule: PrefillRule,
    /// The request's headers (`x-warmpath-explain`).
    pub headers: &'a HeaderMap,
    /// Its `x-request-id`, for the decision log (`None`: the log says none).
    pub request_id: Option<&'a HeaderValue>,
    pub tenant: &'a Arc<str>,
}

impl Chooser {
    /// Recording explained and sampled decisions in `decisions`.
    pub fn new(indexes: Indexes, metrics: Arc<Metrics>, decisions: Arc<DecisionLog>) -> Self {
        Self {
            indexes,
            metrics,
            seed: AtomicU64::new(rand::random()),
            decisions,
        }
    }

    pub fn indexes(&self) -> &Indexes {
        &self.indexes
    }

    /// The scheduler's per-request seed: a counter from a random start, so that `round_robin`
    /// (which picks `candidates[seed % len]`) rotates through the replicas, and tie-breaks stay
    /// random (the scheduler mixes the seed through SplitMix64 before drawing). It was SplitMix64
    /// of the counter, which made `round_robin` a uniform random pick: a less even spread and a
    /// higher TTFT p90 than a real rotation (bench/results-trace/notes.md).
    pub fn next_seed(&self) -> u64 {
        self.seed.fetch_add(1, Ordering::Relaxed)
    }

    /// Choose among the serving candidates of the request's model, its session followed; the
    /// explanation stays on [`Routed::explanation`] only when the client asked for it.
    pub fn route(&self, ask: &Ask<'_>) -> Result<Routed, ApiError> {
        let started = Instant::now();
        let explain = &ask.table.config.explain;
        let asked = explain.header && crate::decisions::asked(ask.headers);
        let sampled = !asked
            && explain.recent > 0
            && self.decisions.sample(started, explain.sample_interval());
        let mut routed = Choice {
            exclude: ask.exclude,
            prefill_rule: ask.prefill_rule,
            seed: self.next_seed(),
            explain: asked || sampled,
            ..Choice::serving(&self.indexes, ask.table, ask.features)?
        }
        .choose()?;
        if let Some(e) = &routed.explanation {
            if explain.recent > 0 {
                let none = HeaderValue::from_static("");
                let record = Record::now(
                    ask.request_id.unwrap_or(&none),
                    &ask.features.model,
                    ask.tenant.clone(),
                    asked,
                    e.clone(),
                );
                self.decisions.push(record, explain.recent);
            }
            if !asked {
                routed.explanation = None;
            }
        }
        self.count(started, ask.features, &routed);
        Ok(routed)
    }

    fn count(&self, started: Instant, features: &RequestFeatures, routed: &Routed) {
        let m = &self.metrics;
        m.choice.duration.observe(started.elapsed().as_secs_f64());
        m.choice
            .decisions
            .get_or_create(&ReasonLabels {
                reason: routed.decision.reason,
            })
            .inc();
        if routed.decision.spilled {
            m.choice.spills.inc();
        }
        let blocks = features.prompt.hashes.len() as u64;
        let matched = u64::from(routed.decision.matched_blocks);
        m.index.blocks_queried.inc_by(blocks);
        m.index.blocks_matched.inc_by(matched);
        routed.candidate.replica.count_blocks(blocks, matched);
        if let Some((_, affinity)) = &routed.session {
            m.choice
                .session_affinity
                .get_or_create(&ResultLabels {
                    result: affinity.label(),
                })
                .inc();
        }
    }
}
