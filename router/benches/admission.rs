//! What identity and flow control cost a request when the pool is not saturated (issue 13's
//! budget: at most 2 µs added to a decision). `cargo bench -p warmpath-router --bench admission`.
//!
//! Each iteration resolves the tenant from the headers, admits the request and drops its
//! permit (the end of the response), as the request path does; `AdmitAll` is the baseline.

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

fn bench(c: &mut Criterion) {
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
    let none = HeaderMap::new();

    let mut g = c.benchmark_group("admission");
    g.bench_function("admit_all", |b| {
        b.iter(|| admit_and_end(&AdmitAll, &table, &none))
    });
    g.bench_function("flow/default_tenant", |b| {
        b.iter(|| admit_and_end(&flow, &table, &none))
    });
    g.bench_function("flow/api_key", |b| {
        b.iter(|| admit_and_end(&flow, &table, &by_key))
    });
    g.bench_function("flow/limited_tenant_header", |b| {
        b.iter(|| admit_and_end(&flow, &table, &by_header))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
