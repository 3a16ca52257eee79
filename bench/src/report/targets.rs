//! The targets on the shared-prefix workload of the `sim` suite (every size of it that
//! was run), each with the measured figure, the ratio over seeds with its interval, and a
//! verdict that says "met" only when the whole interval clears the bound:
//! - fleet hit rate ≥ 0.9 × the oracle;
//! - TTFT p90 ≤ 0.5 × the best peer gateway's cache-aware routing: SMG 1.13's (the Shepherd
//!   Model Gateway) on its defaults or with tuned balance thresholds, or the older
//!   sglang-router's when a run has it, whichever has the lowest median p90;
//! - ≥ 2 × round-robin's throughput at the same p90 TTFT (from the open-loop sweeps: for each
//!   of round-robin's points, the best throughput a policy sustains with a p90 TTFT no higher).

use std::fmt::Write;

use super::points::{Point, Section};
use super::tables::{est, f1, f3, hit_and_oracle, hit_over_oracle, kept_up};
use super::Loaded;
use crate::stats::{Estimate, Side};

pub const SUITE: &str = "sim";
pub const WORKLOAD: &str = "shared-prefix";
const BASELINE_RR: &str = "warmpath-round-robin";
/// The peer gateways' cache-aware rows, best first when their medians tie; the TTFT target is
/// taken against the one of them with the lowest median closed-loop p90 in each section.
const PEER_GATEWAYS: [&str; 4] = [
    "smg-cache-aware-tuned",
    "smg-cache-aware",
    "sglang-cache-aware-tuned",
    "sglang-cache-aware",
];

/// How the report names a peer gateway's row.
fn gateway_name(label: &str) -> &'static str {
    match label {
        "smg-cache-aware" => "SMG 1.13 cache_aware",
        "smg-cache-aware-tuned" => "SMG 1.13 cache_aware (tuned)",
        "sglang-cache-aware" => "sglang-router 0.3.2 cache_aware",
        "sglang-cache-aware-tuned" => "sglang-router 0.3.2 cache_aware (tuned)",
        _ => "the best peer",
    }
}

/// The peer gateway the TTFT target is measured against in a section: among `closed`'s peer
/// cache-aware rows, the lowest median TTFT p90 (the best peer, so that the target is never
/// against a handicapped one).
fn best_peer<'a, 'b>(closed: &[&'b Point<'a>]) -> Option<&'b Point<'a>> {
    let p90 = |r: &Loaded| r.result.latency_ms.ttft.p90;
    PEER_GATEWAYS
        .iter()
        .filter_map(|l| closed.iter().copied().find(|p| p.label() == *l))
        .filter_map(|p| Some((p.estimate(p90)?.median, p)))
        .fold(None, |best: Option<(f64, &Point<'a>)>, (m, p)| match best {
            Some((b, _)) if b <= m => best,
            _ => Some((m, p)),
        })
        .map(|(_, p)| p)
}

/// Best achieved throughput among `points` (offered rate sweep) whose p90 TTFT ≤ `slo_ms`.
pub(crate) fn throughput_within(points: &[&Loaded], slo_ms: f64) -> f64 {
    points
        .iter()
        .filter(|r| r.result.counts.errors == 0)
        .filter(|r| r.result.latency_ms.ttft.p90.is_some_and(|p| p <= slo_ms))
        .map(|r| r.result.throughput.requests_per_s)
        .fold(0.0, f64::max)
}

/// Achieved over offered throughput above which an open-loop point keeps up with its load
/// (below it a queue grows for the whole run and TTFT measures the run's length, not the system).
pub const SUSTAINED: f64 = 0.85;

