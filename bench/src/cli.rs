//! Command-line arguments of `warmpath-bench` and their translation into a run's configuration.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use thiserror::Error;

use crate::client;
use crate::progress::RunIndex;
use crate::results::LoadMode;
use crate::text::TextStyle;
use crate::workload::{Burst, Fleet, Trace, WorkloadSpec, DEFAULT_WORKING_SET};

#[derive(Debug, Error, PartialEq)]
pub enum CliError {
    #[error("unknown workload {0:?}; one of: {names}, trace", names = WorkloadSpec::NAMES.join(", "))]
    UnknownWorkload(String),
    #[error("--{flag} does not apply to the {workload} workload")]
    NotApplicable {
        flag: &'static str,
        workload: &'static str,
    },
    #[error("bad duration {0:?}: use e.g. 30s, 2m, 500ms or a number of seconds")]
    BadDuration(String),
    #[error("{0}")]
    Invalid(String),
}

#[derive(Debug, Parser)]
#[command(
    name = "warmpath-bench",
    version,
    about = "Load generator and benchmark report for OpenAI-compatible LLM endpoints"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Offer load to an endpoint and write a JSON result.
    Run(Box<RunArgs>),
    /// Regenerate the README's benchmark block (warmpath's default against each peer) from the
    /// committed results its marker names; --check only compares.
    Headline(HeadlineArgs),
    /// Print a workload's parameters, sizes, sample requests and oracle hit rates, without
    /// sending anything.
    Describe(DescribeArgs),
    /// Read result files and write the Markdown report with PNG plots.
    Report(ReportArgs),
    /// Write a workload's requests as JSON lines (`prompt` or `messages`, `output_tokens_count`,
    /// `session`, `tenant`), for feeding the same prompts to another benchmark tool.
    Export(ExportArgs),
    /// Offer several tenants' load at once (each its own open or closed loop, with the tenant
    /// header) and write per-tenant results: refusals, TTFT, tokens served, shares, Jain's index.
    Fairness(Box<crate::fairness::FairnessArgs>),
    /// Read fairness results and write the Markdown report with issue 13's targets.
    FairnessReport(crate::fairness::FairnessReportArgs),
    /// Combine per-seed paired values (ratios or differences a script computed, one per seed)
    /// by bench/README.md's one rule: their median with its bootstrap 95 % interval, and with a
    /// bound, whether the interval clears it. Prints one JSON object, so that every script
    /// judges its targets the way the report does.
    Interval(IntervalArgs),
}

