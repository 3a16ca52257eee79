//! `warmpath-router --config FILE [--kubernetes]`: the data plane, from a file, and in
//! Kubernetes mode also from the cluster's warmpath resources.
//!
//! `warmpath-router sidecar --listen ADDR --engine URL ...`: the decode pod's P/D sidecar
//! ([`warmpath_router::sidecar`]).
//!
//! `warmpath-router check --config FILE [--model M] [--prompt TEXT]...`: validate a
//! configuration and show where sample prompts would go and why ([`warmpath_router::check`]).
#![forbid(unsafe_code)]

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;
use warmpath_api::boundaries::{self, Boundaries, Network, ReplicaNetworks};
use warmpath_router::config::{LimitsConfig, PrefillFailure, TimeoutsConfig};
use warmpath_router::kubernetes::Discovery;
use warmpath_router::sidecar::{self, AllowList, Cidr, CidrPorts, EngineUrl, PrefillTarget};
use warmpath_router::{config::Config, Options};

// glibc malloc showed up at ~11% of the proxy's CPU (many small, short-lived allocations per
// request, spread over threads); mimalloc's thread-local free lists are much cheaper here.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(
    name = "warmpath-router",
    version,
    about = "Prefix-cache-aware OpenAI-compatible router",
    // `--config` is required only without a subcommand, and the router's flags do not mix
    // with one.
    subcommand_negates_reqs = true,
    args_conflicts_with_subcommands = true
)]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    /// Static configuration (YAML); reloaded when it changes.
    #[arg(long, env = "WARMPATH_CONFIG", required = true)]
    config: Option<PathBuf>,
    /// Worker threads (default: one per core).
    #[arg(long, env = "WARMPATH_THREADS")]
    threads: Option<usize>,
    /// Check the configuration and exit (`check --config FILE` says more).
    #[arg(long)]
    check: bool,
    /// Also route to the cluster's InferencePools and InferenceReplicas (in-cluster service
    /// account, or $KUBECONFIG).
    #[arg(long, env = "WARMPATH_KUBERNETES")]
    kubernetes: bool,
    /// Namespaces to watch in Kubernetes mode, comma-separated; empty: all.
    #[arg(
        long,
        env = "WARMPATH_WATCH_NAMESPACES",
        value_delimiter = ',',
        default_value = ""
    )]
    namespaces: Vec<String>,
    /// Namespaces whose Secrets may hold TenantPolicies' API keys, comma-separated (read there
    /// only, each value kept as a keyed hash; there is no "all"). Unset: the router's own
    /// namespace (`--router-namespace`), or none.
    #[arg(long, env = "WARMPATH_SECRET_NAMESPACES", value_delimiter = ',')]
    secret_namespaces: Option<Vec<String>>,
    /// Namespaces whose InferencePools may serve a model another namespace's pool named first
    /// (comma-separated). A model is otherwise served only by the namespace that claimed it.
    #[arg(
        long,
        env = "WARMPATH_SHARE_MODELS_WITH",
        value_delimiter = ',',
        default_value = ""
    )]
    share_models_with: Vec<String>,
    /// The networks InferenceReplicas may point at (CIDRs, comma-separated; a bare address is
    /// one host). Empty: every address except loopback, link-local (cloud metadata) and
    /// unspecified ones. Applies to every replica, the controller's too (they carry pod IPs).
    #[arg(long, env = "WARMPATH_REPLICA_NETWORKS", value_delimiter = ',')]
    replica_networks: Vec<String>,
    /// Also accept InferenceReplicas whose address is a DNS name (not checked against
    /// `--replica-networks`: a name may resolve elsewhere by the time it is called).
    #[arg(long, env = "WARMPATH_REPLICA_HOSTNAMES")]
    replica_hostnames: bool,
    /// The directory InferencePools' `kvEvents.tokenizer` and `chatTemplate` must resolve
    /// under (links followed); others are not read and the pool is routed without its
    /// tokenizer. Paths in the configuration file are not bound by it.
    #[arg(long, env = "WARMPATH_TOKENIZER_ROOT", default_value = boundaries::DEFAULT_TOKENIZER_ROOT)]
    tokenizer_root: PathBuf,
    /// The highest priority a TenantPolicy or InferenceObjective outside the router's own
    /// namespace gets; higher ones are lowered to it.
    #[arg(
        long,
        env = "WARMPATH_MAX_TENANT_PRIORITY",
        default_value_t = boundaries::DEFAULT_MAX_TENANT_PRIORITY,
        allow_negative_numbers = true,
        value_parser = clap::value_parser!(i32).range(-1000..=1000)
    )]
    max_tenant_priority: i32,
    /// The operator's namespace (the chart sets its release's): its TenantPolicies and
    /// objectives keep their bare names and uncapped priorities. Unset: none is exempt.
    #[arg(long, env = "WARMPATH_ROUTER_NAMESPACE")]
    router_namespace: Option<String>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The decode pod's P/D sidecar: requests with `x-prefiller-host-port: HOST:PORT` get their
    /// prefill on that host (vLLM's NIXL protocol) and their decode on the local engine; others
    /// are proxied to the local engine.
    Sidecar(SidecarArgs),
    /// Validate a configuration and print, for sample prompts, which replica each would be
    /// routed to and why (every candidate's scores). Exits 1 when the file is not valid.
    Check(CheckArgs),
}

