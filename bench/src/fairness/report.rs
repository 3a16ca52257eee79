//! The fairness report: fairness results of several systems, scenarios and seeds, set side by
//! side, with issue 13's targets judged by `bench/README.md`'s one rule: the median of the
//! per-seed values (each seed's run paired with its own baseline) with its bootstrap 95 %
//! interval, met only when the whole interval is on the target's side of the bound.
//!
//! Scenarios are recognized by name (`bench/flow.sh` writes them):
//! - `capacity`: one closed-loop tenant; its throughput is the fleet's capacity.
//! - `alone` and `isolation`: the tenant named `steady`, alone and beside a flooding tenant.
//!   Target: its TTFT p99 with the flood ≤ [`ISOLATION_BOUND`] × alone (same system, same seed;
//!   the p99 counts a request that never got a first token as infinitely late).
//! - `long-prompts`: equal-weight backlogged tenants, one with longer prompts. Target: Jain's
//!   index of tokens served ≥ [`JAIN_BOUND`].
//! - `weights`: backlogged tenants with weights (`weight=` of their specs). Target: every
//!   tenant's token share within [`SHARE_BOUND`] (relative) of weight / Σ weights.
//!
//! Any other scenario is listed in the table of all runs only.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};

use super::account::TenantReport;
use super::{FairnessResult, KIND};
use crate::stats::{Estimate, Side};

/// Isolation: the steady tenant's TTFT p99 with the flood over alone, at most.
pub const ISOLATION_BOUND: f64 = 1.25;
/// Backlogged equal-weight tenants: Jain's index of tokens served, at least.
pub const JAIN_BOUND: f64 = 0.98;
/// Weighted tenants: |token share / target share − 1|, at most.
pub const SHARE_BOUND: f64 = 0.05;

/// Systems in this order first (as `bench/flow.sh` names them), any others after.
const SYSTEM_ORDER: [&str; 6] = [
    "warmpath-tokens",
    "warmpath-headroom",
    "warmpath-isolate",
    "warmpath-requests",
    "warmpath-noflow",
    "sglang-queue",
];

/// Every fairness result file (`*.json` with `"kind": "fairness"`) in `dir`, sorted by
/// scenario, label and seed.
pub fn load(dir: &Path) -> Result<Vec<FairnessResult>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let value: serde_json::Value = match serde_json::from_str(&text) {
            Ok(v) => v,
            Err(_) => continue,
        };
        if value.get("kind").and_then(|k| k.as_str()) != Some(KIND) {
            continue;
        }
        let r: FairnessResult =
            serde_json::from_value(value).with_context(|| format!("parsing {}", path.display()))?;
        out.push(r);
    }
    out.sort_by(|a, b| (&a.scenario, &a.label, a.seed).cmp(&(&b.scenario, &b.label, b.seed)));
    Ok(out)
}

/// A figure over seeds: `median (min–max)`, `∞` for infinite values.
fn spread(values: &[f64], digits: usize) -> String {
    if values.is_empty() {
        return "–".into();
    }
    let m = median_inf(values);
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if values.len() == 1 || lo == hi {
        return num(m, digits);
    }
    format!(
        "{} ({}–{})",
        num(m, digits),
        num(lo, digits),
        num(hi, digits)
    )
}

fn num(v: f64, digits: usize) -> String {
    if v.is_infinite() {
        "∞".into()
    } else {
        format!("{v:.digits$}")
    }
}

/// The median, where `+∞` values sort last (a median may be infinite).
pub fn median_inf(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        // Infinite when the upper middle value is (a finite value plus +∞ is +∞).
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn systems(results: &[FairnessResult]) -> Vec<String> {
    let labels: BTreeSet<&str> = results.iter().map(|r| r.label.as_str()).collect();
    let mut out: Vec<String> = SYSTEM_ORDER
        .iter()
        .filter(|s| labels.contains(*s))
        .map(|s| s.to_string())
        .collect();
    out.extend(
        labels
            .iter()
            .filter(|l| !SYSTEM_ORDER.contains(l))
            .map(|l| l.to_string()),
    );
    out
}

fn runs<'a>(results: &'a [FairnessResult], scenario: &str, label: &str) -> Vec<&'a FairnessResult> {
    results
        .iter()
        .filter(|r| r.scenario == scenario && r.label == label)
        .collect()
}

