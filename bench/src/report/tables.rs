//! Markdown tables of one section (a workload with one set of parameters): closed-loop points side
//! by side, open-loop sweeps by offered rate, per-tenant TTFT where tenants exist. Every figure is
//! the median over the point's seeds with its bootstrap 95 % interval in brackets.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::points::{default_sized, Point, Section};
use super::Loaded;
use crate::results::LoadMode;
use crate::stats::Estimate;

pub(crate) fn f1(v: Option<f64>) -> String {
    v.map_or("–".to_owned(), |v| format!("{v:.1}"))
}

pub(crate) fn f3(v: Option<f64>) -> String {
    v.map_or("–".to_owned(), |v| format!("{v:.3}"))
}

/// An estimate with `digits` decimals: the median, then the 95 % interval in brackets when there
/// is one (two seeds or more).
pub(crate) fn est(e: Option<Estimate>, digits: usize) -> String {
    match e {
        None => "–".to_owned(),
        Some(Estimate {
            median,
            interval: None,
            ..
        }) => format!("{median:.digits$}"),
        Some(Estimate {
            median,
            interval: Some((lo, hi)),
            ..
        }) => format!("{median:.digits$} [{lo:.digits$}, {hi:.digits$}]"),
    }
}

/// Errors of a point, summed over its seeds, by kind; warm-up errors apart.
fn errors(p: &Point<'_>) -> String {
    let errors = p.total(|r| r.result.counts.errors);
    let mut kinds: BTreeMap<&str, u64> = BTreeMap::new();
    for r in &p.runs {
        for (k, v) in &r.result.counts.errors_by_kind {
            *kinds.entry(k).or_default() += v;
        }
    }
    let mut s = if errors == 0 {
        "0".to_owned()
    } else {
        let kinds: Vec<String> = kinds.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        format!("{errors} ({})", kinds.join(", "))
    };
    let warmup = p.total(|r| r.result.counts.warmup_errors);
    if warmup > 0 {
        let _ = write!(s, " + {warmup} in warm-up");
    }
    s
}

/// Hit rate and oracle (Belady) of one run.
pub(crate) fn hit_and_oracle(r: &Loaded) -> (Option<f64>, Option<f64>) {
    let h = hit_rates(r);
    (h.measured, h.belady)
}

/// The measured fleet hit rate of one run and the three ceilings it is read against.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct HitRates {
    pub measured: Option<f64>,
    pub belady: Option<f64>,
    pub lru: Option<f64>,
    pub infinite: Option<f64>,
}

pub(crate) fn hit_rates(r: &Loaded) -> HitRates {
    let o = r.result.oracle.as_ref();
    HitRates {
        measured: r.result.cache.as_ref().and_then(|c| c.hit_rate),
        belady: o.and_then(|o| o.belady.hit_rate),
        lru: o.and_then(|o| o.lru_perfect_placement.hit_rate),
        infinite: o.and_then(|o| o.infinite.hit_rate),
    }
}

/// The cells "hit rate | Belady | LRU, perfect placement | infinite" of a point.
fn hit_cells(p: &Point<'_>) -> String {
    let cells: [fn(&HitRates) -> Option<f64>; 4] =
        [|h| h.measured, |h| h.belady, |h| h.lru, |h| h.infinite];
    cells
        .iter()
        .map(|pick| est(p.estimate(|r| pick(&hit_rates(r))), 3))
        .collect::<Vec<_>>()
        .join(" | ")
}

/// Measured hit rate over the oracle (Belady), of one run.
pub(crate) fn hit_over_oracle(r: &Loaded) -> Option<f64> {
    let (hit, oracle) = hit_and_oracle(r);
    hit.zip(oracle)
        .filter(|(_, o)| *o > 0.0)
        .map(|(h, o)| h / o)
}

