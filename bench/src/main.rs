//! `warmpath-bench`: `run` offers load and writes a JSON result, `describe` prints a workload and
//! its oracle, `report` turns result files into BENCHMARKS.md and PNG plots, `fairness` offers
//! several tenants' load at once and `fairness-report` sets fairness results side by side.
#![forbid(unsafe_code)]

use std::path::Path;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use clap::Parser;

use warmpath_bench::cli::{Cli, Command, DescribeArgs, ExportArgs, RunArgs};
use warmpath_bench::client::{http_client, Target};
use warmpath_bench::metrics::{fleet_delta, scrape, CacheCounters};
use warmpath_bench::oracle::{evaluate, scaled_block_size, HitCount, OracleRequest, OracleResult};
use warmpath_bench::progress::{Info, Progress, Warmup};
use warmpath_bench::provenance::Provenance;
use warmpath_bench::results::{aggregate, LoadMode, RunConfig, RunResult, SCHEMA};
use warmpath_bench::runner::{run_with, Plan};
use warmpath_bench::workload::{Fleet, Prompt, WorkloadSpec, Zipf};

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Run(args) => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?;
            rt.block_on(run_command(*args))
        }
        Command::Fairness(args) => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?;
            rt.block_on(warmpath_bench::fairness::command(*args))
        }
        Command::FairnessReport(args) => warmpath_bench::fairness::report_command(args),
        Command::Interval(args) => {
            println!(
                "{}",
                warmpath_bench::stats::interval_json(&args.values, args.at_least, args.at_most)
            );
            Ok(())
        }
        Command::Describe(args) => describe(args),
        Command::Export(args) => export(args),
        Command::Headline(args) => {
            let changed = warmpath_bench::report::headline::update(&args.readme, args.check)?;
            eprintln!(
                "{}: benchmark block {}",
                args.readme.display(),
                if changed { "regenerated" } else { "up to date" }
            );
            Ok(())
        }
        Command::Report(args) => {
            let options = warmpath_bench::report::Options {
                allow_mixed_commits: args.allow_mixed_commits,
            };
            warmpath_bench::report::write_report(&args.results, &args.out, &args.font, options)
                .with_context(|| format!("writing {}", args.out.display()))
        }
    }
}