/// The sweep point with the highest achieved throughput among those without errors that kept
/// up with their offered rate.
pub(crate) fn best_sustained<'a>(points: &[&'a Loaded]) -> Option<&'a Loaded> {
    points
        .iter()
        .copied()
        .filter(|r| r.result.counts.errors == 0)
        .filter(|r| {
            r.result.throughput.requests_per_s >= SUSTAINED * r.rate().unwrap_or(f64::INFINITY)
        })
        .max_by(|a, b| {
            a.result
                .throughput
                .requests_per_s
                .total_cmp(&b.result.throughput.requests_per_s)
        })
}

/// `figure(a) / figure(b)` for every seed both points have (the same seed is the same requests,
/// so the ratio pairs like with like), where `both` holds for the two runs.
fn paired_ratios(
    a: &Point<'_>,
    b: &Point<'_>,
    figure: impl Fn(&Loaded) -> Option<f64>,
    both: impl Fn(&Loaded, &Loaded) -> bool,
) -> Vec<f64> {
    a.paired(b, |x, y| {
        if !both(x, y) {
            return None;
        }
        let (fx, fy) = (figure(x)?, figure(y)?);
        (fy > 0.0).then(|| fx / fy)
    })
}

pub(crate) fn section(sections: &[Section<'_>]) -> String {
    let mut md =
        String::from("## Targets (shared-prefix under cache pressure, simulator fleet)\n\n");
    let targeted: Vec<&Section<'_>> = sections
        .iter()
        .filter(|s| s.suite == SUITE && s.workload == WORKLOAD)
        .collect();
    if targeted.is_empty() {
        md.push_str("No `sim` shared-prefix results yet: run `bench/compare.sh`.\n\n");
        return md;
    }
    for s in &targeted {
        if let Some(tag) = &s.tag {
            let _ = writeln!(md, "### shared-prefix, {tag}\n");
        }
        md.push_str(&rows(s));
    }
    md.push_str(
        "\nA target is **met** only when the whole bootstrap 95 % confidence interval of the ratio \
         (over seeds) clears its bound, **missed** when the whole interval is on the wrong side, and \
         *not shown* when the interval straddles the bound; with one seed there is no interval and \
         the verdict says only what that one run shows. Ratios against another system pair runs \
         of the same seed (the same requests). The TTFT target is taken against the best peer \
         gateway of each section: of SMG 1.13's cache_aware rows (its defaults, and balance \
         thresholds tuned on tuning seeds) and sglang-router's when present, the one with the \
         lowest median closed-loop p90. It is checked in the closed loop \
         (where queueing dominates) and at each open-loop rate, on the seeds where both systems \
         kept up. The throughput target compares, per seed, at round-robin's best sustained \
         point of the open-loop sweep (highest achieved req/s among points without errors that \
         kept up with their offered rate, achieved ≥ 0.85 × offered), the highest throughput \
         each policy sustained in the sweep with a p90 TTFT no higher than round-robin's there. \
         A policy whose sweep stops below 2× round-robin's throughput cannot show the target \
         even if it could meet it: the sweep's offered rates are in the tables below.\n\n",
    );
    md
}

/// One row of the TTFT target: `p`'s p90 against half of the best peer's (`sg`), `ratio` the
/// per-seed ratios' estimate; `what` qualifies the target (the open-loop rate).
fn ttft_row(md: &mut String, what: &str, p: &Point<'_>, sg: &Point<'_>, ratio: Estimate) {
    let p90 = |r: &Loaded| r.result.latency_ms.ttft.p90;
    let half = sg.estimate(p90).map(|e| 0.5 * e.median);
    let _ = writeln!(
        md,
        "| TTFT p90 ≤ 0.5 × {}{what} | {} | {} | {} ms | ≤ {} ms | {} × `{}` | {} |",
        gateway_name(sg.label()),
        p.label(),
        ratio.n,
        est(p.estimate(p90), 1),
        f1(half),
        est(Some(ratio), 3),
        sg.label(),
        Side::verdict(ratio.at_most(0.5))
    );
}

/// The runs of `seed` among `points`.
fn at_seed<'a>(points: &[&Point<'a>], seed: u64) -> Vec<&'a Loaded> {
    points.iter().filter_map(|p| p.by_seed(seed)).collect()
}

