//! The routing core driven the way the router drives it: hash the prompt, ask the index, decide,
//! record the decision, learn from the (simulated) TTFT. Checks the behaviours the pieces only
//! show together: conversations stick to their warm replica at light load, a hot shared prefix
//! spreads (and becomes warm elsewhere) at heavy load.

use warmpath_routing::index::{ApproxIndex, IndexLimits, PrefixIndex};
use warmpath_routing::predict::TtftModel;
use warmpath_routing::prompt::{estimate_tokens, BlockHasher};
use warmpath_routing::scheduler::{
    Decision, HotspotGuard, Policy, ReplicaView, RequestView, Scheduler, SchedulerConfig,
};
use warmpath_routing::ReplicaId;

const BLOCK_BYTES: usize = 64;

struct Router {
    hasher: BlockHasher,
    index: ApproxIndex,
    scheduler: Scheduler,
    models: Vec<TtftModel>,
    inflight: Vec<u32>,
    ids: Vec<ReplicaId>,
    matched: Vec<u32>,
}

impl Router {
    fn new(replicas: u32, policy: Policy) -> Self {
        Self {
            hasher: BlockHasher::new(BLOCK_BYTES),
            index: ApproxIndex::new(IndexLimits {
                max_bytes_per_replica: 4 << 20,
            }),
            // The hot-spot guard on (it is off by default): the heavy-load test is about it.
            scheduler: Scheduler::new(SchedulerConfig {
                policy,
                hotspot: HotspotGuard {
                    max_wait_s: 0.5,
                    spill_factor: 2.0,
                },
                ..SchedulerConfig::default()
            }),
            models: (0..replicas).map(|_| TtftModel::default()).collect(),
            inflight: vec![0; replicas as usize],
            ids: (0..replicas).collect(),
            matched: vec![0; replicas as usize],
        }
    }

    fn route(&mut self, messages: &[(&str, &str)], seed: u64) -> Decision {
        let h = self.hasher.hash_chat(messages.iter().copied());
        self.index
            .longest_prefix(&h.hashes, &self.ids, &mut self.matched);
        let request = RequestView {
            prompt_tokens: estimate_tokens(h.total_bytes),
            blocks: h.hashes.len() as u32,
            tokens_per_block: (BLOCK_BYTES / 4) as u32,
        };
        let views: Vec<ReplicaView<'_>> = self
            .ids
            .iter()
            .enumerate()
            .map(|(i, &id)| ReplicaView {
                id,
                key: u64::from(id),
                inflight_requests: self.inflight[i],
                inflight_tokens: 0,
                engine: None,
                matched_blocks: self.matched[i],
                pending_prefill_tokens: 0,
                inflight_uncached_tokens: 0,
                room: None,
                ttft: &self.models[i],
            })
            .collect();
        let d = self
            .scheduler
            .decide_with_hashes(&request, &h.hashes, &views, seed)
            .expect("replicas");
        self.index.on_routed(d.replica, &h.hashes);
        d
    }
}

