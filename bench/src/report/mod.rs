//! The benchmark report: reads every run result in a folder, writes `BENCHMARKS.md` (tables,
//! the targets with how far each is met or missed, the exact commands, the machine) and PNG
//! plots beside the results.
//!
//! Files that the comparison script leaves in the results folder and that are not run results
//! are included as they are: `machine.txt`, `commands.txt`, and any `*.md` fragment (the
//! data-path suite's table, the independent tool's comparison), in name order.
//!
//! Results of different commits are refused unless asked for (see [`commits`]): a report states
//! what one version of the code does.

mod commits;
mod datapath;
pub mod headline;
mod plots;
mod points;
mod tables;
mod targets;
mod versus;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::results::{LoadMode, RunResult, MIN_SCHEMA, SCHEMA};

#[derive(Debug, Error)]
pub enum ReportError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("no run results (*.json with schema {MIN_SCHEMA} to {SCHEMA}) in {0}")]
    NoResults(PathBuf),
    #[error(
        "{path} has result schema {schema}; this warmpath-bench reads {MIN_SCHEMA} to {SCHEMA} \
         (a newer file needs the warmpath-bench of the commit that wrote it)"
    )]
    UnknownSchema { path: PathBuf, schema: u64 },
    #[error("{path} looks like a run result (schema {schema}) but does not parse: {reason}")]
    BadResult {
        path: PathBuf,
        schema: u64,
        reason: String,
    },
    #[error(
        "the results come from different commits, which one report must not mix:\n{0}\n\
         Rerun them on one commit, or pass --allow-mixed-commits to report each commit's runs \
         in sections of their own."
    )]
    MixedCommits(String),
    #[error("font {path}: {reason}")]
    Font { path: PathBuf, reason: String },
    #[error("plot {path}: {reason}")]
    Plot { path: PathBuf, reason: String },
}

/// One result file.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub file: String,
    pub result: RunResult,
}

impl Loaded {
    pub fn label(&self) -> &str {
        &self.result.config.label
    }
    pub fn workload(&self) -> &'static str {
        self.result.config.workload.name()
    }
    pub fn rate(&self) -> Option<f64> {
        match self.result.config.load {
            LoadMode::Open { rate, .. } => Some(rate),
            LoadMode::Closed { .. } | LoadMode::Trace => None,
        }
    }
    /// The commit the run was made on, `None` when not recorded (schema 1, or no git).
    pub fn commit(&self) -> Option<&str> {
        self.result.provenance.commit.as_deref()
    }
}

/// Suites in the order the report lists them; others follow alphabetically.
const SUITE_ORDER: [&str; 5] = ["sim", "sim-idle", "pd", "vllm-cpu", "independent"];

/// What a known suite is, said once above its tables.
fn suite_about(suite: &str) -> Option<&'static str> {
    Some(match suite {
        "sim" => "`bench/compare.sh`: one simulated fleet (`warmpath-sim`; shape and costs in the Machine \
                  section), restarted cold before every run; every system gets the same seeded requests.",
        "vllm-cpu" => "`bench/real-vllm.sh`: three real vLLM CPU engines (the tiny random-weight Llama of \
                       `../shared/peers/vllm-cpu.sh`, `--num-gpu-blocks-override 64`, 128-token blocks), prefix \
                       caches emptied between systems. The question here is whether the hit-rate ordering of the \
                       policies holds on a real engine; latencies are those of a toy model on shared CPU cores. \
                       The oracle is approximate: the engine's tokenizer is not the simulator's, so its blocks are \
                       scaled by the measured bytes per token.",
        "independent" => "`bench/independent.sh`: warmpath-bench's own runs for the comparison with guidellm below.",
        "pd" => "`bench/pd.sh`: prefill/decode disaggregation on one simulated fleet (8 replicas; P/D systems use 4 \
                 as a prefill pool and 4 as a decode pool, pulling KV blocks at 0.2 ms each), open loop: \
                 `unified` is warmpath's `prefix` over all 8, `pd-nixl-T` warmpath splitting from T uncached \
                 tokens with vLLM's NIXL protocol, `pd-sglang` with SGLang's bootstrap protocol, `smg-pd` \
                 SMG 1.13 (the Shepherd Model Gateway) in its PD mode (`--pd-disaggregation`, cache_aware), \
                 `smg-unified` SMG's cache_aware over all 8 (`sglang-pd` and `sglang-unified`, when present, \
                 the same on the older sglang-router 0.3.2).",
        "sim-idle" => "`bench/compare.sh` (`IDLE_SYSTEMS`): the plumbing alone. One request at a time, 128-token \
                       prompts that share nothing, 8 tokens out, against the same simulated fleet and against its \
                       first replica directly (`direct`): the TTFT a router or gateway adds to an idle request, \
                       apart from anything routing decides.",
        "sim-mixed-fleet" => "`bench/sensitivity.sh`: the `sim` fleet with two accelerator generations, half the \
                              replicas 2.5× as fast as the others (`--replica-speeds`): where `predicted_ttft` \
                              should beat scoring by cache and load alone.",
        s if s.starts_with("sim-") => "`bench/sensitivity.sh`: the `sim` fleet and the cache-binding workload with one \
                                       thing changed, as the suite's name says (the exact simulator flags are in the \
                                       Machine section): does the ordering of the systems hold?",
        _ => return None,
    })
}

