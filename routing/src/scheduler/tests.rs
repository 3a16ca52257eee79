//! Decisions of the whole scheduler on crafted fleets: affinity, spreading, the hot-spot guard,
//! stickiness, learning a mixed fleet, odd inputs.

use super::*;
use crate::predict::{TtftModel, TtftPrior};

/// A scheduler with the hot-spot guard on (0.5 s, factor 2), as these tests were written for.
fn sched(policy: Policy) -> Scheduler {
    Scheduler::new(SchedulerConfig {
        policy,
        hotspot: HotspotGuard {
            max_wait_s: 0.5,
            spill_factor: 2.0,
        },
        ..SchedulerConfig::default()
    })
}

#[test]
fn the_guard_is_off_by_default() {
    let m = TtftModel::default();
    let [warm, idle] = hot_fleet(&m);
    let req = prompt(32_768, 2048);
    let d = Scheduler::new(SchedulerConfig::default())
        .decide(&req, &[warm, idle], 1)
        .unwrap();
    assert!(!d.spilled, "{d:?}");
}

fn view(
    id: ReplicaId,
    inflight: u32,
    engine: Option<EngineLoad>,
    matched: u32,
    ttft: &TtftModel,
) -> ReplicaView<'_> {
    ReplicaView {
        id,
        key: u64::from(id),
        inflight_requests: inflight,
        inflight_tokens: u64::from(inflight) * 1000,
        engine,
        matched_blocks: matched,
        pending_prefill_tokens: 0,
        inflight_uncached_tokens: u64::from(inflight) * 1000,
        room: None,
        ttft,
    }
}

fn engine(running: f64, waiting: f64, kv: f64) -> Option<EngineLoad> {
    Some(EngineLoad {
        running,
        waiting,
        kv_cache_usage: kv,
    })
}

/// A prompt of `tokens` tokens whose first `blocks` blocks of 16 tokens are full.
fn prompt(tokens: u32, blocks: u32) -> RequestView {
    RequestView {
        prompt_tokens: tokens,
        blocks,
        tokens_per_block: 16,
    }
}

/// An 8k-token prompt in 512 blocks of 16 tokens.
fn request() -> RequestView {
    prompt(8192, 512)
}

const BOTH: [Policy; 2] = [Policy::Prefix, Policy::PredictedTtft];

const ALL: [Policy; 7] = Policy::ALL;

/// The peer baselines.
const PEERS: [Policy; 3] = [Policy::ConsistentHash, Policy::LlmD, Policy::Dynamo];

#[test]
fn empty_candidates_give_none() {
    for p in ALL {
        assert_eq!(sched(p).decide(&request(), &[], 1), None);
        assert_eq!(
            sched(p).decide_with_hashes(&request(), &[1, 2], &[], 1),
            None
        );
    }
}

#[test]
fn prefix_affinity_at_low_load() {
    let m = TtftModel::default();
    let cands = [
        view(0, 1, engine(1.0, 0.0, 0.05), 0, &m),
        view(1, 2, engine(2.0, 0.0, 0.10), 512, &m),
        view(2, 0, engine(0.0, 0.0, 0.01), 100, &m),
    ];
    for p in BOTH {
        for seed in 0..20 {
            let d = sched(p).decide(&request(), &cands, seed).unwrap();
            assert_eq!(d.replica, 1, "{p:?}");
            assert_eq!(d.matched_blocks, 512);
            assert!(!d.spilled);
        }
    }
}

#[test]
fn spreads_at_high_load() {
    let m = TtftModel::default();
    let cands = [
        view(0, 4, engine(4.0, 0.0, 0.2), 0, &m),
        view(1, 90, engine(64.0, 30.0, 0.95), 512, &m),
        view(2, 6, engine(6.0, 0.0, 0.25), 0, &m),
    ];
    for p in BOTH {
        let d = sched(p).decide(&request(), &cands, 5).unwrap();
        assert_eq!(d.replica, 0, "{p:?}: {d:?}");
    }
}

/// A replica holding a 32k-token prefix with 90 requests on it, and an idle cold one: the
/// hot-spot guard spills from it.
fn hot_fleet(m: &TtftModel) -> [ReplicaView<'_>; 2] {
    [
        view(0, 90, engine(60.0, 30.0, 0.6), 2048, m),
        view(1, 0, engine(0.0, 0.0, 0.0), 0, m),
    ]
}

#[test]
fn hot_prefix_spills_and_then_sticks_to_both() {
    // A 32k-token shared prefix: cold prefill (1.6 s at the prior's 50 µs/token) is long,
    // so the plain argmin keeps queueing on the warm replica.
    let m = TtftModel::default();
    let req = prompt(32_768, 2048);
    let s = sched(Policy::PredictedTtft);
    let calm = [
        view(0, 10, engine(10.0, 0.0, 0.3), 2048, &m),
        view(1, 0, engine(0.0, 0.0, 0.0), 0, &m),
    ];
    let d = s.decide(&req, &calm, 1).unwrap();
    assert_eq!(
        (d.replica, d.spilled, d.reason),
        (0, false, "predicted_ttft")
    );
    // 0.9 s of predicted wait (> max_wait_s 0.5) while cold TTFT 1.64 s < 2 × 0.9 s.
    let hot = hot_fleet(&m);
    let d = s.decide(&req, &hot, 1).unwrap();
    assert_eq!((d.replica, d.spilled, d.reason), (1, true, "hotspot_spill"));
    // Without the guard the warm replica would have been chosen.
    let no_guard = Scheduler::new(SchedulerConfig {
        policy: Policy::PredictedTtft,
        hotspot: HotspotGuard {
            max_wait_s: f64::INFINITY,
            spill_factor: 2.0,
        },
        ..SchedulerConfig::default()
    });
    assert_eq!(no_guard.decide(&req, &hot, 1).unwrap().replica, 0);
    // Once warm on both, requests go to the less loaded warm one without spilling.
    let both_warm = [
        view(0, 90, engine(60.0, 30.0, 0.6), 2048, &m),
        view(1, 3, engine(3.0, 0.0, 0.1), 2048, &m),
    ];
    let d = s.decide(&req, &both_warm, 1).unwrap();
    assert_eq!((d.replica, d.spilled), (1, false));
    // No spill to a replica whose predicted TTFT is beyond spill_factor.
    let far = [
        view(0, 60, engine(50.0, 10.0, 0.6), 2048, &m),
        view(1, 0, engine(0.0, 0.0, 0.0), 0, &m),
    ];
    let d = s.decide(&req, &far, 1).unwrap();
    assert_eq!((d.replica, d.spilled), (0, false));
}

