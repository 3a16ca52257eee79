//! Per-decision latency percentiles of the flow-control core (criterion reports means; this
//! reports p50/p99), against the router's budget of 2 µs p99 added per admission decision when
//! not saturated.
//!
//! Run in release: `cargo run --release -p warmpath-flow --example admission_latency`
//! (optional argument: iterations per measurement, default 200000).

use std::hint::black_box;
use std::time::{Duration, Instant};
use warmpath_flow::{
    Arrival, FlowQueue, FlowQueueConfig, LimitersConfig, Limits, TenantLimiters, TenantLimitsConfig,
};

fn report(name: &str, mut samples: Vec<Duration>) {
    samples.sort_unstable();
    let n = samples.len();
    let at = |q: f64| samples[((n as f64 * q) as usize).min(n - 1)];
    println!(
        "{name:<40} n={n:<7} p50={:>9.2?} p90={:>9.2?} p99={:>9.2?} p99.9={:>9.2?} max={:>9.2?}",
        at(0.5),
        at(0.9),
        at(0.99),
        at(0.999),
        samples[n - 1],
    );
}

fn measure(n: usize, mut f: impl FnMut(usize)) -> Vec<Duration> {
    // Warm up, then time each call on its own.
    for i in 0..n / 10 {
        f(i);
    }
    (0..n)
        .map(|i| {
            let start = Instant::now();
            f(i);
            start.elapsed()
        })
        .collect()
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200_000);
    let t0 = Instant::now();
    let limited = TenantLimitsConfig {
        requests_per_second: Some(1e9),
        burst: None,
        tokens_per_second: Some(1e12),
        token_burst: None,
        max_concurrent_requests: Some(1_000_000),
    };

    let mut limits = Limits::new(&limited, t0);
    report(
        "Limits::check + release",
        measure(n, |i| {
            let now = t0 + Duration::from_nanos(i as u64 * 100);
            let p = limits.check(now, black_box(2_000)).unwrap();
            limits.release(p, Some(1_500));
        }),
    );

    let names: Vec<String> = (0..1_000).map(|t| format!("tenant-{t}")).collect();
    let mut map = TenantLimiters::new(LimitersConfig::default()).unwrap();
    report(
        "TenantLimiters::check + release (1k)",
        measure(n, |i| {
            let now = t0 + Duration::from_nanos(i as u64 * 100);
            let p = map
                .check(&names[i % names.len()], &limited, now, 2_000)
                .unwrap();
            map.release(p, Some(1_500));
        }),
    );
    let unlimited = TenantLimitsConfig::default();
    report(
        "TenantLimiters::check, no limits",
        measure(n, |i| {
            let p = map
                .check(&names[i % names.len()], &unlimited, t0, 2_000)
                .unwrap();
            map.release(p, None);
        }),
    );

    for queued in [1_000usize, 100_000] {
        let mut q = FlowQueue::new(FlowQueueConfig {
            max_entries: 1_000_000,
            max_bytes: 1 << 40,
            max_entries_per_tenant: 100_000,
            max_bytes_per_tenant: 1 << 40,
            max_tenants: 10_000,
            ttl_ms: 3_600_000,
        })
        .unwrap();
        let arrival = |i: usize| Arrival {
            weight: 1 + (i % 4) as u32,
            priority: (i % 2) as i32,
            cost: 200 + (i as u64 * 7919) % 4_000,
            bytes: 4_096,
            ..Arrival::new(&names[i % 100], i)
        };
        for i in 0..queued {
            let _ = q.enqueue(t0, arrival(i)).unwrap();
        }
        report(
            &format!("FlowQueue enqueue + pop ({queued} queued)"),
            measure(n, |i| {
                let _ = q.enqueue(t0, arrival(queued + i)).unwrap();
                let d = q.pop(t0).unwrap();
                q.complete(d.ticket, 100);
            }),
        );
    }
}
