//! `warmpath-router --config FILE [--kubernetes]`: the data plane, from a file, and in
//! Kubernetes mode also from the cluster's warmpath resources.
#![forbid(unsafe_code)]

use anyhow::Context;
use clap::Parser;
use std::path::PathBuf;
use std::time::Duration;
use warmpath_router::kubernetes::Discovery;
use warmpath_router::{config::Config, Options};

// glibc malloc showed up at ~11% of the proxy's CPU (many small, short-lived allocations per
// request, spread over threads); mimalloc's thread-local free lists are much cheaper here.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(
    name = "warmpath-router",
    version,
    about = "Prefix-cache-aware OpenAI-compatible router"
)]
struct Args {
    /// Static configuration (YAML); reloaded when it changes.
    #[arg(long, env = "WARMPATH_CONFIG")]
    config: PathBuf,
    /// Worker threads (default: one per core).
    #[arg(long, env = "WARMPATH_THREADS")]
    threads: Option<usize>,
    /// Check the configuration and exit.
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
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("WARMPATH_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let args = Args::parse();
    let config = Config::load(&args.config)?;
    if args.check {
        println!("{}: ok", args.config.display());
        return Ok(());
    }
    // One thread: a current-thread runtime skips the work-stealing machinery (nginx's model:
    // one event loop per worker). More: the multi-thread scheduler.
    let mut rt = match args.threads {
        Some(1) => tokio::runtime::Builder::new_current_thread(),
        Some(n) => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            b.worker_threads(n.max(1));
            b
        }
        None => tokio::runtime::Builder::new_multi_thread(),
    };
    let rt = rt.enable_all().build().context("starting the runtime")?;
    rt.block_on(async move {
        let kubernetes = if args.kubernetes {
            let client = kube::Client::try_default().await.context(
                "Kubernetes mode needs a service account (in a pod) or a kubeconfig ($KUBECONFIG)",
            )?;
            Some(Discovery {
                client,
                namespaces: args
                    .namespaces
                    .iter()
                    .map(|n| n.trim().to_owned())
                    .filter(|n| !n.is_empty())
                    .collect(),
            })
        } else {
            None
        };
        let handle = warmpath_router::start(
            config,
            Options {
                watch: Some(args.config.clone()),
                reload_interval: Duration::from_secs(1),
                drain: Duration::from_secs(10),
                kubernetes,
            },
        )
        .await?;
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