async fn run_command(args: RunArgs) -> Result<()> {
    let spec = args.workload.spec_for(args.requests)?;
    let text = args.workload.text;
    let load = args.load()?;
    if !(args.oracle_bytes_per_token > 0.0 && args.oracle_bytes_per_token.is_finite()) {
        bail!("--oracle-bytes-per-token must be positive");
    }
    if args.requests.is_none() && args.duration.is_none() {
        bail!("give --requests N or --duration D (or both)");
    }
    if args.requests.is_some_and(|n| args.warmup >= n) {
        bail!("--warmup must be smaller than --requests: nothing would be counted");
    }
    let target = Arc::new(
        Target::new(&args.url, &args.model, !args.no_ignore_eos, args.timeout)
            .with_context(|| format!("--url {:?} is not an http://host:port URL", args.url))?
            .with_sessions(&args.session_header, args.echo_session_token)
            .with_context(|| {
                format!(
                    "--session-header {:?} is no header name",
                    args.session_header
                )
            })?,
    );
    let base_url = target.base_url.clone();
    let idle = match load {
        LoadMode::Closed { concurrency } => concurrency,
        LoadMode::Open { .. } | LoadMode::Trace => 256,
    };
    let client = http_client(idle);

    let mut before = Vec::new();
    for url in &args.metrics_urls {
        before.push(
            scrape(&client, url)
                .await
                .with_context(|| "reading cache counters before the run")?,
        );
    }

    // Read before the run so that the commit is that of the tree the run started in, and the
    // start load average is not the load generator's own.
    let mut provenance = Provenance::at_start(Path::new("."), std::env::args().collect());
    let started_unix_s = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs_f64();
    let plan = Plan {
        load,
        requests: args.requests,
        duration: args.duration,
        max_in_flight: args.max_in_flight,
        seed: args.seed,
    };
    let progress = if args.quiet {
        Progress::off()
    } else {
        Progress::stderr(Info {
            system: args.label.clone().unwrap_or_else(|| base_url.clone()),
            workload: format!(
                "{} {}",
                spec.name(),
                match load {
                    LoadMode::Closed { concurrency } => format!("closed c{concurrency}"),
                    LoadMode::Open { rate, burst: None } => format!("open {rate} req/s"),
                    LoadMode::Open {
                        rate,
                        burst: Some(b),
                    } => format!("open {rate} req/s burst ×{}", b.factor),
                    LoadMode::Trace => "trace arrivals".to_owned(),
                }
            ),
            run: args.run_index,
            requests: args.requests,
            duration: args.duration,
            warmup: match args.warmup {
                0 => Warmup::None,
                w => Warmup::Requests(w),
            },
        })
    };
    let out = run_with(
        client.clone(),
        target,
        text.apply(spec.requests(args.seed)),
        plan,
        progress,
    )
    .await;

    provenance.finish();
    let mut after = Vec::new();
    for url in &args.metrics_urls {
        after.push(
            scrape(&client, url)
                .await
                .with_context(|| "reading cache counters after the run")?,
        );
    }
    let cache =
        (!args.metrics_urls.is_empty()).then(|| fleet_delta(&args.metrics_urls, &before, &after));

    let fleet = args.workload.fleet();
    let oracle = (!args.no_oracle).then(|| {
        let (replicas, blocks, engine_block) = oracle_fleet(&fleet, &before);
        let block_size = scaled_block_size(engine_block, args.oracle_bytes_per_token);
        let reqs: Vec<OracleRequest> = text
            .apply(spec.requests(args.seed))
            .take(out.outcomes.len())
            .map(|r| OracleRequest::from_work(&r, block_size))
            .collect();
        evaluate(&reqs, block_size, blocks, replicas)
    });

    let agg = aggregate(&out.outcomes, args.warmup as usize);
    if agg.counts.warmup < args.warmup {
        eprintln!(
            "warning: only {} requests completed, all of them warm-up (--warmup {}): nothing counted",
            agg.counts.warmup, args.warmup
        );
    }
    let result = RunResult {
        schema: SCHEMA,
        tool: format!("warmpath-bench {}", env!("CARGO_PKG_VERSION")),
        config: RunConfig {
            label: args.label.clone().unwrap_or_else(|| base_url.clone()),
            suite: args.suite.clone(),
            url: base_url,
            model: args.model,
            load,
            requests: args.requests,
            duration_s: args.duration.map(|d| d.as_secs_f64()),
            warmup: args.warmup,
            seed: args.seed,
            timeout_s: args.timeout.as_secs_f64(),
            ignore_eos: !args.no_ignore_eos,
            workload: spec,
            fleet,
            metrics_urls: args.metrics_urls,
            max_in_flight: matches!(load, LoadMode::Open { .. } | LoadMode::Trace)
                .then_some(args.max_in_flight),
            oracle_bytes_per_token: (!args.no_oracle).then_some(args.oracle_bytes_per_token),
            text,
        },
        started_unix_s,
        wall_s: out.wall_s,
        counts: agg.counts,
        throughput: agg.throughput,
        latency_ms: agg.latency_ms,
        ttft_cdf_ms: agg.ttft_cdf_ms,
        by_tenant: agg.by_tenant,
        by_replica: agg.by_replica,
        cache,
        oracle,
        provenance,
    };
    eprintln!("{}", one_line_summary(&result));
    let json = serde_json::to_string_pretty(&result)?;
    warmpath_bench::results::write_json(args.out.as_deref(), json)
}

/// The oracle's fleet: the cache shape the replicas report when every one of them does,
/// otherwise the `--fleet-*` flags.
fn oracle_fleet(fleet: &Fleet, scraped: &[CacheCounters]) -> (usize, usize, usize) {
    let shapes: Option<Vec<(u32, u32)>> = scraped
        .iter()
        .map(|c| Some((c.num_blocks?, c.block_size?)))
        .collect();
    match shapes {
        Some(s) if !s.is_empty() && s.iter().all(|x| x.1 == s[0].1) => {
            let min_blocks = s.iter().map(|x| x.0).min().unwrap_or(0);
            (s.len(), min_blocks as usize, s[0].1 as usize)
        }
        _ => (
            fleet.replicas as usize,
            fleet.kv_blocks as usize,
            fleet.block_size as usize,
        ),
    }
}

