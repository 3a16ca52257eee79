//! The JSON result of one run (`warmpath-bench run --out FILE`), and its computation from the
//! per-request outcomes. `bench/README.md` documents the fields; the report reads them back.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::client::Outcome;
use crate::metrics::FleetCache;
use crate::oracle::OracleResult;
use crate::provenance::Provenance;
use crate::stats::{cdf_points, Summary};
use crate::text::TextStyle;
use crate::workload::{Burst, Fleet, WorkloadSpec};

/// The schema this build writes. 2 added the warm-up, the throughput window, the three oracles'
/// new name for LRU, bursts, skew, and the provenance (commit, command line, load average).
pub const SCHEMA: u32 = 2;

/// The oldest schema the report still reads: schema 1 files lack the fields above, which read
/// as absent (no warm-up, no provenance, commit not recorded).
pub const MIN_SCHEMA: u32 = 1;

/// How load is offered.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum LoadMode {
    /// A fixed number of requests in flight.
    Closed { concurrency: usize },
    /// Poisson arrivals at `rate` requests/s, whatever the answers do; with `burst`, an on/off
    /// modulated Poisson process of the same mean rate.
    Open {
        rate: f64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        burst: Option<Burst>,
    },
    /// Each request at the time its workload gives (a replayed trace), whatever the answers do.
    Trace,
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
    /// The first `warmup` completed requests are left out of latencies and throughput.
    #[serde(default)]
    pub warmup: u64,
    pub seed: u64,
    pub timeout_s: f64,
    pub ignore_eos: bool,
    pub workload: WorkloadSpec,
    /// The fleet the default workload sizes were derived from.
    pub fleet: Fleet,
    pub metrics_urls: Vec<String>,
    /// Open loop: the most requests in flight (absent in schema 1).
    #[serde(default)]
    pub max_in_flight: Option<usize>,
    /// Bytes of workload text per engine token the oracles assumed (absent in schema 1).
    #[serde(default)]
    pub oracle_bytes_per_token: Option<f64>,
    /// How the workload's filler text read (absent before `--text` existed: words).
    #[serde(default, skip_serializing_if = "TextStyle::is_words")]
    pub text: TextStyle,
}