#[test]
fn weighted_policy_spills_too() {
    let m = TtftModel::default();
    let req = prompt(32_768, 2048);
    let cands = [
        view(0, 12, engine(12.0, 0.0, 0.3), 2048, &m),
        view(1, 0, engine(0.0, 0.0, 0.0), 0, &m),
    ];
    // Warm replica has 12 requests ahead (0.12 s wait): sticks.
    assert_eq!(
        sched(Policy::Prefix)
            .decide(&req, &cands, 1)
            .unwrap()
            .replica,
        0
    );
    let hot = [
        view(0, 90, engine(90.0, 0.0, 0.3), 2048, &m),
        view(1, 0, engine(0.0, 0.0, 0.0), 0, &m),
    ];
    // 0.9 s predicted wait; cold TTFT 1.64 s is within 2 × 0.905 s.
    let d = sched(Policy::Prefix).decide(&req, &hot, 1).unwrap();
    assert_eq!((d.replica, d.spilled), (1, true), "{d:?}");
}

#[test]
fn stale_metrics_are_unknown_not_idle() {
    let m = TtftModel::default();
    // Replica 0's scrape is stale but the router itself has 40 requests in flight to it.
    let cands = [
        view(0, 40, None, 0, &m),
        view(1, 3, engine(3.0, 1.0, 0.3), 0, &m),
    ];
    for p in [Policy::LeastLoad, Policy::Prefix, Policy::PredictedTtft] {
        let d = sched(p).decide(&request(), &cands, 9).unwrap();
        assert_eq!(d.replica, 1, "{p:?}");
    }
    assert_eq!(cands[0].queued_ahead(), 40.0);
    // Stale and idle by our own counts: not avoided either.
    let cands = [
        view(0, 0, None, 0, &m),
        view(1, 20, engine(20.0, 8.0, 0.7), 0, &m),
    ];
    for p in [Policy::LeastLoad, Policy::Prefix, Policy::PredictedTtft] {
        assert_eq!(
            sched(p).decide(&request(), &cands, 9).unwrap().replica,
            0,
            "{p:?}"
        );
    }
    // Garbage metrics count as stale.
    let v = view(0, 7, engine(f64::NAN, 1.0, 0.1), 0, &m);
    assert_eq!(v.queued_ahead(), 7.0);
    // Fresh engine counts below our own in-flight count (scrape older than our sends).
    let v = view(0, 7, engine(2.0, 1.0, 0.1), 0, &m);
    assert_eq!(v.queued_ahead(), 7.0);
}

fn trained(per_token_s: f64) -> TtftModel {
    let mut m = TtftModel::default();
    for i in 0..400u32 {
        let u = (i * 97) % 8000;
        let q = f64::from(i % 9);
        m.observe(u, q, 0.01 + per_token_s * f64::from(u) + 0.02 * q);
    }
    m
}

#[test]
fn predicted_ttft_prefers_the_faster_replica() {
    let slow = trained(0.000_4);
    let fast = trained(0.000_1);
    let cands = [
        view(0, 2, engine(2.0, 0.0, 0.2), 0, &slow),
        view(1, 2, engine(2.0, 0.0, 0.2), 0, &fast),
    ];
    let d = sched(Policy::PredictedTtft)
        .decide(&request(), &cands, 3)
        .unwrap();
    assert_eq!(d.replica, 1);
    assert!((d.predicted_ttft_s - fast.predict(8192, 2.0)).abs() < 1e-12);
    // But not at any price: a long queue on the fast one sends work to the slow one.
    let cands = [
        view(0, 0, engine(0.0, 0.0, 0.0), 0, &slow),
        view(1, 150, engine(100.0, 50.0, 0.9), 0, &fast),
    ];
    assert_eq!(
        sched(Policy::PredictedTtft)
            .decide(&request(), &cands, 3)
            .unwrap()
            .replica,
        0
    );
}

#[test]
fn a_queue_of_cache_hits_waits_less_than_a_queue_of_misses() {
    // Same model, same number of requests ahead, same (zero) prefix match: the replica whose
    // queue still has 40k tokens to prefill is the slower choice.
    let m = trained(0.000_1);
    let mut hits = view(0, 4, engine(4.0, 0.0, 0.2), 0, &m);
    hits.pending_prefill_tokens = 200;
    let mut misses = view(1, 4, engine(4.0, 0.0, 0.2), 0, &m);
    misses.pending_prefill_tokens = 40_000;
    assert!(misses.predicted_wait() > hits.predicted_wait() + 3.0);
    for cands in [
        [hits.clone(), misses.clone()],
        [misses.clone(), hits.clone()],
    ] {
        let d = sched(Policy::PredictedTtft)
            .decide(&request(), &cands, 5)
            .unwrap();
        assert_eq!(d.replica, 0, "{d:?}");
    }
    // The pending work counts in the prediction exactly as the request's own tokens do.
    assert_eq!(misses.prefill_tokens(8192), 48_192);
    assert_eq!(
        ReplicaView {
            pending_prefill_tokens: u64::MAX,
            ..misses
        }
        .prefill_tokens(1),
        u32::MAX
    );
}

