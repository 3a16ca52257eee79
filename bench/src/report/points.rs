//! Points and sections of the report.
//!
//! A point is the set of runs that differ only in their seed: same suite, label, workload (every
//! parameter), load, request count, duration, warm-up, fleet and commit. Every figure the report
//! prints for a point is the median over its seeds with a bootstrap 95 % interval
//! ([`crate::stats::Estimate`]), so one lucky or unlucky run cannot decide a verdict.
//!
//! A section is one suite's points of one workload with the same parameters and the same commit:
//! the same workload name run at two working-set sizes, say, makes two sections, each with its
//! own tables and plots; results of two commits (reported only with `--allow-mixed-commits`)
//! never share a section, so no table or target sets one commit's run beside another's.

use std::collections::BTreeMap;

use serde_json::json;

use super::{label_rank, Loaded};
use crate::results::LoadMode;
use crate::stats::Estimate;
use crate::workload::{Fleet, WorkloadSpec, DEFAULT_WORKING_SET};

/// Runs that differ only in seed, ordered by seed.
#[derive(Debug, Clone)]
pub(crate) struct Point<'a> {
    pub runs: Vec<&'a Loaded>,
}

impl<'a> Point<'a> {
    pub fn first(&self) -> &'a Loaded {
        self.runs[0]
    }

    pub fn label(&self) -> &'a str {
        self.first().label()
    }

    pub fn rate(&self) -> Option<f64> {
        self.first().rate()
    }

    pub fn load(&self) -> LoadMode {
        self.first().result.config.load
    }

    pub fn seeds(&self) -> Vec<u64> {
        self.runs.iter().map(|r| r.result.config.seed).collect()
    }

    pub fn by_seed(&self, seed: u64) -> Option<&'a Loaded> {
        self.runs
            .iter()
            .copied()
            .find(|r| r.result.config.seed == seed)
    }

    /// `figure` of every seed that has it: median and interval.
    pub fn estimate(&self, figure: impl Fn(&Loaded) -> Option<f64>) -> Option<Estimate> {
        let values: Vec<f64> = self.runs.iter().filter_map(|r| figure(r)).collect();
        Estimate::of(&values)
    }

    /// `value(mine, theirs)` for every seed both points ran (the same seed is the same requests,
    /// so each value pairs like with like), where it is `Some`.
    pub fn paired(
        &self,
        other: &Point<'_>,
        value: impl Fn(&Loaded, &Loaded) -> Option<f64>,
    ) -> Vec<f64> {
        self.runs
            .iter()
            .filter_map(|x| value(x, other.by_seed(x.result.config.seed)?))
            .collect()
    }

    /// Σ over seeds.
    pub fn total(&self, figure: impl Fn(&Loaded) -> u64) -> u64 {
        self.runs.iter().map(|r| figure(r)).sum()
    }
}

/// One suite's points of one workload with one set of parameters.
#[derive(Debug, Clone)]
pub(crate) struct Section<'a> {
    pub suite: String,
    pub workload: &'static str,
    pub spec: WorkloadSpec,
    pub fleet: Fleet,
    /// What tells this section apart from others of the same workload name in its suite
    /// (working set, popularity skew, commit); `None` when it is the only one.
    pub tag: Option<String>,
    /// The commit of every run in the section, as printed (short hash, `+dirty`).
    pub commit: Option<String>,
    pub points: Vec<Point<'a>>,
}

impl Section<'_> {
    /// The prefix working set over the fleet's cache.
    pub fn working_set(&self) -> f64 {
        self.spec.prefix_working_set() as f64 / self.fleet.fleet_tokens().max(1) as f64
    }

    /// Every seed of the section, in order.
    pub fn seeds(&self) -> Vec<u64> {
        let mut s: Vec<u64> = self.points.iter().flat_map(Point::seeds).collect();
        s.sort_unstable();
        s.dedup();
        s
    }

    pub fn closed(&self) -> Vec<&Point<'_>> {
        self.points.iter().filter(|p| p.rate().is_none()).collect()
    }

    pub fn open(&self) -> Vec<&Point<'_>> {
        self.points.iter().filter(|p| p.rate().is_some()).collect()
    }

    /// The open-loop points of one label, by offered rate.
    pub fn sweep(&self, label: &str) -> Vec<&Point<'_>> {
        self.points
            .iter()
            .filter(|p| p.rate().is_some() && p.label() == label)
            .collect()
    }

    /// File-name stem of the section's plots.
    pub fn stem(&self) -> String {
        let base = format!("{}-{}", self.suite, self.workload);
        let full = match &self.tag {
            None => base,
            Some(_) => {
                let mut s = format!("{base}-ws{:.2}", self.working_set());
                if let Some(z) = self.spec.zipf().filter(|z| *z > 0.0) {
                    s.push_str(&format!("-zipf{z}"));
                }
                if let Some(c) = &self.commit {
                    s.push_str(&format!("-{c}"));
                }
                s
            }
        };
        full.replace(|c: char| !c.is_ascii_alphanumeric() && c != '-', "_")
    }
}