/// Labels in the order the report lists them; others follow alphabetically.
const ORDER: [&str; 18] = [
    "direct",
    "warmpath-round-robin",
    "warmpath-least-load",
    "warmpath-prefix",
    "warmpath-predicted-ttft",
    "warmpath-consistent-hash",
    "warmpath-llm-d",
    "warmpath-dynamo",
    "smg-round-robin",
    "smg-power-of-two",
    "smg-prefix-hash",
    "smg-cache-aware",
    "smg-cache-aware-tuned",
    "smg-least-load",
    "sglang-round-robin",
    "sglang-cache-aware",
    "sglang-cache-aware-tuned",
    "sglang-power-of-two",
];

pub(crate) fn label_rank(label: &str) -> (usize, String) {
    (
        ORDER
            .iter()
            .position(|l| *l == label)
            .unwrap_or(ORDER.len()),
        label.to_owned(),
    )
}

/// How the report treats its input.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Report results of several commits instead of refusing them.
    pub allow_mixed_commits: bool,
}

/// Reads every `*.json` in `dir` that is a run result (an object with a numeric `schema` and a
/// `config`); other JSON files are skipped with a note on stderr (the data-path suite writes
/// its own). A run result of a schema this build does not know, or one that does not parse, is
/// an error naming the file rather than a silent gap in the report.
pub fn load_results(dir: &Path) -> Result<Vec<Loaded>, ReportError> {
    let read_err = |source| ReportError::Read {
        path: dir.to_owned(),
        source,
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(read_err)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(&path).map_err(|source| ReportError::Read {
            path: path.clone(),
            source,
        })?;
        let value: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        let schema = value.get("schema").and_then(serde_json::Value::as_u64);
        let (Some(schema), true) = (schema, value.get("config").is_some()) else {
            eprintln!("report: {} is not a run result, skipped", path.display());
            continue;
        };
        if schema > u64::from(SCHEMA) || schema < u64::from(MIN_SCHEMA) {
            return Err(ReportError::UnknownSchema { path, schema });
        }
        let result: RunResult =
            serde_json::from_value(value).map_err(|e| ReportError::BadResult {
                path: path.clone(),
                schema,
                reason: e.to_string(),
            })?;
        out.push(Loaded {
            file: path
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned(),
            result,
        });
    }
    if out.is_empty() {
        return Err(ReportError::NoResults(dir.to_owned()));
    }
    Ok(out)
}

/// Where a suite comes in the report: the known ones first, in [`SUITE_ORDER`].
fn suite_rank(suite: &str) -> usize {
    SUITE_ORDER
        .iter()
        .position(|s| *s == suite)
        .unwrap_or(SUITE_ORDER.len())
}

fn read_optional(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .filter(|s| !s.trim().is_empty())
}