#[test]
fn an_unobserved_replica_is_tried_when_the_observed_one_beats_the_prior() {
    // The observed replica learned 10 µs/token, well under the prior's 50 µs: judged by its
    // prior alone, the new replica would never be picked. Optimism makes it look as fast
    // as the fastest learned one, so the lighter queue decides.
    let learned = trained(0.000_01);
    let fresh = TtftModel::default();
    assert!(fresh.predict(8192, 0.0) > learned.predict(8192, 1.0));
    let cands = [
        view(0, 1, engine(1.0, 0.0, 0.2), 0, &learned),
        view(1, 0, engine(0.0, 0.0, 0.0), 0, &fresh),
    ];
    let d = sched(Policy::PredictedTtft)
        .decide(&request(), &cands, 3)
        .unwrap();
    assert_eq!(d.replica, 1, "{d:?}");
    // Once it has answered, its own model takes over: here a slow one loses again.
    let slow = trained(0.000_4);
    let cands = [
        view(0, 1, engine(1.0, 0.0, 0.2), 0, &learned),
        view(1, 0, engine(0.0, 0.0, 0.0), 0, &slow),
    ];
    let d = sched(Policy::PredictedTtft)
        .decide(&request(), &cands, 3)
        .unwrap();
    assert_eq!(d.replica, 0, "{d:?}");
}

/// A mixed fleet in a small closed-loop simulation: each replica prefills at its own speed
/// (one request at a time); the scheduler learns the speeds from observed TTFTs. Near
/// saturation the work splits roughly in proportion to speed (4 : 1 here).
#[test]
fn mixed_fleet_gets_traffic_in_proportion_to_speed() {
    let per_token = [0.000_05, 0.000_05, 0.000_2, 0.000_2];
    let mut models: Vec<TtftModel> = (0..4)
        .map(|_| TtftModel::new(TtftPrior::default()))
        .collect();
    // Each replica serves one prefill at a time: `busy_until` is when its queue drains.
    let mut busy_until = [0.0f64; 4];
    let mut served = [0u32; 4];
    let s = sched(Policy::PredictedTtft);
    let tokens = 2000u32;
    let req = prompt(tokens, 0);
    let mut now = 0.0;
    for n in 0..4000u64 {
        // 24 requests/s against a capacity of 2 × 10/s (fast) + 2 × 2.5/s (slow) = 25/s:
        // the fast pair alone cannot keep up, so a speed-proportional split is 4 : 1.
        now += 1.0 / 24.0;
        let queued: Vec<u32> = (0..4)
            .map(|i| {
                ((busy_until[i] - now).max(0.0) / (per_token[i] * f64::from(tokens))).ceil() as u32
            })
            .collect();
        let cands: Vec<ReplicaView<'_>> = (0..4)
            .map(|i| view(i as u32, queued[i], None, 0, &models[i]))
            .collect();
        let d = s.decide(&req, &cands, n).unwrap();
        let i = d.index;
        let start = busy_until[i].max(now);
        busy_until[i] = start + per_token[i] * f64::from(tokens);
        let ttft = busy_until[i] - now;
        let q = f64::from(queued[i]);
        models[i].observe(tokens, q, ttft);
        served[i] += 1;
    }
    let fast = served[0] + served[1];
    let slow = served[2] + served[3];
    eprintln!(
        "mixed fleet: served {served:?}, learned per-token {:?}",
        models
            .iter()
            .map(TtftModel::per_token_s)
            .collect::<Vec<_>>()
    );
    let share = f64::from(fast) / f64::from(fast + slow);
    assert!((0.72..=0.88).contains(&share), "{served:?}");
    assert!(models[0].per_token_s() < models[2].per_token_s() / 2.0);
}

#[test]
fn a_follower_waits_for_its_leaders_prefill_instead_of_going_cold() {
    // The leader of a new prefix is still prefilling its 2112 tokens on replica 0; the
    // follower matches the prefix there. Waiting for the leader gives about the same TTFT
    // as prefilling cold on idle replica 1, but going cold doubles the fleet's work (and
    // under load, repeated, turned the whole fleet cold).
    let m = trained(0.000_2);
    let req = prompt(2112, 132);
    let mut warm = view(0, 1, None, 128, &m);
    warm.pending_prefill_tokens = 2112;
    // Busy with one request that is a cache hit: work put here delays it.
    let mut cold = view(1, 1, None, 0, &m);
    cold.pending_prefill_tokens = 64;
    for p in BOTH {
        for seed in 0..10 {
            let d = sched(p)
                .decide(&req, &[warm.clone(), cold.clone()], seed)
                .unwrap();
            assert_eq!((d.replica, d.spilled), (0, false), "{p:?}: {d:?}");
        }
    }
    // Once the wait there is longer than the prefill a move repeats, counted for the
    // request and for the fleet, it leaves.
    let mut backed_up = warm.clone();
    backed_up.pending_prefill_tokens = 4 * 2112;
    backed_up.inflight_requests = 4;
    let d = sched(Policy::PredictedTtft)
        .decide(&req, &[backed_up, cold], 1)
        .unwrap();
    assert_eq!(d.replica, 1, "{d:?}");
}

#[test]
fn idle_replicas_take_their_share_from_a_busy_warm_one() {
    // Twenty requests on the warm replica: the load scorers want the idle one. Moving
    // repeats 2048 tokens of prefill, but on an idle replica that delays nobody, so the
    // stickiness rule lets it go (a replica that is busy at all would have kept it).
    let m = TtftModel::default();
    let req = prompt(2112, 132);
    let warm = view(0, 16, engine(16.0, 4.0, 0.8), 128, &m);
    let idle = view(1, 0, engine(0.0, 0.0, 0.0), 0, &m);
    let d = sched(Policy::Prefix)
        .decide(&req, &[warm.clone(), idle], 1)
        .unwrap();
    assert_eq!(d.replica, 1, "{d:?}");
    let busy = view(1, 1, engine(1.0, 0.0, 0.0), 0, &m);
    let d = sched(Policy::Prefix)
        .decide(&req, &[warm, busy], 1)
        .unwrap();
    assert_eq!(d.replica, 0, "{d:?}");
}