fn tenant<'a>(r: &'a FairnessResult, name: &str) -> Option<&'a TenantReport> {
    r.tenants.iter().find(|t| t.spec.name == name)
}

/// Which side of its bound a target wants.
#[derive(Clone, Copy)]
enum Want {
    AtMost(f64),
    AtLeast(f64),
}

/// A target over seeds, judged by the one rule: the median of the per-seed values with its
/// bootstrap 95 % interval (infinite values, requests never answered, count as the largest
/// finite value so that the interval can be drawn and still fails an upper bound).
fn judge(values: &[f64], want: Want) -> (Side, String) {
    let finite: Vec<f64> = values
        .iter()
        .map(|v| if v.is_infinite() { f64::MAX } else { *v })
        .collect();
    let Some(e) = Estimate::of(&finite) else {
        return (Side::Straddles, "no seeds".into());
    };
    let side = match want {
        Want::AtMost(b) => e.at_most(b),
        Want::AtLeast(b) => e.at_least(b),
    };
    // The stand-in for an infinite value is shown as what it stands for.
    let shown = |v: f64| num(if v == f64::MAX { f64::INFINITY } else { v }, 3);
    let text = match e.interval {
        Some((lo, hi)) => format!(
            "median {} [{}, {}] over {} seeds",
            shown(e.median),
            shown(lo),
            shown(hi),
            e.n
        ),
        None => format!("{} from one seed (no interval)", shown(e.median)),
    };
    (side, text)
}

fn reasons(t: &TenantReport) -> String {
    let w = &t.window;
    let mut parts: Vec<String> = w
        .refused_by_reason
        .iter()
        .map(|(k, v)| format!("429 {k} {v}"))
        .collect();
    parts.extend(
        w.refused_by_status
            .iter()
            .filter(|(k, _)| *k != "429")
            .map(|(k, v)| format!("{k} {v}")),
    );
    parts.extend(w.errors_by_kind.iter().map(|(k, v)| format!("{k} {v}")));
    if w.unfinished > 0 {
        parts.push(format!("unfinished {}", w.unfinished));
    }
    if w.skipped > 0 {
        parts.push(format!("skipped {}", w.skipped));
    }
    if let (Some(p50), Some(max)) = (t.refusal_ms.p50, t.refusal_ms.max) {
        parts.push(format!(
            "refusals answered in {p50:.1} ms p50, {max:.0} ms at most"
        ));
    }
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
}

/// One line of the summary and the verdicts, per target and system.
struct Verdict {
    target: &'static str,
    system: String,
    side: Side,
    /// The per-seed median with its interval.
    estimate: String,
    seeds_passing: usize,
    seeds: usize,
    text: String,
}

