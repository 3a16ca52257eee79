//! A decision explained for operators: each scored candidate with its scores, and why each
//! other candidate was not considered.

use super::Choice;
use crate::decisions::{CandidateExplained, Explanation};
use crate::state::table::Candidate;
use std::time::Instant;
use warmpath_routing::scheduler::{CandidateScores, Decision, RequestView};

/// The explanation of `decision` among `ready` (scored, in order), and of the rest of the
/// choice's candidates.
pub(super) fn explained(
    choice: &Choice<'_>,
    ready: &[&Candidate],
    now: Instant,
    policy: &'static str,
    scores: Vec<CandidateScores>,
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
    for c in choice.candidates {
        if ready.iter().any(|r| r.replica.id == c.replica.id) {
            continue;
        }
        let why = if choice.exclude.contains(&c.replica.id) {
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