/// What must be equal for two runs to be seeds of one point (the seed and the URLs left out:
/// ports say nothing about what was measured).
fn point_key(r: &Loaded) -> String {
    let c = &r.result.config;
    json!({
        "suite": c.suite,
        "label": c.label,
        "workload": c.workload,
        "load": c.load,
        "requests": c.requests,
        "duration_s": c.duration_s,
        "warmup": c.warmup,
        "fleet": c.fleet,
        "model": c.model,
        "text": c.text,
        "commit": r.commit(),
    })
    .to_string()
}

/// The runs grouped into sections of points, in report order: suites as given by `suite_rank`,
/// workloads in their documented order (then by working set), points by label then rate.
pub(crate) fn sections<'a>(
    results: &'a [Loaded],
    suite_rank: impl Fn(&str) -> usize,
) -> Vec<Section<'a>> {
    let mut points: BTreeMap<String, Vec<&'a Loaded>> = BTreeMap::new();
    for r in results {
        points.entry(point_key(r)).or_default().push(r);
    }
    let mut by_section: BTreeMap<(String, String, Option<&str>), Vec<Point<'a>>> = BTreeMap::new();
    for (_, mut runs) in points {
        runs.sort_by_key(|r| r.result.config.seed);
        let c = &runs[0].result.config;
        let key = (
            c.suite.clone(),
            serde_json::to_string(&c.workload).unwrap_or_default(),
            runs[0].commit(),
        );
        by_section.entry(key).or_default().push(Point { runs });
    }
    let commits: std::collections::BTreeSet<Option<&str>> =
        by_section.keys().map(|k| k.2).collect();
    let mut out: Vec<Section<'a>> = by_section
        .into_iter()
        .map(|((suite, _, _), mut points)| {
            points.sort_by(|a, b| {
                label_rank(a.label())
                    .cmp(&label_rank(b.label()))
                    .then(
                        a.rate()
                            .unwrap_or(-1.0)
                            .total_cmp(&b.rate().unwrap_or(-1.0)),
                    )
                    .then_with(|| point_key(a.first()).cmp(&point_key(b.first())))
            });
            let first = points[0].first();
            let c = &first.result.config;
            Section {
                suite,
                workload: c.workload.name(),
                spec: c.workload.clone(),
                fleet: c.fleet,
                tag: None,
                commit: (commits.len() > 1).then(|| {
                    first
                        .result
                        .provenance
                        .short_commit()
                        .unwrap_or_else(|| "no-commit".to_owned())
                }),
                points,
            }
        })
        .collect();
    // Sections that share a suite and a workload name are told apart by their parameters and,
    // when commits are mixed, their commit.
    let mut count: BTreeMap<(String, &'static str), usize> = BTreeMap::new();
    for s in &out {
        *count.entry((s.suite.clone(), s.workload)).or_default() += 1;
    }
    for s in &mut out {
        if count[&(s.suite.clone(), s.workload)] > 1 {
            let mut tag = describe_sizing(&s.spec, &s.fleet);
            if let Some(c) = &s.commit {
                tag.push_str(&format!(", commit {c}"));
            }
            s.tag = Some(tag);
        }
    }
    out.sort_by(|a, b| {
        let order = |s: &Section| {
            (
                suite_rank(&s.suite),
                s.suite.clone(),
                WorkloadSpec::NAMES
                    .iter()
                    .position(|n| *n == s.workload)
                    .unwrap_or(usize::MAX),
            )
        };
        order(a)
            .cmp(&order(b))
            .then(a.working_set().total_cmp(&b.working_set()))
            .then(
                a.spec
                    .zipf()
                    .unwrap_or(0.0)
                    .total_cmp(&b.spec.zipf().unwrap_or(0.0)),
            )
            .then_with(|| a.commit.cmp(&b.commit))
    });
    out
}

