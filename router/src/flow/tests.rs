//! Saturation on real replica state (registry, table) with the signals set by hand, and the
//! pure rules that put tenants under their share ahead of a backlog.

use super::saturation::{
    every_replica_prefilling, prefill_gated, saturated, under_share, with_headroom, AdmittedLoad,
};
use crate::choice::PrefillRule;
use crate::config::{Config, SaturationConfig};
use crate::metrics::Metrics;
use crate::state::inflight_limit::{learn_limit, Learned};
use crate::state::replica::{InflightGuard, PrefillGuard, ReplicaRegistry};
use crate::state::table::Table;
use std::sync::Arc;
use std::time::{Duration, Instant};
use warmpath_routing::scheduler::EngineLoad;

fn table() -> (Table, ReplicaRegistry) {
    let config = Config::parse(
        "pools:\n  - name: p\n    models: [m]\n    replicas:\n      - { name: r0, url: \"http://127.0.0.1:1\" }\n      - { name: r1, url: \"http://127.0.0.1:2\" }\n",
    )
    .unwrap();
    let mut registry = ReplicaRegistry::default();
    registry.sync(&config);
    let table = Table::build(Arc::new(config), &registry, &Metrics::new());
    (table, registry)
}

const STALE: Duration = Duration::from_millis(300);

fn load(waiting: f64, kv: f64) -> Option<EngineLoad> {
    Some(EngineLoad {
        running: 1.0,
        waiting,
        kv_cache_usage: kv,
    })
}

#[test]
fn the_pool_is_saturated_only_when_every_ready_replica_is() {
    let (table, reg) = table();
    let c = table.candidates("m").unwrap();
    let bounds = SaturationConfig::default();
    let now = Instant::now();
    let (r0, r1) = (reg.get("r0").unwrap(), reg.get("r1").unwrap());
    let sat = |now| saturated(c, &bounds, AdmittedLoad::default(), STALE, now);
    assert!(
        !sat(now),
        "engines that never reported load are not saturated"
    );
    r0.set_engine_load(load(9.0, 0.1), now);
    r1.set_engine_load(load(0.0, 0.5), now);
    assert!(!sat(now), "r1 has room");
    r1.set_engine_load(load(0.0, 0.95), now);
    assert!(sat(now), "r0's queue and r1's KV are past their bounds");
    r1.set_engine_load(load(0.0, 0.5), now);
    assert!(
        sat(now + Duration::from_secs(1)),
        "load that has gone stale is unknown, not spare"
    );
    let lenient = SaturationConfig {
        stale_metrics_saturate: false,
        ..bounds.clone()
    };
    assert!(!saturated(
        c,
        &lenient,
        AdmittedLoad::default(),
        STALE,
        now + Duration::from_secs(1)
    ));
    // A replica out of rotation does not count: the pool is as saturated as r0.
    r1.health.on_connect_error(&table.config.health, now);
    assert!(sat(now));
    // Nothing ready at all: not saturated (the request goes on to a 503).
    r0.health.on_connect_error(&table.config.health, now);
    assert!(!sat(now));
}

#[test]
fn the_routers_own_counts_bound_the_pool_at_once() {
    let (table, reg) = table();
    let c = table.candidates("m").unwrap();
    let bounds = SaturationConfig {
        max_inflight_requests: Some(2),
        headroom_requests: 0,
        light_prefill_first: false,
        max_pending_prefill_tokens: None,
        max_inflight_tokens: Some(1000),
        max_waiting_requests: None,
        max_kv_usage: None,
        stale_metrics_saturate: true,
        learn_inflight_requests: true,
        learned_inflight_initial: 8,
        learned_inflight_max: 1024,
    };
    let now = Instant::now();
    let admitted = |requests, tokens| AdmittedLoad { requests, tokens };
    assert!(!saturated(c, &bounds, admitted(3, 0), STALE, now));
    assert!(
        saturated(c, &bounds, admitted(4, 0), STALE, now),
        "2 per replica × 2"
    );
    assert!(
        saturated(c, &bounds, admitted(1, 2000), STALE, now),
        "tokens"
    );
    // Requests of another model on the same replicas count through the replicas' own counts.
    let _a = InflightGuard::new(reg.get("r0").unwrap(), 10, 10);
    let _b = InflightGuard::new(reg.get("r0").unwrap(), 10, 10);
    assert!(!saturated(c, &bounds, admitted(0, 0), STALE, now));
    let _c = InflightGuard::new(reg.get("r1").unwrap(), 1000, 10);
    assert!(saturated(c, &bounds, admitted(0, 0), STALE, now));
}

