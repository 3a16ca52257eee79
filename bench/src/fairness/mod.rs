//! `warmpath-bench fairness`: several tenants' load at once against one endpoint, and what each
//! tenant got under overload: requests answered and refused (by status and by warmpath's
//! `x-warmpath-dropped-reason`), TTFT, tokens served, each tenant's share and Jain's index.
//! `warmpath-bench fairness-report` turns a folder of such results into a Markdown report
//! (`bench/flow.sh` runs both; issue 13's benchmark).
//!
//! - [`spec`]: a tenant on the command line (`--tenant name=a,rate=4` or `concurrency=64`).
//! - [`run`]: the load generators, the warm-up / window / drain timeline, the records.
//! - [`account`]: the figures from the records (pure).
//! - [`report`]: medians over seeds and the targets, passed or failed.
//!
//! Every request carries the tenant header ([`crate::client::TENANT_HEADER`]); the tenant's
//! `weight=` is used only to compute shares and Jain's index (the router's configuration is
//! what gives tenants their weights).

pub mod account;
pub mod report;
pub mod run;
pub mod spec;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use clap::Args;
use serde::{Deserialize, Serialize};

use crate::cli::parse_duration;
use crate::client::{http_client, Target};
use crate::progress::{Info, Progress, RunIndex, Warmup};
use crate::provenance::Provenance;

use account::{FairnessSummary, TenantReport, Window};
use spec::{TenantLoad, TenantSpec};

/// The schema of a fairness result.
pub const SCHEMA: u32 = 1;

/// The `kind` of a fairness result file (other result files in a folder are skipped).
pub const KIND: &str = "fairness";

#[derive(Debug, Args)]
pub struct FairnessArgs {
    /// Base URL of the OpenAI-compatible endpoint.
    #[arg(long)]
    pub url: String,
    /// A tenant and its load (repeatable): `name=N,rate=R` (open loop, Poisson, requests/s) or
    /// `name=N,concurrency=C` (closed loop); optional `prompt_tokens=` (256) and
    /// `output_tokens=` (32), each a count or a range MIN-MAX drawn uniformly per request;
    /// `weight=` (1, for the share computation only); `max_in_flight=` (open loop, 2048:
    /// arrivals beyond are skipped and counted); `pause_after_error_ms=` (closed loop, 100).
    #[arg(long = "tenant", required = true, value_parser = parse_tenant)]
    pub tenants: Vec<TenantSpec>,
    /// Load before the measured window.
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    pub warmup: Duration,
    /// The measured window.
    #[arg(long, value_parser = parse_duration, default_value = "30s")]
    pub duration: Duration,
    /// After the window, load continues until every request sent in it is answered, at most
    /// this long; requests still unanswered then count as unfinished.
    #[arg(long, value_parser = parse_duration, default_value = "30s")]
    pub drain: Duration,
    #[arg(long, default_value = "tiny")]
    pub model: String,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Per-request timeout (whole stream).
    #[arg(long, value_parser = parse_duration, default_value = "60s")]
    pub timeout: Duration,
    /// Do not send `ignore_eos: true`.
    #[arg(long)]
    pub no_ignore_eos: bool,
    /// Name of the system measured (default: the URL).
    #[arg(long)]
    pub label: Option<String>,
    /// Name of the scenario (the report groups runs by scenario and label).
    #[arg(long, default_value = "default")]
    pub scenario: String,
    /// Where to write the JSON result (printed on stdout without it).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// No progress on stderr: neither the live line drawn on a terminal nor the plain
    /// once-a-second lines written elsewhere.
    #[arg(long, visible_alias = "no-progress")]
    pub quiet: bool,
    /// Which run of how many this is, shown in the live progress line (a script looping over
    /// seeds, scenarios or systems knows; this one invocation does not). Display only.
    #[arg(long, value_name = "I/N", env = "WARMPATH_BENCH_RUN")]
    pub run_index: Option<RunIndex>,
}

#[derive(Debug, Args)]
pub struct FairnessReportArgs {
    /// Folder of fairness result files.
    #[arg(long, default_value = "bench/results-flow")]
    pub results: PathBuf,
    /// The Markdown file to write.
    #[arg(long, default_value = "bench/results-flow/REPORT.md")]
    pub out: PathBuf,
    /// Markdown to put after the title (the setup, written by the script).
    #[arg(long)]
    pub preamble: Option<PathBuf>,
}

fn parse_tenant(s: &str) -> Result<TenantSpec, spec::SpecError> {
    s.parse()
}