/// Request counts. `ok` and `errors` are of the counted requests (after the warm-up); the
/// warm-up's own are apart, so a failure is never hidden by being early.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Counts {
    pub sent: u64,
    /// Completed requests left out as warm-up (the first ones to complete).
    #[serde(default)]
    pub warmup: u64,
    /// Of which failed.
    #[serde(default)]
    pub warmup_errors: u64,
    pub ok: u64,
    pub errors: u64,
    pub errors_by_kind: BTreeMap<String, u64>,
    /// Of the errors, those that came after a success status had reached the client (a stream
    /// cut or failed midway): the only failures a retry by the router could not have saved.
    /// Absent (0) in results written before it was counted.
    #[serde(default)]
    pub errors_after_response: u64,
    /// First few error messages, for diagnosis.
    pub error_samples: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Throughput {
    /// Successful counted requests per second of the window.
    pub requests_per_s: f64,
    /// The window throughput is measured over: from the first send (no warm-up) or the last
    /// warm-up completion to the last completion. Absent (0) in schema 1 files, whose window
    /// was `wall_s`.
    #[serde(default)]
    pub window_s: f64,
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
    /// TTFT of every request, warm-up included (only with a warm-up): the same requests as the
    /// engines' own TTFT histogram covers, so the two can be set side by side.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_with_warmup: Option<Summary>,
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
    /// From the first send to the last completion, warm-up included.
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
    /// Commit, command line, machine load (empty in schema 1 files).
    #[serde(default)]
    pub provenance: Provenance,
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

/// Aggregates outcomes: the first `warmup` to complete are only counted as warm-up; the others
/// make the latencies, and throughput is theirs over the window from the last warm-up
/// completion (or, without warm-up, the first send) to the last completion.
pub fn aggregate(all: &[Outcome], warmup: usize) -> Aggregate {
    let end = |o: &Outcome| o.start_s + o.e2e_s;
    let mut by_completion: Vec<&Outcome> = all.iter().collect();
    by_completion.sort_by(|a, b| end(a).total_cmp(&end(b)));
    let warmup = warmup.min(by_completion.len());
    let (early, outcomes) = by_completion.split_at(warmup);
    let window_start = match early.last() {
        Some(o) => end(o),
        None => all.iter().map(|o| o.start_s).fold(f64::INFINITY, f64::min),
    };
    let window_s = outcomes
        .last()
        .map_or(0.0, |o| (end(o) - window_start).max(0.0));
    let mut errors_by_kind = BTreeMap::new();
    let mut errors_after_response = 0u64;
    let mut error_samples = Vec::new();
    let (mut ttft, mut itl, mut e2e) = (Vec::new(), Vec::new(), Vec::new());
    let (mut out_tok, mut in_tok, mut ok) = (0u64, 0u64, 0u64);
    let mut tenants: BTreeMap<String, (u64, u64, Vec<f64>)> = BTreeMap::new();
    let mut by_replica = BTreeMap::new();
    for &o in outcomes {
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
                errors_after_response += u64::from(o.responded);
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
    let per_s = |n: u64| {
        if window_s > 0.0 {
            n as f64 / window_s
        } else {
            0.0
        }
    };
    let errors: u64 = errors_by_kind.values().sum();
    Aggregate {
        counts: Counts {
            sent: all.len() as u64,
            warmup: early.len() as u64,
            warmup_errors: early.iter().filter(|o| o.error.is_some()).count() as u64,
            ok,
            errors,
            errors_by_kind,
            errors_after_response,
            error_samples,
        },
        throughput: Throughput {
            requests_per_s: per_s(ok),
            window_s,
            output_tokens_per_s: per_s(out_tok),
            prompt_tokens_per_s: per_s(in_tok),
            output_tokens: out_tok,
            prompt_tokens: in_tok,
        },
        latency_ms: Latencies {
            ttft: ttft_summary,
            itl: Summary::of(&mut ms(&itl)),
            e2e: Summary::of(&mut ms(&e2e)),
            ttft_with_warmup: (!early.is_empty()).then(|| {
                let mut all: Vec<f64> = by_completion
                    .iter()
                    .filter(|o| o.error.is_none())
                    .filter_map(|o| o.ttft_s)
                    .map(|s| s * 1e3)
                    .collect();
                Summary::of(&mut all)
            }),
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

/// Write a result's JSON to `out` (creating its folder), or to standard output without one.
pub fn write_json(out: Option<&std::path::Path>, json: String) -> anyhow::Result<()> {
    use anyhow::Context;
    match out {
        Some(path) => {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)?;
            }
            std::fs::write(path, json + "\n").with_context(|| format!("writing {}", path.display()))
        }
        None => {
            println!("{json}");
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::ErrorKind;

    fn ok(ttft: f64, tenant: Option<&str>) -> Outcome {
        Outcome {
            start_s: 1.0,
            ttft_s: Some(ttft),
            itl_s: vec![0.01, 0.02],
            e2e_s: ttft + 0.03,
            output_tokens: 3,
            prompt_tokens: 100,
            error: None,
            replica: Some("r1".into()),
            responded: true,
            tenant: tenant.map(str::to_owned),
        }
    }

    #[test]
    fn only_failures_after_a_success_status_count_as_past_saving() {
        let mut refused = ok(0.0, None);
        refused.responded = false;
        refused.error = Some((ErrorKind::Status(500), "engine error".into()));
        let mut hung = ok(0.0, None);
        hung.responded = false;
        hung.error = Some((ErrorKind::Status(504), "upstream timeout".into()));
        let mut cut = ok(0.25, None);
        cut.error = Some((ErrorKind::StreamError, "engine died".into()));
        let mut timed_out = ok(0.25, None);
        timed_out.error = Some((ErrorKind::Timeout, "no complete answer".into()));
        let counts = aggregate(&[ok(0.1, None), refused, hung, cut, timed_out], 0).counts;
        assert_eq!((counts.ok, counts.errors), (1, 4));
        assert_eq!(counts.errors_after_response, 2);
    }

    #[test]
    fn aggregates_counts_throughput_and_tenants() {
        let mut outs = vec![ok(0.1, Some("a")), ok(0.3, Some("a")), ok(0.2, None)];
        let mut failed = ok(0.0, Some("a"));
        failed.error = Some((ErrorKind::Status(429), "slow down".into()));
        failed.responded = false;
        outs.push(failed);
        // The window: from the first send (1.0 s) to the last completion (3.0 s).
        outs[2].start_s = 2.77;
        let Aggregate {
            counts,
            throughput: tp,
            latency_ms: lat,
            ttft_cdf_ms: cdf,
            by_tenant: tenants,
            by_replica: replicas,
        } = aggregate(&outs, 0);
        assert_eq!(tp.window_s, 2.0);
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

    /// Completions at 1, 2, …, 10 s (sent 0.5 s earlier, in reverse order of completion so
    /// that completion, not send or vector order, decides what is warm-up).
    #[test]
    fn warmup_is_the_first_completions_and_the_window_starts_at_the_last_of_them() {
        let outs: Vec<Outcome> = (1..=10)
            .rev()
            .map(|k| {
                let mut o = ok(0.01 * f64::from(k), None);
                o.start_s = f64::from(k) - 0.5;
                o.e2e_s = 0.5;
                if k == 2 {
                    o.error = Some((ErrorKind::Timeout, "late".into()));
                }
                o
            })
            .collect();
        let all = aggregate(&outs, 0);
        assert_eq!(
            (all.counts.sent, all.counts.ok, all.counts.errors),
            (10, 9, 1)
        );
        assert_eq!(all.counts.warmup, 0);
        assert!((all.throughput.window_s - 9.5).abs() < 1e-9);

        let a = aggregate(&outs, 3);
        // Requests completing at 1, 2 (failed) and 3 s are warm-up.
        assert_eq!(a.counts.sent, 10);
        assert_eq!((a.counts.warmup, a.counts.warmup_errors), (3, 1));
        assert_eq!((a.counts.ok, a.counts.errors), (7, 0));
        assert_eq!(a.latency_ms.ttft.count, 7);
        // Beside the engines' figures: every successful request, warm-up included.
        assert_eq!(a.latency_ms.ttft_with_warmup.unwrap().count, 9);
        assert_eq!(all.latency_ms.ttft_with_warmup, None);
        assert!((a.latency_ms.ttft.min.unwrap() - 40.0).abs() < 1e-9);
        // Window 3 s → 10 s: 7 requests in 7 s.
        assert!((a.throughput.window_s - 7.0).abs() < 1e-9);
        assert!((a.throughput.requests_per_s - 1.0).abs() < 1e-9);
        assert_eq!(a.throughput.output_tokens, 7 * 3);

        // A warm-up longer than the run leaves nothing counted, and no division by zero.
        let none = aggregate(&outs, 50);
        assert_eq!((none.counts.warmup, none.counts.ok), (10, 0));
        assert_eq!(none.throughput.requests_per_s, 0.0);
        assert_eq!(none.latency_ms.ttft.p50, None);
    }
}
