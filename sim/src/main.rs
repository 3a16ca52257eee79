//! `warmpath-sim`: parses flags, starts the replicas, runs until interrupted (ctrl-c stops at
//! once; SIGTERM drains open requests first).
#![forbid(unsafe_code)]

use anyhow::Context;
use clap::Parser;
use warmpath_sim::Cli;

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warmpath_sim=info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cli.threads.max(1))
        .enable_all()
        .build()
        .context("building the runtime")?;
    rt.block_on(async {
        let sim = warmpath_sim::start(&cli).await?;
        let addrs = sim.addrs();
        tracing::info!(
            replicas = addrs.len(),
            first = %addrs[0],
            last = %addrs[addrs.len() - 1],
            model = %cli.model,
            "serving"
        );
        if let Some(a) = sim.admin_addr {
            tracing::info!(admin = %a, "admin endpoint");
        }
        let mut sim = sim;
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .context("listening for SIGTERM")?;
        tokio::select! {
            r = tokio::signal::ctrl_c() => r.context("waiting for ctrl-c")?,
            _ = term.recv() => {
                // A pod being deleted: finish what is open, as vLLM does, within the limit.
                let limit = std::time::Duration::from_secs(cli.drain_seconds);
                tracing::info!(?limit, "SIGTERM: draining open requests");
                let drained = sim.drain(limit).await;
                tracing::info!(drained, "stopped");
            }
        }
        drop(sim);
        Ok(())
    })
}