#[test]
fn headroom_widens_the_request_bound_only_when_set() {
    let mut bounds = SaturationConfig {
        max_inflight_requests: Some(14),
        headroom_requests: 2,
        ..SaturationConfig::default()
    };
    let wider = with_headroom(&bounds).expect("headroom set");
    assert_eq!(wider.max_inflight_requests, Some(16));
    assert_eq!(wider.max_waiting_requests, bounds.max_waiting_requests);
    bounds.headroom_requests = 0;
    assert!(with_headroom(&bounds).is_none());
    bounds.headroom_requests = 2;
    bounds.max_inflight_requests = None;
    assert!(with_headroom(&bounds).is_none(), "no slots, no headroom");
}

#[test]
fn a_share_is_the_regular_slots_split_evenly() {
    let bounds = SaturationConfig {
        max_inflight_requests: Some(14),
        ..SaturationConfig::default()
    };
    // 2 replicas × 14 slots between 2 tenants: 14 each.
    assert!(under_share(&bounds, 2, 13, 2));
    assert!(!under_share(&bounds, 2, 14, 2));
    // A tenant alone may fill the pool.
    assert!(under_share(&bounds, 2, 27, 1));
    // More tenants than slots: everyone's share is still one request.
    assert!(under_share(&bounds, 1, 0, 100));
    assert!(!under_share(&bounds, 1, 1, 100));
    let unbounded = SaturationConfig {
        max_inflight_requests: None,
        ..bounds
    };
    assert!(!under_share(&unbounded, 2, 0, 2), "no slots to share");
}

#[test]
fn pending_prefill_holds_queued_work_per_ready_replica() {
    let mut bounds = SaturationConfig::default();
    assert!(!prefill_gated(&bounds, u64::MAX, 0, 2), "no bound");
    bounds.max_pending_prefill_tokens = Some(256);
    assert!(!prefill_gated(&bounds, 511, 0, 2));
    assert!(prefill_gated(&bounds, 512, 0, 2), "256 per replica × 2");
    assert!(prefill_gated(&bounds, 256, 0, 1));
    // Nothing pending: a prompt longer than the bound still goes.
    assert!(!prefill_gated(&bounds, 0, 0, 1));
    assert!(
        !prefill_gated(&bounds, 10_000, 0, 0),
        "no ready replica: the 503 path decides"
    );
}

#[test]
fn a_replica_is_full_at_its_bound_with_headroom_when_flow_control_is_on() {
    let mut flow = crate::config::FlowConfig {
        enabled: true,
        ..Default::default()
    };
    assert_eq!(flow.replica_full_at(), None, "no request bound");
    flow.saturation.max_inflight_requests = Some(14);
    assert_eq!(flow.replica_full_at(), Some(14));
    flow.saturation.headroom_requests = 2;
    assert_eq!(flow.replica_full_at(), Some(16));
    flow.enabled = false;
    assert_eq!(flow.replica_full_at(), None, "flow control off");
}

