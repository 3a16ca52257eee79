//! Criterion benches of the per-request routing work: hashing a prompt, index lookup plus
//! scheduler decision at 256 replicas (every policy, the peer baselines included), building a
//! consistent-hash ring, and the whole path at 100k-token prompts. Means and medians only;
//! `examples/decision_latency.rs` gives p50/p99.

mod common;

use common::{block_bytes, text, Fleet, Scenario};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::hint::black_box;
use std::time::Duration;
use warmpath_routing::index::PrefixIndex;
use warmpath_routing::prompt::BlockHasher;
use warmpath_routing::scheduler::{Policy, Scheduler, SchedulerConfig};

const PROMPT_32K: usize = 32 * 1024 * 4;
const PROMPT_100K: usize = 100_000 * 4;

fn hashing(c: &mut Criterion) {
    let hasher = BlockHasher::new(block_bytes());
    let prompt = text(1, PROMPT_32K);
    let mut g = c.benchmark_group("hash");
    g.throughput(Throughput::Bytes(prompt.len() as u64));
    g.bench_function("text_32k_tokens", |b| {
        b.iter(|| hasher.hash_text(black_box(&prompt)))
    });
    let half = prompt.len() / 2;
    g.bench_function("chat_32k_tokens", |b| {
        b.iter(|| {
            hasher.hash_chat([
                ("system", black_box(&prompt[..half])),
                ("user", black_box(&prompt[half..])),
            ])
        })
    });
    g.finish();
}

fn decision(c: &mut Criterion) {
    let mut g = c.benchmark_group("lookup_and_decide_32k_256_replicas");
    for scenario in [Scenario::Typical, Scenario::Staircase] {
        let mut fleet = Fleet::new(256, 8 << 20);
        let prompt = fleet.hasher.hash_text(&text(1, PROMPT_32K));
        fleet.populate(scenario, &prompt, 2);
        for policy in Policy::ALL.into_iter().filter(|p| p.is_prefix_aware()) {
            let scheduler = Scheduler::new(SchedulerConfig {
                policy,
                ..SchedulerConfig::default()
            });
            let mut seed = 0u64;
            g.bench_function(format!("{scenario:?}/{policy:?}"), |b| {
                b.iter(|| {
                    seed += 1;
                    fleet.decide(&scheduler, black_box(&prompt), seed)
                })
            });
        }
    }
    g.finish();
}

/// What a `consistent_hash` decision would cost if it built its ring (256 replicas × 100
/// points) every time: a fresh scheduler per decision, so its ring cache is always empty.
/// Against `lookup_and_decide_32k_256_replicas/*/ConsistentHash` (ring cached) this is what the
/// cache saves.
fn consistent_hash_ring(c: &mut Criterion) {
    let mut g = c.benchmark_group("consistent_hash_ring");
    let mut fleet = Fleet::new(256, 8 << 20);
    let prompt = fleet.hasher.hash_text(&text(1, PROMPT_32K));
    fleet.populate(Scenario::Typical, &prompt, 2);
    let config = SchedulerConfig {
        policy: Policy::ConsistentHash,
        ..SchedulerConfig::default()
    };
    let mut seed = 0u64;
    g.bench_function("build_256x100_and_decide", |b| {
        b.iter(|| {
            seed += 1;
            let scheduler = Scheduler::new(config.clone());
            fleet.decide(&scheduler, black_box(&prompt), seed)
        })
    });
    g.finish();
}

fn full_path_100k(c: &mut Criterion) {
    let mut g = c.benchmark_group("hash_lookup_decide_route_100k");
    g.sample_size(30);
    let scheduler = Scheduler::new(SchedulerConfig::default());
    let mut fleet = Fleet::new(64, 4 << 20);
    fleet.idle();
    let base = text(2, PROMPT_100K).into_bytes();
    let mut n = 0u64;
    let route = |fleet: &mut Fleet, p: &mut Vec<u8>, n: u64| {
        p[..8].copy_from_slice(&n.to_le_bytes());
        let h = fleet.hasher.hash_bytes(p);
        let d = fleet.decide(&scheduler, &h, n);
        fleet.index.on_routed(d.replica, &h.hashes);
        fleet.feedback(d.index, n);
        d
    };
    // Steady state: fill the index to its bound before measuring.
    let mut p = base.clone();
    while fleet.index.stats().evictions < 100_000 {
        n += 1;
        route(&mut fleet, &mut p, n);
    }
    // Every prompt unique from its first block: all 6250 blocks are new to the index (the
    // expensive case: inserts and evictions).
    g.bench_function("unique_prompt", |b| {
        b.iter(|| {
            n += 1;
            route(&mut fleet, &mut p, n)
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = hashing, decision, consistent_hash_ring, full_path_100k
}
criterion_main!(benches);