/// The Markdown report.
pub fn render(results: &[FairnessResult], preamble: &str) -> String {
    let mut md = String::new();
    let systems = systems(results);
    let mut verdicts: Vec<Verdict> = Vec::new();
    let _ = writeln!(md, "# Per-tenant fairness under overload (issue 13)\n");
    let _ = writeln!(
        md,
        "Generated by `warmpath-bench fairness-report` from {} result files. Figures are \
         medians over seeds, with the range (min–max) in parentheses. A target is judged by \
         `bench/README.md`'s rule: the median of the per-seed values with its bootstrap 95 % \
         interval, met only when the whole interval clears the bound, missed when the whole \
         interval is beyond it, not shown otherwise; the count of seeds that meet it on their \
         own is given beside.\n",
        results.len()
    );
    if !preamble.trim().is_empty() {
        let _ = writeln!(md, "{}\n", preamble.trim_end());
    }
    provenance(&mut md, results);

    // Capacity and the rates derived from it.
    let cap: Vec<&FairnessResult> = results
        .iter()
        .filter(|r| r.scenario == "capacity")
        .collect();
    if !cap.is_empty() {
        let rps: Vec<f64> = cap.iter().map(|r| r.fairness.requests_per_s).collect();
        let tps: Vec<f64> = cap.iter().map(|r| r.fairness.tokens_per_s).collect();
        let c = median_inf(&rps);
        let _ = writeln!(md, "## Capacity\n");
        let spec = &cap[0].tenants[0].spec;
        let _ = writeln!(
            md,
            "One closed-loop tenant ({}), {} prompt and {} output tokens per request, against `{}`: \
             **{} requests/s**, {} tokens/s (runs: {}).",
            load_text(&spec.load),
            spec.prompt_tokens,
            spec.output_tokens,
            cap[0].label,
            spread(&rps, 2),
            spread(&tps, 0),
            cap.len()
        );
        let iso = results
            .iter()
            .find(|r| r.scenario == "isolation" || r.scenario == "alone");
        if let Some(r) = iso {
            for t in &r.tenants {
                if let super::spec::TenantLoad::Open { rate, .. } = t.spec.load {
                    let _ = writeln!(
                        md,
                        "- `{}` in the isolation runs: {rate:.2} requests/s = {:.2} × capacity.",
                        t.spec.name,
                        rate / c
                    );
                }
            }
        }
        let _ = writeln!(md);
    }

    isolation(&mut md, results, &systems, &mut verdicts);
    long_prompts(&mut md, results, &systems, &mut verdicts);
    weights(&mut md, results, &systems, &mut verdicts);

    // The summary goes first, after the preamble: build it now and splice it in.
    let mut summary = String::new();
    if !verdicts.is_empty() {
        let _ = writeln!(summary, "## Targets\n");
        for v in &verdicts {
            let _ = writeln!(
                summary,
                "- {} — {}: {}, {} ({}/{} seeds on their own) — {}",
                v.target,
                v.system,
                v.side.verdict(),
                v.estimate,
                v.seeds_passing,
                v.seeds,
                v.text
            );
        }
        let _ = writeln!(summary);
    }
    all_runs(&mut md, results);
    match md.find("\n## ") {
        Some(at) => md.insert_str(at + 1, &summary),
        None => md.push_str(&summary),
    }
    md
}

fn load_text(load: &super::spec::TenantLoad) -> String {
    match load {
        super::spec::TenantLoad::Open { rate, .. } => format!("open loop, {rate:.2} req/s"),
        super::spec::TenantLoad::Closed { concurrency, .. } => {
            format!("closed loop, {concurrency} in flight")
        }
    }
}

fn provenance(md: &mut String, results: &[FairnessResult]) {
    let commits: BTreeSet<String> = results
        .iter()
        .map(|r| {
            r.provenance
                .short_commit()
                .unwrap_or_else(|| "unknown".into())
        })
        .collect();
    let loads: Vec<f64> = results
        .iter()
        .filter_map(|r| r.provenance.load_average.start.map(|l| l[0]))
        .collect();
    let cpus = results.iter().find_map(|r| r.provenance.cpus);
    let _ = writeln!(
        md,
        "HEAD when the runs started: {} (`+dirty`: with uncommitted changes). Machine: {} cores; 1-minute load average at the start of a run {}.\n",
        commits.into_iter().collect::<Vec<_>>().join(", "),
        cpus.map_or("?".into(), |c| c.to_string()),
        spread(&loads, 2)
    );
}

