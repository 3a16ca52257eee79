//! The in-flight bound a replica's engine teaches (`flow.saturation.learn_inflight_requests`):
//! a pure function of what one scrape showed, kept beside the replica state it updates.

use crate::config::SaturationConfig;
use warmpath_routing::scheduler::EngineLoad;

/// What the scrapes taught so far about one replica's engine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Learned {
    /// The bound (0: nothing learned yet).
    pub limit: u32,
    /// The engine's batch when it last proved full (0: never seen).
    pub ceiling: u32,
    /// What the engine ran at the last scrape, when it also queued then (`None`: it did not).
    pub queued_running: Option<u32>,
}

/// The next lesson from `was`, one scrape of the engine's `load`, and the router's `inflight`
/// requests there at that moment. Like a congestion window:
/// - the engine has a queue ([`queues`]) at this scrape and the one before, and runs no more
///   now than then: its batch is full at what it runs, and this router's part of it (its share
///   of the engine's requests: several routers may send there) becomes the bound and the
///   ceiling. One scrape's queue proves nothing, nor does a short one: requests that arrived
///   since the engine's last step, or whose prefill waits for the step's token budget, wait
///   for a later step even when the batch has room (taking every such wait for a full batch
///   held a fleet that runs 256 at bounds of 5 to 11);
/// - the engine has a queue but has not proved full: the bound holds;
/// - the bound held work back (the router is at it) and the engine has no queue: it grows,
///   doubling while no batch has been seen full and up to the ceiling (the batch it had), then
///   by a sixteenth (probing for more);
/// - otherwise it stays.
///
/// The bound is always within 1 and `learned_inflight_max`; a first scrape starts it at
/// `learned_inflight_initial`.
pub fn learn_limit(
    was: Learned,
    load: &EngineLoad,
    inflight: u32,
    bounds: &SaturationConfig,
) -> Learned {
    let max = bounds.learned_inflight_max.max(1);
    let limit = if was.limit == 0 {
        bounds.learned_inflight_initial
    } else {
        was.limit
    }
    .clamp(1, max);
    let running = load.running.max(0.0).round() as u32;
    if queues(load) {
        if was.queued_running.is_some_and(|before| running <= before) {
            // This router's part of the batch, when other routers send there too: its share of
            // the engine's requests (at most all of them; some of its own may still be on the
            // wire).
            let share = (f64::from(inflight) / (load.running + load.waiting)).min(1.0);
            let batch = ((load.running * share).round() as u32).clamp(1, max);
            return Learned {
                limit: batch,
                ceiling: batch,
                queued_running: Some(running),
            };
        }
        return Learned {
            limit,
            ceiling: was.ceiling,
            queued_running: Some(running),
        };
    }
    let limit = if inflight >= limit {
        if was.ceiling == 0 {
            limit.saturating_mul(2)
        } else if limit < was.ceiling {
            limit.saturating_mul(2).min(was.ceiling)
        } else {
            limit.saturating_add((limit / 16).max(1))
        }
    } else {
        limit
    };
    Learned {
        limit: limit.clamp(1, max),
        ceiling: was.ceiling,
        queued_running: None,
    }
}

/// Whether the engine's waiting requests are a queue rather than the requests that arrived
/// since its last step: at least one, and at least an eighth of what it runs (a batch of `n`
/// whose requests each decode 8 tokens or more frees fewer than `n / 8` places a step).
pub fn queues(load: &EngineLoad) -> bool {
    load.waiting >= 1.0 && load.waiting >= load.running / 8.0
}