/// What a replica's share of the load is counted in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ShareBasis {
    /// Requests it finished (`vllm:request_success_total`).
    Requests,
    /// Prompt tokens it was asked for (`vllm:prefix_cache_queries_total`), where the engines do
    /// not count requests (schema 1 results, engines without the counter).
    PromptTokens,
}

/// Each replica's share of the run's load, in the order of `--metrics-url`.
pub(crate) fn replica_shares(r: &Loaded) -> Option<(Vec<f64>, ShareBasis)> {
    let replicas = &r.result.cache.as_ref()?.replicas;
    let requests: Option<Vec<f64>> = replicas.iter().map(|x| x.requests).collect();
    let (load, basis) = match requests {
        Some(v) if v.iter().sum::<f64>() > 0.0 => (v, ShareBasis::Requests),
        _ => (
            replicas.iter().map(|x| x.queries).collect(),
            ShareBasis::PromptTokens,
        ),
    };
    let total: f64 = load.iter().sum();
    (total > 0.0).then(|| (load.iter().map(|v| v / total).collect(), basis))
}

fn max_share(r: &Loaded) -> Option<f64> {
    replica_shares(r).map(|(s, _)| s.iter().copied().fold(0.0, f64::max))
}

fn min_share(r: &Loaded) -> Option<f64> {
    replica_shares(r).map(|(s, _)| s.iter().copied().fold(1.0, f64::min))
}

/// The client's mean TTFT over the requests the engines' histogram covers: all of them,
/// warm-up included.
fn client_ttft_mean(r: &Loaded) -> Option<f64> {
    let l = &r.result.latency_ms;
    l.ttft_with_warmup.as_ref().unwrap_or(&l.ttft).mean
}

/// The engines' mean TTFT under the client's: what the network, the router and the client add.
fn path_overhead(r: &Loaded) -> Option<f64> {
    let engine = r.result.cache.as_ref()?.engine_ttft_ms?.mean?;
    Some(client_ttft_mean(r)? - engine)
}

fn engine_ttft(r: &Loaded) -> Option<crate::stats::Summary> {
    r.result.cache.as_ref()?.engine_ttft_ms
}