#[test]
fn queued_backlog_work_waits_while_every_replica_has_its_bound_of_prefill_pending() {
    let (table, reg) = table();
    let c = table.candidates("m").unwrap();
    let now = Instant::now();
    let mut bounds = SaturationConfig::default();
    let _a = PrefillGuard::new(reg.get("r0").unwrap(), 300);
    assert!(!every_replica_prefilling(c, &bounds, now), "no bound");
    bounds.max_pending_prefill_tokens = Some(256);
    // The pool's total (300 of 512) would let it go; r1 has none pending, so it goes there.
    assert!(!prefill_gated(&bounds, 300, 0, 2));
    assert!(!every_replica_prefilling(c, &bounds, now));
    let _b = PrefillGuard::new(reg.get("r1").unwrap(), 256);
    assert!(every_replica_prefilling(c, &bounds, now));
    // A replica out of rotation takes nothing, so it cannot hold anything back.
    reg.get("r1")
        .unwrap()
        .health
        .on_connect_error(&table.config.health, now);
    assert!(every_replica_prefilling(c, &bounds, now));
    reg.get("r0")
        .unwrap()
        .health
        .on_connect_error(&table.config.health, now);
    assert!(
        !every_replica_prefilling(c, &bounds, now),
        "no ready replica"
    );
}

#[test]
fn light_requests_ask_for_the_least_prefill_and_others_for_the_bound() {
    let mut flow = crate::config::FlowConfig::default();
    assert_eq!(
        super::prefill_rule(&flow, true),
        PrefillRule::Any,
        "flow control off"
    );
    flow.enabled = true;
    assert_eq!(super::prefill_rule(&flow, true), PrefillRule::LeastPrefill);
    assert_eq!(
        super::prefill_rule(&flow, false),
        PrefillRule::Any,
        "no bound"
    );
    flow.saturation.max_pending_prefill_tokens = Some(512);
    assert_eq!(
        super::prefill_rule(&flow, false),
        PrefillRule::PrefillBelow(512)
    );
    assert_eq!(super::prefill_rule(&flow, true), PrefillRule::LeastPrefill);
}

fn engine(running: f64, waiting: f64) -> EngineLoad {
    EngineLoad {
        running,
        waiting,
        kv_cache_usage: 0.1,
    }
}

/// A lesson with no queue seen at the last scrape.
fn was(limit: u32, ceiling: u32) -> Learned {
    Learned {
        limit,
        ceiling,
        queued_running: None,
    }
}

/// The bound and ceiling after one scrape.
fn after(
    was: Learned,
    running: f64,
    waiting: f64,
    inflight: u32,
    b: &SaturationConfig,
) -> (u32, u32) {
    let l = learn_limit(was, &engine(running, waiting), inflight, b);
    (l.limit, l.ceiling)
}