#[test]
fn a_short_shared_prefix_is_not_worth_a_queue() {
    // Conversations share a 256-token system prompt (4 blocks of 64): on replica 0, with a
    // dozen requests queued, it is 80 % of a new conversation's first turn. The prefix scorer
    // outweighs anything the load scorers can take away, but prefilling 320 tokens on an idle
    // replica costs far less than the queue: the request leaves.
    let m = TtftModel::default();
    let req = prompt(320, 5);
    // The engine batches them all (running, none waiting): the queue scorer sees nothing.
    let mut backed_up = view(0, 12, engine(12.0, 0.0, 0.3), 4, &m);
    backed_up.pending_prefill_tokens = 12 * 64;
    let idle = view(1, 0, engine(0.0, 0.0, 0.0), 0, &m);
    let busy = view(2, 12, engine(12.0, 0.0, 0.3), 0, &m);
    for seed in 0..10 {
        let d = sched(Policy::Prefix)
            .decide(&req, &[backed_up.clone(), idle.clone(), busy.clone()], seed)
            .unwrap();
        assert_eq!((d.replica, d.reason), (1, "left_backed_up"), "{d:?}");
    }
    // The operator's factor: with the rule off (inf), or asking for a move only when the pick
    // costs more than a thousand times the cheapest, the request stays with its prefix.
    for leave_factor in [f64::INFINITY, 1000.0] {
        let s = Scheduler::new(SchedulerConfig {
            placement: Placement {
                leave_factor,
                ..Placement::default()
            },
            ..SchedulerConfig::default()
        });
        let d = s
            .decide(&req, &[backed_up.clone(), idle.clone(), busy.clone()], 1)
            .unwrap();
        assert_eq!((d.replica, d.reason), (0, "weighted_score"), "{d:?}");
    }
    // Two queued there: waiting is cheaper than the prefill a move repeats; it stays.
    let mut short_queue = view(0, 2, engine(2.0, 0.0, 0.1), 4, &m);
    short_queue.pending_prefill_tokens = 64;
    let d = sched(Policy::Prefix)
        .decide(&req, &[short_queue, idle.clone()], 1)
        .unwrap();
    assert_eq!((d.replica, d.reason), (0, "weighted_score"), "{d:?}");
    // A long prefix (3000 of 3040 tokens) is worth the same dozen queued.
    let long = prompt(3040, 48);
    let mut doc = view(0, 12, engine(12.0, 0.0, 0.3), 47, &m);
    doc.pending_prefill_tokens = 12 * 64;
    let d = sched(Policy::Prefix)
        .decide(&long, &[doc, idle], 1)
        .unwrap();
    assert_eq!((d.replica, d.reason), (0, "weighted_score"), "{d:?}");
}

#[test]
fn a_replica_under_its_share_is_not_left_for_a_moment_of_prefill() {
    // A conversation's turn (4 of its 5 blocks cached on replica 0), which has one request in
    // flight: a long cold prompt, 3,000 tokens of prefill ahead. The cost comparison alone
    // moves the turn to an idle replica; with `leave_over_share`, a replica holding no more
    // than its share of the fleet's requests is only busy for a moment, and the turn stays.
    let m = TtftModel::default();
    let req = prompt(320, 5);
    let mut warm = view(0, 1, engine(1.0, 0.0, 0.3), 4, &m);
    warm.pending_prefill_tokens = 3000;
    let others = [
        view(1, 1, engine(1.0, 0.0, 0.1), 0, &m),
        view(2, 0, engine(0.0, 0.0, 0.0), 0, &m),
    ];
    let fleet = [warm.clone(), others[0].clone(), others[1].clone()];
    let d = sched(Policy::Prefix).decide(&req, &fleet, 1).unwrap();
    assert_eq!((d.replica, d.reason), (2, "left_backed_up"), "{d:?}");
    let over_share = |share| {
        Scheduler::new(SchedulerConfig {
            placement: Placement {
                leave_over_share: share,
                ..Placement::default()
            },
            ..SchedulerConfig::default()
        })
    };
    let d = over_share(1.5).decide(&req, &fleet, 1).unwrap();
    assert_eq!((d.replica, d.reason), (0, "weighted_score"), "{d:?}");
    // A dozen requests there against one elsewhere: over its share, the turn leaves.
    let mut crowded = view(0, 12, engine(12.0, 0.0, 0.3), 4, &m);
    crowded.pending_prefill_tokens = 3000;
    let fleet = [crowded, others[0].clone(), others[1].clone()];
    let d = over_share(1.5).decide(&req, &fleet, 1).unwrap();
    assert_eq!((d.replica, d.reason), (2, "left_backed_up"), "{d:?}");
}

#[test]
fn a_slow_fleet_weighs_a_move_at_its_learned_prefill_cost() {
    // 1024 tokens, 960 of them cached on replica 0, which has eight requests and 512 tokens of
    // prefill ahead. At the prior's 50 us per token the idle replica costs half as much and
    // the request would leave; at the 300 us per token the replicas have shown, the move's
    // prefill is worth more than the queue: it stays.
    let req = prompt(1024, 64);
    let prior = TtftModel::default();
    let slow = trained(0.000_3);
    for (m, leaves) in [(&prior, true), (&slow, false)] {
        let mut warm = view(0, 8, engine(8.0, 0.0, 0.5), 60, m);
        warm.pending_prefill_tokens = 512;
        let idle = view(1, 0, engine(0.0, 0.0, 0.0), 0, m);
        let d = sched(Policy::Prefix)
            .decide(&req, &[warm, idle], 1)
            .unwrap();
        assert_eq!(d.replica == 1, leaves, "{d:?}");
    }
}

#[test]
fn no_spill_when_the_whole_fleet_is_backed_up() {
    // Every replica has most of a second of prefill queued: the warm one a little more. A
    // spill would add a cold prefill to a fleet without spare capacity.
    let m = trained(0.000_1);
    let req = prompt(2112, 132);
    let mut warm = view(0, 6, None, 128, &m);
    warm.pending_prefill_tokens = 8000;
    let mut cold = view(1, 5, None, 0, &m);
    cold.pending_prefill_tokens = 6000;
    assert!(warm.predicted_wait() > 0.5 && cold.predicted_wait() > 0.5);
    for p in BOTH {
        let d = sched(p)
            .decide(&req, &[warm.clone(), cold.clone()], 1)
            .unwrap();
        assert_eq!((d.replica, d.spilled), (0, false), "{p:?}: {d:?}");
    }
    // A replica with little queued is another matter: that is a hot spot (which the weighted
    // pick itself now leaves before the guard would spill it).
    cold.pending_prefill_tokens = 0;
    cold.inflight_requests = 0;
    let d = sched(Policy::Prefix)
        .decide(&req, &[warm, cold], 1)
        .unwrap();
    assert_eq!((d.replica, d.reason), (1, "left_backed_up"), "{d:?}");
}

