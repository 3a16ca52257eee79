//! What identity and flow control cost a request when the pool is not saturated (issue 13's
//! budget: at most 2 µs added to a decision). `cargo bench -p warmpath-router --bench admission`.
//!
//! Each iteration resolves the tenant from the headers, admits the request and drops its
//! permit (the end of the response), as the request path does; `AdmitAll` is the baseline.
//! Criterion reports means; the budget is a p99, so before criterion runs, each case is also
//! timed one decision at a time (`Instant` around each, its own ~20-40 ns included) and its
//! p50, p99 and p99.9 printed.

use criterion::{criterion_group, criterion_main, Criterion};
use http::{HeaderMap, HeaderValue};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use warmpath_router::api::admission::{Admission, AdmissionRequest, Admit, AdmitAll};
use warmpath_router::config::Config;
use warmpath_router::flow::FlowControl;
use warmpath_router::metrics::Metrics;
use warmpath_router::state::replica::ReplicaRegistry;
use warmpath_router::state::table::Table;

const YAML: &str = r#"
pools:
  - name: p
    models: [m]
    replicas:
      - { name: r0, url: "http://127.0.0.1:1" }
      - { name: r1, url: "http://127.0.0.1:2" }
tenants:
  policies:
    - { name: acme, api_keys: [sk-acme-0001], weight: 2 }
    - { name: limited, limits: { requests_per_second: 1000000000, max_concurrent_requests: 1000 } }
flow:
  enabled: true
  saturation: { max_inflight_requests: 64 }
"#;

fn admit_and_end(admission: &dyn Admission, table: &Arc<Table>, headers: &HeaderMap) {
    let peer = Some(IpAddr::V4(Ipv4Addr::LOCALHOST));
    let identity = table.tenants.identify(headers, peer).expect("identified");
    let request = AdmissionRequest {
        tenant: &identity.tenant,
        model: "m",
        objective: None,
        prompt_tokens: 1000,
        max_tokens: Some(100),
        body_bytes: 4000,
        table,
    };
    match admission.admit(&request) {
        Admit::Now(permit) => drop(std::hint::black_box(permit)),
        _ => panic!("the pool is not saturated"),
    }
}

/// Everything a case needs: the flow control, the table, the three kinds of request headers.
struct Setup {
    flow: FlowControl,
    table: Arc<Table>,
    by_key: HeaderMap,
    by_header: HeaderMap,
    none: HeaderMap,
}

fn setup() -> Setup {
    let config = Config::parse(YAML).unwrap();
    let metrics = Arc::new(Metrics::new());
    let mut registry = ReplicaRegistry::default();
    registry.sync(&config);
    let flow = FlowControl::new(config.flow.limiters, metrics.clone()).unwrap();
    let table = Arc::new(Table::build(Arc::new(config), &registry, &metrics));
    let mut by_key = HeaderMap::new();
    by_key.insert(
        "authorization",
        HeaderValue::from_static("Bearer sk-acme-0001"),
    );
    let mut by_header = HeaderMap::new();
    by_header.insert("x-warmpath-tenant", HeaderValue::from_static("limited"));
    Setup {
        flow,
        table,
        by_key,
        by_header,
        none: HeaderMap::new(),
    }
}

/// (name, admission, headers) of every case.
fn cases(s: &Setup) -> [(&'static str, &dyn Admission, &HeaderMap); 4] {
    [
        ("admit_all", &AdmitAll, &s.none),
        ("flow/default_tenant", &s.flow, &s.none),
        ("flow/api_key", &s.flow, &s.by_key),
        ("flow/limited_tenant_header", &s.flow, &s.by_header),
    ]
}

/// Each case's decisions timed one at a time: the percentiles criterion does not give.
fn percentiles(s: &Setup) {
    const N: usize = 200_000;
    let mut took = vec![0u32; N];
    for (name, admission, headers) in cases(s) {
        for _ in 0..N / 10 {
            admit_and_end(admission, &s.table, headers);
        }
        for t in took.iter_mut() {
            let start = std::time::Instant::now();
            admit_and_end(admission, &s.table, headers);
            *t = start.elapsed().as_nanos().min(u128::from(u32::MAX)) as u32;
        }
        took.sort_unstable();
        let at = |q: f64| f64::from(took[((N as f64 * q) as usize).min(N - 1)]) / 1e3;
        println!(
            "admission/{name}: p50 {:.2} µs, p99 {:.2} µs, p99.9 {:.2} µs ({N} decisions, one at a time)",
            at(0.5),
            at(0.99),
            at(0.999)
        );
    }
}

fn bench(c: &mut Criterion) {
    let s = setup();
    percentiles(&s);
    let mut g = c.benchmark_group("admission");
    for (name, admission, headers) in cases(&s) {
        g.bench_function(name, |b| {
            b.iter(|| admit_and_end(admission, &s.table, headers))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