fn one_line_summary(r: &RunResult) -> String {
    let f = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.1}"));
    let hit = r.cache.as_ref().and_then(|c| c.hit_rate);
    let ceiling = |pick: fn(&OracleResult) -> &HitCount| {
        r.oracle
            .as_ref()
            .and_then(|o| pick(o).hit_rate)
            .map_or("-".into(), |h| format!("{h:.3}"))
    };
    format!(
        "{}: {} ok, {} errors {:?}; {:.2} req/s, {:.1} out tok/s; TTFT p50 {} p90 {} p99 {} ms; ITL p50 {} ms; hit rate {} (belady {}, lru perfect placement {}, infinite {})",
        r.config.label,
        r.counts.ok,
        r.counts.errors,
        r.counts.errors_by_kind,
        r.throughput.requests_per_s,
        r.throughput.output_tokens_per_s,
        f(r.latency_ms.ttft.p50),
        f(r.latency_ms.ttft.p90),
        f(r.latency_ms.ttft.p99),
        f(r.latency_ms.itl.p50),
        hit.map_or("-".into(), |h| format!("{h:.3}")),
        ceiling(|o| &o.belady),
        ceiling(|o| &o.lru_perfect_placement),
        ceiling(|o| &o.infinite),
    )
}

fn describe(args: DescribeArgs) -> Result<()> {
    let spec: WorkloadSpec = args.workload.spec_for(Some(args.requests))?;
    let fleet = args.workload.fleet();
    println!("workload: {}", serde_json::to_string_pretty(&spec)?);
    let ws = spec.prefix_working_set();
    println!(
        "fleet: {} replicas × {} blocks × {} tokens = {} tokens ({} per replica)",
        fleet.replicas,
        fleet.kv_blocks,
        fleet.block_size,
        fleet.fleet_tokens(),
        fleet.replica_tokens(),
    );
    println!(
        "prefix working set: {ws} tokens = {:.2} × the fleet's cache, {:.1} × one replica's{}",
        ws as f64 / fleet.fleet_tokens().max(1) as f64,
        ws as f64 / fleet.replica_tokens().max(1) as f64,
        match args.workload.working_set {
            Some(x) => format!(" (sized for --working-set {x})"),
            None => String::new(),
        }
    );
    if let (Some(s), Some(n)) = (spec.zipf(), spec.prefixes()) {
        if s > 0.0 {
            let z = Zipf::new(n, s);
            let tenth = (n as usize).div_ceil(10);
            println!(
                "popularity: Zipf s = {s} over {n} prefixes: the hottest gets {:.1} % of requests, the top {tenth} {:.1} %",
                100.0 * z.top_share(1),
                100.0 * z.top_share(tenth)
            );
        } else {
            println!("popularity: uniform over {n} prefixes");
        }
    }
    let text = args.workload.text;
    for (i, r) in text
        .apply(spec.requests(args.seed))
        .take(args.show)
        .enumerate()
    {
        let shape = match &r.prompt {
            Prompt::Text(t) => format!(
                "text, {} tokens: {}…",
                warmpath_bench::text::approx_tokens(t),
                t.chars().take(60).collect::<String>()
            ),
            Prompt::Chat(m) => format!("chat, {} messages", m.len()),
        };
        println!(
            "request {i}: session {:?} tenant {:?} max_tokens {} {shape}",
            r.session, r.tenant, r.max_tokens
        );
    }
    let bs = fleet.block_size as usize;
    let reqs: Vec<OracleRequest> = text
        .apply(spec.requests(args.seed))
        .take(args.requests as usize)
        .map(|r| OracleRequest::from_work(&r, bs))
        .collect();
    let o = evaluate(&reqs, bs, fleet.kv_blocks as usize, fleet.replicas as usize);
    let f = |h: Option<f64>| h.map_or("-".into(), |h| format!("{h:.3}"));
    println!(
        "ceilings over {} requests: infinite cache {}, belady (fleet's cache, the oracle) {}, lru with perfect placement (fleet's cache) {}, lru (one replica) {}",
        o.requests,
        f(o.infinite.hit_rate),
        f(o.belady.hit_rate),
        f(o.lru_perfect_placement.hit_rate),
        f(o.one_replica.hit_rate)
    );
    Ok(())
}

fn export(args: ExportArgs) -> Result<()> {
    use std::io::Write;
    let spec = args.workload.spec()?;
    let file = std::fs::File::create(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let mut w = std::io::BufWriter::new(file);
    for r in args
        .workload
        .text
        .apply(spec.requests(args.seed))
        .take(args.requests as usize)
    {
        let mut line = match &r.prompt {
            Prompt::Text(t) => serde_json::json!({ "prompt": t }),
            Prompt::Chat(m) => serde_json::json!({ "messages": m }),
        };
        line["output_tokens_count"] = r.max_tokens.into();
        if let Some(s) = r.session {
            line["session"] = s.into();
        }
        if let Some(t) = &r.tenant {
            line["tenant"] = t.clone().into();
        }
        writeln!(w, "{line}")?;
    }
    w.flush()?;
    Ok(())
}