#[test]
fn no_spill_to_a_replica_that_is_backed_up_itself() {
    // A saturated fleet whose hot replica waits more than twice as long as another: the other
    // is still past the bound. Spilling there adds a cold prefill where there is no spare
    // capacity (and evicts other prefixes); the guard used to do it.
    let m = trained(0.000_1);
    let req = prompt(2112, 132);
    let mut warm = view(0, 8, None, 128, &m);
    warm.pending_prefill_tokens = 16_000;
    let mut other = view(1, 5, None, 0, &m);
    other.pending_prefill_tokens = 6_000;
    let (hot, busy) = (warm.predicted_wait(), other.predicted_wait());
    assert!(busy > 0.5 && busy <= hot / 2.0, "{hot} {busy}");
    for p in BOTH {
        let d = sched(p)
            .decide(&req, &[warm.clone(), other.clone()], 1)
            .unwrap();
        assert!(!d.spilled, "{p:?}: {d:?}");
    }
    let d = sched(Policy::Prefix)
        .decide(&req, &[warm, other], 1)
        .unwrap();
    assert_eq!(d.replica, 0, "{d:?}");
}

#[test]
fn load_scorers_do_not_move_a_document_off_its_warm_replica() {
    // Replica 0 holds the 3000-token document and serves six questions on it (KV 75 %
    // used, three waiting); replica 1 is idle and cold. The load, queue and KV scorers
    // together outweigh the prefix scorer, but the wait on replica 0 (~0.07 s) is far
    // below the 0.15 s cold prefill a move would add, twice.
    let m = TtftModel::default();
    let req = prompt(3040, 190);
    let warm = view(0, 6, engine(3.0, 3.0, 0.75), 188, &m);
    let cold = view(1, 0, engine(0.0, 0.0, 0.0), 0, &m);
    let d = sched(Policy::Prefix)
        .decide(&req, &[warm.clone(), cold.clone()], 1)
        .unwrap();
    assert_eq!((d.replica, d.reason), (0, "weighted_score"), "{d:?}");
    // A real backlog there does move it.
    let backed_up = view(0, 40, engine(8.0, 32.0, 1.0), 188, &m);
    let d = sched(Policy::Prefix)
        .decide(&req, &[backed_up, cold], 1)
        .unwrap();
    assert_eq!(d.replica, 1, "{d:?}");
}

#[test]
fn round_robin_is_fair() {
    let m = TtftModel::default();
    let cands: Vec<_> = (0..5).map(|i| view(i, i * 10, None, i * 100, &m)).collect();
    let mut count = [0u32; 5];
    for seed in 0..500 {
        let d = sched(Policy::RoundRobin)
            .decide(&request(), &cands, seed)
            .unwrap();
        assert_eq!(d.index as u32, d.replica);
        count[d.index] += 1;
    }
    assert_eq!(count, [100; 5]);
}

#[test]
fn least_load_picks_the_emptiest() {
    let m = TtftModel::default();
    let cands = [
        view(0, 5, engine(9.0, 2.0, 0.5), 512, &m),
        view(1, 5, engine(3.0, 0.0, 0.5), 0, &m),
        view(2, 8, None, 0, &m),
    ];
    let d = sched(Policy::LeastLoad)
        .decide(&request(), &cands, 0)
        .unwrap();
    assert_eq!((d.replica, d.reason), (1, "least_load"));
    // Equal requests: fewer in-flight tokens wins.
    let mut a = view(0, 4, None, 0, &m);
    let mut b = view(1, 4, None, 0, &m);
    a.inflight_tokens = 9000;
    b.inflight_tokens = 100;
    assert_eq!(
        sched(Policy::LeastLoad)
            .decide(&request(), &[a, b], 0)
            .unwrap()
            .replica,
        1
    );
}

#[test]
fn ties_break_at_random() {
    let m = TtftModel::default();
    let cands: Vec<_> = (0..4)
        .map(|i| view(i, 1, engine(1.0, 0.0, 0.1), 0, &m))
        .collect();
    for p in [
        Policy::LeastLoad,
        Policy::Prefix,
        Policy::PredictedTtft,
        Policy::LlmD,
        Policy::Dynamo,
    ] {
        let mut count = [0u32; 4];
        for seed in 0..4000 {
            count[sched(p).decide(&request(), &cands, seed).unwrap().index] += 1;
        }
        assert!(
            count.iter().all(|&c| (800..1200).contains(&c)),
            "{p:?}: {count:?}"
        );
        // Same seed, same decision.
        let a = sched(p).decide(&request(), &cands, 77);
        assert_eq!(a, sched(p).decide(&request(), &cands, 77));
    }
}

