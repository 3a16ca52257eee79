//! The scheduler in a small discrete-event model of a fleet, under sustained load.
//!
//! Each replica prefills one request at a time (first in, first out) at a fixed cost per
//! uncached token, keeps an LRU prefix cache of a fixed number of tokens, and decodes for a fixed
//! time afterwards (holding its in-flight slot, not the prefill server). The router side is the
//! real routing core: the approximate [`ApproxIndex`], one [`TtftModel`] per replica learning
//! from observed TTFTs, pending-prefill accounting released at the first token, and the
//! [`Scheduler`]. Engine metrics are unknown (stale), so only the router's own counts drive it.
//!
//! The fleet is bistable: served from cache it has several times the capacity it needs; served
//! cold it has a fraction. A scheduler that trades cache hits for a shorter queue under load
//! tips it into the cold state and never comes back (the collapse these tests guard against).
//! Pure and deterministic: no clock, no threads, seeded randomness.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};
use warmpath_routing::index::{ApproxIndex, IndexLimits, PrefixIndex};
use warmpath_routing::predict::TtftModel;
use warmpath_routing::scheduler::{
    EngineLoad, Policy, ReplicaView, RequestView, Scheduler, SchedulerConfig,
};
use warmpath_routing::ReplicaId;

const BLOCK_TOKENS: u32 = 16;
/// Prefill cost: a fixed step overhead plus a cost per uncached token (close to what the router
/// learns from `warmpath-sim --prefill-us-per-token 100` with decodes interleaved).
const STEP_S: f64 = 0.003;
const PER_TOKEN_S: f64 = 0.000_12;
/// Decode time after the first token (32 tokens at ~5 ms).
const DECODE_S: f64 = 0.17;
/// Answers later than this after arrival count as timeouts (the benchmark's sweep timeout).
const TIMEOUT_S: f64 = 10.0;

/// A prompt: a shared prefix (`prefix_key`, `prefix_tokens`) and a unique tail.
#[derive(Debug, Clone, Copy)]
struct Prompt {
    prefix_key: u64,
    prefix_tokens: u32,
    tail_tokens: u32,
}

#[derive(Debug, Clone, Copy)]
enum Workload {
    /// `groups` system prompts of `prefix` tokens, each asked `per_group` questions of `tail`
    /// tokens per pass, in seeded random order.
    SharedPrefix {
        groups: u64,
        per_group: u32,
        prefix: u32,
        tail: u32,
    },
}

struct Prompts {
    workload: Workload,
    order: Vec<u64>,
    rng: SmallRng,
}

impl Prompts {
    fn new(workload: Workload, seed: u64) -> Self {
        Self {
            workload,
            order: Vec::new(),
            rng: SmallRng::seed_from_u64(seed),
        }
    }

    fn next(&mut self) -> Prompt {
        let Workload::SharedPrefix {
            groups,
            per_group,
            prefix,
            tail,
        } = self.workload;
        if self.order.is_empty() {
            self.order = (0..groups)
                .flat_map(|g| std::iter::repeat_n(g, per_group as usize))
                .collect();
            // Fisher-Yates with the seeded generator.
            for i in (1..self.order.len()).rev() {
                let j = self.rng.random_range(0..=i);
                self.order.swap(i, j);
            }
        }
        let g = self.order.pop().unwrap_or(0);
        Prompt {
            prefix_key: g,
            prefix_tokens: prefix,
            tail_tokens: tail,
        }
    }
}

/// Load shape: Poisson arrivals at `rate` per second, or `clients` in a closed loop.
#[derive(Debug, Clone, Copy)]
enum Load {
    Open { rate: f64 },
    Closed { clients: u32 },
}

struct Replica {
    /// LRU prefix cache: (key, tokens), most recent last. Tails are unique keys.
    cache: Vec<(u64, u32)>,
    cache_tokens: u32,
    queue: VecDeque<usize>,
    /// Requests past the queue (prefilling or decoding), for the KV-use figure.
    running: Vec<usize>,
    busy: bool,
    inflight: u32,
    inflight_tokens: u64,
    pending_prefill: u64,
    inflight_uncached: u64,
    model: TtftModel,
}

impl Replica {
    /// What the engine's metrics would say now: requests running (prefilling or decoding) and
    /// waiting, and the share of the cache held by running requests.
    fn engine_load(&self, reqs: &[Req], capacity: u32) -> EngineLoad {
        let waiting = self.queue.len() as u32;
        let running = self.inflight - waiting;
        let mut held: Vec<u64> = Vec::new();
        let mut tokens = 0u32;
        for r in &self.running {
            let p = reqs[*r].prompt;
            if !held.contains(&p.prefix_key) {
                held.push(p.prefix_key);
                tokens += p.prefix_tokens;
            }
            tokens += p.tail_tokens;
        }
        EngineLoad {
            running: f64::from(running),
            waiting: f64::from(waiting),
            kv_cache_usage: (f64::from(tokens) / f64::from(capacity)).min(1.0),
        }
    }