/// One fairness run's result file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FairnessResult {
    pub schema: u32,
    /// Always [`KIND`].
    pub kind: String,
    pub tool: String,
    pub label: String,
    pub scenario: String,
    pub url: String,
    pub model: String,
    pub seed: u64,
    pub warmup_s: f64,
    pub duration_s: f64,
    pub drain_s: f64,
    pub timeout_s: f64,
    pub ignore_eos: bool,
    /// Unix time of the start, seconds.
    pub started_unix_s: f64,
    /// From the start to the end of the drain.
    pub wall_s: f64,
    pub window: Window,
    pub tenants: Vec<TenantReport>,
    pub fairness: FairnessSummary,
    pub provenance: Provenance,
}

/// `warmpath-bench fairness`.
pub async fn command(args: FairnessArgs) -> Result<()> {
    spec::check_tenants(&args.tenants)?;
    if args.duration.is_zero() {
        bail!("--duration must be longer than zero");
    }
    let target = Arc::new(
        Target::new(&args.url, &args.model, !args.no_ignore_eos, args.timeout)
            .with_context(|| format!("--url {:?} is not an http://host:port URL", args.url))?,
    );
    let base_url = target.base_url.clone();
    let idle: usize = args
        .tenants
        .iter()
        .map(|t| match t.load {
            TenantLoad::Closed { concurrency, .. } => concurrency,
            TenantLoad::Open { .. } => 64,
        })
        .sum();
    let client = http_client(idle.max(1));
    let mut provenance = Provenance::at_start(Path::new("."), std::env::args().collect());
    let started_unix_s = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs_f64();
    let timeline = run::Timeline {
        warmup: args.warmup,
        duration: args.duration,
        drain: args.drain,
    };
    let progress = if args.quiet {
        Progress::off()
    } else {
        Progress::stderr(Info {
            system: args.label.clone().unwrap_or_else(|| base_url.clone()),
            workload: format!("{} ({} tenants)", args.scenario, args.tenants.len()),
            run: args.run_index,
            requests: None,
            duration: Some(args.warmup + args.duration),
            warmup: Warmup::Time(args.warmup),
        })
    };
    let out = run::run(client, target, &args.tenants, timeline, args.seed, progress).await;
    provenance.finish();
    let (tenants, fairness) = account::account(&args.tenants, &out.records, timeline.window());
    let result = FairnessResult {
        schema: SCHEMA,
        kind: KIND.to_owned(),
        tool: format!("warmpath-bench {}", env!("CARGO_PKG_VERSION")),
        label: args.label.clone().unwrap_or_else(|| base_url.clone()),
        scenario: args.scenario.clone(),
        url: base_url,
        model: args.model,
        seed: args.seed,
        warmup_s: args.warmup.as_secs_f64(),
        duration_s: args.duration.as_secs_f64(),
        drain_s: args.drain.as_secs_f64(),
        timeout_s: args.timeout.as_secs_f64(),
        ignore_eos: !args.no_ignore_eos,
        started_unix_s,
        wall_s: out.wall_s,
        window: timeline.window(),
        tenants,
        fairness,
        provenance,
    };
    eprintln!("{}", one_line_summary(&result));
    let json = serde_json::to_string_pretty(&result)?;
    crate::results::write_json(args.out.as_deref(), json)
}

fn one_line_summary(r: &FairnessResult) -> String {
    let f = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.1}"));
    let mut s = format!(
        "{} / {} (seed {}): {:.1} tokens/s, {:.2} req/s served; Jain tokens {} requests {}",
        r.scenario,
        r.label,
        r.seed,
        r.fairness.tokens_per_s,
        r.fairness.requests_per_s,
        r.fairness
            .jain_tokens
            .map_or("-".into(), |j| format!("{j:.3}")),
        r.fairness
            .jain_requests
            .map_or("-".into(), |j| format!("{j:.3}")),
    );
    for t in &r.tenants {
        s.push_str(&format!(
            "\n  {}: sent {} ok {} refused {:?} (429 by reason {:?}) errors {:?} unfinished {} skipped {}; served {:.1} tok/s ({:.1} % of tokens); TTFT p50 {} p99 {} ms",
            t.spec.name,
            t.window.sent,
            t.window.ok,
            t.window.refused_by_status,
            t.window.refused_by_reason,
            t.window.errors_by_kind,
            t.window.unfinished,
            t.window.skipped,
            t.served.tokens_per_s,
            100.0 * t.token_share,
            f(t.ttft_ms.p50),
            f(t.ttft_ms.p99),
        ));
    }
    s
}

/// `warmpath-bench fairness-report`.
pub fn report_command(args: FairnessReportArgs) -> Result<()> {
    let results = report::load(&args.results)?;
    if results.is_empty() {
        bail!("no fairness results in {}", args.results.display());
    }
    let preamble = match &args.preamble {
        Some(p) => {
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?
        }
        None => String::new(),
    };
    let md = report::render(&results, &preamble);
    std::fs::write(&args.out, md).with_context(|| format!("writing {}", args.out.display()))
}