#[test]
fn odd_inputs_still_decide() {
    let m = TtftModel::default();
    let req = RequestView {
        prompt_tokens: 0,
        blocks: 0,
        tokens_per_block: 0,
    };
    let cands = [view(0, 0, engine(f64::INFINITY, -1.0, 7.0), 3, &m)];
    let weird = SchedulerConfig {
        policy: Policy::Prefix,
        weights: Weights {
            prefix: f64::NAN,
            load: -1.0,
            queue: 0.0,
            kv_cache: f64::INFINITY,
        },
        hotspot: HotspotGuard {
            max_wait_s: f64::NAN,
            spill_factor: -1.0,
        },
        placement: Placement {
            new_prefix_slack: f64::NAN,
            leave_factor: f64::NAN,
            leave_over_share: f64::NAN,
            drain_pending_prefill: false,
        },
        consistent_hash: ConsistentHash {
            prefix_blocks: 0,
            epsilon: f64::NAN,
            virtual_nodes: 0,
        },
        llm_d: LlmD {
            prefix: f64::NAN,
            queue: -1.0,
            kv_cache: f64::INFINITY,
            max_prefix_tokens: 0,
        },
        dynamo: Dynamo {
            overlap_score_weight: f64::NEG_INFINITY,
        },
    };
    for policy in ALL {
        let s = Scheduler::new(SchedulerConfig { policy, ..weird });
        let d = s.decide_with_hashes(&req, &[], &cands, 0).unwrap();
        assert_eq!(d.index, 0, "{policy:?}");
    }
    let d = Scheduler::new(weird).decide(&req, &cands, 0).unwrap();
    assert_eq!(d.index, 0);
    // Absurd engine counts are unknown: the router's own count (here 9) is used instead.
    let huge = [
        view(0, 9, engine(f64::MAX, f64::MAX, 0.5), 0, &m),
        view(1, 3, engine(3.0, 0.0, 0.5), 0, &m),
    ];
    assert_eq!(huge[0].queued_ahead(), 9.0);
    for p in [Policy::LeastLoad, Policy::Prefix, Policy::PredictedTtft] {
        let d = sched(p).decide(&request(), &huge, 1).unwrap();
        assert_eq!(d.replica, 1, "{p:?}");
        assert!(d.predicted_ttft_s.is_finite());
    }
    assert!(d.predicted_ttft_s.is_finite());
    assert_eq!(req.uncached_tokens(5), 0);
    assert_eq!(request().uncached_tokens(10_000), 0);
    assert_eq!(request().uncached_tokens(2), 8192 - 32);
}

#[test]
fn peer_policies_are_named_and_never_spill() {
    let m = TtftModel::default();
    let (req, hot) = (prompt(32_768, 2048), hot_fleet(&m));
    let guarded = sched(Policy::PredictedTtft).decide(&req, &hot, 1);
    assert!(guarded.unwrap().spilled);
    for (policy, reason) in PEERS
        .into_iter()
        .zip(["consistent_hash", "llm_d", "dynamo"])
    {
        for seed in 0..10 {
            let d = sched(policy)
                .decide_with_hashes(&req, &[5, 6, 7, 8], &hot, seed)
                .unwrap();
            assert_eq!((d.reason, d.spilled), (reason, false), "{policy:?}");
            assert!(d.predicted_ttft_s.is_finite());
        }
    }
    // Dynamo: warm costs 0 + 90 × 1000 / 16 active blocks, cold 2048 prefill blocks and 2048
    // new ones: cold.
    // llm-d: warm 3 + 0 (queue 30 is the max) + 2 × 0.4 = 3.8, cold 0 + 2 + 2 = 4: cold.
    for policy in [Policy::LlmD, Policy::Dynamo] {
        assert_eq!(
            sched(policy).decide(&req, &hot, 1).unwrap().replica,
            1,
            "{policy:?}"
        );
    }
}

#[test]
fn consistent_hash_keys_on_the_hashes_it_is_given() {
    let m = TtftModel::default();
    let cands: Vec<_> = (0..8).map(|i| view(i, 0, None, 0, &m)).collect();
    let s = sched(Policy::ConsistentHash);
    let req = request();
    let pick = |hashes: &[u64]| {
        s.decide_with_hashes(&req, hashes, &cands, 0)
            .unwrap()
            .replica
    };
    // Same first four blocks: same replica, whatever follows and whatever the seed.
    let home = pick(&[1, 2, 3, 4, 5]);
    for seed in 0..20 {
        let d = s.decide_with_hashes(&req, &[1, 2, 3, 4, 99], &cands, seed);
        assert_eq!(d.unwrap().replica, home);
    }
    // Different keys reach every replica.
    let mut seen = std::collections::BTreeSet::new();
    for k in 0..400u64 {
        seen.insert(pick(&[k.wrapping_mul(0x9e37_79b9_7f4a_7c15)]));
    }
    assert_eq!(seen.len(), 8);
    // Through `decide` (no hashes) every request has the empty prompt's key.
    assert_eq!(s.decide(&req, &cands, 3).unwrap().replica, pick(&[]),);
    // The prefix index plays no part: a replica holding the whole prompt is not preferred.
    let mut warm = cands.clone();
    let other = (home as usize + 1) % 8;
    warm[other].matched_blocks = 512;
    assert_eq!(
        s.decide_with_hashes(&req, &[1, 2, 3, 4], &warm, 0)
            .unwrap()
            .replica,
        home
    );
}

#[test]
fn peer_policies_follow_their_settings() {
    let m = TtftModel::default();
    let req = prompt(1024, 64);
    // Warm with 131 active blocks against cold and idle (64 to prefill, 64 new to hold).
    let mut busy = view(0, 1, None, 64, &m);
    busy.inflight_uncached_tokens = 2100;
    let cold = view(1, 0, None, 0, &m);
    let dynamo = |w: f64| {
        Scheduler::new(SchedulerConfig {
            policy: Policy::Dynamo,
            dynamo: Dynamo {
                overlap_score_weight: w,
            },
            ..SchedulerConfig::default()
        })
        .decide(&req, &[busy.clone(), cold.clone()], 1)
        .unwrap()
        .replica
    };
    assert_eq!((dynamo(1.0), dynamo(2.0)), (1, 0));
    // llm-d with only its prefix scorer: the warm one, whatever its load.
    let loaded = view(0, 50, engine(40.0, 10.0, 0.95), 64, &m);
    let idle = view(1, 0, engine(0.0, 0.0, 0.0), 0, &m);
    let llm_d = |prefix: f64| {
        Scheduler::new(SchedulerConfig {
            policy: Policy::LlmD,
            llm_d: LlmD {
                prefix,
                queue: 2.0,
                kv_cache: 2.0,
                ..LlmD::default()
            },
            ..SchedulerConfig::default()
        })
        .decide(&req, &[loaded.clone(), idle.clone()], 1)
        .unwrap()
        .replica
    };
    assert_eq!((llm_d(3.0), llm_d(10.0)), (1, 0));
    // Consistent hashing's bound: with epsilon 0 a replica holding more than its share of the
    // in-flight requests passes the request on.
    let s = |epsilon: f64| {
        Scheduler::new(SchedulerConfig {
            policy: Policy::ConsistentHash,
            consistent_hash: ConsistentHash {
                epsilon,
                ..ConsistentHash::default()
            },
            ..SchedulerConfig::default()
        })
    };
    let idle: Vec<_> = (0..4).map(|i| view(i, 0, None, 0, &m)).collect();
    let home = s(0.0)
        .decide_with_hashes(&req, &[77], &idle, 0)
        .unwrap()
        .index;
    let mut load: Vec<_> = idle.clone();
    load[home].inflight_requests = 2;
    load[(home + 1) % 4].inflight_requests = 1;
    // 3 in flight: capacity ceil(1 × 4 / 4) = 1 at epsilon 0, ceil(2 × 4 / 4) = 2 at 1, 3 at 2.
    assert_ne!(
        s(0.0)
            .decide_with_hashes(&req, &[77], &load, 0)
            .unwrap()
            .index,
        home
    );
    assert_ne!(
        s(1.0)
            .decide_with_hashes(&req, &[77], &load, 0)
            .unwrap()
            .index,
        home
    );
    assert_eq!(
        s(2.0)
            .decide_with_hashes(&req, &[77], &load, 0)
            .unwrap()
            .index,
        home
    );
}