    fn holds(&self, key: u64) -> bool {
        self.cache.iter().any(|&(k, _)| k == key)
    }

    fn touch(&mut self, key: u64, tokens: u32, capacity: u32) {
        if let Some(pos) = self.cache.iter().position(|&(k, _)| k == key) {
            let e = self.cache.remove(pos);
            self.cache.push(e);
            return;
        }
        self.cache.push((key, tokens));
        self.cache_tokens += tokens;
        while self.cache_tokens > capacity && self.cache.len() > 1 {
            let (_, t) = self.cache.remove(0);
            self.cache_tokens -= t;
        }
    }
}

struct Req {
    prompt: Prompt,
    tail_key: u64,
    arrival: f64,
    replica: usize,
    est_uncached: u64,
    prefill_tokens: u32,
    queued_ahead: f64,
}

#[derive(Debug, PartialEq)]
enum Kind {
    Arrival,
    PrefillDone { replica: usize, req: usize },
    DecodeDone { req: usize },
}

#[derive(Debug)]
struct Event {
    at: f64,
    seq: u64,
    kind: Kind,
}

impl PartialEq for Event {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Event {}
impl PartialOrd for Event {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Event {
    // Min-heap on (time, sequence).
    fn cmp(&self, o: &Self) -> Ordering {
        o.at.total_cmp(&self.at).then(o.seq.cmp(&self.seq))
    }
}

#[derive(Debug)]
struct Outcome {
    sent: usize,
    answered: usize,
    timeouts: usize,
    hit_rate: f64,
    ttft_p90: f64,
    /// Answers per second over the arrival window.
    throughput: f64,
}

fn chain(prev: u64, x: u64) -> u64 {
    let mut z = prev ^ x.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn block_hashes(p: &Prompt, tail_key: u64) -> Vec<u64> {
    let mut h = 0x5157_u64;
    let mut out = Vec::new();
    let blocks = (p.prefix_tokens + p.tail_tokens) / BLOCK_TOKENS;
    for i in 0..blocks {
        let content = if i < p.prefix_tokens / BLOCK_TOKENS {
            chain(p.prefix_key, u64::from(i))
        } else {
            chain(tail_key | 1 << 63, u64::from(i))
        };
        h = chain(h, content);
        out.push(h);
    }
    out
}

/// One simulated run: `policy` on `replicas` replicas of `cache_tokens` each, `seconds` of
/// arrivals, engine metrics fresh or unknown.
#[derive(Debug, Clone, Copy)]
struct Scenario {
    policy: Policy,
    replicas: usize,
    cache_tokens: u32,
    workload: Workload,
    load: Load,
    seconds: f64,
    seed: u64,
    engine_metrics: bool,
}

fn run(scenario: Scenario) -> Outcome {
    let Scenario {
        policy,
        replicas,
        cache_tokens,
        workload,
        load,
        seconds,
        seed,
        engine_metrics,
    } = scenario;
    let scheduler = Scheduler::new(SchedulerConfig {
        policy,
        ..SchedulerConfig::default()
    });
    let mut index = ApproxIndex::new(IndexLimits {
        max_bytes_per_replica: 4 << 20,
    });
    let ids: Vec<ReplicaId> = (0..replicas as ReplicaId).collect();
    let mut fleet: Vec<Replica> = (0..replicas)
        .map(|_| Replica {
            cache: Vec::new(),
            cache_tokens: 0,
            queue: VecDeque::new(),
            running: Vec::new(),
            busy: false,
            inflight: 0,
            inflight_tokens: 0,
            pending_prefill: 0,
            inflight_uncached: 0,
            model: TtftModel::default(),
        })
        .collect();
    let mut prompts = Prompts::new(workload, seed);
    let mut rng = SmallRng::seed_from_u64(seed ^ 0xa5a5);
    let mut events = BinaryHeap::new();
    let mut seq = 0u64;
    let mut push = |events: &mut BinaryHeap<Event>, at: f64, kind: Kind| {
        seq += 1;
        events.push(Event { at, seq, kind });
    };
    match load {
        Load::Open { .. } => push(&mut events, 0.0, Kind::Arrival),
        Load::Closed { clients } => {
            for i in 0..clients {
                push(&mut events, f64::from(i) * 1e-4, Kind::Arrival);
            }
        }
    }
    let mut reqs: Vec<Req> = Vec::new();
    let mut ttfts: Vec<f64> = Vec::new();
    let (mut hit_tokens, mut prompt_tokens) = (0u64, 0u64);
    let mut timeouts = 0usize;
    let mut matched = vec![0u32; replicas];
    let end = seconds + TIMEOUT_S;

    // Start the next prefill on `r` if it is idle.
    fn start(
        r: usize,
        now: f64,
        fleet: &mut [Replica],
        reqs: &[Req],
        cache_tokens: u32,
        hit_tokens: &mut u64,
        prompt_tokens: &mut u64,
    ) -> Option<(f64, usize)> {
        let rep = &mut fleet[r];
        if rep.busy {
            return None;
        }
        let id = rep.queue.pop_front()?;
        let p = reqs[id].prompt;
        let hit = if rep.holds(p.prefix_key) {
            p.prefix_tokens
        } else {
            0
        };
        let total = p.prefix_tokens + p.tail_tokens;
        *hit_tokens += u64::from(hit);
        *prompt_tokens += u64::from(total);
        rep.touch(p.prefix_key, p.prefix_tokens, cache_tokens);
        rep.touch(reqs[id].tail_key, p.tail_tokens, cache_tokens);
        rep.busy = true;
        rep.running.push(id);
        Some((now + STEP_S + PER_TOKEN_S * f64::from(total - hit), id))
    }

    while let Some(ev) = events.pop() {
        let now = ev.at;
        if now > end {
            break;
        }
        match ev.kind {
            Kind::Arrival => {
                if now > seconds {
                    continue;
                }
                if let Load::Open { rate } = load {
                    let gap = -(1.0 - rng.random::<f64>()).ln() / rate;
                    push(&mut events, now + gap, Kind::Arrival);
                }
                let prompt = prompts.next();
                let tail_key = reqs.len() as u64;
                let hashes = block_hashes(&prompt, tail_key);
                index.longest_prefix(&hashes, &ids, &mut matched);
                let request = RequestView {
                    prompt_tokens: prompt.prefix_tokens + prompt.tail_tokens,
                    blocks: hashes.len() as u32,
                    tokens_per_block: BLOCK_TOKENS,
                };
                let views: Vec<ReplicaView<'_>> = fleet
                    .iter()
                    .enumerate()
                    .map(|(i, r)| ReplicaView {
                        id: ids[i],
                        key: u64::from(ids[i]),
                        inflight_requests: r.inflight,
                        inflight_tokens: r.inflight_tokens,
                        engine: engine_metrics.then(|| r.engine_load(&reqs, cache_tokens)),
                        matched_blocks: matched[i],
                        pending_prefill_tokens: r.pending_prefill,
                        inflight_uncached_tokens: r.inflight_uncached,
                        room: None,
                        ttft: &r.model,
                    })
                    .collect();
                let d = scheduler
                    .decide(&request, &views, reqs.len() as u64)
                    .expect("candidates");
                let uncached = request.uncached_tokens(d.matched_blocks);
                let chosen = &views[d.index];
                let (prefill_tokens, queued_ahead) =
                    (chosen.prefill_tokens(uncached), chosen.queued_ahead());
                drop(views);
                index.on_routed(d.replica, &hashes);
                let r = d.index;
                let id = reqs.len();
                reqs.push(Req {
                    prompt,
                    tail_key: tail_key | 1 << 62,
                    arrival: now,
                    replica: r,
                    est_uncached: u64::from(uncached),
                    prefill_tokens,
                    queued_ahead,
                });
                let rep = &mut fleet[r];
                rep.inflight += 1;
                rep.inflight_tokens += u64::from(request.prompt_tokens) + 32;
                rep.pending_prefill += u64::from(uncached);
                rep.inflight_uncached += u64::from(uncached);
                rep.queue.push_back(id);
                if let Some((at, req)) = start(
                    r,
                    now,
                    &mut fleet,
                    &reqs,
                    cache_tokens,
                    &mut hit_tokens,
                    &mut prompt_tokens,
                ) {
                    push(&mut events, at, Kind::PrefillDone { replica: r, req });
                }
            }
            Kind::PrefillDone { replica, req } => {
                let ttft = now - reqs[req].arrival;
                let rep = &mut fleet[replica];
                rep.busy = false;
                rep.pending_prefill -= reqs[req].est_uncached;
                if ttft <= TIMEOUT_S {
                    rep.model
                        .observe(reqs[req].prefill_tokens, reqs[req].queued_ahead, ttft);
                    ttfts.push(ttft);
                } else {
                    timeouts += 1;
                }
                push(&mut events, now + DECODE_S, Kind::DecodeDone { req });
                if let Some((at, next)) = start(
                    replica,
                    now,
                    &mut fleet,
                    &reqs,
                    cache_tokens,
                    &mut hit_tokens,
                    &mut prompt_tokens,
                ) {
                    push(&mut events, at, Kind::PrefillDone { replica, req: next });
                }
            }
            Kind::DecodeDone { req } => {
                let r = &reqs[req];
                let rep = &mut fleet[r.replica];
                rep.inflight -= 1;
                rep.running.retain(|&x| x != req);
                rep.inflight_tokens -=
                    u64::from(r.prompt.prefix_tokens + r.prompt.tail_tokens) + 32;
                rep.inflight_uncached -= r.est_uncached;
                if let Load::Closed { .. } = load {
                    push(&mut events, now, Kind::Arrival);
                }
            }
        }
    }
    let sent = reqs.len();
    let answered = ttfts.len();
    // Requests still queued at the end never answered in time either.
    let timeouts = timeouts + (sent - answered - timeouts);
    ttfts.sort_by(f64::total_cmp);
    let q = |p: f64| {
        ttfts
            .get(((ttfts.len() as f64 - 1.0) * p).round() as usize)
            .copied()
            .unwrap_or(f64::INFINITY)
    };
    Outcome {
        sent,
        answered,
        timeouts,
        hit_rate: hit_tokens as f64 / prompt_tokens.max(1) as f64,
        ttft_p90: q(0.9),
        throughput: answered as f64 / seconds,
    }
}

/// The benchmark's shared-prefix workload on its fleet: 16 system prompts of 2048 tokens (the
/// working set is half the fleet's cache), 8 replicas of 8192 tokens.
const SHARED_PREFIX: Workload = Workload::SharedPrefix {
    groups: 16,
    per_group: 16,
    prefix: 2048,
    tail: 64,
};

/// Both cache-aware policies, with the engines' metrics fresh and with them unknown (the
/// router's own counts only).
const POLICIES: [(Policy, bool); 4] = [
    (Policy::PredictedTtft, true),
    (Policy::PredictedTtft, false),
    (Policy::Prefix, true),
    (Policy::Prefix, false),
];

#[test]
fn open_loop_at_high_rate_does_not_collapse() {
    for (policy, engine) in POLICIES {
        for rate in [80.0, 120.0] {
            let o = run(Scenario {
                policy,
                replicas: 8,
                cache_tokens: 8192,
                workload: SHARED_PREFIX,
                load: Load::Open { rate },
                seconds: 20.0,
                seed: 1,
                engine_metrics: engine,
            });
            eprintln!("{policy:?} (engine metrics {engine}) open {rate}: {o:?}");
            assert_eq!(o.answered + o.timeouts, o.sent, "{o:?}");
            assert!(o.hit_rate > 0.85, "{policy:?} at {rate}/s: {o:?}");
            assert_eq!(o.timeouts, 0, "{policy:?} at {rate}/s: {o:?}");
            assert!(o.throughput > 0.9 * rate, "{policy:?} at {rate}/s: {o:?}");
            assert!(o.ttft_p90 < 0.3, "{policy:?} at {rate}/s: {o:?}");
        }
    }
}

#[test]
fn closed_loop_keeps_its_hit_rate() {
    for (policy, engine) in POLICIES {
        let o = run(Scenario {
            policy,
            replicas: 8,
            cache_tokens: 8192,
            workload: SHARED_PREFIX,
            load: Load::Closed { clients: 32 },
            seconds: 15.0,
            seed: 1,
            engine_metrics: engine,
        });
        eprintln!("{policy:?} (engine metrics {engine}) closed 32: {o:?}");
        assert!(o.hit_rate > 0.85, "{policy:?}: {o:?}");
        assert_eq!(o.timeouts, 0, "{policy:?}: {o:?}");
    }
}

/// The benchmark's long-document workload: 11 documents of 3000 tokens (two fit a replica),
/// 8 questions each. Every replica but three holds one busy document and those three hold two:
/// an imbalance of load that is no reason to move a document.
const LONG_DOC: Workload = Workload::SharedPrefix {
    groups: 11,
    per_group: 8,
    prefix: 3008,
    tail: 32,
};

#[test]
fn long_documents_stay_on_their_replicas() {
    for (policy, engine) in POLICIES {
        let o = run(Scenario {
            policy,
            replicas: 8,
            cache_tokens: 8192,
            workload: LONG_DOC,
            load: Load::Closed { clients: 32 },
            seconds: 15.0,
            seed: 3,
            engine_metrics: engine,
        });
        eprintln!("{policy:?} (engine metrics {engine}) long-doc closed 32: {o:?}");
        assert!(o.hit_rate > 0.9, "{policy:?}: {o:?}");
        assert!(o.ttft_p90 < 0.2, "{policy:?}: {o:?}");
    }
}
