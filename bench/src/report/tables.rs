//! Markdown tables of one workload's runs: closed-loop runs side by side, open-loop sweeps by
//! offered rate, per-tenant TTFT where tenants exist.

use std::fmt::Write;

use super::Loaded;
use crate::results::LoadMode;

pub(crate) fn f1(v: Option<f64>) -> String {
    v.map_or("–".to_owned(), |v| format!("{v:.1}"))
}

pub(crate) fn f3(v: Option<f64>) -> String {
    v.map_or("–".to_owned(), |v| format!("{v:.3}"))
}

fn errors(r: &Loaded) -> String {
    let c = &r.result.counts;
    if c.errors == 0 {
        "0".to_owned()
    } else {
        let kinds: Vec<String> = c
            .errors_by_kind
            .iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect();
        format!("{} ({})", c.errors, kinds.join(", "))
    }
}

/// Hit rate, oracle and their ratio of one run.
pub(crate) fn hit_and_oracle(r: &Loaded) -> (Option<f64>, Option<f64>) {
    (
        r.result.cache.as_ref().and_then(|c| c.hit_rate),
        r.result.oracle.as_ref().and_then(|o| o.belady.hit_rate),
    )
}

pub(crate) fn workload_section(suite: &str, workload: &str, runs: &[&Loaded]) -> String {
    let mut md = String::new();
    let closed: Vec<&&Loaded> = runs.iter().filter(|r| r.rate().is_none()).collect();
    let open: Vec<&&Loaded> = runs.iter().filter(|r| r.rate().is_some()).collect();
    if let Some(first) = runs.first() {
        let w = serde_json::to_string(&first.result.config.workload).unwrap_or_default();
        let _ = writeln!(
            md,
            "### `{workload}` ({suite})\n\nWorkload: `{w}`, seed {}.\n",
            first.result.config.seed
        );
    }
    if !closed.is_empty() {
        let c = match closed[0].result.config.load {
            LoadMode::Closed { concurrency } => concurrency,
            LoadMode::Open { .. } => 0,
        };
        let _ = writeln!(md, "Closed loop, {c} requests in flight:\n");
        md.push_str("| run | ok | errors | req/s | out tok/s | TTFT p50 ms | TTFT p90 ms | TTFT p99 ms | ITL p50 ms | E2E p90 ms | hit rate | oracle | hit / oracle |\n");
        md.push_str("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        for r in &closed {
            let res = &r.result;
            let (hit, oracle) = hit_and_oracle(r);
            let ratio = hit
                .zip(oracle)
                .filter(|(_, o)| *o > 0.0)
                .map(|(h, o)| h / o);
            let _ = writeln!(
                md,
                "| {} | {} | {} | {:.1} | {:.0} | {} | {} | {} | {} | {} | {} | {} | {} |",
                r.label(),
                res.counts.ok,
                errors(r),
                res.throughput.requests_per_s,
                res.throughput.output_tokens_per_s,
                f1(res.latency_ms.ttft.p50),
                f1(res.latency_ms.ttft.p90),
                f1(res.latency_ms.ttft.p99),
                f1(res.latency_ms.itl.p50),
                f1(res.latency_ms.e2e.p90),
                f3(hit),
                f3(oracle),
                f3(ratio),
            );
        }
        md.push('\n');
        let tenants: Vec<&&&Loaded> = closed
            .iter()
            .filter(|r| !r.result.by_tenant.is_empty())
            .collect();
        if !tenants.is_empty() {
            md.push_str("TTFT by tenant (p50 / p90 ms):\n\n");
            let names: Vec<String> = tenants[0].result.by_tenant.keys().cloned().collect();
            let _ = writeln!(md, "| run | {} |", names.join(" | "));
            let _ = writeln!(md, "|---|{}", "---:|".repeat(names.len()));
            for r in tenants {
                let cells: Vec<String> = names
                    .iter()
                    .map(|n| {
                        r.result.by_tenant.get(n).map_or("–".to_owned(), |t| {
                            format!("{} / {}", f1(t.ttft_ms.p50), f1(t.ttft_ms.p90))
                        })
                    })
                    .collect();
                let _ = writeln!(md, "| {} | {} |", r.label(), cells.join(" | "));
            }
            md.push('\n');
        }
    }
    if !open.is_empty() {
        md.push_str("Open loop (Poisson arrivals), by offered rate:\n\n");
        md.push_str("| run | offered req/s | achieved req/s | kept up | errors | TTFT p50 ms | TTFT p90 ms | TTFT p99 ms | hit rate | oracle |\n");
        md.push_str("|---|---:|---:|---|---|---:|---:|---:|---:|---:|\n");
        for r in &open {
            let res = &r.result;
            let _ = writeln!(
                md,
                "| {} | {:.1} | {:.1} | {} | {} | {} | {} | {} | {} | {} |",
                r.label(),
                r.rate().unwrap_or(0.0),
                res.throughput.requests_per_s,
                if res.throughput.requests_per_s
                    >= super::targets::SUSTAINED * r.rate().unwrap_or(0.0)
                {
                    "yes"
                } else {
                    "no (queue grew)"
                },
                errors(r),
                f1(res.latency_ms.ttft.p50),
                f1(res.latency_ms.ttft.p90),
                f1(res.latency_ms.ttft.p99),
                f3(hit_and_oracle(r).0),
                f3(hit_and_oracle(r).1),
            );
        }
        md.push('\n');
    }
    md
}

pub(crate) fn oracle_note() -> String {
    "## How the oracle is computed\n\n\
     The oracle is the best fleet hit rate the workload allows with the fleet's total KV cache. \
     The exact request sequence a run sent (same workload, same seed, same count) is tokenized as \
     the simulator does (4 bytes per token; chat as `role: content` lines), cut into chained \
     blocks of the replicas' block size, and replayed in order against one cache of \
     `replicas × blocks per replica` blocks, as if a perfect router never duplicated a prefix. \
     A request hits its longest run of cached leading blocks (capped at its length − 1 token, as \
     vLLM recomputes the last token); every prompt token is a query. Eviction is Belady's \
     (furthest next use first), the optimal offline policy, so no routing policy can exceed it \
     with this much memory. It ignores the blocks that requests in flight and generated tokens \
     occupy, so it is an upper bound. The fleet shape comes from the replicas' own \
     `vllm:cache_config_info` when they report it. Hit rates of runs are \
     `Σ Δ vllm:prefix_cache_hits_total / Σ Δ vllm:prefix_cache_queries_total` over the replicas, \
     read before and after each run. Code: `bench/src/oracle.rs`.\n\n"
        .to_owned()
}
