//! Per-request routing latency percentiles (criterion reports means; this reports p50/p99).
//!
//! Run in release: `cargo run --release -p warmpath-routing --example decision_latency`
//! (optional arguments: iterations per measurement, default 20000; a section name to run only
//! that one: `hash`, `decide`, `100k`).
//!
//! Prints, for each measurement, p50/p90/p99/p99.9/max wall time per request, and the CPU time
//! per request of this thread (from /proc/thread-self/schedstat, when available).

#[path = "../benches/common/mod.rs"]
mod common;

use common::{text, Fleet, Scenario};
use std::hint::black_box;
use std::time::{Duration, Instant};
use warmpath_routing::index::PrefixIndex;
use warmpath_routing::prompt::BlockHasher;
use warmpath_routing::scheduler::{Policy, Scheduler, SchedulerConfig};

fn thread_cpu_ns() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    s.split_whitespace().next()?.parse().ok()
}

fn report(name: &str, mut samples: Vec<Duration>, cpu_ns: Option<u64>) {
    samples.sort_unstable();
    let n = samples.len();
    let at = |q: f64| samples[((n as f64 * q) as usize).min(n - 1)];
    let cpu = cpu_ns
        .map(|c| format!("{:>9.2?}", Duration::from_nanos(c / n as u64)))
        .unwrap_or_else(|| "      n/a".into());
    println!(
        "{name:<48} n={n:<6} p50={:>9.2?} p90={:>9.2?} p99={:>9.2?} p99.9={:>9.2?} max={:>9.2?} cpu/req={cpu}",
        at(0.5),
        at(0.9),
        at(0.99),
        at(0.999),
        samples[n - 1],
    );
}

/// Time `n` runs of `f` individually.
fn measure(name: &str, n: usize, mut f: impl FnMut(u64)) {
    for i in 0..(n / 10).max(1) {
        f(i as u64); // warm-up
    }
    let mut samples = Vec::with_capacity(n);
    let cpu0 = thread_cpu_ns();
    for i in 0..n {
        let t = Instant::now();
        f(i as u64);
        samples.push(t.elapsed());
    }
    let cpu = cpu0.and_then(|c0| thread_cpu_ns().map(|c1| c1 - c0));
    report(name, samples, cpu);
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20_000);
    let only = std::env::args().nth(2);
    let run = |section: &str| only.as_deref().is_none_or(|o| o == section);
    let hasher = BlockHasher::new(common::block_bytes());
    println!("# block_bytes = {}", hasher.block_bytes);

    let prompt_32k = text(1, 32 * 1024 * 4);
    if run("hash") {
        measure("hash text 32k tokens (128 KiB)", n, |_| {
            black_box(hasher.hash_text(black_box(&prompt_32k)));
        });
        let half = prompt_32k.len() / 2;
        measure("hash chat 32k tokens (128 KiB, 2 messages)", n, |_| {
            black_box(hasher.hash_chat([
                ("system", black_box(&prompt_32k[..half])),
                ("user", black_box(&prompt_32k[half..])),
            ]));
        });
    }
    if run("decide") {
        for scenario in [Scenario::Typical, Scenario::Staircase] {
            let mut fleet = Fleet::new(256, 8 << 20);
            let prompt = fleet.hasher.hash_text(&prompt_32k);
            fleet.populate(scenario, &prompt, 2);
            let stats = fleet.index.stats();
            println!(
                "# {scenario:?} fleet: 256 replicas, {} index entries, {} MiB estimated",
                stats.entries,
                stats.bytes >> 20
            );
            for policy in [Policy::PredictedTtft, Policy::Prefix, Policy::LeastLoad] {
                let scheduler = Scheduler::new(SchedulerConfig {
                    policy,
                    ..SchedulerConfig::default()
                });
                measure(
                    &format!("lookup+decide 32k/256 {scenario:?}/{policy:?}"),
                    n,
                    |i| {
                        black_box(fleet.decide(&scheduler, &prompt, i));
                    },
                );
            }
        }
    }
    if !run("100k") {
        return;
    }
    // The whole per-request path at 100k tokens.
    let scheduler = Scheduler::new(SchedulerConfig::default());
    let mut fleet = Fleet::new(64, 4 << 20);
    fleet.idle();
    let mut buf = text(2, 100_000 * 4).into_bytes();
    let full_n = (n / 10).max(100);
    measure("hash bytes 100k tokens (400 KB)", full_n, |i| {
        buf[..8].copy_from_slice(&i.to_le_bytes());
        black_box(hasher.hash_bytes(black_box(&buf)));
    });
    let mut unique = 1u64 << 40;
    let mut route_unique = |fleet: &mut Fleet, i: u64| {
        // Unique from the first block on: every block is an insert and, once the replica is
        // full, an eviction: the most expensive case.
        unique += 1;
        buf[..8].copy_from_slice(&unique.to_le_bytes());
        let h = fleet.hasher.hash_bytes(&buf);
        let d = fleet.decide(&scheduler, &h, i);
        fleet.index.on_routed(d.replica, &h.hashes);
        fleet.feedback(d.index, i);
    };
    // Steady state: fill the index to its bound first (map growth is a one-off, see
    // ApproxIndex::reserve_entries).
    let mut i = 0;
    while fleet.index.stats().evictions < 100_000 {
        route_unique(&mut fleet, i);
        i += 1;
    }
    println!("# filled the index with {i} unique 100k-token prompts");
    measure("hash+lookup+decide+on_routed 100k unique", full_n, |i| {
        route_unique(&mut fleet, i)
    });
    let s = fleet.index.stats();
    println!(
        "# unique-100k fleet after the run: {} entries, {} MiB estimated of {} MiB bound, {} MiB allocated, {} evictions",
        s.entries,
        s.bytes >> 20,
        s.capacity_bytes >> 20,
        fleet.index.allocated_bytes() >> 20,
        s.evictions
    );

    // Multi-turn: 32 conversations with 100k-token histories, a new turn each request, on a
    // fleet large enough to keep them warm. Load follows the decisions (each pick adds a request
    // in flight, one finishes per request) so that traffic spreads as it would live.
    let mut fleet = Fleet::new(64, 16 << 20);
    fleet.idle();
    let convs: Vec<String> = (0..32).map(|c| text(100 + c, 100_000 * 4)).collect();
    let turns: Vec<String> = (0..64)
        .map(|t| format!("turn {t}: {}", text(t, 512)))
        .collect();
    let mut warm = 0u32;
    let mut total = 0u32;
    measure(
        "hash+lookup+decide+on_routed 100k multi-turn",
        full_n,
        |i| {
            let c = &convs[(i % 32) as usize];
            let turn = &turns[(i % 64) as usize];
            let h = hasher.hash_chat([("system", c.as_str()), ("user", turn.as_str())]);
            let d = fleet.decide(&scheduler, &h, i);
            fleet.index.on_routed(d.replica, &h.hashes);
            fleet.feedback(d.index, i);
            warm += u32::from(d.matched_blocks > 0);
            total += 1;
        },
    );
    let s = fleet.index.stats();
    println!(
        "# multi-turn fleet after the run: {warm}/{total} warm decisions, {} entries, {} MiB estimated, {} MiB allocated, {} evictions",
        s.entries,
        s.bytes >> 20,
        fleet.index.allocated_bytes() >> 20,
        s.evictions
    );
}