#[derive(Debug, Args)]
pub struct IntervalArgs {
    /// The target is "at least this" (e.g. 0.97 for a ratio).
    #[arg(long, conflicts_with = "at_most")]
    pub at_least: Option<f64>,
    /// The target is "at most this".
    #[arg(long)]
    pub at_most: Option<f64>,
    /// The per-seed values.
    #[arg(required = true, allow_negative_numbers = true)]
    pub values: Vec<f64>,
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    #[command(flatten)]
    pub workload: WorkloadArgs,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    #[arg(long)]
    pub requests: u64,
    /// The JSON-lines file to write.
    #[arg(long)]
    pub out: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// A fixed number of requests in flight (--concurrency).
    Closed,
    /// Poisson arrivals at --rate requests/s.
    Open,
    /// Each request at the time the workload gives it (the trace workload's recorded arrivals,
    /// divided by --time-scale).
    Trace,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Base URL of the OpenAI-compatible endpoint.
    #[arg(long)]
    pub url: String,
    #[command(flatten)]
    pub workload: WorkloadArgs,
    #[arg(long, value_enum, default_value_t = Mode::Closed)]
    pub mode: Mode,
    /// Requests in flight (closed loop).
    #[arg(long, default_value_t = 32)]
    pub concurrency: usize,
    /// Requests per second (open loop), the mean rate when bursty.
    #[arg(long)]
    pub rate: Option<f64>,
    /// Open loop: bursty arrivals, an on/off modulated Poisson process whose bursts run at
    /// FACTOR × --rate for 1/FACTOR of the time, nothing between (same mean rate). 1 = Poisson.
    #[arg(long, value_name = "FACTOR")]
    pub burst: Option<f64>,
    /// Open loop with --burst: mean length of one burst plus the quiet gap after it.
    #[arg(long, value_parser = parse_duration, default_value = "2s")]
    pub burst_period: Duration,
    /// Stop sending after this long (e.g. 60s, 2m).
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Stop after this many requests (warm-up included).
    #[arg(long)]
    pub requests: Option<u64>,
    /// Leave the first W requests to complete out of latencies and throughput (they still warm
    /// the caches and count in the hit rate and the oracles).
    #[arg(long, value_name = "W", default_value_t = 0)]
    pub warmup: u64,
    /// Open loop: most requests in flight before arrivals wait.
    #[arg(long, default_value_t = 4096)]
    pub max_in_flight: usize,
    #[arg(long, default_value = "tiny")]
    pub model: String,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Per-request timeout (whole stream).
    #[arg(long, value_parser = parse_duration, default_value = "60s")]
    pub timeout: Duration,
    /// Do not send `ignore_eos: true` (then the model may stop before max_tokens).
    #[arg(long)]
    pub no_ignore_eos: bool,
    /// Prometheus endpoint of a replica (repeatable): prefix-cache counters are read before
    /// and after the run and summed.
    #[arg(long = "metrics-url")]
    pub metrics_urls: Vec<String>,
    /// Skip the oracle computation.
    #[arg(long)]
    pub no_oracle: bool,
    /// The header a session's id is sent in (besides the OpenAI `user` field): e.g.
    /// `x-smg-routing-key` for the SGLang gateway's `manual` policy.
    #[arg(long, default_value = client::SESSION_HEADER)]
    pub session_header: String,
    /// Send each session's latest `x-session-token` (from the router's last answer) with its
    /// next request, as a client of warmpath's stateless session affinity does.
    #[arg(long)]
    pub echo_session_token: bool,
    /// Bytes of workload text per engine token (4 for the simulator; a real tokenizer is
    /// finer): scales the oracle's blocks to the engine's.
    #[arg(long, default_value_t = 4.0)]
    pub oracle_bytes_per_token: f64,
    /// Name of what is measured, used by the report (default: the URL).
    #[arg(long)]
    pub label: Option<String>,
    /// The comparison this run belongs to; the report has one section per suite.
    #[arg(long, default_value = "default")]
    pub suite: String,
    /// Where to write the JSON result (also printed on stdout without it).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// No progress on stderr: neither the live line drawn on a terminal nor the plain
    /// once-a-second lines written elsewhere.
    #[arg(long, visible_alias = "no-progress")]
    pub quiet: bool,
    /// Which run of how many this is, shown in the live progress line (a script looping over
    /// seeds, points or systems knows; this one invocation does not). Display only.
    #[arg(long, value_name = "I/N", env = "WARMPATH_BENCH_RUN")]
    pub run_index: Option<RunIndex>,
}

#[derive(Debug, Args)]
pub struct DescribeArgs {
    #[command(flatten)]
    pub workload: WorkloadArgs,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Requests to run the oracle over.
    #[arg(long, default_value_t = 2000)]
    pub requests: u64,
    /// Sample requests to print (prompts abbreviated).
    #[arg(long, default_value_t = 3)]
    pub show: usize,
}