fn any_f64() -> impl proptest::strategy::Strategy<Value = f64> {
    use proptest::prelude::*;
    prop_oneof![
        4 => 0.0f64..100.0,
        1 => Just(f64::NAN),
        1 => Just(f64::INFINITY),
        1 => Just(-1.0),
        1 => Just(f64::MAX),
    ]
}

proptest::proptest! {
    #[test]
    fn any_input_gives_an_in_range_decision(
        views in proptest::collection::vec(
            (0u32..1000, any_f64(), any_f64(), any_f64(), proptest::option::of(proptest::arbitrary::any::<bool>()), 0u32..5000),
            1..40,
        ),
        prompt_tokens in 0u32..200_000,
        blocks in 0u32..5000,
        tokens_per_block in 0u32..64,
        seed in proptest::arbitrary::any::<u64>(),
        policy in proptest::sample::select(ALL.to_vec()),
        hashes in proptest::collection::vec(proptest::arbitrary::any::<u64>(), 0..8),
    ) {
        let m = TtftModel::default();
        let cands: Vec<ReplicaView<'_>> = views
            .iter()
            .enumerate()
            .map(|(i, &(inflight, running, waiting, kv, fresh, matched))| ReplicaView {
                id: i as u32,
                key: i as u64,
                inflight_requests: inflight,
                inflight_tokens: u64::from(inflight) * 100,
                engine: fresh.map(|_| EngineLoad { running, waiting, kv_cache_usage: kv }),
                matched_blocks: matched,
                pending_prefill_tokens: u64::from(inflight) * 50,
                inflight_uncached_tokens: 0,
                room: None,
                ttft: &m,
            })
            .collect();
        let req = RequestView { prompt_tokens, blocks, tokens_per_block };
        let s = sched(policy);
        let d = s.decide_with_hashes(&req, &hashes, &cands, seed).unwrap();
        proptest::prop_assert_eq!(&s.decide_with_hashes(&req, &hashes, &cands, seed), &Some(d.clone()));
        proptest::prop_assert!(d.index < cands.len());
        proptest::prop_assert_eq!(d.replica, cands[d.index].id);
        proptest::prop_assert!(d.predicted_ttft_s.is_finite() && d.predicted_ttft_s >= 0.0);
        proptest::prop_assert!(req.uncached_tokens(d.matched_blocks) <= prompt_tokens);
    }
}

/// Prompts whose first `blocks` block hashes are new (seeded by `seed`).
fn new_prompt(seed: u64, blocks: u64) -> Vec<BlockHash> {
    (0..blocks)
        .map(|b| seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ b)
        .collect()
}

#[test]
fn routers_with_slightly_different_load_views_agree_on_a_new_prefix_home() {
    let m = TtftModel::default();
    // Two routers, each counting only its own requests in flight.
    let a: Vec<_> = [3, 4, 3, 5]
        .iter()
        .enumerate()
        .map(|(i, &n)| view(i as ReplicaId, n, engine(8.0, 0.0, 0.5), 0, &m))
        .collect();
    let b: Vec<_> = [4, 3, 4, 4]
        .iter()
        .enumerate()
        .map(|(i, &n)| view(i as ReplicaId, n, engine(8.0, 0.0, 0.5), 0, &m))
        .collect();
    let s = sched(Policy::Prefix);
    let mut homes = [0u32; 4];
    for seed in 0..4000 {
        let hashes = new_prompt(seed, 8);
        let da = s.decide_with_hashes(&request(), &hashes, &a, seed).unwrap();
        let db = s
            .decide_with_hashes(&request(), &hashes, &b, seed ^ 0xff)
            .unwrap();
        assert_eq!(da.replica, db.replica, "prompt {seed}: {da:?} {db:?}");
        homes[da.index] += 1;
    }
    // And distinct new prefixes spread evenly over the fleet.
    assert!(homes.iter().all(|&c| (850..1150).contains(&c)), "{homes:?}");
    // Without it, each router takes its own least-loaded replica.
    let off = Scheduler::new(SchedulerConfig {
        placement: Placement {
            new_prefix_slack: -1.0,
            ..Placement::default()
        },
        ..SchedulerConfig::default()
    });
    let hashes = new_prompt(1, 8);
    let da = off.decide_with_hashes(&request(), &hashes, &a, 1).unwrap();
    let db = off.decide_with_hashes(&request(), &hashes, &b, 1).unwrap();
    assert!(
        [0, 2].contains(&da.replica) && db.replica == 1,
        "{da:?} {db:?}"
    );
}