/// Writes the report to `out` and the plots into `results_dir`.
pub fn write_report(
    results_dir: &Path,
    out: &Path,
    font: &Path,
    options: Options,
) -> Result<(), ReportError> {
    let results = load_results(results_dir)?;
    commits::check(&results, options.allow_mixed_commits)?;
    let sections = points::sections(&results, suite_rank);
    plots::register_font(font)?;
    // Plot links are relative to the report's folder.
    let out_dir = out
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let rel = relative(results_dir, out_dir);

    let mut md = String::new();
    md.push_str("# warmpath benchmarks\n\n");
    let _ = write!(
        md,
        "Generated by `warmpath-bench report` from the result files in `{}`; do not edit by \
         hand. The commands that produced them are in its `commands*.txt` (the scripts: \
         `bench/compare.sh`, `bench/routing.sh`, `bench/full.sh`; `bench/README.md`). \
         Every number below comes from a run in the same session on the same machine, with the \
         peers running side by side on the same simulated fleet: `smg-*` rows are SMG 1.13 (the \
         Shepherd Model Gateway, PyPI `smg`; its version and each row's flags are in the Machine \
         section), `llm-d` rows llm-d's own endpoint picker behind the bench's ext_proc gateway, \
         `sglang-*` rows the older sglang-router 0.3.2, `warmpath-llm-d` and `warmpath-dynamo` \
         our re-implementations of those peers' algorithms.\n\n",
        results_dir.display()
    );
    md.push_str(&commits::summary(&results));
    md.push_str(&targets::section(&sections));
    md.push_str(&versus::section(&sections));
    let mut suite: Option<&str> = None;
    for s in &sections {
        if suite != Some(s.suite.as_str()) {
            suite = Some(s.suite.as_str());
            md.push_str(&format!("## Suite `{}`\n\n", s.suite));
            if let Some(about) = suite_about(&s.suite) {
                md.push_str(about);
                md.push_str("\n\n");
            }
        }
        md.push_str(&tables::workload_section(s));
        for (title, file) in plots::workload_plots(results_dir, s)? {
            md.push_str(&format!("![{title}]({})\n\n", rel.join(&file).display()));
        }
    }
    // The report itself may be written into the results folder: it is no fragment of itself
    // (read as one, each regeneration would hold the last one whole).
    let this = std::fs::canonicalize(out).ok();
    let mut fragments: Vec<PathBuf> = std::fs::read_dir(results_dir)
        .map_err(|source| ReportError::Read {
            path: results_dir.to_owned(),
            source,
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .filter(|p| this.is_none() || std::fs::canonicalize(p).ok() != this)
        .collect();
    fragments.sort();
    for f in fragments {
        if let Some(text) = read_optional(&f) {
            md.push_str(text.trim_end());
            md.push_str("\n\n");
        }
    }
    if let Some(text) = read_optional(&results_dir.join("datapath.json")) {
        md.push_str(&datapath::section(&text));
    }
    md.push_str(&tables::oracle_note());
    md.push_str("## Commands\n\n");
    let mut commands: Vec<PathBuf> = std::fs::read_dir(results_dir)
        .map_err(|source| ReportError::Read {
            path: results_dir.to_owned(),
            source,
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().unwrap_or_default().to_string_lossy();
            name.starts_with("commands") && name.ends_with(".txt")
        })
        .collect();
    commands.sort();
    if commands.is_empty() {
        md.push_str("(no `commands*.txt` in the results folder)\n\n");
    }
    for c in commands {
        if let Some(text) = read_optional(&c) {
            let name = c
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            md.push_str(&format!("`{name}`:\n\n```sh\n{}\n```\n\n", text.trim_end()));
        }
    }
    md.push_str(&commits::section(&results));
    md.push_str("## Machine\n\n");
    match read_optional(&results_dir.join("machine.txt")) {
        Some(m) => md.push_str(&format!("```\n{}\n```\n", m.trim_end())),
        None => md.push_str("(no `machine.txt` in the results folder)\n"),
    }
    std::fs::write(out, md).map_err(|source| ReportError::Write {
        path: out.to_owned(),
        source,
    })
}

/// `target` relative to `base` when it is inside it, else `target` as given.
fn relative(target: &Path, base: &Path) -> PathBuf {
    let t = std::fs::canonicalize(target).unwrap_or_else(|_| target.to_owned());
    let b = std::fs::canonicalize(base).unwrap_or_else(|_| base.to_owned());
    t.strip_prefix(&b)
        .map(Path::to_owned)
        .unwrap_or_else(|_| target.to_owned())
}