/// "working set 1.50 × the fleet's cache, Zipf 1.2": how a workload was sized and skewed.
pub(crate) fn describe_sizing(spec: &WorkloadSpec, fleet: &Fleet) -> String {
    let ws = spec.prefix_working_set() as f64 / fleet.fleet_tokens().max(1) as f64;
    let mut s = format!("working set {ws:.2} × the fleet's cache");
    if let Some(z) = spec.zipf().filter(|z| *z > 0.0) {
        s.push_str(&format!(", Zipf {z}"));
    }
    s
}

/// Whether a section's workload is sized as the defaults were before `--working-set` existed.
pub(crate) fn default_sized(section: &Section<'_>) -> bool {
    WorkloadSpec::sized_for(section.workload, &section.fleet, DEFAULT_WORKING_SET)
        .is_some_and(|d| d.prefix_working_set() == section.spec.prefix_working_set())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::results::RunResult;

    /// A run of the test result file with the given label, seed and load.
    pub(crate) fn run(label: &str, seed: u64, rate: Option<f64>) -> Loaded {
        let mut v: serde_json::Value =
            serde_json::from_str(include_str!("../../tests/data/result.json")).unwrap();
        v["config"]["label"] = label.into();
        v["config"]["suite"] = "sim".into();
        let mut r: RunResult = serde_json::from_value(v).unwrap();
        r.config.seed = seed;
        if let Some(rate) = rate {
            r.config.load = LoadMode::Open { rate, burst: None };
        }
        Loaded {
            file: format!("{label}-{seed}-{rate:?}.json"),
            result: r,
        }
    }

    #[test]
    fn runs_that_differ_only_in_seed_make_one_point() {
        let mut runs = vec![
            run("b", 3, None),
            run("b", 1, None),
            run("b", 2, None),
            run("a", 1, None),
            run("b", 1, Some(20.0)),
            run("b", 2, Some(20.0)),
            run("b", 1, Some(40.0)),
        ];
        // Another working set: another section.
        let mut big = run("b", 1, None);
        if let WorkloadSpec::SharedPrefix(w) = &mut big.result.config.workload {
            w.groups *= 4;
        }
        runs.push(big);
        // Other ports: still the same point.
        runs[0].result.config.url = "http://elsewhere:1".into();
        let s = sections(&runs, |_| 0);
        assert_eq!(s.len(), 2);
        let main = &s[0];
        assert!(main.working_set() < s[1].working_set());
        assert!(main.tag.is_some() && s[1].tag.is_some());
        assert_ne!(main.stem(), s[1].stem());
        let shape: Vec<(&str, Option<f64>, Vec<u64>)> = main
            .points
            .iter()
            .map(|p| (p.label(), p.rate(), p.seeds()))
            .collect();
        assert_eq!(
            shape,
            vec![
                ("a", None, vec![1]),
                ("b", None, vec![1, 2, 3]),
                ("b", Some(20.0), vec![1, 2]),
                ("b", Some(40.0), vec![1]),
            ]
        );
        assert_eq!(main.seeds(), vec![1, 2, 3]);
        let b = &main.points[1];
        assert_eq!(b.by_seed(2).map(|r| r.result.config.seed), Some(2));
        assert!(b.by_seed(9).is_none());
        let e = b.estimate(|r| Some(r.result.config.seed as f64)).unwrap();
        assert_eq!((e.median, e.n), (2.0, 3));
        assert_eq!(b.total(|r| r.result.counts.ok), 3 * 200);
    }

    #[test]
    fn runs_of_different_commits_never_share_a_section() {
        let mut runs = vec![run("a", 1, None), run("a", 2, None), run("a", 1, None)];
        for (r, c) in runs.iter_mut().zip(["a", "a", "b"]) {
            r.result.provenance.commit = Some(c.repeat(40));
        }
        let s = sections(&runs, |_| 0);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].points[0].seeds(), vec![1, 2]);
        assert_eq!(s[1].points[0].seeds(), vec![1]);
        assert_eq!(
            s[0].tag.as_deref(),
            Some("working set 0.50 × the fleet's cache, commit aaaaaaaaaaaa")
        );
        assert_ne!(s[0].stem(), s[1].stem());
    }

    #[test]
    fn a_lone_workload_keeps_its_plain_name() {
        let runs = vec![run("a", 1, None)];
        let s = sections(&runs, |_| 0);
        assert_eq!(s[0].tag, None);
        assert_eq!(s[0].stem(), "sim-shared-prefix");
    }
}