#[test]
fn a_new_prefix_home_is_chosen_by_the_first_unmatched_block_among_the_warmest() {
    let m = TtftModel::default();
    let s = sched(Policy::Prefix);
    // All hold the shared first 2 blocks (a common system prompt); what follows is new.
    let cands: Vec<_> = (0..4).map(|i| view(i, 2, None, 2, &m)).collect();
    let mut homes = std::collections::BTreeSet::new();
    for seed in 0..64 {
        let mut hashes = vec![11, 12];
        hashes.extend(new_prompt(seed, 6));
        let d = s
            .decide_with_hashes(&request(), &hashes, &cands, seed)
            .unwrap();
        // The same prompt goes to the same home whatever the tie-break seed.
        for other in 0..8 {
            let again = s
                .decide_with_hashes(&request(), &hashes, &cands, other)
                .unwrap();
            assert_eq!(again.replica, d.replica);
        }
        homes.insert(d.replica);
    }
    // The shared blocks do not pile every prompt onto one replica.
    assert_eq!(homes.len(), 4);
}

/// Caches full everywhere: a new prefix displaces the fleet's coldest blocks (the replica whose
/// least recently used block was used longest ago, or one nearly as cold), whatever its hash
/// names among the rest; where some
/// replica still has room for it, it evicts nothing and the hash chooses among those.
#[test]
fn a_new_prefix_goes_where_it_evicts_the_coldest_blocks_or_nothing() {
    use crate::index::CacheRoom;
    let m = TtftModel::default();
    let s = sched(Policy::Prefix);
    let room = |free_blocks, idle_routings| {
        Some(CacheRoom {
            free_blocks,
            idle_routings,
        })
    };
    let req = prompt(1024, 64);
    let mut hashed = std::collections::BTreeSet::new();
    let mut near = std::collections::BTreeSet::new();
    for seed in 0..64 {
        let hashes = new_prompt(seed, 64);
        // Full caches; replica 2's next victim is the coldest.
        let mut cands: Vec<_> = (0..4).map(|i| view(i, 2, None, 0, &m)).collect();
        for (c, idle) in cands.iter_mut().zip([40, 90, 300, 10]) {
            c.room = room(0, idle);
        }
        let d = s.decide_with_hashes(&req, &hashes, &cands, seed).unwrap();
        assert_eq!(d.replica, 2, "prompt {seed}: {d:?}");
        // Two nearly as cold (within COLD_ENOUGH): the hash chooses between them.
        cands[1].room = room(0, 260);
        let d = s.decide_with_hashes(&req, &hashes, &cands, seed).unwrap();
        assert!([1, 2].contains(&d.replica), "prompt {seed}: {d:?}");
        near.insert(d.replica);
        // Replicas 1 and 3 have room for all 64 new blocks, replica 0 for only 63: one of
        // the two, by the hash.
        cands[1].room = room(64, 5);
        cands[3].room = room(500, u32::MAX);
        cands[0].room = room(63, 1000);
        let d = s.decide_with_hashes(&req, &hashes, &cands, seed).unwrap();
        assert!([1, 3].contains(&d.replica), "prompt {seed}: {d:?}");
        hashed.insert(d.replica);
        // A replica beyond the load slack is not chosen for its cold victim.
        let mut busy: Vec<_> = (0..2).map(|i| view(i, 0, None, 0, &m)).collect();
        busy[0].room = room(0, 10);
        busy[1] = view(1, 14, None, 0, &m);
        busy[1].room = room(0, 1000);
        let d = s.decide_with_hashes(&req, &hashes, &busy, seed).unwrap();
        assert_eq!(d.replica, 0, "prompt {seed}: {d:?}");
    }
    assert_eq!(
        hashed.len(),
        2,
        "the hash spreads prompts over both: {hashed:?}"
    );
}

#[test]
fn load_beyond_the_slack_and_a_warmer_replica_still_win() {
    let m = TtftModel::default();
    let s = sched(Policy::Prefix);
    for seed in 0..200 {
        let hashes = new_prompt(seed, 8);
        // Replica 1 has 12 more in flight (0.75 of load score at the floor of 16): never home.
        let cands = [view(0, 0, None, 0, &m), view(1, 12, None, 0, &m)];
        let d = s
            .decide_with_hashes(&request(), &hashes, &cands, seed)
            .unwrap();
        assert_eq!(d.replica, 0);
        // Replica 1 holds the prompt's first block: it is warmest and stays the choice.
        let cands = [view(0, 1, None, 0, &m), view(1, 1, None, 1, &m)];
        let d = s
            .decide_with_hashes(&request(), &hashes, &cands, seed)
            .unwrap();
        assert_eq!(d.replica, 1);
    }
}

/// Under load, moving a conversation off its warm replica repeats its prefill in front of every
/// request queued where it goes: `predicted_ttft` counts that, and stays where a move would
/// only trade the fleet's work for this request's TTFT.
#[test]
fn predicted_ttft_does_not_trade_a_warm_history_for_a_slightly_shorter_queue() {
    let m = TtftModel::default();
    // 1,024 tokens, 60 of 64 blocks warm on replica 0 (15 ahead), none on replica 1 (2 ahead).
    let req = prompt(1024, 64);
    let busy = |warm: u32, ahead: u32, id: ReplicaId| {
        let mut v = view(id, ahead, engine(f64::from(ahead), 0.0, 0.5), warm, &m);
        v.inflight_uncached_tokens = 0;
        v
    };
    let cands = [busy(60, 15, 0), busy(0, 2, 1)];
    // Its TTFT alone would be shorter on the cold replica…
    let ttft = Predictor::new(&req, &cands);
    assert!(ttft.of(&cands[1]) < ttft.of(&cands[0]));
    // …but the prefill it would repeat there, for itself and the two ahead of it, is not.
    let d = sched(Policy::PredictedTtft)
        .decide(&req, &cands, 1)
        .unwrap();
    assert_eq!(d.replica, 0, "{d:?}");
    // On an idle cold replica, where it delays no one, a long enough wait still moves it.
    let cands = [busy(60, 40, 0), busy(0, 0, 1)];
    let d = sched(Policy::PredictedTtft)
        .decide(&req, &cands, 1)
        .unwrap();
    assert_eq!(d.replica, 1, "{d:?}");
}