fn isolation(
    md: &mut String,
    results: &[FairnessResult],
    systems: &[String],
    verdicts: &mut Vec<Verdict>,
) {
    if !results.iter().any(|r| r.scenario == "isolation") {
        return;
    }
    let _ = writeln!(md, "## Isolation: a flooding tenant beside a steady one\n");
    let _ = writeln!(
        md,
        "The steady tenant alone, then beside the flood (same system, same seed). TTFT p99 \
         counts a request that never got a first token (refused, failed, unanswered) as \
         infinitely late. Target: p99 with the flood ≤ {ISOLATION_BOUND} × alone.\n"
    );
    let _ = writeln!(
        md,
        "| system | steady TTFT p50 alone | with flood | p99 alone | p99 with flood | ratio | steady not answered (of sent) | flood served req/s | flood refusals and errors (seed {}) | fleet tokens/s |",
        results.iter().filter(|r| r.scenario == "isolation").map(|r| r.seed).min().unwrap_or(0)
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|---|");
    for sys in systems {
        let iso = runs(results, "isolation", sys);
        if iso.is_empty() {
            continue;
        }
        let alone = runs(results, "alone", sys);
        let (mut p50a, mut p50f, mut p99a, mut p99f, mut ratios) =
            (vec![], vec![], vec![], vec![], vec![]);
        let (mut failed, mut sent, mut flood_rps, mut tps) = (vec![], vec![], vec![], vec![]);
        for r in &iso {
            let Some(s) = tenant(r, "steady") else {
                continue;
            };
            let f = s.ttft_p99_ms_counting_failures.unwrap_or(f64::INFINITY);
            p99f.push(f);
            p50f.extend(s.ttft_ms.p50);
            failed.push(s.window.failed() as f64);
            sent.push(s.window.sent as f64);
            tps.push(r.fairness.tokens_per_s);
            if let Some(fl) = r.tenants.iter().find(|t| t.spec.name != "steady") {
                flood_rps.push(fl.served.requests_per_s);
            }
            if let Some(a) = alone
                .iter()
                .find(|a| a.seed == r.seed)
                .and_then(|a| tenant(a, "steady"))
            {
                let pa = a.ttft_p99_ms_counting_failures.unwrap_or(f64::INFINITY);
                ratios.push(if pa.is_finite() { f / pa } else { f64::NAN });
            }
        }
        for a in &alone {
            if let Some(s) = tenant(a, "steady") {
                p99a.push(s.ttft_p99_ms_counting_failures.unwrap_or(f64::INFINITY));
                p50a.extend(s.ttft_ms.p50);
            }
        }
        let flood_reasons = iso
            .first()
            .and_then(|r| r.tenants.iter().find(|t| t.spec.name != "steady"))
            .map_or("–".into(), reasons);
        let _ = writeln!(
            md,
            "| {sys} | {} | {} | {} | {} | {} | {} of {} | {} | {} | {} |",
            spread(&p50a, 1),
            spread(&p50f, 1),
            spread(&p99a, 1),
            spread(&p99f, 1),
            spread(&ratios, 2),
            spread(&failed, 0),
            spread(&sent, 0),
            spread(&flood_rps, 2),
            flood_reasons,
            spread(&tps, 0),
        );
        if !ratios.is_empty() {
            let (side, estimate) = judge(&ratios, Want::AtMost(ISOLATION_BOUND));
            verdicts.push(Verdict {
                target: "isolation (steady TTFT p99 with a 10× flood ≤ 1.25× alone, per seed)",
                system: sys.clone(),
                side,
                estimate,
                seeds_passing: ratios.iter().filter(|r| **r <= ISOLATION_BOUND).count(),
                seeds: ratios.len(),
                text: format!(
                    "median p99 {} ms with the flood against {} ms alone (their ratio {}×)",
                    num(median_inf(&p99f), 1),
                    num(median_inf(&p99a), 1),
                    num(median_inf(&p99f) / median_inf(&p99a), 2)
                ),
            });
        }
    }
    let _ = writeln!(md);
}

fn long_prompts(
    md: &mut String,
    results: &[FairnessResult],
    systems: &[String],
    verdicts: &mut Vec<Verdict>,
) {
    let all: Vec<&FairnessResult> = results
        .iter()
        .filter(|r| r.scenario == "long-prompts")
        .collect();
    let Some(first) = all.first() else {
        return;
    };
    let names: Vec<String> = first.tenants.iter().map(|t| t.spec.name.clone()).collect();
    let _ = writeln!(
        md,
        "## Long prompts: equal weights, one tenant's prompts longer\n"
    );
    let shapes: Vec<String> = first
        .tenants
        .iter()
        .map(|t| {
            format!(
                "`{}` {} + {} tokens ({})",
                t.spec.name,
                t.spec.prompt_tokens,
                t.spec.output_tokens,
                load_text(&t.spec.load)
            )
        })
        .collect();
    let _ = writeln!(
        md,
        "Tenants: {}. Tokens served are the prompt and output tokens of the requests completed \
         in the window. Target: Jain's index of tokens served ≥ {JAIN_BOUND}.\n",
        shapes.join(", ")
    );
    let mut head = "| system | Jain, tokens | Jain, requests |".to_owned();
    let mut rule = "|---|---|---|".to_owned();
    for n in &names {
        let _ = write!(
            head,
            " `{n}` token share | `{n}` request share | `{n}` TTFT p50 ms |"
        );
        rule.push_str("---|---|---|");
    }
    head.push_str(" fleet tokens/s | refusals and errors |");
    rule.push_str("---|---|");
    let _ = writeln!(md, "{head}\n{rule}");
    for sys in systems {
        let rs = runs(results, "long-prompts", sys);
        if rs.is_empty() {
            continue;
        }
        let jt: Vec<f64> = rs
            .iter()
            .map(|r| r.fairness.jain_tokens.unwrap_or(0.0))
            .collect();
        let jr: Vec<f64> = rs
            .iter()
            .map(|r| r.fairness.jain_requests.unwrap_or(0.0))
            .collect();
        let mut row = format!("| {sys} | {} | {} |", spread(&jt, 3), spread(&jr, 3));
        for n in &names {
            let ts: Vec<f64> = rs
                .iter()
                .filter_map(|r| tenant(r, n))
                .map(|t| t.token_share)
                .collect();
            let rq: Vec<f64> = rs
                .iter()
                .filter_map(|r| tenant(r, n))
                .map(|t| t.request_share)
                .collect();
            let p50: Vec<f64> = rs
                .iter()
                .filter_map(|r| tenant(r, n))
                .filter_map(|t| t.ttft_ms.p50)
                .collect();
            let _ = write!(
                row,
                " {} | {} | {} |",
                spread(&ts, 3),
                spread(&rq, 3),
                spread(&p50, 0)
            );
        }
        let tps: Vec<f64> = rs.iter().map(|r| r.fairness.tokens_per_s).collect();
        let errs: Vec<String> = rs[0]
            .tenants
            .iter()
            .map(|t| format!("{}: {}", t.spec.name, reasons(t)))
            .collect();
        let _ = write!(row, " {} | {} |", spread(&tps, 0), errs.join("; "));
        let _ = writeln!(md, "{row}");
        let m = median_inf(&jt);
        let (side, estimate) = judge(&jt, Want::AtLeast(JAIN_BOUND));
        verdicts.push(Verdict {
            target:
                "long prompts (Jain's index of tokens served ≥ 0.98, one tenant 8× longer prompts)",
            system: sys.clone(),
            side,
            estimate,
            seeds_passing: jt.iter().filter(|j| **j >= JAIN_BOUND).count(),
            seeds: jt.len(),
            text: format!(
                "Jain {} on tokens ({} on requests)",
                num(m, 3),
                num(median_inf(&jr), 3)
            ),
        });
    }
    let _ = writeln!(md, "\n(Refusals and errors: of the requests sent in the window, in the run of the lowest seed.)\n");
}

fn weights(
    md: &mut String,
    results: &[FairnessResult],
    systems: &[String],
    verdicts: &mut Vec<Verdict>,
) {
    let all: Vec<&FairnessResult> = results.iter().filter(|r| r.scenario == "weights").collect();
    let Some(first) = all.first() else {
        return;
    };
    let names: Vec<(String, f64, f64)> = first
        .tenants
        .iter()
        .map(|t| (t.spec.name.clone(), t.spec.weight, t.target_share))
        .collect();
    let _ = writeln!(
        md,
        "## Weights: backlogged tenants, weights {}\n",
        names
            .iter()
            .map(|n| num(n.1, 0))
            .collect::<Vec<_>>()
            .join(":")
    );
    let _ = writeln!(
        md,
        "Every tenant {} + {} tokens, {}. Target: each tenant's share of the tokens served \
         within {:.0} % (relative) of its weight's share.\n",
        first.tenants[0].spec.prompt_tokens,
        first.tenants[0].spec.output_tokens,
        load_text(&first.tenants[0].spec.load),
        SHARE_BOUND * 100.0
    );
    let mut head = "| system |".to_owned();
    let mut rule = "|---|".to_owned();
    for (n, w, target) in &names {
        let _ = write!(
            head,
            " `{n}` (weight {}) token share, target {:.3} |",
            num(*w, 0),
            target
        );
        rule.push_str("---|");
    }
    head.push_str(
        " largest share error | Jain, tokens / weight | fleet tokens/s | refusals and errors |",
    );
    rule.push_str("---|---|---|---|");
    let _ = writeln!(md, "{head}\n{rule}");
    for sys in systems {
        let rs = runs(results, "weights", sys);
        if rs.is_empty() {
            continue;
        }
        let mut row = format!("| {sys} |");
        for (n, _, _) in &names {
            let ts: Vec<f64> = rs
                .iter()
                .filter_map(|r| tenant(r, n))
                .map(|t| t.token_share)
                .collect();
            let _ = write!(row, " {} |", spread(&ts, 3));
        }
        let err: Vec<f64> = rs
            .iter()
            .map(|r| r.fairness.max_abs_token_share_error)
            .collect();
        let jt: Vec<f64> = rs
            .iter()
            .map(|r| r.fairness.jain_tokens.unwrap_or(0.0))
            .collect();
        let tps: Vec<f64> = rs.iter().map(|r| r.fairness.tokens_per_s).collect();
        let errs: Vec<String> = rs[0]
            .tenants
            .iter()
            .map(|t| format!("{}: {}", t.spec.name, reasons(t)))
            .collect();
        let pct: Vec<f64> = err.iter().map(|e| e * 100.0).collect();
        let _ = writeln!(
            row,
            " {} % | {} | {} | {} |",
            spread(&pct, 1),
            spread(&jt, 3),
            spread(&tps, 0),
            errs.join("; ")
        );
        md.push_str(&row);
        let m = median_inf(&err);
        let (side, estimate) = judge(&err, Want::AtMost(SHARE_BOUND));
        verdicts.push(Verdict {
            target: "weights (token shares within 5 % of 1:2:4)",
            system: sys.clone(),
            side,
            estimate,
            seeds_passing: err.iter().filter(|e| **e <= SHARE_BOUND).count(),
            seeds: err.len(),
            text: format!(
                "shares {} against {}; largest error {} %",
                names
                    .iter()
                    .map(|(n, _, _)| {
                        let v: Vec<f64> = rs
                            .iter()
                            .filter_map(|r| tenant(r, n))
                            .map(|t| t.token_share)
                            .collect();
                        num(median_inf(&v), 3)
                    })
                    .collect::<Vec<_>>()
                    .join(" : "),
                names
                    .iter()
                    .map(|n| format!("{:.3}", n.2))
                    .collect::<Vec<_>>()
                    .join(" : "),
                num(m * 100.0, 1)
            ),
        });
    }
    let _ = writeln!(md);
}

fn all_runs(md: &mut String, results: &[FairnessResult]) {
    let _ = writeln!(md, "## Every run\n");
    let _ = writeln!(
        md,
        "| scenario | system | seed | per tenant: ok of sent in the window · refusals and errors · TTFT p50 / p99 (p99 counting failures) ms · tokens/s served | Jain tokens | Jain requests |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|");
    let mut order: BTreeMap<(&str, &str, u64), &FairnessResult> = BTreeMap::new();
    for r in results {
        order.insert((r.scenario.as_str(), r.label.as_str(), r.seed), r);
    }
    for ((scenario, label, seed), r) in order {
        let per: Vec<String> = r
            .tenants
            .iter()
            .map(|t| {
                format!(
                    "`{}` {} of {} · {} · {} / {} ({}) · {:.0}",
                    t.spec.name,
                    t.window.ok,
                    t.window.sent,
                    reasons(t),
                    t.ttft_ms.p50.map_or("–".into(), |v| format!("{v:.0}")),
                    t.ttft_ms.p99.map_or("–".into(), |v| format!("{v:.0}")),
                    t.ttft_p99_ms_counting_failures
                        .map_or("∞".into(), |v| format!("{v:.0}")),
                    t.served.tokens_per_s
                )
            })
            .collect();
        let _ = writeln!(
            md,
            "| {scenario} | {label} | {seed} | {} | {} | {} |",
            per.join("<br>"),
            r.fairness
                .jain_tokens
                .map_or("–".into(), |j| format!("{j:.3}")),
            r.fairness
                .jain_requests
                .map_or("–".into(), |j| format!("{j:.3}")),
        );
    }
    let _ = writeln!(md);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::median;

    #[test]
    fn infinite_values_are_judged_and_shown_as_infinite() {
        let (side, text) = judge(
            &[f64::INFINITY, f64::INFINITY, 3.0],
            Want::AtMost(ISOLATION_BOUND),
        );
        assert!(matches!(side, Side::Fails), "{text}");
        assert!(text.starts_with("median ∞ ["), "{text}");
        assert!(text.contains(", ∞] over 3 seeds"), "{text}");
    }

    #[test]
    fn medians_with_infinities() {
        assert_eq!(median_inf(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median_inf(&[1.0, 2.0]), 1.5);
        assert_eq!(
            median_inf(&[1.0, f64::INFINITY, f64::INFINITY]),
            f64::INFINITY
        );
        assert_eq!(median_inf(&[1.0, 2.0, f64::INFINITY]), 2.0);
        assert_eq!(median_inf(&[1.0, f64::INFINITY]), f64::INFINITY);
        assert!(median_inf(&[]).is_nan());
        assert_eq!(spread(&[2.0, 1.0, 3.0], 1), "2.0 (1.0–3.0)");
        assert_eq!(spread(&[2.0], 0), "2");
        assert_eq!(spread(&[1.0, f64::INFINITY, 5.0], 0), "5 (1–∞)");
        // The plain median is the same where nothing is infinite.
        assert_eq!(
            median(&[4.0, 1.0, 2.0, 3.0]),
            Some(median_inf(&[4.0, 1.0, 2.0, 3.0]))
        );
    }
    /// A result of one scenario on one system: `tokens[i]` requests of 100 tokens served to
    /// tenant i, and for a `steady` tenant, TTFTs of `ttft_ms`.
    fn result(
        scenario: &str,
        label: &str,
        seed: u64,
        tenants: &[(&str, f64, u64)],
        ttft_ms: f64,
    ) -> FairnessResult {
        use super::super::account::{account, Fate, Record, Window};
        let specs: Vec<super::super::spec::TenantSpec> = tenants
            .iter()
            .map(|(n, w, _)| format!("name={n},rate=1,weight={w}").parse().unwrap())
            .collect();
        let window = Window {
            start_s: 0.0,
            end_s: 10.0,
        };
        let records: Vec<Record> = tenants
            .iter()
            .enumerate()
            .flat_map(|(i, (_, _, n))| {
                (0..*n).map(move |k| Record {
                    tenant: i,
                    start_s: 1.0 + k as f64 * 0.01,
                    end_s: 2.0,
                    fate: Fate::Ok {
                        ttft_s: Some(ttft_ms / 1e3),
                        prompt_tokens: 90,
                        output_tokens: 10,
                    },
                })
            })
            .collect();
        let (tenants, fairness) = account(&specs, &records, window);
        FairnessResult {
            schema: super::super::SCHEMA,
            kind: KIND.into(),
            tool: "test".into(),
            label: label.into(),
            scenario: scenario.into(),
            url: "http://h:1".into(),
            model: "tiny".into(),
            seed,
            warmup_s: 0.0,
            duration_s: 10.0,
            drain_s: 0.0,
            timeout_s: 1.0,
            ignore_eos: true,
            started_unix_s: 0.0,
            wall_s: 10.0,
            window,
            tenants,
            fairness,
            provenance: Default::default(),
        }
    }

    #[test]
    fn report_judges_each_target_by_the_interval_of_per_seed_values() {
        let mut rs = Vec::new();
        for seed in [1, 2, 3] {
            // Per-seed ratios 1.1, 1.4, 1.2: the median is within the bound, the interval is not.
            let close = [55.0, 70.0, 60.0][seed as usize - 1];
            rs.push(result(
                "alone",
                "warmpath-close",
                seed,
                &[("steady", 1.0, 20)],
                50.0,
            ));
            rs.push(result(
                "isolation",
                "warmpath-close",
                seed,
                &[("steady", 1.0, 20), ("flood", 1.0, 50)],
                close,
            ));
            rs.push(result(
                "capacity",
                "warmpath-noflow",
                seed,
                &[("capacity", 1.0, 100)],
                50.0,
            ));
            for (sys, flood_ttft) in [("warmpath-tokens", 60.0), ("warmpath-noflow", 500.0)] {
                rs.push(result("alone", sys, seed, &[("steady", 1.0, 20)], 50.0));
                rs.push(result(
                    "isolation",
                    sys,
                    seed,
                    &[("steady", 1.0, 20), ("flood", 1.0, 50)],
                    flood_ttft,
                ));
                // Equal weights: equal tokens for tokens, 1:7 for the other.
                let long = if sys == "warmpath-tokens" { 10 } else { 70 };
                rs.push(result(
                    "long-prompts",
                    sys,
                    seed,
                    &[("short", 1.0, 10), ("long", 1.0, long)],
                    50.0,
                ));
                let c = if sys == "warmpath-tokens" { 40 } else { 10 };
                rs.push(result(
                    "weights",
                    sys,
                    seed,
                    &[("a", 1.0, 10), ("b", 2.0, 20), ("c", 4.0, c)],
                    50.0,
                ));
            }
        }
        let md = render(&rs, "Setup text.");
        assert!(md.starts_with("# Per-tenant fairness"));
        let targets = md.find("## Targets").expect(&md);
        assert!(targets < md.find("## Capacity").unwrap());
        assert!(md.contains("Setup text."));
        for line in [
            "- isolation (steady TTFT p99 with a 10× flood ≤ 1.25× alone, per seed) — warmpath-tokens: met, median 1.200 [1.200, 1.200] over 3 seeds (3/3 seeds on their own)",
            "- isolation (steady TTFT p99 with a 10× flood ≤ 1.25× alone, per seed) — warmpath-noflow: **missed**, median 10.000 [10.000, 10.000] over 3 seeds (0/3 seeds on their own)",
            "- isolation (steady TTFT p99 with a 10× flood ≤ 1.25× alone, per seed) — warmpath-close: not shown (the interval straddles the bound), median 1.200 [1.100, 1.400] over 3 seeds (2/3 seeds on their own)",
            "- long prompts (Jain's index of tokens served ≥ 0.98, one tenant 8× longer prompts) — warmpath-tokens: met,",
            "- long prompts (Jain's index of tokens served ≥ 0.98, one tenant 8× longer prompts) — warmpath-noflow: **missed**,",
            "- weights (token shares within 5 % of 1:2:4) — warmpath-tokens: met,",
            "- weights (token shares within 5 % of 1:2:4) — warmpath-noflow: **missed**,",
        ] {
            assert!(md.contains(line), "missing {line:?} in\n{md}");
        }
        // The isolation ratio of the medians beside: 60 / 50 ms.
        assert!(md.contains("(their ratio 1.20×)"), "{md}");
        // Every run is listed.
        assert_eq!(md.matches("| weights | ").count(), 6, "{md}");
    }
}