#[test]
fn the_learned_bound_starts_small_grows_while_it_binds_and_falls_to_a_full_batch() {
    let bounds = SaturationConfig::default();
    // First scrape: the initial bound, whatever the engine does.
    assert_eq!(after(was(0, 0), 0.0, 0.0, 0, &bounds), (8, 0));
    // Not binding (the router sends less than the bound): it stays.
    assert_eq!(after(was(8, 0), 3.0, 0.0, 3, &bounds), (8, 0));
    // Binding, the engine queues nothing: it doubles (no batch seen full yet).
    assert_eq!(after(was(8, 0), 8.0, 0.0, 8, &bounds), (16, 0));
    // A few waiting requests are no queue (they arrived since the engine's last step): binding,
    // it still doubles.
    assert_eq!(after(was(64, 0), 60.0, 4.0, 64, &bounds), (128, 0));
    // One scrape's queue is no full batch either: the bound holds, neither cut nor grown.
    let queued = learn_limit(was(64, 0), &engine(48.0, 16.0), 64, &bounds);
    assert_eq!(
        queued,
        Learned {
            limit: 64,
            ceiling: 0,
            queued_running: Some(48)
        }
    );
    // Queued again and running no more: its batch is what it runs, and that is the bound.
    assert_eq!(after(queued, 48.0, 16.0, 64, &bounds), (48, 48));
    // Queued again but running more: it was still taking work in, so nothing is learned.
    assert_eq!(after(queued, 56.0, 8.0, 64, &bounds), (64, 0));
    // A queue gone between two scrapes starts the count again.
    let cleared = learn_limit(queued, &engine(40.0, 0.0), 40, &bounds);
    assert_eq!(cleared.queued_running, None);
    assert_eq!(after(cleared, 40.0, 24.0, 64, &bounds), (64, 0));
    // Another router sends two thirds of the engine's requests: this one's part is a third.
    let shared = learn_limit(was(64, 0), &engine(48.0, 12.0), 20, &bounds);
    assert_eq!(after(shared, 48.0, 12.0, 20, &bounds), (16, 16));
    // Below that batch it doubles back up to it, then probes by a sixteenth.
    assert_eq!(after(was(20, 48), 20.0, 0.0, 20, &bounds), (40, 48));
    assert_eq!(after(was(40, 48), 40.0, 0.0, 40, &bounds), (48, 48));
    assert_eq!(after(was(48, 48), 48.0, 0.0, 48, &bounds), (51, 48));
    // Within 1 and the maximum.
    let stuck = learn_limit(was(5, 5), &engine(0.0, 2.0), 5, &bounds);
    assert_eq!(after(stuck, 0.0, 2.0, 5, &bounds), (1, 1));
    let stuck = learn_limit(was(5, 5), &engine(3.0, 2.0), 0, &bounds);
    assert_eq!(after(stuck, 3.0, 2.0, 0, &bounds), (1, 1));
    let capped = SaturationConfig {
        learned_inflight_max: 50,
        ..bounds.clone()
    };
    assert_eq!(after(was(48, 48), 48.0, 0.0, 48, &capped), (50, 48));
    let big = learn_limit(was(48, 0), &engine(400.0, 60.0), 460, &capped);
    assert_eq!(big.limit, 48, "one queue: held");
    assert_eq!(after(big, 400.0, 60.0, 460, &capped), (50, 50));
}

#[test]
fn learned_bounds_saturate_the_pool_by_the_routers_own_count() {
    let (table, reg) = table();
    let c = table.candidates("m").unwrap();
    let bounds = SaturationConfig {
        max_waiting_requests: None,
        max_kv_usage: None,
        ..SaturationConfig::default()
    };
    let now = Instant::now();
    let (r0, r1) = (reg.get("r0").unwrap(), reg.get("r1").unwrap());
    let admitted = |requests| AdmittedLoad {
        requests,
        tokens: 0,
    };
    assert!(
        !saturated(c, &bounds, admitted(1000), STALE, now),
        "nothing learned yet: no bound"
    );
    r0.learn_inflight_limit(&engine(0.0, 0.0), &bounds);
    assert!(
        !saturated(c, &bounds, admitted(1000), STALE, now),
        "r1 has no bound, so the pool has none"
    );
    // r1's engine queues at two scrapes with the router's 6 requests all it holds: its batch of
    // 4 is the bound.
    let _sent: Vec<_> = (0..6)
        .map(|_| InflightGuard::new(r1.clone(), 1, 1))
        .collect();
    r1.learn_inflight_limit(&engine(4.0, 2.0), &bounds);
    r1.learn_inflight_limit(&engine(4.0, 2.0), &bounds);
    drop(_sent);
    assert_eq!(
        (r0.learned_inflight_limit(), r1.learned_inflight_limit()),
        (Some(8), Some(4))
    );
    assert!(!saturated(c, &bounds, admitted(11), STALE, now));
    assert!(saturated(c, &bounds, admitted(12), STALE, now), "8 + 4");
    // A configured bound replaces what was learned.
    let fixed = SaturationConfig {
        max_inflight_requests: Some(100),
        ..bounds.clone()
    };
    assert!(!saturated(c, &fixed, admitted(12), STALE, now));
    // Per replica: r1 at its learned bound by its own count is past it.
    let _held: Vec<_> = (0..4)
        .map(|_| InflightGuard::new(r1.clone(), 1, 1))
        .collect();
    assert!(super::saturation::replica_saturated(
        &r1, &bounds, STALE, now
    ));
    assert!(!super::saturation::replica_saturated(
        &r0, &bounds, STALE, now
    ));
}