#[derive(Debug, clap::Args)]
struct CheckArgs {
    /// The static configuration (YAML).
    #[arg(long, env = "WARMPATH_CONFIG")]
    config: PathBuf,
    /// The model to route for (default: the first one served).
    #[arg(long)]
    model: Option<String>,
    /// A user message to route (after a shared sample system prompt); repeat for several,
    /// routed in order. Default: three samples, the last repeating the first.
    #[arg(long)]
    prompt: Vec<String>,
}

#[derive(Debug, clap::Args)]
struct SidecarArgs {
    /// Where schedulers and clients send requests.
    #[arg(long, env = "WARMPATH_SIDECAR_LISTEN", default_value = sidecar::defaults::LISTEN)]
    listen: SocketAddr,
    /// The local engine, `http://HOST:PORT`.
    #[arg(long, env = "WARMPATH_SIDECAR_ENGINE", default_value = sidecar::defaults::ENGINE)]
    engine: EngineUrl,
    /// `/metrics`, `/healthz`, `/readyz` (ready when the engine's `/health` answers 200).
    #[arg(long, env = "WARMPATH_SIDECAR_ADMIN", default_value = sidecar::defaults::ADMIN)]
    admin: SocketAddr,
    /// Prefill hosts that may be called, as a CIDR of IP addresses (a bare address is one
    /// host), on the ports of `--prefill-port`. Repeat, or comma-separate in the variable.
    /// Names are never resolved.
    #[arg(long, env = "WARMPATH_SIDECAR_PREFILL_ALLOW", value_delimiter = ',')]
    prefill_allow: Vec<Cidr>,
    /// The ports an address allowed by `--prefill-allow` may be called on. Default: the
    /// engine's port and `--listen`'s (prefill pods built like this one serve there); `any`
    /// for every port. Repeat, or comma-separate in the variable.
    #[arg(long, env = "WARMPATH_SIDECAR_PREFILL_PORTS", value_delimiter = ',')]
    prefill_port: Vec<String>,
    /// A prefill host that may be called, exactly `HOST:PORT` (the only way to allow a DNS
    /// name). Repeat, or comma-separate in the variable. With neither this nor
    /// `--prefill-allow`, every request naming a prefill host is refused (403).
    #[arg(long, env = "WARMPATH_SIDECAR_PREFILL_HOSTS", value_delimiter = ',')]
    prefill_host: Vec<PrefillTarget>,
    /// When the prefill fails: `decode` on the local engine with the client's own body, or
    /// `fail` with a 502.
    #[arg(
        long,
        env = "WARMPATH_SIDECAR_ON_PREFILL_FAILURE",
        value_enum,
        default_value_t = OnPrefillFailure::Decode
    )]
    on_prefill_failure: OnPrefillFailure,
    /// Largest request body accepted (then 413).
    #[arg(long, env = "WARMPATH_SIDECAR_MAX_BODY_BYTES", default_value_t = LimitsConfig::default().max_body_bytes)]
    max_body_bytes: usize,
    /// Opening a connection to the prefill host or the engine (ms).
    #[arg(long, env = "WARMPATH_SIDECAR_CONNECT_TIMEOUT_MS", default_value_t = TimeoutsConfig::default().connect_ms)]
    connect_timeout_ms: u64,
    /// From sending a request upstream to its response head (ms); bounds the whole prefill.
    #[arg(long, env = "WARMPATH_SIDECAR_HEADER_TIMEOUT_MS", default_value_t = TimeoutsConfig::default().header_ms)]
    header_timeout_ms: u64,
    /// Longest silence between two chunks of an upstream answer (ms), then it is cut.
    #[arg(long, env = "WARMPATH_SIDECAR_IDLE_TIMEOUT_MS", default_value_t = TimeoutsConfig::default().idle_ms)]
    idle_timeout_ms: u64,
    /// Reading a client's request head and body (ms), then 408.
    #[arg(long, env = "WARMPATH_SIDECAR_CLIENT_TIMEOUT_MS", default_value_t = TimeoutsConfig::default().client_ms)]
    client_timeout_ms: u64,
    /// An engine path to pass besides the inference, health and metrics ones (with what lies
    /// under it), e.g. `/v1/audio`; every other path gets 404. Repeat, or comma-separate in the
    /// variable.
    #[arg(long, env = "WARMPATH_SIDECAR_ENGINE_PATHS", value_delimiter = ',')]
    engine_path: Vec<String>,
    /// Worker threads (default: one per core).
    #[arg(long, env = "WARMPATH_SIDECAR_THREADS")]
    threads: Option<usize>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum OnPrefillFailure {
    Decode,
    Fail,
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            // WARMPATH_LOG, else RUST_LOG (what the Helm chart sets), else info.
            tracing_subscriber::EnvFilter::try_from_env("WARMPATH_LOG")
                .or_else(|_| tracing_subscriber::EnvFilter::try_from_default_env())
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let mut args = Args::parse();
    match args.command.take() {
        Some(Command::Sidecar(sidecar)) => return run_sidecar(sidecar),
        Some(Command::Check(check)) => {
            let config = Config::load(&check.config)?;
            let report =
                warmpath_router::check::report(config, check.model.as_deref(), &check.prompt)?;
            print!("{report}");
            return Ok(());
        }
        None => {}
    }
    let config_path = args.config.clone().context("--config is required")?;
    let config = Config::load(&config_path)?;
    if args.check {
        println!("{}: ok", config_path.display());
        return Ok(());
    }
    let rt = runtime(args.threads)?;
    rt.block_on(async move {
        let kubernetes = if args.kubernetes {
            let client = kube::Client::try_default().await.context(
                "Kubernetes mode needs a service account (in a pod) or a kubeconfig ($KUBECONFIG)",
            )?;
            let names = |list: &[String]| -> Vec<String> {
                list.iter()
                    .map(|n| n.trim().to_owned())
                    .filter(|n| !n.is_empty())
                    .collect()
            };
            let allow = names(&args.replica_networks)
                .iter()
                .map(|n| n.parse::<Network>())
                .collect::<Result<Vec<_>, _>>()
                .context("--replica-networks")?;
            let own_namespace = args
                .router_namespace
                .clone()
                .filter(|n| !n.trim().is_empty());
            let secret_namespaces = match &args.secret_namespaces {
                Some(list) => names(list),
                None => own_namespace.iter().cloned().collect(),
            };
            Some(Discovery {
                client,
                namespaces: names(&args.namespaces),
                secret_namespaces,
                boundaries: Boundaries {
                    share_models_with: names(&args.share_models_with),
                    replica_networks: ReplicaNetworks {
                        allow,
                        hostnames: args.replica_hostnames,
                    },
                    tokenizer_root: args.tokenizer_root.clone(),
                    max_tenant_priority: args.max_tenant_priority,
                    own_namespace,
                },
            })
        } else {
            None
        };
        let handle = warmpath_router::start(
            config,
            Options {
                watch: Some(config_path),
                reload_interval: Duration::from_secs(1),
                kubernetes,
            },
        )
        .await?;
        shutdown_signal().await;
        tracing::info!("shutting down: not ready, accepting for shutdown.accept_ms, then draining");
        handle.drain().await;
        Ok(())
    })
}