#[derive(Debug, Args)]
pub struct HeadlineArgs {
    /// The Markdown file holding the block.
    #[arg(long, default_value = "README.md")]
    pub readme: PathBuf,
    /// Fail when the block differs from the results instead of rewriting it.
    #[arg(long)]
    pub check: bool,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Folder of result JSON files (and where the PNG plots go).
    #[arg(long, default_value = "bench/results")]
    pub results: PathBuf,
    /// The Markdown file to write.
    #[arg(long, default_value = "BENCHMARKS.md")]
    pub out: PathBuf,
    /// A TrueType font for the plots' text.
    #[arg(
        long,
        default_value = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
    )]
    pub font: PathBuf,
    /// Report results of different commits (each commit's runs in sections of their own)
    /// instead of refusing.
    #[arg(long)]
    pub allow_mixed_commits: bool,
}

/// The workload and its parameters; any parameter left out takes the default derived from the
/// fleet (see bench/README.md).
#[derive(Debug, Clone, Args)]
pub struct WorkloadArgs {
    /// shared-prefix | multi-turn | long-doc | agent | no-sharing | noisy-neighbour | trace
    #[arg(long, default_value = "shared-prefix")]
    pub workload: String,
    /// A Mooncake-format trace (JSON lines of timestamp, input_length, output_length,
    /// hash_ids) to replay.
    #[arg(long, value_name = "FILE", help_heading = "trace")]
    pub trace: Option<PathBuf>,
    /// Tokens one 512-token trace block becomes (default: one KV block of the fleet); every
    /// prompt and output length scales with it.
    #[arg(long, value_name = "N", help_heading = "trace")]
    pub trace_block_tokens: Option<u32>,
    /// Divide the trace's times by X (10 replays ten times faster).
    #[arg(long, value_name = "X", help_heading = "trace")]
    pub time_scale: Option<f64>,
    /// Start the window at this request of the trace instead of a seeded place.
    #[arg(long, value_name = "N", help_heading = "trace")]
    pub trace_start: Option<u64>,
    /// Cut (scaled) prompts longer than N tokens to N, keeping their prefix.
    #[arg(long, value_name = "N", help_heading = "trace")]
    pub max_input_tokens: Option<u32>,
    /// Replicas of the target fleet (default sizes derive from it).
    #[arg(long, default_value_t = Fleet::default().replicas)]
    pub fleet_replicas: u32,
    /// KV cache blocks per replica of the target fleet.
    #[arg(long, default_value_t = Fleet::default().kv_blocks)]
    pub fleet_kv_blocks: u32,
    /// Tokens per KV block of the target fleet.
    #[arg(long, default_value_t = Fleet::default().block_size)]
    pub fleet_block_size: u32,
    /// Size the default workload so its distinct prefix tokens are X times the fleet's total
    /// KV cache (default 0.5: everything fits; above 1 the cache binds).
    #[arg(long, value_name = "X")]
    pub working_set: Option<f64>,
    /// Zipf exponent of prefix popularity (0 = uniform, 1 ≈ web-like skew).
    #[arg(
        long,
        value_name = "S",
        help_heading = "shared-prefix, noisy-neighbour, long-doc"
    )]
    pub zipf: Option<f64>,

    #[arg(long, help_heading = "shared-prefix, noisy-neighbour")]
    pub groups: Option<u32>,
    #[arg(long, help_heading = "shared-prefix, noisy-neighbour")]
    pub prompts_per_group: Option<u32>,
    #[arg(
        long,
        help_heading = "shared-prefix, noisy-neighbour, multi-turn, agent"
    )]
    pub system_tokens: Option<u32>,
    #[arg(long, help_heading = "shared-prefix, noisy-neighbour, long-doc")]
    pub question_tokens: Option<u32>,
    #[arg(long, help_heading = "every workload")]
    pub output_tokens: Option<u32>,
    #[arg(long, help_heading = "multi-turn, agent")]
    pub active: Option<u32>,
    #[arg(long, help_heading = "multi-turn")]
    pub turns: Option<u32>,
    #[arg(long, help_heading = "multi-turn")]
    pub user_tokens: Option<u32>,
    #[arg(long, help_heading = "multi-turn")]
    pub assistant_tokens: Option<u32>,
    #[arg(long, help_heading = "long-doc")]
    pub documents: Option<u32>,
    #[arg(long, help_heading = "long-doc")]
    pub questions_per_doc: Option<u32>,
    #[arg(long, help_heading = "long-doc")]
    pub doc_tokens: Option<u32>,
    #[arg(long, help_heading = "agent")]
    pub steps: Option<u32>,
    #[arg(long, help_heading = "agent")]
    pub task_tokens: Option<u32>,
    #[arg(long, help_heading = "agent")]
    pub tool_call_tokens: Option<u32>,
    #[arg(long, help_heading = "agent")]
    pub tool_result_tokens: Option<u32>,
    /// Every N-th step, one more tool call and result are spliced into the middle of the
    /// history instead of its end (0 = never, the default).
    #[arg(long, value_name = "N", help_heading = "agent")]
    pub insert_every: Option<u32>,
    /// Every N-th step, the history is compacted into a summary and the latest exchange
    /// (0 = never, the default).
    #[arg(long, value_name = "N", help_heading = "agent")]
    pub compact_every: Option<u32>,
    /// Tokens of a compaction's summary.
    #[arg(long, help_heading = "agent")]
    pub summary_tokens: Option<u32>,
    #[arg(long, help_heading = "no-sharing")]
    pub prompt_tokens: Option<u32>,
    #[arg(long, help_heading = "noisy-neighbour")]
    pub quiet_tenants: Option<u32>,
    #[arg(long, help_heading = "noisy-neighbour")]
    pub noisy_share: Option<f64>,
    #[arg(long, help_heading = "noisy-neighbour")]
    pub noisy_prompt_tokens: Option<u32>,
    /// How filler text reads: `words` (4-byte words, one token each) or `natural` (English of
    /// natural word lengths, so that token boundaries do not line up with 4-byte blocks).
    #[arg(long, value_enum, default_value_t = TextStyle::Words, help_heading = "every workload")]
    pub text: TextStyle,
}

