//! The JSON result of one run (`warmpath-bench run --out FILE`), and its computation from the
//! per-request outcomes. `bench/README.md` documents the fields; the report reads them back.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::client::Outcome;
use crate::metrics::FleetCache;
use crate::oracle::OracleResult;
use crate::stats::{cdf_points, Summary};
use crate::workload::{Fleet, WorkloadSpec};

pub const SCHEMA: u32 = 1;

/// How load is offered.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum LoadMode {
    /// A fixed number of requests in flight.
    Closed { concurrency: usize },
    /// Poisson arrivals at `rate` requests/s, whatever the answers do.
    Open { rate: f64 },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunConfig {
    /// Free-form name of what was measured (e.g. `warmpath-prefix`), used by the report.
    pub label: String,
    /// Which comparison the run belongs to (e.g. `sim`, `vllm-cpu`); the report has one section
    /// per suite.
    #[serde(default)]
    pub suite: String,
    pub url: String,
    pub model: String,
    pub load: LoadMode,
    pub requests: Option<u64>,
    pub duration_s: Option<f64>,
    pub seed: u64,
    pub timeout_s: f64,
    pub ignore_eos: bool,
    pub workload: WorkloadSpec,
    /// The fleet the default workload sizes were derived from.
    pub fleet: Fleet,
    pub metrics_urls: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Counts {
    pub sent: u64,
    pub ok: u64,
    pub errors: u64,
    pub errors_by_kind: BTreeMap<String, u64>,
    /// First few error messages, for diagnosis.
    pub error_samples: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Throughput {
    /// Successful requests per second of wall time (first send to last completion).
    pub requests_per_s: f64,
    pub output_tokens_per_s: f64,
    pub prompt_tokens_per_s: f64,
    pub output_tokens: u64,
    pub prompt_tokens: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Latencies {
    pub ttft: Summary,
    pub itl: Summary,
    pub e2e: Summary,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TenantResult {
    pub ok: u64,
    pub errors: u64,
    pub ttft_ms: Summary,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    pub schema: u32,
    pub tool: String,
    pub config: RunConfig,
    /// Unix time of the start, seconds.
    pub started_unix_s: f64,
    pub wall_s: f64,
    pub counts: Counts,
    pub throughput: Throughput,
    /// Milliseconds.
    pub latency_ms: Latencies,
    /// TTFT at 101 evenly spaced quantiles (0, 1 %, …, 100 %), milliseconds.
    pub ttft_cdf_ms: Vec<f64>,
    pub by_tenant: BTreeMap<String, TenantResult>,
    /// Requests per `x-warmpath-replica` value (empty when the server does not send it).
    pub by_replica: BTreeMap<String, u64>,
    pub cache: Option<FleetCache>,
    pub oracle: Option<OracleResult>,
}

fn ms(v: &[f64]) -> Vec<f64> {
    v.iter().map(|s| s * 1e3).collect()
}

/// Everything computed from the per-request outcomes.
#[derive(Debug, Clone, PartialEq)]
pub struct Aggregate {
    pub counts: Counts,
    pub throughput: Throughput,
    pub latency_ms: Latencies,
    pub ttft_cdf_ms: Vec<f64>,
    pub by_tenant: BTreeMap<String, TenantResult>,
    pub by_replica: BTreeMap<String, u64>,
}

/// Aggregates outcomes. `wall_s` is from the first send to the last completion.
pub fn aggregate(outcomes: &[Outcome], wall_s: f64) -> Aggregate {
    let mut errors_by_kind = BTreeMap::new();
    let mut error_samples = Vec::new();
    let (mut ttft, mut itl, mut e2e) = (Vec::new(), Vec::new(), Vec::new());
    let (mut out_tok, mut in_tok, mut ok) = (0u64, 0u64, 0u64);
    let mut tenants: BTreeMap<String, (u64, u64, Vec<f64>)> = BTreeMap::new();
    let mut by_replica = BTreeMap::new();
    for o in outcomes {
        let t = o
            .tenant
            .as_ref()
            .map(|t| tenants.entry(t.clone()).or_default());
        if let Some(r) = &o.replica {
            *by_replica.entry(r.clone()).or_insert(0) += 1;
        }
        match &o.error {
            Some((kind, msg)) => {
                *errors_by_kind.entry(kind.key()).or_insert(0) += 1;
                if error_samples.len() < 5 {
                    error_samples.push(format!(
                        "{}: {}",
                        kind.key(),
                        msg.chars().take(300).collect::<String>()
                    ));
                }
                if let Some(t) = t {
                    t.1 += 1;
                }
            }
            None => {
                ok += 1;
                out_tok += o.output_tokens;
                in_tok += o.prompt_tokens;
                if let Some(t) = t {
                    t.0 += 1;
                    t.2.extend(o.ttft_s.map(|v| v * 1e3));
                }
                ttft.extend(o.ttft_s);
                itl.extend_from_slice(&o.itl_s);
                e2e.push(o.e2e_s);
            }
        }
    }
    let mut ttft_ms = ms(&ttft);
    let ttft_summary = Summary::of(&mut ttft_ms);
    let cdf = cdf_points(&ttft_ms, 101);
    let per_s = |n: u64| if wall_s > 0.0 { n as f64 / wall_s } else { 0.0 };
    let errors: u64 = errors_by_kind.values().sum();
    Aggregate {
        counts: Counts {
            sent: outcomes.len() as u64,
            ok,
            errors,
            errors_by_kind,
            error_samples,
        },
        throughput: Throughput {
            requests_per_s: per_s(ok),
            output_tokens_per_s: per_s(out_tok),
            prompt_tokens_per_s: per_s(in_tok),
            output_tokens: out_tok,
            prompt_tokens: in_tok,
        },
        latency_ms: Latencies {
            ttft: ttft_summary,
            itl: Summary::of(&mut ms(&itl)),
            e2e: Summary::of(&mut ms(&e2e)),
        },
        ttft_cdf_ms: cdf,
        by_tenant: tenants
            .into_iter()
            .map(|(k, (ok, errors, mut v))| {
                (
                    k,
                    TenantResult {
                        ok,
                        errors,
                        ttft_ms: Summary::of(&mut v),
                    },
                )
            })
            .collect(),
        by_replica,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::ErrorKind;

    fn ok(ttft: f64, tenant: Option<&str>) -> Outcome {
        Outcome {
            start_s: 0.0,
            ttft_s: Some(ttft),
            itl_s: vec![0.01, 0.02],
            e2e_s: ttft + 0.03,
            output_tokens: 3,
            prompt_tokens: 100,
            error: None,
            replica: Some("r1".into()),
            tenant: tenant.map(str::to_owned),
        }
    }

    #[test]
    fn aggregates_counts_throughput_and_tenants() {
        let mut outs = vec![ok(0.1, Some("a")), ok(0.3, Some("a")), ok(0.2, None)];
        let mut failed = ok(0.0, Some("a"));
        failed.error = Some((ErrorKind::Status(429), "slow down".into()));
        outs.push(failed);
        let Aggregate {
            counts,
            throughput: tp,
            latency_ms: lat,
            ttft_cdf_ms: cdf,
            by_tenant: tenants,
            by_replica: replicas,
        } = aggregate(&outs, 2.0);
        assert_eq!(counts.sent, 4);
        assert_eq!(counts.ok, 3);
        assert_eq!(counts.errors_by_kind.get("status_429"), Some(&1));
        assert_eq!(tp.requests_per_s, 1.5);
        assert_eq!(tp.output_tokens_per_s, 4.5);
        assert!((lat.ttft.p50.unwrap() - 200.0).abs() < 1e-9);
        assert_eq!(lat.itl.count, 6);
        assert_eq!(cdf.len(), 101);
        assert!((cdf[0] - 100.0).abs() < 1e-9 && (cdf[100] - 300.0).abs() < 1e-9);
        let a = &tenants["a"];
        assert_eq!((a.ok, a.errors, a.ttft_ms.count), (2, 1, 2));
        assert_eq!(replicas["r1"], 4);
    }
}
