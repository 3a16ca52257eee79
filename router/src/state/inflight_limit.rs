//! The in-flight bound a replica's engine teaches (`flow.saturation.learn_inflight_requests`):
//! a pure function of what one scrape showed, kept beside the replica state it updates.

use crate::config::SaturationConfig;
use warmpath_routing::scheduler::EngineLoad;

/// The next learned in-flight bound of a replica and the engine's batch as last seen full,
/// from `limit` and `ceiling` (0: none yet) and one scrape of its engine's `load` while the
/// router had `inflight` requests there. Like a congestion window:
/// - the engine queues: its batch is full at what it runs, and this router's part of it (its
///   share of the engine's requests: several routers may send there) becomes the bound and
///   the ceiling;
/// - the bound held work back (the router is at it) and the engine queues nothing: it grows,
///   doubling while no batch has been seen full and up to the ceiling (the batch it had), then
///   by a sixteenth (probing for more);
/// - otherwise it stays.
///
/// Always within 1 and `learned_inflight_max`; a first scrape starts at
/// `learned_inflight_initial`.
pub fn learn_limit(
    limit: u32,
    ceiling: u32,
    load: &EngineLoad,
    inflight: u32,
    bounds: &SaturationConfig,
) -> (u32, u32) {
    let max = bounds.learned_inflight_max.max(1);
    let limit = if limit == 0 {
        bounds.learned_inflight_initial
    } else {
        limit
    };
    if load.waiting >= 1.0 {
        // This router's part of the batch, when other routers send there too: its share of
        // the engine's requests (at most all of them; some of its own may still be on the
        // wire).
        let share = (f64::from(inflight) / (load.running + load.waiting)).min(1.0);
        let batch = ((load.running * share).round() as u32).clamp(1, max);
        return (batch, batch);
    }
    if inflight >= limit {
        let grown = if ceiling == 0 {
            limit.saturating_mul(2)
        } else if limit < ceiling {
            limit.saturating_mul(2).min(ceiling)
        } else {
            limit.saturating_add((limit / 16).max(1))
        };
        return (grown.clamp(1, max), ceiling);
    }
    (limit.clamp(1, max), ceiling)
}
