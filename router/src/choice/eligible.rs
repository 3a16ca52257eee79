//! The candidates that may take a request now: ready, not excluded, moving (while another is),
//! with room under the replica's in-flight bound (while another has) and, for work over its
//! tenant's share, under the pending-prefill bound (while another is). Each rule gives way when
//! it would leave no replica.

use super::{Choice, PrefillRule};
use crate::state::table::Candidate;
use std::time::Instant;

/// The candidates of `choice` that may take its request, in the candidates' order (empty when
/// none is ready).
pub(super) fn eligible<'c>(choice: &Choice<'c>, now: Instant) -> Vec<&'c Candidate> {
    let mut ready: Vec<&Candidate> = choice
        .candidates
        .iter()
        .filter(|c| c.replica.health.is_ready(now) && !choice.exclude.contains(&c.replica.id))
        .collect();
    // Stalled replicas are passed over while another can serve: when every one is stalled,
    // the fault is likely upstream of them all (or the predictions are off), and waiting on
    // one beats refusing.
    keep_if_any(&mut ready, |c| {
        !c.replica.health.is_stalled(now, &c.replica.name)
    });
    // Flow control admits against the pool's total, so one replica can hold more than its
    // share of it: one at its bound is passed over while another has room, or the request
    // waits in its engine for a slot (behind none of the fair queue's order) while one is free.
    let flow = &choice.table.config.flow;
    if let Some(full) = flow.replica_full_at() {
        keep_if_any(&mut ready, |c| c.replica.inflight_requests() < full);
    } else if flow.learns_inflight() {
        keep_if_any(&mut ready, |c| {
            c.replica
                .learned_inflight_limit()
                .is_none_or(|full| c.replica.inflight_requests() < full)
        });
    }
    // Work of a tenant at or over its share goes where fewer prompt tokens wait for their
    // prefill than the bound: admission bounds the pool's total, and two of a backlog's
    // prefills on one replica would both sit in the step of a light request sent there.
    if let PrefillRule::PrefillBelow(max) = choice.prefill_rule {
        keep_if_any(&mut ready, |c| c.replica.pending_prefill_tokens() < max);
    }
    ready
}

/// Keeps the candidates of `ready` that pass `keep`, when more than one is ready and at least
/// one passes (otherwise all stay: a rule that would leave no replica gives way).
fn keep_if_any(ready: &mut Vec<&Candidate>, keep: impl Fn(&Candidate) -> bool) {
    if ready.len() > 1 && ready.iter().any(|c| keep(c)) {
        ready.retain(|c| keep(c));
    }
}
