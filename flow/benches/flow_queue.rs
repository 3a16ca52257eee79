//! Criterion benches of the flow-control core: one enqueue plus one pop (and its completion)
//! on a queue holding 1k and 100k entries over 100 tenants in two bands, and the per-tenant
//! limit check the router makes on every admission (`Limits::check` + release, and the same
//! through `TenantLimiters` with 1k tenants; the router's budget is 2 µs p99 added per
//! decision when not saturated). Means and medians only; `examples/admission_latency.rs`
//! gives p50/p99.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use std::hint::black_box;
use std::time::{Duration, Instant};
use warmpath_flow::{
    Arrival, FlowQueue, FlowQueueConfig, LimitersConfig, Limits, TenantLimiters, TenantLimitsConfig,
};

const TENANTS: usize = 100;

fn config() -> FlowQueueConfig {
    FlowQueueConfig {
        max_entries: 1_000_000,
        max_bytes: 1 << 40,
        max_entries_per_tenant: 100_000,
        max_bytes_per_tenant: 1 << 40,
        max_tenants: 10_000,
        ttl_ms: 3_600_000,
    }
}

fn names() -> Vec<String> {
    (0..TENANTS).map(|t| format!("tenant-{t}")).collect()
}

fn arrival<'a>(names: &'a [String], i: usize) -> Arrival<'a, u64> {
    Arrival {
        weight: 1 + (i % 4) as u32,
        priority: (i % 2) as i32,
        cost: 200 + (i as u64 * 7919) % 4_000,
        bytes: 4_096,
        ..Arrival::new(&names[i % TENANTS], i as u64)
    }
}

fn enqueue_pop(c: &mut Criterion) {
    let names = names();
    let mut g = c.benchmark_group("flow_queue/enqueue_pop");
    for queued in [1_000usize, 100_000] {
        let now = Instant::now();
        let mut q = FlowQueue::new(config()).unwrap();
        for i in 0..queued {
            let e = q.enqueue(now, arrival(&names, i)).unwrap();
            assert!(e.evicted.is_empty());
        }
        let mut i = queued;
        g.bench_with_input(BenchmarkId::from_parameter(queued), &queued, |b, _| {
            b.iter(|| {
                i += 1;
                let e = q.enqueue(now, arrival(&names, i)).unwrap();
                black_box(e.handle);
                let d = q.pop(now).unwrap();
                let charged = d.ticket.charged();
                q.complete(d.ticket, black_box(charged / 2));
            })
        });
        assert_eq!(q.len(), queued);
    }
    g.finish();
}

fn expire_and_remove(c: &mut Criterion) {
    let names = names();
    let mut g = c.benchmark_group("flow_queue/enqueue_remove");
    for queued in [1_000usize, 100_000] {
        let now = Instant::now();
        let mut q = FlowQueue::new(config()).unwrap();
        for i in 0..queued {
            let _ = q.enqueue(now, arrival(&names, i)).unwrap();
        }
        let mut i = queued;
        g.bench_with_input(BenchmarkId::from_parameter(queued), &queued, |b, _| {
            b.iter(|| {
                i += 1;
                let e = q.enqueue(now, arrival(&names, i)).unwrap();
                black_box(q.remove(e.handle).unwrap());
                black_box(q.expire(now).len());
            })
        });
    }
    g.finish();
}

fn limits_check(c: &mut Criterion) {
    let mut g = c.benchmark_group("limits/check_release");
    let config = TenantLimitsConfig {
        requests_per_second: Some(1e9),
        burst: None,
        tokens_per_second: Some(1e12),
        token_burst: None,
        max_concurrent_requests: Some(1_000_000),
    };
    let t0 = Instant::now();
    let mut limits = Limits::new(&config, t0);
    let mut step = 0u64;
    g.bench_function("limits", |b| {
        b.iter(|| {
            step += 1;
            let now = t0 + Duration::from_nanos(step * 100);
            let p = limits.check(now, black_box(2_000)).unwrap();
            limits.release(p, Some(black_box(1_500)));
        })
    });

    let names: Vec<String> = (0..1_000).map(|t| format!("tenant-{t}")).collect();
    let mut map = TenantLimiters::new(LimitersConfig {
        max_tenants: 10_000,
    })
    .unwrap();
    let mut i = 0usize;
    g.bench_function("tenant_limiters_1k_tenants", |b| {
        b.iter(|| {
            i += 1;
            let now = t0 + Duration::from_nanos(i as u64 * 100);
            let p = map
                .check(&names[i % names.len()], &config, now, black_box(2_000))
                .unwrap();
            map.release(p, Some(1_500));
        })
    });

    let unlimited = TenantLimitsConfig::default();
    g.bench_function("tenant_limiters_unlimited", |b| {
        b.iter(|| {
            let p = map
                .check(black_box("tenant-0"), &unlimited, t0, black_box(2_000))
                .unwrap();
            map.release(p, None);
        })
    });
    g.finish();
}

criterion_group!(benches, enqueue_pop, expire_and_remove, limits_check);
criterion_main!(benches);