/// The second table of a section: client against engine TTFT, and how the load was spread
/// over the replicas, so a router that collapses onto one replica, or a path that adds a
/// constant delay, shows as such.
fn plumbing_and_balance(points: &[&Point<'_>]) -> String {
    let any = points.iter().any(|p| {
        p.runs
            .iter()
            .any(|r| replica_shares(r).is_some() || engine_ttft(r).is_some())
    });
    if !any {
        return String::new();
    }
    let mut md = String::from(
        "Where the time goes and where the requests went (engine figures from the replicas' own \
         metrics):\n\n\
         | run | seeds | load | client TTFT mean ms | engine TTFT mean ms | added by the path, mean ms | engine TTFT p50 ms | engine TTFT p90 ms | busiest replica's share | idlest replica's share | replicas used |\n\
         |---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let mut by_tokens = false;
    for p in points {
        let basis = p.runs.iter().find_map(|r| replica_shares(r).map(|x| x.1));
        let mark = if basis == Some(ShareBasis::PromptTokens) {
            by_tokens = true;
            " *"
        } else {
            ""
        };
        let used: Vec<usize> = p
            .runs
            .iter()
            .filter_map(|r| replica_shares(r).map(|(s, _)| s.iter().filter(|v| **v > 0.0).count()))
            .collect();
        let used = match (used.iter().min(), used.iter().max()) {
            (Some(lo), Some(hi)) if lo == hi => format!("{lo}"),
            (Some(lo), Some(hi)) => format!("{lo}–{hi}"),
            _ => String::new(),
        };
        let replicas = p
            .first()
            .result
            .cache
            .as_ref()
            .map_or(0, |c| c.replicas.len());
        let load = match p.load() {
            LoadMode::Closed { concurrency } => format!("closed, {concurrency} in flight"),
            LoadMode::Open {
                rate,
                burst: Some(b),
            } => format!("{rate:.1} req/s in bursts ×{}, {} s", b.factor, b.period_s),
            LoadMode::Open { rate, burst: None } => format!("{rate:.1} req/s"),
            LoadMode::Trace => "the trace's arrivals".to_owned(),
        };
        let _ = writeln!(
            md,
            "| {} | {} | {load} | {} | {} | {} | {} | {} | {}{mark} | {}{mark} | {} |",
            p.label(),
            p.runs.len(),
            est(p.estimate(client_ttft_mean), 1),
            est(p.estimate(|r| engine_ttft(r)?.mean), 1),
            est(p.estimate(path_overhead), 1),
            est(p.estimate(|r| engine_ttft(r)?.p50), 1),
            est(p.estimate(|r| engine_ttft(r)?.p90), 1),
            est(p.estimate(max_share), 2),
            est(p.estimate(min_share), 2),
            if used.is_empty() {
                "–".to_owned()
            } else {
                format!("{used} of {replicas}")
            },
        );
    }
    md.push_str(
        "\nThe engine TTFT is the engines' own `vllm:time_to_first_token_seconds` histogram, read \
         before and after each run and summed over the replicas: its mean is exact, its \
         percentiles are interpolated within the engines' buckets (1, 5, 10, 20, 40, 60, 80, \
         100, 250 ms, …) and only as fine as them. Like the replica shares it covers every request \
         of the run, warm-up included, and so does the client's mean beside it (unlike the \
         tables above, which leave the warm-up out). A replica's share is its \
         part of the requests the fleet finished (`vllm:request_success_total`); with perfect \
         balance each of n replicas has 1/n.",
    );
    if by_tokens {
        md.push_str(
            " Shares marked * are of the prompt tokens the replica was asked for \
             (`vllm:prefix_cache_queries_total`), where the engines did not count requests.",
        );
    }
    md.push_str("\n\n");
    md
}

/// Whether an open-loop run kept up with its offered rate (see [`super::targets::SUSTAINED`]).
pub(crate) fn kept_up(r: &Loaded) -> bool {
    r.result.throughput.requests_per_s >= super::targets::SUSTAINED * r.rate().unwrap_or(0.0)
}

fn kept_up_text(p: &Point<'_>) -> String {
    let n = p.runs.len();
    match p.runs.iter().filter(|r| kept_up(r)).count() {
        k if k == n => "yes".to_owned(),
        0 => "no (queue grew)".to_owned(),
        k => format!("{k} of {n} seeds"),
    }
}

fn offered(p: &Point<'_>) -> String {
    match p.load() {
        LoadMode::Open {
            rate,
            burst: Some(b),
        } => format!("{rate:.1} (bursts ×{}, {} s)", b.factor, b.period_s),
        LoadMode::Open { rate, burst: None } => format!("{rate:.1}"),
        LoadMode::Closed { .. } => "–".to_owned(),
        LoadMode::Trace => "trace".to_owned(),
    }
}

fn seeds_text(seeds: &[u64]) -> String {
    let s: Vec<String> = seeds.iter().map(u64::to_string).collect();
    match seeds.len() {
        1 => format!("seed {}", s[0]),
        _ => format!("seeds {}", s.join(", ")),
    }
}

/// The sentence under a table saying how to read its cells.
fn intervals_note(points: &[&Point<'_>]) -> &'static str {
    if points.iter().any(|p| p.runs.len() > 1) {
        "Each figure is the median over the seeds, with its bootstrap 95 % confidence interval in \
         brackets (2,000 seeded resamples of the seeds); `ok` and `errors` are summed over the \
         seeds. A point with 1 seed has no interval.\n\n"
    } else {
        "1 seed per point, no intervals: the figures are single runs.\n\n"
    }
}

pub(crate) fn workload_section(section: &Section<'_>) -> String {
    let mut md = String::new();
    let (suite, workload) = (&section.suite, section.workload);
    let closed = section.closed();
    let open = section.open();
    let w = serde_json::to_string(&section.spec).unwrap_or_default();
    let title = match &section.tag {
        Some(tag) => format!("### `{workload}`, {tag} ({suite})\n"),
        None => format!("### `{workload}` ({suite})\n"),
    };
    md.push_str(&title);
    let f = &section.fleet;
    let _ = writeln!(
        md,
        "\nWorkload: `{w}`, {}. Prefix working set{} {} tokens = {:.2} × the fleet's KV cache \
         ({} × {} blocks × {} tokens){}.\n",
        seeds_text(&section.seeds()),
        if matches!(section.spec, crate::workload::WorkloadSpec::Trace(_)) {
            " (blocks reused anywhere in the trace file, not only in a run's window)"
        } else {
            ""
        },
        section.spec.prefix_working_set(),
        section.working_set(),
        f.replicas,
        f.kv_blocks,
        f.block_size,
        if default_sized(section) {
            ", the default size"
        } else {
            ""
        },
    );
    if !closed.is_empty() {
        let c = match closed[0].load() {
            LoadMode::Closed { concurrency } => concurrency,
            LoadMode::Open { .. } | LoadMode::Trace => 0,
        };
        let warmup = closed[0].first().result.config.warmup;
        let counted = if warmup > 0 {
            format!(", the first {warmup} completions left out as warm-up")
        } else {
            String::new()
        };
        let load = match closed[0].load() {
            LoadMode::Trace => "Replayed at the trace's own arrival times".to_owned(),
            _ => format!("Closed loop, {c} requests in flight"),
        };
        let _ = writeln!(md, "{load}{counted}:\n");
        md.push_str("| run | seeds | ok | errors | req/s | out tok/s | TTFT p50 ms | TTFT p90 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms | E2E p90 ms | hit rate | Belady | LRU, perfect placement | infinite | hit / Belady |\n");
        md.push_str(
            "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        );
        for p in &closed {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                p.label(),
                p.runs.len(),
                p.total(|r| r.result.counts.ok),
                errors(p),
                est(p.estimate(|r| Some(r.result.throughput.requests_per_s)), 1),
                est(
                    p.estimate(|r| Some(r.result.throughput.output_tokens_per_s)),
                    0
                ),
                est(p.estimate(|r| r.result.latency_ms.ttft.p50), 1),
                est(p.estimate(|r| r.result.latency_ms.ttft.p90), 1),
                est(p.estimate(|r| r.result.latency_ms.ttft.p99), 1),
                est(p.estimate(|r| r.result.latency_ms.itl.p50), 1),
                est(p.estimate(|r| r.result.latency_ms.itl.p99), 1),
                est(p.estimate(|r| r.result.latency_ms.e2e.p90), 1),
                hit_cells(p),
                est(p.estimate(hit_over_oracle), 3),
            );
        }
        md.push('\n');
        md.push_str(intervals_note(&closed));
        let tenants: Vec<&&Point<'_>> = closed
            .iter()
            .filter(|p| !p.first().result.by_tenant.is_empty())
            .collect();
        if !tenants.is_empty() {
            md.push_str("TTFT by tenant (p50 / p90 ms):\n\n");
            let names: Vec<String> = tenants[0]
                .first()
                .result
                .by_tenant
                .keys()
                .cloned()
                .collect();
            let _ = writeln!(md, "| run | {} |", names.join(" | "));
            let _ = writeln!(md, "|---|{}", "---:|".repeat(names.len()));
            for p in tenants {
                let cells: Vec<String> = names
                    .iter()
                    .map(|n| {
                        let of = |q: fn(&crate::stats::Summary) -> Option<f64>| {
                            p.estimate(|r| r.result.by_tenant.get(n).and_then(|t| q(&t.ttft_ms)))
                        };
                        format!("{} / {}", est(of(|s| s.p50), 1), est(of(|s| s.p90), 1))
                    })
                    .collect();
                let _ = writeln!(md, "| {} | {} |", p.label(), cells.join(" | "));
            }
            md.push('\n');
        }
    }
    if !open.is_empty() {
        md.push_str("Open loop (Poisson arrivals, or on/off bursts of the same mean rate where said), by offered rate:\n\n");
        md.push_str("| run | seeds | offered req/s | achieved req/s | kept up | errors | TTFT p50 ms | TTFT p90 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms | hit rate | Belady | LRU, perfect placement | infinite |\n");
        md.push_str("|---|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        for p in &open {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                p.label(),
                p.runs.len(),
                offered(p),
                est(p.estimate(|r| Some(r.result.throughput.requests_per_s)), 1),
                kept_up_text(p),
                errors(p),
                est(p.estimate(|r| r.result.latency_ms.ttft.p50), 1),
                est(p.estimate(|r| r.result.latency_ms.ttft.p90), 1),
                est(p.estimate(|r| r.result.latency_ms.ttft.p99), 1),
                est(p.estimate(|r| r.result.latency_ms.itl.p50), 1),
                est(p.estimate(|r| r.result.latency_ms.itl.p99), 1),
                hit_cells(p),
            );
        }
        md.push('\n');
        md.push_str(intervals_note(&open));
    }
    let all: Vec<&Point<'_>> = section.points.iter().collect();
    md.push_str(&plumbing_and_balance(&all));
    md
}

pub(crate) fn oracle_note() -> String {
    "## How the oracles are computed\n\n\
     Every measured hit rate is shown beside three ceilings, computed offline from the exact \
     request sequence the run sent (same workload, same seed, same count), tokenized as the \
     simulator does (4 bytes per token; chat as `role: content` lines), cut into chained blocks \
     of the replicas' block size and replayed in order against one cache. A request hits its \
     longest run of cached leading blocks (capped at its length − 1 token, as vLLM recomputes \
     the last token); every prompt token is a query.\n\n\
     - **infinite**: a cache that never evicts, so every repeated block hits: the workload's own \
     ceiling, whatever the memory.\n\
     - **Belady** (the oracle that \"× oracle\" refers to): one cache of the fleet's total blocks \
     (`replicas × blocks per replica`), as if a perfect router never duplicated a prefix, with \
     optimal offline eviction (furthest next use first). No routing policy can exceed it with \
     this much memory.\n\
     - **LRU, perfect placement**: the same fleet-sized cache with the engines' own \
     least-recently-used eviction: what a router that always finds the warm copy gets when \
     engines evict as they do.\n\n\
     When the workload's working set fits in the fleet's cache the three coincide, and reaching \
     the oracle only says that the router found the warm copies; where the cache binds \
     (`--working-set` above 1) they separate, and the gap between LRU and Belady is what \
     eviction, not placement, costs. All three ignore the blocks that requests in flight and \
     generated tokens occupy, so they are upper bounds. The fleet shape comes from the \
     replicas' own `vllm:cache_config_info` when they report it. Hit rates of runs are \
     `Σ Δ vllm:prefix_cache_hits_total / Σ Δ vllm:prefix_cache_queries_total` over the replicas, \
     read before and after each run. Code: `bench/src/oracle.rs`.\n\n"
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::super::points::{sections, tests::run};
    use super::*;

    #[test]
    fn estimates_print_the_median_and_the_interval() {
        assert_eq!(est(None, 1), "–");
        assert_eq!(est(Estimate::of(&[1.234]), 2), "1.23");
        let e = Estimate {
            median: 2.0,
            n: 3,
            interval: Some((1.0, 3.5)),
        };
        assert_eq!(est(Some(e), 1), "2.0 [1.0, 3.5]");
    }

    #[test]
    fn a_point_over_seeds_is_one_row_with_intervals() {
        let mut runs: Vec<Loaded> = (1..=5).map(|s| run("warmpath-prefix", s, None)).collect();
        for (i, r) in runs.iter_mut().enumerate() {
            r.result.latency_ms.ttft.p90 = Some(10.0 + i as f64);
        }
        runs[4].result.counts.warmup_errors = 2;
        runs.push(run("warmpath-round-robin", 1, None));
        let s = sections(&runs, |_| 0);
        let md = workload_section(&s[0]);
        assert!(md.contains("seeds 1, 2, 3, 4, 5"), "{md}");
        assert!(md.contains("= 0.50 × the fleet's KV cache"), "{md}");
        let row = md
            .lines()
            .find(|l| l.starts_with("| warmpath-prefix |"))
            .unwrap();
        // 5 seeds, 5 × 200 ok, TTFT p90 median 12 with an interval.
        assert!(
            row.starts_with("| warmpath-prefix | 5 | 1000 | 0 + 2 in warm-up |"),
            "{row}"
        );
        assert!(row.contains("| 12.0 [10.0, 14.0] |"), "{row}");
        assert!(md.contains("| warmpath-round-robin | 1 | 200 |"), "{md}");
        assert!(md.contains("bootstrap 95 % confidence interval"));
    }

    #[test]
    fn a_collapsed_router_and_the_path_overhead_are_visible() {
        use crate::metrics::{FleetCache, ReplicaCache};
        use crate::stats::Summary;
        let replica = |url: &str, requests: Option<f64>, queries: f64| ReplicaCache {
            url: url.into(),
            hits: 0.0,
            queries,
            hit_rate: None,
            requests,
        };
        let mut spread = run("warmpath-prefix", 1, None);
        spread.result.latency_ms.ttft.mean = Some(99.0);
        // With a warm-up, the client's figure beside the engines' covers the same requests.
        spread.result.latency_ms.ttft_with_warmup = Some(Summary {
            mean: Some(20.0),
            ..Default::default()
        });
        spread.result.cache = Some(FleetCache {
            hits: 0.0,
            queries: 0.0,
            hit_rate: None,
            replicas: vec![replica("a", Some(60.0), 1.0), replica("b", Some(40.0), 1.0)],
            engine_ttft_ms: Some(Summary {
                count: 100,
                mean: Some(18.5),
                p50: Some(15.0),
                p90: Some(30.0),
                ..Default::default()
            }),
        });
        // Everything on one replica; an old result without request counts: by prompt tokens.
        let mut collapsed = run("smg-cache-aware", 1, None);
        collapsed.result.cache = Some(FleetCache {
            hits: 0.0,
            queries: 0.0,
            hit_rate: None,
            replicas: vec![replica("a", None, 5000.0), replica("b", None, 0.0)],
            engine_ttft_ms: None,
        });
        let runs = vec![spread, collapsed];
        let md = workload_section(&sections(&runs, |_| 0)[0]);
        assert!(
            md.contains("| warmpath-prefix | 1 | closed, 8 in flight | 20.0 | 18.5 | 1.5 | 15.0 | 30.0 | 0.60 | 0.40 | 2 of 2 |"),
            "{md}"
        );
        assert!(
            md.contains("| smg-cache-aware | 1 | closed, 8 in flight | ")
                && md.contains("| 120.9 | – | – | – | – | 1.00 * | 0.00 * | 1 of 2 |"),
            "{md}"
        );
        assert!(
            md.contains("Shares marked * are of the prompt tokens"),
            "{md}"
        );
    }

    #[test]
    fn one_seed_everywhere_says_so() {
        let runs = vec![run("a", 1, None), run("a", 1, Some(10.0))];
        let md = workload_section(&sections(&runs, |_| 0)[0]);
        assert!(md.contains("1 seed per point, no intervals"), "{md}");
        assert!(!md.contains(" ["), "{md}");
    }
}