impl WorkloadArgs {
    pub fn fleet(&self) -> Fleet {
        Fleet {
            replicas: self.fleet_replicas.max(1),
            kv_blocks: self.fleet_kv_blocks.max(1),
            block_size: self.fleet_block_size.max(1),
        }
    }

    /// The trace workload from its flags; `window` is the run's request count (the whole trace
    /// without one).
    fn trace_spec(&self, window: Option<u64>) -> Result<WorkloadSpec, CliError> {
        let path = self
            .trace
            .as_ref()
            .ok_or_else(|| CliError::Invalid("--workload trace needs --trace FILE".into()))?;
        let block_tokens = self.trace_block_tokens.unwrap_or(self.fleet().block_size);
        if block_tokens == 0 {
            return Err(CliError::Invalid(
                "--trace-block-tokens must be at least 1".into(),
            ));
        }
        let mut t =
            Trace::load(path, block_tokens).map_err(|e| CliError::Invalid(e.to_string()))?;
        if let Some(x) = self.time_scale {
            if !(x > 0.0 && x.is_finite()) {
                return Err(CliError::Invalid("--time-scale must be positive".into()));
            }
            t.time_scale = x;
        }
        if let Some(w) = window {
            t.window = w.min(t.records);
        }
        if let Some(s) = self.trace_start {
            if s + t.window > t.records {
                return Err(CliError::Invalid(format!(
                    "--trace-start {s}: the trace has {} requests, {} from there are too few",
                    t.records,
                    t.records - s.min(t.records)
                )));
            }
            t.start = Some(s);
        }
        if let Some(m) = self.max_input_tokens {
            if m == 0 {
                return Err(CliError::Invalid(
                    "--max-input-tokens must be at least 1".into(),
                ));
            }
            t.max_input_tokens = Some(m);
        }
        refuse_given(
            &[
                ("working-set", self.working_set.is_some()),
                ("zipf", self.zipf.is_some()),
                ("output-tokens", self.output_tokens.is_some()),
            ],
            "trace",
        )?;
        Ok(WorkloadSpec::Trace(t))
    }