fn words(seed: u64, n: usize) -> String {
    (0..n)
        .map(|i| format!("w{}", (seed * 7919 + i as u64 * 104_729) % 1000))
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn conversations_stick_to_their_replica_at_light_load() {
    // The peer baselines too: consistent hashing keys on the system prompt's first blocks, and
    // llm-d's and Dynamo's scores come down to the prefix match on an idle fleet.
    for policy in Policy::ALL.into_iter().filter(|p| p.is_prefix_aware()) {
        let mut r = Router::new(4, policy);
        let mut histories: Vec<Vec<(String, String)>> = (0..8)
            .map(|c| vec![("system".into(), words(c, 400))])
            .collect();
        let mut home: Vec<Option<ReplicaId>> = vec![None; 8];
        let (mut stuck, mut turns) = (0, 0);
        for turn in 0..6u64 {
            for c in 0..8usize {
                histories[c].push(("user".into(), words(turn * 100 + c as u64, 30)));
                let msgs: Vec<(&str, &str)> = histories[c]
                    .iter()
                    .map(|(a, b)| (a.as_str(), b.as_str()))
                    .collect();
                // Light load: the router has at most one request in flight anywhere.
                let d = r.route(&msgs, turn * 8 + c as u64);
                if let Some(h) = home[c] {
                    turns += 1;
                    stuck += u32::from(h == d.replica);
                    assert!(
                        d.matched_blocks > 0,
                        "{policy:?}: turn {turn} of {c} was cold"
                    );
                }
                home[c] = Some(d.replica);
                histories[c].push(("assistant".into(), words(turn * 1000 + c as u64, 20)));
            }
        }
        assert_eq!(stuck, turns, "{policy:?}");
        // And the conversations did not all pile onto one replica.
        let mut used: Vec<ReplicaId> = home.iter().flatten().copied().collect();
        used.sort_unstable();
        used.dedup();
        assert!(used.len() >= 2, "{policy:?}: {used:?}");
    }
}

#[test]
fn hot_shared_prefix_spreads_at_heavy_load() {
    // A 32k-token shared system prompt: cold prefill is expensive (1.6 s at the prior's cost),
    // so only queueing can justify moving it, and the hot-spot guard must do so early.
    let system = words(1, 26_000);
    assert!(system.len() > 120_000);
    let mut r = Router::new(4, Policy::PredictedTtft);
    let mut spills = 0;
    let mut per_replica = [0u32; 4];
    for i in 0..400u64 {
        let q = words(10_000 + i, 10);
        let d = r.route(&[("system", &system), ("user", &q)], i);
        spills += u32::from(d.spilled);
        if i >= 300 {
            // Once the spills have happened: where does the steady stream go?
            per_replica[d.index] += 1;
        }
        // Heavy load: requests arrive faster than they finish (one finishes every other
        // arrival, on the busiest replica).
        r.inflight[d.index] += 1;
        if i % 2 == 0 {
            let busiest = (0..4).max_by_key(|&j| r.inflight[j]).expect("replicas");
            r.inflight[busiest] -= 1;
        }
    }
    assert!(spills >= 1, "{per_replica:?}");
    // The prefix became warm on more replicas, which then share the load.
    let h = r.hasher.hash_chat([("system", system.as_str())]);
    let mut out = vec![0; 4];
    r.index.longest_prefix(&h.hashes, &r.ids, &mut out);
    let warm: Vec<usize> = (0..4)
        .filter(|&j| out[j] as usize == h.hashes.len())
        .collect();
    assert!(warm.len() >= 2, "{out:?} {per_replica:?}");
    // Their queues are balanced: the warm replicas share the stream.
    let queues: Vec<u32> = warm.iter().map(|&j| r.inflight[j]).collect();
    let (min, max) = (
        queues.iter().min().copied().unwrap_or(0),
        queues.iter().max().copied().unwrap_or(0),
    );
    assert!(max - min <= 2, "{queues:?} {per_replica:?}");
    assert!(warm.iter().all(|&j| per_replica[j] > 0), "{per_replica:?}");
    // Replicas never warmed get nothing (no cold prefills beyond the spills).
    for j in 0..4 {
        if !warm.contains(&j) {
            assert_eq!(per_replica[j], 0, "{out:?} {per_replica:?}");
        }
    }
}

#[test]
fn hot_shared_prefix_sticks_at_light_load() {
    let system = words(1, 26_000);
    let mut r = Router::new(4, Policy::PredictedTtft);
    let mut homes = Vec::new();
    for i in 0..50u64 {
        let q = words(10_000 + i, 10);
        let d = r.route(&[("system", &system), ("user", &q)], i);
        assert!(!d.spilled);
        homes.push(d.replica);
        // Each request finishes before the next arrives.
    }
    assert!(homes.iter().all(|&h| h == homes[0]), "{homes:?}");
}