/// The targets' rows of one shared-prefix section.
fn rows(s: &Section<'_>) -> String {
    let mut md = String::new();
    let closed = s.closed();
    let warmpath: Vec<&Point<'_>> = closed
        .iter()
        .copied()
        .filter(|p| p.label().starts_with("warmpath-"))
        .collect();
    let peer = best_peer(&closed);
    let n = |p: &Point<'_>| p.runs.len();

    md.push_str("| target | run | seeds | measured | target value | ratio | verdict |\n|---|---|---:|---:|---:|---:|---|\n");
    for p in &warmpath {
        let Some(ratio) = p.estimate(hit_over_oracle) else {
            continue;
        };
        let oracle = p.estimate(|r| hit_and_oracle(r).1).map(|e| e.median);
        let _ = writeln!(
            md,
            "| hit rate ≥ 0.9 × oracle | {} | {} | {} | ≥ {} | {} × oracle | {} |",
            p.label(),
            n(p),
            est(p.estimate(|r| hit_and_oracle(r).0), 3),
            f3(oracle.map(|o| 0.9 * o)),
            est(Some(ratio), 3),
            Side::verdict(ratio.at_least(0.9))
        );
    }
    let p90 = |r: &Loaded| r.result.latency_ms.ttft.p90;
    match peer {
        Some(sg) => {
            for p in &warmpath {
                let ratios = paired_ratios(p, sg, p90, |_, _| true);
                let Some(ratio) = Estimate::of(&ratios) else {
                    let _ = writeln!(
                        md,
                        "| TTFT p90 ≤ 0.5 × {} | {} | {} | | | | not measured (no seed in common with `{}`) |",
                        gateway_name(sg.label()),
                        p.label(),
                        n(p),
                        sg.label()
                    );
                    continue;
                };
                ttft_row(&mut md, "", p, sg, ratio);
            }
        }
        None => md.push_str("| TTFT p90 ≤ 0.5 × the best peer gateway | – | | no `smg-cache-aware` (or `-tuned`) run | | | not measured |\n"),
    }
    // The same comparison at each offered rate of the open-loop sweeps, on the seeds where both
    // kept up: TTFT without the closed loop's queueing (against the same peer).
    let peer_sweep = peer.map(|sg| s.sweep(sg.label())).unwrap_or_default();
    let fine = |x: &Loaded| kept_up(x) && x.result.counts.errors == 0;
    for w in &warmpath {
        for p in s.sweep(w.label()) {
            let Some(rate) = p.rate() else { continue };
            let Some(sg) = peer_sweep.iter().find(|x| x.load() == p.load()) else {
                continue;
            };
            let ratios = paired_ratios(p, sg, p90, |a, b| fine(a) && fine(b));
            let Some(ratio) = Estimate::of(&ratios) else {
                continue;
            };
            let of = if ratio.n < n(p) {
                format!(" ({} of {} seeds kept up)", ratio.n, n(p))
            } else {
                String::new()
            };
            let what = format!(", open loop {rate:.0} req/s{of}");
            ttft_row(&mut md, &what, p, sg, ratio);
        }
    }
    let rr = s.sweep(BASELINE_RR);
    let rr_seeds: Vec<u64> = {
        let mut v: Vec<u64> = rr.iter().flat_map(|p| p.seeds()).collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    // Round-robin's best sustained point per seed: its throughput and p90 TTFT.
    let baselines: Vec<(u64, f64, f64)> = rr_seeds
        .iter()
        .filter_map(|seed| {
            let base = best_sustained(&at_seed(&rr, *seed))?;
            Some((
                *seed,
                base.result.throughput.requests_per_s,
                base.result.latency_ms.ttft.p90.unwrap_or(f64::INFINITY),
            ))
        })
        .collect();
    if baselines.is_empty() {
        md.push_str(
            "| ≥ 2 × round-robin throughput | – | | no round-robin sweep | | | not measured |\n",
        );
        return md;
    }
    let slo = Estimate::of(&baselines.iter().map(|b| b.2).collect::<Vec<_>>());
    let base_tp = Estimate::of(&baselines.iter().map(|b| b.1).collect::<Vec<_>>());
    for w in &warmpath {
        if w.label() == BASELINE_RR {
            continue;
        }
        let points = s.sweep(w.label());
        if points.is_empty() {
            continue;
        }
        let (mut tps, mut ratios) = (Vec::new(), Vec::new());
        for (seed, base, slo) in &baselines {
            let runs = at_seed(&points, *seed);
            if runs.is_empty() {
                continue;
            }
            let tp = throughput_within(&runs, *slo);
            tps.push(tp);
            ratios.push(if *base > 0.0 { tp / base } else { 0.0 });
        }
        let Some(ratio) = Estimate::of(&ratios) else {
            continue;
        };
        let _ = writeln!(
            md,
            "| ≥ 2 × round-robin throughput at p90 TTFT ≤ {} ms | {} | {} | {} req/s | ≥ {} req/s | {} × round-robin | {} |",
            f1(slo.map(|e| e.median)),
            w.label(),
            ratio.n,
            est(Estimate::of(&tps), 1),
            f1(base_tp.map(|e| 2.0 * e.median)),
            est(Some(ratio), 3),
            Side::verdict(ratio.at_least(2.0))
        );
    }
    md
}

#[cfg(test)]
mod tests {
    use super::super::points::{self, sections};
    use super::*;

    fn run(label: &str, rate: f64, tp: f64, p90: f64, errors: u64) -> Loaded {
        let mut r = points::tests::run(label, 1, Some(rate));
        r.result.throughput.requests_per_s = tp;
        r.result.latency_ms.ttft.p90 = Some(p90);
        r.result.counts.errors = errors;
        r
    }

    /// Closed-loop runs of `label` over `seeds`, with TTFT p90 `p90(seed)`.
    fn closed(label: &str, seeds: &[u64], p90: impl Fn(u64) -> f64) -> Vec<Loaded> {
        seeds
            .iter()
            .map(|s| {
                let mut r = points::tests::run(label, *s, None);
                r.result.latency_ms.ttft.p90 = Some(p90(*s));
                r
            })
            .collect()
    }

    fn verdict_of<'a>(md: &'a str, target: &str, label: &str) -> &'a str {
        md.lines()
            .find(|l| l.starts_with(&format!("| {target} | {label} |")))
            .unwrap_or_else(|| panic!("no {target} row for {label}:\n{md}"))
            .rsplit(" | ")
            .next()
            .unwrap()
            .trim_end_matches(" |")
    }

    #[test]
    fn met_only_when_the_whole_interval_clears_the_bound() {
        let seeds = [1, 2, 3, 4, 5];
        let mut runs = closed("smg-cache-aware", &seeds, |_| 100.0);
        // Clearly under half of SMG's p90 at every seed.
        runs.extend(closed("warmpath-prefix", &seeds, |s| 30.0 + s as f64));
        // Around half: some seeds under, some over.
        runs.extend(closed("warmpath-predicted-ttft", &seeds, |s| {
            44.0 + 3.0 * s as f64
        }));
        // Over at every seed.
        runs.extend(closed("warmpath-least-load", &seeds, |s| 80.0 + s as f64));
        // One seed only.
        runs.extend(closed("warmpath-round-robin", &[1], |_| 20.0));
        let md = section(&sections(&runs, |_| 0));
        let t = "TTFT p90 ≤ 0.5 × SMG 1.13 cache_aware";
        assert_eq!(verdict_of(&md, t, "warmpath-prefix"), "met");
        assert_eq!(
            verdict_of(&md, t, "warmpath-predicted-ttft"),
            "not shown (the interval straddles the bound)"
        );
        assert_eq!(verdict_of(&md, t, "warmpath-least-load"), "**missed**");
        assert_eq!(
            verdict_of(&md, t, "warmpath-round-robin"),
            "1 seed, no interval (the point meets it)"
        );
        assert!(
            md.contains("| warmpath-prefix | 5 | 33.0 [31.0, 35.0] ms | ≤ 50.0 ms |"),
            "{md}"
        );
    }

    #[test]
    fn ratios_pair_runs_of_the_same_seed() {
        // SMG is slow at seed 1 and fast at seed 2, and so is warmpath: paired, the ratio is
        // 0.4 at both seeds, although the medians' ratio would be 0.4 too and the cross pairs
        // 0.1 and 1.6.
        let mut runs = closed("smg-cache-aware", &[1, 2], |s| {
            if s == 1 {
                200.0
            } else {
                50.0
            }
        });
        runs.extend(closed("warmpath-prefix", &[1, 2, 3], |s| match s {
            1 => 80.0,
            2 => 20.0,
            _ => 999.0,
        }));
        let md = section(&sections(&runs, |_| 0));
        let row = md
            .lines()
            .find(|l| l.starts_with("| TTFT p90 ≤ 0.5 × SMG 1.13 cache_aware | warmpath-prefix |"))
            .unwrap();
        // Seed 3 has no SMG run: two pairs.
        assert!(row.contains("| warmpath-prefix | 2 |"), "{row}");
        assert!(
            row.contains("| 0.400 [0.400, 0.400] × `smg-cache-aware` | met |"),
            "{row}"
        );
    }

    #[test]
    fn the_ttft_target_is_against_the_best_peer() {
        let seeds = [1, 2, 3];
        // SMG tuned is the faster peer; the older gateway and SMG's defaults are slower.
        let mut runs = closed("smg-cache-aware", &seeds, |_| 300.0);
        runs.extend(closed("smg-cache-aware-tuned", &seeds, |_| 100.0));
        runs.extend(closed("sglang-cache-aware", &seeds, |_| 400.0));
        runs.extend(closed("warmpath-prefix", &seeds, |_| 80.0));
        let md = section(&sections(&runs, |_| 0));
        let t = "TTFT p90 ≤ 0.5 × SMG 1.13 cache_aware (tuned)";
        assert_eq!(verdict_of(&md, t, "warmpath-prefix"), "**missed**");
        assert!(
            md.contains("0.800 [0.800, 0.800] × `smg-cache-aware-tuned`"),
            "{md}"
        );
        assert!(!md.contains("× `smg-cache-aware` |"), "{md}");
        assert!(!md.contains("× `sglang-cache-aware`"), "{md}");
    }

    #[test]
    fn throughput_within_slo_skips_slow_and_failing_points() {
        let a = run("x", 10.0, 10.0, 50.0, 0);
        let b = run("x", 20.0, 19.0, 90.0, 0);
        let c = run("x", 40.0, 35.0, 400.0, 0);
        let d = run("x", 30.0, 29.0, 80.0, 3);
        let points = vec![&a, &b, &c, &d];
        assert_eq!(throughput_within(&points, 100.0), 19.0);
        assert_eq!(throughput_within(&points, 1000.0), 35.0);
        assert_eq!(throughput_within(&points, 10.0), 0.0);
    }

    #[test]
    fn best_sustained_ignores_overloaded_points() {
        let a = run("rr", 20.0, 18.0, 400.0, 0);
        let b = run("rr", 40.0, 30.0, 2800.0, 0); // 0.75 of offered: a growing queue
        let c = run("rr", 30.0, 29.0, 900.0, 2);
        let points = vec![&a, &b, &c];
        assert_eq!(
            best_sustained(&points).map(|r| r.result.throughput.requests_per_s),
            Some(18.0)
        );
        assert!(best_sustained(&[&b]).is_none());
    }
}