    /// The workload with the fleet's defaults and the given overrides; a trace covers `window`
    /// requests.
    pub fn spec_for(&self, window: Option<u64>) -> Result<WorkloadSpec, CliError> {
        if self.workload == "trace" {
            return self.trace_spec(window);
        }
        self.generated_spec()
    }

    /// The workload with the fleet's defaults and the given overrides (a trace: all of it).
    pub fn spec(&self) -> Result<WorkloadSpec, CliError> {
        self.spec_for(None)
    }

    /// A generated workload (every one but the trace), sized for the fleet, with the overrides.
    fn generated_spec(&self) -> Result<WorkloadSpec, CliError> {
        let working_set = self.working_set.unwrap_or(DEFAULT_WORKING_SET);
        if !(working_set > 0.0 && working_set.is_finite()) {
            return Err(CliError::Invalid("--working-set must be positive".into()));
        }
        if self.zipf.is_some_and(|s| !(s >= 0.0 && s.is_finite())) {
            return Err(CliError::Invalid("--zipf must be 0 or more".into()));
        }
        let mut spec = WorkloadSpec::sized_for(&self.workload, &self.fleet(), working_set)
            .ok_or_else(|| CliError::UnknownWorkload(self.workload.clone()))?;
        let name = spec.name();
        refuse_given(
            &[
                ("trace", self.trace.is_some()),
                ("trace-block-tokens", self.trace_block_tokens.is_some()),
                ("time-scale", self.time_scale.is_some()),
                ("trace-start", self.trace_start.is_some()),
                ("max-input-tokens", self.max_input_tokens.is_some()),
            ],
            name,
        )?;
        // Every given flag must land somewhere; one that does not apply is an error rather
        // than silently ignored.
        let mut used: Vec<&'static str> = Vec::new();
        macro_rules! set {
            ($field:expr, $opt:expr, $flag:literal) => {
                if let Some(v) = $opt {
                    $field = v;
                    used.push($flag);
                }
            };
        }
        if self.working_set.is_some() && spec.prefix_working_set() > 0 {
            used.push("working-set");
        }
        match &mut spec {
            WorkloadSpec::SharedPrefix(w) => {
                set!(w.zipf, self.zipf, "zipf");
                set!(w.groups, self.groups, "groups");
                set!(
                    w.prompts_per_group,
                    self.prompts_per_group,
                    "prompts-per-group"
                );
                set!(w.system_tokens, self.system_tokens, "system-tokens");
                set!(w.question_tokens, self.question_tokens, "question-tokens");
                set!(w.output_tokens, self.output_tokens, "output-tokens");
            }
            WorkloadSpec::MultiTurn(w) => {
                set!(w.active, self.active, "active");
                set!(w.turns, self.turns, "turns");
                set!(w.system_tokens, self.system_tokens, "system-tokens");
                set!(w.user_tokens, self.user_tokens, "user-tokens");
                set!(
                    w.assistant_tokens,
                    self.assistant_tokens,
                    "assistant-tokens"
                );
                set!(w.output_tokens, self.output_tokens, "output-tokens");
            }
            WorkloadSpec::LongDoc(w) => {
                set!(w.zipf, self.zipf, "zipf");
                set!(w.documents, self.documents, "documents");
                set!(
                    w.questions_per_doc,
                    self.questions_per_doc,
                    "questions-per-doc"
                );
                set!(w.doc_tokens, self.doc_tokens, "doc-tokens");
                set!(w.question_tokens, self.question_tokens, "question-tokens");
                set!(w.output_tokens, self.output_tokens, "output-tokens");
            }
            WorkloadSpec::Agent(w) => {
                set!(w.active, self.active, "active");
                set!(w.steps, self.steps, "steps");
                set!(w.system_tokens, self.system_tokens, "system-tokens");
                set!(w.task_tokens, self.task_tokens, "task-tokens");
                set!(
                    w.tool_call_tokens,
                    self.tool_call_tokens,
                    "tool-call-tokens"
                );
                set!(
                    w.tool_result_tokens,
                    self.tool_result_tokens,
                    "tool-result-tokens"
                );
                set!(w.rewrites.insert_every, self.insert_every, "insert-every");
                set!(
                    w.rewrites.compact_every,
                    self.compact_every,
                    "compact-every"
                );
                set!(
                    w.rewrites.summary_tokens,
                    self.summary_tokens,
                    "summary-tokens"
                );
                set!(w.output_tokens, self.output_tokens, "output-tokens");
            }
            WorkloadSpec::NoSharing(w) => {
                set!(w.prompt_tokens, self.prompt_tokens, "prompt-tokens");
                set!(w.output_tokens, self.output_tokens, "output-tokens");
            }
            WorkloadSpec::NoisyNeighbour(w) => {
                set!(w.quiet_tenants, self.quiet_tenants, "quiet-tenants");
                set!(w.quiet.zipf, self.zipf, "zipf");
                set!(w.quiet.groups, self.groups, "groups");
                set!(
                    w.quiet.prompts_per_group,
                    self.prompts_per_group,
                    "prompts-per-group"
                );
                set!(w.quiet.system_tokens, self.system_tokens, "system-tokens");
                set!(
                    w.quiet.question_tokens,
                    self.question_tokens,
                    "question-tokens"
                );
                set!(w.quiet.output_tokens, self.output_tokens, "output-tokens");
                set!(w.noisy_share, self.noisy_share, "noisy-share");
                set!(
                    w.noisy_prompt_tokens,
                    self.noisy_prompt_tokens,
                    "noisy-prompt-tokens"
                );
                if !(0.0..=1.0).contains(&w.noisy_share) {
                    return Err(CliError::Invalid(
                        "--noisy-share must be within [0, 1]".into(),
                    ));
                }
            }
            // Built by trace_spec above.
            WorkloadSpec::Trace(_) => {}
        }
        let given: [(&'static str, bool); 25] = [
            ("working-set", self.working_set.is_some()),
            ("zipf", self.zipf.is_some()),
            ("groups", self.groups.is_some()),
            ("prompts-per-group", self.prompts_per_group.is_some()),
            ("system-tokens", self.system_tokens.is_some()),
            ("question-tokens", self.question_tokens.is_some()),
            ("output-tokens", self.output_tokens.is_some()),
            ("active", self.active.is_some()),
            ("turns", self.turns.is_some()),
            ("user-tokens", self.user_tokens.is_some()),
            ("assistant-tokens", self.assistant_tokens.is_some()),
            ("documents", self.documents.is_some()),
            ("questions-per-doc", self.questions_per_doc.is_some()),
            ("doc-tokens", self.doc_tokens.is_some()),
            ("steps", self.steps.is_some()),
            ("task-tokens", self.task_tokens.is_some()),
            ("tool-call-tokens", self.tool_call_tokens.is_some()),
            ("tool-result-tokens", self.tool_result_tokens.is_some()),
            ("insert-every", self.insert_every.is_some()),
            ("compact-every", self.compact_every.is_some()),
            ("summary-tokens", self.summary_tokens.is_some()),
            ("prompt-tokens", self.prompt_tokens.is_some()),
            ("quiet-tenants", self.quiet_tenants.is_some()),
            ("noisy-share", self.noisy_share.is_some()),
            ("noisy-prompt-tokens", self.noisy_prompt_tokens.is_some()),
        ];
        if let Some((flag, _)) = given.iter().find(|(f, g)| *g && !used.contains(f)) {
            return Err(CliError::NotApplicable {
                flag,
                workload: name,
            });
        }
        Ok(spec)
    }
}

/// Refuses the first of `flags` that was given (name, given) as not applying to `workload`.
fn refuse_given(flags: &[(&'static str, bool)], workload: &'static str) -> Result<(), CliError> {
    match flags.iter().find(|(_, given)| *given) {
        Some((flag, _)) => Err(CliError::NotApplicable { flag, workload }),
        None => Ok(()),
    }
}

impl RunArgs {
    /// How load is offered, checked.
    pub fn load(&self) -> Result<LoadMode, CliError> {
        match self.mode {
            Mode::Closed => {
                if self.concurrency == 0 {
                    return Err(CliError::Invalid("--concurrency must be at least 1".into()));
                }
                if self.burst.is_some() {
                    return Err(CliError::Invalid(
                        "--burst shapes open-loop arrivals: use it with --mode open".into(),
                    ));
                }
                Ok(LoadMode::Closed {
                    concurrency: self.concurrency,
                })
            }
            Mode::Open => {
                let rate = self
                    .rate
                    .filter(|r| *r > 0.0 && r.is_finite())
                    .ok_or_else(|| {
                        CliError::Invalid("--mode open needs --rate R with R > 0".into())
                    })?;
                let burst = match self.burst {
                    None => None,
                    Some(f) if f.is_finite() && f >= 1.0 => {
                        if self.burst_period.is_zero() {
                            return Err(CliError::Invalid(
                                "--burst-period must be longer than zero".into(),
                            ));
                        }
                        // Factor 1 is plain Poisson: recorded as such, so it compares with
                        // runs made without the flag.
                        (f > 1.0).then_some(Burst {
                            factor: f,
                            period_s: self.burst_period.as_secs_f64(),
                        })
                    }
                    Some(_) => {
                        return Err(CliError::Invalid("--burst must be 1 or more".into()));
                    }
                };
                Ok(LoadMode::Open { rate, burst })
            }
            Mode::Trace => {
                if self.workload.workload != "trace" {
                    return Err(CliError::Invalid(
                        "--mode trace sends requests at their recorded times: use it with --workload trace".into(),
                    ));
                }
                if self.rate.is_some() || self.burst.is_some() {
                    return Err(CliError::Invalid(
                        "--rate and --burst shape open-loop arrivals; a trace brings its own (scale them with --time-scale)".into(),
                    ));
                }
                Ok(LoadMode::Trace)
            }
        }
    }
}

/// `30s`, `2m`, `500ms`, `1h` or a plain number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, CliError> {
    let bad = || CliError::BadDuration(s.to_owned());
    let t = s.trim();
    let (num, mult) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = t.strip_suffix('h') {
        (n, 3600.0)
    } else {
        (t, 1.0)
    };
    let v: f64 = num.trim().parse().map_err(|_| bad())?;
    if !v.is_finite() || v < 0.0 {
        return Err(bad());
    }
    Ok(Duration::from_secs_f64(v * mult))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> WorkloadArgs {
        let mut full = vec!["warmpath-bench", "describe"];
        full.extend_from_slice(args);
        match Cli::try_parse_from(full).unwrap().command {
            Command::Describe(d) => d.workload,
            _ => unreachable!(),
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("-1s").is_err());
    }

    #[test]
    fn overrides_apply_and_foreign_flags_are_rejected() {
        let w = parse(&[
            "--workload",
            "shared-prefix",
            "--groups",
            "7",
            "--fleet-replicas",
            "4",
        ]);
        match w.spec().unwrap() {
            WorkloadSpec::SharedPrefix(s) => {
                assert_eq!(s.groups, 7);
                assert_eq!(s.prompts_per_group, 16);
            }
            other => panic!("{other:?}"),
        }
        let w = parse(&["--workload", "agent", "--turns", "3"]);
        assert_eq!(
            w.spec(),
            Err(CliError::NotApplicable {
                flag: "turns",
                workload: "agent"
            })
        );
        let w = parse(&["--workload", "nope"]);
        assert!(matches!(w.spec(), Err(CliError::UnknownWorkload(_))));
        let w = parse(&["--workload", "noisy-neighbour", "--noisy-share", "2"]);
        assert!(matches!(w.spec(), Err(CliError::Invalid(_))));
    }

    fn run_args(args: &[&str]) -> RunArgs {
        let mut full = vec!["warmpath-bench", "run", "--url", "http://h:1"];
        full.extend_from_slice(args);
        match Cli::try_parse_from(full).unwrap().command {
            Command::Run(r) => *r,
            _ => unreachable!(),
        }
    }

    #[test]
    fn working_set_and_zipf_size_and_skew_the_workload() {
        let spec = parse(&["--working-set", "1.5", "--zipf", "0.9"])
            .spec()
            .unwrap();
        let fleet = Fleet::default();
        assert!(spec.prefix_working_set() as f64 >= 1.5 * fleet.fleet_tokens() as f64);
        assert_eq!(spec.zipf(), Some(0.9));
        // Explicit sizes still win over the working set.
        match parse(&["--working-set", "2", "--groups", "3"])
            .spec()
            .unwrap()
        {
            WorkloadSpec::SharedPrefix(s) => assert_eq!(s.groups, 3),
            other => panic!("{other:?}"),
        }
        // Without the flags: the sizes results have always used.
        assert_eq!(
            parse(&[]).spec().unwrap(),
            WorkloadSpec::defaults_for("shared-prefix", &fleet).unwrap()
        );
        let noisy = parse(&["--workload", "noisy-neighbour", "--zipf", "1"]);
        assert_eq!(noisy.spec().unwrap().zipf(), Some(1.0));
        for (args, flag) in [
            (&["--workload", "multi-turn", "--zipf", "1"][..], "zipf"),
            (
                &["--workload", "no-sharing", "--working-set", "1"][..],
                "working-set",
            ),
        ] {
            assert!(
                matches!(parse(args).spec(), Err(CliError::NotApplicable { flag: f, .. }) if f == flag),
                "{args:?}"
            );
        }
        for args in [&["--working-set", "0"][..], &["--zipf=-1"][..]] {
            assert!(
                matches!(parse(args).spec(), Err(CliError::Invalid(_))),
                "{args:?}"
            );
        }
    }

    #[test]
    fn load_modes_and_bursts() {
        assert_eq!(
            run_args(&["--concurrency", "4"]).load(),
            Ok(LoadMode::Closed { concurrency: 4 })
        );
        assert_eq!(
            run_args(&["--mode", "open", "--rate", "20", "--burst", "4"]).load(),
            Ok(LoadMode::Open {
                rate: 20.0,
                burst: Some(Burst {
                    factor: 4.0,
                    period_s: 2.0
                })
            })
        );
        assert_eq!(
            run_args(&["--mode", "open", "--rate", "20", "--burst", "1"]).load(),
            Ok(LoadMode::Open {
                rate: 20.0,
                burst: None
            })
        );
        for args in [
            &["--burst", "3"][..],
            &["--mode", "open"][..],
            &["--mode", "open", "--rate", "5", "--burst", "0.5"][..],
            &[
                "--mode",
                "open",
                "--rate",
                "5",
                "--burst",
                "2",
                "--burst-period",
                "0s",
            ][..],
            &["--concurrency", "0"][..],
        ] {
            assert!(run_args(args).load().is_err(), "{args:?}");
        }
    }

    #[test]
    fn defaults_follow_the_fleet() {
        let small = parse(&["--fleet-replicas", "2", "--fleet-kv-blocks", "64"])
            .spec()
            .unwrap();
        let big = parse(&["--fleet-replicas", "8", "--fleet-kv-blocks", "512"])
            .spec()
            .unwrap();
        assert!(small.prefix_working_set() < big.prefix_working_set());
    }
}