/// One thread: a current-thread runtime skips the work-stealing machinery (nginx's model: one
/// event loop per worker). More: the multi-thread scheduler.
fn runtime(threads: Option<usize>) -> anyhow::Result<tokio::runtime::Runtime> {
    let mut rt = match threads {
        Some(1) => tokio::runtime::Builder::new_current_thread(),
        Some(n) => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            b.worker_threads(n.max(1));
            b
        }
        None => tokio::runtime::Builder::new_multi_thread(),
    };
    rt.enable_all().build().context("starting the runtime")
}

fn run_sidecar(args: SidecarArgs) -> anyhow::Result<()> {
    let ms = |v: u64, flag: &str| {
        anyhow::ensure!(v > 0, "--{flag} must be > 0");
        Ok(Duration::from_millis(v))
    };
    anyhow::ensure!(args.max_body_bytes > 0, "--max-body-bytes must be > 0");
    if let Some(p) = args
        .engine_path
        .iter()
        .find(|p| !p.starts_with('/') || p.len() < 2 || p.contains(['?', '#', ' ']))
    {
        anyhow::bail!("--engine-path `{p}`: a path starting with `/`, without query or spaces");
    }
    anyhow::ensure!(
        args.listen != args.admin || args.listen.port() == 0,
        "--admin must differ from --listen"
    );
    let options = sidecar::SidecarOptions {
        listen: args.listen,
        admin: args.admin,
        engine: args.engine,
        allow: AllowList::new(args.prefill_allow, args.prefill_host)
            .on_ports(CidrPorts::from_flags(&args.prefill_port).context("--prefill-port")?),
        on_prefill_failure: match args.on_prefill_failure {
            OnPrefillFailure::Decode => PrefillFailure::Decode,
            OnPrefillFailure::Fail => PrefillFailure::Fail,
        },
        max_body_bytes: args.max_body_bytes,
        timeouts: sidecar::SidecarTimeouts {
            connect: ms(args.connect_timeout_ms, "connect-timeout-ms")?,
            header: ms(args.header_timeout_ms, "header-timeout-ms")?,
            idle: ms(args.idle_timeout_ms, "idle-timeout-ms")?,
            client: ms(args.client_timeout_ms, "client-timeout-ms")?,
        },
        drain: Duration::from_secs(10),
        engine_paths: args.engine_path,
    };
    let rt = runtime(args.threads)?;
    rt.block_on(async move {
        let handle = sidecar::start(options).await?;
        shutdown_signal().await;
        tracing::info!("shutting down");
        handle.shutdown().await;
        Ok(())
    })
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        let term = async {
            match term.as_mut() {
                Some(t) => {
                    t.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
